//! The metrics ab compares, listed once: each one's name (in JSON, on the command line and on
//! the wire), its words in a verdict, its unit, how a run gives it, and which way is better.

use crate::measure::Run;
use serde::{Deserialize, Serialize};

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub(crate) enum Metric {
    /// The server's CPU per request: its cgroup's, plus the server cores' irq and softirq when
    /// it had them to itself.
    CpuUsPerReq,
    /// The user part of the cgroup's CPU per request.
    UserUsPerReq,
    /// The system part of the cgroup's CPU per request.
    SystemUsPerReq,
    /// The server cores' irq and softirq outside the server's runtime, per request (only
    /// where a variant had the server cores to itself).
    SoftirqUsPerReq,
    Rps,
    P99Ms,
    MeanMs,
    BytesPerReq,
    RssPeakMib,
}

/// Which way a metric improves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Better {
    Lower,
    Higher,
}

impl Metric {
    /// Every metric compared between variants, in the order of the verdicts.
    pub(crate) const COMPARED: [Metric; 9] = [
        Metric::CpuUsPerReq,
        Metric::UserUsPerReq,
        Metric::SystemUsPerReq,
        Metric::SoftirqUsPerReq,
        Metric::Rps,
        Metric::P99Ms,
        Metric::MeanMs,
        Metric::BytesPerReq,
        Metric::RssPeakMib,
    ];

    /// The name in JSON and on the command line (`cpu_us_per_req`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Metric::CpuUsPerReq => "cpu_us_per_req",
            Metric::UserUsPerReq => "user_us_per_req",
            Metric::SystemUsPerReq => "system_us_per_req",
            Metric::SoftirqUsPerReq => "softirq_us_per_req",
            Metric::Rps => "rps",
            Metric::P99Ms => "p99_ms",
            Metric::MeanMs => "mean_ms",
            Metric::BytesPerReq => "bytes_per_req",
            Metric::RssPeakMib => "rss_peak_mib",
        }
    }

    /// What a verdict calls it.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Metric::CpuUsPerReq => "CPU per request",
            Metric::UserUsPerReq => "user CPU per request",
            Metric::SystemUsPerReq => "system CPU per request",
            Metric::SoftirqUsPerReq => "irq + softirq per request",
            Metric::Rps => "requests per second",
            Metric::P99Ms => "p99 latency",
            Metric::MeanMs => "mean latency",
            Metric::BytesPerReq => "bytes per request",
            Metric::RssPeakMib => "peak memory (anonymous RSS)",
        }
    }

    /// A chart's short label.
    pub(crate) fn short(self) -> &'static str {
        match self {
            Metric::CpuUsPerReq => "CPU/req",
            Metric::UserUsPerReq => "user/req",
            Metric::SystemUsPerReq => "system/req",
            Metric::SoftirqUsPerReq => "softirq/req",
            Metric::Rps => "req/s",
            Metric::P99Ms => "p99",
            Metric::MeanMs => "mean lat.",
            Metric::BytesPerReq => "bytes/req",
            Metric::RssPeakMib => "peak anon RSS",
        }
    }

    /// The words for a value above and below the baseline's.
    pub(crate) fn words(self) -> (&'static str, &'static str) {
        match self {
            Metric::Rps => ("more", "fewer"),
            Metric::BytesPerReq => ("more", "fewer"),
            Metric::P99Ms | Metric::MeanMs => ("higher", "lower"),
            _ => ("more", "less"),
        }
    }

    /// Read on the server host (none in endpoint mode).
    pub(crate) fn server_side(self) -> bool {
        matches!(
            self,
            Metric::CpuUsPerReq
                | Metric::UserUsPerReq
                | Metric::SystemUsPerReq
                | Metric::SoftirqUsPerReq
                | Metric::RssPeakMib
        )
    }

    pub(crate) fn better(self) -> Better {
        match self {
            Metric::Rps => Better::Higher,
            _ => Better::Lower,
        }
    }

    /// The metric's value in a run; `None` when that run did not measure it (endpoint mode,
    /// or softirq on shared server cores).
    pub(crate) fn of(self, r: &Run) -> Option<f64> {
        match self {
            Metric::CpuUsPerReq => r.cpu_us_per_req,
            Metric::UserUsPerReq => r.user_us_per_req,
            Metric::SystemUsPerReq => r.system_us_per_req,
            Metric::SoftirqUsPerReq => r.softirq_us_per_req,
            Metric::Rps => Some(r.rps),
            Metric::P99Ms => Some(r.p99_ms),
            Metric::MeanMs => Some(r.mean_ms),
            Metric::BytesPerReq => Some(r.bytes_per_req),
            Metric::RssPeakMib => r.rss_peak_mib,
        }
    }

    /// `of`, NaN when not measured (charts and medians skip those).
    pub(crate) fn value(self, r: &Run) -> f64 {
        self.of(r).unwrap_or(f64::NAN)
    }
}

impl std::fmt::Display for Metric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::Metric;

    /// The name on the command line, in JSON and in words are the same one.
    #[test]
    fn one_name_everywhere() {
        for m in Metric::COMPARED {
            let json = serde_json::to_string(&m).unwrap();
            assert_eq!(json, format!("\"{}\"", m.name()));
            let cli = <Metric as clap::ValueEnum>::from_str(m.name(), false).unwrap();
            assert_eq!(cli, m);
            assert_eq!(m.to_string(), m.name());
        }
    }
}

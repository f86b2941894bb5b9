//! Results: the merged recorder turned into the JSON document (schema in docs/LOAD.md), the
//! h2load-like text summary, and the HdrHistogram interval log.

use crate::record::{Errors, Recorder};
use hdrhistogram::Histogram;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Serialize)]
pub struct Percentiles {
    pub min: u64,
    pub mean: f64,
    pub stdev: f64,
    pub max: u64,
    pub p50: u64,
    pub p75: u64,
    pub p90: u64,
    pub p95: u64,
    pub p99: u64,
    pub p99_9: u64,
    pub p99_99: u64,
}

impl Percentiles {
    fn of(h: &Histogram<u64>) -> Option<Percentiles> {
        (!h.is_empty()).then(|| Percentiles {
            min: h.min(),
            mean: h.mean(),
            stdev: h.stdev(),
            max: h.max(),
            p50: h.value_at_quantile(0.5),
            p75: h.value_at_quantile(0.75),
            p90: h.value_at_quantile(0.9),
            p95: h.value_at_quantile(0.95),
            p99: h.value_at_quantile(0.99),
            p99_9: h.value_at_quantile(0.999),
            p99_99: h.value_at_quantile(0.9999),
        })
    }
}

#[derive(Debug, Serialize)]
pub struct Requests {
    pub started: u64,
    pub completed: u64,
    pub succeeded: u64,
    pub failed: u64,
}

#[derive(Debug, Serialize)]
pub struct Bytes {
    pub total: u64,
    pub headers: u64,
    pub body: u64,
}

#[derive(Debug, Serialize)]
pub struct ErrorCounts {
    #[serde(flatten)]
    pub transport: Errors,
    pub non_2xx: u64,
}

#[derive(Debug, Serialize)]
pub struct OpenLoop {
    pub rate: f64,
    pub sent: u64,
    pub late: u64,
    pub missed: u64,
}

#[derive(Debug, Serialize)]
pub struct Second {
    pub t: u64,
    pub requests: u64,
    pub errors: u64,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub tool: &'static str,
    pub version: &'static str,
    pub protocol: String,
    pub urls: Vec<String>,
    pub connections: usize,
    pub threads: usize,
    pub streams: usize,
    pub duration_s: f64,
    pub requests: Requests,
    pub rps: f64,
    pub bytes: Bytes,
    pub bytes_per_s: f64,
    pub status: BTreeMap<String, u64>,
    pub errors: ErrorCounts,
    pub latency_us: Option<Percentiles>,
    pub ttfb_us: Option<Percentiles>,
    pub latency_corrected_us: Option<Percentiles>,
    pub open_loop: Option<OpenLoop>,
    pub timeseries: Vec<Second>,
}

pub struct RunInfo {
    pub protocol: String,
    pub urls: Vec<String>,
    pub connections: usize,
    pub threads: usize,
    pub streams: usize,
    /// The measured window in seconds (warm-up excluded).
    pub duration_s: f64,
    pub rate: Option<f64>,
}

pub fn build(r: &Recorder, info: RunInfo) -> Report {
    let ok = r
        .status
        .iter()
        .filter(|(s, _)| (200..400).contains(*s))
        .map(|(_, n)| n)
        .sum::<u64>();
    let non_2xx = r.completed - ok;
    let failed = non_2xx + r.errors.total();
    let d = info.duration_s.max(1e-9);
    let total = r.head_bytes + r.body_bytes;
    let open_loop = info.rate.map(|rate| {
        let expected = (rate * info.duration_s).round() as u64;
        OpenLoop {
            rate,
            sent: r.started,
            late: r.late,
            missed: expected.saturating_sub(r.started),
        }
    });
    Report {
        tool: "loadterm",
        version: env!("CARGO_PKG_VERSION"),
        protocol: info.protocol,
        urls: info.urls,
        connections: info.connections,
        threads: info.threads,
        streams: info.streams,
        duration_s: info.duration_s,
        requests: Requests {
            started: r.started,
            completed: r.completed,
            succeeded: ok,
            failed,
        },
        rps: r.completed as f64 / d,
        bytes: Bytes {
            total,
            headers: r.head_bytes,
            body: r.body_bytes,
        },
        bytes_per_s: total as f64 / d,
        status: r.status.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        errors: ErrorCounts {
            transport: r.errors,
            non_2xx,
        },
        latency_us: Percentiles::of(&r.latency),
        ttfb_us: Percentiles::of(&r.ttfb),
        latency_corrected_us: if info.rate.is_some() {
            Percentiles::of(&r.corrected)
        } else {
            None
        },
        open_loop,
        timeseries: r
            .series
            .iter()
            .enumerate()
            .map(|(t, (q, e))| Second {
                t: t as u64,
                requests: *q,
                errors: *e,
            })
            .collect(),
    }
}

fn ms(us: f64) -> String {
    if us >= 1e6 {
        format!("{:.2}s", us / 1e6)
    } else if us >= 1e3 {
        format!("{:.2}ms", us / 1e3)
    } else {
        format!("{us:.0}us")
    }
}

fn size(b: f64) -> String {
    match b {
        b if b >= 1e9 => format!("{:.2}GB", b / 1e9),
        b if b >= 1e6 => format!("{:.2}MB", b / 1e6),
        b if b >= 1e3 => format!("{:.2}KB", b / 1e3),
        b => format!("{b:.0}B"),
    }
}

/// The h2load-like text summary.
pub fn text(r: &Report) -> String {
    let mut s = String::new();
    let e = &r.errors.transport;
    s += &format!(
        "finished in {:.2}s, {:.2} req/s, {}/s\n",
        r.duration_s,
        r.rps,
        size(r.bytes_per_s)
    );
    s += &format!(
        "requests: {} started, {} done, {} succeeded, {} failed\n",
        r.requests.started, r.requests.completed, r.requests.succeeded, r.requests.failed
    );
    let class = |c: u16| {
        r.status
            .iter()
            .filter(|(k, _)| k.parse::<u16>().is_ok_and(|v| v / 100 == c))
            .map(|(_, n)| n)
            .sum::<u64>()
    };
    s += &format!(
        "status codes: {} 2xx, {} 3xx, {} 4xx, {} 5xx\n",
        class(2),
        class(3),
        class(4),
        class(5)
    );
    s += &format!(
        "errors: {} connect, {} tls, {} timeout, {} reset, {} protocol; {} non-2xx/3xx responses\n",
        e.connect, e.tls, e.timeout, e.reset, e.protocol, r.errors.non_2xx
    );
    s += &format!(
        "traffic: {} total, {} headers, {} data\n",
        size(r.bytes.total as f64),
        size(r.bytes.headers as f64),
        size(r.bytes.body as f64)
    );
    if let Some(o) = &r.open_loop {
        s += &format!(
            "open loop: {:.1} req/s intended, {} sent, {} late (>1ms), {} missed\n",
            o.rate, o.sent, o.late, o.missed
        );
    }
    s += "                  min       mean        sd        max       p50       p90       p99     p99.9\n";
    for (name, p) in [
        ("time for request", &r.latency_us),
        ("  corrected (CO)", &r.latency_corrected_us),
        ("time to 1st byte", &r.ttfb_us),
    ] {
        if let Some(p) = p {
            s += &format!(
                "{name} {:>9} {:>10} {:>9} {:>10} {:>9} {:>9} {:>9} {:>9}\n",
                ms(p.min as f64),
                ms(p.mean),
                ms(p.stdev),
                ms(p.max as f64),
                ms(p.p50 as f64),
                ms(p.p90 as f64),
                ms(p.p99 as f64),
                ms(p.p99_9 as f64)
            );
        }
    }
    s
}

/// HdrHistogram interval log (one interval per second, request latency in microseconds).
pub fn write_hdr_log(r: &Recorder, path: &std::path::Path) -> anyhow::Result<()> {
    use hdrhistogram::serialization::interval_log::IntervalLogWriterBuilder;
    use hdrhistogram::serialization::V2DeflateSerializer;
    let mut out = Vec::new();
    let mut ser = V2DeflateSerializer::new();
    let start = std::time::SystemTime::now();
    let mut w = IntervalLogWriterBuilder::new()
        .with_base_time(start)
        .with_start_time(start)
        .add_comment("loadterm request latency, microseconds")
        .begin_log_with(&mut out, &mut ser)
        .map_err(|e| anyhow::anyhow!("interval log: {e:?}"))?;
    for (i, h) in r.intervals.iter().flatten().enumerate() {
        w.write_histogram(
            h,
            std::time::Duration::from_secs(i as u64),
            std::time::Duration::from_secs(1),
            None,
        )
        .map_err(|e| anyhow::anyhow!("interval log: {e:?}"))?;
    }
    drop(w);
    std::fs::write(path, out).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))
}

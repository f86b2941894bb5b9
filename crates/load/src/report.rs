//! Results: the merged recorder turned into the JSON document (schema in docs/LOAD.md), the
//! h2load-like text summary, and the HdrHistogram interval log.

use crate::record::{Errors, Recorder};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Serialize, Deserialize)]
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
    pub(crate) fn of(h: &Histogram<u64>) -> Option<Percentiles> {
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

#[derive(Debug, Serialize, Deserialize)]
pub struct Requests {
    pub started: u64,
    /// Requests the server did not process (HTTP/1.1: pipelined behind a response that
    /// announced the close; HTTP/2 and HTTP/3: above the GOAWAY's stream, or refused), sent
    /// again; counted once in `started`.
    #[serde(default)]
    pub retried: u64,
    pub completed: u64,
    pub succeeded: u64,
    pub failed: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Bytes {
    pub total: u64,
    pub headers: u64,
    pub body: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ErrorCounts {
    #[serde(flatten)]
    pub transport: Errors,
    pub non_2xx: u64,
    /// The first reason given for each kind of transport error that had one (connection
    /// attempts: `connect`, `tls`), e.g. `"tls": "tls: certificate verify failed for ..."`.
    /// Absent from reports of versions before it: empty.
    #[serde(default)]
    pub first: BTreeMap<String, String>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct OpenLoop {
    pub rate: f64,
    pub sent: u64,
    pub late: u64,
    pub missed: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Second {
    pub t: u64,
    pub requests: u64,
    pub errors: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Report {
    pub tool: String,
    pub version: String,
    /// What was run (its fields at the top level of the JSON).
    #[serde(flatten)]
    pub run: RunInfo,
    pub requests: Requests,
    pub rps: f64,
    pub bytes: Bytes,
    pub bytes_per_s: f64,
    pub status: BTreeMap<String, u64>,
    /// Interim (1xx) response heads received; not in `status`, which holds final statuses.
    pub interim: u64,
    pub errors: ErrorCounts,
    pub latency_us: Option<Percentiles>,
    pub ttfb_us: Option<Percentiles>,
    pub latency_corrected_us: Option<Percentiles>,
    pub open_loop: Option<OpenLoop>,
    pub timeseries: Vec<Second>,
    /// How many runs this report stands for: 1, or the number `loadterm merge` combined.
    pub runs: usize,
    /// The histograms behind the percentiles, so that runs can be merged without loss.
    pub histograms: Histograms,
    /// TLS handshakes of the whole run (warm-up included): full, resumed, 0-RTT accepted.
    #[serde(default)]
    pub handshakes: crate::record::Handshakes,
    /// With a `--rate` schedule: each step apart (none at a constant rate).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepReport>,
}

/// One step of a rate schedule (or piece of a ramp) as planned, for this process's share.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StepPlan {
    /// Seconds from the start of the measured window.
    pub start_s: f64,
    pub duration_s: f64,
    /// The intended rate at its start and end (equal but in a ramp).
    pub rate_from: f64,
    pub rate_to: f64,
    /// The sends it intended.
    pub intended: f64,
}

/// What one step came to: its requests are those whose intended send time fell in it.
#[derive(Debug, Serialize, Deserialize)]
pub struct StepReport {
    #[serde(flatten)]
    pub plan: StepPlan,
    pub requests: Requests,
    /// Completed per second of the step.
    pub rps: f64,
    pub open_loop: OpenLoop,
    pub latency_us: Option<Percentiles>,
    pub latency_corrected_us: Option<Percentiles>,
    pub histograms: StepHistograms,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct StepHistograms {
    pub latency_us: String,
    pub latency_corrected_us: String,
}

/// The steps of a run: each plan's figures from its record (`duration_s` cuts the last ones
/// short when the run was interrupted).
fn steps(r: &Recorder, plans: &[StepPlan], duration_s: f64) -> Vec<StepReport> {
    plans
        .iter()
        .zip(&r.steps)
        .map(|(p, st)| {
            let d = (duration_s - p.start_s).clamp(0.0, p.duration_s);
            let intended = if p.duration_s > 0.0 {
                p.intended * d / p.duration_s
            } else {
                0.0
            };
            StepReport {
                plan: *p,
                requests: Requests {
                    started: st.started,
                    retried: 0,
                    completed: st.completed,
                    succeeded: st.succeeded,
                    failed: st.completed - st.succeeded + st.errors,
                },
                rps: st.completed as f64 / d.max(1e-9),
                open_loop: OpenLoop {
                    rate: p.intended / p.duration_s.max(1e-9),
                    sent: st.started,
                    late: st.late,
                    missed: (intended.round() as u64).saturating_sub(st.on_schedule),
                },
                latency_us: Percentiles::of(&st.latency),
                latency_corrected_us: Percentiles::of(&st.corrected),
                histograms: StepHistograms {
                    latency_us: encode(&st.latency),
                    latency_corrected_us: encode(&st.corrected),
                },
            }
        })
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardInfo {
    pub index: usize,
    pub count: usize,
}

/// Wall-clock times (Unix seconds), which line runs from several processes up.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Clock {
    /// Second 0 of `timeseries` and of the `--hdr-log` intervals: when sending started.
    pub origin_unix_s: f64,
    /// When the measured window started (after the warm-up).
    pub window_start_unix_s: f64,
    /// `--start-at`, if given.
    pub start_at_unix_s: Option<f64>,
    /// How much later than `--start-at` the measured window started (0 when on time).
    pub late_s: f64,
}

/// HdrHistograms (microseconds) in the standard encoded form: the V2 encoding, deflate
/// compressed, in base64, as in HdrHistogram interval logs.
#[derive(Debug, Serialize, Deserialize)]
pub struct Histograms {
    pub latency_us: String,
    pub ttfb_us: String,
    pub latency_corrected_us: String,
}

/// A histogram in the standard encoded form.
pub(crate) fn encode(h: &Histogram<u64>) -> String {
    use base64::Engine;
    use hdrhistogram::serialization::{Serializer, V2DeflateSerializer};
    let mut bytes = Vec::new();
    V2DeflateSerializer::new()
        .serialize(h, &mut bytes)
        .expect("encoding a histogram into memory cannot fail");
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A histogram from the standard encoded form (any V2 encoding, compressed or not).
pub(crate) fn decode(s: &str) -> anyhow::Result<Histogram<u64>> {
    use anyhow::Context;
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(s.trim())
        .context("histogram: invalid base64")?;
    hdrhistogram::serialization::Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .map_err(|e| anyhow::anyhow!("histogram: cannot decode: {e:?}"))
}

/// What a report says about the run itself: how it was run, and its measured window.
#[derive(Debug, Serialize, Deserialize)]
pub struct RunInfo {
    /// The command line, shell-quoted (`load -n 1000 'http://…'`); none in a merged report.
    #[serde(default)]
    pub command: Option<String>,
    /// The protocol used: with ALPN, the one servers picked (`h1+h2` if both were).
    pub protocol: String,
    pub urls: Vec<String>,
    pub connections: usize,
    pub threads: usize,
    pub streams: usize,
    /// The measured window in seconds (warm-up excluded).
    pub duration_s: f64,
    /// The run was stopped by SIGINT before its end: the figures cover the window up to then.
    /// Absent from reports of versions before it: false.
    #[serde(default)]
    pub interrupted: bool,
    pub shard: Option<ShardInfo>,
    pub clock: Clock,
}

/// The report of a run: `rate` is the open loop's total rate (none in a closed loop), `plans`
/// the steps of its schedule (none at a constant rate).
pub fn build(r: &Recorder, run: RunInfo, rate: Option<f64>, plans: &[StepPlan]) -> Report {
    let ok = r
        .status
        .iter()
        .filter(|(s, _)| (200..400).contains(*s))
        .map(|(_, n)| n)
        .sum::<u64>();
    let non_2xx = r.completed - ok;
    let failed = non_2xx + r.errors.total();
    let d = run.duration_s.max(1e-9);
    let total = r.head_bytes + r.body_bytes;
    let open_loop = rate.map(|rate| {
        let expected = (rate * run.duration_s).round() as u64;
        OpenLoop {
            rate,
            sent: r.started,
            late: r.late,
            missed: expected.saturating_sub(r.on_schedule),
        }
    });
    let steps = steps(r, plans, run.duration_s);
    Report {
        tool: "loadterm".to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        run,
        requests: Requests {
            started: r.started,
            retried: r.retried,
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
        interim: r.interim,
        errors: ErrorCounts {
            transport: r.errors,
            non_2xx,
            first: r
                .first_reasons
                .iter()
                .map(|(k, (_, reason))| (k.name().to_owned(), reason.clone()))
                .collect(),
        },
        latency_us: Percentiles::of(&r.latency),
        ttfb_us: Percentiles::of(&r.ttfb),
        latency_corrected_us: if rate.is_some() {
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
        runs: 1,
        histograms: Histograms {
            latency_us: encode(&r.latency),
            ttfb_us: encode(&r.ttfb),
            latency_corrected_us: encode(&r.corrected),
        },
        handshakes: r.handshakes,
        steps,
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

/// h2load's name for a protocol (its "Application protocol:" line).
fn application_protocol(p: &str) -> String {
    p.split('+')
        .map(|p| match p {
            "h1" => "http/1.1",
            "alpn" => "none negotiated",
            p => p,
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The latency table's columns, the header right-aligned over its values.
const COLUMNS: [(&str, usize); 8] = [
    ("min", 9),
    ("mean", 10),
    ("sd", 9),
    ("max", 10),
    ("p50", 9),
    ("p90", 9),
    ("p99", 9),
    ("p99.9", 9),
];

/// One row of the latency table: a 16-character name, then the columns.
fn row(name: &str, cells: [String; 8]) -> String {
    let mut line = format!("{name:16}");
    for ((_, width), cell) in COLUMNS.iter().zip(cells) {
        line += &format!(" {cell:>width$}");
    }
    line + "\n"
}

/// The h2load-like text summary: what was run first, so that it can be pasted as it is.
pub fn text(r: &Report) -> String {
    let mut s = String::new();
    let e = &r.errors.transport;
    s += &match &r.run.command {
        Some(c) => format!("{} {}: {c}\n", r.tool, r.version),
        None => format!("{} {}\n", r.tool, r.version),
    };
    s += &format!(
        "Application protocol: {}\n",
        application_protocol(&r.run.protocol)
    );
    s += &format!(
        "finished in {:.2}s, {:.2} req/s, {}/s\n",
        r.run.duration_s,
        r.rps,
        size(r.bytes_per_s)
    );
    if r.run.interrupted {
        s += "interrupted (SIGINT): the figures cover the run up to then\n";
    }
    if let Some(sh) = &r.run.shard {
        s += &format!("shard {}/{}\n", sh.index, sh.count);
    }
    if r.runs > 1 {
        s += &format!("merged from {} runs\n", r.runs);
    }
    if r.run.clock.late_s > 0.001 {
        s += &format!(
            "started late: measured window began {:.3}s after --start-at\n",
            r.run.clock.late_s
        );
    }
    s += &format!(
        "requests: {} started, {} done, {} succeeded, {} failed\n",
        r.requests.started, r.requests.completed, r.requests.succeeded, r.requests.failed
    );
    if r.requests.retried > 0 {
        s += &format!(
            "retried: {} (not processed by the server: behind its close or GOAWAY, or refused)\n",
            r.requests.retried
        );
    }
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
    if r.interim > 0 {
        s += &format!(
            "interim responses: {} (1xx heads before a final response)\n",
            r.interim
        );
    }
    s += &format!(
        "errors: {} connect, {} tls, {} timeout, {} reset, {} protocol; {} non-2xx/3xx responses\n",
        e.connect, e.tls, e.timeout, e.reset, e.protocol, r.errors.non_2xx
    );
    for reason in r.errors.first.values() {
        s += &format!("  first {reason}\n");
    }
    let h = &r.handshakes;
    if h.full + h.resumed > 0 {
        s += &format!(
            "TLS handshakes: {} full, {} resumed, {} with 0-RTT data accepted\n",
            h.full, h.resumed, h.early_data
        );
    }
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
    s += &row("", COLUMNS.map(|(name, _)| name.to_owned()));
    for (name, p) in [
        ("time for request", &r.latency_us),
        ("  corrected (CO)", &r.latency_corrected_us),
        ("time to 1st byte", &r.ttfb_us),
    ] {
        if let Some(p) = p {
            s += &latency_row(name, p);
        }
    }
    for (k, st) in r.steps.iter().enumerate() {
        s += &step_text(k, r.steps.len(), st);
    }
    s
}

/// One step's table: what it intended and got, its latencies.
fn step_text(k: usize, of: usize, st: &StepReport) -> String {
    let p = &st.plan;
    let rate = if p.rate_from == p.rate_to {
        format!("{:.0} req/s", p.rate_from)
    } else {
        format!("{:.0}..{:.0} req/s", p.rate_from, p.rate_to)
    };
    let o = &st.open_loop;
    let mut s = format!(
        "\nstep {}/{of}: {rate} from {:.1}s for {:.1}s: {:.1} req/s done, {} succeeded, {} failed, {} late, {} missed\n",
        k + 1,
        p.start_s,
        p.duration_s,
        st.rps,
        st.requests.succeeded,
        st.requests.failed,
        o.late,
        o.missed,
    );
    s += &row("", COLUMNS.map(|(name, _)| name.to_owned()));
    for (name, p) in [
        ("time for request", &st.latency_us),
        ("  corrected (CO)", &st.latency_corrected_us),
    ] {
        if let Some(p) = p {
            s += &latency_row(name, p);
        }
    }
    s
}

fn latency_row(name: &str, p: &Percentiles) -> String {
    row(
        name,
        [
            ms(p.min as f64),
            ms(p.mean),
            ms(p.stdev),
            ms(p.max as f64),
            ms(p.p50 as f64),
            ms(p.p90 as f64),
            ms(p.p99 as f64),
            ms(p.p99_9 as f64),
        ],
    )
}

/// HdrHistogram interval log (one interval per second, request latency in microseconds);
/// `start` is the wall-clock time of second 0, so that logs of several runs can be aligned.
pub fn hdr_log(r: &Recorder, start: std::time::SystemTime) -> anyhow::Result<Vec<u8>> {
    use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
    use hdrhistogram::serialization::V2DeflateSerializer;
    let mut out = Vec::new();
    let mut ser = V2DeflateSerializer::new();
    let mut w = IntervalLogWriterBuilder::new()
        .with_base_time(start)
        .with_start_time(start)
        .add_comment("loadterm request latency, microseconds")
        .begin_log_with(&mut out, &mut ser)
        .map_err(|e| anyhow::anyhow!("interval log: {e:?}"))?;
    // A schedule's steps are told apart by tag (`step1`, ...), as HdrHistogram's tools read
    // tagged intervals as separate series.
    let tags: Vec<String> = (1..=r.steps.len()).map(|k| format!("step{k}")).collect();
    for ((sec, step), h) in r.intervals.iter().flatten() {
        let tag = tags.get(*step).and_then(|t| Tag::new(t));
        w.write_histogram(
            h,
            std::time::Duration::from_secs(*sec as u64),
            std::time::Duration::from_secs(1),
            tag,
        )
        .map_err(|e| anyhow::anyhow!("interval log: {e:?}"))?;
    }
    drop(w);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{ConnectFailure, ErrorKind, Sample};
    use std::time::{Duration, Instant};

    fn info() -> RunInfo {
        RunInfo {
            command: Some("load -n 15 'http://127.0.0.1/?s=1k&t=5'".into()),
            protocol: "h1".into(),
            urls: vec!["http://127.0.0.1/".into()],
            connections: 2,
            threads: 1,
            streams: 1,
            duration_s: 2.0,
            shard: None,
            clock: Clock {
                origin_unix_s: 1e9,
                window_start_unix_s: 1e9,
                start_at_unix_s: None,
                late_s: 0.0,
            },
            interrupted: false,
        }
    }

    /// 15 requests sent, 6 answered (3 × 200, 304, 404, 500), 2 lost to resets.
    fn recorder() -> Recorder {
        let t0 = Instant::now();
        let mut r = Recorder::new(t0, t0, None, false);
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        for i in 0..15 {
            r.sent(Some(at(i * 100)), at(i * 100));
        }
        for (i, status) in [200, 200, 200, 304, 404, 500].into_iter().enumerate() {
            r.done(&Sample {
                intended: Some(at(i as u64 * 100)),
                sent: at(i as u64 * 100),
                first_byte: at(i as u64 * 100 + 5),
                done: at(i as u64 * 100 + 10),
                status,
                head_bytes: 100,
                body_bytes: 1000,
            });
        }
        // Two answered after a 100 Continue.
        r.interim(at(2));
        r.interim(at(102));
        r.error(ErrorKind::Reset, at(1500));
        r.error(ErrorKind::Reset, at(1600));
        r.reason(
            &ConnectFailure::new(ErrorKind::Connect, "refused"),
            at(1700),
        );
        r
    }

    #[test]
    fn counts_and_open_loop() {
        let rep = build(&recorder(), info(), Some(10.0), &[]);
        let q = &rep.requests;
        assert_eq!(
            (q.started, q.completed, q.succeeded, q.failed),
            (15, 6, 4, 4)
        );
        assert_eq!((rep.errors.non_2xx, rep.errors.transport.reset), (2, 2));
        assert_eq!(
            (rep.rps, rep.bytes.total, rep.bytes_per_s),
            (3.0, 6600, 3300.0)
        );
        // 10 req/s for 2 s: 20 intended, 15 sent, so 5 missed.
        let ol = rep.open_loop.as_ref().unwrap();
        assert_eq!((ol.sent, ol.late, ol.missed), (15, 0, 5));
        assert_eq!(rep.latency_corrected_us.as_ref().unwrap().max / 1000, 10);
        assert_eq!(rep.timeseries.len(), 2);
        assert_eq!(
            (rep.timeseries[1].requests, rep.timeseries[1].errors),
            (0, 2)
        );
        let text = text(&rep);
        assert!(
            text.contains("status codes: 3 2xx, 1 3xx, 1 4xx, 1 5xx\n"),
            "{text}"
        );
        assert!(
            text.contains("open loop: 10.0 req/s intended, 15 sent, 0 late (>1ms), 5 missed\n"),
            "{text}"
        );
        assert!(text.contains("  corrected (CO)"), "{text}");
        assert!(text.contains("\n  first connect: refused\n"), "{text}");
        assert_eq!(rep.errors.first["connect"], "connect: refused");
        // Interim heads are counted apart from the final statuses.
        assert_eq!(rep.interim, 2);
        assert_eq!(rep.status.values().sum::<u64>(), 6);
        assert!(
            text.contains("interim responses: 2 (1xx heads before a final response)\n"),
            "{text}"
        );
        let none = Recorder::new(Instant::now(), Instant::now(), None, false);
        assert!(!super::text(&build(&none, info(), None, &[])).contains("interim"));
        // Sending more than the rate asked for is not a negative miss.
        let rep = build(&recorder(), info(), Some(5.0), &[]);
        assert_eq!(rep.open_loop.unwrap().missed, 0);
    }

    #[test]
    fn summary_starts_with_what_was_run_and_lines_up() {
        let text = text(&build(&recorder(), info(), None, &[]));
        let mut lines = text.lines();
        assert_eq!(
            lines.next(),
            Some(concat!(
                "loadterm ",
                env!("CARGO_PKG_VERSION"),
                ": load -n 15 'http://127.0.0.1/?s=1k&t=5'"
            ))
        );
        assert_eq!(lines.next(), Some("Application protocol: http/1.1"));
        // Each header ends where the values under it end.
        let header = text
            .lines()
            .find(|l| l.trim_start().starts_with("min"))
            .unwrap();
        let values = text.lines().find(|l| l.starts_with("time for")).unwrap();
        assert_eq!(header.len(), values.len(), "{header}\n{values}");
        for (name, _) in COLUMNS {
            let end = header.find(name).unwrap() + name.len();
            assert_ne!(&values[end - 1..end], " ", "{name}:\n{header}\n{values}");
            assert!(
                end == values.len() || &values[end..end + 1] == " ",
                "{name}:\n{header}\n{values}"
            );
        }
        assert_eq!(application_protocol("h1+h2"), "http/1.1, h2");
        assert_eq!(application_protocol("alpn"), "none negotiated");
    }

    #[test]
    fn closed_loop_has_no_open_loop_figures() {
        let rep = build(&recorder(), info(), None, &[]);
        assert!(rep.open_loop.is_none() && rep.latency_corrected_us.is_none());
        let text = text(&rep);
        assert!(
            !text.contains("open loop") && !text.contains("corrected"),
            "{text}"
        );
    }

    #[test]
    fn steps_are_reported_apart_by_intended_time() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut r = Recorder::new(t0, t0, None, true).with_steps(vec![t0, at(1000)]);
        // Step 1 at 10/s, 5 ms answers; step 2 at 20/s, 50 ms: one due at 990 ms but sent
        // late, at 1010 ms, counts in step 1 (it was due then), corrected from 990 ms.
        let mut send = |due: u64, sent: u64, lat: u64| {
            r.sent(Some(at(due)), at(sent));
            r.done(&Sample {
                intended: Some(at(due)),
                sent: at(sent),
                first_byte: at(sent + lat),
                done: at(sent + lat),
                status: 200,
                head_bytes: 0,
                body_bytes: 0,
            });
        };
        for k in 0..9 {
            send(k * 100, k * 100, 5);
        }
        send(990, 1010, 5);
        for k in 0..19 {
            send(1000 + k * 50, 1000 + k * 50, 50);
        }
        let plans = [
            StepPlan {
                start_s: 0.0,
                duration_s: 1.0,
                rate_from: 10.0,
                rate_to: 10.0,
                intended: 10.0,
            },
            StepPlan {
                start_s: 1.0,
                duration_s: 1.0,
                rate_from: 20.0,
                rate_to: 20.0,
                intended: 20.0,
            },
        ];
        let rep = build(&r, info(), Some(15.0), &plans);
        let [one, two] = &rep.steps[..] else {
            panic!("two steps expected: {:?}", rep.steps);
        };
        assert_eq!(
            (
                one.requests.completed,
                one.open_loop.late,
                one.open_loop.missed
            ),
            (10, 1, 0)
        );
        assert_eq!((two.requests.completed, two.open_loop.missed), (19, 1));
        assert_eq!(one.latency_us.as_ref().unwrap().max / 1000, 5);
        assert_eq!(one.latency_corrected_us.as_ref().unwrap().max / 1000, 25);
        assert_eq!(two.latency_us.as_ref().unwrap().p50 / 1000, 50);
        let text = text(&rep);
        assert!(
            text.contains("\nstep 2/2: 20 req/s from 1.0s for 1.0s: 19.0 req/s done"),
            "{text}"
        );
        // The interval log tags each step's intervals.
        let log = String::from_utf8(hdr_log(&r, std::time::SystemTime::now()).unwrap()).unwrap();
        assert!(
            log.contains("Tag=step1,") && log.contains("Tag=step2,"),
            "{log}"
        );
        let json = serde_json::to_value(&rep).unwrap();
        assert_eq!(json["steps"][1]["rate_from"], 20.0);
        assert!(serde_json::to_value(build(&r, info(), None, &[]))
            .unwrap()
            .get("steps")
            .is_none());
    }

    #[test]
    fn units() {
        assert_eq!(ms(999.0), "999us");
        assert_eq!(ms(1000.0), "1.00ms");
        assert_eq!(ms(2_500_000.0), "2.50s");
        assert_eq!(size(999.0), "999B");
        assert_eq!(size(1500.0), "1.50KB");
        assert_eq!(size(2.5e6), "2.50MB");
        assert_eq!(size(2e9), "2.00GB");
    }
}

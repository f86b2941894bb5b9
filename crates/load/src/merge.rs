//! `loadterm merge`: the reports of several runs (the shards of one run, or runs on several
//! machines) combined into one report, and their HdrHistogram interval logs into one log.
//! Sans-I/O: reports in, report out; log bytes in, log bytes out.
//!
//! Nothing is averaged: counts are summed and percentiles come from the sum of the recorded
//! histograms, so they are the percentiles of the union of all the runs' samples.

use crate::record::Errors;
use crate::report::{self, Clock, ErrorCounts, Histograms, OpenLoop, Percentiles, Report, RunInfo};
use anyhow::{anyhow, bail, Context, Result};
use hdrhistogram::Histogram;
use std::collections::BTreeMap;

/// Runs that differ in what they measured, named by the caller's labels (file names).
#[derive(Debug, thiserror::Error)]
#[error("cannot merge {this} with {first}: {what} (--force merges them anyway)")]
pub struct Mismatch {
    pub first: String,
    pub this: String,
    pub what: String,
}

/// Where an interval of `width_s` seconds starting `offset_s` after the earliest run's origin
/// lands: the nearest whole interval. Runs started with the same `--start-at` share their
/// origin, so their seconds line up exactly; others are aligned to the nearest second.
fn slot(offset_s: f64, width_s: f64) -> u64 {
    (offset_s / width_s).round().max(0.0) as u64
}

/// Why `b` cannot be merged with `a`, if it cannot.
fn mismatch(a: &Report, b: &Report) -> Option<String> {
    if a.run.urls != b.run.urls {
        return Some(format!("URLs {:?} vs {:?}", b.run.urls, a.run.urls));
    }
    if a.run.protocol != b.run.protocol {
        return Some(format!("protocol {} vs {}", b.run.protocol, a.run.protocol));
    }
    if a.run.streams != b.run.streams {
        return Some(format!("-m {} vs {}", b.run.streams, a.run.streams));
    }
    if a.open_loop.is_some() != b.open_loop.is_some() {
        return Some("open loop (--rate) vs closed loop".into());
    }
    if let Some(s) = a.run.shard.filter(|s| Some(*s) == b.run.shard) {
        return Some(format!("both are shard {}/{}", s.index, s.count));
    }
    None
}

fn decode(name: &str, what: &str, s: &str) -> Result<Histogram<u64>> {
    report::decode(s).with_context(|| format!("{name}: {what}"))
}

fn add(sum: &mut Histogram<u64>, h: &Histogram<u64>, name: &str) -> Result<()> {
    sum.add(h)
        .map_err(|e| anyhow!("{name}: histograms of different ranges: {e:?}"))
}

/// The runs' reports, each with a label for errors, merged into one. Different URLs,
/// protocols, `-m`, loop modes, or the same shard twice are a `Mismatch` unless `force`.
pub fn reports(runs: &[(String, Report)], force: bool) -> Result<Report> {
    let Some((first_name, first)) = runs.first() else {
        bail!("nothing to merge");
    };
    if !force {
        for (name, r) in &runs[1..] {
            if let Some(what) = mismatch(first, r) {
                return Err(Mismatch {
                    first: first_name.clone(),
                    this: name.clone(),
                    what,
                }
                .into());
            }
        }
    }
    let (urls, protocols) = urls_and_protocols(runs);
    let [latency, ttfb, corrected] = merged_histograms(runs)?;
    let all = || runs.iter().map(|(_, r)| r);
    let sum = |f: &dyn Fn(&Report) -> u64| all().map(f).sum::<u64>();
    // The merged window spans all the runs' windows, on the wall clock.
    let start = all()
        .map(|r| r.run.clock.window_start_unix_s)
        .fold(f64::INFINITY, f64::min);
    let end = all()
        .map(|r| r.run.clock.window_start_unix_s + r.run.duration_s)
        .fold(f64::NEG_INFINITY, f64::max);
    let duration_s = end - start;
    let d = duration_s.max(1e-9);
    let origin = all()
        .map(|r| r.run.clock.origin_unix_s)
        .fold(f64::INFINITY, f64::min);
    let timeseries = merged_timeseries(runs, origin);
    let (status, transport, first_reasons) = merged_outcomes(runs);
    let open_loop = merged_open_loop(runs);
    let start_at = first.run.clock.start_at_unix_s;
    let bytes_total = sum(&|r| r.bytes.total);
    let completed = sum(&|r| r.requests.completed);
    Ok(Report {
        tool: "loadterm".to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        run: RunInfo {
            command: None,
            protocol: protocols.join("+"),
            urls,
            connections: all().map(|r| r.run.connections).sum(),
            threads: all().map(|r| r.run.threads).sum(),
            streams: all().map(|r| r.run.streams).max().unwrap_or(1),
            duration_s,
            interrupted: all().any(|r| r.run.interrupted),
            shard: None,
            clock: Clock {
                origin_unix_s: origin,
                window_start_unix_s: start,
                start_at_unix_s: all()
                    .all(|r| r.run.clock.start_at_unix_s == start_at)
                    .then_some(start_at)
                    .flatten(),
                late_s: all().map(|r| r.run.clock.late_s).fold(0.0, f64::max),
            },
        },
        requests: report::Requests {
            started: sum(&|r| r.requests.started),
            retried: sum(&|r| r.requests.retried),
            completed,
            succeeded: sum(&|r| r.requests.succeeded),
            failed: sum(&|r| r.requests.failed),
        },
        rps: completed as f64 / d,
        bytes: report::Bytes {
            total: bytes_total,
            headers: sum(&|r| r.bytes.headers),
            body: sum(&|r| r.bytes.body),
        },
        bytes_per_s: bytes_total as f64 / d,
        status,
        interim: sum(&|r| r.interim),
        errors: ErrorCounts {
            transport,
            non_2xx: sum(&|r| r.errors.non_2xx),
            first: first_reasons,
        },
        latency_us: Percentiles::of(&latency),
        ttfb_us: Percentiles::of(&ttfb),
        latency_corrected_us: if open_loop.is_some() {
            Percentiles::of(&corrected)
        } else {
            None
        },
        open_loop,
        timeseries,
        runs: all().map(|r| r.runs).sum(),
        histograms: Histograms {
            latency_us: report::encode(&latency),
            ttfb_us: report::encode(&ttfb),
            latency_corrected_us: report::encode(&corrected),
        },
        handshakes: all().fold(Default::default(), |mut h: crate::record::Handshakes, r| {
            h.add(&r.handshakes);
            h
        }),
        steps: merged_steps(runs)?,
    })
}

/// The steps of runs of the same schedule (shards), summed step by step: counts added,
/// percentiles from the summed histograms. Runs whose steps differ have none merged.
fn merged_steps(runs: &[(String, Report)]) -> Result<Vec<report::StepReport>> {
    let (_, first) = &runs[0];
    let same = |a: &report::StepReport, b: &report::StepReport| {
        (a.plan.start_s, a.plan.duration_s) == (b.plan.start_s, b.plan.duration_s)
    };
    if runs.iter().any(|(_, r)| {
        r.steps.len() != first.steps.len()
            || r.steps.iter().zip(&first.steps).any(|(a, b)| !same(a, b))
    }) {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for k in 0..first.steps.len() {
        let mut latency = Histogram::<u64>::new(3).expect("valid histogram");
        let mut corrected = latency.clone();
        let mut step = report::StepReport {
            plan: report::StepPlan {
                intended: 0.0,
                rate_from: 0.0,
                rate_to: 0.0,
                ..first.steps[k].plan
            },
            requests: report::Requests {
                started: 0,
                retried: 0,
                completed: 0,
                succeeded: 0,
                failed: 0,
            },
            rps: 0.0,
            open_loop: OpenLoop {
                rate: 0.0,
                sent: 0,
                late: 0,
                missed: 0,
            },
            latency_us: None,
            latency_corrected_us: None,
            histograms: report::StepHistograms {
                latency_us: String::new(),
                latency_corrected_us: String::new(),
            },
        };
        for (name, r) in runs {
            let s = &r.steps[k];
            add(
                &mut latency,
                &decode(name, "step latency", &s.histograms.latency_us)?,
                name,
            )?;
            add(
                &mut corrected,
                &decode(
                    name,
                    "step corrected latency",
                    &s.histograms.latency_corrected_us,
                )?,
                name,
            )?;
            let (p, q, o) = (&mut step.plan, &mut step.requests, &mut step.open_loop);
            p.intended += s.plan.intended;
            p.rate_from += s.plan.rate_from;
            p.rate_to += s.plan.rate_to;
            q.started += s.requests.started;
            q.completed += s.requests.completed;
            q.succeeded += s.requests.succeeded;
            q.failed += s.requests.failed;
            step.rps += s.rps;
            o.rate += s.open_loop.rate;
            o.sent += s.open_loop.sent;
            o.late += s.open_loop.late;
            o.missed += s.open_loop.missed;
        }
        step.latency_us = Percentiles::of(&latency);
        step.latency_corrected_us = Percentiles::of(&corrected);
        step.histograms = report::StepHistograms {
            latency_us: report::encode(&latency),
            latency_corrected_us: report::encode(&corrected),
        };
        out.push(step);
    }
    Ok(out)
}

/// Every URL and every protocol of the runs, each once, in the order they first appear.
fn urls_and_protocols(runs: &[(String, Report)]) -> (Vec<String>, Vec<&str>) {
    let mut urls: Vec<String> = Vec::new();
    let mut protocols: Vec<&str> = Vec::new();
    for (_, r) in runs {
        for u in &r.run.urls {
            if !urls.contains(u) {
                urls.push(u.clone());
            }
        }
        if !protocols.contains(&r.run.protocol.as_str()) {
            protocols.push(&r.run.protocol);
        }
    }
    (urls, protocols)
}

/// A report's encoded histograms, each named for errors: latency, TTFB, corrected latency.
fn encoded_histograms(r: &Report) -> [(&'static str, &str); 3] {
    [
        ("latency", &r.histograms.latency_us),
        ("ttfb", &r.histograms.ttfb_us),
        ("corrected latency", &r.histograms.latency_corrected_us),
    ]
}

/// The latency, TTFB and corrected-latency histograms, each summed over the (non-empty) runs.
fn merged_histograms(runs: &[(String, Report)]) -> Result<[Histogram<u64>; 3]> {
    let (name0, first) = &runs[0];
    let [latency, ttfb, corrected] =
        encoded_histograms(first).map(|(what, encoded)| decode(name0, what, encoded));
    let mut sums = [latency?, ttfb?, corrected?];
    for (name, r) in &runs[1..] {
        for (sum, (what, encoded)) in sums.iter_mut().zip(encoded_histograms(r)) {
            add(sum, &decode(name, what, encoded)?, name)?;
        }
    }
    Ok(sums)
}

/// The runs' seconds summed, each run's placed by its clock's origin against the earliest.
fn merged_timeseries(runs: &[(String, Report)], origin: f64) -> Vec<report::Second> {
    let mut timeseries: Vec<report::Second> = Vec::new();
    for (_, r) in runs {
        let offset = slot(r.run.clock.origin_unix_s - origin, 1.0);
        for s in &r.timeseries {
            let t = (s.t + offset) as usize;
            while timeseries.len() <= t {
                timeseries.push(report::Second {
                    t: timeseries.len() as u64,
                    requests: 0,
                    errors: 0,
                });
            }
            timeseries[t].requests += s.requests;
            timeseries[t].errors += s.errors;
        }
    }
    timeseries
}

/// The responses by status and the transport errors, summed, and the first reason given for
/// each kind of error.
fn merged_outcomes(
    runs: &[(String, Report)],
) -> (BTreeMap<String, u64>, Errors, BTreeMap<String, String>) {
    let mut status = BTreeMap::new();
    let mut transport = Errors::default();
    // Reports carry no time for their reasons: the first run (in the caller's order) that
    // gave one for a kind of error speaks for it.
    let mut first_reasons = BTreeMap::new();
    for (_, r) in runs {
        for (k, v) in &r.status {
            *status.entry(k.clone()).or_default() += v;
        }
        transport.add(&r.errors.transport);
        for (kind, reason) in &r.errors.first {
            first_reasons
                .entry(kind.clone())
                .or_insert_with(|| reason.clone());
        }
    }
    (status, transport, first_reasons)
}

/// The open loops of the runs that had one, as one: rates and counts summed.
fn merged_open_loop(runs: &[(String, Report)]) -> Option<OpenLoop> {
    let open: Vec<&OpenLoop> = runs
        .iter()
        .filter_map(|(_, r)| r.open_loop.as_ref())
        .collect();
    (!open.is_empty()).then(|| OpenLoop {
        rate: open.iter().map(|o| o.rate).sum(),
        sent: open.iter().map(|o| o.sent).sum(),
        late: open.iter().map(|o| o.late).sum(),
        missed: open.iter().map(|o| o.missed).sum(),
    })
}

/// One interval of a log, on the wall clock, its histogram still encoded (decoded ones are
/// large: a 10-minute log of 4 shards decoded at once took over 500 MB).
struct Interval<'a> {
    start_s: f64,
    width_s: f64,
    tag: Option<String>,
    encoded: &'a str,
}

/// The intervals of one log, their timestamps made absolute (a log's timestamps are relative
/// to its BaseTime, or its StartTime without one, or absolute without either).
fn read_log<'a>(name: &str, log: &'a [u8]) -> Result<Vec<Interval<'a>>> {
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
    let (mut base, mut start) = (None, None);
    let mut out = Vec::new();
    for entry in IntervalLogIterator::new(log) {
        match entry.map_err(|e| anyhow!("{name}: not an HdrHistogram interval log: {e:?}"))? {
            LogEntry::BaseTime(t) => base = Some(t.as_secs_f64()),
            LogEntry::StartTime(t) => start = Some(t.as_secs_f64()),
            LogEntry::Interval(i) => out.push(Interval {
                start_s: base.or(start).unwrap_or(0.0) + i.start_timestamp().as_secs_f64(),
                width_s: i.duration().as_secs_f64(),
                tag: i.tag().map(|t| t.as_str().to_owned()),
                encoded: i.encoded_histogram(),
            }),
        }
    }
    Ok(out)
}

/// Interval logs (each with a label for errors) merged into one: the histograms of intervals
/// that fall in the same slot of the wall clock (and have the same width and tag) are added.
pub fn interval_logs(logs: &[(String, &[u8])]) -> Result<Vec<u8>> {
    use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
    use hdrhistogram::serialization::V2DeflateSerializer;
    use std::collections::btree_map::Entry;
    let mut all = Vec::new();
    for (name, log) in logs {
        let intervals = read_log(name, log)?;
        all.extend(intervals.into_iter().map(|i| (name, i)));
    }
    let base = all
        .iter()
        .map(|(_, i)| i.start_s)
        .fold(f64::INFINITY, f64::min);
    // Keyed by (slot, width in µs, tag), so that the output is in time order. The sums grow
    // only as far as the values they hold (auto-resizing), not to the encoded range.
    let mut merged: BTreeMap<(u64, u64, Option<String>), Histogram<u64>> = BTreeMap::new();
    for (name, i) in all {
        let width_us = (i.width_s * 1e6).round() as u64;
        if width_us == 0 {
            bail!("{name}: an interval of zero length");
        }
        let h = decode(name, "interval histogram", i.encoded)?;
        let key = (slot(i.start_s - base, i.width_s), width_us, i.tag);
        let sum = match merged.entry(key) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => e.insert(
                Histogram::new(h.sigfig())
                    .map_err(|e| anyhow!("{name}: interval histogram: {e:?}"))?,
            ),
        };
        add(sum, &h, name)?;
    }
    let mut out = Vec::new();
    let mut ser = V2DeflateSerializer::new();
    let base_time = if base.is_finite() {
        std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(base)
    } else {
        std::time::UNIX_EPOCH
    };
    let mut w = IntervalLogWriterBuilder::new()
        .with_base_time(base_time)
        .with_start_time(base_time)
        .add_comment(&format!(
            "loadterm merge of {} interval logs, request latency, microseconds",
            logs.len()
        ))
        .begin_log_with(&mut out, &mut ser)
        .map_err(|e| anyhow!("interval log: {e:?}"))?;
    for ((slot, width_us, tag), h) in &merged {
        let width = std::time::Duration::from_micros(*width_us);
        let tag = tag.as_deref().and_then(Tag::new);
        w.write_histogram(h, width * (*slot as u32), width, tag)
            .map_err(|e| anyhow!("interval log: {e:?}"))?;
    }
    drop(w);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Recorder, Sample};
    use crate::report::{build, ShardInfo};
    use std::time::{Duration, Instant, SystemTime};

    /// A small deterministic generator, so that the samples are spread like real latencies.
    fn lcg(seed: &mut u64) -> u64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *seed >> 33
    }

    /// Run `i` of 4: `n` requests with its own latency spread, completed over 3 seconds from
    /// an origin `shift_s` after 1e9 (Unix seconds); `union` records the same latencies.
    fn run(i: usize, n: u64, shift_s: f64, union: &mut Histogram<u64>) -> Report {
        let t0 = Instant::now();
        let mut r = Recorder::new(t0, t0, None, false);
        let mut seed = i as u64 + 1;
        for k in 0..n {
            // Long tails in some runs only: merged percentiles are not any run's.
            let lat_us = 100 + lcg(&mut seed) % (1_000 * (i as u64 + 1).pow(3));
            let done = t0 + Duration::from_millis(k * 3000 / n) + Duration::from_micros(lat_us);
            let sent = done - Duration::from_micros(lat_us);
            r.sent(None, sent);
            r.done(&Sample {
                intended: None,
                sent,
                first_byte: sent + Duration::from_micros(lat_us / 2),
                done,
                status: if k % 10 == 0 { 404 } else { 200 },
                head_bytes: 50,
                body_bytes: 1000,
            });
            union.record(lat_us).unwrap();
        }
        build(
            &r,
            RunInfo {
                command: None,
                protocol: "h1".into(),
                urls: vec!["http://127.0.0.1:1/".into()],
                connections: 2,
                threads: 1,
                streams: 1,
                duration_s: 3.0,
                shard: Some(ShardInfo { index: i, count: 4 }),
                clock: Clock {
                    origin_unix_s: 1e9 + shift_s,
                    window_start_unix_s: 1e9 + shift_s,
                    start_at_unix_s: Some(1e9),
                    late_s: shift_s,
                },
                interrupted: false,
            },
            None,
            &[],
        )
    }

    /// A histogram's content, whatever its range: (value, count) of each recorded bucket.
    fn recorded(h: &Histogram<u64>) -> Vec<(u64, u64)> {
        h.iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
            .collect()
    }

    fn union() -> Histogram<u64> {
        Histogram::new_with_bounds(1, 3_600_000_000, 3).unwrap()
    }

    #[test]
    fn merged_percentiles_are_those_of_the_union() {
        let mut all = union();
        let runs: Vec<(String, Report)> = (0..4)
            .map(|i| (format!("r{i}"), run(i, 1000 + i as u64 * 7, 0.0, &mut all)))
            .collect();
        let m = reports(&runs, false).unwrap();
        let want = Percentiles::of(&all).unwrap();
        let got = m.latency_us.as_ref().unwrap();
        assert_eq!(
            (got.min, got.p50, got.p90, got.p99, got.p99_9, got.p99_99, got.max),
            (
                want.min,
                want.p50,
                want.p90,
                want.p99,
                want.p99_9,
                want.p99_99,
                want.max
            )
        );
        assert_eq!((got.mean, got.stdev), (want.mean, want.stdev));
        // The merged histogram itself is the union's, count for count.
        assert_eq!(report::decode(&m.histograms.latency_us).unwrap(), all);
        // And not what averaging the runs' p99 would say.
        let avg = runs
            .iter()
            .map(|(_, r)| r.latency_us.as_ref().unwrap().p99)
            .sum::<u64>()
            / 4;
        assert_ne!(avg, got.p99);
    }

    #[test]
    fn counts_are_summed_and_seconds_aligned_on_the_wall_clock() {
        let mut all = union();
        let mut runs: Vec<(String, Report)> = (0..4)
            .map(|i| (format!("r{i}"), run(i, 100, 0.0, &mut all)))
            .collect();
        // The last shard started its window 2 s late (its second 0 is the others' second 2).
        runs[3].1 = run(3, 100, 2.0, &mut union());
        // The first run giving a reason for a kind of error speaks for it.
        let first = |r: &mut Report, kind: &str, why: &str| {
            r.errors.first.insert(kind.into(), why.into());
        };
        first(&mut runs[1].1, "tls", "tls: from r1");
        first(&mut runs[2].1, "tls", "tls: from r2");
        first(&mut runs[2].1, "connect", "connect: from r2");
        let m = reports(&runs, false).unwrap();
        let reasons: Vec<_> = m
            .errors
            .first
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        assert_eq!(reasons, ["connect=connect: from r2", "tls=tls: from r1"]);
        assert_eq!((m.runs, m.run.connections, m.run.threads), (4, 8, 4));
        assert_eq!(m.requests.completed, 400);
        assert_eq!(m.requests.started, 400);
        assert_eq!((m.status["200"], m.status["404"]), (360, 40));
        assert_eq!(m.errors.non_2xx, 40);
        assert_eq!(m.bytes.total, 400 * 1050);
        // The window spans 1e9 .. 1e9 + 2 + 3.
        assert!(
            (m.run.duration_s - 5.0).abs() < 1e-6,
            "{}",
            m.run.duration_s
        );
        assert!((m.rps - 80.0).abs() < 1e-6);
        let per_s: Vec<u64> = m.timeseries.iter().map(|s| s.requests).collect();
        let mut want = vec![0; 6];
        for (i, (_, r)) in runs.iter().enumerate() {
            let offset = if i == 3 { 2 } else { 0 };
            for s in &r.timeseries {
                want[s.t as usize + offset] += s.requests;
            }
        }
        while want.last() == Some(&0) {
            want.pop();
        }
        assert_eq!(per_s, want);
        assert_eq!(m.run.clock.late_s, 2.0);
        assert_eq!(m.run.clock.start_at_unix_s, Some(1e9));
        assert!(m.run.shard.is_none());
        assert!(report::text(&m).contains("merged from 4 runs\n"));
        // A merge of merges counts its runs.
        let again = reports(&[("a".into(), m), ("b".into(), runs.remove(0).1)], true).unwrap();
        assert_eq!(again.runs, 5);
    }

    #[test]
    fn different_runs_are_refused_unless_forced() {
        let mut h = union();
        let a = run(0, 10, 0.0, &mut h);
        for (what, change) in [
            (
                "URLs",
                &(|r: &mut Report| r.run.urls = vec!["http://other/".into()])
                    as &dyn Fn(&mut Report),
            ),
            ("protocol", &|r: &mut Report| r.run.protocol = "h2".into()),
            ("-m", &|r: &mut Report| r.run.streams = 8),
            ("open loop", &|r: &mut Report| {
                r.open_loop = Some(OpenLoop {
                    rate: 1.0,
                    sent: 1,
                    late: 0,
                    missed: 0,
                })
            }),
            ("both are shard 0/4", &|_: &mut Report| {}),
        ] {
            let mut b = run(1, 10, 0.0, &mut h);
            if what.starts_with("both") {
                b.run.shard = a.run.shard;
            }
            change(&mut b);
            let runs = [
                ("a.json".to_owned(), run(0, 10, 0.0, &mut h)),
                ("b.json".to_owned(), b),
            ];
            let e = reports(&runs, false).unwrap_err();
            let m = e.downcast_ref::<Mismatch>().expect("a mismatch");
            assert!(m.what.contains(what), "{what}: {e}");
            assert!(e.to_string().contains("b.json") && e.to_string().contains("--force"));
            let forced = reports(&runs, true).unwrap();
            assert_eq!(forced.requests.completed, 20, "{what}");
        }
        let forced = reports(
            &[
                ("a".into(), a),
                ("b".into(), {
                    let mut b = run(1, 10, 0.0, &mut h);
                    b.run.protocol = "h3".into();
                    b.run.urls = vec!["https://x/".into()];
                    b
                }),
            ],
            true,
        )
        .unwrap();
        assert_eq!(forced.run.protocol, "h1+h3");
        assert_eq!(forced.run.urls, ["http://127.0.0.1:1/", "https://x/"]);
        assert!(reports(&[], false).is_err());
    }

    /// An interval log as `loadterm load --hdr-log` writes it: `hists[k]` at second k from
    /// `origin`.
    fn log(origin: f64, hists: &[Histogram<u64>]) -> Vec<u8> {
        let mut r = Recorder::new(Instant::now(), Instant::now(), None, true);
        r.intervals = Some(
            hists
                .iter()
                .enumerate()
                .map(|(s, h)| ((s, 0), h.clone()))
                .collect(),
        );
        report::hdr_log(&r, SystemTime::UNIX_EPOCH + Duration::from_secs_f64(origin)).unwrap()
    }

    #[test]
    fn interval_logs_are_added_per_wall_clock_second() {
        let h = |vals: &[u64]| {
            let mut h = union();
            for v in vals {
                h.record(*v).unwrap();
            }
            h
        };
        // Log b starts one second after log a (and 1 ms off, which rounds away).
        let a = log(1e9, &[h(&[100, 200]), h(&[300]), h(&[400])]);
        let b = log(1e9 + 1.001, &[h(&[1000]), h(&[2000, 3000])]);
        let merged = interval_logs(&[
            ("a".to_owned(), a.as_slice()),
            ("b".to_owned(), b.as_slice()),
        ])
        .unwrap();
        let back = read_log("merged", &merged).unwrap();
        let got: Vec<(f64, f64, u64, u64)> = back
            .iter()
            .map(|i| {
                let h = report::decode(i.encoded).unwrap();
                (i.start_s - 1e9, i.width_s, h.len(), h.max())
            })
            .collect();
        let max = |v: u64| union().highest_equivalent(v);
        assert_eq!(
            got,
            [
                (0.0, 1.0, 2, max(200)),
                (1.0, 1.0, 2, max(1000)),
                (2.0, 1.0, 3, max(3000)),
            ]
        );
        // Merging a log with nothing is that log again.
        let alone = interval_logs(&[("a".to_owned(), a.as_slice())]).unwrap();
        let (x, y) = (read_log("a", &a).unwrap(), read_log("m", &alone).unwrap());
        assert_eq!(x.len(), y.len());
        for (x, y) in x.iter().zip(&y) {
            assert_eq!(x.start_s, y.start_s);
            assert_eq!(
                recorded(&report::decode(x.encoded).unwrap()),
                recorded(&report::decode(y.encoded).unwrap())
            );
        }
        assert!(interval_logs(&[("junk".to_owned(), b"{\"not\": 1}".as_slice())]).is_err());
    }
}

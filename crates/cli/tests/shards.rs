//! Sharded runs of `loadterm load` against the real `loadterm serve`, merged by `loadterm
//! merge`: counts equal the unsharded run's, percentiles are those of the union of the recorded
//! histograms, interval logs add up, and runs that differ are refused.

use crate::common;

use base64::Engine;
use common::Server;
use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::Histogram;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{SystemTime, UNIX_EPOCH};

/// A fresh scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("loadterm-shards-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn loadterm(args: &[&str]) -> Output {
    Command::new(common::bin())
        .args(args)
        .output()
        .expect("run loadterm")
}

fn ok(out: Output) -> Output {
    assert!(
        out.status.success(),
        "loadterm failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn read_json(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

fn u(v: &Value, path: &[&str]) -> u64 {
    path.iter()
        .fold(v, |v, k| &v[*k])
        .as_u64()
        .unwrap_or_else(|| panic!("{path:?} missing in {v}"))
}

fn histogram(encoded: &Value) -> Histogram<u64> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded.as_str().expect("an encoded histogram"))
        .unwrap();
    Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .unwrap()
}

/// A histogram's content, whatever its range: (value, count) of each recorded bucket.
fn recorded(h: &Histogram<u64>) -> Vec<(u64, u64)> {
    h.iter_recorded()
        .map(|v| (v.value_iterated_to(), v.count_at_value()))
        .collect()
}

/// The sum of all the interval histograms of an interval log.
fn log_total(p: &Path) -> Histogram<u64> {
    let bytes = std::fs::read(p).unwrap();
    let mut total = Histogram::<u64>::new(3).unwrap();
    for e in IntervalLogIterator::new(&bytes) {
        if let LogEntry::Interval(i) = e.unwrap() {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(i.encoded_histogram())
                .unwrap();
            let h: Histogram<u64> = Deserializer::new()
                .deserialize(&mut bytes.as_slice())
                .unwrap();
            total.add(&h).unwrap();
        }
    }
    assert!(!total.is_empty(), "no intervals in the log");
    total
}

/// Unix seconds a little ahead, for `--start-at`: enough for 4 processes to start on a busy
/// machine (a late one still runs, and says so).
fn soon(secs: u64) -> String {
    (SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + secs)
        .to_string()
}

#[test]
fn four_shards_merged_equal_the_unsharded_run() {
    let s = Server::start(&["-t", "1", "--no-quic"]);
    let url = format!("http://127.0.0.1:{}/?s=700", s.clear_port);
    let dir = scratch("equal");
    let json = |name: &str| dir.join(name).to_str().unwrap().to_owned();
    let common_args = ["load", "-n", "2003", "-c", "6", "-m", "2", "-q"];
    ok(loadterm(
        &[&common_args[..], &["--json", &json("whole.json"), &url]].concat(),
    ));
    let at = soon(3);
    let shards: Vec<_> = (0..4)
        .map(|i| {
            let shard = format!("{i}/4");
            let (j, h) = (json(&format!("s{i}.json")), json(&format!("s{i}.hlog")));
            let args: Vec<String> = common_args
                .iter()
                .map(|a| a.to_string())
                .chain([
                    "--shard".into(),
                    shard,
                    "--start-at".into(),
                    at.clone(),
                    "--json".into(),
                    j,
                    "--hdr-log".into(),
                    h,
                    url.clone(),
                ])
                .collect();
            Command::new(common::bin()).args(&args).spawn().unwrap()
        })
        .collect();
    for mut c in shards {
        assert!(c.wait().unwrap().success());
    }
    let mut merge_args = vec!["merge".to_owned(), "-q".into()];
    merge_args.extend((0..4).map(|i| json(&format!("s{i}.json"))));
    merge_args.extend((0..4).map(|i| json(&format!("s{i}.hlog"))));
    merge_args.extend([
        "--json".into(),
        json("merged.json"),
        "--hdr-log".into(),
        json("merged.hlog"),
    ]);
    let args: Vec<&str> = merge_args.iter().map(String::as_str).collect();
    ok(loadterm(&args));
    let whole = read_json(&dir.join("whole.json"));
    let merged = read_json(&dir.join("merged.json"));
    let shard: Vec<Value> = (0..4)
        .map(|i| read_json(&dir.join(format!("s{i}.json"))))
        .collect();
    // Each shard ran its share: -c 6 over 4 shards is 2, 2, 1, 1 connections and -n 2003 in
    // proportion, the remainder to the first shards.
    let counts: Vec<(u64, u64)> = shard
        .iter()
        .map(|r| (u(r, &["connections"]), u(r, &["requests", "completed"])))
        .collect();
    assert_eq!(counts, [(2, 668), (2, 668), (1, 334), (1, 333)]);
    for (i, r) in shard.iter().enumerate() {
        assert_eq!(
            (u(r, &["shard", "index"]), u(r, &["shard", "count"])),
            (i as u64, 4)
        );
    }
    // Exactly equal counts.
    for path in [
        &["requests", "started"][..],
        &["requests", "completed"],
        &["requests", "succeeded"],
        &["requests", "failed"],
        &["status", "200"],
        &["bytes", "body"],
        &["bytes", "headers"],
        &["connections"],
    ] {
        assert_eq!(u(&merged, path), u(&whole, path), "{path:?}");
    }
    assert_eq!(u(&merged, &["requests", "completed"]), 2003);
    assert_eq!(u(&merged, &["runs"]), 4);
    assert_eq!(merged["protocol"], whole["protocol"]);
    // The shards started together (a late one would say so, and then the window is longer).
    let late = merged["clock"]["late_s"].as_f64().unwrap();
    assert!(late >= 0.0);
    // Within noise: one busy loopback machine, 4 processes against 1 — only the order of
    // magnitude is comparable here.
    let (p50m, p50w) = (
        u(&merged, &["latency_us", "p50"]),
        u(&whole, &["latency_us", "p50"]),
    );
    assert!(
        p50m > 0 && p50w > 0 && p50m < p50w * 20 && p50w < p50m * 20,
        "{p50m} vs {p50w}"
    );
    let timeseries_total: u64 = merged["timeseries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["requests"].as_u64().unwrap())
        .sum();
    assert_eq!(timeseries_total, 2003);
    // The merged interval log holds every recorded latency once.
    let mut union = histogram(&shard[0]["histograms"]["latency_us"]);
    for r in &shard[1..] {
        union
            .add(histogram(&r["histograms"]["latency_us"]))
            .unwrap();
    }
    assert_eq!(
        recorded(&log_total(&dir.join("merged.hlog"))),
        recorded(&union)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn merged_percentiles_are_those_of_the_recorded_union() {
    let s = Server::start(&["-t", "1", "--no-quic"]);
    let dir = scratch("union");
    // Different latencies per run (a server-side delay in one), so the union differs from
    // each part.
    let runs = [
        format!("http://127.0.0.1:{}/?s=100", s.clear_port),
        format!("http://127.0.0.1:{}/?s=100&t=3", s.clear_port),
        format!("http://127.0.0.1:{}/?s=100", s.clear_port),
    ];
    let mut files = Vec::new();
    for (i, url) in runs.iter().enumerate() {
        let f = dir.join(format!("r{i}.json"));
        ok(loadterm(&[
            "load",
            "-n",
            "300",
            "-c",
            "2",
            "-q",
            "--json",
            f.to_str().unwrap(),
            url,
        ]));
        files.push(f);
    }
    let out = dir.join("m.json");
    let mut args = vec!["merge", "--force", "-q", "--json", out.to_str().unwrap()];
    args.extend(files.iter().map(|f| f.to_str().unwrap()));
    ok(loadterm(&args));
    let merged = read_json(&out);
    for (hist, pct) in [("latency_us", "latency_us"), ("ttfb_us", "ttfb_us")] {
        let mut union = histogram(&read_json(&files[0])["histograms"][hist]);
        for f in &files[1..] {
            union
                .add(histogram(&read_json(f)["histograms"][hist]))
                .unwrap();
        }
        assert_eq!(histogram(&merged["histograms"][hist]), union, "{hist}");
        let p = &merged[pct];
        for (key, q) in [
            ("p50", 0.5),
            ("p90", 0.9),
            ("p99", 0.99),
            ("p99_9", 0.999),
            ("p99_99", 0.9999),
        ] {
            assert_eq!(u(p, &[key]), union.value_at_quantile(q), "{hist} {key}");
        }
        assert_eq!(
            (u(p, &["min"]), u(p, &["max"])),
            (union.min(), union.max()),
            "{hist}"
        );
    }
    assert_eq!(u(&merged, &["requests", "completed"]), 900);
    // The text summary of a merge is a run's, with the number of runs.
    let text = ok(loadterm(&[
        "merge",
        "--force",
        files[0].to_str().unwrap(),
        files[1].to_str().unwrap(),
    ]));
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("merged from 2 runs\n"), "{text}");
    assert!(text.contains("requests: 600 started, 600 done"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn different_runs_are_refused_unless_forced() {
    let s = Server::start(&["-t", "1", "--no-quic"]);
    let dir = scratch("refuse");
    let (a, b) = (dir.join("a.json"), dir.join("b.json"));
    for (f, path) in [(&a, "/?s=10"), (&b, "/?s=20")] {
        let url = format!("http://127.0.0.1:{}{path}", s.clear_port);
        ok(loadterm(&[
            "load",
            "-n",
            "20",
            "-q",
            "--json",
            f.to_str().unwrap(),
            &url,
        ]));
    }
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let out = loadterm(&["merge", a, b]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot merge") && err.contains("URLs") && err.contains("--force"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    ok(loadterm(&["merge", "--force", a, b]));
    // An interval log without --hdr-log to put the merge in is a usage error.
    let log = dir.join("x.hlog");
    std::fs::write(&log, "#[StartTime: 1.000 (seconds since epoch)]\n").unwrap();
    let out = loadterm(&["merge", a, log.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_late_shard_says_by_how_much() {
    let s = Server::start(&["-t", "1", "--no-quic"]);
    let url = format!("http://127.0.0.1:{}/", s.clear_port);
    let past = (SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        - 30)
        .to_string();
    let out = ok(loadterm(&[
        "load",
        "-n",
        "10",
        "--shard",
        "1/2",
        "-c",
        "2",
        "--start-at",
        &past,
        "-q",
        "--json",
        "-",
        &url,
    ]));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let late = r["clock"]["late_s"].as_f64().unwrap();
    assert!((30.0..600.0).contains(&late), "{late}");
    assert_eq!(
        r["clock"]["start_at_unix_s"].as_f64().unwrap(),
        past.parse::<f64>().unwrap()
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("started late"), "{err}");
    assert_eq!(u(&r, &["requests", "completed"]), 5);
}

#[test]
fn completions_and_man_page_come_from_the_command_line() {
    let bash = ok(loadterm(&["completions", "bash"])).stdout;
    let script = String::from_utf8(bash).unwrap();
    assert!(script.contains("--shard-from-env") && script.contains("merge"));
    // The script is valid bash.
    let check = Command::new("bash")
        .args(["-n", "-c", &script])
        .status()
        .unwrap();
    assert!(check.success());
    let man = String::from_utf8(ok(loadterm(&["man"])).stdout).unwrap();
    assert!(man.starts_with(".ie") && man.contains(".SH NAME"), "{man}");
    let dir = scratch("man");
    ok(loadterm(&["man", "--dir", dir.to_str().unwrap()]));
    let page = std::fs::read_to_string(dir.join("loadterm-load.1")).unwrap();
    assert!(page.contains("start\\-at"), "{page}");
    std::fs::remove_dir_all(&dir).unwrap();
}

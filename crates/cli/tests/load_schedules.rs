//! `loadterm load --rate` schedules against the real `loadterm serve`: each step measured apart
//! agrees with a constant-rate run at its rate.

use crate::common;

use common::Server;
use serde_json::Value;
use std::process::Command;

fn load(args: &[&str]) -> Value {
    let out = Command::new(common::bin())
        .arg("load")
        .args(args)
        .args(["--json", "-", "-q"])
        .output()
        .expect("run loadterm load");
    assert!(
        out.status.success(),
        "load failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON report")
}

fn f(v: &Value, path: &[&str]) -> f64 {
    path.iter()
        .fold(v, |v, k| &v[*k])
        .as_f64()
        .unwrap_or_else(|| panic!("{path:?} missing in {v}"))
}

/// Steps of 50 and 200 req/s against 5 ms responses: each step keeps its rate, and its
/// corrected percentiles are those of a constant-rate run at that rate (loosely: the same
/// 5 ms plus the machine's noise). The run lasts as long as its steps; the interval log tags
/// each step's intervals.
#[test]
fn steps_match_constant_rate_runs() {
    let s = Server::start(&["-t", "1", "--no-quic"]);
    let url = format!("http://127.0.0.1:{}/?t=5", s.clear_port);
    let dir = tempfile_dir();
    let log = dir.join("steps.hlog");
    let r = load(&[
        "-c",
        "4",
        "--rate",
        "50,200",
        "--step-duration",
        "2s",
        "--hdr-log",
        log.to_str().unwrap(),
        &url,
    ]);
    assert!(
        (f(&r, &["duration_s"]) - 4.0).abs() < 0.01,
        "{}",
        r["duration_s"]
    );
    let steps = r["steps"].as_array().expect("steps in the report");
    assert_eq!(steps.len(), 2);
    for (step, rate) in steps.iter().zip([50.0, 200.0]) {
        assert_eq!(f(step, &["rate_from"]), rate);
        let rps = f(step, &["rps"]);
        assert!(
            (rps - rate).abs() <= rate * 0.15,
            "step at {rate}: {rps} req/s"
        );
        let constant = load(&["-c", "4", "--rate", &rate.to_string(), "-D", "2s", &url]);
        for p in ["p50", "p90"] {
            let (a, b) = (
                f(step, &["latency_corrected_us", p]),
                f(&constant, &["latency_corrected_us", p]),
            );
            assert!(a >= 5000.0 && b >= 5000.0, "{p} at {rate}: {a} and {b} µs");
            assert!(
                (a - b).abs() <= 3000.0_f64.max(0.5 * b),
                "{p} at {rate}: step {a} µs, constant run {b} µs"
            );
        }
    }
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(
        log.contains("Tag=step1,") && log.contains("Tag=step2,"),
        "{log}"
    );
    // A ramp: its pieces' rates rise, each piece's done rate near its mean intended rate.
    let r = load(&[
        "-c",
        "4",
        "--rate",
        "40..200",
        "-D",
        "3s",
        "--step-duration",
        "1s",
        &url,
    ]);
    let steps = r["steps"].as_array().unwrap();
    let rates: Vec<f64> = steps.iter().map(|s| f(s, &["open_loop", "rate"])).collect();
    assert_eq!(rates.len(), 3);
    for (s, want) in steps.iter().zip([66.7, 120.0, 173.3]) {
        let (rate, rps) = (f(s, &["open_loop", "rate"]), f(s, &["rps"]));
        assert!((rate - want).abs() < 0.5, "{rates:?}");
        assert!(
            (rps - rate).abs() <= rate * 0.2,
            "{rps} req/s in a piece at {rate}"
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "loadterm-steps-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

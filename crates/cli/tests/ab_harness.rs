//! `loadterm ab` with real server processes: A/A finds nothing, a known effect is found.

use crate::common;

use serde_json::Value;
use std::process::Command;

fn ab(args: &[&str]) -> Value {
    let json = std::env::temp_dir().join(format!(
        "loadterm-ab-test-{}-{}.json",
        std::process::id(),
        args.len()
    ));
    let md = json.with_extension("md");
    let out = Command::new(common::bin())
        .arg("ab")
        .args(args)
        .args([
            "--json",
            json.to_str().unwrap(),
            "--markdown",
            md.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ab failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let markdown = std::fs::read_to_string(&md).unwrap();
    assert!(
        markdown.contains("| variant | req/s | % baseline |")
            && markdown.contains("Environment and commands"),
        "{markdown}"
    );
    let v = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(json);
    let _ = std::fs::remove_file(md);
    v
}

fn comparison<'a>(report: &'a Value, metric: &str) -> &'a Value {
    report["cells"][0]["comparisons"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["metric"] == metric)
        .unwrap()
}

fn server_cmd() -> String {
    format!(
        "{} serve -t 1 -L {{host}}:{{clear_port}}:{{tls_port}} --no-quic",
        common::bin()
    )
}

/// Six rounds (the fewest for the medians' intervals), at the pilot's rate: req/s must be said
/// to be held, and a fixed rate was not on a busy machine (2000 req/s each, and 500, for the
/// three servers on one core).
#[test]
fn a_a_finds_no_difference() {
    let cmd = server_cmd();
    let r = ab(&[
        "--a",
        &cmd,
        "--b",
        &cmd,
        "--aa",
        "--rounds",
        "6",
        "--duration",
        "500ms",
        "--warmup",
        "0s",
        "-c",
        "4",
        "-m",
        "2",
        "--url",
        "/?s=4k",
    ]);
    for metric in ["cpu_us_per_req", "rps", "bytes_per_req"] {
        let c = comparison(&r, metric);
        assert_eq!(c["significant"], false, "{metric}: {}", c["verdict"]);
        let v = c["verdict"].as_str().unwrap();
        // At the pilot's fixed rate, req/s is the client's: said to be held, not compared.
        assert!(
            v.starts_with("B: no significant difference")
                || v.starts_with("B: not measurable")
                || v.starts_with("B: the same")
                || (metric == "rps" && v.contains("req/s was held")),
            "{metric}: {v}"
        );
    }
    assert_eq!(r["cells"][0]["aa_runs"].as_array().unwrap().len(), 12);
    assert_eq!(r["cells"][0]["runs"].as_array().unwrap().len(), 12);
}

/// Two known effects: B's responses are 4 KiB longer, and B burns half its CPU per request
/// again (`--burn 50`). The longer response alone is no sure CPU effect (16 KiB is copied,
/// 20 KiB written from static slices, and a debug build's own cost dwarfs the difference): it
/// failed the CPU check 1 time in 6 on a busy machine. Six rounds: every round's ratio of bytes
/// is above 1, so the signed-rank p is 1/32, significant.
#[test]
fn known_effect_is_detected() {
    let cmd = server_cmd();
    let burning = format!("{cmd} --burn 50");
    let r = ab(&[
        "--a",
        &cmd,
        "--b",
        &burning,
        "--url",
        "/?s=16k",
        "--b-url",
        "/?s=20k",
        "--rounds",
        "6",
        "--duration",
        "700ms",
        "--warmup",
        "0s",
        "--rate",
        "1000",
        "-c",
        "8",
        "-m",
        "4",
    ]);
    let bytes = comparison(&r, "bytes_per_req");
    assert_eq!(bytes["significant"], true, "{}", bytes["verdict"]);
    // The true ratio: the same head (a few bytes longer for the longer size) with 4 KiB more body.
    let runs = r["cells"][0]["runs"].as_array().unwrap();
    let per_req = |v: &str| {
        runs.iter().find(|x| x["variant"] == v).unwrap()["bytes_per_req"]
            .as_f64()
            .unwrap()
    };
    let truth = per_req("B") / per_req("A");
    assert!((1.2..1.26).contains(&truth), "{truth}");
    let ci = bytes["ci"].as_array().unwrap();
    assert!(
        ci[0].as_f64().unwrap() <= truth + 1e-9 && truth - 1e-9 <= ci[1].as_f64().unwrap(),
        "CI {ci:?} vs {truth}"
    );
    let cpu = comparison(&r, "cpu_us_per_req");
    assert!(
        cpu["ratio"].as_f64().unwrap() > 1.0,
        "B costs more CPU per request: {}",
        cpu["verdict"]
    );
}

/// Responses slower than the measured window: every pilot window is lost, run again a few times,
/// and ab ends saying why and what to change, never with a verdict made of nothing.
#[test]
fn responses_slower_than_the_window_end_the_pilot_with_the_remedy() {
    let server = server_cmd();
    let out = Command::new(common::bin())
        .args(["ab", "--a", &server, "--b", &server, "--proto", "h1"])
        .args(["--url", "/?s=1k&t=4000", "--max-time", "2m"])
        // 4 s responses outlast a window of 500 ms and its client's 250 ms of warm-up.
        .args(["--duration", "500ms", "--warmup", "0s"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.matches("pilot run again").count(), 3, "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains("no request completed in the measured run")
            && last.contains("a longer --duration"),
        "{stderr}"
    );
}

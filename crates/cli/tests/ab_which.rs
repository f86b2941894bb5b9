//! Which change: `ab --fail-if` exit statuses (and under `git bisect run`), the exports for
//! history tools, and `loadterm bisect` over a repository of the test's own whose commits
//! change a real server's cost.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The server every variant runs: this build's, on one thread, no QUIC.
fn serve() -> String {
    format!(
        "{} serve -t 1 -L {{host}}:{{clear_port}}:{{tls_port}} --no-quic",
        common::bin()
    )
}

/// Short rounds at a fixed rate (no pilot), contaminated ones kept and no warm-up round (the
/// effects these tests look for are exact, or far beyond what a busy machine moves): a
/// comparison in a few seconds.
const FAST: [&str; 13] = [
    "--rate",
    "1500",
    "--duration",
    "300ms",
    "--warmup",
    "0s",
    "-c",
    "2",
    "-m",
    "1",
    "--max-repeats",
    "0",
    "--keep-first-round",
];

fn loadterm(args: &[&str]) -> Output {
    Command::new(common::bin()).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("loadterm-which-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// An exact difference lies beyond the threshold: status 1, and the line says so.
#[test]
fn fail_if_beyond_exits_1() {
    let s = serve();
    let mut args = vec![
        "ab", "--a", &s, "--b", &s, "--b-url", "/?s=2k", "--rounds", "3",
    ];
    args.extend(FAST);
    args.extend(["--url", "/?s=1k", "--fail-if", "bytes_per_req > +10%"]);
    let o = loadterm(&args);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout)
            .contains("fail-if bytes_per_req > +10.0%: [h1 /?s=1k] B +"),
        "{}",
        text(&o)
    );
}

/// A/A: the same bytes, and a CPU interval well inside +50%: status 0.
#[test]
fn fail_if_within_exits_0() {
    let s = serve();
    let mut args = vec!["ab", "--a", &s, "--b", &s, "--rounds", "6"];
    args.extend(FAST);
    args.extend([
        "--fail-if",
        "bytes_per_req > +1%",
        "--fail-if",
        "cpu_us_per_req > +50%",
    ]);
    let o = loadterm(&args);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(out.matches(": within").count(), 2, "{}", text(&o));
}

/// Two rounds give CPU per request no interval: the run cannot tell, status 3.
#[test]
fn fail_if_cannot_tell_exits_3() {
    let s = serve();
    let mut args = vec!["ab", "--a", &s, "--b", &s, "--rounds", "2"];
    args.extend(FAST);
    args.extend(["--fail-if", "cpu_us_per_req > +2%"]);
    let o = loadterm(&args);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("no interval): cannot tell"),
        "{}",
        text(&o)
    );
}

fn git(dir: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "git {args:?}: {}", text(&o));
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

/// A repository of `n` commits of `server.sh`, the server command a revision runs (its
/// arguments appended); commit k's extra options are `options(k)`. The hashes, oldest first.
fn repo(dir: &Path, n: usize, options: impl Fn(usize) -> &'static str) -> Vec<String> {
    git(dir, &["init", "-q", "-b", "main"]);
    (0..n)
        .map(|k| {
            let script = format!(
                "#!/bin/sh\n# revision {k}\nexec {} serve -t 1 --no-quic {} \"$@\"\n",
                common::bin(),
                options(k)
            );
            std::fs::write(dir.join("server.sh"), script).unwrap();
            git(dir, &["add", "server.sh"]);
            git(dir, &["commit", "-q", "-m", &format!("revision {k}")]);
            git(dir, &["rev-parse", "HEAD"])
        })
        .collect()
}

/// `git bisect run` drives `ab --fail-if … --exit-codes git-bisect` and names the commit that
/// made every response 37 bytes longer (its `date` field back), exactly.
#[test]
fn git_bisect_run_finds_the_commit_that_fails() {
    let dir = scratch("git-bisect-run");
    let src = dir.join("repo");
    std::fs::create_dir_all(&src).unwrap();
    let commits = repo(&src, 8, |k| if k < 5 { "--no-date" } else { "" });
    let ab = format!(
        "{} ab --a '{} --no-date' --b 'sh {}/server.sh -L {{host}}:{{clear_port}}:{{tls_port}}' --rounds 3 {} --fail-if 'bytes_per_req > +1%' --exit-codes git-bisect\n",
        common::bin(),
        serve(),
        src.display(),
        FAST.join(" ")
    );
    let script = dir.join("check.sh");
    std::fs::write(&script, ab).unwrap();
    git(&src, &["bisect", "start", &commits[7], &commits[0]]);
    let out = git(&src, &["bisect", "run", "sh", script.to_str().unwrap()]);
    assert!(
        out.contains(&format!("{} is the first bad commit", commits[5])),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// The exports: Bencher's JSON valid against its published schema (Python's jsonschema), the
/// CSV read by Python's csv module, both with the interval of the change.
#[test]
fn exports_are_read_by_their_readers() {
    let dir = scratch("exports");
    let (bmf, csv) = (dir.join("ab.bmf.json"), dir.join("ab.csv"));
    let s = serve();
    let bmf_arg = format!("bencher={}", bmf.display());
    let csv_arg = format!("csv={}", csv.display());
    let mut args = vec![
        "ab", "--a", &s, "--b", &s, "--b-url", "/?s=2k", "--rounds", "6",
    ];
    args.extend(FAST);
    args.extend([
        "--export", &bmf_arg, "--export", &csv_arg, "--commit", "abc123",
    ]);
    let o = loadterm(&args);
    assert!(o.status.success(), "{}", text(&o));
    let schema = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bmf.schema.json");
    let check = r#"
import csv, json, sys
import jsonschema
schema, bmf, table = sys.argv[1:4]
doc = json.load(open(bmf))
jsonschema.validate(doc, json.load(open(schema)))
b = doc["h1 /?s=1k B"]["bytes_per_req_change_pct"]
assert b["lower_value"] <= b["value"] <= b["upper_value"], b
rows = list(csv.DictReader(open(newline="", file=table)))
assert rows and all(r["commit"] == "abc123" for r in rows), rows[:2]
cpu = [r for r in rows if r["variant"] == "B" and r["metric"] == "cpu_us_per_req_change_pct"]
assert len(cpu) == 1 and float(cpu[0]["ci_low"]) <= float(cpu[0]["value"]) <= float(cpu[0]["ci_high"]), cpu
assert {r["url"] for r in rows} == {"/?s=1k", "/?s=2k"}, rows
print(len(doc), len(rows))
"#;
    let o = Command::new("python3")
        .args(["-c", check])
        .args([&schema, &bmf, &csv])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let _ = std::fs::remove_dir_all(dir);
}

fn bisect(src: &Path, good: &str, bad: &str, json: &Path) -> Output {
    let run = "sh {bin}/server.sh -L {host}:{clear_port}:{tls_port}";
    let mut args = vec![
        "bisect",
        "--repo",
        src.to_str().unwrap(),
        "--good",
        good,
        "--bad",
        bad,
        "--build",
        "cp {src}/server.sh {out}/",
        "--run",
        run,
        "--json",
        json.to_str().unwrap(),
        // ±20 points, 6 rounds per question: a cost doubled stands out whatever else the
        // machine runs.
        "--target-effect",
        "40%",
        "--rounds",
        "6",
    ];
    args.extend(FAST);
    loadterm(&args)
}

/// 9 commits; the 6th after the first adds `--burn 100` (twice the CPU per request): bisect
/// names it, in three steps (4 same, 6 changed, 5 same), having built each commit it measured
/// once.
#[test]
fn bisect_names_the_commit_that_costs_more() {
    let dir = scratch("bisect");
    let src = dir.join("repo");
    std::fs::create_dir_all(&src).unwrap();
    let commits = repo(&src, 9, |k| if k < 6 { "" } else { "--burn 100" });
    let json = dir.join("bisect.json");
    let o = bisect(&src, &commits[0], &commits[8], &json);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(&format!(
            "first changed commit: {} \"revision 6\"",
            commits[6]
        )),
        "{}",
        text(&o)
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(r["first_changed"], commits[6].as_str(), "{r:#}");
    let steps = r["steps"].as_array().unwrap();
    assert!(steps.len() >= 3, "{r:#}");
    for s in steps {
        let k: usize = s["subject"].as_str().unwrap()["revision ".len()..]
            .parse()
            .unwrap();
        let want = if k < 6 { "same" } else { "changed" };
        assert_eq!(s["verdict"], want, "{s:#}");
    }
    // One build per commit measured, and the two ends.
    assert_eq!(r["builds"], steps.len() + 2, "{r:#}");
    let _ = std::fs::remove_dir_all(dir);
}

/// No commit changes the cost: bisect ends after measuring good against bad, status 0.
#[test]
fn bisect_without_a_change_says_so() {
    let dir = scratch("bisect-none");
    let src = dir.join("repo");
    std::fs::create_dir_all(&src).unwrap();
    let commits = repo(&src, 4, |_| "");
    let json = dir.join("bisect.json");
    let o = bisect(&src, &commits[0], &commits[3], &json);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("no change between good and bad"),
        "{}",
        text(&o)
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(r["outcome"], "no change", "{r:#}");
    assert_eq!(r["builds"], 2, "{r:#}");
    let _ = std::fs::remove_dir_all(dir);
}

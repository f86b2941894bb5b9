//! `loadterm ab`, round 5: where the CPU went. Split verdicts (user, system, irq + softirq) in
//! every output format, and `--profile` finding a known cost: `serve --burn 10` spins in a
//! function of its own (`thread_ctx::spin`, never inlined), which must come first among B's
//! increases with the injected cost inside its interval, and the functions' differences must
//! add up to the CPU verdict.

use crate::common;

use common::{ab, ab_server, json_file as json, Dir};
use std::process::Output;

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "ab failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The two comparisons of this file one at a time: each measures the server cores' CPU, and
/// beside each other every round of both would be contaminated.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// With the server cores to itself (`--alternate`) a variant is charged its network stack's
/// irq + softirq: user, system and irq + softirq each get a verdict, in the terminal, the
/// Markdown, the HTML and the JSON (typed: the metric's name, which way is better). Which
/// verdicts there are, not their values: contaminated rounds are kept.
#[test]
fn split_verdicts_appear_in_every_format() {
    let _one = one_at_a_time();
    let dir = Dir::new("split");
    let (js, md, html) = (dir.file("ab.json"), dir.file("ab.md"), dir.file("ab.html"));
    let out = ab(&[
        &["--a", &ab_server(""), "--b", &ab_server(" --burn 20")][..],
        &[
            "--alternate",
            "--max-repeats",
            "0",
            "--rounds",
            "3",
            "--duration",
            "1s",
            "--warmup",
            "0s",
        ],
        &["--rate", "3000", "-c", "4", "-m", "2"],
        &[
            "--json",
            js.to_str().unwrap(),
            "--markdown",
            md.to_str().unwrap(),
        ],
        &["--html", html.to_str().unwrap()],
    ]
    .concat());
    let stdout = ok(&out);
    let md = std::fs::read_to_string(&md).unwrap();
    let html = std::fs::read_to_string(&html).unwrap();
    let r = json(&js);
    // Charged in every run; a verdict where it was above zero in both variants' rounds (with
    // tick-based accounting a short window can read none outside the runtime).
    let runs = r["cells"][0]["runs"].as_array().unwrap();
    assert!(
        runs.iter().all(|r| r["softirq_us_per_req"].is_number()),
        "{runs:?}"
    );
    let mut split = vec!["user CPU per request", "system CPU per request"];
    if runs
        .iter()
        .all(|r| r["softirq_us_per_req"].as_f64().unwrap() > 0.0)
    {
        split.push("irq + softirq per request");
    }
    for words in split {
        for (name, text) in [("terminal", &stdout), ("markdown", &md), ("html", &html)] {
            assert!(
                text.contains("B: ") && text.contains(words),
                "{name}: {words}\n{text}"
            );
        }
    }
    let comparisons = r["cells"][0]["comparisons"].as_array().unwrap();
    for metric in ["user_us_per_req", "system_us_per_req"] {
        let c = comparisons
            .iter()
            .find(|c| c["metric"] == metric)
            .unwrap_or_else(|| panic!("{metric}: {comparisons:?}"));
        assert_eq!(c["better"], "lower", "{c}");
        assert!(c["ratio"].as_f64().unwrap() > 0.0, "{c}");
    }
    // The stopping rule stays on total CPU per request.
    assert!(
        comparisons.iter().any(|c| c["metric"] == "cpu_us_per_req"
            && c["verdict"].as_str().unwrap().contains(" rounds)")),
        "{comparisons:?}"
    );
}

#[test]
fn profile_finds_the_burn_and_adds_up_to_the_verdict() {
    if !common::have_tool("perf") {
        return;
    }
    let _one = one_at_a_time();
    let dir = Dir::new("profile");
    let (js, html) = (dir.file("ab.json"), dir.file("ab.html"));
    let out = ab(&[
        &["--a", &ab_server(""), "--b", &ab_server(" --burn 10")][..],
        &[
            "--profile",
            "--rounds",
            "8",
            "--duration",
            "1s",
            "--warmup",
            "0s",
        ],
        &["--rate", "5000", "-c", "4", "-m", "2"],
        &[
            "--json",
            js.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
        ],
    ]
    .concat());
    let stdout = ok(&out);
    let r = json(&js);
    let cell = &r["cells"][0];
    let p = &cell["profile"];
    assert!(p["rounds"].as_u64().unwrap() >= 6, "{p}");
    // B's increases, largest first: the burn's own function leads.
    let increases: Vec<&serde_json::Value> = p["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["variant"] == "B" && f["self"]["diff_us"].as_f64().unwrap() > 0.0)
        .collect();
    let top = increases[0];
    assert!(
        top["function"]
            .as_str()
            .unwrap()
            .ends_with("thread_ctx::spin"),
        "{increases:#?}"
    );
    // The injected cost: 10% of the server's own CPU per request, A's as measured; while
    // profiled, that CPU includes what sampling costs it (the overhead reported), so the burn
    // is larger in the profiled rounds by as much.
    let overhead = p["variants"][0]["overhead_pct"].as_f64().unwrap();
    let a_cpu: Vec<f64> = cell["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["variant"] == "A")
        .map(|r| r["cpu_us_per_req"].as_f64().unwrap())
        .collect();
    let mut sorted = a_cpu.clone();
    sorted.sort_by(f64::total_cmp);
    let injected = sorted[sorted.len() / 2] * 0.10 * (1.0 + overhead / 100.0);
    let d = &top["self"];
    let (est, lo, hi) = (
        d["diff_us"].as_f64().unwrap(),
        d["ci_us"][0].as_f64().unwrap(),
        d["ci_us"][1].as_f64().unwrap(),
    );
    // The criterion: the interval holds the injected cost within ±30%.
    assert!(
        lo <= injected * 1.3 && hi >= injected * 0.7,
        "spin {est:.3} µs (CI {lo:.3} to {hi:.3}) against {injected:.3} µs injected"
    );
    // Every function's self difference adds up to the CPU verdict: within its interval, or
    // their intervals overlapping (two estimates from different rounds).
    let notes: Vec<&str> = cell["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(
        notes.iter().any(
            |n| n.starts_with("profile of B: the functions' differences add up to")
                && (n.ends_with("within its interval") || n.contains("the two intervals overlap"))
        ),
        "{notes:#?}"
    );
    // The overhead is measured and said; unprofiled rounds alone feed the verdicts.
    assert!(
        notes
            .iter()
            .any(|n| n.contains("CPU per request while profiled")),
        "{notes:#?}"
    );
    assert_eq!(cell["runs"].as_array().unwrap().len(), 16);
    // Folded stacks next to the JSON, one file per variant, in flamegraph.pl's format.
    let files = p["folded_files"].as_array().unwrap();
    assert_eq!(files.len(), 2, "{p}");
    let folded = std::fs::read_to_string(files[1].as_str().unwrap()).unwrap();
    let line = folded
        .lines()
        .find(|l| l.contains("thread_ctx::spin"))
        .unwrap();
    assert!(
        line.rsplit(' ').next().unwrap().parse::<u64>().unwrap() > 0,
        "{line}"
    );
    assert!(folded.contains("_[k]"), "kernel frames are in the stacks");
    // The HTML shows the flame graph and the table; the terminal the top differences.
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("<h3>Where the CPU went</h3>")
            && page.contains("data:image/svg+xml;base64,")
            && page.contains("thread_ctx::spin"),
        "{page}"
    );
    assert!(stdout.contains("where the CPU went"), "{stdout}");
    assert!(stdout.contains("thread_ctx::spin: self +"), "{stdout}");
}

//! `loadterm ab --levels`: the same comparison at several loads in one run, each level a
//! fraction of the baseline's closed-loop throughput with paired rounds of its own, and the
//! effect as a curve over the levels (a table in every format, a chart in the HTML).

use crate::common;

use common::{ab, ab_server, json_file as json, Dir};

/// `serve --burn 20` (a known +20% CPU per request) at two levels: each level's cell runs at
/// its fraction of the baseline's closed-loop throughput and finds B costlier by about the
/// injected cost, and the curve is reported in the terminal, Markdown, HTML (with its chart)
/// and JSON.
#[test]
fn levels_give_a_verdict_per_load_level() {
    let dir = Dir::new("levels");
    let (js, md, html) = (dir.file("ab.json"), dir.file("ab.md"), dir.file("ab.html"));
    let out = ab(&[
        &["--a", &ab_server(""), "--b", &ab_server(" --burn 20")][..],
        &["--levels", "0.25,0.5", "--rounds", "4"],
        &[
            "--duration",
            "500ms",
            "--warmup",
            "0s",
            "-c",
            "4",
            "-m",
            "2",
        ],
        &[
            "--json",
            js.to_str().unwrap(),
            "--markdown",
            md.to_str().unwrap(),
        ],
        &["--html", html.to_str().unwrap()],
    ]
    .concat());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "ab failed: {stderr}");
    let r = json(&js);
    let cells = r["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 2, "{cells:?}");
    let mut rates = Vec::new();
    for (cell, level) in cells.iter().zip([0.25, 0.5]) {
        assert_eq!(cell["level"].as_f64(), Some(level), "{cell}");
        let rate = cell["rate"].as_f64().unwrap();
        rates.push(rate);
        let regime = cell["regime"].as_str().unwrap();
        assert!(regime.contains(&format!("level {level} ×")), "{regime}");
        let cpu = cell["comparisons"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["metric"] == "cpu_us_per_req" && c["variant"] == "B")
            .unwrap_or_else(|| panic!("no CPU verdict at {level}: {cell}"));
        let change = cpu["change_pct"].as_f64().unwrap();
        let (lo, hi) = (
            cpu["ci_pct"][0].as_f64().unwrap(),
            cpu["ci_pct"][1].as_f64().unwrap(),
        );
        // +20% injected: found at every level, the estimate within half of it.
        assert!(lo > 0.0, "level {level}: {cpu}\n{stderr}");
        assert!(
            (10.0..=30.0).contains(&change),
            "level {level}: {cpu}\n{stderr}"
        );
        assert!(lo < hi, "{cpu}");
    }
    // Both levels are fractions of the one closed-loop throughput the first level's pilot
    // measured (rates are rounded to whole requests per second).
    assert!((rates[1] - 2.0 * rates[0]).abs() <= 2.0, "{rates:?}");
    assert!(
        cells[1]["regime"]
            .as_str()
            .unwrap()
            .contains("the first level's pilot"),
        "{}",
        cells[1]["regime"]
    );
    for (name, text) in [
        ("terminal", stdout.to_string()),
        ("markdown", std::fs::read_to_string(&md).unwrap()),
    ] {
        assert!(text.contains("by load level"), "{name}: {text}");
        assert!(
            text.contains("0.25 (") || text.contains("| 0.25 |"),
            "{name}: {text}"
        );
    }
    let html = std::fs::read_to_string(&html).unwrap();
    assert!(
        html.contains("by load level (95% CI)"),
        "the levels chart is in the HTML"
    );
}

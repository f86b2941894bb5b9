//! Reports: terminal table, Markdown (shaped like the tables users post on mailing lists),
//! JSON with every raw run, and an SVG chart.

use crate::compare::Comparison;
use crate::env::Environment;
use crate::measure::Run;
use crate::stats::median;
use serde::Serialize;

/// Results of one matrix cell (protocol × URL).
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    pub proto: String,
    pub url: String,
    pub variants: Vec<Variant>,
    pub runs: Vec<Run>,
    pub aa_runs: Vec<Run>,
    pub comparisons: Vec<Comparison>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Variant {
    pub name: String,
    pub command: String,
    pub url: String,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub environment: Environment,
    pub rounds: usize,
    pub discarded_first_round: bool,
    pub cells: Vec<Cell>,
}

fn stat(runs: &[Run], variant: &str, f: impl Fn(&Run) -> f64) -> (f64, f64, f64) {
    let v: Vec<f64> = runs
        .iter()
        .filter(|r| r.variant == variant)
        .map(f)
        .collect();
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (median(&v), min, max)
}

fn cell_rows(c: &Cell) -> Vec<[String; 9]> {
    let base = &c.variants[0].name;
    let base_rps = stat(&c.runs, base, |r| r.rps).0;
    c.variants
        .iter()
        .map(|v| {
            let s = |f: fn(&Run) -> f64, prec: usize| {
                let (m, lo, hi) = stat(&c.runs, &v.name, f);
                format!("{m:.prec$} ({lo:.prec$}–{hi:.prec$})")
            };
            let rps = stat(&c.runs, &v.name, |r| r.rps).0;
            let util = stat(&c.runs, &v.name, |r| r.server_cpu_util).0;
            [
                v.name.clone(),
                s(|r| r.rps, 0),
                format!("{:.0}", rps / base_rps * 100.0),
                s(|r| r.mean_ms, 2),
                s(|r| r.p95_ms, 2),
                s(|r| r.p99_ms, 2),
                s(|r| r.cpu_us_per_req, 2),
                format!("{:.0}%", util * 100.0),
                s(|r| r.rss_peak_mib, 1),
            ]
        })
        .collect()
}

const HEADERS: [&str; 9] = [
    "variant",
    "req/s",
    "% baseline",
    "avg (ms)",
    "p95 (ms)",
    "p99 (ms)",
    "CPU µs/req",
    "server CPU",
    "peak RSS (MiB)",
];

pub fn terminal(r: &Report) -> String {
    let mut s = String::new();
    for c in &r.cells {
        s += &format!(
            "\n== {} {} — {} rounds, medians (min–max) ==\n",
            c.proto, c.url, r.rounds
        );
        let rows = cell_rows(c);
        let widths: Vec<usize> = (0..9)
            .map(|i| {
                rows.iter()
                    .map(|row| row[i].chars().count())
                    .chain([HEADERS[i].len()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        for row in std::iter::once(HEADERS.map(String::from)).chain(rows) {
            let line: Vec<String> = row
                .iter()
                .zip(&widths)
                .map(|(v, w)| format!("{v:>w$}"))
                .collect();
            s += &line.join("  ");
            s += "\n";
        }
        for cmp in &c.comparisons {
            s += &format!("  {:<15} {}\n", cmp.metric, cmp.verdict);
        }
    }
    s
}

pub fn markdown(r: &Report) -> String {
    let e = &r.environment;
    let mut s = String::from("## A/B benchmark (loadterm ab)\n");
    for c in &r.cells {
        s += &format!("\n### {} `{}`\n\n", c.proto, c.url);
        s += &format!("| {} |\n|{}\n", HEADERS.join(" | "), "---|".repeat(9));
        for row in cell_rows(c) {
            s += &format!("| {} |\n", row.join(" | "));
        }
        s += &format!(
            "\nMedians over {} interleaved rounds (min–max); each run a fresh server process; {}.\n\n",
            r.rounds,
            if r.discarded_first_round { "first round discarded as warm-up" } else { "first round kept" }
        );
        for cmp in &c.comparisons {
            let ci = cmp
                .ci
                .map_or("—".into(), |(lo, hi)| format!("{lo:.3}–{hi:.3}"));
            let noise = cmp
                .noise_pct
                .map_or(String::new(), |n| format!(", A/A noise ±{n:.1}%"));
            s += &format!(
                "- **{}** ({}, ratio {:.3}, CI {}, Mann–Whitney p={}{}): {}\n",
                cmp.metric,
                cmp.variant,
                cmp.ratio,
                ci,
                cmp.p_mann_whitney
                    .map_or("n/a".into(), |p| format!("{p:.4}")),
                noise,
                cmp.verdict
            );
        }
    }
    s += "\n<details><summary>Environment and commands</summary>\n\n```\n";
    s += &format!(
        "loadterm {}\nkernel {}\nCPU {} ({} usable)\ngovernor {}, boost {}\nload average before start: {}\n{}\n",
        e.loadterm,
        e.kernel,
        e.cpu_model,
        e.cpus,
        e.governor.as_deref().unwrap_or("n/a"),
        e.boost.as_deref().unwrap_or("n/a"),
        e.load_average,
        e.command_line
    );
    for c in r.cells.iter().take(1) {
        for v in &c.variants {
            s += &format!("{}: {}   (URL {})\n", v.name, v.command, v.url);
        }
    }
    s += "```\n</details>\n";
    s
}

/// Per-round CPU µs/request of every variant (one panel per cell), and each comparison's ratio
/// with its CI.
pub fn svg(r: &Report) -> String {
    let (w, panel) = (760.0, 260.0);
    let h = panel * r.cells.len() as f64 + 20.0;
    let colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"];
    let mut s = format!("<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' font-family='sans-serif' font-size='12'>\n");
    for (i, c) in r.cells.iter().enumerate() {
        let y0 = 20.0 + panel * i as f64;
        let values: Vec<f64> = c.runs.iter().map(|r| r.cpu_us_per_req).collect();
        let (lo, hi) = values
            .iter()
            .fold((f64::INFINITY, 0.0f64), |(a, b), v| (a.min(*v), b.max(*v)));
        let (lo, hi) = (lo * 0.95, hi * 1.05 + 1e-9);
        let rounds = c.runs.iter().map(|r| r.round).max().unwrap_or(0).max(1) as f64;
        s += &format!(
            "<text x='10' y='{}'>{} {} — server CPU µs per request per round</text>\n",
            y0 + 12.0,
            c.proto,
            c.url
        );
        s += &format!(
            "<rect x='60' y='{}' width='420' height='180' fill='none' stroke='#999'/>\n",
            y0 + 20.0
        );
        s += &format!(
            "<text x='5' y='{}'>{hi:.1}</text><text x='5' y='{}'>{lo:.1}</text>\n",
            y0 + 30.0,
            y0 + 200.0
        );
        for (vi, v) in c.variants.iter().enumerate() {
            let color = colors[vi % colors.len()];
            for run in c.runs.iter().filter(|r| r.variant == v.name) {
                let x = 60.0 + 420.0 * run.round as f64 / rounds;
                let y = y0 + 200.0 - 180.0 * (run.cpu_us_per_req - lo) / (hi - lo);
                s += &format!("<circle cx='{x:.1}' cy='{y:.1}' r='4' fill='{color}'/>\n");
            }
            s += &format!(
                "<text x='70' y='{}' fill='{color}'>● {}</text>\n",
                y0 + 40.0 + 14.0 * vi as f64,
                v.name
            );
        }
        // Ratio CIs, on a log-free linear axis from 0.5 to 1.5.
        s += &format!(
            "<text x='500' y='{}'>ratio vs baseline (95% CI)</text>\n",
            y0 + 32.0
        );
        let xr = |v: f64| 500.0 + 240.0 * ((v - 0.5).clamp(0.0, 1.0));
        s += &format!(
            "<line x1='{0}' y1='{1}' x2='{0}' y2='{2}' stroke='#999' stroke-dasharray='3'/>\n",
            xr(1.0),
            y0 + 40.0,
            y0 + 210.0
        );
        for (k, cmp) in c.comparisons.iter().enumerate() {
            let y = y0 + 50.0 + 18.0 * k as f64;
            if let Some((l, u)) = cmp.ci {
                s += &format!("<line x1='{:.1}' y1='{y}' x2='{:.1}' y2='{y}' stroke='#333' stroke-width='2'/>\n", xr(l), xr(u));
            }
            let fill = if cmp.significant { "#d62728" } else { "#777" };
            s += &format!("<circle cx='{:.1}' cy='{y}' r='3' fill='{fill}'/><text x='{}' y='{}' font-size='10'>{}</text>\n", xr(cmp.ratio), 500, y - 4.0, cmp.metric);
        }
    }
    s + "</svg>\n"
}

//! Reports: terminal table, Markdown (shaped like the tables users post on mailing lists),
//! HTML (the Markdown's tables, the charts inline, the environment), JSON with every raw run.

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
    /// The load regime every verdict of this cell is about.
    pub regime: String,
    /// Measured rounds (planned from a pilot with `--target-effect`).
    pub rounds: usize,
    /// How the rounds were planned, or what the calibration found (sentences).
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Variant {
    pub name: String,
    pub command: String,
    pub url: String,
}

#[derive(Debug, Serialize)]
pub struct Report {
    /// SIGINT or SIGTERM ended the comparison: the cells hold the rounds measured until then.
    pub interrupted: bool,
    pub environment: Environment,
    pub discarded_first_round: bool,
    /// What this mode could not measure (endpoint mode: everything on the server side).
    pub not_measured: Option<String>,
    pub cells: Vec<Cell>,
}

fn stat(runs: &[Run], variant: &str, f: impl Fn(&Run) -> f64) -> (f64, f64, f64) {
    let v: Vec<f64> = runs
        .iter()
        .filter(|r| r.variant == variant)
        .map(f)
        .filter(|v| v.is_finite())
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
                if m.is_finite() {
                    format!("{m:.prec$} ({lo:.prec$}–{hi:.prec$})")
                } else {
                    "n/a".to_owned()
                }
            };
            let rps = stat(&c.runs, &v.name, |r| r.rps).0;
            let util = stat(&c.runs, &v.name, |r| r.metric("server_cpu_util")).0;
            [
                v.name.clone(),
                s(|r| r.rps, 0),
                format!("{:.0}", rps / base_rps * 100.0),
                s(|r| r.mean_ms, 2),
                s(|r| r.p95_ms, 2),
                s(|r| r.p99_ms, 2),
                s(|r| r.metric("cpu_us_per_req"), 2),
                if util.is_finite() {
                    format!("{:.0}%", util * 100.0)
                } else {
                    "n/a".to_owned()
                },
                s(|r| r.metric("rss_peak_mib"), 1),
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

/// One line per flagged run: "round 3, B: foreign CPU 7.2% on the server cores; …".
fn flag_lines(c: &Cell) -> Vec<String> {
    c.aa_runs
        .iter()
        .map(|r| ("A/A ", r))
        .chain(c.runs.iter().map(|r| ("", r)))
        .filter(|(_, r)| !r.checks.flags.is_empty())
        .map(|(aa, r)| {
            format!(
                "{aa}round {}, {}: {}",
                r.round + 1,
                r.variant,
                r.checks.flags.join("; ")
            )
        })
        .collect()
}

/// The contamination readings of every run in one line each, for the reader who wants to see
/// the clean runs too.
fn checks_table(c: &Cell) -> String {
    let mut s = String::from(
        "| round | variant | steal | foreign CPU (server cores) | client cores busy | load avg | req/s first → last third |\n|---|---|---|---|---|---|---|\n",
    );
    for r in &c.runs {
        let k = &r.checks;
        s += &format!(
            "| {} | {} | {:.1}% | {} | {:.0}% | {:.2} | {} |\n",
            r.round + 1,
            r.variant,
            k.steal_pct,
            k.foreign_pct.map_or("n/a".into(), |f| format!("{f:.1}%")),
            k.client_busy_pct,
            k.settings.load1,
            k.steady
                .as_ref()
                .map_or("n/a (under 3 s)".into(), |t| format!(
                    "{:.0} → {:.0} ({:+.1}%)",
                    t.first, t.last, t.change_pct
                )),
        );
    }
    s
}

fn cell_heading(r: &Report, c: &Cell) -> String {
    format!(
        "{} rounds, {}; regime: {}",
        c.rounds,
        if r.discarded_first_round {
            "first round discarded as warm-up"
        } else {
            "first round kept"
        },
        c.regime
    )
}

pub fn terminal(r: &Report) -> String {
    let mut s = String::new();
    if let Some(n) = &r.not_measured {
        s += &format!("\nnot measured: {n}\n");
    }
    for c in &r.cells {
        s += &format!(
            "\n== {} {} — medians (min–max); {} ==\n",
            c.proto,
            c.url,
            cell_heading(r, c)
        );
        let rows = cell_rows(c);
        let widths: Vec<usize> = (0..9)
            .map(|i| {
                rows.iter()
                    .map(|row| row[i].chars().count())
                    .chain([HEADERS[i].chars().count()])
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
        s += &format!(
            "verdicts ({}; change = variant / baseline − 1):\n",
            c.regime
        );
        for cmp in &c.comparisons {
            s += &format!("  {}\n", cmp.verdict);
        }
        for n in &c.notes {
            s += &format!("  {n}\n");
        }
        for f in flag_lines(c) {
            s += &format!("  flagged: {f}\n");
        }
    }
    s
}

fn environment_text(r: &Report) -> String {
    let e = &r.environment;
    let mut s = format!(
        "loadterm {}\nkernel {}\nCPU {} ({} usable)\ngovernor {}, boost {}, THP {}\nload average before start: {}\n{}\n",
        e.loadterm,
        e.kernel,
        e.cpu_model,
        e.cpus,
        e.governor.as_deref().unwrap_or("n/a"),
        e.boost.as_deref().unwrap_or("n/a"),
        e.thp.as_deref().unwrap_or("n/a"),
        e.load_average,
        e.command_line
    );
    for c in r.cells.iter().take(1) {
        for v in &c.variants {
            s += &format!("{}: {}   (URL {})\n", v.name, v.command, v.url);
        }
    }
    s
}

fn markdown_cell(r: &Report, c: &Cell) -> String {
    let mut s = format!("| {} |\n|{}\n", HEADERS.join(" | "), "---|".repeat(9));
    for row in cell_rows(c) {
        s += &format!("| {} |\n", row.join(" | "));
    }
    s += &format!(
        "\nMedians (min–max) over paired rounds; {}.\n\n",
        cell_heading(r, c)
    );
    s += &format!(
        "Verdicts (regime: {}; change = variant / baseline − 1, negative = below the baseline):\n\n",
        c.regime
    );
    for cmp in &c.comparisons {
        let noise = cmp
            .noise_pct
            .map_or(String::new(), |n| format!(", A/A noise ±{n:.1}%"));
        s += &format!(
            "- **{}** ({}; Mann–Whitney p={}{})\n",
            cmp.verdict,
            cmp.metric,
            cmp.p_mann_whitney
                .map_or("n/a".into(), |p| format!("{p:.4}")),
            noise,
        );
    }
    for n in &c.notes {
        s += &format!("- {n}\n");
    }
    let flags = flag_lines(c);
    s += &format!(
        "\nContamination checks: {}\n\n",
        if flags.is_empty() {
            "no run flagged.".to_owned()
        } else {
            format!("{} run(s) flagged.", flags.len())
        }
    );
    for f in flags {
        s += &format!("- flagged: {f}\n");
    }
    s += "\n<details><summary>Per-run checks</summary>\n\n";
    s += &checks_table(c);
    s += "\n</details>\n";
    s
}

pub fn markdown(r: &Report) -> String {
    let mut s = String::from("## A/B benchmark (loadterm ab)\n");
    if let Some(n) = &r.not_measured {
        s += &format!("\n**Not measured:** {n}\n");
    }
    for c in &r.cells {
        s += &format!("\n### {} `{}`\n\n", c.proto, c.url);
        s += &markdown_cell(r, c);
    }
    s += "\n<details><summary>Environment and commands</summary>\n\n```\n";
    s += &environment_text(r);
    s += "```\n</details>\n";
    s
}

fn escape(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A self-contained HTML page: per cell the chart inline (`chart` draws it), the table and the
/// verdicts; then the environment.
pub fn html(r: &Report, chart: impl Fn(&Cell) -> anyhow::Result<String>) -> anyhow::Result<String> {
    let mut s = String::from(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>loadterm ab</title>\n<style>body{font-family:sans-serif;max-width:1040px;margin:auto}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}td:first-child{text-align:left}.flag{color:#b00}</style></head><body>\n<h1>A/B benchmark (loadterm ab)</h1>\n",
    );
    if let Some(n) = &r.not_measured {
        s += &format!("<p><b>Not measured:</b> {}</p>\n", escape(n));
    }
    for c in &r.cells {
        s += &format!("<h2>{} <code>{}</code></h2>\n", c.proto, escape(&c.url));
        s += &chart(c)?;
        s += "\n<table>\n<tr>";
        for h in HEADERS {
            s += &format!("<th>{}</th>", escape(h));
        }
        s += "</tr>\n";
        for row in cell_rows(c) {
            s += "<tr>";
            for v in row {
                s += &format!("<td>{}</td>", escape(&v));
            }
            s += "</tr>\n";
        }
        s += &format!("</table>\n<p>{}.</p>\n", escape(&cell_heading(r, c)));
        s += &format!(
            "<p>Verdicts (regime: {}; change = variant / baseline − 1):</p>\n<ul>\n",
            escape(&c.regime)
        );
        for cmp in &c.comparisons {
            s += &format!("<li>{}</li>\n", escape(&cmp.verdict));
        }
        for n in &c.notes {
            s += &format!("<li>{}</li>\n", escape(n));
        }
        s += "</ul>\n";
        let flags = flag_lines(c);
        if flags.is_empty() {
            s += "<p>Contamination checks: no run flagged.</p>\n";
        } else {
            s += "<p>Contamination checks:</p>\n<ul>\n";
            for f in flags {
                s += &format!("<li class=\"flag\">flagged: {}</li>\n", escape(&f));
            }
            s += "</ul>\n";
        }
    }
    s += &format!(
        "<h2>Environment and commands</h2>\n<pre>{}</pre>\n</body></html>\n",
        escape(&environment_text(r))
    );
    Ok(s)
}

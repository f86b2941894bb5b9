//! Reports: terminal table, Markdown (shaped like the tables users post on mailing lists),
//! HTML (the Markdown's tables, the charts inline, the environment), JSON with every raw run.

use crate::compare::Comparison;
use crate::measure::Run;
use crate::metric::Metric;
use crate::results::{Cell, MatrixReport};
use crate::stats::median;
use base64::Engine;

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
            let util = stat(&c.runs, &v.name, |r| r.server_cpu_util.unwrap_or(f64::NAN)).0;
            [
                v.name.clone(),
                s(|r| r.rps, 0),
                format!("{:.0}", rps / base_rps * 100.0),
                s(|r| r.mean_ms, 2),
                s(|r| r.p95_ms, 2),
                s(|r| r.p99_ms, 2),
                s(|r| Metric::CpuUsPerReq.value(r), 2),
                if util.is_finite() {
                    format!("{:.0}%", util * 100.0)
                } else {
                    "n/a".to_owned()
                },
                s(|r| Metric::RssPeakMib.value(r), 1),
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
    "peak anon RSS (MiB)",
];

/// One line per flagged run: "round 3, B: foreign CPU 7.2% on the server cores; …". The A/A
/// twin's runs are named as such; the baseline's, which `aa_runs` holds too, once.
fn flag_lines(c: &Cell) -> Vec<String> {
    let is_variant = |r: &&Run| c.variants.iter().any(|v| v.name == r.variant);
    c.aa_runs
        .iter()
        .filter(|r| !is_variant(r))
        .map(|r| ("A/A ", r))
        .chain(c.runs.iter().map(|r| ("", r)))
        .filter(|(_, r)| !r.checks.flags.is_empty())
        .map(|(aa, r)| {
            format!(
                "{aa}round {}, {}: {}",
                r.round + 1,
                r.variant,
                crate::contam::joined(&r.checks.flags)
            )
        })
        .collect()
}

/// The contamination readings of every run in one line each, for the reader who wants to see
/// the clean runs too.
fn checks_table(c: &Cell) -> String {
    let mut s = String::from(
        "| round | variant | steal | foreign CPU (server cores) | client cores busy | irq + softirq (server cores) | req/s first → last third |\n|---|---|---|---|---|---|---|\n",
    );
    for r in &c.runs {
        let k = &r.checks;
        s += &format!(
            "| {} | {} | {:.1}% | {} | {:.0}% | {:.1}% | {} |\n",
            r.round + 1,
            r.variant,
            k.steal_pct,
            k.foreign_pct.map_or("n/a".into(), |f| format!("{f:.1}%")),
            k.client_busy_pct,
            k.softirq_pct,
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

/// A series' steps in the headline metric, each against the one before, and how they add up:
/// the product of the steps' ratios beside the last variant's own comparison with the base.
pub(crate) fn series_lines(c: &Cell) -> Vec<String> {
    let headline = c.headline();
    let steps: Vec<&Comparison> = c.steps.iter().filter(|k| k.metric == headline).collect();
    if steps.is_empty() {
        return Vec::new();
    }
    let mut lines: Vec<String> = steps.iter().map(|k| k.verdict.clone()).collect();
    let product = steps.iter().map(|k| k.ratio).product::<f64>();
    if let Some(last) = c.comparisons.iter().rfind(|k| k.metric == headline) {
        lines.push(format!(
            "the {} steps' changes multiply to {}; {} against {} directly: {}{}",
            steps.len(),
            crate::compare::signed_pct((product - 1.0) * 100.0),
            last.variant,
            c.variants[0].name,
            crate::compare::signed_pct(last.change_pct),
            last.ci_pct.map_or(String::new(), |(lo, hi)| format!(
                " (95% CI {} to {})",
                crate::compare::signed_pct(lo),
                crate::compare::signed_pct(hi)
            ))
        ));
    }
    lines
}

const PROFILE_HEADERS: [&str; 5] = [
    "variant",
    "function",
    "self µs/req, baseline → variant",
    "self: variant − baseline (95% CI)",
    "inclusive: variant − baseline (95% CI)",
];

/// The `n` functions of each variant whose self time moved most, a row each.
fn profile_rows(c: &Cell, n: usize) -> Vec<[String; 5]> {
    let Some(p) = &c.profile else {
        return Vec::new();
    };
    c.variants[1..]
        .iter()
        .flat_map(|v| p.top(&v.name, n))
        .map(|f| {
            [
                f.variant.clone(),
                f.function.clone(),
                format!("{:.3} → {:.3}", f.own.baseline_us, f.own.variant_us),
                f.own.text(),
                f.inclusive.text(),
            ]
        })
        .collect()
}

/// "Where the CPU went" in words: per variant, the total sampled difference.
fn profile_heading(c: &Cell) -> Option<String> {
    let p = c.profile.as_ref()?;
    let totals: Vec<String> = p
        .totals
        .iter()
        .map(|(name, d)| {
            format!(
                "{name} − {}: {} per request sampled",
                c.variants[0].name,
                d.text()
            )
        })
        .collect();
    Some(format!(
        "where the CPU went ({} profiled rounds; µs per request; self: samples in the function itself, inclusive: with what it calls): {}",
        p.rounds,
        totals.join("; ")
    ))
}

/// A level's cell is its request at that level (`--levels`).
fn level_words(c: &Cell) -> String {
    c.level.map_or_else(String::new, |l| format!(", level {l}"))
}

fn cell_heading(r: &MatrixReport, c: &Cell) -> String {
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

pub(crate) fn terminal(r: &MatrixReport) -> String {
    let mut s = String::new();
    if let Some(n) = &r.not_measured {
        s += &format!("\nnot measured: {n}\n");
    }
    for c in &r.cells {
        s += &format!(
            "\n== {} {}{} — medians (min–max); {} ==\n",
            c.proto,
            c.url,
            level_words(c),
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
        let series = series_lines(c);
        if !series.is_empty() {
            s += "series steps (each against the one before, in the same rounds):\n";
            for l in series {
                s += &format!("  {l}\n");
            }
        }
        for n in &c.notes {
            s += &format!("  {n}\n");
        }
        for f in flag_lines(c) {
            s += &format!("  flagged: {f}\n");
        }
        if let Some(h) = profile_heading(c) {
            s += &format!("{h}\n");
            for row in profile_rows(c, 10) {
                s += &format!(
                    "  {}: {}: self {}, inclusive {}\n",
                    row[0], row[1], row[3], row[4]
                );
            }
        }
    }
    let curves = crate::levels::curves(r);
    if !curves.is_empty() {
        s += "\n== by load level ==\n";
        s += &crate::levels::terminal(&curves);
    }
    s
}

fn environment_text(r: &MatrixReport) -> String {
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
    if let Some(h) = &e.server_host {
        s += &format!(
            "servers on {} through the agent at {}: kernel {}, CPU {} ({} usable); its clock {:+.3} ms from this one's (round trip {:.3} ms); the clients ran on {}\n",
            h.facts.hostname,
            h.agent,
            h.facts.kernel,
            h.facts.cpu_model,
            h.facts.cpus,
            h.clock_offset_ms,
            h.round_trip_ms,
            e.hostname
        );
    }
    for c in r.cells.iter().take(1) {
        for v in &c.variants {
            let acc = v
                .accounting
                .map_or(String::new(), |a| format!("   (CPU from {a})"));
            s += &format!("{}: {}   (URL {}){acc}\n", v.name, v.command, v.url);
        }
    }
    s
}

fn markdown_cell(r: &MatrixReport, c: &Cell) -> String {
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
    let series = series_lines(c);
    if !series.is_empty() {
        s += "\nSeries steps (each against the one before, in the same rounds):\n\n";
        for l in series {
            s += &format!("- **{l}**\n");
        }
        s += "\n";
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
    // Many flags (a busy machine flags most runs) are folded, as in the HTML report.
    let fold = flags.len() > 5;
    if fold {
        s += "<details><summary>Flagged runs</summary>\n\n";
    }
    for f in &flags {
        s += &format!("- flagged: {f}\n");
    }
    if fold {
        s += "\n</details>\n";
    }
    if let Some(h) = profile_heading(c) {
        s += &format!(
            "\n{h}.\n\n| {} |\n|{}\n",
            PROFILE_HEADERS.join(" | "),
            "---|".repeat(5)
        );
        for row in profile_rows(c, 20) {
            let cells: Vec<String> = row.iter().map(|v| v.replace('|', "\\|")).collect();
            s += &format!("| {} |\n", cells.join(" | "));
        }
    }
    s += "\n<details><summary>Per-run checks</summary>\n\n";
    s += &checks_table(c);
    s += "\n</details>\n";
    s
}

pub(crate) fn markdown(r: &MatrixReport) -> String {
    let mut s = String::from("## A/B benchmark (loadterm ab)\n");
    if let Some(n) = &r.not_measured {
        s += &format!("\n**Not measured:** {n}\n");
    }
    for c in &r.cells {
        s += &format!("\n### {} `{}`{}\n\n", c.proto, c.url, level_words(c));
        s += &markdown_cell(r, c);
    }
    let curves = crate::levels::curves(r);
    if !curves.is_empty() {
        s += "\n## By load level\n\n";
        s += &crate::levels::markdown(&curves);
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
/// A table: the header row, then the rows, every cell escaped.
fn html_table<R: IntoIterator<Item = String>>(
    head: &[impl AsRef<str>],
    rows: impl IntoIterator<Item = R>,
) -> String {
    let mut s = String::from("<table>\n<tr>");
    for h in head {
        s += &format!("<th>{}</th>", escape(h.as_ref()));
    }
    s += "</tr>\n";
    for row in rows {
        s += "<tr>";
        for v in row {
            s += &format!("<td>{}</td>", escape(&v));
        }
        s += "</tr>\n";
    }
    s + "</table>\n"
}

pub(crate) fn html(
    r: &MatrixReport,
    chart: impl Fn(&Cell) -> anyhow::Result<String>,
) -> anyhow::Result<String> {
    let mut s = String::from(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>loadterm ab</title>\n<style>body{font-family:sans-serif;max-width:1040px;margin:auto}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}td:first-child{text-align:left}.flag{color:#b00}</style></head><body>\n<h1>A/B benchmark (loadterm ab)</h1>\n",
    );
    if let Some(n) = &r.not_measured {
        s += &format!("<p><b>Not measured:</b> {}</p>\n", escape(n));
    }
    for c in &r.cells {
        s += &format!(
            "<h2>{} <code>{}</code>{}</h2>\n",
            c.proto,
            escape(&c.url),
            level_words(c)
        );
        s += &chart(c)?;
        s += "\n";
        s += &html_table(&HEADERS, cell_rows(c));
        s += &format!("<p>{}.</p>\n", escape(&cell_heading(r, c)));
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
        let series = series_lines(c);
        if !series.is_empty() {
            s += "<p>Series steps (each against the one before, in the same rounds):</p>\n<ul>\n";
            for l in series {
                s += &format!("<li>{}</li>\n", escape(&l));
            }
            s += "</ul>\n";
        }
        if let (Some(h), Some(p)) = (profile_heading(c), &c.profile) {
            s += &format!("<h3>Where the CPU went</h3>\n<p>{}.</p>\n", escape(&h));
            for (name, stacks) in &p.flame {
                let svg = crate::profile::differential_svg(
                    &format!("{name} against {} (ns per request)", c.variants[0].name),
                    stacks,
                )?;
                // An image, not inline: inferno's SVG calls its script on load.
                s += &format!(
                    "<p><img alt=\"differential flame graph, {}\" style=\"max-width:100%\" src=\"data:image/svg+xml;base64,{}\"></p>\n",
                    escape(name),
                    base64::engine::general_purpose::STANDARD.encode(svg)
                );
            }
            s += &html_table(&PROFILE_HEADERS, profile_rows(c, 30));
        }
        let flags = flag_lines(c);
        if flags.is_empty() {
            s += "<p>Contamination checks: no run flagged.</p>\n";
        } else {
            // Folded: a long list (a busy machine flags most runs) would push the next cell
            // and the environment pages down; the count says whether to open it.
            s += &format!(
                "<details><summary class=\"flag\">Contamination checks: {} run(s) flagged</summary>\n<ul>\n",
                flags.len()
            );
            for f in flags {
                s += &format!("<li class=\"flag\">flagged: {}</li>\n", escape(&f));
            }
            s += "</ul>\n</details>\n";
        }
    }
    let curves = crate::levels::curves(r);
    for g in crate::levels::by_request(&curves) {
        s += &format!(
            "<h2>{} <code>{}</code> by load level</h2>\n",
            g[0].proto,
            escape(g[0].url)
        );
        s += &crate::plot::levels_svg(&g)?;
        let (head, rows) = crate::levels::table(&g);
        s += "\n";
        s += &html_table(&head, rows);
    }
    s += &format!(
        "<h2>Environment and commands</h2>\n<pre>{}</pre>\n</body></html>\n",
        escape(&environment_text(r))
    );
    Ok(s)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::compare::{self, tests::run};
    use crate::env::Environment;
    use crate::results::Variant;

    /// A report as ab writes it: 12 rounds of A, B (about 8% less CPU) and the A/A twin A'
    /// (`--aa`), the first `flagged` runs flagged by the contamination checks.
    pub(crate) fn sample(flagged: usize) -> MatrixReport {
        let mut runs = Vec::new();
        for k in 0..12 {
            let j = 1.0 + (k as f64 * 0.37).sin() * 0.02;
            runs.push(run("A", k, 10.0 * j));
            runs.push(run("B", k, 9.2 * j * (1.0 + (k as f64).cos() * 0.01)));
            runs.push(run(
                "A'",
                k,
                10.0 * j * (1.0 + (k as f64 * 1.3).sin() * 0.01),
            ));
        }
        for (n, r) in runs.iter_mut().take(flagged).enumerate() {
            r.checks.flags.push(crate::contam::Flag::ClientWindowOff {
                ms: 5.0 + n as f64,
                host: format!("<pid {n}>"),
            });
        }
        let noise = |m: Metric| {
            let (lo, hi) = compare::compare(m, "A", "A'", &runs, None)?.ci_pct?;
            Some(lo.abs().max(hi.abs()))
        };
        let comparisons = Metric::COMPARED
            .into_iter()
            .filter_map(|m| compare::compare(m, "A", "B", &runs, noise(m)))
            .collect();
        let aa_runs = runs.iter().filter(|r| r.variant != "B").cloned().collect();
        let runs = runs.into_iter().filter(|r| r.variant != "A'").collect();
        let variant = |name: &str| Variant {
            name: name.to_owned(),
            command: format!("loadterm serve -L {{host}}:{{clear_port}}:{{tls_port}} # {name}"),
            url: "/?s=1k".to_owned(),
            accounting: Some(crate::cgroup::Accounting::CgroupV1),
        };
        MatrixReport {
            interrupted: false,
            environment: Environment {
                loadterm: "0.0.0".into(),
                hostname: "lab".into(),
                kernel: "6.1".into(),
                cpu_model: "test CPU".into(),
                cpus: 2,
                governor: None,
                boost: None,
                thp: Some("madvise".into()),
                load_average: "0.10 0.20 0.30 1/100 1".into(),
                command_line: "loadterm ab --a 'serve' --b 'serve --burn 3' --aa".into(),
                server_host: None,
                client_hosts: Vec::new(),
            },
            discarded_first_round: true,
            not_measured: None,
            cells: vec![Cell {
                proto: crate::protocol::Protocol::H1,
                url: "/?s=1k".into(),
                variants: vec![variant("A"), variant("B")],
                runs,
                aa_runs,
                comparisons,
                steps: Vec::new(),
                regime: "open loop at 5000 req/s".into(),
                level: None,
                rate: Some(5000.0),
                closed_pilot: Vec::new(),
                rounds: 12,
                notes: vec!["servers kept".into()],
                profiled_runs: Vec::new(),
                profile: None,
                capacity: Vec::new(),
            }],
        }
    }

    /// Each flagged run is listed once (the baseline's runs are in `aa_runs` too), the twin's
    /// as A/A; the list is folded under a summary that counts it.
    #[test]
    fn flags_are_listed_once_and_folded() {
        let r = sample(30);
        let lines = flag_lines(&r.cells[0]);
        assert_eq!(lines.len(), 30, "{lines:#?}");
        assert_eq!(lines.iter().filter(|l| l.starts_with("A/A ")).count(), 10);
        let page = html(&r, |_| Ok("<svg></svg>".to_owned())).unwrap();
        assert!(
            page.contains("<details><summary class=\"flag\">Contamination checks: 30 run(s) flagged</summary>"),
            "{page}"
        );
        assert_eq!(page.matches("<li class=\"flag\">").count(), 30);
        assert!(page.contains("&lt;pid 0&gt;"), "flags are escaped");
        let page = html(&sample(0), |_| Ok(String::new())).unwrap();
        assert!(
            page.contains("Contamination checks: no run flagged.") && !page.contains("<details")
        );
    }

    /// Debian's headless `chromium`, which the HTML test drives. Missing, the test fails, unless
    /// LOADTERM_ALLOW_MISSING_TOOLS is set: then it says that it skipped.
    fn chromium() -> Option<&'static str> {
        for name in ["chromium", "chromium-browser"] {
            let found = std::process::Command::new("sh")
                .args(["-c", &format!("command -v {name}")])
                .output()
                .is_ok_and(|o| o.status.success());
            if found {
                return Some(name);
            }
        }
        if std::env::var_os("LOADTERM_ALLOW_MISSING_TOOLS").is_some() {
            eprintln!("skipped: chromium is not installed (LOADTERM_ALLOW_MISSING_TOOLS is set)");
            return None;
        }
        panic!(
            "chromium is not installed (apt-get install chromium, or scripts/install-test-deps.sh); set LOADTERM_ALLOW_MISSING_TOOLS=1 to skip"
        );
    }

    /// Open `page` in headless chromium with a script of ours appended that reads the laid-out
    /// page: (what the script found, every console message the page produced).
    fn browse(
        browser: &str,
        dir: &std::path::Path,
        name: &str,
        page: &str,
    ) -> (String, Vec<String>) {
        const PROBE: &str = r#"<script>
(function () {
  var svgs = [];
  document.querySelectorAll('svg').forEach(function (s) {
    var b = s.getBoundingClientRect();
    svgs.push(Math.round(b.width) + 'x' + Math.round(b.height) + '/' + s.querySelectorAll('circle').length);
  });
  var folded = 0;
  document.querySelectorAll('details').forEach(function (d) {
    var list = d.querySelector('ul');
    if (!d.open && list && !list.checkVisibility()) folded++;
  });
  document.body.setAttribute('data-probe', 'svgs=' + svgs.join(',') + ';folded=' + folded +
    ';height=' + document.documentElement.scrollHeight);
})();
</script>"#;
        let page = page.replace("</body>", &format!("{PROBE}</body>"));
        let file = dir.join(name);
        std::fs::write(&file, page).unwrap();
        // Into files, not pipes: chromium's helper processes keep a pipe open for seconds after
        // the browser exits, and reading it to its end would wait for them.
        let (out, err) = (
            dir.join(format!("{name}.dom")),
            dir.join(format!("{name}.log")),
        );
        let status = std::process::Command::new(browser)
            .args([
                "--headless",
                "--disable-gpu",
                "--no-sandbox",
                "--no-first-run",
            ])
            .args(["--enable-logging=stderr", "--v=0", "--window-size=1280,900"])
            .arg(format!("--user-data-dir={}", dir.join("profile").display()))
            .arg("--dump-dom")
            .arg(format!("file://{}", file.display()))
            .stdin(std::process::Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .status()
            .expect("run chromium");
        let dom = std::fs::read_to_string(&out).unwrap();
        let err = std::fs::read_to_string(&err).unwrap();
        assert!(status.success(), "chromium failed: {err}");
        let probe = dom
            .split("data-probe=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap_or_else(|| panic!("the probe did not run: {dom}\n{err}"))
            .to_owned();
        let console = err
            .lines()
            .filter(|l| l.contains(":CONSOLE"))
            .map(str::to_owned)
            .collect();
        (probe, console)
    }

    /// With `--levels`, the HTML report's curve in a real browser: no console message, and the
    /// levels chart drawn at its size below the cells' charts, with its points and legend dot.
    #[test]
    fn levels_chart_renders_in_chromium() {
        let Some(browser) = chromium() else { return };
        let dir = std::env::temp_dir().join(format!("loadterm-ab-levels-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let page = html(&crate::levels::tests::at_levels(), crate::plot::cell_svg).unwrap();
        let (probe, console) = browse(browser, &dir, "levels.html", &page);
        assert!(console.is_empty(), "{console:#?}");
        let svgs = probe
            .split(';')
            .find_map(|f| f.strip_prefix("svgs="))
            .unwrap_or_else(|| panic!("svgs in {probe}"));
        // Two cells' charts, then the curve: 2 levels' points and B's legend dot.
        assert_eq!(svgs, "1000x360/34,1000x360/34,1000x380/3", "{probe}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The HTML report in a real browser (Debian's headless chromium): no console message at
    /// all (the page has no script; a message would be an error), the chart drawn at its size
    /// with its points, and 30 contamination flags folded so that the page is no longer than
    /// with none. A page with a deliberate console error first shows that errors are seen.
    #[test]
    fn html_report_renders_in_chromium() {
        let Some(browser) = chromium() else { return };
        let dir = std::env::temp_dir().join(format!("loadterm-ab-chromium-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let broken = "<!DOCTYPE html><html><body><p>x</p><script>console.error('probe-error'); undefined_function();</script></body></html>";
        let (_, console) = browse(browser, &dir, "broken.html", broken);
        assert!(
            console.iter().any(|l| l.contains("probe-error"))
                && console.iter().any(|l| l.contains("undefined_function")),
            "chromium's console messages are not where this test looks: {console:?}"
        );
        let mut heights = Vec::new();
        for flagged in [0, 30] {
            let page = html(&sample(flagged), crate::plot::cell_svg).unwrap();
            let (probe, console) = browse(browser, &dir, &format!("report{flagged}.html"), &page);
            assert!(console.is_empty(), "{flagged} flags: {console:#?}");
            let field = |key: &str| {
                probe
                    .split(';')
                    .find_map(|f| f.strip_prefix(key))
                    .unwrap_or_else(|| panic!("{key} in {probe}"))
                    .to_owned()
            };
            // One chart, 1000×360 as drawn, its 24 points and 2 legend dots and 8 estimates
            // (CPU, user, system, req/s, p99, mean, bytes, memory; no softirq on shared cores).
            assert_eq!(field("svgs="), "1000x360/34", "{probe}");
            assert_eq!(
                field("folded="),
                if flagged > 0 { "1" } else { "0" },
                "{probe}"
            );
            heights.push(field("height=").parse::<u32>().unwrap());
        }
        assert!(
            heights[1] <= heights[0] + 40,
            "30 flags lengthen the page from {} to {} px",
            heights[0],
            heights[1]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

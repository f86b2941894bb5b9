//! `--levels`: the same comparison at several loads, each a fraction of the baseline's
//! closed-loop throughput. Every level is a cell of its own (its pilot, its paired rounds);
//! here the cells of one request become a curve per variant: its headline verdict at each
//! level, as a table and a chart (plot.rs).

use crate::compare::{signed_pct, Comparison};
use crate::protocol::Protocol;
use crate::results::{Cell, MatrixReport};

/// One variant's headline verdicts across the levels of one request (protocol × URL).
pub(crate) struct EffectCurve<'a> {
    pub proto: Protocol,
    pub url: &'a str,
    pub baseline: &'a str,
    pub variant: &'a str,
    /// By level, lowest first.
    pub points: Vec<LevelVerdict<'a>>,
}

pub(crate) struct LevelVerdict<'a> {
    pub level: f64,
    /// The open-loop rate the level's rounds ran at, per variant.
    pub rate: Option<f64>,
    pub verdict: &'a Comparison,
}

/// The curves of every request measured at levels, in the order the cells ran; empty
/// without `--levels`.
pub(crate) fn curves(r: &MatrixReport) -> Vec<EffectCurve<'_>> {
    let mut out: Vec<EffectCurve> = Vec::new();
    for c in &r.cells {
        let Some(level) = c.level else { continue };
        let metric = c.headline();
        for v in c.comparisons.iter().filter(|v| v.metric == metric) {
            let point = LevelVerdict {
                level,
                rate: c.rate,
                verdict: v,
            };
            match out
                .iter_mut()
                .find(|k| same_request(k, c) && k.variant == v.variant)
            {
                Some(k) => k.points.push(point),
                None => out.push(EffectCurve {
                    proto: c.proto,
                    url: &c.url,
                    baseline: &c.variants[0].name,
                    variant: &v.variant,
                    points: vec![point],
                }),
            }
        }
    }
    for k in &mut out {
        k.points.sort_by(|a, b| a.level.total_cmp(&b.level));
    }
    out
}

fn same_request(k: &EffectCurve, c: &Cell) -> bool {
    k.proto == c.proto && k.url == c.url
}

/// The curves grouped by request, for one chart and one table each.
pub(crate) fn by_request<'a, 'b>(curves: &'b [EffectCurve<'a>]) -> Vec<Vec<&'b EffectCurve<'a>>> {
    let mut groups: Vec<Vec<&EffectCurve>> = Vec::new();
    for k in curves {
        match groups
            .iter_mut()
            .find(|g| g[0].proto == k.proto && g[0].url == k.url)
        {
            Some(g) => g.push(k),
            None => groups.push(vec![k]),
        }
    }
    groups
}

/// "h1 /?s=1k, B against A (CPU per request), by load level:"
pub(crate) fn heading(k: &EffectCurve) -> String {
    let words = k.points.first().map_or("", |p| p.verdict.metric.label());
    format!(
        "{} {}, {} against {} ({words}), by load level (a fraction of the baseline's closed-loop throughput)",
        k.proto, k.url, k.variant, k.baseline
    )
}

/// "0.25 (5100 req/s): +5.0% (95% CI +3.8% to +6.2%), significant"
pub(crate) fn point_line(p: &LevelVerdict) -> String {
    format!(
        "{} ({}): {}",
        p.level,
        rate_words(p.rate),
        change_words(p.verdict)
    )
}

pub(crate) fn rate_words(rate: Option<f64>) -> String {
    rate.map_or_else(|| "closed loop".to_owned(), |r| format!("{r:.0} req/s"))
}

pub(crate) fn change_words(c: &Comparison) -> String {
    let ci = c.ci_pct.map_or_else(
        || "no interval".to_owned(),
        |(lo, hi)| format!("95% CI {} to {}", signed_pct(lo), signed_pct(hi)),
    );
    format!(
        "{} ({ci}){}",
        signed_pct(c.change_pct),
        if c.significant {
            ", significant"
        } else {
            ", not significant"
        }
    )
}

/// Every curve in words, for the terminal.
pub(crate) fn terminal(curves: &[EffectCurve]) -> String {
    let mut s = String::new();
    for k in curves {
        s += &format!("{}:\n", heading(k));
        for p in &k.points {
            s += &format!("  {}\n", point_line(p));
        }
    }
    s
}

/// A Markdown table per request: a row per level, a column per variant.
pub(crate) fn markdown(curves: &[EffectCurve]) -> String {
    let mut s = String::new();
    for g in by_request(curves) {
        let (head, rows) = table(&g);
        s += &format!(
            "### {} `{}` by load level\n\n| {} |\n|{}|\n",
            g[0].proto,
            g[0].url,
            head.join(" | "),
            vec!["---"; head.len()].join("|")
        );
        for row in rows {
            s += &format!("| {} |\n", row.join(" | "));
        }
        s += "\n";
    }
    s
}

/// A request's curves as a table: the header, then a row per level.
pub(crate) fn table(g: &[&EffectCurve]) -> (Vec<String>, Vec<Vec<String>>) {
    let words = g[0].points.first().map_or("", |p| p.verdict.metric.label());
    let mut head = vec!["level".to_owned(), "rate".to_owned()];
    head.extend(
        g.iter()
            .map(|k| format!("{}: change in {words} (95% CI)", k.variant)),
    );
    let mut levels: Vec<(f64, Option<f64>)> = g
        .iter()
        .flat_map(|k| k.points.iter().map(|p| (p.level, p.rate)))
        .collect();
    levels.sort_by(|a, b| a.0.total_cmp(&b.0));
    levels.dedup_by(|a, b| a.0 == b.0);
    let rows = levels
        .into_iter()
        .map(|(level, rate)| {
            let mut row = vec![level.to_string(), rate_words(rate)];
            row.extend(g.iter().map(|k| {
                k.points
                    .iter()
                    .find(|p| p.level == level)
                    .map_or_else(|| "n/a".to_owned(), |p| change_words(p.verdict))
            }));
            row
        })
        .collect();
    (head, rows)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The sample report's cell measured at two levels, the higher one first (as a user may
    /// list them), B's CPU change larger at the lower level.
    pub(crate) fn at_levels() -> MatrixReport {
        let mut r = crate::report::tests::sample(0);
        let mut low = r.cells[0].clone();
        low.level = Some(0.25);
        low.rate = Some(2500.0);
        for c in &mut low.comparisons {
            c.change_pct -= 3.0;
        }
        let high = &mut r.cells[0];
        high.level = Some(0.9);
        high.rate = Some(9000.0);
        r.cells.push(low);
        r
    }

    #[test]
    fn a_curve_per_variant_in_level_order() {
        let r = at_levels();
        let k = curves(&r);
        assert_eq!(k.len(), 1, "one variant besides the baseline");
        assert_eq!((k[0].variant, k[0].baseline), ("B", "A"));
        let levels: Vec<f64> = k[0].points.iter().map(|p| p.level).collect();
        assert_eq!(levels, [0.25, 0.9]);
        assert!(k[0].points[0].verdict.change_pct < k[0].points[1].verdict.change_pct);
        let (head, rows) = table(&by_request(&k)[0]);
        assert_eq!(head[2], "B: change in CPU per request (95% CI)");
        assert_eq!(rows[0][..2], ["0.25", "2500 req/s"]);
        assert_eq!(rows[1][..2], ["0.9", "9000 req/s"]);
        assert!(
            markdown(&k).contains("| 0.25 | 2500 req/s | -"),
            "{}",
            markdown(&k)
        );
    }

    #[test]
    fn no_levels_no_curves() {
        assert!(curves(&crate::report::tests::sample(0)).is_empty());
    }
}

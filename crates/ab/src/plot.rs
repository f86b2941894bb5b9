//! Charts with `plotters`: per cell, the per-round values with each round's runs joined (the
//! pairing made visible), and a forest plot of every comparison's ratio on a log axis with its
//! 95% CI and the A/A noise band (with `--aa`); its caption names only what is drawn.

use crate::compare::Comparison;
use crate::levels::EffectCurve;
use crate::metric::Metric;
use crate::results::{Cell, MatrixReport};
use anyhow::{anyhow, Result};
use plotters::coord::ranged1d::{
    DefaultFormatting, IntoSegmentedCoord, KeyPointHint, Ranged, SegmentValue,
};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

const WIDTH: u32 = 1000;
const CELL_HEIGHT: u32 = 360;
const COLORS: [RGBColor; 5] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
];
const FONT: &str = "sans-serif";

/// Every cell stacked in one SVG.
pub(crate) fn report_svg(r: &MatrixReport) -> Result<String> {
    let cells: Vec<&Cell> = r.cells.iter().collect();
    render(&cells)
}

/// One cell's SVG (for the HTML report, one per section).
pub(crate) fn cell_svg(c: &Cell) -> Result<String> {
    render(&[c])
}

/// A cell's height: its two charts, and a series' waterfall below them.
fn cell_height(c: &Cell) -> u32 {
    CELL_HEIGHT
        + if c.steps.is_empty() {
            0
        } else {
            WATERFALL_HEIGHT
        }
}

const WATERFALL_HEIGHT: u32 = 320;

fn render(cells: &[&Cell]) -> Result<String> {
    let mut out = String::new();
    {
        let height = cells
            .iter()
            .map(|c| cell_height(c))
            .sum::<u32>()
            .max(CELL_HEIGHT);
        let root = SVGBackend::with_string(&mut out, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow!("plot: {e}"))?;
        let mut rest = root.clone();
        for cell in cells {
            let (area, below) = rest.split_vertically(cell_height(cell));
            rest = below;
            let (charts, waterfall) = area.split_vertically(CELL_HEIGHT);
            let charts = charts.margin(8, 8, 8, 8);
            let (left, right) = charts.split_horizontally(WIDTH * 52 / 100);
            rounds_chart(&left, cell).map_err(|e| anyhow!("plot: {e}"))?;
            forest_chart(&right, cell).map_err(|e| anyhow!("plot: {e}"))?;
            if !cell.steps.is_empty() {
                waterfall_chart(&waterfall.margin(8, 8, 8, 8), cell)
                    .map_err(|e| anyhow!("plot: {e}"))?;
            }
        }
        root.present().map_err(|e| anyhow!("plot: {e}"))?;
    }
    Ok(out)
}

/// A series as a waterfall: each step's change in the headline metric (against the one
/// before) as a bar from where the steps before it left off, with its 95% CI, and last the
/// base against the last variant, measured directly. Changes add as logs: the bars' ends are
/// the running products of the steps' ratios.
fn waterfall_chart(area: &Area, c: &Cell) -> DrawResult {
    let (metric, label) = headline(c);
    let steps: Vec<&Comparison> = c.steps.iter().filter(|k| k.metric == metric).collect();
    let total = c.comparisons.iter().rfind(|k| k.metric == metric);
    let pct = |log: f64| log.exp_m1() * 100.0;
    // (label, start, end, interval of the end, significant), in percent of the base.
    let mut bars = Vec::new();
    let mut at = 0.0;
    for k in &steps {
        let before = at;
        at += k.ratio.ln();
        let ci =
            k.ci.map(|(lo, hi)| (pct(before + lo.ln()), pct(before + hi.ln())));
        bars.push((k.variant.clone(), pct(before), pct(at), ci, k.significant));
    }
    if let Some(t) = total {
        let ci = t.ci_pct;
        bars.push(("direct".to_owned(), 0.0, t.change_pct, ci, t.significant));
    }
    let mut lo: f64 = -1.0;
    let mut hi: f64 = 1.0;
    for (_, a, b, ci, _) in &bars {
        for v in [Some(*a), Some(*b), ci.map(|c| c.0), ci.map(|c| c.1)]
            .into_iter()
            .flatten()
        {
            if v.is_finite() {
                lo = lo.min(v);
                hi = hi.max(v);
            }
        }
    }
    let pad = (hi - lo) * 0.08;
    let n = bars.len().max(1) as i32;
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("series: each step's change in {label} against the one before (95% CI), then the last against the base directly"),
            (FONT, 15),
        )
        .margin(6)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d((0..n - 1).into_segmented(), (lo - pad)..(hi + pad))?;
    let names: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
    chart
        .configure_mesh()
        .y_desc("change against the base (%)")
        .x_labels(names.len().max(1))
        .x_label_formatter(&|x| match x {
            SegmentValue::CenterOf(i) => names.get(*i as usize).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .light_line_style(WHITE)
        .label_style((FONT, 12))
        .axis_desc_style((FONT, 13))
        .draw()?;
    chart.draw_series(std::iter::once(PathElement::new(
        vec![(SegmentValue::Exact(0), 0.0), (SegmentValue::Last, 0.0)],
        BLACK.stroke_width(1),
    )))?;
    for (i, (_, a, b, ci, significant)) in bars.iter().enumerate() {
        let x = SegmentValue::CenterOf(i as i32);
        let color = match (significant, b > a) {
            (false, _) => RGBColor(150, 150, 150),
            (true, true) => COLORS[1],
            (true, false) => COLORS[2],
        };
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(x.clone(), *a), (x.clone(), *b)],
            color.stroke_width(28),
        )))?;
        if let Some((l, h)) = ci {
            chart.draw_series(std::iter::once(PathElement::new(
                vec![(x.clone(), *l), (x.clone(), *h)],
                BLACK.stroke_width(2),
            )))?;
        }
    }
    Ok(())
}

const LEVELS_HEIGHT: u32 = 380;

/// A request's curves over load levels (`--levels`): each variant's change in the headline
/// metric at each level, with its 95% CI, the levels on a linear axis of the baseline's
/// closed-loop throughput.
pub(crate) fn levels_svg(g: &[&EffectCurve]) -> Result<String> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, LEVELS_HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow!("plot: {e}"))?;
        levels_chart(&root.margin(8, 8, 8, 8), g).map_err(|e| anyhow!("plot: {e}"))?;
        root.present().map_err(|e| anyhow!("plot: {e}"))?;
    }
    Ok(out)
}

fn levels_chart(area: &Area, g: &[&EffectCurve]) -> DrawResult {
    let points = || g.iter().flat_map(|k| k.points.iter());
    let (mut lo, mut hi) = (-1.0f64, 1.0f64);
    for p in points() {
        let v = &p.verdict;
        for x in [
            Some(v.change_pct),
            v.ci_pct.map(|c| c.0),
            v.ci_pct.map(|c| c.1),
        ]
        .into_iter()
        .flatten()
        .filter(|x| x.is_finite())
        {
            lo = lo.min(x);
            hi = hi.max(x);
        }
    }
    let pad = (hi - lo) * 0.08;
    let label = g[0].points.first().map_or("", |p| p.verdict.metric.label());
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!(
                "{} {}: change in {label} against {} by load level (95% CI)",
                g[0].proto, g[0].url, g[0].baseline
            ),
            (FONT, 15),
        )
        .margin(6)
        .x_label_area_size(38)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..1.0, (lo - pad)..(hi + pad))?;
    chart
        .configure_mesh()
        .x_desc("load level: a fraction of the baseline's closed-loop throughput")
        .y_desc("change against the baseline (%)")
        .light_line_style(WHITE)
        .label_style((FONT, 12))
        .axis_desc_style((FONT, 13))
        .draw()?;
    chart.draw_series(std::iter::once(PathElement::new(
        vec![(0.0, 0.0), (1.0, 0.0)],
        BLACK.stroke_width(1),
    )))?;
    for (i, k) in g.iter().enumerate() {
        let color = COLORS[(i + 1) % COLORS.len()];
        chart
            .draw_series(std::iter::once(PathElement::new(
                k.points
                    .iter()
                    .map(|p| (p.level, p.verdict.change_pct))
                    .collect::<Vec<_>>(),
                color.stroke_width(2),
            )))?
            .label(k.variant)
            .legend(move |(x, y)| Circle::new((x + 10, y), 4, color.filled()));
        for p in &k.points {
            if let Some((a, b)) = p.verdict.ci_pct {
                chart.draw_series(std::iter::once(PathElement::new(
                    vec![(p.level, a), (p.level, b)],
                    color.stroke_width(2),
                )))?;
            }
            chart.draw_series(std::iter::once(Circle::new(
                (p.level, p.verdict.change_pct),
                4,
                color.filled(),
            )))?;
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font((FONT, 12))
        .draw()?;
    Ok(())
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
type DrawResult = std::result::Result<(), DrawingAreaErrorKind<std::io::Error>>;

/// The headline metric (`Cell::headline`) and its label on the charts.
fn headline(c: &Cell) -> (Metric, &'static str) {
    match c.headline() {
        Metric::CpuUsPerReq => (Metric::CpuUsPerReq, "server CPU µs per request"),
        m => (m, "requests per second"),
    }
}

fn rounds_chart(area: &Area, c: &Cell) -> DrawResult {
    let (metric, label) = headline(c);
    let values: Vec<f64> = c
        .runs
        .iter()
        .map(|r| metric.value(r))
        .filter(|v| v.is_finite())
        .collect();
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    // Headroom above the data for the legend, so that it never hides a point.
    let legend_share = ((c.variants.len() * 17 + 16) as f64 / 250.0).min(0.6);
    let (y0, y1) = if values.is_empty() {
        (0.0, 1.0)
    } else {
        let total = (hi - lo).max(hi.abs() * 0.02).max(1e-9) / (1.0 - legend_share - 0.1);
        (lo - 0.05 * total, lo - 0.05 * total + total)
    };
    let first = c.runs.iter().map(|r| r.round).min().unwrap_or(0) as f64;
    let last = c.runs.iter().map(|r| r.round).max().unwrap_or(0) as f64;
    let mut chart = ChartBuilder::on(area)
        .caption(format!("{} {} — {label}", c.proto, c.url), (FONT, 15))
        .margin(6)
        .x_label_area_size(38)
        .y_label_area_size(62)
        .build_cartesian_2d(first - 0.6..last + 0.6, y0..y1)?;
    let rounds = (last - first) as usize + 1;
    chart
        .configure_mesh()
        .x_desc("round (runs of one round joined)")
        .y_desc(label)
        .x_labels(rounds.min(20))
        .x_label_formatter(&|x| {
            if (x - x.round()).abs() < 1e-6 {
                format!("{}", x.round() as i64 + 1)
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|y| three_digits(*y))
        .light_line_style(WHITE)
        .label_style((FONT, 12))
        .axis_desc_style((FONT, 13))
        .draw()?;
    let n = c.variants.len() as f64;
    let offset = |vi: usize| (vi as f64 - (n - 1.0) / 2.0) * 0.18;
    let mut round_ids: Vec<usize> = c.runs.iter().map(|r| r.round).collect();
    round_ids.sort_unstable();
    round_ids.dedup();
    for round in round_ids {
        let points: Vec<(f64, f64)> = c
            .variants
            .iter()
            .enumerate()
            .filter_map(|(vi, v)| {
                let r = c
                    .runs
                    .iter()
                    .find(|r| r.round == round && r.variant == v.name)?;
                let y = metric.value(r);
                y.is_finite().then_some((round as f64 + offset(vi), y))
            })
            .collect();
        chart.draw_series(LineSeries::new(points, RGBColor(160, 160, 160)))?;
    }
    for (vi, v) in c.variants.iter().enumerate() {
        let color = COLORS[vi % COLORS.len()];
        chart.draw_series(
            c.runs
                .iter()
                .filter(|r| r.variant == v.name && metric.value(r).is_finite())
                .map(|r| {
                    Circle::new(
                        (r.round as f64 + offset(vi), metric.value(r)),
                        4,
                        color.filled(),
                    )
                }),
        )?;
    }
    // The legend, drawn by hand in the headroom: the text is anchored at its right end, so its
    // width (which an SVG writer can only guess) cannot push it past the frame.
    let (width, _) = area.dim_in_pixel();
    let right = width as i32 - 24;
    for (vi, v) in c.variants.iter().enumerate() {
        let y = 52 + 17 * vi as i32;
        let color = COLORS[vi % COLORS.len()];
        area.draw(&Circle::new((right + 8, y), 4, color.filled()))?;
        area.draw(&Text::new(
            v.name.clone(),
            (right, y),
            TextStyle::from((FONT, 12).into_font()).pos(Pos::new(HPos::Right, VPos::Center)),
        ))?;
    }
    Ok(())
}

/// A ratio axis in ln space whose ticks are round ratios.
struct LogRatio {
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
}

impl Ranged for LogRatio {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let share = (v - self.lo) / (self.hi - self.lo);
        limit.0 + (share * (limit.1 - limit.0) as f64).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, _hint: Hint) -> Vec<f64> {
        self.ticks.clone()
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.lo..self.hi
    }
}

/// Round ratios inside `lo..hi`, as ln: 1 first, then each one far enough from those kept
/// (a seventh of the axis) that the labels do not run into each other.
fn ticks(lo: f64, hi: f64) -> Vec<f64> {
    const NICE: [f64; 27] = [
        1.0, 0.1, 0.2, 0.3, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.97, 0.98, 0.99, 1.01, 1.02,
        1.03, 1.05, 1.1, 1.2, 1.3, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0,
    ];
    let gap = (hi.ln() - lo.ln()) / 7.0;
    let mut kept: Vec<f64> = Vec::new();
    for r in NICE.into_iter().filter(|r| (lo..=hi).contains(r)) {
        if kept.iter().all(|k| (k - r.ln()).abs() >= gap) {
            kept.push(r.ln());
        }
    }
    kept
}

/// 0.95, 1, 1.5, 2: as many decimals as the ratio needs, at most 2.
fn ratio_label(r: f64) -> String {
    let s = format!("{r:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// A tick label with three significant digits (75.0, 1.62, 0.0123, 41200).
fn three_digits(v: f64) -> String {
    let magnitude = if v == 0.0 {
        0
    } else {
        v.abs().log10().floor() as i32
    };
    let decimals = (2 - magnitude).clamp(0, 6) as usize;
    format!("{v:.decimals$}")
}

fn forest_chart(area: &Area, c: &Cell) -> DrawResult {
    let rows: Vec<&Comparison> = c.comparisons.iter().collect();
    let noise = |k: &Comparison| k.noise_pct.map(|n| (1.0 - n / 100.0, 1.0 + n / 100.0));
    let mut lo: f64 = 0.95;
    let mut hi: f64 = 1.05;
    for k in &rows {
        for v in [Some(k.ratio), k.ci.map(|c| c.0), k.ci.map(|c| c.1)]
            .into_iter()
            .flatten()
            .chain(noise(k).into_iter().flat_map(|(a, b)| [a, b]))
        {
            if v.is_finite() && v > 0.0 {
                lo = lo.min(v);
                hi = hi.max(v);
            }
        }
    }
    // Room on both sides on the log axis, so that no CI end sits on the frame.
    let (lo, hi) = (lo / 1.03, hi * 1.03);
    let labels: Vec<String> = rows
        .iter()
        .map(|k| format!("{} · {}", k.variant, k.metric.short()))
        .collect();
    let n = rows.len().max(1) as i32;
    // The caption names only what is drawn: no CI without enough rounds, no band without --aa.
    let mut caption = String::from("variant / baseline: estimate");
    let mut missing = Vec::new();
    match rows.iter().any(|k| k.ci.is_some()) {
        true => caption += ", 95% CI",
        false => missing.push("CI: too few rounds"),
    }
    match rows.iter().any(|k| noise(k).is_some()) {
        true => caption += ", A/A noise (grey)",
        false => missing.push("A/A band: --aa"),
    }
    if !missing.is_empty() {
        caption += &format!(" (no {})", missing.join(", no "));
    }
    let mut chart = ChartBuilder::on(area)
        .caption(caption, (FONT, 15))
        .margin(6)
        .x_label_area_size(38)
        .y_label_area_size(120)
        // The axis is ln(ratio), labelled with round ratios (plotters' own log axis puts a
        // single tick on a range this narrow).
        .build_cartesian_2d(
            LogRatio {
                lo: lo.ln(),
                hi: hi.ln(),
                ticks: ticks(lo, hi),
            },
            (0..n - 1).into_segmented(),
        )?;
    chart
        .configure_mesh()
        .x_desc("ratio (log axis; < 1: variant below baseline)")
        .x_label_formatter(&|x| ratio_label(x.exp()))
        .y_labels(rows.len().max(1))
        .y_label_formatter(&|y| match y {
            SegmentValue::CenterOf(i) => labels.get(*i as usize).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .light_line_style(WHITE)
        .label_style((FONT, 12))
        .axis_desc_style((FONT, 13))
        .draw()?;
    for (i, k) in rows.iter().enumerate() {
        let i = i as i32;
        if let Some((a, b)) = noise(k) {
            // A noise floor of 100% or more has no lower end on a ratio axis: the band then
            // starts at the axis' left end.
            let a = if a > 0.0 { a } else { lo };
            chart.draw_series(std::iter::once(Rectangle::new(
                [
                    (a.ln(), SegmentValue::Exact(i)),
                    (b.ln(), SegmentValue::Exact(i + 1)),
                ],
                RGBColor(225, 225, 225).filled(),
            )))?;
        }
    }
    chart.draw_series(std::iter::once(PathElement::new(
        vec![(0.0, SegmentValue::Exact(0)), (0.0, SegmentValue::Last)],
        BLACK.stroke_width(1),
    )))?;
    for (i, k) in rows.iter().enumerate() {
        let i = i as i32;
        let color = if k.significant {
            COLORS[1]
        } else {
            RGBColor(90, 90, 90)
        };
        if let Some((a, b)) = k.ci {
            chart.draw_series(std::iter::once(PathElement::new(
                vec![
                    (a.ln(), SegmentValue::CenterOf(i)),
                    (b.ln(), SegmentValue::CenterOf(i)),
                ],
                color.stroke_width(2),
            )))?;
        }
        chart.draw_series(std::iter::once(Circle::new(
            (k.ratio.ln(), SegmentValue::CenterOf(i)),
            4,
            color.filled(),
        )))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A series' cell gets a waterfall: a bar per step and one for the base against the last
    /// variant measured directly, each with its interval; a cell without steps has none.
    #[test]
    fn a_series_is_drawn_as_a_waterfall() {
        let mut r = crate::report::tests::sample(0);
        let c = &mut r.cells[0];
        assert!(!cell_svg(c).unwrap().contains("series: each step"));
        c.steps = c.comparisons.clone();
        let svg = cell_svg(c).unwrap();
        assert!(svg.contains("series: each step"), "the waterfall's caption");
        assert_eq!(
            svg.matches("stroke-width=\"28\"").count(),
            2,
            "a step and the direct bar"
        );
        let with_ci = c
            .steps
            .iter()
            .filter(|k| k.metric == Metric::CpuUsPerReq && k.ci.is_some());
        assert_eq!(with_ci.count(), 1);
    }

    fn forest_caption(svg: &str) -> &str {
        let at = svg
            .find("variant / baseline")
            .expect("the forest plot's caption");
        svg[at..].split('<').next().unwrap().trim()
    }

    /// What the forest plot's caption names is drawn: a 95% CI line (2 px) per comparison
    /// that has one, and an A/A noise band (grey rectangle) per comparison with a noise floor;
    /// without --aa the caption says there is no band, with too few rounds that there is no CI.
    #[test]
    fn the_caption_names_what_is_drawn() {
        let mut r = crate::report::tests::sample(0);
        let c = &mut r.cells[0];
        let with_ci = c.comparisons.iter().filter(|k| k.ci.is_some()).count();
        let with_noise = c
            .comparisons
            .iter()
            .filter(|k| k.noise_pct.is_some())
            .count();
        assert!(with_ci > 0 && with_noise > 0);
        let svg = cell_svg(c).unwrap();
        assert_eq!(
            forest_caption(&svg),
            "variant / baseline: estimate, 95% CI, A/A noise (grey)"
        );
        assert_eq!(svg.matches("fill=\"#E1E1E1\"").count(), with_noise);
        assert_eq!(svg.matches("stroke-width=\"2\" points=").count(), with_ci);
        for k in &mut c.comparisons {
            k.noise_pct = None;
        }
        let svg = cell_svg(c).unwrap();
        assert_eq!(
            forest_caption(&svg),
            "variant / baseline: estimate, 95% CI (no A/A band: --aa)"
        );
        assert_eq!(svg.matches("fill=\"#E1E1E1\"").count(), 0);
        for k in &mut c.comparisons {
            k.ci = None;
        }
        let svg = cell_svg(c).unwrap();
        assert_eq!(
            forest_caption(&svg),
            "variant / baseline: estimate (no CI: too few rounds, no A/A band: --aa)"
        );
        assert_eq!(svg.matches("stroke-width=\"2\" points=").count(), 0);
    }
}

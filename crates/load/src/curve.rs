//! The latency curve of `--find-max-rate`: corrected percentiles against the offered rate (the
//! knee where queueing starts), the latency objectives, and the rate found; SVG with
//! `plotters`, or an HTML page holding it and the trials' table.

use crate::search::{Finding, Quantity, Slo, Trial, QUANTILES};
use anyhow::{anyhow, Result};
use plotters::prelude::*;

const COLORS: [RGBColor; 5] = [
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
];
const FONT: &str = "sans-serif";

const TITLE: &str = "loadterm --find-max-rate: corrected latency against the offered rate";

/// The curve as SVG: the trials in order of rate, failing ones drawn hollow.
pub(crate) fn svg(f: &Finding, slos: &[Slo]) -> Result<String> {
    curve_svg(&f.trials, slos, f.max_rate, TITLE)
}

fn curve_svg(trials: &[Trial], slos: &[Slo], found: Option<f64>, title: &str) -> Result<String> {
    let mut out = String::new();
    draw(&mut out, trials, slos, found, title).map_err(|e| anyhow!("plot: {e}"))?;
    Ok(out)
}

fn draw(
    out: &mut String,
    trials: &[Trial],
    slos: &[Slo],
    found: Option<f64>,
    title: &str,
) -> std::result::Result<(), DrawingAreaErrorKind<std::io::Error>> {
    let root = SVGBackend::with_string(out, (960, 540)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut sorted: Vec<&Trial> = trials.iter().collect();
    sorted.sort_by(|a, b| a.rate.total_cmp(&b.rate));
    let ms = |us: f64| (us / 1e3).max(0.001);
    let values = sorted
        .iter()
        .flat_map(|t| t.corrected_us.iter().flatten().map(|(_, v)| ms(*v)))
        .chain(
            slos.iter()
                .filter(|s| s.metric != Quantity::Errors)
                .map(|s| ms(s.bound)),
        );
    let (lo, hi) = values.fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    let (lo, hi) = if lo.is_finite() {
        (lo / 1.5, hi * 1.5)
    } else {
        (0.1, 10.0)
    };
    let x_max = sorted.last().map_or(1.0, |t| t.rate) * 1.05;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 18))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..x_max, (lo..hi).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("offered rate (req/s)")
        .y_desc("corrected latency (ms, log)")
        .light_line_style(RGBColor(240, 240, 240))
        .label_style((FONT, 12))
        .axis_desc_style((FONT, 14))
        .draw()?;
    for (k, &q) in QUANTILES.iter().enumerate().take(4) {
        let color = COLORS[k];
        let points: Vec<(f64, f64, bool)> = sorted
            .iter()
            .filter_map(|t| Some((t.rate, ms(t.latency_at(q)?), t.passed())))
            .collect();
        chart
            .draw_series(LineSeries::new(
                points.iter().map(|&(x, y, _)| (x, y)),
                color.stroke_width(2),
            ))?
            .label(format!("p{q}"))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        chart.draw_series(points.iter().map(|&(x, y, pass)| {
            let style = if pass {
                color.filled()
            } else {
                color.stroke_width(2)
            };
            Circle::new((x, y), 4, style)
        }))?;
    }
    for slo in slos.iter().filter(|s| s.metric != Quantity::Errors) {
        let y = ms(slo.bound);
        chart
            .draw_series(DashedLineSeries::new(
                [(0.0, y), (x_max, y)],
                6,
                4,
                BLACK.mix(0.6).stroke_width(1),
            ))?
            .label(format!("objective {}", slo.text()))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK.mix(0.6)));
    }
    if let Some(rate) = found {
        let green = RGBColor(0, 140, 70);
        chart
            .draw_series(LineSeries::new(
                [(rate, lo), (rate, hi)],
                green.stroke_width(2),
            ))?
            .label(format!("highest rate meeting them: {rate:.0} req/s"))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], green.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .label_font((FONT, 12))
        .draw()?;
    root.present()?;
    Ok(())
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// An HTML page: the curve, what was found, and every trial in the order run.
pub(crate) fn html(f: &Finding, slos: &[Slo]) -> Result<String> {
    let (trials, title, verdict) = (&f.trials, TITLE, &f.verdict());
    let svg = curve_svg(trials, slos, f.max_rate, title)?;
    let mut rows = String::new();
    for (k, t) in trials.iter().enumerate() {
        let lat = |q| {
            t.latency_at(q)
                .map_or("-".to_owned(), |v| format!("{:.2}", v / 1e3))
        };
        let verdict = if t.passed() {
            "pass".to_owned()
        } else {
            format!("fail: {}", t.failed.join(", "))
        };
        let client = t.client_limit.as_deref().unwrap_or("");
        rows += &format!(
            "<tr><td>{}</td><td>{:.0}</td><td>{:.1}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{:.2}%</td><td>{:.1}%</td><td>{:.0}%</td><td>{}</td><td>{}</td></tr>\n",
            k + 1,
            t.rate,
            t.rps,
            lat(50.0),
            lat(90.0),
            lat(99.0),
            lat(99.9),
            t.errors * 100.0,
            t.late * 100.0,
            t.client_cpu * 100.0,
            esc(&verdict),
            esc(client),
        );
    }
    Ok(format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{t}</title>\n<style>\
         body{{font-family:sans-serif;margin:24px}}table{{border-collapse:collapse;font-size:13px}}\
         td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}</style></head>\n<body>\
         <h2>{t}</h2>\n<p>{v}</p>\n{svg}\n<h3>Trials, in the order run</h3>\n<table><tr><th>#</th>\
         <th>offered req/s</th><th>done req/s</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th>\
         <th>p99.9 ms</th><th>errors</th><th>late sends</th><th>client CPU</th><th>verdict</th>\
         <th>client limit</th></tr>\n{rows}</table>\n<p>Latency is corrected for coordinated \
         omission: from each request's intended send time.</p></body></html>\n",
        t = esc(title),
        v = esc(verdict),
    ))
}

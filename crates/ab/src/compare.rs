//! Paired comparison of each variant with the baseline, per metric, and the verdict in words.

use crate::measure::Run;
use crate::stats;
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub metric: String,
    pub variant: String,
    pub rounds: usize,
    /// Median of the per-round ratios variant / baseline.
    pub ratio: f64,
    /// The same as a signed change in percent: (ratio − 1) × 100.
    pub change_pct: f64,
    /// 95% CI of the ratio.
    pub ci: Option<(f64, f64)>,
    /// The CI as signed changes in percent, in the same convention as `change_pct`.
    pub ci_pct: Option<(f64, f64)>,
    pub p_wilcoxon: Option<f64>,
    pub p_mann_whitney: Option<f64>,
    /// A/A noise floor for this metric, percent (when measured).
    pub noise_pct: Option<f64>,
    pub rounds_needed: Option<usize>,
    pub significant: bool,
    pub verdict: String,
}

/// What a metric is called in a verdict, and the words for "above" and "below" the baseline.
fn describe(metric: &str) -> (&'static str, &'static str, &'static str) {
    match metric {
        "cpu_us_per_req" => ("CPU per request", "more", "less"),
        "rps" => ("requests per second", "more", "fewer"),
        "p99_ms" => ("p99 latency", "higher", "lower"),
        "mean_ms" => ("mean latency", "higher", "lower"),
        "bytes_per_req" => ("bytes per request", "more", "fewer"),
        _ => ("peak memory (RSS)", "more", "less"),
    }
}

/// A change in percent with its sign always written: the one convention of every report is
/// "change = variant / baseline − 1", so −5% means the variant's value is 5% below the baseline's.
pub fn signed_pct(x: f64) -> String {
    format!("{x:+.1}%")
}

/// Paired by round: runs of `variant` and `baseline` with the same round number.
pub fn compare(
    metric: &str,
    baseline: &str,
    variant: &str,
    runs: &[Run],
    noise_pct: Option<f64>,
) -> Option<Comparison> {
    let value = |name: &str, round: usize| {
        runs.iter()
            .find(|r| r.variant == name && r.round == round)
            .map(|r| r.metric(metric))
    };
    let rounds: Vec<usize> = {
        let mut r: Vec<usize> = runs
            .iter()
            .filter(|r| r.variant == variant)
            .map(|r| r.round)
            .collect();
        r.sort_unstable();
        r.dedup();
        r
    };
    let pairs: Vec<(f64, f64)> = rounds
        .iter()
        .filter_map(|&k| Some((value(baseline, k)?, value(variant, k)?)))
        .filter(|(a, b)| *a > 0.0 && *b > 0.0 && a.is_finite() && b.is_finite())
        .collect();
    if pairs.is_empty() {
        return None;
    }
    let ratios: Vec<f64> = pairs.iter().map(|(a, b)| b / a).collect();
    let logs: Vec<f64> = ratios.iter().map(|r| r.ln()).collect();
    let ratio = stats::median(&ratios);
    let ci = stats::median_ci(&ratios);
    let p_w = stats::wilcoxon(&logs);
    let a: Vec<f64> = pairs.iter().map(|p| p.0).collect();
    let b: Vec<f64> = pairs.iter().map(|p| p.1).collect();
    let p_mw = stats::mann_whitney(&a, &b);
    let ci_excludes_one = ci.is_some_and(|(lo, hi)| lo > 1.0 || hi < 1.0);
    let change_pct = (ratio - 1.0) * 100.0;
    let ci_pct = ci.map(|(lo, hi)| ((lo - 1.0) * 100.0, (hi - 1.0) * 100.0));
    let hidden_by_noise = noise_pct.is_some_and(|n| change_pct.abs() < n);
    let significant = ci_excludes_one && p_w.is_some_and(|p| p < 0.05) && !hidden_by_noise;
    let needed = stats::rounds_needed(&logs);
    let (what, up, down) = describe(metric);
    let ci_text = match ci_pct {
        Some((lo, hi)) => format!("95% CI {} to {}", signed_pct(lo), signed_pct(hi)),
        None => format!("no 95% CI with {} rounds: need at least 6", pairs.len()),
    };
    let p_text = p_w.map_or("p=n/a".to_owned(), |p| format!("p={p:.4}"));
    let numbers = format!("change {}, {ci_text}, {p_text}", signed_pct(change_pct));
    let more_rounds = match needed {
        Some(n) if n > pairs.len() => {
            format!("; about {n} rounds would resolve a change of this size")
        }
        _ => String::new(),
    };
    let verdict = if significant {
        let word = if ratio > 1.0 { up } else { down };
        format!(
            "{variant}: {:.1}% {word} {what} ({numbers})",
            change_pct.abs()
        )
    } else if let (true, Some(n)) = (hidden_by_noise, noise_pct) {
        format!(
            "{variant}: not measurable in {what}: the A/A noise ±{n:.1}% is larger than the change ({}){more_rounds}",
            signed_pct(change_pct)
        )
    } else {
        format!("{variant}: no significant difference in {what} ({numbers}){more_rounds}")
    };
    Some(Comparison {
        metric: metric.to_owned(),
        variant: variant.to_owned(),
        rounds: pairs.len(),
        ratio,
        change_pct,
        ci,
        ci_pct,
        p_wilcoxon: p_w,
        p_mann_whitney: p_mw,
        noise_pct,
        rounds_needed: needed,
        significant,
        verdict,
    })
}

/// Noise floor of a metric from A/A rounds: the half-width of the ratio's 95% CI around 1, or the
/// largest deviation when there are too few rounds for a CI; in percent.
pub fn noise(metric: &str, runs: &[Run], a: &str, a2: &str) -> Option<f64> {
    let c = compare(metric, a, a2, runs, None)?;
    Some(match c.ci {
        Some((lo, hi)) => (1.0 - lo).abs().max((hi - 1.0).abs()) * 100.0,
        None => {
            let devs = runs.iter().filter(|r| r.variant == a2).filter_map(|r2| {
                let r1 = runs
                    .iter()
                    .find(|r| r.variant == a && r.round == r2.round)?;
                Some((r2.metric(metric) / r1.metric(metric) - 1.0).abs() * 100.0)
            });
            devs.fold(0.0, f64::max)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(variant: &str, round: usize, cpu: f64) -> Run {
        Run {
            variant: variant.into(),
            round,
            requests: 1000,
            errors: 0,
            rps: 1e6 / cpu,
            mb_per_s: 1.0,
            bytes_per_req: 100.0,
            mean_ms: 1.0,
            p50_ms: 1.0,
            p95_ms: 1.0,
            p99_ms: 1.0,
            corrected_p99_ms: None,
            cpu_us_per_req: Some(cpu),
            server_cpu_util: Some(1.0),
            rss_peak_mib: Some(10.0),
            rss_mean_mib: Some(10.0),
            ctx_switches_per_req: Some(0.1),
            series: Vec::new(),
            wall_s: 1.0,
            checks: crate::contam::Checks {
                steal_pct: 0.0,
                foreign_pct: Some(0.0),
                client_busy_pct: 50.0,
                settings: crate::contam::Settings {
                    governor: None,
                    boost: None,
                    thp: None,
                    load1: 0.0,
                },
                steady: None,
                flags: Vec::new(),
            },
        }
    }

    #[test]
    fn clear_effect_is_reported_with_ci_and_p() {
        let mut runs = Vec::new();
        for k in 0..12 {
            let jitter = 1.0 + (k as f64 * 0.37).sin() * 0.02;
            runs.push(run("A", k, 10.0 * jitter));
            runs.push(run("B", k, 8.2 * jitter * (1.0 + (k as f64).cos() * 0.005)));
        }
        let c = compare("cpu_us_per_req", "A", "B", &runs, None).unwrap();
        assert!(c.significant, "{}", c.verdict);
        assert!(
            c.verdict.starts_with("B: 18.") && c.verdict.contains("% less CPU per request"),
            "{}",
            c.verdict
        );
        // One sign convention: the change and both CI bounds are negative (B below A).
        assert!(
            c.verdict.contains("change -18.") && c.verdict.contains("95% CI -"),
            "{}",
            c.verdict
        );
        let (lo, hi) = c.ci_pct.unwrap();
        assert!(
            lo < c.change_pct && c.change_pct < hi && hi < 0.0,
            "{lo} {hi}"
        );
        let r = compare("rps", "A", "B", &runs, None).unwrap();
        assert!(
            r.verdict.contains("more requests per second"),
            "{}",
            r.verdict
        );
    }

    #[test]
    fn noise_hides_small_effects_and_few_rounds_give_no_ci() {
        let mut runs = Vec::new();
        for k in 0..12 {
            let jitter = 1.0 + (k as f64 * 1.7).sin() * 0.1;
            runs.push(run("A", k, 10.0));
            runs.push(run("B", k, 10.2 * jitter));
        }
        let c = compare("cpu_us_per_req", "A", "B", &runs, Some(9.0)).unwrap();
        assert!(!c.significant);
        assert!(
            c.verdict
                .starts_with("B: not measurable in CPU per request: the A/A noise ±9.0%"),
            "{}",
            c.verdict
        );
        let few: Vec<Run> = runs.into_iter().filter(|r| r.round < 4).collect();
        let c = compare("cpu_us_per_req", "A", "B", &few, None).unwrap();
        assert!(
            c.verdict
                .starts_with("B: no significant difference in CPU per request")
                && c.verdict.contains("need at least 6"),
            "{}",
            c.verdict
        );
    }
}

//! Paired comparison of each variant with the baseline, per metric, and the verdict in words.

use crate::measure::Run;
use crate::metric::{Better, Metric};
use crate::stats;
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Comparison {
    pub metric: Metric,
    /// Which way the metric improves.
    pub better: Better,
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

/// A change in percent with its sign always written: the one convention of every report is
/// "change = variant / baseline − 1", so −5% means the variant's value is 5% below the baseline's.
pub(crate) fn signed_pct(x: f64) -> String {
    format!("{x:+.1}%")
}

/// (baseline, variant) values of `metric`, paired by round; positive and finite only.
fn pairs(metric: Metric, baseline: &str, variant: &str, runs: &[Run]) -> Vec<(f64, f64)> {
    let value = |name: &str, round: usize| {
        runs.iter()
            .find(|r| r.variant == name && r.round == round)
            .and_then(|r| metric.of(r))
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
    rounds
        .iter()
        .filter_map(|&k| Some((value(baseline, k)?, value(variant, k)?)))
        .filter(|(a, b)| *a > 0.0 && *b > 0.0 && a.is_finite() && b.is_finite())
        .collect()
}

/// The same whole number in every round of both variants (bytes per request of fixed-size
/// responses): the difference is exact, and a statistic would only blur it.
fn exact(
    metric: Metric,
    variant: &str,
    pairs: &[(f64, f64)],
    noise_pct: Option<f64>,
) -> Option<Comparison> {
    let (a, b) = pairs[0];
    // Counts only (bytes): a MiB figure that repeats is a coincidence of rounding, not exact.
    if a.fract() != 0.0 || b.fract() != 0.0 || pairs.iter().any(|p| *p != (a, b)) {
        return None;
    }
    let (what, (up, down)) = (metric.label(), metric.words());
    let ratio = b / a;
    let verdict = if a == b {
        format!(
            "{variant}: the same {what} in every round ({})",
            exact_value(a)
        )
    } else {
        let word = if b > a { up } else { down };
        format!(
            "{variant}: exactly {} {word} {what} in every round ({} against {}, {:+.3}%)",
            exact_value((b - a).abs()),
            exact_value(b),
            exact_value(a),
            (ratio - 1.0) * 100.0
        )
    };
    Some(Comparison {
        metric,
        better: metric.better(),
        variant: variant.to_owned(),
        rounds: pairs.len(),
        ratio,
        change_pct: (ratio - 1.0) * 100.0,
        ci: Some((ratio, ratio)),
        ci_pct: Some(((ratio - 1.0) * 100.0, (ratio - 1.0) * 100.0)),
        p_wilcoxon: None,
        p_mann_whitney: None,
        noise_pct,
        rounds_needed: None,
        significant: a != b,
        verdict,
    })
}

/// A whole number as it is.
fn exact_value(x: f64) -> String {
    format!("{x:.0}")
}

/// The headline metric: the geometric mean of the per-round ratios with a Student-t 95%
/// interval (`sequential`), the estimate whose width decides when a run has measured enough.
/// `precision_pct`: the width asked for, said in the verdict when it was not reached.
pub(crate) fn headline(
    metric: Metric,
    baseline: &str,
    variant: &str,
    runs: &[Run],
    noise_pct: Option<f64>,
    precision_pct: Option<f64>,
) -> Option<Comparison> {
    let pairs = pairs(metric, baseline, variant, runs);
    let logs: Vec<f64> = pairs.iter().map(|(a, b)| (b / a).ln()).collect();
    let Some(e) = crate::sequential::estimate(&logs) else {
        return compare(metric, baseline, variant, runs, noise_pct);
    };
    let ratio = 1.0 + e.change_pct / 100.0;
    let hidden_by_noise = noise_pct.is_some_and(|n| e.change_pct.abs() < n);
    let significant = e.significant() && !hidden_by_noise;
    let (what, (up, down)) = (metric.label(), metric.words());
    let numbers = format!(
        "change {}, 95% CI {} to {}, p={:.4}, {} rounds",
        signed_pct(e.change_pct),
        signed_pct(e.ci_pct.0),
        signed_pct(e.ci_pct.1),
        e.p,
        e.rounds
    );
    let unresolved = match precision_pct {
        Some(p) if !crate::sequential::resolved(&e, p) => format!(
            "; the interval is ±{:.1} points, wider than the ±{p:.1} asked for",
            e.half_width_pct
        ),
        _ => String::new(),
    };
    let verdict = if significant {
        let word = if ratio > 1.0 { up } else { down };
        format!(
            "{variant}: {:.1}% {word} {what} ({numbers}){unresolved}",
            e.change_pct.abs()
        )
    } else if let (true, Some(n)) = (hidden_by_noise, noise_pct) {
        format!(
            "{variant}: not measurable in {what}: the A/A noise ±{n:.1}% is larger than the change ({}){unresolved}",
            signed_pct(e.change_pct)
        )
    } else {
        format!("{variant}: no significant difference in {what} ({numbers}){unresolved}")
    };
    let b: Vec<f64> = pairs.iter().map(|p| p.1).collect();
    let a: Vec<f64> = pairs.iter().map(|p| p.0).collect();
    Some(Comparison {
        metric,
        better: metric.better(),
        variant: variant.to_owned(),
        rounds: e.rounds,
        ratio,
        change_pct: e.change_pct,
        ci: Some((1.0 + e.ci_pct.0 / 100.0, 1.0 + e.ci_pct.1 / 100.0)),
        ci_pct: Some(e.ci_pct),
        p_wilcoxon: stats::wilcoxon(&logs),
        p_mann_whitney: stats::mann_whitney(&a, &b),
        noise_pct,
        rounds_needed: None,
        significant,
        verdict,
    })
}

/// Paired by round: runs of `variant` and `baseline` with the same round number; the median
/// ratio with its order-statistic interval and Wilcoxon's p (every metric but the headline).
pub(crate) fn compare(
    metric: Metric,
    baseline: &str,
    variant: &str,
    runs: &[Run],
    noise_pct: Option<f64>,
) -> Option<Comparison> {
    let pairs = pairs(metric, baseline, variant, runs);
    if pairs.is_empty() {
        return None;
    }
    if let Some(c) = exact(metric, variant, &pairs, noise_pct) {
        return Some(c);
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
    let (what, (up, down)) = (metric.label(), metric.words());
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
        metric,
        better: metric.better(),
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

/// A variant whose median req/s is this far below a fixed rate did not hold it.
pub(crate) const RATE_HELD_SLACK: f64 = 0.02;

/// At a fixed rate the client sets requests per second: instead of comparing the rate with
/// itself, whether both variants held it (one that could not is named).
pub(crate) fn rate_held(
    baseline: &str,
    variant: &str,
    runs: &[Run],
    rate: f64,
) -> Option<Comparison> {
    let pairs = pairs(Metric::Rps, baseline, variant, runs);
    if pairs.is_empty() {
        return None;
    }
    let a = stats::median(&pairs.iter().map(|p| p.0).collect::<Vec<_>>());
    let b = stats::median(&pairs.iter().map(|p| p.1).collect::<Vec<_>>());
    let off = |below: bool| -> Vec<String> {
        [(baseline, a), (variant, b)]
            .iter()
            .filter(|(_, x)| {
                if below {
                    *x < rate * (1.0 - RATE_HELD_SLACK)
                } else {
                    *x > rate * (1.0 + RATE_HELD_SLACK)
                }
            })
            .map(|(n, x)| format!("{n} ({x:.0} req/s)"))
            .collect()
    };
    let (short, over) = (off(true), off(false));
    let verdict = if !short.is_empty() {
        format!(
            "{variant}: the rate of {rate:.0} req/s was NOT held by {}: that server could not keep up, and its other figures were measured at a lighter load",
            short.join(" and ")
        )
    } else if !over.is_empty() {
        // More completed in the window than were sent in it: responses to requests sent
        // before it (in the warm-up) came in during it, so the server was behind.
        format!(
            "{variant}: more requests completed than the rate of {rate:.0} req/s sent, by {}: responses to requests sent before the window came in during it (the server was behind: its latency is longer than the warm-up)",
            over.join(" and ")
        )
    } else {
        format!(
            "{variant}: the rate of {rate:.0} req/s was held ({baseline} {a:.0}, {variant} {b:.0} req/s, medians): at a fixed rate, requests per second are set by the client and not compared"
        )
    };
    Some(Comparison {
        metric: Metric::Rps,
        better: Metric::Rps.better(),
        variant: variant.to_owned(),
        rounds: pairs.len(),
        ratio: b / a,
        change_pct: (b / a - 1.0) * 100.0,
        ci: None,
        ci_pct: None,
        p_wilcoxon: None,
        p_mann_whitney: None,
        noise_pct: None,
        rounds_needed: None,
        significant: false,
        verdict,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A clean run of `cpu` µs per request (every other metric fixed), for tests.
    pub(crate) fn run(variant: &str, round: usize, cpu: f64) -> Run {
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
            user_us_per_req: Some(cpu / 4.0),
            system_us_per_req: Some(cpu * 3.0 / 4.0),
            softirq_us_per_req: None,
            accounting: Some(crate::cgroup::Accounting::CgroupV1),
            server_cpu_util: Some(1.0),
            rss_peak_mib: Some(10.0),
            rss_mean_mib: Some(10.0),
            ctx_switches_per_req: Some(0.1),
            missed_pct: None,
            late_pct: None,
            client_cpu_util: None,
            series: Vec::new(),
            wall_s: 1.0,
            server_window_off_ms: None,
            checks: crate::contam::Checks {
                steal_pct: 0.0,
                foreign_pct: Some(0.0),
                softirq_pct: 0.0,
                served_elsewhere: false,
                client_busy_pct: 50.0,
                settings: crate::contam::Settings {
                    governor: None,
                    boost: None,
                    thp: None,
                    load1: 0.0,
                },
                steady: None,
                flags: Vec::new(),
                repeat: Vec::new(),
            },
            profile: None,
        }
    }

    #[test]
    fn a_fixed_rate_is_said_to_be_held_not_compared() {
        let mut runs = Vec::new();
        for k in 0..8 {
            runs.push(run("A", k, 10.0));
            runs.push(run("B", k, 10.3));
        }
        for r in &mut runs {
            r.rps = 5000.0 - (r.round % 3) as f64;
        }
        let c = rate_held("A", "B", &runs, 5000.0).unwrap();
        assert!(!c.significant);
        assert!(c.verdict.contains("was held"), "{}", c.verdict);
        for r in runs.iter_mut().filter(|r| r.variant == "B") {
            r.rps = 4500.0;
        }
        let c = rate_held("A", "B", &runs, 5000.0).unwrap();
        assert!(
            c.verdict.contains("NOT held by B (4500 req/s)"),
            "{}",
            c.verdict
        );
        // Above the rate (H2 256k against a slow server: 154 req/s at 123): never "held".
        for r in runs.iter_mut() {
            r.rps = 154.0;
        }
        let c = rate_held("A", "B", &runs, 123.0).unwrap();
        assert!(
            c.verdict.contains("more requests completed than the rate of 123 req/s sent, by A (154 req/s) and B (154 req/s)")
                && !c.verdict.contains("was held"),
            "{}",
            c.verdict
        );
    }

    #[test]
    fn clear_effect_is_reported_with_ci_and_p() {
        let mut runs = Vec::new();
        for k in 0..12 {
            let jitter = 1.0 + (k as f64 * 0.37).sin() * 0.02;
            runs.push(run("A", k, 10.0 * jitter));
            runs.push(run("B", k, 8.2 * jitter * (1.0 + (k as f64).cos() * 0.005)));
        }
        let c = compare(Metric::CpuUsPerReq, "A", "B", &runs, None).unwrap();
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
        let r = compare(Metric::Rps, "A", "B", &runs, None).unwrap();
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
        let c = compare(Metric::CpuUsPerReq, "A", "B", &runs, Some(9.0)).unwrap();
        assert!(!c.significant);
        assert!(
            c.verdict
                .starts_with("B: not measurable in CPU per request: the A/A noise ±9.0%"),
            "{}",
            c.verdict
        );
        let few: Vec<Run> = runs.into_iter().filter(|r| r.round < 4).collect();
        let c = compare(Metric::CpuUsPerReq, "A", "B", &few, None).unwrap();
        assert!(
            c.verdict
                .starts_with("B: no significant difference in CPU per request")
                && c.verdict.contains("need at least 6"),
            "{}",
            c.verdict
        );
    }

    #[test]
    fn exact_differences_are_printed_as_numbers() {
        let mut runs = Vec::new();
        for k in 0..8 {
            let mut a = run("A", k, 10.0 + k as f64 * 0.1);
            a.bytes_per_req = 262_173.0;
            let mut b = run("B", k, 10.0);
            b.bytes_per_req = 262_202.0;
            runs.extend([a, b]);
        }
        let c = compare(Metric::BytesPerReq, "A", "B", &runs, None).unwrap();
        assert_eq!(
            c.verdict,
            "B: exactly 29 more bytes per request in every round (262202 against 262173, +0.011%)"
        );
        assert!(c.significant);
        let same = compare(Metric::MeanMs, "A", "B", &runs, None).unwrap();
        assert_eq!(same.verdict, "B: the same mean latency in every round (1)");
        assert!(!same.significant);
    }

    #[test]
    fn headline_uses_the_geometric_mean_and_says_when_too_wide() {
        let mut runs = Vec::new();
        for k in 0..12 {
            let jitter = 1.0 + (k as f64 * 0.37).sin() * 0.01;
            runs.push(run("A", k, 10.0));
            runs.push(run("B", k, 10.3 * jitter));
        }
        let c = headline(Metric::CpuUsPerReq, "A", "B", &runs, None, Some(2.0)).unwrap();
        assert!(c.significant, "{}", c.verdict);
        assert!(
            c.verdict.starts_with("B: 3.") && c.verdict.contains("more CPU per request"),
            "{}",
            c.verdict
        );
        assert!(!c.verdict.contains("wider than"), "{}", c.verdict);
        let c = headline(Metric::CpuUsPerReq, "A", "B", &runs, None, Some(0.1)).unwrap();
        assert!(
            c.verdict.ends_with("wider than the ±0.1 asked for"),
            "{}",
            c.verdict
        );
    }
}

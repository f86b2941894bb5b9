//! Power and sample size of the paired comparison, planned before the measured rounds from an
//! A/A pilot (a fixed-sample design: the pilot's rounds only size the experiment, they are never
//! part of the test, and the test looks at its data once, so no peeking inflates false positives).
//!
//! The verdict needs the order-statistic CI of the median ratio to exclude 1; that interval is the
//! sign test's, whose efficiency relative to the paired t-test is 2/π for normal data. The normal
//! approximation's round count is therefore multiplied by π/2. The pilot's spread is replaced by
//! its one-sided 80% upper confidence bound, because a short pilot underestimates the spread as
//! often as not and an underpowered plan is the costly mistake.

use crate::stats::median;

/// z for a two-sided 5% test and for 80% power.
const Z_ALPHA: f64 = 1.959_964;
const Z_POWER: f64 = 0.841_621;
/// z of the 20% lower tail (for the chi-square quantile behind the spread's upper bound).
const Z_20: f64 = -0.841_621;
/// The median CI needs at least 6 rounds.
pub const MIN_ROUNDS: usize = 6;
/// A plan beyond this many rounds is as good as infinite (and keeps the arithmetic finite).
pub const MAX_ROUNDS: usize = 1_000_000;

/// Sample standard deviation.
pub fn sd(xs: &[f64]) -> Option<f64> {
    let n = xs.len();
    if n < 2 {
        return None;
    }
    let m = xs.iter().sum::<f64>() / n as f64;
    Some((xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt())
}

/// Wilson–Hilferty approximation of the chi-square quantile with `k` degrees of freedom at the
/// standard normal quantile `z`.
fn chi2_quantile(k: f64, z: f64) -> f64 {
    let c = 2.0 / (9.0 * k);
    k * (1.0 - c + z * c.sqrt()).powi(3)
}

/// One-sided 80% upper confidence bound of σ from a sample sd `s` of `n` values.
pub fn sigma_upper(s: f64, n: usize) -> f64 {
    let k = (n - 1) as f64;
    s * (k / chi2_quantile(k, Z_20)).sqrt()
}

/// Rounds that detect a change of `effect` (a fraction: 0.03 for 3%) with 80% power at 5%
/// two-sided, given the spread `sigma` of the per-round log ratios.
pub fn rounds_for(effect: f64, sigma: f64) -> usize {
    let d = (1.0 + effect.abs()).ln();
    let n = ((Z_ALPHA + Z_POWER) * sigma / d).powi(2) * std::f64::consts::FRAC_PI_2;
    if n.is_finite() {
        (n.ceil().min(MAX_ROUNDS as f64) as usize).max(MIN_ROUNDS)
    } else {
        MAX_ROUNDS
    }
}

/// The smallest change (a fraction) that `rounds` detect with 80% power, the inverse of
/// `rounds_for`.
pub fn detectable(rounds: usize, sigma: f64) -> f64 {
    ((Z_ALPHA + Z_POWER) * sigma * (std::f64::consts::FRAC_PI_2 / rounds as f64).sqrt()).exp_m1()
}

/// Log ratios of paired runs, a robust spread: 1.4826 × MAD when it is defined, else the sd
/// (which a single outlier round would inflate, making every plan needlessly long).
pub fn log_spread(ratios: &[f64]) -> Option<f64> {
    let logs: Vec<f64> = ratios.iter().map(|r| r.ln()).collect();
    let m = median(&logs);
    let mad = median(&logs.iter().map(|x| (x - m).abs()).collect::<Vec<_>>()) * 1.4826;
    if mad > 0.0 {
        Some(mad)
    } else {
        sd(&logs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_and_detectable_are_inverse() {
        // σ = 2%: a 3% change needs (2.8016 × 0.02 / ln 1.03)² × π/2 ≈ 5.67 → 6 rounds... at
        // least MIN_ROUNDS; a 1% change needs ≈ 50.
        assert_eq!(rounds_for(0.03, 0.02), 6);
        let n = rounds_for(0.01, 0.02);
        assert!((49..=52).contains(&n), "{n}");
        let d = detectable(n, 0.02);
        assert!(d <= 0.01 && d > 0.0098, "{d}");
        assert_eq!(rounds_for(1e-9, 1.0), MAX_ROUNDS);
    }

    #[test]
    fn upper_bound_of_the_spread() {
        // chi2(0.2, 9) = 5.380 (tables): sqrt(9 / 5.380) = 1.2934.
        let u = sigma_upper(1.0, 10);
        assert!((u - 1.2934).abs() < 0.003, "{u}");
        assert!(sigma_upper(1.0, 100) < u && sigma_upper(1.0, 100) > 1.0);
    }

    #[test]
    fn spread_of_log_ratios() {
        assert_eq!(sd(&[1.0]), None);
        let s = log_spread(&[1.0, 1.0, 1.0, 1.0]).unwrap();
        assert_eq!(s, 0.0);
        let s = log_spread(&[0.98, 1.02, 0.99, 1.01, 1.0, 1.5]).unwrap();
        assert!(s < 0.03, "one outlier does not dominate: {s}");
    }
}

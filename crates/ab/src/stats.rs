//! Distribution-free statistics for paired A/B rounds: medians, order-statistic confidence
//! intervals, Wilcoxon signed-rank and Mann–Whitney U tests (two-sided, computed as scipy does:
//! exact distributions for small samples without ties, normal approximations otherwise).

extern "C" {
    // From libm, which std already links on Linux.
    fn erfc(x: f64) -> f64;
}

/// P(Z > z) for a standard normal Z.
#[allow(unsafe_code)] // libm's erfc
pub fn norm_sf(z: f64) -> f64 {
    // SAFETY: erfc is a pure libm function defined for every f64.
    0.5 * unsafe { erfc(z / std::f64::consts::SQRT_2) }
}

pub fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn binom_cdf_half(k: usize, n: usize) -> f64 {
    // P(Binom(n, 1/2) <= k), exactly enough for n <= 1000 in f64 via logs.
    let mut total = 0.0;
    let mut log_c = 0.0f64; // log C(n, 0)
    for i in 0..=k.min(n) {
        if i > 0 {
            log_c += ((n - i + 1) as f64).ln() - (i as f64).ln();
        }
        total += (log_c - n as f64 * std::f64::consts::LN_2).exp();
    }
    total
}

/// Distribution-free 95% confidence interval for the median: the order statistics
/// `[x_(k), x_(n-k+1)]` with the largest `k` whose coverage is at least 95%. `None` when the
/// sample is too small (fewer than 6 values) for any such interval.
pub fn median_ci(xs: &[f64]) -> Option<(f64, f64)> {
    let n = xs.len();
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    // Coverage of [x_(k), x_(n-k+1)] is 1 - 2 P(B <= k-1).
    let k = (1..=n / 2)
        .take_while(|&k| 1.0 - 2.0 * binom_cdf_half(k - 1, n) >= 0.95)
        .last()?;
    Some((v[k - 1], v[n - k]))
}

/// Average ranks (1-based) with ties sharing the mean rank; also returns tie group sizes.
fn ranks(xs: &[f64]) -> (Vec<f64>, Vec<usize>) {
    let mut idx: Vec<usize> = (0..xs.len()).collect();
    idx.sort_by(|&a, &b| xs[a].total_cmp(&xs[b]));
    let mut r = vec![0.0; xs.len()];
    let mut ties = Vec::new();
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && xs[idx[j + 1]] == xs[idx[i]] {
            j += 1;
        }
        let avg = (i + j) as f64 / 2.0 + 1.0;
        for &k in &idx[i..=j] {
            r[k] = avg;
        }
        if j > i {
            ties.push(j - i + 1);
        }
        i = j + 1;
    }
    (r, ties)
}

/// Wilcoxon signed-rank test of `diffs` against a zero median (zeros dropped, as scipy's
/// default). Returns the two-sided p-value, or `None` with no non-zero difference.
pub fn wilcoxon(diffs: &[f64]) -> Option<f64> {
    let d: Vec<f64> = diffs.iter().copied().filter(|x| *x != 0.0).collect();
    let n = d.len();
    if n == 0 {
        return None;
    }
    let abs: Vec<f64> = d.iter().map(|x| x.abs()).collect();
    let (r, ties) = ranks(&abs);
    let r_plus: f64 = d
        .iter()
        .zip(&r)
        .filter(|(x, _)| **x > 0.0)
        .map(|(_, r)| r)
        .sum();
    let total = (n * (n + 1)) as f64 / 2.0;
    let t = r_plus.min(total - r_plus);
    // scipy's 'auto': the exact distribution for up to 50 differences without zeros, the
    // normal approximation otherwise.
    let exact = n <= 50 && n == diffs.len();
    let p = if exact {
        // Number of sign assignments per rank sum, over the actual (tied, averaged) ranks;
        // doubled so that half ranks are integers.
        let doubled: Vec<usize> = r.iter().map(|x| (x * 2.0).round() as usize).collect();
        let max: usize = doubled.iter().sum();
        let mut counts = vec![0f64; max + 1];
        counts[0] = 1.0;
        for &k in &doubled {
            for s in (k..=max).rev() {
                counts[s] += counts[s - k];
            }
        }
        let below: f64 = counts[..=((t * 2.0).round() as usize)].iter().sum();
        2.0 * below / 2f64.powi(n as i32)
    } else {
        let nf = n as f64;
        let mean = nf * (nf + 1.0) / 4.0;
        let tie_term: f64 = ties.iter().map(|&t| (t * t * t - t) as f64).sum();
        let var = nf * (nf + 1.0) * (2.0 * nf + 1.0) / 24.0 - tie_term / 48.0;
        2.0 * norm_sf(((t - mean) / var.sqrt()).abs())
    };
    Some(p.min(1.0))
}

/// Mann–Whitney U test of `x` against `y`, two-sided (exact for samples under 8 without ties,
/// normal approximation with tie and continuity corrections otherwise).
pub fn mann_whitney(x: &[f64], y: &[f64]) -> Option<f64> {
    let (n1, n2) = (x.len(), y.len());
    if n1 == 0 || n2 == 0 {
        return None;
    }
    let all: Vec<f64> = x.iter().chain(y).copied().collect();
    let (r, ties) = ranks(&all);
    let r1: f64 = r[..n1].iter().sum();
    let u1 = r1 - (n1 * (n1 + 1)) as f64 / 2.0;
    let u = u1.max((n1 * n2) as f64 - u1);
    let p = if n1 < 8 && n2 < 8 && ties.is_empty() {
        // counts[i][j][u]: arrangements of i x's and j y's with statistic u.
        let max = n1 * n2;
        let mut prev: Vec<Vec<f64>> = vec![vec![0.0; max + 1]; n2 + 1];
        for row in prev.iter_mut() {
            row[0] = 1.0;
        }
        for _ in 1..=n1 {
            let mut cur = vec![vec![0.0; max + 1]; n2 + 1];
            cur[0][0] = 1.0;
            for j in 1..=n2 {
                for s in 0..=max {
                    // The largest value is a y (adds nothing) or an x (beats j y's).
                    cur[j][s] = cur[j - 1][s] + if s >= j { prev[j][s - j] } else { 0.0 };
                }
            }
            prev = cur;
        }
        let total: f64 = prev[n2].iter().sum();
        let at_least: f64 = prev[n2][u as usize..].iter().sum();
        2.0 * at_least / total
    } else {
        let n = (n1 + n2) as f64;
        let tie_term: f64 = ties.iter().map(|&t| (t * t * t - t) as f64).sum();
        let s = ((n1 * n2) as f64 / 12.0 * ((n + 1.0) - tie_term / (n * (n - 1.0)))).sqrt();
        let mu = (n1 * n2) as f64 / 2.0;
        2.0 * norm_sf((u - mu - 0.5) / s)
    };
    Some(p.clamp(0.0, 1.0))
}

/// Rounds needed to resolve a ratio effect with 80% power at 5% two-sided, from the spread of
/// the per-round log ratios (normal approximation).
pub fn rounds_needed(log_ratios: &[f64]) -> Option<usize> {
    let n = log_ratios.len() as f64;
    if n < 2.0 {
        return None;
    }
    let mean = log_ratios.iter().sum::<f64>() / n;
    let sd = (log_ratios.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
    let effect = median(log_ratios).abs();
    if effect == 0.0 || !sd.is_finite() {
        return None;
    }
    let needed = ((1.959_964 + 0.841_621) * sd / effect).powi(2).ceil();
    (needed.is_finite() && needed < 1e6).then_some(needed.max(6.0) as usize)
}

//! `--profile`: where the CPU went. A profile is one more reading of a window, taken on the
//! server host like CPU and memory (`record`): each run of a profiled round carries its
//! server's folded stacks. Per function (self and inclusive) and per round, samples become µs
//! per request, and each variant's difference from the baseline gets a Student-t 95% interval
//! across the profiled rounds, as any metric does; the flame graph draws the same figures.
//!
//! Profiled rounds are extra rounds, interleaved with the measured ones: sampling costs the
//! server cores time (the interrupt and the stack walk), so only unprofiled rounds feed the
//! verdicts, and the report gives the overhead measured (CPU per request in profiled rounds
//! against the unprofiled ones).

mod flame;
pub(crate) mod record;

use crate::measure::Run;
use crate::sequential::t_quantile;
use crate::stats::median;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

pub(crate) use flame::differential_svg;
use record::RunProfile;

/// A B − A difference in µs per request across the profiled rounds.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Diff {
    /// Means over the profiled rounds.
    pub baseline_us: f64,
    pub variant_us: f64,
    /// Mean of the per-round differences (variant − baseline).
    pub diff_us: f64,
    /// Its 95% interval (Student t over the rounds; none under 3 rounds).
    pub ci_us: Option<(f64, f64)>,
}

impl Diff {
    fn of(pairs: &[(f64, f64)]) -> Diff {
        let n = pairs.len() as f64;
        let mean = |f: &dyn Fn(&(f64, f64)) -> f64| pairs.iter().map(f).sum::<f64>() / n.max(1.0);
        let d = mean(&|p| p.1 - p.0);
        let ci_us = (pairs.len() >= 3).then(|| {
            let var = pairs.iter().map(|p| (p.1 - p.0 - d).powi(2)).sum::<f64>() / (n - 1.0);
            let w = t_quantile(1.959_964, n - 1.0) * (var / n).sqrt();
            (d - w, d + w)
        });
        Diff {
            baseline_us: mean(&|p| p.0),
            variant_us: mean(&|p| p.1),
            diff_us: d,
            ci_us,
        }
    }

    /// "+1.23 µs (95% CI +1.01 to +1.45)".
    pub(crate) fn text(&self) -> String {
        match self.ci_us {
            Some((lo, hi)) => format!("{:+.3} µs (95% CI {lo:+.3} to {hi:+.3})", self.diff_us),
            None => format!("{:+.3} µs (no CI under 3 rounds)", self.diff_us),
        }
    }
}

/// One function's difference, in the variant against the baseline.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct FunctionDiff {
    pub variant: String,
    /// The symbol; kernel functions end in `_[k]`; a frame without a symbol is `[unknown]`, or
    /// its binary in brackets (`[libc.so.6]`).
    pub function: String,
    /// Samples whose innermost frame it is.
    #[serde(rename = "self")]
    pub own: Diff,
    /// Samples with it anywhere on the stack.
    pub inclusive: Diff,
}

/// A variant's profile over the profiled rounds.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct VariantProfile {
    pub name: String,
    /// Median over the profiled rounds: CPU sampled in its processes, µs per request.
    pub sampled_us_per_req: f64,
    /// Median CPU per request of the profiled rounds (its cgroup) over the unprofiled ones',
    /// as a change in percent: what sampling cost.
    pub overhead_pct: Option<f64>,
    /// Median over the profiled rounds: the CPU sampled over the CPU measured (its cgroup),
    /// percent. The per-function figures apportion the measured CPU by the samples.
    pub coverage_pct: Option<f64>,
    /// Share of its samples whose innermost frame has no symbol, percent.
    pub unknown_pct: f64,
}

/// What `--profile` found in a cell.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CellProfile {
    /// Profiled rounds kept (each beside a measured one).
    pub rounds: usize,
    /// CPU time per sample, µs.
    pub period_us: f64,
    pub variants: Vec<VariantProfile>,
    /// Per variant but the baseline: every sampled µs per request, B − A (the sum of every
    /// function's self difference).
    pub totals: Vec<(String, Diff)>,
    /// The functions with the largest differences, by |self difference|, per variant.
    pub functions: Vec<FunctionDiff>,
    /// Folded stacks written next to the JSON report (one file per variant).
    pub folded_files: Vec<String>,
    /// Per variant but the baseline: mean ns per request of each stack, (baseline, variant),
    /// for the differential flame graph.
    #[serde(skip)]
    pub flame: Vec<(String, StackPairs)>,
    /// Per variant: every stack's samples over all profiled rounds (the folded files).
    #[serde(skip)]
    pub folded: Vec<(String, BTreeMap<String, u64>)>,
}

/// Per stack: (baseline, variant) ns per request.
pub(crate) type StackPairs = BTreeMap<String, (u64, u64)>;

/// Per function, per round: ((baseline self, inclusive), (variant self, inclusive)) µs.
type RoundPairs = Vec<((f64, f64), (f64, f64))>;

/// Functions kept per variant in the report, by |self difference|.
const KEPT_FUNCTIONS: usize = 60;

/// Per stack: (self function, every distinct function on it). The first frame is the
/// process's name, not a function.
fn functions(stack: &str) -> (&str, BTreeSet<&str>) {
    let frames: Vec<&str> = stack.split(';').skip(1).collect();
    let leaf = frames.last().copied().unwrap_or(stack);
    (leaf, frames.into_iter().collect())
}

/// Whether a folded frame has no symbol: perf found none at its address, and inferno names it
/// `[unknown]`, or by its binary in brackets (`[libc.so.6]`, `[[vdso]]_[k]`) where perf knew
/// the mapping.
fn has_no_symbol(frame: &str) -> bool {
    let frame = frame
        .strip_suffix("_[k]")
        .or_else(|| frame.strip_suffix("_[j]"))
        .unwrap_or(frame);
    frame.starts_with('[') && frame.ends_with(']')
}

/// µs of CPU per request that one sample of the run stands for: the run's measured CPU per
/// request (its cgroup) apportioned by the samples, times `factor` (the variant's unprofiled
/// CPU per request over its profiled one). Samples × period alone miss what sampling itself
/// costs (its interrupts are not sampled) and what the machine charges differently; the
/// measured CPU is what the verdicts count. Without a CPU reading, samples × period.
fn us_per_sample(r: &Run, p: &RunProfile, factor: f64) -> f64 {
    let samples: u64 = p.stacks.values().sum();
    let per_req = 1.0 / r.requests.max(1) as f64;
    match r.cpu_us_per_req {
        Some(cpu) if samples > 0 => factor * cpu / samples as f64,
        _ => factor * p.period_us * per_req,
    }
}

/// µs per request of each function in one run: (self, inclusive), and the run's total.
fn per_function(r: &Run, p: &RunProfile, factor: f64) -> (BTreeMap<String, (f64, f64)>, f64) {
    let scale = us_per_sample(r, p, factor);
    let mut out: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    let mut total = 0.0;
    for (stack, n) in &p.stacks {
        let us = *n as f64 * scale;
        total += us;
        let (leaf, all) = functions(stack);
        out.entry(leaf.to_owned()).or_default().0 += us;
        for f in all {
            out.entry(f.to_owned()).or_default().1 += us;
        }
    }
    (out, total)
}

/// Samples × period per request: the CPU the samples saw, µs.
fn sampled_us(r: &Run, p: &RunProfile) -> f64 {
    p.stacks.values().sum::<u64>() as f64 * p.period_us / r.requests.max(1) as f64
}

/// The profile of a cell from its profiled runs (`profiled`, numbered by profiled round) and
/// its measured ones (`measured`, for the overhead); `names[0]` is the baseline.
pub(crate) fn analyse(names: &[String], profiled: &[Run], measured: &[Run]) -> Option<CellProfile> {
    let base = names.first()?;
    let run = |name: &str, round: usize| {
        profiled
            .iter()
            .find(|r| r.variant == name && r.round == round)
            .and_then(|r| Some((r, r.profile.as_ref()?)))
    };
    let mut rounds: Vec<usize> = profiled.iter().map(|r| r.round).collect();
    rounds.sort_unstable();
    rounds.dedup();
    let rounds: Vec<usize> = rounds
        .into_iter()
        .filter(|&k| names.iter().all(|n| run(n, k).is_some()))
        .collect();
    let period_us = profiled.iter().find_map(|r| r.profile.as_ref())?.period_us;
    let cpu_median = |runs: &[Run], name: &str| {
        let v: Vec<f64> = runs
            .iter()
            .filter(|r| r.variant == name)
            .filter_map(|r| r.cpu_us_per_req)
            .collect();
        (!v.is_empty()).then(|| median(&v))
    };
    let kept: Vec<Run> = profiled
        .iter()
        .filter(|r| rounds.contains(&r.round))
        .cloned()
        .collect();
    let mut variants = Vec::new();
    let mut folded = Vec::new();
    for name in names {
        let (mut totals, mut coverage) = (Vec::new(), Vec::new());
        let (mut unknown, mut all) = (0u64, 0u64);
        let mut sum: BTreeMap<String, u64> = BTreeMap::new();
        for &k in &rounds {
            let Some((r, p)) = run(name, k) else { continue };
            let sampled = sampled_us(r, p);
            totals.push(sampled);
            if let Some(cpu) = r.cpu_us_per_req.filter(|&c| c > 0.0) {
                coverage.push(sampled / cpu * 100.0);
            }
            for (stack, n) in &p.stacks {
                *sum.entry(stack.clone()).or_insert(0) += n;
                all += n;
                if has_no_symbol(functions(stack).0) {
                    unknown += n;
                }
            }
        }
        variants.push(VariantProfile {
            name: name.clone(),
            sampled_us_per_req: if totals.is_empty() {
                0.0
            } else {
                median(&totals)
            },
            overhead_pct: cpu_median(&kept, name)
                .zip(cpu_median(measured, name))
                .map(|(p, m)| (p / m - 1.0) * 100.0),
            coverage_pct: (!coverage.is_empty()).then(|| median(&coverage)),
            unknown_pct: unknown as f64 * 100.0 / all.max(1) as f64,
        });
        folded.push((name.clone(), sum));
    }
    // Each profiled run's measured CPU is apportioned by its samples (`us_per_sample`), and
    // sampling makes a profiled round cost more (the overhead above) on every µs the server
    // runs: each variant's figures are scaled back to its unprofiled CPU per request, so that
    // they are in the verdicts' units and a cost defined relative to the server's own (`serve
    // --burn`) is not counted larger than it is in the measured rounds.
    let factor = |name: &str| {
        cpu_median(measured, name)
            .zip(cpu_median(&kept, name))
            .filter(|&(m, p)| m > 0.0 && p > 0.0)
            .map_or(1.0, |(m, p)| m / p)
    };
    let fa_base = factor(base);
    let mut totals = Vec::new();
    let mut functions_out = Vec::new();
    let mut flame = Vec::new();
    for name in &names[1..] {
        let fv_name = factor(name);
        let mut per: BTreeMap<String, RoundPairs> = BTreeMap::new();
        let mut total_pairs = Vec::new();
        let mut stacks: BTreeMap<String, (f64, f64)> = BTreeMap::new();
        for &k in &rounds {
            let (Some((ra, pa)), Some((rv, pv))) = (run(base, k), run(name, k)) else {
                continue;
            };
            let (fa, ta) = per_function(ra, pa, fa_base);
            let (fv, tv) = per_function(rv, pv, fv_name);
            total_pairs.push((ta, tv));
            let names: BTreeSet<&String> = fa.keys().chain(fv.keys()).collect();
            for f in names {
                let a = fa.get(f).copied().unwrap_or_default();
                let v = fv.get(f).copied().unwrap_or_default();
                per.entry(f.clone()).or_default().push((a, v));
            }
            for (which, r, p, f) in [(0, ra, pa, fa_base), (1, rv, pv, fv_name)] {
                let scale = us_per_sample(r, p, f) * 1e3;
                for (stack, n) in &p.stacks {
                    let e = stacks.entry(stack.clone()).or_default();
                    let ns = *n as f64 * scale / rounds.len() as f64;
                    if which == 0 {
                        e.0 += ns;
                    } else {
                        e.1 += ns;
                    }
                }
            }
        }
        // A function absent from a round's samples had none in it: zero, not missing.
        let n = total_pairs.len();
        let mut diffs: Vec<FunctionDiff> = per
            .into_iter()
            .map(|(function, mut pairs)| {
                pairs.resize(n, ((0.0, 0.0), (0.0, 0.0)));
                let own: Vec<(f64, f64)> = pairs.iter().map(|(a, v)| (a.0, v.0)).collect();
                let inc: Vec<(f64, f64)> = pairs.iter().map(|(a, v)| (a.1, v.1)).collect();
                FunctionDiff {
                    variant: name.clone(),
                    function,
                    own: Diff::of(&own),
                    inclusive: Diff::of(&inc),
                }
            })
            .collect();
        diffs.sort_by(|x, y| y.own.diff_us.abs().total_cmp(&x.own.diff_us.abs()));
        diffs.truncate(KEPT_FUNCTIONS);
        functions_out.extend(diffs);
        totals.push((name.clone(), Diff::of(&total_pairs)));
        flame.push((
            name.clone(),
            stacks
                .into_iter()
                .map(|(s, (a, v))| (s, (a.round() as u64, v.round() as u64)))
                .collect(),
        ));
    }
    Some(CellProfile {
        rounds: rounds.len(),
        period_us,
        variants,
        totals,
        functions: functions_out,
        folded_files: Vec::new(),
        flame,
        folded,
    })
}

impl CellProfile {
    /// The top `n` functions of `variant`, by |self difference|.
    pub(crate) fn top<'a>(
        &'a self,
        variant: &'a str,
        n: usize,
    ) -> impl Iterator<Item = &'a FunctionDiff> {
        self.functions
            .iter()
            .filter(move |f| f.variant == variant)
            .take(n)
    }

    /// Sentences for the cell's notes: how the profile was taken, what it cost, what it could
    /// not name.
    pub(crate) fn notes(&self) -> Vec<String> {
        let mut notes = vec![format!(
            "profile: {} profiled round(s) interleaved with the measured ones, which alone feed the verdicts; perf cpu-clock every {:.0} µs of CPU on the server cores, call stacks and kernel frames",
            self.rounds, self.period_us
        )];
        for v in &self.variants {
            let overhead = v
                .overhead_pct
                .map_or("n/a".to_owned(), |o| format!("{o:+.1}%"));
            let mut s = format!(
                "profile of {}: {:.2} µs per request sampled (median); CPU per request while profiled {overhead} against the unprofiled rounds",
                v.name, v.sampled_us_per_req
            );
            if let Some(c) = v.coverage_pct {
                s += &format!(
                    "; the samples saw {c:.0}% of its CPU while profiled (sampling's own interrupts are not sampled), and the functions share out the CPU measured"
                );
            }
            if v.unknown_pct >= 1.0 {
                s += &format!(
                    "; {:.0}% of its samples have no symbol (a stripped binary, JIT code, or a binary perf could not read): they show as [unknown] or as their binary, [libc.so.6]",
                    v.unknown_pct
                );
            }
            notes.push(s);
        }
        notes
    }

    /// The folded stacks of every variant, in flamegraph.pl's format (samples per stack).
    pub(crate) fn folded_text(stacks: &BTreeMap<String, u64>) -> String {
        stacks.iter().map(|(s, n)| format!("{s} {n}\n")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A profiled run: `spin` samples in the burn and 100 in the rest, per 1000 requests.
    fn run(variant: &str, round: usize, spin: u64, rest: u64) -> Run {
        // The samples see 80% of the CPU measured.
        let sampled = (spin + rest) as f64 * 250.0 / 1000.0;
        let mut r = crate::compare::tests::run(variant, round, sampled / 0.8);
        let mut stacks = BTreeMap::new();
        stacks.insert("loadterm;main;handle;write_[k]".to_owned(), rest);
        if spin > 0 {
            stacks.insert("loadterm;main;handle;loadterm::spin".to_owned(), spin);
        }
        r.profile = Some(RunProfile {
            period_us: 250.0,
            stacks,
        });
        r
    }

    #[test]
    fn frames_named_by_their_binary_count_as_without_a_symbol() {
        let names = vec!["A".to_owned()];
        let mut r = crate::compare::tests::run("A", 0, 10.0);
        let stacks = [
            ("loadterm;main;[unknown]", 1),
            ("loadterm;main;write;[libc.so.6]", 2),
            ("loadterm;main;[[vdso]]_[k]", 3),
            ("loadterm;main;<[T] as core::fmt::Debug>::fmt", 4),
            ("loadterm;main;tcp_sendmsg_[k]", 10),
        ];
        r.profile = Some(RunProfile {
            period_us: 250.0,
            stacks: stacks.iter().map(|&(s, n)| (s.to_owned(), n)).collect(),
        });
        let p = analyse(&names, &[r], &[]).unwrap();
        assert!((p.variants[0].unknown_pct - 30.0).abs() < 1e-9, "{p:?}");
        assert!(p.notes()[1].contains("30% of its samples have no symbol"));
    }

    #[test]
    fn a_function_only_in_the_variant_comes_first_with_its_interval() {
        let names = vec!["A".to_owned(), "B".to_owned()];
        let mut runs = Vec::new();
        for k in 0..8 {
            runs.push(run("A", k, 0, 40 + (k as u64 % 3)));
            runs.push(run("B", k, 4 + (k as u64 % 2), 40 + (k as u64 % 2)));
        }
        let p = analyse(&names, &runs, &[]).unwrap();
        let top = p.top("B", 1).next().unwrap();
        assert_eq!(top.function, "loadterm::spin");
        // 4.5 samples of 250 µs per 1000 requests, 1.125 µs per request sampled, of the CPU
        // measured: 1.40625 µs.
        assert!((top.own.diff_us - 1.406_25).abs() < 1e-9, "{top:?}");
        let (lo, hi) = top.own.ci_us.unwrap();
        assert!(lo < 1.406_25 && 1.406_25 < hi && lo > 0.0);
        let b = &p.variants[1];
        assert!((b.coverage_pct.unwrap() - 80.0).abs() < 1e-9, "{b:?}");
        // `handle` holds the burn and the rest: its inclusive difference is the total's.
        let handle = p.functions.iter().find(|f| f.function == "handle").unwrap();
        let total = &p.totals[0].1;
        assert!((handle.inclusive.diff_us - total.diff_us).abs() < 1e-9);
        assert_eq!(p.flame[0].1["loadterm;main;handle;loadterm::spin"].0, 0);
    }
}

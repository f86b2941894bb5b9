//! One cell of a comparison (a protocol and a request): its load regime, chosen from a pilot;
//! its rounds, each variant once per round in random order; contaminated rounds run again;
//! and when to stop, by a fixed round count or when the headline interval is narrow enough.

use crate::compare;
use crate::contam;
use crate::fixture::Backends;
use crate::measure::{self, Run, RunSpec, Started, METRICS};
use crate::procs;
use crate::report::{Cell, Variant};
use crate::sequential::{self, Moments};
use anyhow::{bail, Result};
use rand::seq::SliceRandom;
use std::time::{Duration, Instant};

/// The load every run of a cell gets.
#[derive(Debug, Clone, Copy)]
pub enum Regime {
    /// A saturating client (`-c`, `-m`): CPU per request includes batching.
    Closed,
    /// Open loop at this many requests per second.
    Rate(f64),
    /// Open loop at this fraction of the baseline's closed-loop throughput (measured with the
    /// other variants when they are measured together), lowered until the servers and the
    /// clients have room.
    RateFraction(f64),
}

/// The client core is kept under this busy share, so that it sends on time.
const CLIENT_BUSY_MAX: f64 = 0.7;
/// Above this busy share of their cores, the servers have too little room for a candidate that
/// costs more: the pilot lowers the rate.
const SERVER_BUSY_MAX: f64 = 0.7;
/// Open-loop windows of the pilot's check of the rate (each ×0.7 of the last: down to 0.08).
const PILOT_CHECKS: usize = 8;

/// Servers of a cell: started for each run, or once for the whole cell.
pub enum Servers {
    Fresh,
    Kept(Vec<Option<Started>>),
}

impl Servers {
    /// Kept servers, one per variant, started (and warmed up) now.
    pub fn kept(specs: &[RunSpec], names: &[String]) -> Result<Servers> {
        // Filled in place, so that a start that fails drops (and stops) the ones started.
        let mut kept = Servers::Kept(Vec::new());
        for (spec, name) in specs.iter().zip(names) {
            let s = measure::start(spec, name)?;
            if let Servers::Kept(v) = &mut kept {
                v.push(Some(s));
            }
        }
        Ok(kept)
    }

    /// Kept servers stopped and started again (each process's layout and allocator state is a
    /// bias of its own, which only new processes average out).
    fn restart(&mut self, specs: &[RunSpec], names: &[String]) -> Result<()> {
        if let Servers::Kept(v) = self {
            v.iter_mut()
                .filter_map(Option::take)
                .for_each(Started::stop);
            *self = Servers::kept(specs, names)?;
        }
        Ok(())
    }

    /// One round: the variants in `order`, one after another, or with `together` (kept servers
    /// only) all in the same window.
    fn round(
        &mut self,
        order: &[usize],
        specs: &[RunSpec],
        names: &[String],
        round: usize,
        together: bool,
    ) -> Result<Vec<Run>> {
        let Servers::Kept(kept) = self else {
            return order
                .iter()
                .map(|&k| measure::run(&specs[k], &names[k], round))
                .collect();
        };
        let mut started: Vec<Option<&mut Started>> = kept.iter_mut().map(Option::as_mut).collect();
        let mut jobs = Vec::new();
        for &k in order {
            match started.get_mut(k).and_then(Option::take) {
                Some(s) => jobs.push((&specs[k], names[k].as_str(), s)),
                None => bail!("variant {}: no server", names[k]),
            }
        }
        if together {
            return measure::windows(&mut jobs, round);
        }
        let mut runs = Vec::new();
        for job in jobs {
            runs.extend(measure::windows(&mut [job], round)?);
        }
        Ok(runs)
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        if let Servers::Kept(v) = self {
            v.iter_mut()
                .filter_map(Option::take)
                .for_each(Started::stop);
        }
    }
}

/// Everything a cell's rounds need.
pub struct CellPlan<'a> {
    pub tag: String,
    /// Variants in order, the baseline first (and the A/A twin last, when `twin`).
    pub names: Vec<String>,
    pub specs: Vec<RunSpec>,
    pub twin: bool,
    pub regime: Regime,
    /// Measured rounds asked for; `None`: until the headline interval is ±`precision_pct`.
    pub rounds: Option<usize>,
    pub precision_pct: f64,
    /// Rounds run first and discarded.
    pub warmup_rounds: usize,
    pub deadline: Option<Instant>,
    /// Kept servers are started again after this many measured rounds.
    pub restart_every: usize,
    pub headline: &'static str,
    /// Kept servers measured all in the same window (else one after another).
    pub together: bool,
    pub backends: &'a mut Backends,
    pub rng: &'a mut rand::rngs::StdRng,
}

impl CellPlan<'_> {
    /// The cell measured: `variants` as reported (the A/A twin, if any, last and left out).
    pub fn run(mut self, servers: &mut Servers, mut variants: Vec<Variant>) -> Result<Cell> {
        let (rate, regime) = self.choose_rate(servers)?;
        if let Some(r) = rate {
            for s in &mut self.specs {
                s.load_args.extend(["--rate".to_owned(), format!("{r:.0}")]);
            }
        }
        eprintln!("{} regime: {regime}", self.tag);
        let (runs, repeats, budget_ended) = self.rounds(servers)?;
        let rounds = runs.iter().map(|r| r.round + 1).max().unwrap_or(0);
        let duration = self.specs[0].duration.as_secs_f64();
        let mut notes = vec![match servers {
            Servers::Fresh => format!("a fresh server process for every run of {duration} s"),
            Servers::Kept(_) if self.together => format!(
                "servers kept (started again every {} rounds), every variant measured in the same window of {duration} s",
                self.restart_every
            ),
            Servers::Kept(_) => format!(
                "servers kept (started again every {} rounds), the variants measured one after another in windows of {duration} s",
                self.restart_every
            ),
        }];
        if !repeats.is_empty() {
            notes.push(repeat_note(&repeats));
        }
        if procs::interrupted() {
            notes.push(format!("interrupted after {rounds} rounds"));
        }
        if budget_ended {
            notes.push(format!(
                "the time budget ended after {rounds} rounds, before every interval reached ±{:.1} points",
                self.precision_pct
            ));
        }
        let base = self.names[0].clone();
        let twin = self.twin.then(|| self.names[self.names.len() - 1].clone());
        let precision = self.rounds.is_none().then_some(self.precision_pct);
        let floor = |metric: &str| {
            let t = twin.as_deref()?;
            let c = if metric == self.headline {
                compare::headline(metric, &base, t, &runs, None, None)?
            } else {
                compare::compare(metric, &base, t, &runs, None)?
            };
            let (lo, hi) = c.ci_pct?;
            Some(lo.abs().max(hi.abs()))
        };
        let mut comparisons = Vec::new();
        for v in self.names[1..]
            .iter()
            .filter(|v| Some(v.as_str()) != twin.as_deref())
        {
            for metric in METRICS {
                let noise = floor(metric);
                comparisons.extend(if *metric == self.headline {
                    compare::headline(metric, &base, v, &runs, noise, precision)
                } else {
                    compare::compare(metric, &base, v, &runs, noise)
                });
            }
        }
        let (aa_runs, runs): (Vec<Run>, Vec<Run>) = match &twin {
            Some(t) => {
                let aa: Vec<Run> = runs
                    .iter()
                    .filter(|r| r.variant == base || r.variant == *t)
                    .cloned()
                    .collect();
                (aa, runs.into_iter().filter(|r| r.variant != *t).collect())
            }
            None => (Vec::new(), runs),
        };
        if twin.is_some() {
            variants.pop();
        }
        Ok(Cell {
            proto: self.specs[0].proto.clone(),
            url: self.specs[0].url.clone(),
            variants,
            runs,
            aa_runs,
            comparisons,
            regime,
            rounds,
            notes,
        })
    }

    fn shape(&self) -> String {
        let a = &self.specs[0].load_args;
        let get = |flag: &str| {
            a.iter()
                .position(|x| x == flag)
                .and_then(|i| a.get(i + 1))
                .cloned()
                .unwrap_or_default()
        };
        format!("-c {} -m {}", get("-c"), get("-m"))
    }

    /// One pilot round with extra load options: the baseline, or every variant when they are
    /// measured together (they share the server's cores).
    fn pilot(&mut self, servers: &mut Servers, extra: &[String]) -> Result<Vec<Run>> {
        let specs: Vec<RunSpec> = self
            .specs
            .iter()
            .map(|s| {
                let mut s = s.clone();
                s.load_args.extend_from_slice(extra);
                s
            })
            .collect();
        let order: Vec<usize> = if self.together {
            (0..specs.len()).collect()
        } else {
            vec![0]
        };
        servers.round(&order, &specs, &self.names, 0, self.together)
    }

    /// The rate of an open-loop regime (`None`: closed loop), and the regime in words.
    fn choose_rate(&mut self, servers: &mut Servers) -> Result<(Option<f64>, String)> {
        let shape = self.shape();
        let cores = self.specs[0].server_cpus.len().max(1) as f64;
        match self.regime {
            Regime::Closed => Ok((None, format!("closed loop, saturating client ({shape})"))),
            Regime::Rate(r) => Ok((
                Some(r),
                format!("open loop at {r:.0} req/s (fixed --rate), {shape}"),
            )),
            Regime::RateFraction(f) => {
                eprintln!(
                    "{} pilot: {f} × the baseline's closed-loop throughput, checked for room",
                    self.tag
                );
                let client_cores = self.specs[0].client_cpus.len().max(1) as f64;
                let saturated = self.pilot(servers, &[])?;
                let mut rate = (saturated[0].rps * f).max(1.0);
                let mut seen = (0.0, 0.0);
                let mut room = false;
                // Checked: the servers must keep room for a candidate that costs more, and the
                // clients must keep up: a saturated client sends in bursts, and the server then
                // batches them, which hid a quarter of an injected 10% (+7.4%, CI +6.5% to +8.4%,
                // with the client core 100% busy; +8.7% and +9.5% at rates leaving it room). The
                // rate kept is always one that was checked.
                for check in 0..PILOT_CHECKS {
                    if check > 0 {
                        rate *= 0.7;
                    }
                    let p = self.pilot(servers, &["--rate".to_owned(), format!("{rate:.0}")])?;
                    let server = p
                        .iter()
                        .map(|r| r.server_cpu_util.unwrap_or(0.0))
                        .sum::<f64>()
                        / cores;
                    let client = p
                        .iter()
                        .map(|r| {
                            r.client_cpu_util
                                .unwrap_or(r.checks.client_busy_pct / 100.0)
                        })
                        .sum::<f64>()
                        / client_cores;
                    seen = (server, client);
                    let missed = p
                        .iter()
                        .any(|r| r.missed_pct.is_some_and(|m| m > contam::MISSED_PCT / 4.0));
                    eprintln!(
                        "{} pilot check at {rate:.0} req/s: server cores {:.0}% busy, clients {:.0}% of theirs{}",
                        self.tag,
                        server * 100.0,
                        client * 100.0,
                        if missed { ", sends missed" } else { "" }
                    );
                    if server <= SERVER_BUSY_MAX && client <= CLIENT_BUSY_MAX && !missed {
                        room = true;
                        break;
                    }
                }
                let each = if self.together && self.names.len() > 1 {
                    format!(
                        " (each of the {} variants, measured together)",
                        self.names.len()
                    )
                } else {
                    String::new()
                };
                Ok((
                    Some(rate),
                    format!(
                        "open loop at {rate:.0} req/s{each}, {f} × the baseline's closed-loop throughput ({:.0} req/s{}) or less, for room ({}: server cores {:.0}% busy, clients {:.0}% of theirs), {shape}",
                        saturated[0].rps,
                        if self.together && self.names.len() > 1 {
                            ", sharing the server cores with the other variants"
                        } else {
                            ""
                        },
                        if room {
                            "checked"
                        } else {
                            "NO ROOM FOUND, the lowest rate tried"
                        },
                        seen.0 * 100.0,
                        seen.1 * 100.0,
                    ),
                ))
            }
        }
    }

    /// The measured rounds (runs numbered by measured round), the flags of the rounds run
    /// again, and whether the time budget ended them.
    #[allow(clippy::type_complexity)]
    fn rounds(&mut self, servers: &mut Servers) -> Result<(Vec<Run>, Vec<Vec<String>>, bool)> {
        let n = self.names.len();
        let mut moments = vec![Moments::default(); n];
        let mut runs = Vec::new();
        let mut repeats = Vec::new();
        let (mut measured, mut started, mut restarted) = (0usize, 0usize, 0usize);
        let mut budget_ended = false;
        let mut last_round = Duration::ZERO;
        loop {
            if self.rounds.is_some_and(|r| measured >= r) || procs::interrupted() {
                break;
            }
            if let Some(d) = self.deadline {
                if measured >= 2 && Instant::now() + last_round > d {
                    budget_ended = true;
                    break;
                }
            }
            self.backends.check_alive()?;
            if measured > 0 && measured.is_multiple_of(self.restart_every) && restarted != measured
            {
                servers.restart(&self.specs, &self.names)?;
                restarted = measured;
            }
            let t0 = Instant::now();
            let mut order: Vec<usize> = (0..n).collect();
            order.shuffle(self.rng);
            let this =
                match servers.round(&order, &self.specs, &self.names, measured, self.together) {
                    // The signal reached the load clients too: the round is lost, not the run.
                    Err(_) if procs::interrupted() => break,
                    r => r?,
                };
            last_round = t0.elapsed();
            started += 1;
            if started <= self.warmup_rounds {
                eprintln!("{} warm-up round (discarded)", self.tag);
                continue;
            }
            let flags: Vec<&String> = this.iter().flat_map(|r| &r.checks.repeat).collect();
            // Repeating is decided from the contamination checks alone, before the round's
            // metrics are looked at; at most as many repeats as kept rounds (plus a start),
            // so that a busy machine ends the run rather than stretching it.
            if !flags.is_empty() && repeats.len() < measured + 5 {
                let text: Vec<&str> = flags.iter().map(|f| f.as_str()).collect();
                eprintln!("{} round run again: {}", self.tag, text.join("; "));
                repeats.push(text.iter().map(|f| flag_kind(f).to_owned()).collect());
                continue;
            }
            for r in &this {
                if r.errors > 0 {
                    eprintln!(
                        "  warning: {} had {} transport errors in round {}",
                        r.variant,
                        r.errors,
                        measured + 1
                    );
                }
            }
            let value = |k: usize| {
                this.iter()
                    .find(|r| r.variant == self.names[k])
                    .map(|r| r.metric(self.headline))
            };
            for (k, m) in moments.iter_mut().enumerate().skip(1) {
                if let (Some(a), Some(b)) = (value(0), value(k)) {
                    if a > 0.0 && b > 0.0 && a.is_finite() && b.is_finite() {
                        m.push((b / a).ln());
                    }
                }
            }
            runs.extend(this);
            measured += 1;
            let estimates: Vec<_> = moments[1..].iter().map(Moments::estimate).collect();
            eprintln!("{}", self.progress(measured, &estimates));
            if self.rounds.is_none()
                && estimates.iter().all(|e| {
                    e.as_ref()
                        .is_some_and(|e| sequential::resolved(e, self.precision_pct))
                })
            {
                break;
            }
        }
        Ok((runs, repeats, budget_ended))
    }

    /// "[h1 /?s=1k] round 14: B +2.9% ±2.4 in cpu_us_per_req (target ±1.5), 8m12s left".
    fn progress(&self, measured: usize, estimates: &[Option<sequential::Estimate>]) -> String {
        let parts: Vec<String> = self.names[1..]
            .iter()
            .zip(estimates)
            .map(|(name, e)| match e {
                Some(e) => format!("{name} {:+.1}% ±{:.1}", e.change_pct, e.half_width_pct),
                None => format!("{name} …"),
            })
            .collect();
        let target = if self.rounds.is_none() {
            format!(" (target ±{:.1})", self.precision_pct)
        } else {
            String::new()
        };
        let left = match (self.rounds, self.deadline) {
            (Some(r), _) => format!(", {} rounds left", r.saturating_sub(measured)),
            (None, Some(d)) => {
                let s = d.saturating_duration_since(Instant::now()).as_secs();
                format!(", {}m{:02}s left", s / 60, s % 60)
            }
            (None, None) => String::new(),
        };
        format!(
            "{} round {measured}: {} in {}{target}{left}",
            self.tag,
            parts.join(", "),
            self.headline
        )
    }
}

/// What kind of contamination a flag reports: its words before the first figure
/// ("foreign CPU", "client behind", "steal").
fn flag_kind(flag: &str) -> &str {
    flag.split(|c: char| c.is_ascii_digit() || c == ':' || c == '+' || c == '-')
        .next()
        .unwrap_or(flag)
        .trim()
}

/// "3 rounds run again (contaminated): foreign CPU in 2, client behind in 1".
fn repeat_note(repeats: &[Vec<String>]) -> String {
    let mut kinds: Vec<(String, usize)> = Vec::new();
    for round in repeats {
        let mut seen: Vec<&String> = round.iter().collect();
        seen.sort();
        seen.dedup();
        for k in seen {
            match kinds.iter_mut().find(|(n, _)| n == k) {
                Some((_, c)) => *c += 1,
                None => kinds.push((k.clone(), 1)),
            }
        }
    }
    let parts: Vec<String> = kinds.iter().map(|(k, c)| format!("{k} in {c}")).collect();
    format!(
        "{} round(s) run again (contaminated): {}",
        repeats.len(),
        parts.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_are_summarised_by_kind() {
        let repeats = vec![
            vec![
                flag_kind("foreign CPU 88.1% on the server cores").to_owned(),
                flag_kind("client behind: 7.0% of the scheduled sends not made").to_owned(),
                flag_kind("foreign CPU 80.0% on the server cores").to_owned(),
            ],
            vec![flag_kind("steal 3.1%").to_owned()],
            vec![flag_kind("client window +4.1 ms off the server's readings").to_owned()],
        ];
        assert_eq!(
            repeat_note(&repeats),
            "3 round(s) run again (contaminated): client behind in 1, foreign CPU in 1, steal in 1, client window in 1"
        );
    }
}

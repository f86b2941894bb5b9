//! One cell of a comparison (a protocol and a request): its load regime, chosen from a pilot;
//! its rounds, each variant once per round in random order; contaminated rounds run again;
//! and when to stop, by a fixed round count or when the headline interval is narrow enough.

use crate::compare;
use crate::contam;
use crate::host::Backends;
use crate::measure::{self, Run, RunSpec, Started};
use crate::metric::Metric;
use crate::procs;
use crate::results::{Capacity, Cell, Variant};
use crate::sequential::{self, Moments};
use anyhow::{bail, Result};
use rand::seq::SliceRandom;
use std::time::{Duration, Instant};

/// The load every run of a cell gets.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Regime {
    /// A saturating client (`-c`, `-m`): CPU per request includes batching.
    Closed,
    /// Open loop at this many requests per second.
    Rate(f64),
    /// Open loop at this fraction of the baseline's closed-loop throughput (measured with the
    /// other variants when they are measured together), lowered until the servers and the
    /// clients have room.
    RateFraction(f64),
    /// Open loop at this fraction of the baseline's closed-loop throughput, as asked
    /// (`--levels`): checked, and a rate without room is kept with a warning.
    Level(f64),
}

/// The client core is kept under this busy share, so that it sends on time.
const CLIENT_BUSY_MAX: f64 = 0.7;
/// Above this busy share of their cores, the servers have too little room for a candidate that
/// costs more: the pilot lowers the rate.
const SERVER_BUSY_MAX: f64 = 0.7;
/// Share of the client's in-flight slots (`-c × -m`) above which its late sends are the
/// server's latency, not its own CPU.
const SLOTS_FULL: f64 = 0.8;
/// Open-loop windows of the pilot's check of the rate (each ×0.7 of the last: down to 0.08).
const PILOT_CHECKS: usize = 8;

/// What one pilot window at a fixed rate measured, over all the variants' runs.
#[derive(Debug, Clone, Copy)]
struct PilotCheck {
    /// Busy share of the server cores.
    server: f64,
    /// The clients' own CPU time over the window, a share of the client cores.
    client: f64,
    /// Sends made over 1 ms late, percent of the sends (the worst client).
    late_pct: f64,
    /// A client failed to make over a quarter of the share of sends whose absence
    /// contaminates a round (`contam::MISSED_PCT`).
    missed: bool,
    /// Requests in flight on average (rate × mean latency, Little's law) over the client's
    /// slots (`-c × -m`), the fullest variant's.
    slots_used: f64,
}

impl PilotCheck {
    fn of(runs: &[Run], cores: f64, client_cores: f64, slots: f64) -> PilotCheck {
        let server = runs
            .iter()
            .map(|r| r.server_cpu_util.unwrap_or(0.0))
            .sum::<f64>()
            / cores;
        let client = runs
            .iter()
            .map(|r| {
                r.client_cpu_util
                    .unwrap_or(r.checks.client_busy_pct / 100.0)
            })
            .sum::<f64>()
            / client_cores;
        PilotCheck {
            server,
            client,
            late_pct: runs.iter().filter_map(|r| r.late_pct).fold(0.0, f64::max),
            missed: runs
                .iter()
                .any(|r| r.missed_pct.is_some_and(|m| m > contam::MISSED_PCT / 4.0)),
            slots_used: runs
                .iter()
                .map(|r| r.rps * r.mean_ms / 1e3 / slots.max(1.0))
                .fold(0.0, f64::max),
        }
    }

    /// Late with the servers' and the clients' cores to spare and the clients' slots nearly
    /// all taken: the responses take so long that the sends wait for a free slot. Lowering the
    /// rate would only measure the server at a trickle, where every request pays a wake-up.
    fn slots_full(&self) -> bool {
        self.late_pct > contam::CLIENT_LATE_MAX_PCT
            && self.client <= CLIENT_BUSY_MAX
            && self.server <= SERVER_BUSY_MAX
            && self.slots_used >= SLOTS_FULL
    }

    /// Room for the rate: the servers can take a candidate that costs more, and the clients
    /// send on time. A client that falls behind sends its late requests in bursts, and the
    /// server then batches them, which hid a quarter of an injected 10% (+7.4%, CI +6.5% to
    /// +8.4%; +8.7% and +9.5% at rates leaving the client room). Its busy share alone does not
    /// show it: behind, a client handles many sends per wake-up and uses less CPU than on time
    /// at a lower rate (H1 1k, two clients on one core: 27% busy at 40 000 req/s each, 89% of
    /// the sends late; 100% busy at 27 000, on time), so lateness is checked too.
    fn room(&self) -> bool {
        self.room_within(contam::CLIENT_LATE_MAX_PCT)
    }

    fn room_within(&self, late_max_pct: f64) -> bool {
        self.server <= SERVER_BUSY_MAX
            && self.client <= CLIENT_BUSY_MAX
            && self.late_pct <= late_max_pct
            && !self.missed
    }
}

/// The regime the pilot chose.
struct Chosen {
    /// Open loop at this rate (`None`: closed loop).
    rate: Option<f64>,
    /// In words, for the reports.
    regime: String,
    /// The lateness that contaminates a round (a rate the pilot checked only).
    late_limit: Option<f64>,
    /// The pilot's closed-loop window (every variant's capacity), when it ran one.
    closed: Vec<Run>,
}

/// How the pilot's rate was kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kept {
    /// Its check had room.
    Room,
    /// No check had room, and the clients were late at every rate; the check kept had room
    /// but for lateness within twice the least seen.
    LateEverywhere,
    /// No check had room: the last (lowest rate).
    NoRoom,
}

/// Which of the pilot's checks (highest rate first) to keep: the first with room. When none
/// had room and the clients were late at every rate, lowering the rate was not what they
/// lacked: a busy machine delays them whatever the rate (H2 TLS 1k while other work ran:
/// 31–43% of the sends late from 7 100 down to 1 700 req/s, the clients 26–57% busy). Then
/// lateness is judged against the least seen, so that such a run is not left at the lowest
/// rate, where every request pays a wake-up and the cost per request is noisiest.
fn kept(checks: &[PilotCheck]) -> (usize, Kept) {
    if let Some(k) = checks.iter().position(PilotCheck::room) {
        return (k, Kept::Room);
    }
    let least = checks
        .iter()
        .map(|c| c.late_pct)
        .fold(f64::INFINITY, f64::min);
    match checks.iter().position(|c| c.room_within(2.0 * least)) {
        Some(k) => (k, Kept::LateEverywhere),
        None => (checks.len().saturating_sub(1), Kept::NoRoom),
    }
}

/// Servers of a cell: started for each run, or once for the whole cell.
pub(crate) enum Servers {
    Fresh,
    Kept(Vec<Option<Started>>),
}

impl Servers {
    /// Kept servers, one per variant, started (and warmed up) now.
    pub(crate) fn kept(specs: &[RunSpec], names: &[String]) -> Result<Servers> {
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
        profile: bool,
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
            return measure::windows(&mut jobs, round, profile);
        }
        let mut runs = Vec::new();
        for job in jobs {
            runs.extend(measure::windows(&mut [job], round, profile)?);
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
pub(crate) struct CellPlan<'a> {
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
    /// At most this many contaminated rounds run again (`--max-repeats`), within the bound
    /// of every repeat (as many as the rounds kept, plus 5).
    pub max_repeats: Option<usize>,
    /// The metric whose interval decides when to stop.
    pub headline: Metric,
    /// Kept servers measured all in the same window (else one after another).
    pub together: bool,
    /// The variants are steps of a series: each is also compared with the one before, and
    /// the stopping rule covers those intervals too.
    pub series: bool,
    /// A profiled round after every measured one (`--profile`).
    pub profile: bool,
    /// The closed-loop pilot window of an earlier level of the same request (`--levels`),
    /// reused so that every level is a fraction of the same throughput; empty: measured here.
    pub closed: Vec<Run>,
    pub backends: &'a mut Backends,
    pub rng: &'a mut rand::rngs::StdRng,
}

impl CellPlan<'_> {
    /// The cell measured: `variants` as reported (the A/A twin, if any, last and left out).
    pub(crate) fn run(mut self, servers: &mut Servers, mut variants: Vec<Variant>) -> Result<Cell> {
        let Chosen {
            rate,
            regime,
            late_limit,
            closed,
        } = self.choose_rate(servers)?;
        if let Some(r) = rate {
            for s in &mut self.specs {
                s.load_args.extend(["--rate".to_owned(), format!("{r:.0}")]);
                s.late_limit_pct = late_limit;
            }
        }
        eprintln!("{} regime: {regime}", self.tag);
        let (runs, profiled, repeats, ended) = self.rounds(servers)?;
        for name in &self.names {
            let checks: Vec<&contam::Checks> = runs
                .iter()
                .filter(|r| r.variant == *name)
                .map(|r| &r.checks)
                .collect();
            if let Some(why) = contam::elsewhere_refusal(name, &checks) {
                return Err(contam::Implausible(why).into());
            }
        }
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
        match ended {
            Some(EndedEarly::Budget) => notes.push(format!(
                "the time budget ended after {rounds} rounds, before every interval reached ±{:.1} points",
                self.precision_pct
            )),
            Some(EndedEarly::Lost(why)) => notes.push(format!(
                "ended after {rounds} rounds: as many windows were lost as repeats are allowed, the last with \"{why}\""
            )),
            None => {}
        }
        let base = self.names[0].clone();
        let twin = self.twin.then(|| self.names[self.names.len() - 1].clone());
        let precision = self.rounds.is_none().then_some(self.precision_pct);
        let floor = |metric: Metric| {
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
            for metric in Metric::COMPARED {
                let noise = floor(metric);
                comparisons.extend(if let (Metric::Rps, Some(r)) = (metric, rate) {
                    compare::rate_held(&base, v, &runs, r)
                } else if metric == self.headline {
                    compare::headline(metric, &base, v, &runs, noise, precision)
                } else {
                    compare::compare(metric, &base, v, &runs, noise)
                });
            }
        }
        let steps = if self.series {
            series_steps(&self.names, &runs, self.headline, rate, precision)
        } else {
            Vec::new()
        };
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
        for v in &mut variants {
            v.accounting = runs
                .iter()
                .find(|r| r.variant == v.name)
                .and_then(|r| r.accounting);
        }
        notes.extend(cost_notes(&variants, &runs));
        let names: Vec<String> = variants.iter().map(|v| v.name.clone()).collect();
        let profiled: Vec<Run> = profiled
            .into_iter()
            .filter(|r| names.contains(&r.variant))
            .collect();
        let capacity = capacity(&names, &closed, &runs, rate);
        notes.extend(capacity.iter().filter_map(Capacity::note));
        let profile = crate::profile::analyse(&names, &profiled, &runs);
        if let Some(p) = &profile {
            notes.extend(p.notes());
            notes.extend(profile_check(p, &comparisons, &runs, &base));
        }
        Ok(Cell {
            proto: self.specs[0].proto,
            url: self.specs[0].url.clone(),
            variants,
            runs,
            aa_runs,
            comparisons,
            steps,
            regime,
            closed_pilot: closed,
            level: match self.regime {
                Regime::Level(f) => Some(f),
                _ => None,
            },
            rate,
            rounds,
            notes,
            profiled_runs: profiled,
            profile,
            capacity,
        })
    }

    /// The value of a `loadterm load` option every run gets (`-c`, `-m`).
    fn load_arg(&self, flag: &str) -> &str {
        let a = &self.specs[0].load_args;
        a.iter()
            .position(|x| x == flag)
            .and_then(|i| a.get(i + 1))
            .map_or("", String::as_str)
    }

    /// A client's in-flight slots: `-c × -m`.
    fn slots(&self) -> f64 {
        let get = |flag| self.load_arg(flag).parse::<f64>().unwrap_or(1.0);
        get("-c") * get("-m")
    }

    fn shape(&self) -> String {
        format!("-c {} -m {}", self.load_arg("-c"), self.load_arg("-m"))
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
        // A lost window is run again here too, a few times: the pilot has no rounds to weigh
        // repeats against.
        let mut lost = 0;
        loop {
            match servers.round(&order, &specs, &self.names, 0, self.together, false) {
                Err(e) if measure::NoRequest::is(&e) && lost < 3 => {
                    lost += 1;
                    eprintln!("{} pilot run again: {e:#}", self.tag);
                }
                r => return r,
            }
        }
    }

    /// One open-loop pilot window at `rate`, and what it measured.
    fn check(&mut self, servers: &mut Servers, rate: f64) -> Result<PilotCheck> {
        let cores = self.specs[0].server_cpus.len().max(1) as f64;
        let client_cores = self.specs[0].client_cpus.len().max(1) as f64;
        let p = self.pilot(servers, &["--rate".to_owned(), format!("{rate:.0}")])?;
        let c = PilotCheck::of(&p, cores, client_cores, self.slots());
        eprintln!(
            "{} pilot check at {rate:.0} req/s: server cores {:.0}% busy, clients {:.0}% of theirs, {:.1}% of sends late{}",
            self.tag,
            c.server * 100.0,
            c.client * 100.0,
            c.late_pct,
            if c.missed { ", sends missed" } else { "" }
        );
        Ok(c)
    }

    /// " (each of the 2 variants, measured together)" when they share the rate's windows.
    fn each(&self) -> String {
        if self.together && self.names.len() > 1 {
            format!(
                " (each of the {} variants, measured together)",
                self.names.len()
            )
        } else {
            String::new()
        }
    }

    /// The regime of the rounds (`Chosen`), from a pilot in the default regime.
    fn choose_rate(&mut self, servers: &mut Servers) -> Result<Chosen> {
        let shape = self.shape();
        let chosen = |rate, regime, late_limit, closed| Chosen {
            rate,
            regime,
            late_limit,
            closed,
        };
        match self.regime {
            Regime::Closed => Ok(chosen(
                None,
                format!("closed loop, saturating client ({shape})"),
                None,
                Vec::new(),
            )),
            Regime::Rate(r) => Ok(chosen(
                Some(r),
                format!("open loop at {r:.0} req/s (fixed --rate), {shape}"),
                None,
                Vec::new(),
            )),
            Regime::Level(f) => {
                eprintln!(
                    "{} pilot: level {f} × the baseline's closed-loop throughput",
                    self.tag
                );
                let (saturated, whose) = if self.closed.is_empty() {
                    (self.pilot(servers, &[])?, "")
                } else {
                    (
                        std::mem::take(&mut self.closed),
                        ", the first level's pilot",
                    )
                };
                let rate = (saturated[0].rps * f).max(1.0);
                let c = self.check(servers, rate)?;
                let each = self.each();
                let warn = if c.room() {
                    String::new()
                } else {
                    format!(
                        " — WARNING: no room at this level (servers over {:.0}% busy, clients over {:.0}%, or over {:.0}% of sends late): the verdict is about a load near saturation",
                        SERVER_BUSY_MAX * 100.0,
                        CLIENT_BUSY_MAX * 100.0,
                        contam::CLIENT_LATE_MAX_PCT
                    )
                };
                Ok(chosen(
                    Some(rate),
                    format!(
                        "open loop at {rate:.0} req/s{each}, level {f} × the baseline's closed-loop throughput ({:.0} req/s{whose}) (checked: server cores {:.0}% busy, clients {:.0}% of theirs, {:.1}% of sends late){warn}, {shape}",
                        saturated[0].rps,
                        c.server * 100.0,
                        c.client * 100.0,
                        c.late_pct,
                    ),
                    Some(contam::late_limit_pct(c.late_pct)),
                    saturated,
                ))
            }
            Regime::RateFraction(f) => {
                eprintln!(
                    "{} pilot: {f} × the baseline's closed-loop throughput, checked for room",
                    self.tag
                );
                let saturated = self.pilot(servers, &[])?;
                let mut rate = (saturated[0].rps * f).max(1.0);
                let mut checks = Vec::new();
                for check in 0..PILOT_CHECKS {
                    if check > 0 {
                        rate *= 0.7;
                    }
                    let c = self.check(servers, rate)?;
                    if c.slots_full() {
                        return Ok(chosen(
                            None,
                            format!(
                                "closed loop, saturating client ({shape}), because open loop at {rate:.0} req/s filled the client's in-flight slots: {:.0}% of -c × -m = {:.0} on average (rate × mean latency), {:.1}% of the sends late with the clients at {:.0}% of their cores; a lower rate would measure the server at a trickle; raise -c or -m for an open-loop verdict",
                                c.slots_used * 100.0,
                                self.slots(),
                                c.late_pct,
                                c.client * 100.0
                            ),
                            None,
                            saturated,
                        ));
                    }
                    checks.push((rate, c));
                    if c.room() {
                        break;
                    }
                }
                // The rate kept is always one that was checked.
                let only: Vec<PilotCheck> = checks.iter().map(|(_, c)| *c).collect();
                let (k, kept) = kept(&only);
                let (rate, seen) = checks[k];
                let each = self.each();
                Ok(chosen(
                    Some(rate),
                    format!(
                        "open loop at {rate:.0} req/s{each}, {f} × the baseline's closed-loop throughput ({:.0} req/s{}) or less, for room ({}: server cores {:.0}% busy, clients {:.0}% of theirs, {:.1}% of sends late), {shape}",
                        saturated[0].rps,
                        if self.together && self.names.len() > 1 {
                            ", sharing the server cores with the other variants"
                        } else {
                            ""
                        },
                        match kept {
                            Kept::Room => "checked".to_owned(),
                            Kept::LateEverywhere => format!(
                                "checked, but the clients were late at every rate, {:.1}% of the sends at the lowest: a busy machine",
                                checks[checks.len() - 1].1.late_pct
                            ),
                            Kept::NoRoom => "NO ROOM FOUND, the lowest rate tried".to_owned(),
                        },
                        seen.server * 100.0,
                        seen.client * 100.0,
                        seen.late_pct,
                    ),
                    Some(contam::late_limit_pct(seen.late_pct)),
                    saturated,
                ))
            }
        }
    }

    /// The measured rounds (runs numbered by measured round), the flags of the rounds run
    /// again, and what ended them before every interval was resolved.
    #[allow(clippy::type_complexity)]
    fn rounds(
        &mut self,
        servers: &mut Servers,
    ) -> Result<(
        Vec<Run>,
        Vec<Run>,
        Vec<Vec<&'static str>>,
        Option<EndedEarly>,
    )> {
        let contrasts = self.contrasts();
        let mut moments = vec![Moments::default(); contrasts.len()];
        let n = self.names.len();
        let mut runs = Vec::new();
        let mut profiled = Vec::new();
        let mut profiled_rounds = 0;
        let mut repeats = Vec::new();
        let (mut measured, mut started, mut restarted) = (0usize, 0usize, 0usize);
        // Of the repeats, those for contamination: the ones --max-repeats bounds.
        let mut contaminated = 0usize;
        let mut ended = None;
        let mut last_round = Duration::ZERO;
        loop {
            if self.rounds.is_some_and(|r| measured >= r) || procs::interrupted() {
                break;
            }
            if let Some(d) = self.deadline {
                if measured >= 2 && Instant::now() + last_round > d {
                    ended = Some(EndedEarly::Budget);
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
            let this = match servers.round(
                &order,
                &self.specs,
                &self.names,
                measured,
                self.together,
                false,
            ) {
                // The signal reached the load clients too: the round is lost, not the run.
                Err(_) if procs::interrupted() => break,
                // Counted with the contaminated rounds, under the same cap; not --max-repeats,
                // which keeps contaminated rounds: a lost one has nothing to keep.
                Err(e) if measure::NoRequest::is(&e) && repeats.len() < measured + 5 => {
                    eprintln!("{} round run again: {e:#}", self.tag);
                    repeats.push(vec!["no request completed"]);
                    continue;
                }
                // Repeats used up: the rounds kept still make a comparison.
                Err(e) if measure::NoRequest::is(&e) && measured >= 2 => {
                    eprintln!("{} ended: {e:#}", self.tag);
                    ended = Some(EndedEarly::Lost(format!("{e:#}")));
                    break;
                }
                r => r?,
            };
            last_round = t0.elapsed();
            started += 1;
            if started <= self.warmup_rounds {
                eprintln!("{} warm-up round (discarded)", self.tag);
                continue;
            }
            let flags = contam::distinct(this.iter().flat_map(|r| &r.checks.repeat));
            // Repeating is decided from the contamination checks alone, before the round's
            // metrics are looked at; at most as many repeats as kept rounds (plus a start),
            // so that a busy machine ends the run rather than stretching it.
            if !flags.is_empty()
                && repeats.len() < measured + 5
                && self.max_repeats.is_none_or(|m| contaminated < m)
            {
                contaminated += 1;
                eprintln!(
                    "{} round run again: {}",
                    self.tag,
                    contam::joined(flags.iter().copied())
                );
                repeats.push(flags.iter().map(|f| f.kind()).collect());
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
                    .and_then(|r| self.headline.of(r))
            };
            for (&(i, k), m) in contrasts.iter().zip(&mut moments) {
                if let (Some(a), Some(b)) = (value(i), value(k)) {
                    if a > 0.0 && b > 0.0 && a.is_finite() && b.is_finite() {
                        m.push((b / a).ln());
                    }
                }
            }
            runs.extend(this);
            measured += 1;
            let estimates: Vec<_> = moments.iter().map(Moments::estimate).collect();
            eprintln!("{}", self.progress(measured, &contrasts, &estimates));
            if self.profile {
                match self.profiled_round(servers, profiled_rounds) {
                    Err(_) if procs::interrupted() => break,
                    r => {
                        if let Some(this) = r? {
                            profiled.extend(this);
                            profiled_rounds += 1;
                        }
                    }
                }
                last_round = t0.elapsed();
            }
            if self.rounds.is_none()
                && estimates.iter().all(|e| {
                    e.as_ref()
                        .is_some_and(|e| sequential::resolved(e, self.precision_pct))
                })
            {
                break;
            }
        }
        Ok((runs, profiled, repeats, ended))
    }

    /// A profiled round (`--profile`), in a random order like the measured ones. A
    /// contaminated one is run again up to twice, then kept with its flags: its figures feed
    /// no verdict, and samples are attributed by process, so foreign CPU does not enter them.
    /// `None`: its windows were lost (no request completed).
    fn profiled_round(&mut self, servers: &mut Servers, round: usize) -> Result<Option<Vec<Run>>> {
        let mut order: Vec<usize> = (0..self.names.len()).collect();
        for attempt in 0..3 {
            order.shuffle(self.rng);
            let this =
                match servers.round(&order, &self.specs, &self.names, round, self.together, true) {
                    Err(e) if measure::NoRequest::is(&e) => {
                        eprintln!("{} profiled round lost: {e:#}", self.tag);
                        return Ok(None);
                    }
                    r => r?,
                };
            let flags = contam::distinct(this.iter().flat_map(|r| &r.checks.repeat));
            if flags.is_empty() || attempt == 2 {
                return Ok(Some(this));
            }
            eprintln!(
                "{} profiled round run again: {}",
                self.tag,
                contam::joined(flags.iter().copied())
            );
        }
        Ok(None)
    }

    /// The (baseline, variant) pairs whose headline interval the stopping rule waits for:
    /// every variant against the first, and in a series every step against the one before.
    fn contrasts(&self) -> Vec<(usize, usize)> {
        let n = self.names.len();
        let mut c: Vec<(usize, usize)> = (1..n).map(|k| (0, k)).collect();
        if self.series {
            c.extend((2..n).map(|k| (k - 1, k)));
        }
        c
    }

    /// "[h1 /?s=1k] round 14: B +2.9% ±2.4 in cpu_us_per_req (target ±1.5), 8m12s left"; a
    /// step of a series against the one before as "s2/s1".
    fn progress(
        &self,
        measured: usize,
        contrasts: &[(usize, usize)],
        estimates: &[Option<sequential::Estimate>],
    ) -> String {
        let parts: Vec<String> = contrasts
            .iter()
            .map(|&(i, k)| match i {
                0 => self.names[k].clone(),
                _ => format!("{}/{}", self.names[k], self.names[i]),
            })
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

/// A series' steps: each variant against the one before it, in every metric, from the same
/// paired rounds as the comparisons with the baseline ("step 2, s2 against s1: …").
fn series_steps(
    names: &[String],
    runs: &[Run],
    headline: Metric,
    rate: Option<f64>,
    precision: Option<f64>,
) -> Vec<compare::Comparison> {
    let mut steps = Vec::new();
    for (k, pair) in names.windows(2).enumerate() {
        let (before, v) = (&pair[0], &pair[1]);
        for metric in Metric::COMPARED {
            let c = if let (Metric::Rps, Some(r)) = (metric, rate) {
                compare::rate_held(before, v, runs, r)
            } else if metric == headline {
                compare::headline(metric, before, v, runs, None, precision)
            } else {
                compare::compare(metric, before, v, runs, None)
            };
            steps.extend(c.map(|mut c| {
                let rest = c.verdict.strip_prefix(v.as_str()).unwrap_or(&c.verdict);
                c.verdict = format!("step {}, {v} against {before}{rest}", k + 1);
                c
            }));
        }
    }
    steps
}

/// Where each variant's CPU per request went (user, system, and the server cores' irq and
/// softirq where it had them alone), in medians; and how much softirq the variants shared.
fn cost_notes(variants: &[Variant], runs: &[Run]) -> Vec<String> {
    let med = |name: &str, f: fn(&Run) -> Option<f64>| {
        let v: Vec<f64> = runs
            .iter()
            .filter(|r| r.variant == name)
            .filter_map(f)
            .collect();
        (!v.is_empty()).then(|| crate::stats::median(&v))
    };
    let mut notes = Vec::new();
    for v in variants {
        let (Some(user), Some(system), Some(acc)) = (
            med(&v.name, |r| r.user_us_per_req),
            med(&v.name, |r| r.system_us_per_req),
            v.accounting,
        ) else {
            continue;
        };
        let soft = match med(&v.name, |r| r.softirq_us_per_req) {
            Some(s) => format!("irq + softirq on the server cores {s:.2}"),
            None => "irq + softirq not charged (the server cores were shared)".into(),
        };
        notes.push(format!(
            "{}: CPU from {acc}; µs per request: user {user:.2}, system {system:.2}, {soft}",
            v.name
        ));
    }
    let off: Vec<f64> = runs.iter().filter_map(|r| r.server_window_off_ms).collect();
    if !off.is_empty() {
        notes.push(format!(
            "the server host's readings were {:.2} ms (median), at most {:.2} ms, from the windows' agreed start",
            crate::stats::median(&off),
            off.iter().copied().fold(0.0, f64::max)
        ));
    }
    let shared: Vec<f64> = runs
        .iter()
        .filter(|r| r.softirq_us_per_req.is_none() && r.cpu_us_per_req.is_some())
        .map(|r| r.checks.softirq_pct)
        .collect();
    if !shared.is_empty() {
        notes.push(format!(
            "irq + softirq on the shared server cores: {:.1}% of their capacity (median), the servers' network stack: neither foreign nor charged to a variant",
            crate::stats::median(&shared)
        ));
    }
    notes
}

/// Each variant's load as a share of its own closed-loop capacity (the pilot's closed-loop
/// window, the variants together as in the rounds), with both costs per request.
fn capacity(names: &[String], closed: &[Run], runs: &[Run], rate: Option<f64>) -> Vec<Capacity> {
    let Some(rate) = rate else {
        return Vec::new();
    };
    names
        .iter()
        .filter_map(|name| {
            let c = closed.iter().find(|r| r.variant == *name)?;
            let at_rate: Vec<f64> = runs
                .iter()
                .filter(|r| r.variant == *name)
                .filter_map(|r| r.cpu_us_per_req)
                .collect();
            Some(Capacity {
                variant: name.clone(),
                closed_loop_rps: c.rps,
                fraction: rate / c.rps.max(1e-9),
                closed_loop_cpu_us_per_req: c.cpu_us_per_req,
                cpu_us_per_req: (!at_rate.is_empty()).then(|| crate::stats::median(&at_rate)),
            })
        })
        .collect()
}

/// Whether the profile accounts for the CPU verdict: every sampled µs per request of B − A
/// (the sum of the functions' self differences) against the verdict's change in CPU per
/// request, as µs of the baseline's median.
fn profile_check(
    p: &crate::profile::CellProfile,
    comparisons: &[compare::Comparison],
    runs: &[Run],
    base: &str,
) -> Vec<String> {
    let a: Vec<f64> = runs
        .iter()
        .filter(|r| r.variant == base)
        .filter_map(|r| r.cpu_us_per_req)
        .collect();
    if a.is_empty() {
        return Vec::new();
    }
    let a = crate::stats::median(&a);
    p.totals
        .iter()
        .filter_map(|(name, total)| {
            let c = comparisons
                .iter()
                .find(|c| c.variant == *name && c.metric == Metric::CpuUsPerReq)?;
            let (lo, hi) = c.ci_pct?;
            let (lo, hi) = (lo / 100.0 * a, hi / 100.0 * a);
            // Two estimates of one change, from different rounds: the profile's within the
            // verdict's interval, or at least their intervals overlapping, is agreement.
            let agreement = if (lo..=hi).contains(&total.diff_us) {
                "within its interval"
            } else if total.ci_us.is_some_and(|(plo, phi)| plo <= hi && phi >= lo) {
                "outside its interval, but the two intervals overlap: they agree within their noise"
            } else {
                "APART from it: the profiled rounds' cost differs from the measured ones'"
            };
            Some(format!(
                "profile of {name}: the functions' differences add up to {} per request, the CPU verdict's {:+.3} µs (95% CI {lo:+.3} to {hi:+.3}): {agreement}",
                total.text(),
                c.change_pct / 100.0 * a,
            ))
        })
        .collect()
}

/// Why the rounds ended before every interval was resolved.
enum EndedEarly {
    /// `--max-time`.
    Budget,
    /// A window without a completed request when no repeat was left.
    Lost(String),
}

/// "3 rounds run again (contaminated): foreign CPU in 2, client behind in 1".
fn repeat_note(repeats: &[Vec<&'static str>]) -> String {
    let mut kinds: Vec<(&str, usize)> = Vec::new();
    for round in repeats {
        let mut seen = round.clone();
        seen.sort_unstable();
        seen.dedup();
        for k in seen {
            match kinds.iter_mut().find(|(n, _)| *n == k) {
                Some((_, c)) => *c += 1,
                None => kinds.push((k, 1)),
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

    /// A pilot window's runs of two variants on one server core and one client core, each
    /// client with this busy share and share of late sends.
    fn pilot_runs(client: f64, late_pct: f64) -> Vec<Run> {
        ["A", "B"]
            .iter()
            .map(|v| {
                let mut r = crate::compare::tests::run(v, 0, 5.0);
                r.server_cpu_util = Some(0.2);
                r.client_cpu_util = Some(client);
                r.missed_pct = Some(0.0);
                r.late_pct = Some(late_pct);
                r
            })
            .collect()
    }

    #[test]
    fn a_client_behind_its_schedule_has_no_room_however_idle() {
        // H1 1k at 40 000 req/s each: the clients were 13% and 14% busy, because behind their
        // schedule they handled many sends per wake-up, and 89% of their sends were late.
        let c = PilotCheck::of(&pilot_runs(0.135, 89.0), 1.0, 1.0, 20.0);
        assert!(c.client < CLIENT_BUSY_MAX && !c.missed);
        assert!(!c.room());
    }

    #[test]
    fn clients_on_time_with_idle_time_left_have_room() {
        let c = PilotCheck::of(&pilot_runs(0.3, 0.1), 1.0, 1.0, 20.0);
        assert!(
            (c.client - 0.6).abs() < 1e-9,
            "busy shares add up: {}",
            c.client
        );
        assert!(c.room());
    }

    #[test]
    fn late_sends_with_the_slots_full_are_the_servers_latency() {
        // H2 256k against a slow server: 123 req/s, 18% of the sends late, the clients 9%
        // busy, responses taking 150 ms: 18.5 of the 20 slots (-c 4 -m 5) in flight.
        let mut runs = pilot_runs(0.045, 18.0);
        for r in &mut runs {
            r.rps = 123.0;
            r.mean_ms = 150.0;
        }
        let c = PilotCheck::of(&runs, 1.0, 1.0, 20.0);
        assert!(c.slots_full(), "{c:?}");
        // Near saturation (half the closed-loop rate, the server cores 85% busy) the slots
        // fill because the server is busy: the pilot lowers the rate as before.
        let busy: Vec<Run> = runs
            .iter()
            .cloned()
            .map(|mut r| {
                r.server_cpu_util = Some(0.425);
                r
            })
            .collect();
        assert!(!PilotCheck::of(&busy, 1.0, 1.0, 20.0).slots_full());
        // The same lateness with responses in 10 ms: 1.2 of the 20 slots, the client's own.
        let quick: Vec<Run> = runs
            .iter()
            .cloned()
            .map(|mut r| {
                r.mean_ms = 10.0;
                r
            })
            .collect();
        assert!(!PilotCheck::of(&quick, 1.0, 1.0, 20.0).slots_full());
    }

    #[test]
    fn clients_on_time_but_busy_have_no_room() {
        let c = PilotCheck::of(&pilot_runs(0.5, 0.1), 1.0, 1.0, 20.0);
        assert!(!c.room());
    }

    fn check(server: f64, client: f64, late_pct: f64) -> PilotCheck {
        PilotCheck {
            server,
            client,
            late_pct,
            missed: false,
            slots_used: 0.1,
        }
    }

    #[test]
    fn the_highest_rate_with_room_is_kept() {
        // H1 1k, a pilot of this VM: behind (late, little CPU) down to 18 858 req/s, then
        // busy, then room.
        let checks = [
            check(0.27, 0.27, 82.6),
            check(0.23, 0.23, 75.8),
            check(0.68, 0.81, 1.5),
            check(0.55, 0.65, 0.3),
            check(0.45, 0.60, 0.9),
        ];
        assert_eq!(kept(&checks), (3, Kept::Room));
    }

    #[test]
    fn late_at_every_rate_is_judged_against_the_least_lateness() {
        // H2 TLS 1k on a busy machine: behind at the highest rates, then 31–43% late however
        // low the rate.
        let checks = [
            check(0.41, 0.23, 90.9),
            check(0.37, 0.24, 89.0),
            check(0.60, 0.56, 34.2),
            check(0.53, 0.57, 36.2),
            check(0.36, 0.30, 31.5),
        ];
        assert_eq!(kept(&checks), (2, Kept::LateEverywhere));
    }

    #[test]
    fn without_room_the_lowest_rate_is_kept() {
        let checks = [
            check(0.9, 0.95, 0.5),
            check(0.8, 0.9, 0.5),
            check(0.75, 0.8, 0.5),
        ];
        assert_eq!(kept(&checks), (2, Kept::NoRoom));
    }

    /// A series' steps come from the same rounds: each step against the one before, named so,
    /// and only the step that added cost is significant.
    #[test]
    fn series_steps_compare_each_variant_with_the_one_before() {
        let names: Vec<String> = ["base", "s1", "s2", "s3"].map(String::from).to_vec();
        let mut runs = Vec::new();
        for k in 0..12 {
            // The machine's drift, shared by every variant of a round.
            let drift = 1.0 + (k as f64 * 0.9).sin() * 0.05;
            let jitter = |v: usize| 1.0 + ((k * 7 + v * 3) as f64).sin() * 0.003;
            for (v, cost) in [10.0, 10.0, 11.0, 11.0].iter().enumerate() {
                runs.push(crate::compare::tests::run(
                    &names[v],
                    k,
                    cost * drift * jitter(v),
                ));
            }
        }
        let steps = series_steps(&names, &runs, Metric::CpuUsPerReq, None, Some(1.5));
        let cpu: Vec<&compare::Comparison> = steps
            .iter()
            .filter(|c| c.metric == Metric::CpuUsPerReq)
            .collect();
        assert_eq!(cpu.len(), 3);
        assert!(
            cpu[1]
                .verdict
                .starts_with("step 2, s2 against s1: 10.1% more CPU per request"),
            "{}",
            cpu[1].verdict
        );
        assert_eq!(
            cpu.iter().map(|c| c.significant).collect::<Vec<_>>(),
            [false, true, false]
        );
        assert!(cpu[2]
            .verdict
            .starts_with("step 3, s3 against s2: no significant difference"));
    }

    #[test]
    fn repeats_are_summarised_by_kind() {
        let repeats = vec![
            vec!["foreign CPU", "client behind", "foreign CPU"],
            vec!["steal"],
            vec!["client window off"],
        ];
        assert_eq!(
            repeat_note(&repeats),
            "3 round(s) run again (contaminated): client behind in 1, foreign CPU in 1, steal in 1, client window off in 1"
        );
    }
}

//! Contamination checks: what else happened on the machine during a run. Each check is a pure
//! function of /proc and /sys readings taken around the run, so the thresholds are decided here
//! and nowhere else.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Steal above this share of the measured cores' capacity flags the run.
pub(crate) const STEAL_PCT: f64 = 2.0;
/// CPU used on the server's cores by anything but the server, above this share of their capacity.
pub(crate) const FOREIGN_PCT: f64 = 5.0;
/// The client's cores at or above this busy share: req/s then measures the client.
pub(crate) const CLIENT_SATURATED_PCT: f64 = 95.0;
/// Open loop: more than this share of the scheduled sends never made means the client could
/// not keep the rate, and the server saw a lighter load than the other variants. (Sends a
/// millisecond late are the timer's granularity, and do not change the load.)
pub(crate) const MISSED_PCT: f64 = 1.0;
/// A client that sent more than this share of its sends over 1 ms late was behind its schedule.
/// On time, the pilot's clients sent 0–5% late (on a busy machine); behind, 20–95% (docs/AB.md).
pub(crate) const CLIENT_LATE_MAX_PCT: f64 = 10.0;
/// Server cores busy with tasks beyond this share of their capacity, of which the measured
/// servers got under `MEASURED_MIN_SHARE`, in most runs of a variant: the load is served by
/// something ab does not measure.
pub(crate) const BUSY_FOR_PLAUSIBILITY_PCT: f64 = 10.0;
pub(crate) const MEASURED_MIN_SHARE: f64 = 0.1;
/// Below this much CPU per request (µs) over `PLAUSIBLE_MIN_REQUESTS` requests, no HTTP server
/// answered them (loadterm's cheapest row costs over 1 µs).
pub(crate) const PLAUSIBLE_MIN_US: f64 = 0.1;
pub(crate) const PLAUSIBLE_MIN_REQUESTS: u64 = 1000;
/// Steady state: first and last thirds of the per-second series differ by more than this many
/// standard errors *and* by more than this share.
pub(crate) const STEADY_Z: f64 = 3.0;
pub(crate) const STEADY_PCT: f64 = 2.0;

/// Cumulative ticks of one CPU from /proc/stat.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct CpuTicks {
    /// user + nice + system + irq + softirq (guest time is already inside user).
    pub busy: u64,
    /// irq + softirq: the network stack's work done outside any task's account (on loopback,
    /// the delivery of what a core's tasks send).
    pub soft: u64,
    pub steal: u64,
}

/// The `cpuN` lines of /proc/stat.
pub(crate) fn parse_proc_stat(text: &str) -> BTreeMap<usize, CpuTicks> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let cpu: usize = f.next()?.strip_prefix("cpu")?.parse().ok()?;
            let v: Vec<u64> = f.map(|x| x.parse().unwrap_or(0)).collect();
            let g = |i: usize| v.get(i).copied().unwrap_or(0);
            Some((
                cpu,
                CpuTicks {
                    busy: g(0) + g(1) + g(2) + g(5) + g(6),
                    soft: g(5) + g(6),
                    steal: g(7),
                },
            ))
        })
        .collect()
}

pub(crate) fn read_proc_stat() -> BTreeMap<usize, CpuTicks> {
    parse_proc_stat(&std::fs::read_to_string("/proc/stat").unwrap_or_default())
}

/// Machine settings that change what a run measures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Settings {
    pub governor: Option<String>,
    pub boost: Option<String>,
    /// The selected mode of /sys/kernel/mm/transparent_hugepage/enabled.
    pub thp: Option<String>,
    pub load1: f64,
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

/// `always [madvise] never` → `madvise`.
pub(crate) fn selected_mode(s: &str) -> Option<String> {
    let start = s.find('[')?;
    let end = s[start..].find(']')? + start;
    Some(s[start + 1..end].to_owned())
}

pub(crate) fn settings(cpu: usize) -> Settings {
    Settings {
        governor: read(&format!(
            "/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor"
        )),
        boost: read("/sys/devices/system/cpu/cpufreq/boost"),
        thp: read("/sys/kernel/mm/transparent_hugepage/enabled").and_then(|s| selected_mode(&s)),
        load1: read("/proc/loadavg")
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0),
    }
}

/// Pairs (server CPU, client CPU) that are SMT siblings of one core, from each server CPU's
/// `thread_siblings_list` (`siblings(cpu)`, e.g. "0,4" or "0-1").
pub(crate) fn smt_shared(
    server: &[usize],
    client: &[usize],
    siblings: impl Fn(usize) -> Option<String>,
) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for &s in server {
        let Some(list) = siblings(s) else { continue };
        for c in parse_cpu_list(&list) {
            if c != s && client.contains(&c) {
                out.push((s, c));
            }
        }
    }
    out
}

pub(crate) fn sysfs_siblings(cpu: usize) -> Option<String> {
    read(&format!(
        "/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"
    ))
}

/// `0,2,3`: a CPU list as `taskset -c` and `--cpuset-cpus` take it (`{server_cpus}`).
pub(crate) fn cpu_list(cpus: &[usize]) -> String {
    cpus.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

pub(crate) fn parse_cpu_list(s: &str) -> Vec<usize> {
    s.split(',')
        .flat_map(|part| match part.split_once('-') {
            Some((a, b)) => match (a.trim().parse::<usize>(), b.trim().parse::<usize>()) {
                (Ok(a), Ok(b)) => (a..=b).collect(),
                _ => Vec::new(),
            },
            None => part.trim().parse().ok().into_iter().collect(),
        })
        .collect()
}

/// First and last thirds of a run's per-second request counts.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Steady {
    pub first: f64,
    pub last: f64,
    pub change_pct: f64,
    pub steady: bool,
}

/// Whether the last third of `series` (complete seconds) differs from the first beyond the
/// series' own noise; `None` under 3 seconds. The noise is estimated from the median of the
/// successive differences over the whole series, which neither a slow drift nor one warm-up
/// jump inflates, so that even a 5-second run (thirds of one second) has a yardstick.
pub(crate) fn steady_state(series: &[f64]) -> Option<Steady> {
    let n = series.len();
    if n < 3 {
        return None;
    }
    let k = n / 3;
    let mean = |x: &[f64]| x.iter().sum::<f64>() / x.len() as f64;
    let (ma, mb) = (mean(&series[..k]), mean(&series[n - k..]));
    let steps: Vec<f64> = series.windows(2).map(|w| (w[1] - w[0]).abs()).collect();
    // σ of one second: 1.4826 × the median step / √2 (a step is the difference of two seconds).
    let sd = 1.4826 * crate::stats::median(&steps) / std::f64::consts::SQRT_2;
    let se = sd * (2.0 / k as f64).sqrt();
    let change_pct = if ma > 0.0 {
        (mb / ma - 1.0) * 100.0
    } else {
        0.0
    };
    let beyond_noise = (mb - ma).abs() > STEADY_Z * se;
    Some(Steady {
        first: ma,
        last: mb,
        change_pct,
        steady: !(beyond_noise && change_pct.abs() > STEADY_PCT),
    })
}

/// /proc/stat of one host at both ends of a run.
#[derive(Debug, Clone, Default)]
pub(crate) struct Stat {
    pub before: BTreeMap<usize, CpuTicks>,
    pub after: BTreeMap<usize, CpuTicks>,
}

/// Readings of one run.
#[derive(Debug, Clone)]
pub(crate) struct Readings {
    pub wall_s: f64,
    pub ticks_per_s: f64,
    /// The servers' host (the server CPUs are its), and each client host's (the client CPUs):
    /// one machine unless agents ran the servers or shards of the load.
    pub server_stat: Stat,
    pub client_stats: Vec<Stat>,
    pub server_cpus: Vec<usize>,
    pub client_cpus: Vec<usize>,
    /// CPU seconds of every server measured during the run (their cgroups, or /proc trees);
    /// `None` when no server is measured.
    pub server_cpu_s: Option<f64>,
    /// Open loop: share of the scheduled sends never made, percent.
    pub missed_pct: Option<f64>,
    /// Open loop: share of the sends made over 1 ms late, percent (the worst client).
    pub late_pct: Option<f64>,
    /// Lateness above which the round is run again (`late_limit_pct`); `None`: the rate was
    /// not checked by a pilot, and lateness above `CLIENT_LATE_MAX_PCT` is only flagged.
    pub late_limit_pct: Option<f64>,
    pub start: Settings,
    /// Settings when the comparison began (the reference for "changed").
    pub reference: Settings,
    pub smt: Vec<(usize, usize)>,
    pub series: Vec<f64>,
}

/// A contamination a run's readings show: its figures, said in words by `Display`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Flag {
    Steal {
        pct: f64,
    },
    /// CPU on the server cores outside the measured servers, besides irq and softirq.
    ForeignCpu {
        pct: f64,
    },
    /// Open loop: scheduled sends never made.
    ClientBehind {
        missed_pct: f64,
        client_busy_pct: f64,
    },
    /// Open loop: sends made over 1 ms late.
    ClientLate {
        late_pct: f64,
        client_busy_pct: f64,
    },
    /// Closed loop: req/s measures the client.
    ClientSaturated {
        busy_pct: f64,
    },
    SmtSiblings {
        server_cpu: usize,
        client_cpu: usize,
    },
    SettingChanged {
        setting: &'static str,
        from: String,
        to: String,
    },
    NotSteady {
        change_pct: f64,
    },
    /// A client host's window started this far from the agreed instant.
    ClientWindowOff {
        ms: f64,
        host: String,
    },
    /// The server host's readings were this far from the agreed instant.
    ServerReadingsOff {
        ms: f64,
    },
}

impl Flag {
    /// What kind of contamination it is, for counting rounds by kind ("foreign CPU in 3").
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Flag::Steal { .. } => "steal",
            Flag::ForeignCpu { .. } => "foreign CPU",
            Flag::ClientBehind { .. } => "client behind",
            Flag::ClientLate { .. } => "client late",
            Flag::ClientSaturated { .. } => "client saturated",
            Flag::SmtSiblings { .. } => "SMT siblings",
            Flag::SettingChanged { .. } => "setting changed",
            Flag::NotSteady { .. } => "not steady",
            Flag::ClientWindowOff { .. } => "client window off",
            Flag::ServerReadingsOff { .. } => "server readings off",
        }
    }
}

impl std::fmt::Display for Flag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Flag::Steal { pct } => write!(f, "steal {pct:.1}%"),
            Flag::ForeignCpu { pct } => write!(f, "foreign CPU {pct:.1}% on the server cores"),
            Flag::ClientBehind {
                missed_pct,
                client_busy_pct,
            } => write!(
                f,
                "client behind: {missed_pct:.1}% of the scheduled sends not made (client cores {client_busy_pct:.0}% busy)"
            ),
            Flag::ClientLate {
                late_pct,
                client_busy_pct,
            } => write!(
                f,
                "client late: {late_pct:.1}% of the sends over 1 ms late (client cores {client_busy_pct:.0}% busy)"
            ),
            Flag::ClientSaturated { busy_pct } => {
                write!(f, "client cores {busy_pct:.0}% busy: req/s measures the client")
            }
            Flag::SmtSiblings {
                server_cpu,
                client_cpu,
            } => write!(
                f,
                "SMT siblings: server CPU {server_cpu} and client CPU {client_cpu}"
            ),
            Flag::SettingChanged { setting, from, to } => {
                write!(f, "{setting} changed: {from} → {to}")
            }
            Flag::NotSteady { change_pct } => write!(
                f,
                "not steady: req/s {change_pct:+.1}% from the first to the last third"
            ),
            Flag::ClientWindowOff { ms, host } => write!(
                f,
                "client window off: up to {ms:.1} ms from the agreed start ({host})"
            ),
            Flag::ServerReadingsOff { ms } => write!(
                f,
                "server readings off: up to {ms:.1} ms from the agreed start"
            ),
        }
    }
}

/// In reports, a flag is its words.
impl Serialize for Flag {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Flags in words, one after the other.
pub(crate) fn joined<'a>(flags: impl IntoIterator<Item = &'a Flag>) -> String {
    flags
        .into_iter()
        .map(Flag::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// The flags of several runs (the variants of one window), each once: runs measured together
/// share the server cores' readings, and so their flags.
pub(crate) fn distinct<'a>(flags: impl IntoIterator<Item = &'a Flag>) -> Vec<&'a Flag> {
    let mut out: Vec<&Flag> = Vec::new();
    for f in flags {
        if !out.contains(&f) {
            out.push(f);
        }
    }
    out
}

/// The checks of one run, with the flags raised.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Checks {
    /// Steal on the server and client cores, % of their capacity.
    pub steal_pct: f64,
    /// CPU on the server's cores that no measured server's cgroup had, besides interrupts and
    /// softirq, % of their capacity (none in endpoint mode).
    pub foreign_pct: Option<f64>,
    /// Interrupt and softirq time on the server's cores, % of their capacity: the servers'
    /// network stack, never foreign.
    pub softirq_pct: f64,
    /// Busy share of the client's cores (the busiest client host's, with several).
    pub client_busy_pct: f64,
    pub settings: Settings,
    pub steady: Option<Steady>,
    pub flags: Vec<Flag>,
    /// The server cores' tasks were busy (over `BUSY_FOR_PLAUSIBILITY_PCT`) and the measured
    /// servers had under `MEASURED_MIN_SHARE` of their time.
    pub served_elsewhere: bool,
    /// The flags that say this run's round is contaminated by something outside the servers
    /// (steal, foreign CPU on the server cores, a client that fell behind): the round is run
    /// again. Decided from these readings alone, never from the metrics compared.
    pub repeat: Vec<Flag>,
}

fn delta(stat: &Stat, cpus: &[usize], f: fn(&CpuTicks) -> u64) -> f64 {
    cpus.iter()
        .map(|c| {
            let a = stat.after.get(c).map_or(0, f);
            let b = stat.before.get(c).map_or(0, f);
            a.saturating_sub(b) as f64
        })
        .sum()
}

/// The lateness above which a round at a pilot-checked rate is run again: twice what the pilot
/// saw at that rate, and never below `CLIENT_LATE_MAX_PCT` (a pilot on a busy machine may have
/// kept a rate whose clients were already late).
pub(crate) fn late_limit_pct(pilot_late_pct: f64) -> f64 {
    (2.0 * pilot_late_pct).max(CLIENT_LATE_MAX_PCT)
}

/// A measured run whose figures cannot be the server's, and on which no verdict may stand.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Implausible(pub String);

fn capacity(r: &Readings, cpus: &[usize]) -> f64 {
    (r.wall_s * r.ticks_per_s * cpus.len() as f64).max(1e-9)
}

impl Readings {
    /// Interrupt and softirq time on the server cores, seconds.
    fn softirq_s(&self) -> f64 {
        delta(&self.server_stat, &self.server_cpus, |t| t.soft) / self.ticks_per_s
    }

    /// The server cores' interrupt and softirq time that is not already in `own_s` (the
    /// measured servers' runtime), seconds: their network work done outside their own
    /// syscalls. With tick-based accounting a softirq run inside a server's syscall counts
    /// both in its runtime and as softirq in /proc/stat; what the cores spent beyond the
    /// servers' runtime bounds that overlap.
    pub(crate) fn network_s(&self, own_s: f64) -> f64 {
        let busy = delta(&self.server_stat, &self.server_cpus, |t| t.busy) / self.ticks_per_s;
        self.softirq_s().min((busy - own_s).max(0.0))
    }

    /// Task time on the server cores (busy without interrupts and softirq), seconds.
    fn task_s(&self) -> f64 {
        delta(&self.server_stat, &self.server_cpus, |t| t.busy - t.soft) / self.ticks_per_s
    }
}

const ELSEWHERE_HINT: &str = "the requests are served by a process outside what ab started and measures (an already running server or container, or a command that hands its work elsewhere)";

/// Why a run's server CPU (`cpu_s` for `requests` requests) cannot be the cost of serving
/// them: nothing at all was spent for thousands of requests. No other load explains that
/// away, so one such run ends the comparison.
pub(crate) fn no_work(cpu_s: f64, requests: u64) -> Option<String> {
    let per_req_us = cpu_s * 1e6 / requests.max(1) as f64;
    (requests >= PLAUSIBLE_MIN_REQUESTS && per_req_us < PLAUSIBLE_MIN_US).then(|| {
        format!(
            "{per_req_us:.3} µs of CPU per request over {requests} requests: {ELSEWHERE_HINT}; no verdict on such data"
        )
    })
}

/// Whether the server cores' tasks were busy while the measured servers had under a tenth of
/// their time. One such run is contaminated like any other (another load can do it); a
/// variant whose runs are mostly so is refused (`elsewhere_refusal`).
fn served_elsewhere(r: &Readings) -> bool {
    let tasks = r.task_s();
    let busy_pct = tasks * r.ticks_per_s / capacity(r, &r.server_cpus) * 100.0;
    r.server_cpu_s
        .is_some_and(|own| busy_pct > BUSY_FOR_PLAUSIBILITY_PCT && own < MEASURED_MIN_SHARE * tasks)
}

/// The refusal of a variant most of whose `runs` (the checks of its kept runs) had the server
/// cores busy with tasks it did not account for: a verdict would be about something else.
pub(crate) fn elsewhere_refusal(variant: &str, runs: &[&Checks]) -> Option<String> {
    let n = runs.iter().filter(|c| c.served_elsewhere).count();
    (runs.len() >= 2 && 2 * n > runs.len()).then(|| {
        format!(
            "variant {variant}: in {n} of {} runs the server cores' tasks used over {:.0} times the CPU of the measured servers: {ELSEWHERE_HINT}, or another load held the server cores through the whole comparison; no verdict on such data",
            runs.len(),
            1.0 / MEASURED_MIN_SHARE
        )
    })
}

pub(crate) fn check(r: &Readings) -> Checks {
    let capacity = |cpus: &[usize]| capacity(r, cpus);
    let client_steal: f64 = r
        .client_stats
        .iter()
        .map(|s| delta(s, &r.client_cpus, |t| t.steal))
        .sum();
    let client_capacity = capacity(&r.client_cpus) * r.client_stats.len().max(1) as f64;
    let steal_pct = if r.server_cpu_s.is_some() {
        (delta(&r.server_stat, &r.server_cpus, |t| t.steal) + client_steal)
            / (capacity(&r.server_cpus) + client_capacity)
    } else {
        client_steal / client_capacity
    } * 100.0;
    let softirq_pct =
        delta(&r.server_stat, &r.server_cpus, |t| t.soft) / capacity(&r.server_cpus) * 100.0;
    let foreign_pct = r.server_cpu_s.map(|own| {
        let others = r.task_s() - own;
        (others.max(0.0) * r.ticks_per_s / capacity(&r.server_cpus) * 100.0).min(100.0)
    });
    // /proc/stat is read just outside the client's run, so a busy share can pass 100% by a
    // tick or two: capped, since it is a share.
    let client_busy_pct = r
        .client_stats
        .iter()
        .map(|s| delta(s, &r.client_cpus, |t| t.busy) / capacity(&r.client_cpus) * 100.0)
        .fold(0.0, f64::max)
        .min(100.0);
    let mut repeat = Vec::new();
    if steal_pct > STEAL_PCT {
        repeat.push(Flag::Steal { pct: steal_pct });
    }
    if let Some(pct) = foreign_pct.filter(|f| *f > FOREIGN_PCT) {
        repeat.push(Flag::ForeignCpu { pct });
    }
    match r.missed_pct {
        // Open loop: the rate is fixed, so a client that falls behind shows as missed sends,
        // not as req/s.
        Some(missed_pct) if missed_pct > MISSED_PCT => repeat.push(Flag::ClientBehind {
            missed_pct,
            client_busy_pct,
        }),
        _ => {}
    }
    // A client late more often than at the pilot's check of the same rate was held up by
    // something else, and sent in bursts that the server batched (cheaper per request).
    // At a rate no pilot checked there is no lateness to compare with: flagged only.
    let late = r
        .late_pct
        .filter(|l| *l > r.late_limit_pct.unwrap_or(CLIENT_LATE_MAX_PCT))
        .map(|late_pct| Flag::ClientLate {
            late_pct,
            client_busy_pct,
        });
    let late_flag_only = match r.late_limit_pct {
        Some(_) => {
            repeat.extend(late);
            None
        }
        None => late,
    };
    let mut flags = repeat.clone();
    flags.extend(late_flag_only);
    if r.missed_pct.is_none() && client_busy_pct >= CLIENT_SATURATED_PCT {
        flags.push(Flag::ClientSaturated {
            busy_pct: client_busy_pct,
        });
    }
    for &(server_cpu, client_cpu) in &r.smt {
        flags.push(Flag::SmtSiblings {
            server_cpu,
            client_cpu,
        });
    }
    let (now, then) = (&r.start, &r.reference);
    for (setting, a, b) in [
        ("governor", &then.governor, &now.governor),
        ("boost", &then.boost, &now.boost),
        ("THP", &then.thp, &now.thp),
    ] {
        if a != b {
            let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "n/a".into());
            flags.push(Flag::SettingChanged {
                setting,
                from: show(a),
                to: show(b),
            });
        }
    }
    let steady = steady_state(&r.series);
    if let Some(s) = steady.as_ref().filter(|s| !s.steady) {
        flags.push(Flag::NotSteady {
            change_pct: s.change_pct,
        });
    }
    Checks {
        steal_pct,
        foreign_pct,
        softirq_pct,
        served_elsewhere: served_elsewhere(r),
        client_busy_pct,
        settings: now.clone(),
        steady,
        flags,
        repeat,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(load1: f64) -> Settings {
        Settings {
            governor: Some("performance".into()),
            boost: None,
            thp: Some("madvise".into()),
            load1,
        }
    }

    fn readings(before: &str, after: &str, server_ticks: Option<u64>) -> Readings {
        let server_cpu_s = server_ticks.map(|t| t as f64 / 100.0);
        Readings {
            missed_pct: None,
            late_pct: None,
            late_limit_pct: None,
            wall_s: 1.0,
            ticks_per_s: 100.0,
            server_stat: Stat {
                before: parse_proc_stat(before),
                after: parse_proc_stat(after),
            },
            client_stats: vec![Stat {
                before: parse_proc_stat(before),
                after: parse_proc_stat(after),
            }],
            server_cpus: vec![0],
            client_cpus: vec![1],
            server_cpu_s,
            start: settings(2.0),
            reference: settings(2.0),
            smt: Vec::new(),
            series: Vec::new(),
        }
    }

    const BEFORE: &str = "cpu  1 1 1 1 1 1 1 1 0 0\ncpu0 100 0 50 1000 0 0 10 0 0 0\ncpu1 200 0 20 900 0 0 5 0 0 0\nintr 5\n";
    /// After `BEFORE`, a clean run: cpu0 60 busy ticks, 58 of them the server's and 2 softirq;
    /// cpu1 50 busy.
    const QUIET: &str = "cpu0 150 0 58 1040 0 0 12 0 0 0\ncpu1 240 0 28 950 0 0 7 0 0 0\n";

    #[test]
    fn clean_run_raises_no_flag() {
        let c = check(&readings(BEFORE, QUIET, Some(58)));
        assert!(c.flags.is_empty(), "{:?}", c.flags);
        assert!(c.foreign_pct.unwrap().abs() < 1e-9);
        assert!((c.client_busy_pct - 50.0).abs() < 1e-9);
    }

    #[test]
    fn foreign_steal_and_saturated_client_are_flagged() {
        // cpu0: 90 busy ticks, the server had 60: 30% foreign; 5 steal ticks over 200: 2.5%;
        // cpu1 fully busy.
        let after = "cpu0 170 0 70 1010 0 0 10 5 0 0\ncpu1 290 0 30 900 0 0 5 0 0 0\n";
        let c = check(&readings(BEFORE, after, Some(60)));
        let text = joined(&c.flags);
        assert!(text.contains("foreign CPU 30.0%"), "{text}");
        assert!(text.contains("steal 2.5%"), "{text}");
        assert!(text.contains("client cores 100% busy"), "{text}");
        assert_eq!(
            c.repeat.len(),
            2,
            "steal and foreign CPU contaminate the round"
        );
    }

    #[test]
    fn a_client_host_is_read_apart_from_the_server_host() {
        // Server CPU 0 on the agent's host, client CPU 0 here: the same index, two machines.
        // The agent's CPU 0 is quiet but for its server; this host's CPU 0 is saturated.
        let mut r = readings(BEFORE, QUIET, Some(58));
        r.client_cpus = vec![0];
        r.client_stats = vec![Stat {
            before: parse_proc_stat(BEFORE),
            after: parse_proc_stat("cpu0 170 0 130 1040 0 0 10 0 0 0\n"),
        }];
        let c = check(&r);
        assert!(c.foreign_pct.unwrap().abs() < 1e-9, "{c:?}");
        assert!((c.client_busy_pct - 100.0).abs() < 1e-9, "{c:?}");
    }

    #[test]
    fn softirq_on_the_server_cores_is_not_foreign() {
        // cpu0: 80 busy ticks, 25 of them irq + softirq, 55 the server's: 0 foreign.
        let after = "cpu0 150 0 55 1020 0 5 30 0 0 0\ncpu1 240 0 28 950 0 0 7 0 0 0\n";
        let c = check(&readings(BEFORE, after, Some(55)));
        assert!(c.repeat.is_empty(), "{:?}", c.flags);
        assert!(c.foreign_pct.unwrap().abs() < 1e-9);
        assert!((c.softirq_pct - 25.0).abs() < 1e-9);
        // Another task's 20 ticks on cpu0 are.
        let busy = "cpu0 170 0 55 1000 0 5 30 0 0 0\ncpu1 240 0 28 950 0 0 7 0 0 0\n";
        let c = check(&readings(BEFORE, busy, Some(55)));
        assert!((c.foreign_pct.unwrap() - 20.0).abs() < 1e-9, "{:?}", c);
    }

    #[test]
    fn a_server_that_did_not_do_the_work_is_refused_when_most_runs_say_so() {
        // cpu0's tasks: 50 + 8 ticks; the measured server had 2 of them.
        let elsewhere = check(&readings(BEFORE, QUIET, Some(2)));
        assert!(elsewhere.served_elsewhere);
        assert!(
            !elsewhere.repeat.is_empty(),
            "such a run is contaminated too"
        );
        // It had them all.
        let own = check(&readings(BEFORE, QUIET, Some(58)));
        assert!(!own.served_elsewhere);
        // One run of three is another load; two of three, or every run, is a refusal.
        assert!(elsewhere_refusal("B", &[&elsewhere, &own, &own]).is_none());
        let why = elsewhere_refusal("B", &[&elsewhere, &elsewhere, &own]).unwrap();
        assert!(why.contains("in 2 of 3 runs"), "{why}");
        assert!(why.contains("outside what ab started"), "{why}");
        // No CPU at all for 5000 requests ends it at once.
        assert!(no_work(0.0, 5000)
            .unwrap()
            .contains("µs of CPU per request"));
        assert!(no_work(0.0, 10).is_none());
        assert!(no_work(0.05, 5000).is_none());
    }

    #[test]
    fn the_variants_of_one_window_flagged_alike_are_said_once() {
        // Two variants measured together: the same server cores, the same foreign CPU.
        let after = "cpu0 170 0 70 1010 0 0 10 0 0 0\ncpu1 240 0 28 950 0 0 7 0 0 0\n";
        let (a, b) = (
            check(&readings(BEFORE, after, Some(60))),
            check(&readings(BEFORE, after, Some(60))),
        );
        let once = distinct(a.repeat.iter().chain(&b.repeat));
        assert_eq!(joined(once), "foreign CPU 30.0% on the server cores");
        assert_eq!(a.repeat[0].kind(), "foreign CPU");
    }

    #[test]
    fn an_open_loop_client_behind_schedule_repeats_the_round() {
        let mut r = readings(BEFORE, QUIET, Some(58));
        assert!(check(&r).repeat.is_empty());
        r.missed_pct = Some(3.0);
        let c = check(&r);
        assert_eq!(c.repeat, c.flags);
        assert!(
            c.flags[0]
                .to_string()
                .starts_with("client behind: 3.0% of the scheduled sends not made"),
            "{:?}",
            c.flags
        );
        r.missed_pct = Some(0.2);
        assert!(check(&r).repeat.is_empty());
    }

    #[test]
    fn a_client_later_than_at_the_pilot_repeats_the_round() {
        let mut r = readings(BEFORE, QUIET, Some(58));
        // The pilot saw 3% late: the limit is 10%, not 6%.
        r.late_limit_pct = Some(late_limit_pct(3.0));
        r.late_pct = Some(8.0);
        assert!(check(&r).flags.is_empty());
        r.late_pct = Some(12.5);
        let c = check(&r);
        assert_eq!(c.repeat, c.flags);
        assert!(
            c.flags[0]
                .to_string()
                .starts_with("client late: 12.5% of the sends over 1 ms late"),
            "{:?}",
            c.flags
        );
        // A pilot on a busy machine kept a rate at 20% late: only twice that repeats.
        r.late_limit_pct = Some(late_limit_pct(20.0));
        r.late_pct = Some(35.0);
        assert!(check(&r).repeat.is_empty());
    }

    #[test]
    fn lateness_at_a_rate_no_pilot_checked_is_only_flagged() {
        let mut r = readings(BEFORE, QUIET, Some(58));
        r.late_pct = Some(30.0);
        let c = check(&r);
        assert!(c.repeat.is_empty());
        assert!(
            c.flags[0].to_string().starts_with("client late: 30.0%"),
            "{:?}",
            c.flags
        );
    }

    #[test]
    fn changed_settings_are_flagged_and_the_load_average_is_not() {
        let mut r = readings(BEFORE, BEFORE, Some(0));
        r.start.thp = Some("always".into());
        // ab's own load moves it in every run: it says nothing about the machine.
        r.start.load1 = 3.5;
        r.smt = smt_shared(&[0], &[1], |_| Some("0-1".into()));
        let text = joined(&check(&r).flags);
        assert!(text.contains("THP changed: madvise → always"), "{text}");
        assert!(!text.contains("load average"), "{text}");
        assert!(
            text.contains("SMT siblings: server CPU 0 and client CPU 1"),
            "{text}"
        );
        assert!(smt_shared(&[0], &[1], |_| Some("0,2".into())).is_empty());
    }

    #[test]
    fn steady_state_needs_a_drift_beyond_noise() {
        let flat = [100.0, 103.0, 98.0, 101.0, 99.0, 102.0, 100.0, 97.0, 103.0];
        assert!(steady_state(&flat).unwrap().steady);
        let warming = [60.0, 70.0, 80.0, 95.0, 99.0, 100.0, 101.0, 100.0, 99.0];
        let s = steady_state(&warming).unwrap();
        assert!(!s.steady && s.change_pct > 30.0, "{s:?}");
        let short_warmup = [70.0, 95.0, 100.0, 101.0, 100.0];
        assert!(!steady_state(&short_warmup).unwrap().steady);
        assert!(steady_state(&flat[..5]).unwrap().steady);
        assert!(steady_state(&flat[..2]).is_none());
    }

    #[test]
    fn thp_mode_and_cpu_lists() {
        assert_eq!(
            selected_mode("always [madvise] never").as_deref(),
            Some("madvise")
        );
        assert_eq!(parse_cpu_list("0-2,5"), vec![0, 1, 2, 5]);
    }
}

//! What a host does for a comparison, wherever it is: start, read and stop its processes (a
//! `Station`), read a window's counters at agreed instants, run a window's share of the load.
//! ab runs it on its own machine; `loadterm agent` runs the same for ab's requests (`host`
//! chooses which).

use crate::cgroup::{self, Accounting};
use crate::contam::{self, CpuTicks, Settings};
use crate::fixture::{self, Scratch, Vars};
use crate::procs::{self, PortRange, ServerProc, UsageSample};
use crate::profile::record::{PerfSampler, WindowProfile};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// What a started process is to the comparison: its ports are named after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum LaunchRole {
    /// A measured server: `{clear_port}`, `{tls_port}`, `{variant}`, `{config}`.
    Variant,
    /// A backend, never measured: `{backend_port}`, `{backend_tls_port}`.
    Backend,
}

/// A process to start on the server host, in its own cgroup, pinned to `cpus`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Launch {
    pub role: LaunchRole,
    /// The variant's name, or `backendN`: names its scratch directory and cgroup.
    pub tag: String,
    /// The command before substitution.
    pub command: String,
    /// A config template rendered into `{config}` (file name, text).
    pub config: Option<(String, String)>,
    /// Substitutions besides the ones the host sets (ports, `{tmp}`, `{cgroup}`, ...).
    pub vars: Vars,
    /// Address the process listens on, and the ports it may get.
    pub host: String,
    pub ports: PortRange,
    pub cpus: Vec<usize>,
    pub accounting: Option<Accounting>,
    /// Ready when its TLS port answers (else its clear port).
    pub ready_on_tls: bool,
}

/// A process the server host started and found listening.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Launched {
    pub id: u64,
    pub clear_port: u16,
    pub tls_port: u16,
    /// The command as run.
    pub command: String,
    pub accounting: Accounting,
    /// CPU is read from a cgroup, exact at any instant (else a /proc tree).
    pub in_cgroup: bool,
    /// What ab reads, in words ("cgroup v1 ...").
    pub describe: String,
    /// What ab changed in a container's command (options it added, a name made unique) and
    /// found of it (a cgroup outside the process's own), in words.
    pub located: Option<String>,
}

/// Counters of the server host at one instant: each process asked for, and its CPUs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct HostSample {
    pub servers: Vec<UsageSample>,
    pub stat: BTreeMap<usize, CpuTicks>,
    /// When it was read, on the server host's clock (Unix seconds).
    pub unix_s: f64,
}

/// The server host's readings at both ends of a measured window.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct WindowReadings {
    pub before: HostSample,
    pub after: HostSample,
    /// Machine settings at the window's start (server CPUs).
    pub settings: Settings,
    /// The server cores' samples over the window, when asked for (`--profile`).
    #[serde(default)]
    pub profile: Option<WindowProfile>,
}

/// The processes started on one host for one comparison, stopped when dropped.
#[derive(Default)]
pub(crate) struct Station {
    procs: BTreeMap<u64, Running>,
    next: u64,
}

struct Running {
    server: ServerProc,
    /// Its two ports, kept from later launches even when it listens on one only.
    ports: [u16; 2],
    role: LaunchRole,
    cpus: Vec<usize>,
    _scratch: Scratch,
}

impl Station {
    /// Start `l` on free ports of its range, wait until it answers, and check that it is the
    /// process started (listening socket in its cgroup, every process on its CPUs).
    pub(crate) fn launch(&mut self, l: &Launch) -> Result<Launched> {
        let mut taken: Vec<u16> = self.procs.values().flat_map(|r| r.ports).collect();
        let clear = procs::free_port(&l.host, l.ports, &taken)?;
        taken.push(clear);
        let tls = procs::free_port(&l.host, l.ports, &taken)?;
        let scratch = Scratch::new(&l.tag)?;
        let cgroup = cgroup::for_process(scratch.name(), l.accounting)?;
        let mut vars = l.vars.clone();
        vars.set("host", &l.host);
        vars.set("tmp", scratch.path().display());
        match l.role {
            LaunchRole::Variant => {
                vars.set("clear_port", clear);
                vars.set("tls_port", tls);
                vars.set("variant", &l.tag);
                vars.set("server_cpus", contam::cpu_list(&l.cpus));
            }
            LaunchRole::Backend => {
                vars.set("backend_port", clear);
                vars.set("backend_tls_port", tls);
            }
        }
        fixture::set_cgroup(&mut vars, cgroup.as_ref(), &l.command)?;
        if let Some((name, template)) = &l.config {
            let path = scratch.path().join(name);
            std::fs::write(&path, vars.render(template))
                .with_context(|| format!("cannot write {}", path.display()))?;
            vars.set("config", path.display());
        }
        let command = vars.render(&l.command);
        let mut server = ServerProc::start(&command, &l.cpus, scratch.path(), cgroup)?;
        let port = if l.ready_on_tls { tls } else { clear };
        let located = match fixture::wait_ready(&mut server, &l.host, port, &l.cpus) {
            Ok(found) => found,
            Err(e) => {
                let command = server.command().to_owned();
                server.stop(Duration::from_secs(3));
                return Err(e.context(format!("{}: `{command}`", l.tag)));
            }
        };
        self.next += 1;
        let launched = Launched {
            id: self.next,
            clear_port: clear,
            tls_port: tls,
            command: server.command().to_owned(),
            accounting: server.accounting(),
            in_cgroup: server.in_cgroup(),
            describe: server.describe_accounting(),
            located,
        };
        self.procs.insert(
            self.next,
            Running {
                server,
                ports: [clear, tls],
                role: l.role,
                cpus: l.cpus.clone(),
                _scratch: scratch,
            },
        );
        Ok(launched)
    }

    /// Every CPU a running variant was pinned to.
    pub(crate) fn server_cpus(&self) -> Vec<usize> {
        let mut cpus: Vec<usize> = self
            .procs
            .values()
            .filter(|r| r.role == LaunchRole::Variant)
            .flat_map(|r| r.cpus.iter().copied())
            .collect();
        cpus.sort_unstable();
        cpus.dedup();
        cpus
    }

    fn get(&self, id: u64) -> Result<&ServerProc> {
        match self.procs.get(&id) {
            Some(r) => Ok(&r.server),
            None => bail!("no process {id} on this host"),
        }
    }

    /// Every process of each of `ids`.
    pub(crate) fn pids(&self, ids: &[u64]) -> Result<Vec<Vec<u32>>> {
        ids.iter().map(|id| Ok(self.get(*id)?.pids())).collect()
    }

    pub(crate) fn sample(&self, ids: &[u64]) -> Result<HostSample> {
        // The instant the reading starts: a cgroup's counters are read right after it (a
        // /proc tree's take longer, and are that much later).
        let unix_s = unix_s(SystemTime::now());
        let servers = ids
            .iter()
            .map(|id| self.get(*id)?.sample())
            .collect::<Result<_>>()?;
        Ok(HostSample {
            servers,
            stat: contam::read_proc_stat(),
            unix_s,
        })
    }

    /// Why the process exited (`None`: it runs, or its daemon does).
    pub(crate) fn exited(&mut self, id: u64) -> Result<Option<String>> {
        match self.procs.get_mut(&id) {
            Some(r) => Ok(r.server.exited()),
            None => bail!("no process {id} on this host"),
        }
    }

    pub(crate) fn stop(&mut self, id: u64) {
        if let Some(r) = self.procs.remove(&id) {
            r.server.stop(Duration::from_secs(3));
        }
    }
}

impl Drop for Station {
    fn drop(&mut self) {
        for (_, r) in std::mem::take(&mut self.procs) {
            r.server.stop(Duration::from_secs(3));
        }
    }
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_s(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

pub(crate) fn from_unix_s(s: f64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs_f64(s.max(0.0))
}

fn sleep_until(t: SystemTime) {
    if let Ok(d) = t.duration_since(SystemTime::now()) {
        std::thread::sleep(d);
    }
}

/// The readings of a window on this host: at `at` and `duration` later (this host's clock);
/// with `profile`, the running variants' cores sampled between the two.
pub(crate) fn window_here(
    station: &Mutex<Station>,
    ids: &[u64],
    at: SystemTime,
    duration: Duration,
    cpu0: usize,
    profile: bool,
) -> Result<WindowReadings> {
    let read = || lock(station).sample(ids);
    let mut recorder = if profile {
        let cpus = lock(station).server_cpus();
        Some(PerfSampler::start(&cpus)?)
    } else {
        None
    };
    sleep_until(at);
    let settings = contam::settings(cpu0);
    if let Some(r) = &mut recorder {
        r.enable()?;
    }
    let before = read()?;
    sleep_until(at + duration);
    let after = read()?;
    let profile = match recorder {
        Some(mut r) => {
            r.disable()?;
            // Read while the processes live: perf resolves their symbols through them.
            let pids = lock(station).pids(ids)?;
            Some(r.finish(&pids)?)
        }
        None => None,
    };
    Ok(WindowReadings {
        before,
        after,
        settings,
        profile,
    })
}

/// A client host's shard of a window's load: one `loadterm load` per variant (its options
/// after `load`, with a `--start-at` on the same clock as `at_unix_s`), all pinned to `cpus`;
/// their CPU and the host's read at `at_unix_s` (that host's clock) and `duration_s` later.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct LoadWindow {
    pub loads: Vec<Vec<String>>,
    pub cpus: Vec<usize>,
    pub at_unix_s: f64,
    pub duration_s: f64,
}

/// What one load of a window measured: its report (JSON, as `loadterm load --json` wrote it)
/// and its CPU ticks over the window.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct LoadDone {
    pub report: String,
    pub cpu_ticks: u64,
}

/// A window's loads on one host, and the host's /proc/stat over it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct LoadWindowDone {
    pub loads: Vec<LoadDone>,
    pub stat_before: BTreeMap<usize, CpuTicks>,
    pub stat_after: BTreeMap<usize, CpuTicks>,
    /// Time between the two readings, seconds.
    pub wall_s: f64,
}

/// A finished `loadterm load`, or why it failed, in its own words.
pub(crate) fn load_succeeded(out: &std::process::Output) -> Result<()> {
    if !out.status.success() {
        bail!(
            "load run failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Run a window's loads on this host, all at once.
pub(crate) fn load_here(w: &LoadWindow) -> Result<LoadWindowDone> {
    let scratch = Scratch::new("load")?;
    let exe = std::env::current_exe().context("cannot find the loadterm binary")?;
    let mut children = Vec::new();
    for (k, args) in w.loads.iter().enumerate() {
        let json = scratch.path().join(format!("report-{k}.json"));
        let mut cmd = std::process::Command::new(&exe);
        cmd.arg("load")
            .args(args)
            .arg("--json")
            .arg(&json)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        procs::pin(&mut cmd, &w.cpus)?;
        children.push((cmd.spawn().context("cannot run loadterm load")?, json));
    }
    let at = from_unix_s(w.at_unix_s);
    let read = || {
        let ticks: Vec<u64> = children
            .iter()
            .map(|(c, _)| procs::sample_tree(c.id()).cpu_ticks)
            .collect();
        (ticks, contam::read_proc_stat())
    };
    sleep_until(at);
    let (ticks0, stat_before) = read();
    let t0 = std::time::Instant::now();
    sleep_until(at + Duration::from_secs_f64(w.duration_s));
    let (ticks1, stat_after) = read();
    let wall_s = t0.elapsed().as_secs_f64();
    let mut loads = Vec::new();
    for (k, (child, json)) in children.into_iter().enumerate() {
        let out = child
            .wait_with_output()
            .context("waiting for loadterm load")?;
        load_succeeded(&out)?;
        loads.push(LoadDone {
            report: std::fs::read_to_string(&json).context("reading the load report")?,
            // Ticks, not schedstat: the client may have ended its window, and its threads,
            // before the second reading, and a finished process keeps only its totals.
            cpu_ticks: ticks1[k].saturating_sub(ticks0[k]),
        });
    }
    Ok(LoadWindowDone {
        loads,
        stat_before,
        stat_after,
        wall_s,
    })
}

pub(crate) fn lock(s: &Mutex<Station>) -> std::sync::MutexGuard<'_, Station> {
    // A panic while a station was locked leaves its processes as they were: still stoppable.
    s.lock().unwrap_or_else(|e| e.into_inner())
}

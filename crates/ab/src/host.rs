//! Where the servers run: on this machine, where ab starts and reads them itself, or on an
//! agent's host (`--server-host`), where `loadterm agent` runs the same `Station` on ab's
//! requests; and where each share of a window's load runs (`--client-host`).

use crate::agent::client::AgentClient;
use crate::cgroup::Accounting;
use crate::contam::{self, Settings, Stat};
use crate::fixture::Vars;
use crate::procs;
use crate::station::{
    load_here, lock, window_here, HostSample, Launch, LaunchRole, Launched, LoadWindow, Station,
    WindowReadings,
};
use anyhow::{bail, Context, Result};
use loadterm_load::report::Report as LoadReport;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// Where a share of the load runs: here, or on an agent's host (`--client-host`).
pub(crate) enum ClientHost {
    Here,
    Agent(Box<AgentClient>),
}

impl std::fmt::Debug for ClientHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientHost::Here => f.write_str("this machine"),
            ClientHost::Agent(a) => write!(f, "{}", a.url()),
        }
    }
}

/// A client host's window, read: a report and CPU ticks per variant, the host's /proc/stat.
pub(crate) struct ShardRun {
    pub reports: Vec<(LoadReport, u64)>,
    pub stat: Stat,
    pub wall_s: f64,
    /// How far its loads' windows began from the agreed instant, seconds, at worst (an
    /// agent's clock uncertainty included).
    pub off_s: f64,
}

impl ClientHost {
    /// Run `w`, whose `at_unix_s` and `--start-at`s are on ab's clock: an agent gets them on
    /// its own.
    pub(crate) fn load(&self, w: &LoadWindow) -> Result<ShardRun> {
        let (done, at, uncertainty_s) = match self {
            ClientHost::Here => (load_here(w)?, w.at_unix_s, 0.0),
            ClientHost::Agent(a) => {
                let clock = a.clock()?;
                let mut theirs = w.clone();
                theirs.at_unix_s += clock.offset_s;
                for args in &mut theirs.loads {
                    if let Some(i) = args.iter().position(|x| x == "--start-at") {
                        if let Some(v) = args.get_mut(i + 1) {
                            *v = format!("{:.6}", theirs.at_unix_s);
                        }
                    }
                }
                (a.load(&theirs)?, theirs.at_unix_s, clock.rtt_s / 2.0)
            }
        };
        let mut reports = Vec::new();
        let mut off_s: f64 = 0.0;
        for l in done.loads {
            let mut report: LoadReport =
                serde_json::from_str(&l.report).context("parsing the load report")?;
            off_s = off_s.max((report.run.clock.window_start_unix_s - at).abs() + uncertainty_s);
            // On ab's clock, so that shards of several hosts merge on one timeline.
            let shift = at - w.at_unix_s;
            report.run.clock.window_start_unix_s -= shift;
            report.run.clock.origin_unix_s -= shift;
            reports.push((report, l.cpu_ticks));
        }
        Ok(ShardRun {
            reports,
            stat: Stat {
                before: done.stat_before,
                after: done.stat_after,
            },
            wall_s: done.wall_s,
            off_s,
        })
    }
}

/// A window's readings, and how far (seconds, at worst) the server host's first reading was
/// from the agreed instant on ab's clock.
pub(crate) struct ServerWindow {
    pub readings: WindowReadings,
    pub misaligned_s: f64,
}

/// Where the servers and backends of a comparison run.
pub(crate) enum ServerHost {
    Here(Mutex<Station>),
    Agent(AgentClient),
}

impl std::fmt::Debug for ServerHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerHost::Here(_) => f.write_str("this machine"),
            ServerHost::Agent(a) => write!(f, "agent {}", a.url()),
        }
    }
}

impl ServerHost {
    pub(crate) fn here() -> ServerHost {
        ServerHost::Here(Mutex::new(Station::default()))
    }

    pub(crate) fn is_remote(&self) -> bool {
        matches!(self, ServerHost::Agent(_))
    }

    pub(crate) fn launch(&self, l: &Launch) -> Result<Launched> {
        match self {
            ServerHost::Here(s) => lock(s).launch(l),
            ServerHost::Agent(a) => a.launch(l),
        }
    }

    pub(crate) fn sample(&self, ids: &[u64]) -> Result<HostSample> {
        match self {
            ServerHost::Here(s) => lock(s).sample(ids),
            ServerHost::Agent(a) => a.sample(ids),
        }
    }

    pub(crate) fn exited(&self, id: u64) -> Result<Option<String>> {
        match self {
            ServerHost::Here(s) => lock(s).exited(id),
            ServerHost::Agent(a) => a.exited(id),
        }
    }

    /// Stop a process; a host that cannot be reached has stopped it itself (an agent stops
    /// everything when its comparison's connection ends).
    pub(crate) fn stop(&self, id: u64) {
        match self {
            ServerHost::Here(s) => lock(s).stop(id),
            ServerHost::Agent(a) => {
                if let Err(e) = a.stop(id) {
                    eprintln!("ab: {e:#}");
                }
            }
        }
    }

    pub(crate) fn settings(&self, cpu: usize) -> Result<Settings> {
        match self {
            ServerHost::Here(_) => Ok(contam::settings(cpu)),
            ServerHost::Agent(a) => a.settings(cpu),
        }
    }

    /// The readings at `at` (ab's clock) and `duration` later, with a profile of the server
    /// cores between them when `profile` asks for one.
    pub(crate) fn window(
        &self,
        ids: &[u64],
        at: SystemTime,
        duration: Duration,
        cpu0: usize,
        profile: bool,
    ) -> Result<ServerWindow> {
        match self {
            ServerHost::Here(s) => {
                let readings = window_here(s, ids, at, duration, cpu0, profile)?;
                let misaligned_s = (readings.before.unix_s - crate::station::unix_s(at)).abs();
                Ok(ServerWindow {
                    readings,
                    misaligned_s,
                })
            }
            ServerHost::Agent(a) => {
                let (readings, misaligned_s) = a.window(ids, at, duration, cpu0, profile)?;
                Ok(ServerWindow {
                    readings,
                    misaligned_s,
                })
            }
        }
    }
}

/// The backends of a comparison, on the servers' host, stopped when dropped.
pub(crate) struct Backends {
    host: Arc<ServerHost>,
    ids: Vec<u64>,
}

impl Backends {
    /// Start every backend on `cpus` with its own two ports of `ports` (substituted in its own command as
    /// `{backend_port}` / `{backend_tls_port}`), wait until each listens on its first port, and
    /// add the ports to `vars`: the first backend's as `{backend_port}` / `{backend_tls_port}`,
    /// the N-th's also as `{backend_port_N}` / `{backend_tls_port_N}`.
    pub(crate) fn start(
        server_host: &Arc<ServerHost>,
        commands: &[String],
        host: &str,
        ports: procs::PortRange,
        cpus: &[usize],
        accounting: Option<Accounting>,
        vars: &mut Vars,
    ) -> Result<Backends> {
        let mut backends = Backends {
            host: server_host.clone(),
            ids: Vec::new(),
        };
        for (i, command) in commands.iter().enumerate() {
            let launched = server_host
                .launch(&Launch {
                    role: LaunchRole::Backend,
                    tag: format!("backend{}", i + 1),
                    command: command.clone(),
                    config: None,
                    vars: vars.clone(),
                    host: host.to_owned(),
                    ports,
                    cpus: cpus.to_vec(),
                    accounting,
                    ready_on_tls: false,
                })
                .with_context(|| format!("backend {}", i + 1))?;
            backends.ids.push(launched.id);
            let (clear, tls) = (launched.clear_port, launched.tls_port);
            eprintln!(
                "backend {} on {host}:{clear} (TLS {tls}): {}",
                i + 1,
                launched.command
            );
            if i == 0 {
                vars.set("backend_port", clear);
                vars.set("backend_tls_port", tls);
            }
            vars.set(&format!("backend_port_{}", i + 1), clear);
            vars.set(&format!("backend_tls_port_{}", i + 1), tls);
        }
        Ok(backends)
    }

    /// Fail when a backend died: every later round would measure error responses.
    pub(crate) fn check_alive(&mut self) -> Result<()> {
        for (i, id) in self.ids.iter().enumerate() {
            if let Some(why) = self.host.exited(*id)? {
                bail!("backend {} exited during the comparison ({why})", i + 1);
            }
        }
        Ok(())
    }
}

impl Drop for Backends {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            self.host.stop(id);
        }
    }
}

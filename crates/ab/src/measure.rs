//! One measured run, in one of two shapes:
//! - `run`: a fresh server process (or an already running endpoint), a warm-up, the measured
//!   client run (a separate `loadterm load --json` process pinned to the client CPUs), /proc
//!   samples and contamination checks around it;
//! - `windows`: servers kept running for the whole cell (`start`), one client each that warms
//!   its connections up and then measures a window that starts at an agreed instant, and each
//!   server's CPU read in nanoseconds at both ends of that window.

use crate::cgroup::Accounting;
use crate::contam::{self, Checks, CpuTicks, Flag, Readings, Settings, Stat};
use crate::fixture::Vars;
use crate::host::{ClientHost, ServerHost, ShardRun};
use crate::procs::{self, UsageSample};
use crate::protocol::Protocol;
use crate::station::{self, Launch, LaunchRole, LoadWindow};
use anyhow::{bail, Context, Result};
use loadterm_load::report::Report as LoadReport;
use serde::Serialize;
use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// What a variant is.
#[derive(Debug, Clone)]
pub(crate) enum VariantServer {
    /// A server started for every run; `config` is a template rendered per run into the file
    /// substituted as `{config}` (its name keeps the template's, for tools that look at it).
    Command {
        command: String,
        config: Option<(String, String)>,
    },
    /// A server already running at this base URL (`scheme://host:port`): no process control,
    /// nothing measured on the server side.
    Endpoint(String),
}

/// Everything a run needs to know.
#[derive(Debug, Clone)]
pub(crate) struct RunSpec {
    pub target: VariantServer,
    /// Where the servers run (this machine, or an agent's host).
    pub server_host: Arc<ServerHost>,
    /// Where the load of a measured window runs, one shard each: this machine first, then the
    /// agents of `--client-host`.
    pub client_hosts: Arc<Vec<ClientHost>>,
    pub proto: Protocol,
    pub host: String,
    /// The ports the servers may listen on (`--ports`).
    pub ports: procs::PortRange,
    pub url: String,
    pub server_cpus: Vec<usize>,
    pub client_cpus: Vec<usize>,
    pub warmup: Duration,
    pub duration: Duration,
    /// Extra `loadterm load` options (-c, -m, -t, --rate).
    pub load_args: Vec<String>,
    /// Substitutions besides the run's own ports (backend ports, variant name).
    pub vars: Vars,
    /// Machine settings when the comparison began.
    pub reference: Settings,
    pub smt: Vec<(usize, usize)>,
    /// Open loop at a rate the pilot checked: a run whose client sent a larger share of its
    /// sends over 1 ms late than this is run again (`contam::late_limit_pct`).
    pub late_limit_pct: Option<f64>,
    /// How the servers' CPU and memory are read (`--accounting`; `None`: the machine's
    /// cgroups, else the /proc tree).
    pub accounting: Option<Accounting>,
}

/// Metrics of one run (medians etc. are computed over runs later). Server-side metrics are
/// `None` in endpoint mode.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Run {
    pub variant: String,
    pub round: usize,
    pub requests: u64,
    pub errors: u64,
    pub rps: f64,
    pub mb_per_s: f64,
    pub bytes_per_req: f64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub corrected_p99_ms: Option<f64>,
    /// The server's cost per request: its cgroup's CPU, plus the interrupt and softirq time
    /// on the server cores outside its runtime when it had them to itself (its network stack:
    /// on loopback, the delivery of what it sends runs there).
    pub cpu_us_per_req: Option<f64>,
    /// The parts of `cpu_us_per_req`: user and system (the runtime's split by ticks, which
    /// counts a softirq run inside a syscall as system), and irq + softirq outside the
    /// runtime (`None` when the variants shared the server cores: their network work cannot
    /// be told apart, and is charged to none).
    pub user_us_per_req: Option<f64>,
    pub system_us_per_req: Option<f64>,
    pub softirq_us_per_req: Option<f64>,
    /// How the server's CPU and memory were read (none in endpoint mode).
    pub accounting: Option<Accounting>,
    /// Server CPU time / wall time over the measured run (1.0 = one core saturated).
    pub server_cpu_util: Option<f64>,
    pub rss_peak_mib: Option<f64>,
    pub rss_mean_mib: Option<f64>,
    pub ctx_switches_per_req: Option<f64>,
    /// The load client's own CPU time / wall time over the window (measured windows only;
    /// the client cores' busy share also counts whatever else runs there).
    pub client_cpu_util: Option<f64>,
    /// Open loop: share of the scheduled sends the client never made, percent.
    pub missed_pct: Option<f64>,
    /// Open loop: share of the sends made more than 1 ms after their scheduled time, percent.
    pub late_pct: Option<f64>,
    /// Requests completed in each full second of the measured run.
    pub series: Vec<f64>,
    /// Wall time of the whole run: start-up, checks, warm-up, measurement, stop.
    pub wall_s: f64,
    /// How far the server host's readings were from the window's agreed start, at worst, ms
    /// (kept servers; with an agent, its clock's uncertainty included).
    pub server_window_off_ms: Option<f64>,
    pub checks: Checks,
    /// Its server's samples, in a profiled round (`--profile`; in the report's profile, not
    /// with the run).
    #[serde(skip)]
    pub profile: Option<crate::profile::record::RunProfile>,
}

/// The options of a run's `loadterm load` (`extra`: options of this run only).
fn client_args(spec: &RunSpec, url: &str, duration: Duration, extra: &[String]) -> Vec<String> {
    let mut args = vec![
        spec.proto.load_flag().to_owned(),
        "-k".to_owned(),
        "-q".to_owned(),
    ];
    args.extend_from_slice(&spec.load_args);
    args.extend_from_slice(extra);
    args.extend([
        "-D".to_owned(),
        format!("{}ms", duration.as_millis()),
        url.to_owned(),
    ]);
    args
}

/// The `loadterm load` command of an unmeasured run here.
fn client_command(
    spec: &RunSpec,
    url: &str,
    duration: Duration,
    json: Option<&std::path::Path>,
) -> Result<Command> {
    let exe = std::env::current_exe().context("cannot find the loadterm binary")?;
    let mut cmd = Command::new(exe);
    cmd.arg("load").args(client_args(spec, url, duration, &[]));
    if let Some(j) = json {
        cmd.arg("--json").arg(j);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    procs::pin(&mut cmd, &spec.client_cpus)?;
    Ok(cmd)
}

fn client(
    spec: &RunSpec,
    url: &str,
    duration: Duration,
    json: Option<&std::path::Path>,
) -> Result<Option<LoadReport>> {
    let out = client_command(spec, url, duration, json)?
        .output()
        .context("cannot run loadterm load")?;
    client_result(out, json)
}

/// The client's report, read as the load crate's own type: a field it renamed fails here,
/// loudly, instead of reading as zero.
fn client_result(
    out: std::process::Output,
    json: Option<&std::path::Path>,
) -> Result<Option<LoadReport>> {
    station::load_succeeded(&out)?;
    match json {
        Some(j) => {
            let text = std::fs::read_to_string(j).context("reading the load report")?;
            Ok(Some(
                serde_json::from_str(&text).context("parsing the load report")?,
            ))
        }
        None => Ok(None),
    }
}

/// The URL host part (IPv6 in brackets).
fn url_host(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}

/// A server started on the comparison's server host.
pub(crate) struct Started {
    host: Arc<ServerHost>,
    id: u64,
    base: String,
    accounting: Accounting,
    in_cgroup: bool,
}

impl Started {
    pub(crate) fn stop(self) {
        self.host.stop(self.id);
    }
}

/// Start a variant's server once, to be measured in windows (`windows`) until `Started::stop`:
/// it proves it answers, then gets `spec.warmup` of unmeasured load.
pub(crate) fn start(spec: &RunSpec, variant: &str) -> Result<Started> {
    let VariantServer::Command { command, config } = &spec.target else {
        bail!("variant {variant}: a running endpoint cannot be started");
    };
    let s = start_server(spec, variant, command, config)?;
    if let Err(e) = prove_and_warm(spec, variant, &format!("{}{}", s.base, spec.url)) {
        s.stop();
        return Err(e);
    }
    Ok(s)
}

/// A real request through the same client proves this server answers this protocol; then
/// `spec.warmup` of unmeasured load.
fn prove_and_warm(spec: &RunSpec, variant: &str, url: &str) -> Result<()> {
    client(spec, url, Duration::from_millis(200), None)
        .with_context(|| format!("variant {variant}: first request"))?;
    if !spec.warmup.is_zero() {
        client(spec, url, spec.warmup, None)?;
    }
    Ok(())
}

/// How long a window's client warms its connections up before the window (handshakes and the
/// first requests stay out of the measurement).
const WINDOW_WARMUP: Duration = Duration::from_millis(250);
/// Time for the client process to start and connect before its warm-up begins.
const WINDOW_LEAD: Duration = Duration::from_millis(150);
/// Time perf takes to start on the server host (it maps every task first: 0.2–0.3 s measured
/// on a busy 2-core VM), left before a profiled window.
const PROFILE_LEAD: Duration = Duration::from_millis(1000);
/// How far a window's edges (a client's start, the server host's readings) may be from the
/// agreed instant: 1% of the window, at least 2 ms. At a fixed rate the servers are in a steady
/// state, so shifting one side's window by 1% of its length moves CPU per request far less than
/// the effects ab resolves; a loaded host's timers wake a few milliseconds late, and an agent's
/// clock is known to ± half a round trip.
pub(crate) fn window_slack_s(duration: Duration) -> f64 {
    (duration.as_secs_f64() * 0.01).max(0.002)
}

/// One measured window on servers kept running, all at once: each gets its own client (in
/// shards, one per client host, with `--client-host`), every client starts its window at the
/// same agreed instant, and each server's CPU (nanoseconds, from its cgroup or every thread of
/// its tree) is read by its host at that instant and `duration` later, as each client's CPU is
/// by its own host. Measured together, the variants share whatever else the machine does in
/// that second, and their ratio cancels it.
pub(crate) fn windows(
    jobs: &mut [(&RunSpec, &str, &mut Started)],
    round: usize,
    profile: bool,
) -> Result<Vec<Run>> {
    let t_start = Instant::now();
    let Some(first) = jobs.first() else {
        return Ok(Vec::new());
    };
    let (duration, cpu0, host, client_hosts) = (
        first.0.duration,
        first.0.server_cpus.first().copied().unwrap_or(0),
        first.2.host.clone(),
        first.0.client_hosts.clone(),
    );
    for (_, variant, s) in jobs.iter() {
        if let Some(why) = host.exited(s.id)? {
            bail!("variant {variant}: the server exited: {why}");
        }
    }
    // A profiled window leaves perf time to start on the server host first.
    let lead = if profile {
        WINDOW_LEAD + PROFILE_LEAD
    } else {
        WINDOW_LEAD
    };
    let at = SystemTime::now() + lead + WINDOW_WARMUP;
    let at_s = station::unix_s(at);
    let shards = client_hosts.len();
    // Each client host's shard of every variant's load.
    let loads: Vec<LoadWindow> = (0..shards)
        .map(|i| LoadWindow {
            loads: jobs
                .iter()
                .map(|(spec, _, s)| {
                    let mut extra = vec![
                        "--warm-up-time".to_owned(),
                        format!("{}ms", WINDOW_WARMUP.as_millis()),
                        "--start-at".to_owned(),
                        format!("{at_s:.6}"),
                    ];
                    if shards > 1 {
                        extra.extend(["--shard".to_owned(), format!("{i}/{shards}")]);
                    }
                    client_args(spec, &format!("{}{}", s.base, spec.url), duration, &extra)
                })
                .collect(),
            cpus: first.0.client_cpus.clone(),
            at_unix_s: at_s,
            duration_s: duration.as_secs_f64(),
        })
        .collect();
    let ids: Vec<u64> = jobs.iter().map(|(_, _, s)| s.id).collect();
    let (window, loaded) = std::thread::scope(|scope| {
        let server = scope.spawn(|| host.window(&ids, at, duration, cpu0, profile));
        let clients: Vec<_> = loads
            .iter()
            .zip(client_hosts.iter())
            .map(|(w, h)| scope.spawn(move || h.load(w)))
            .collect();
        let loaded: Vec<Result<ShardRun>> = clients.into_iter().map(|t| joined(t.join())).collect();
        (joined(server.join()), loaded)
    });
    let window = window?;
    let mut loaded: Vec<ShardRun> = loaded.into_iter().collect::<Result<_>>()?;
    let (sb, sa) = (&window.readings.before, &window.readings.after);
    // For the foreign-CPU check, every server measured in this window is "own" CPU.
    let all_ns: u64 = (0..jobs.len())
        .map(|k| sa.servers[k].cpu_ns.saturating_sub(sb.servers[k].cpu_ns))
        .sum();
    let alone = jobs.len() == 1;
    // This host's shard measures the window's wall time (the first client host is here).
    let wall = loaded[0].wall_s;
    let client_stats: Vec<Stat> = loaded.iter().map(|l| l.stat.clone()).collect();
    let mut per_variant: Vec<Vec<(String, LoadReport, f64)>> =
        (0..jobs.len()).map(|_| Vec::new()).collect();
    for (l, h) in loaded.iter_mut().zip(client_hosts.iter()) {
        for (k, (report, ticks)) in std::mem::take(&mut l.reports).into_iter().enumerate() {
            let util = ticks as f64 / procs::clk_tck() / l.wall_s.max(1e-9);
            per_variant[k].push((format!("{h:?}"), report, util));
        }
    }
    let mut runs = Vec::new();
    for (k, shards) in per_variant.into_iter().enumerate() {
        let (spec, variant, started) = &jobs[k];
        // The busiest client host's share: the pilot keeps every one of them with room.
        let client_util = shards.iter().map(|s| s.2).fold(0.0, f64::max);
        let report = merged(shards.into_iter().map(|(h, r, _)| (h, r)).collect())?;
        let server =
            ServerReadings::between(started, &sb.servers[k], &sa.servers[k], all_ns, alone);
        let mut run = run_of(
            spec,
            variant,
            round,
            &report,
            wall,
            Some(server),
            (
                Stat {
                    before: sb.stat.clone(),
                    after: sa.stat.clone(),
                },
                client_stats.clone(),
            ),
            window.readings.settings.clone(),
        )?;
        for (l, h) in loaded.iter().zip(client_hosts.iter()) {
            if l.off_s > window_slack_s(duration) {
                let flag = Flag::ClientWindowOff {
                    ms: l.off_s * 1e3,
                    host: format!("{h:?}"),
                };
                run.checks.flags.push(flag.clone());
                run.checks.repeat.push(flag);
            }
        }
        if window.misaligned_s > window_slack_s(duration) {
            let flag = Flag::ServerReadingsOff {
                ms: window.misaligned_s * 1e3,
            };
            run.checks.flags.push(flag.clone());
            run.checks.repeat.push(flag);
        }
        run.server_window_off_ms = Some(window.misaligned_s * 1e3);
        run.client_cpu_util = Some(client_util);
        run.wall_s = t_start.elapsed().as_secs_f64();
        run.profile = window.readings.profile.as_ref().and_then(|p| {
            Some(crate::profile::record::RunProfile {
                period_us: p.period_us,
                stacks: p.stacks.get(k)?.clone(),
            })
        });
        runs.push(run);
    }
    Ok(runs)
}

/// One report from a window's shards (labelled by host): the union of their samples
/// (`loadterm merge`).
fn merged(mut reports: Vec<(String, LoadReport)>) -> Result<LoadReport> {
    if reports.len() == 1 {
        if let Some((_, one)) = reports.pop() {
            return Ok(one);
        }
    }
    loadterm_load::merge::reports(&reports, false).context("merging the load's shards")
}

fn joined<T>(r: std::thread::Result<Result<T>>) -> Result<T> {
    r.unwrap_or_else(|_| Err(anyhow::anyhow!("a reading thread panicked")))
}

fn report_path(variant: &str, round: usize) -> std::path::PathBuf {
    // A variant's name is free text: only its safe characters go into a file name.
    std::env::temp_dir().join(format!(
        "loadterm-ab-{}-{}-{round}.json",
        std::process::id(),
        variant.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
    ))
}

/// What was read of the server over a measured run.
struct ServerReadings {
    cpu_s: f64,
    user_s: f64,
    system_s: f64,
    /// CPU of every server measured in the same window, seconds: none of it is foreign.
    all_cpu_s: f64,
    /// The server had the server cores to itself: their irq and softirq time is its own.
    alone: bool,
    ctx: u64,
    /// (peak, mean) KiB.
    rss_kib: (u64, u64),
    accounting: Accounting,
}

impl ServerReadings {
    /// Between two samples of a long-lived server (nanoseconds: its cgroup, or its threads).
    fn between(
        server: &Started,
        b: &UsageSample,
        a: &UsageSample,
        all_ns: u64,
        alone: bool,
    ) -> Self {
        let s = |a: u64, b: u64| a.saturating_sub(b) as f64 / 1e9;
        ServerReadings {
            cpu_s: s(a.cpu_ns, b.cpu_ns),
            user_s: s(a.user_ns, b.user_ns),
            system_s: s(a.system_ns, b.system_ns),
            all_cpu_s: all_ns as f64 / 1e9,
            alone,
            ctx: a.ctx_switches.saturating_sub(b.ctx_switches),
            rss_kib: (a.rss_kib, a.rss_kib),
            accounting: server.accounting,
        }
    }
}

fn start_server(
    spec: &RunSpec,
    variant: &str,
    command: &str,
    config: &Option<(String, String)>,
) -> Result<Started> {
    let launched = spec
        .server_host
        .launch(&Launch {
            role: LaunchRole::Variant,
            tag: variant.to_owned(),
            command: command.to_owned(),
            config: config.clone(),
            vars: spec.vars.clone(),
            host: spec.host.clone(),
            ports: spec.ports,
            cpus: spec.server_cpus.clone(),
            accounting: spec.accounting,
            ready_on_tls: spec.proto.is_tls(),
        })
        .with_context(|| format!("variant {variant}"))?;
    let (scheme, port) = if spec.proto.is_tls() {
        ("https", launched.tls_port)
    } else {
        ("http", launched.clear_port)
    };
    // Said once per variant: every later start is read the same way.
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    if let Ok(mut said) = SAID.lock() {
        if !said.iter().any(|v| v == variant) {
            said.push(variant.to_owned());
            if let Some(found) = &launched.located {
                eprintln!("ab: variant {variant}: {found}");
            }
            eprintln!(
                "ab: variant {variant}: CPU and memory from {}",
                launched.describe
            );
        }
    }
    Ok(Started {
        host: spec.server_host.clone(),
        id: launched.id,
        base: format!("{scheme}://{}:{port}", url_host(&spec.host)),
        accounting: launched.accounting,
        in_cgroup: launched.in_cgroup,
    })
}

pub(crate) fn run(spec: &RunSpec, variant: &str, round: usize) -> Result<Run> {
    let t_start = Instant::now();
    let (started, base) = match &spec.target {
        VariantServer::Command { command, config } => {
            let s = start_server(spec, variant, command, config)?;
            let base = s.base.clone();
            (Some(s), base)
        }
        VariantServer::Endpoint(url) => (None, url.trim_end_matches('/').to_owned()),
    };
    let result = measured(
        spec,
        variant,
        round,
        &format!("{base}{}", spec.url),
        started.as_ref(),
    );
    if let Some(s) = started {
        s.stop();
    }
    let mut run = result?;
    run.wall_s = t_start.elapsed().as_secs_f64();
    Ok(run)
}

fn measured(
    spec: &RunSpec,
    variant: &str,
    round: usize,
    url: &str,
    server: Option<&Started>,
) -> Result<Run> {
    prove_and_warm(spec, variant, url)?;
    let json_path = report_path(variant, round);
    let stop = AtomicBool::new(false);
    // The server and its host's CPUs, read together.
    let sample = |s: &Started| -> Result<(UsageSample, BTreeMap<usize, CpuTicks>)> {
        let h = s.host.sample(&[s.id])?;
        Ok((h.servers.first().copied().unwrap_or_default(), h.stat))
    };
    std::thread::scope(|scope| {
        let sampler = server.map(|server| {
            let stop = &stop;
            scope.spawn(move || {
                let (mut peak, mut sum, mut n) = (0u64, 0u64, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    if let Ok((s, _)) = sample(server) {
                        peak = peak.max(s.rss_kib);
                        sum += s.rss_kib;
                        n += 1;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                (peak, sum.checked_div(n).unwrap_or(0))
            })
        });
        let settings = match server {
            Some(s) => s
                .host
                .settings(spec.server_cpus.first().copied().unwrap_or(0))?,
            None => contam::settings(spec.server_cpus.first().copied().unwrap_or(0)),
        };
        let before = server.map(sample).transpose()?;
        let stat_before = contam::read_proc_stat();
        let t0 = Instant::now();
        let report = client(spec, url, spec.duration, Some(&json_path));
        let wall = t0.elapsed().as_secs_f64();
        let stat_after = contam::read_proc_stat();
        let after = server.map(sample).transpose()?;
        stop.store(true, Ordering::Relaxed);
        let rss = sampler.map(|s| s.join().unwrap_or((0, 0)));
        let _ = std::fs::remove_file(&json_path);
        let report = report?.context("the load report is missing")?;
        let client_stat = Stat {
            before: stat_before,
            after: stat_after,
        };
        let (readings, server_stat) = match (server, before, after, rss) {
            (Some(server), Some(b), Some(a), Some(rss)) => {
                // A cgroup keeps the time of processes that ended; a /proc tree loses it
                // from the nanoseconds of exited threads, but not from its ticks.
                let mut r = ServerReadings::between(server, &b.0, &a.0, 0, true);
                if !server.in_cgroup {
                    r.cpu_s = a.0.cpu_ticks.saturating_sub(b.0.cpu_ticks) as f64 / procs::clk_tck();
                }
                r.all_cpu_s = r.cpu_s;
                r.rss_kib = rss;
                let stat = Stat {
                    before: b.1,
                    after: a.1,
                };
                (Some(r), stat)
            }
            // Endpoint mode: no server host is read; its CPUs are not checked.
            _ => (None, client_stat.clone()),
        };
        run_of(
            spec,
            variant,
            round,
            &report,
            wall,
            readings,
            (server_stat, vec![client_stat]),
            settings,
        )
    })
}

/// A variant completed no request in a measured run. Its server was alive when the window
/// began (checked before each one), so a stall or a burst of foreign CPU lost the window: the
/// round is run again like a contaminated one (`cell`), and a server that really stopped
/// answering ends the comparison at the next round's check or when repeats run out.
#[derive(Debug)]
pub(crate) struct NoRequest {
    variant: String,
    started: u64,
    window: Duration,
}

impl std::fmt::Display for NoRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Requests started in the warm-up count where they complete: none started in the
        // window may still mean every connection is waiting on a response.
        write!(
            f,
            "variant {}: no request completed in the measured run ({} started in its {:?}): \
             requests that outlast the window want a longer --duration or fewer connections \
             (-c) or streams (-m); a client that could not send, a quieter machine",
            self.variant, self.started, self.window
        )
    }
}

impl std::error::Error for NoRequest {}

impl NoRequest {
    /// Whether `e` is, or wraps, a run without a completed request.
    pub(crate) fn is(e: &anyhow::Error) -> bool {
        e.chain().any(|c| c.is::<NoRequest>())
    }
}

/// A run's metrics from the client's report and the server's readings.
#[allow(clippy::too_many_arguments)]
fn run_of(
    spec: &RunSpec,
    variant: &str,
    round: usize,
    report: &LoadReport,
    wall: f64,
    server: Option<ServerReadings>,
    // The servers' host's, and each client host's.
    stat: (Stat, Vec<Stat>),
    settings: Settings,
) -> Result<Run> {
    let requests = report.requests.completed;
    if requests == 0 {
        return Err(NoRequest {
            variant: variant.to_owned(),
            started: report.requests.started,
            window: spec.duration,
        }
        .into());
    }
    let n = requests as f64;
    let latency = report
        .latency_us
        .as_ref()
        .context("the load report has no latency although requests completed")?;
    let errors = report.errors.transport.total();
    // Open loop: the sends the schedule asked for that never went out (the client fell behind).
    let open = report.open_loop.as_ref();
    let missed_pct = open.map(|o| o.missed as f64 / ((o.sent + o.missed) as f64).max(1.0) * 100.0);
    let late_pct = open.map(|o| o.late as f64 / (o.sent as f64).max(1.0) * 100.0);
    let corrected = report
        .latency_corrected_us
        .as_ref()
        .map(|p| p.p99 as f64 / 1e3);
    // Complete seconds only: the last, partial one would look like a drop in throughput.
    let full_seconds = spec.duration.as_secs() as usize;
    let series: Vec<f64> = report
        .timeseries
        .iter()
        .take(full_seconds)
        .map(|s| s.requests as f64)
        .collect();
    let readings = Readings {
        wall_s: wall,
        ticks_per_s: procs::clk_tck(),
        server_stat: stat.0,
        client_stats: stat.1,
        server_cpus: spec.server_cpus.clone(),
        client_cpus: spec.client_cpus.clone(),
        server_cpu_s: server.as_ref().map(|s| s.all_cpu_s),
        missed_pct,
        late_pct,
        late_limit_pct: spec.late_limit_pct,
        start: settings,
        reference: spec.reference.clone(),
        smt: spec.smt.clone(),
        series: series.clone(),
    };
    if let Some(s) = &server {
        if let Some(why) = contam::no_work(s.cpu_s, requests) {
            return Err(contam::Implausible(format!("variant {variant}: {why}")).into());
        }
    }
    let checks = contam::check(&readings);
    // The server cores' interrupt and softirq time, charged to a server that had them alone.
    let softirq_s = server
        .as_ref()
        .filter(|s| s.alone)
        .map(|s| readings.network_s(s.cpu_s));
    let per_req = |s: f64| s * 1e6 / n;
    Ok(Run {
        variant: variant.to_owned(),
        round,
        requests,
        errors,
        rps: report.rps,
        mb_per_s: report.bytes_per_s / 1e6,
        bytes_per_req: report.bytes.total as f64 / n,
        mean_ms: latency.mean / 1e3,
        p50_ms: latency.p50 as f64 / 1e3,
        p95_ms: latency.p95 as f64 / 1e3,
        p99_ms: latency.p99 as f64 / 1e3,
        corrected_p99_ms: corrected,
        cpu_us_per_req: server
            .as_ref()
            .map(|s| per_req(s.cpu_s + softirq_s.unwrap_or(0.0))),
        user_us_per_req: server.as_ref().map(|s| per_req(s.user_s)),
        system_us_per_req: server.as_ref().map(|s| per_req(s.system_s)),
        softirq_us_per_req: softirq_s.map(per_req),
        accounting: server.as_ref().map(|s| s.accounting),
        server_cpu_util: server
            .as_ref()
            .map(|s| (s.cpu_s + softirq_s.unwrap_or(0.0)) / wall),
        rss_peak_mib: server.as_ref().map(|s| s.rss_kib.0 as f64 / 1024.0),
        rss_mean_mib: server.as_ref().map(|s| s.rss_kib.1 as f64 / 1024.0),
        ctx_switches_per_req: server.as_ref().map(|s| s.ctx as f64 / n),
        missed_pct,
        late_pct,
        client_cpu_util: None,
        series,
        wall_s: 0.0,
        server_window_off_ms: None,
        checks,
        profile: None,
    })
}

#[cfg(test)]
mod tests {
    use super::NoRequest;
    use anyhow::Context;

    #[test]
    fn a_run_without_a_request_is_known_through_its_context() {
        let lost: anyhow::Result<()> = Err(NoRequest {
            variant: "B".to_owned(),
            started: 500,
            window: std::time::Duration::from_secs(1),
        }
        .into());
        let e = lost.context("round 3").unwrap_err();
        assert!(NoRequest::is(&e));
        let text = format!("{e:#}");
        assert!(text.contains("variant B: no request completed"), "{text}");
        assert!(text.contains("a longer --duration"), "{text}");
        assert!(!NoRequest::is(&anyhow::anyhow!(
            "variant B: the server exited"
        )));
    }
}

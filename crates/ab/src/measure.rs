//! One measured run, in one of two shapes:
//! - `run`: a fresh server process (or an already running endpoint), a warm-up, the measured
//!   client run (a separate `loadterm load --json` process pinned to the client CPUs), /proc
//!   samples and contamination checks around it;
//! - `windows`: servers kept running for the whole cell (`start`), one client each that warms
//!   its connections up and then measures a window that starts at an agreed instant, and each
//!   server's CPU read in nanoseconds at both ends of that window.

use crate::contam::{self, Checks, Readings, Settings};
use crate::fixture::{self, Scratch, Vars};
use crate::procs::{self, ServerProc};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a variant is.
#[derive(Debug, Clone)]
pub enum Target {
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
pub struct RunSpec {
    pub target: Target,
    pub proto: String,
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
}

/// Metrics of one run (medians etc. are computed over runs later). Server-side metrics are
/// `None` in endpoint mode.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
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
    pub cpu_us_per_req: Option<f64>,
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
    pub checks: Checks,
}

/// Names of the metrics compared between variants.
pub const METRICS: &[&str] = &[
    "cpu_us_per_req",
    "rps",
    "p99_ms",
    "mean_ms",
    "bytes_per_req",
    "rss_peak_mib",
];

impl Run {
    /// A metric by name; NaN when not measured (comparisons skip those).
    pub fn metric(&self, name: &str) -> f64 {
        let opt = |v: Option<f64>| v.unwrap_or(f64::NAN);
        match name {
            "cpu_us_per_req" => opt(self.cpu_us_per_req),
            "rps" => self.rps,
            "p99_ms" => self.p99_ms,
            "mean_ms" => self.mean_ms,
            "bytes_per_req" => self.bytes_per_req,
            "rss_peak_mib" => opt(self.rss_peak_mib),
            "p95_ms" => self.p95_ms,
            "server_cpu_util" => opt(self.server_cpu_util),
            _ => f64::NAN,
        }
    }
}

/// The `loadterm load` command of a run (`extra`: options of this run only).
fn client_command(
    spec: &RunSpec,
    url: &str,
    duration: Duration,
    json: Option<&std::path::Path>,
    extra: &[String],
) -> Result<Command> {
    let exe = std::env::current_exe().context("cannot find the loadterm binary")?;
    let mut cmd = Command::new(exe);
    cmd.arg("load")
        .arg(match spec.proto.as_str() {
            // HTTP/1.1 over TLS is the client's --h1 with an https URL.
            "h1s" => "--h1".to_owned(),
            p => format!("--{p}"),
        })
        .arg("-k")
        .arg("-q");
    cmd.args(&spec.load_args)
        .args(extra)
        .arg("-D")
        .arg(format!("{}ms", duration.as_millis()))
        .arg(url);
    if let Some(j) = json {
        cmd.arg("--json").arg(j);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    procs::pin(&mut cmd, spec.client_cpus.clone());
    Ok(cmd)
}

fn client(
    spec: &RunSpec,
    url: &str,
    duration: Duration,
    json: Option<&std::path::Path>,
) -> Result<Option<serde_json::Value>> {
    let out = client_command(spec, url, duration, json, &[])?
        .output()
        .context("cannot run loadterm load")?;
    client_result(out, json)
}

fn client_result(
    out: std::process::Output,
    json: Option<&std::path::Path>,
) -> Result<Option<serde_json::Value>> {
    if !out.status.success() {
        bail!(
            "load run failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
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

/// A started server, with its scratch directory (removed after the server stops).
pub struct Started {
    server: ServerProc,
    base: String,
    _scratch: Scratch,
}

impl Started {
    pub fn stop(self) {
        self.server.stop(Duration::from_secs(3));
    }
}

/// Start a variant's server once, to be measured in windows (`windows`) until `Started::stop`:
/// it proves it answers, then gets `spec.warmup` of unmeasured load.
pub fn start(spec: &RunSpec, variant: &str) -> Result<Started> {
    let Target::Command { command, config } = &spec.target else {
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
/// A window the client began further than this from the agreed instant is misaligned with the
/// server's CPU readings.
const WINDOW_SLACK_S: f64 = 0.002;

fn sleep_until(t: std::time::SystemTime) {
    if let Ok(d) = t.duration_since(std::time::SystemTime::now()) {
        std::thread::sleep(d);
    }
}

/// One measured window on servers kept running, all at once: each gets its own client, every
/// client starts its window at the same agreed instant, and each server's CPU (nanoseconds,
/// every thread of its tree) is read at that instant and `duration` later. Measured together,
/// the variants share whatever else the machine does in that second, and their ratio cancels it.
pub fn windows(jobs: &mut [(&RunSpec, &str, &mut Started)], round: usize) -> Result<Vec<Run>> {
    let t_start = Instant::now();
    let Some(first) = jobs.first() else {
        return Ok(Vec::new());
    };
    let (duration, cpu0) = (
        first.0.duration,
        first.0.server_cpus.first().copied().unwrap_or(0),
    );
    let at = std::time::SystemTime::now() + WINDOW_LEAD + WINDOW_WARMUP;
    let at_s = at
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let extra = [
        "--warm-up-time".to_owned(),
        format!("{}ms", WINDOW_WARMUP.as_millis()),
        "--start-at".to_owned(),
        format!("{at_s:.6}"),
    ];
    let mut clients = Vec::new();
    for (spec, variant, s) in jobs.iter_mut() {
        if let Some(why) = s.server.exited() {
            bail!("variant {variant}: the server exited: {why}");
        }
        let url = format!("{}{}", s.base, spec.url);
        let json_path = report_path(variant, round);
        let child = client_command(spec, &url, duration, Some(&json_path), &extra)?
            .spawn()
            .context("cannot run loadterm load")?;
        clients.push((child, json_path));
    }
    let read = |jobs: &[(&RunSpec, &str, &mut Started)], clients: &[(std::process::Child, _)]| {
        let servers: Vec<procs::Sample> = jobs
            .iter()
            .map(|(_, _, s)| procs::sample_tree(s.server.pid()))
            .collect();
        let client_ticks: Vec<u64> = clients
            .iter()
            .map(|(c, _)| procs::sample_tree(c.id()).cpu_ticks)
            .collect();
        (servers, client_ticks, contam::read_proc_stat())
    };
    sleep_until(at);
    let settings = contam::settings(cpu0);
    let before = read(jobs, &clients);
    let t0 = Instant::now();
    sleep_until(at + duration);
    let after = read(jobs, &clients);
    let wall = t0.elapsed().as_secs_f64();
    let reports: Vec<Result<serde_json::Value>> = clients
        .into_iter()
        .map(|(child, json_path)| {
            let out = child
                .wait_with_output()
                .context("waiting for loadterm load");
            let report = out.and_then(|o| client_result(o, Some(&json_path)));
            let _ = std::fs::remove_file(&json_path);
            report?.context("the load report is missing")
        })
        .collect();
    let cpu_s: Vec<f64> = (0..jobs.len())
        .map(|k| after.0[k].cpu_ns.saturating_sub(before.0[k].cpu_ns) as f64 / 1e9)
        .collect();
    // For the foreign-CPU check, every server measured in this window is "own" CPU.
    let all_ticks = (cpu_s.iter().sum::<f64>() * procs::clk_tck()).round() as u64;
    let mut runs = Vec::new();
    for (k, report) in reports.into_iter().enumerate() {
        let (spec, variant, _) = &jobs[k];
        let report = report?;
        let misaligned_s = report["clock"]["window_start_unix_s"]
            .as_f64()
            .map_or(0.0, |w| w - at_s);
        let (s0, s1) = (before.0[k], after.0[k]);
        let server = ServerReadings {
            cpu_s: cpu_s[k],
            ticks: all_ticks,
            ctx: s1.ctx_switches.saturating_sub(s0.ctx_switches),
            rss_kib: (s1.rss_kib, s1.rss_kib),
        };
        let mut run = run_of(
            spec,
            variant,
            round,
            &report,
            wall,
            Some(server),
            (before.2.clone(), after.2.clone()),
            settings.clone(),
        )?;
        if misaligned_s.abs() > WINDOW_SLACK_S {
            let flag = format!(
                "client window {:+.1} ms off the server's readings",
                misaligned_s * 1e3
            );
            run.checks.flags.push(flag.clone());
            run.checks.repeat.push(flag);
        }
        // Ticks, not schedstat: the client may have ended its window, and its threads, before
        // the second reading, and a finished process keeps only its totals.
        run.client_cpu_util =
            Some(after.1[k].saturating_sub(before.1[k]) as f64 / procs::clk_tck() / wall);
        run.wall_s = t_start.elapsed().as_secs_f64();
        runs.push(run);
    }
    Ok(runs)
}

fn report_path(variant: &str, round: usize) -> std::path::PathBuf {
    // A variant's name is free text: only its safe characters go into a file name.
    std::env::temp_dir().join(format!(
        "loadterm-ab-{}-{}-{round}.json",
        std::process::id(),
        variant.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
    ))
}

/// What was read of the server's tree over a measured run.
struct ServerReadings {
    cpu_s: f64,
    /// The same CPU in clock ticks, for the foreign-CPU check against /proc/stat's ticks.
    ticks: u64,
    ctx: u64,
    /// (peak, mean) KiB.
    rss_kib: (u64, u64),
}

fn start_server(
    spec: &RunSpec,
    variant: &str,
    command: &str,
    config: &Option<(String, String)>,
) -> Result<Started> {
    let clear = procs::free_port(&spec.host, spec.ports, &[])?;
    let tls = procs::free_port(&spec.host, spec.ports, &[clear])?;
    let scratch = Scratch::new(variant)?;
    let mut vars = spec.vars.clone();
    vars.set("host", &spec.host);
    vars.set("clear_port", clear);
    vars.set("tls_port", tls);
    vars.set("tmp", scratch.path().display());
    vars.set("variant", variant);
    if let Some((name, template)) = config {
        let path = scratch.path().join(name);
        std::fs::write(&path, vars.render(template))
            .with_context(|| format!("cannot write {}", path.display()))?;
        vars.set("config", path.display());
    }
    let command = vars.render(command);
    let mut server =
        ServerProc::start(&command, &spec.server_cpus, &scratch.path().join("stderr"))?;
    let (scheme, port) = if matches!(spec.proto.as_str(), "h1" | "h2c") {
        ("http", clear)
    } else {
        ("https", tls)
    };
    if let Err(e) = fixture::wait_ready(&mut server, &spec.host, port) {
        server.stop(Duration::from_secs(3));
        return Err(e.context(format!("variant {variant}: `{command}`")));
    }
    Ok(Started {
        server,
        base: format!("{scheme}://{}:{port}", url_host(&spec.host)),
        _scratch: scratch,
    })
}

pub fn run(spec: &RunSpec, variant: &str, round: usize) -> Result<Run> {
    let t_start = Instant::now();
    let (started, base) = match &spec.target {
        Target::Command { command, config } => {
            let s = start_server(spec, variant, command, config)?;
            let base = s.base.clone();
            (Some(s), base)
        }
        Target::Endpoint(url) => (None, url.trim_end_matches('/').to_owned()),
    };
    let root = started.as_ref().map(|s| s.server.pid());
    let result = measured(spec, variant, round, &format!("{base}{}", spec.url), root);
    if let Some(s) = started {
        s.server.stop(Duration::from_secs(3));
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
    root: Option<u32>,
) -> Result<Run> {
    prove_and_warm(spec, variant, url)?;
    let json_path = report_path(variant, round);
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = root.map(|tree_root| {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let (mut peak, mut sum, mut n) = (0u64, 0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                let rss = procs::sample_tree(tree_root).rss_kib;
                peak = peak.max(rss);
                sum += rss;
                n += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
            (peak, sum.checked_div(n).unwrap_or(0))
        })
    });
    let settings = contam::settings(spec.server_cpus.first().copied().unwrap_or(0));
    let before = root.map(procs::sample_tree);
    let stat_before = contam::read_proc_stat();
    let t0 = Instant::now();
    let report = client(spec, url, spec.duration, Some(&json_path));
    let wall = t0.elapsed().as_secs_f64();
    let stat_after = contam::read_proc_stat();
    let after = root.map(procs::sample_tree);
    stop.store(true, Ordering::Relaxed);
    let rss = sampler.map(|s| s.join().unwrap_or((0, 0)));
    let _ = std::fs::remove_file(&json_path);
    let report = report?.context("the load report is missing")?;
    let server = match (before, after, rss) {
        (Some(b), Some(a), Some(rss)) => {
            let ticks = a.cpu_ticks.saturating_sub(b.cpu_ticks);
            Some(ServerReadings {
                cpu_s: ticks as f64 / procs::clk_tck(),
                ticks,
                ctx: a.ctx_switches.saturating_sub(b.ctx_switches),
                rss_kib: rss,
            })
        }
        _ => None,
    };
    run_of(
        spec,
        variant,
        round,
        &report,
        wall,
        server,
        (stat_before, stat_after),
        settings,
    )
}

/// A run's metrics from the client's report and the server's readings.
#[allow(clippy::too_many_arguments)]
fn run_of(
    spec: &RunSpec,
    variant: &str,
    round: usize,
    report: &serde_json::Value,
    wall: f64,
    server: Option<ServerReadings>,
    stat: (
        std::collections::BTreeMap<usize, contam::CpuTicks>,
        std::collections::BTreeMap<usize, contam::CpuTicks>,
    ),
    settings: Settings,
) -> Result<Run> {
    let f = |path: &[&str]| {
        path.iter()
            .fold(report, |v, k| &v[*k])
            .as_f64()
            .unwrap_or(0.0)
    };
    let requests = f(&["requests", "completed"]);
    if requests == 0.0 {
        bail!("variant {variant}: no request completed in the measured run");
    }
    let errors = ["connect", "tls", "timeout", "reset", "protocol"]
        .iter()
        .map(|k| f(&["errors", k]))
        .sum::<f64>();
    // Open loop: the sends the schedule asked for that never went out (the client fell behind).
    let missed_pct = report["open_loop"]["sent"].as_f64().map(|sent| {
        let missed = f(&["open_loop", "missed"]);
        missed / (sent + missed).max(1.0) * 100.0
    });
    let late_pct = report["open_loop"]["sent"]
        .as_f64()
        .map(|sent| f(&["open_loop", "late"]) / sent.max(1.0) * 100.0);
    let corrected = report["latency_corrected_us"]["p99"]
        .as_f64()
        .map(|v| v / 1e3);
    // Complete seconds only: the last, partial one would look like a drop in throughput.
    let full_seconds = spec.duration.as_secs() as usize;
    let series: Vec<f64> = report["timeseries"]
        .as_array()
        .map(|a| {
            a.iter()
                .take(full_seconds)
                .map(|s| s["requests"].as_f64().unwrap_or(0.0))
                .collect()
        })
        .unwrap_or_default();
    let checks = contam::check(&Readings {
        wall_s: wall,
        ticks_per_s: procs::clk_tck(),
        before: stat.0,
        after: stat.1,
        server_cpus: spec.server_cpus.clone(),
        client_cpus: spec.client_cpus.clone(),
        server_ticks: server.as_ref().map(|s| s.ticks),
        missed_pct,
        late_pct,
        late_limit_pct: spec.late_limit_pct,
        start: settings,
        reference: spec.reference.clone(),
        smt: spec.smt.clone(),
        series: series.clone(),
    });
    Ok(Run {
        variant: variant.to_owned(),
        round,
        requests: requests as u64,
        errors: errors as u64,
        rps: f(&["rps"]),
        mb_per_s: f(&["bytes_per_s"]) / 1e6,
        bytes_per_req: f(&["bytes", "total"]) / requests,
        mean_ms: f(&["latency_us", "mean"]) / 1e3,
        p50_ms: f(&["latency_us", "p50"]) / 1e3,
        p95_ms: f(&["latency_us", "p95"]) / 1e3,
        p99_ms: f(&["latency_us", "p99"]) / 1e3,
        corrected_p99_ms: corrected,
        cpu_us_per_req: server.as_ref().map(|s| s.cpu_s * 1e6 / requests),
        server_cpu_util: server.as_ref().map(|s| s.cpu_s / wall),
        rss_peak_mib: server.as_ref().map(|s| s.rss_kib.0 as f64 / 1024.0),
        rss_mean_mib: server.as_ref().map(|s| s.rss_kib.1 as f64 / 1024.0),
        ctx_switches_per_req: server.as_ref().map(|s| s.ctx as f64 / requests),
        missed_pct,
        late_pct,
        client_cpu_util: None,
        series,
        wall_s: 0.0,
        checks,
    })
}

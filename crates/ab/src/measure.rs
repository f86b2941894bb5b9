//! One measured run: a fresh server process, a warm-up, the measured client run (a separate
//! `loadterm load --json` process pinned to the client CPUs), /proc samples around it.

use crate::procs::{self, ServerProc};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Everything a run needs to know.
#[derive(Debug, Clone)]
pub struct RunSpec {
    pub command: String,
    pub proto: String,
    pub host: String,
    pub url: String,
    pub server_cpus: Vec<usize>,
    pub client_cpus: Vec<usize>,
    pub warmup: Duration,
    pub duration: Duration,
    /// Extra `loadterm load` options (-c, -m, -t, --rate).
    pub load_args: Vec<String>,
}

/// Metrics of one run (medians etc. are computed over runs later).
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
    pub cpu_us_per_req: f64,
    /// Server CPU time / wall time over the measured run (1.0 = one core saturated).
    pub server_cpu_util: f64,
    pub rss_peak_mib: f64,
    pub rss_mean_mib: f64,
    pub ctx_switches_per_req: f64,
}

/// Names of the metrics compared between variants, with "lower is better".
pub const METRICS: &[(&str, bool)] = &[
    ("cpu_us_per_req", true),
    ("rps", false),
    ("p99_ms", true),
    ("mean_ms", true),
    ("bytes_per_req", true),
    ("rss_peak_mib", true),
];

impl Run {
    pub fn metric(&self, name: &str) -> f64 {
        match name {
            "cpu_us_per_req" => self.cpu_us_per_req,
            "rps" => self.rps,
            "p99_ms" => self.p99_ms,
            "mean_ms" => self.mean_ms,
            "bytes_per_req" => self.bytes_per_req,
            "rss_peak_mib" => self.rss_peak_mib,
            "p95_ms" => self.p95_ms,
            "mb_per_s" => self.mb_per_s,
            _ => f64::NAN,
        }
    }
}

fn expand(cmd: &str, host: &str, clear: u16, tls: u16) -> String {
    cmd.replace("{clear_port}", &clear.to_string())
        .replace("{tls_port}", &tls.to_string())
        .replace("{host}", host)
}

fn client(
    spec: &RunSpec,
    url: &str,
    duration: Duration,
    json: Option<&std::path::Path>,
) -> Result<Option<serde_json::Value>> {
    let exe = std::env::current_exe().context("cannot find the loadterm binary")?;
    let mut cmd = Command::new(exe);
    cmd.arg("load")
        .arg(format!("--{}", spec.proto))
        .arg("-k")
        .arg("-q");
    cmd.args(&spec.load_args)
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
    let out = cmd.output().context("cannot run loadterm load")?;
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

/// Wait until the server answers on `port`, and check that it is this process that listens.
fn wait_ready(server: &mut ServerProc, host: &str, port: u16) -> Result<()> {
    let t0 = Instant::now();
    loop {
        if let Some(why) = server.exited() {
            bail!("the server exited during start-up ({why})");
        }
        if std::net::TcpStream::connect((host, port)).is_ok() {
            break;
        }
        if t0.elapsed() > Duration::from_secs(15) {
            bail!("the server did not listen on {host}:{port} within 15 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if !server.owns_port(port) {
        bail!("{host}:{port} is answered by a process outside the server's process tree (port shared via SO_REUSEPORT?)");
    }
    Ok(())
}

pub fn run(spec: &RunSpec, variant: &str, round: usize) -> Result<Run> {
    let clear = procs::free_port(&spec.host, &[])?;
    let tls = procs::free_port(&spec.host, &[clear])?;
    let command = expand(&spec.command, &spec.host, clear, tls);
    let mut server = ServerProc::start(&command, &spec.server_cpus)?;
    let result = (|| {
        let (scheme, port) = if spec.proto == "h1" {
            ("http", clear)
        } else {
            ("https", tls)
        };
        wait_ready(&mut server, &spec.host, port)
            .with_context(|| format!("variant {variant}: `{command}`"))?;
        let host = if spec.host.contains(':') {
            format!("[{}]", spec.host)
        } else {
            spec.host.clone()
        };
        let url = format!("{scheme}://{host}:{port}{}", spec.url);
        // A real request through the same client proves this server answers this protocol.
        client(spec, &url, Duration::from_millis(200), None)
            .with_context(|| format!("variant {variant}: first request"))?;
        if !spec.warmup.is_zero() {
            client(spec, &url, spec.warmup, None)?;
        }
        let json_path = std::env::temp_dir().join(format!(
            "loadterm-ab-{}-{variant}-{round}.json",
            std::process::id()
        ));
        let stop = Arc::new(AtomicBool::new(false));
        let sampler = {
            let (stop, tree_root) = (stop.clone(), server.pid());
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
        };
        let before = server.sample();
        let t0 = Instant::now();
        let report = client(spec, &url, spec.duration, Some(&json_path))?.expect("json requested");
        let wall = t0.elapsed().as_secs_f64();
        let after = server.sample();
        stop.store(true, Ordering::Relaxed);
        let (peak, mean) = sampler.join().unwrap_or((0, 0));
        let _ = std::fs::remove_file(&json_path);
        let f = |path: &[&str]| {
            path.iter()
                .fold(&report, |v, k| &v[*k])
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
        let cpu_s = (after.cpu_ticks - before.cpu_ticks) as f64 / procs::clk_tck();
        let corrected = report["latency_corrected_us"]["p99"]
            .as_f64()
            .map(|v| v / 1e3);
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
            cpu_us_per_req: cpu_s * 1e6 / requests,
            server_cpu_util: cpu_s / wall,
            rss_peak_mib: peak as f64 / 1024.0,
            rss_mean_mib: mean as f64 / 1024.0,
            ctx_switches_per_req: (after.ctx_switches.saturating_sub(before.ctx_switches)) as f64
                / requests,
        })
    })();
    server.stop(Duration::from_secs(3));
    result
}

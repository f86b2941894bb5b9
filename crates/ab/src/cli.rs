//! `loadterm ab`: the command line, the cells of a comparison, and the report.

use crate::agent::client::AgentClient;
use crate::cell::{CellPlan, Regime, Servers};
use crate::compare::{signed_pct, Comparison};
use crate::contam;
use crate::fixture::Vars;
use crate::host::{Backends, ClientHost, ServerHost};
use crate::measure::{RunSpec, VariantServer};
use crate::metric::Metric;
use crate::procs;
use crate::report::{self, Cell, MatrixReport, Variant};
use crate::threshold::Threshold;
use anyhow::{bail, Context, Result};
use loadterm_plan::exit::{usage_error, Codes, Interrupted, Judgement};
use loadterm_plan::units::parse_duration;
use rand::SeedableRng;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// `loadterm load --send-grid` of every run (it only acts in open loop).
const SEND_GRID: &str = "250us";

#[derive(Debug, Clone, clap::Args)]
pub struct AbArgs {
    /// Baseline server command ({clear_port}, {tls_port}, {host} are replaced).
    #[arg(long = "a", value_name = "CMD")]
    a: Option<String>,
    /// Candidate server command.
    #[arg(long = "b", value_name = "CMD")]
    b: Option<String>,
    /// The baseline's name in reports.
    #[arg(long, default_value = "A")]
    a_name: String,
    /// The candidate's name in reports.
    #[arg(long, default_value = "B")]
    b_name: String,
    /// More variants, NAME=CMD (repeatable; the first is the baseline). Replaces --a/--b.
    #[arg(long = "variant", value_name = "NAME=CMD")]
    variants: Vec<String>,
    /// Request path and query.
    #[arg(long, default_value = "/?s=1k")]
    url: String,
    /// A different request for the second variant (known-effect checks).
    #[arg(long)]
    b_url: Option<String>,
    /// Protocols, comma-separated: h1 and h2c (clear port), h1s (HTTP/1.1 over TLS), h2 and h3
    /// (TLS port).
    #[arg(long, default_value = "h1", value_delimiter = ',')]
    proto: Vec<String>,
    /// Response sizes: replace `s=` in the URL, one matrix cell each (e.g. 1k,256k).
    #[arg(long, value_delimiter = ',')]
    size: Vec<String>,
    /// Measured rounds per cell (the warm-up round is extra). Default: rounds continue until
    /// the 95% interval of the change in CPU per request is within ±1/2 of --target-effect, or
    /// --max-time ends.
    #[arg(long)]
    rounds: Option<usize>,
    /// Measured time per run [default: 1s, or 5s with --fresh-process].
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Unmeasured load before measuring: each time a server starts.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    warmup: Duration,
    /// CPUs of the servers under test.
    #[arg(long, default_value = "0", value_delimiter = ',')]
    server_cpus: Vec<usize>,
    /// CPUs of the load client (and of ab itself).
    #[arg(long, default_value = "1", value_delimiter = ',')]
    client_cpus: Vec<usize>,
    /// How the servers' CPU and memory are read. Default: each server (and backend) in a
    /// cgroup ab makes below its own, cgroup v1 where the cpuacct controller is on a v1
    /// hierarchy, else v2; the /proc tree under the started process where none can be made.
    #[arg(long, value_enum)]
    accounting: Option<crate::cgroup::Accounting>,
    /// Address the servers listen on [default: 127.0.0.1, or the agent's address with
    /// --server-host].
    #[arg(long)]
    host: Option<String>,
    /// Run the variants and backends on another host, through `loadterm agent` there
    /// (https://HOST:PORT, or http://127.0.0.1:PORT for an agent on loopback without
    /// credentials). The load runs here, aimed at HOST; --server-cpus are that host's CPUs.
    #[arg(long, value_name = "URL", conflicts_with_all = ["a_endpoint", "b_endpoint"])]
    server_host: Option<String>,
    /// Run a shard of every measured window's load on another host too, through `loadterm
    /// agent` there (repeatable): with N client hosts, this machine and each of them take
    /// 1/(N+1) of the connections and of the rate (`loadterm load --shard`), all starting
    /// at the same instant, and their reports are merged. For a rate one machine cannot send.
    #[arg(
        long = "client-host",
        value_name = "URL",
        conflicts_with = "fresh_process"
    )]
    client_hosts: Vec<String>,
    /// The credentials for --server-host and --client-host (a directory made by `loadterm
    /// agent --init`, with ca.pem, ab.pem, ab.key and token).
    #[arg(long, value_name = "DIR")]
    agent_auth: Option<PathBuf>,
    /// Ports of every server and backend ab starts, FIRST-LAST (inclusive; two per server:
    /// {clear_port}, {tls_port}), e.g. to stay inside a firewall's opening.
    #[arg(long, value_name = "FIRST-LAST", default_value_t = procs::PortRange::DEFAULT)]
    ports: procs::PortRange,
    /// Client connections.
    #[arg(short = 'c', long, visible_alias = "clients", default_value_t = 50)]
    connections: usize,
    /// Client concurrent streams (pipelining depth on HTTP/1.1).
    #[arg(
        short = 'm',
        long,
        visible_alias = "max-concurrent-streams",
        default_value_t = 10
    )]
    streams: usize,
    /// Client threads (default: one per client CPU).
    #[arg(short = 't', long)]
    threads: Option<usize>,
    /// Closed loop: a saturating client, instead of the default fixed rate. CPU per request
    /// then includes batching, and is several times noisier.
    #[arg(long, conflicts_with_all = ["rate", "rate_fraction"])]
    closed_loop: bool,
    /// Open loop at this fixed rate (requests per second), instead of one chosen by a pilot.
    #[arg(long, conflicts_with = "rate_fraction")]
    rate: Option<f64>,
    /// The default regime: open loop at this fraction of the baseline's closed-loop
    /// throughput, found by a pilot, and lowered until the servers and clients have room.
    #[arg(long, value_name = "F", default_value_t = 0.5)]
    rate_fraction: f64,
    /// The comparison at each of these loads, fractions of the baseline's closed-loop
    /// throughput (e.g. 0.25,0.5,0.9): every level a cell of its own, with its pilot and its
    /// paired rounds, and the effect reported as a curve over the levels (a table, a chart in
    /// the HTML). A level without room for the servers or clients is kept, with a warning.
    #[arg(long, value_delimiter = ',', value_name = "F,F,…", conflicts_with_all = ["closed_loop", "rate", "rate_fraction", "a_endpoint"])]
    levels: Vec<f64>,
    /// A fresh server process for every run, instead of one per variant kept for the cell.
    #[arg(long)]
    fresh_process: bool,
    /// Measure the kept servers one after another (each in its own window) instead of all in
    /// the same window.
    #[arg(long)]
    alternate: bool,
    /// Kept servers are stopped and started again after this many measured rounds: each
    /// process carries a bias of its own (memory layout, allocator state) that only new
    /// processes average out.
    #[arg(long, value_name = "N", default_value_t = 4)]
    restart_every: usize,
    /// A process started once before the first round and stopped at the end, pinned to
    /// --backend-cpus, never measured (repeatable). Its ports are {backend_port} and
    /// {backend_tls_port} in its own command and in the variants' (the N-th backend's also
    /// {backend_port_N}, {backend_tls_port_N}).
    #[arg(long = "backend", value_name = "CMD")]
    backends: Vec<String>,
    /// CPUs of the backends (default: not pinned).
    #[arg(long, value_delimiter = ',')]
    backend_cpus: Vec<usize>,
    /// A config file template rendered for every run with the same substitutions as the
    /// commands; its path is {config}. FILE for every variant, NAME=FILE for one (repeatable).
    #[arg(long = "config-template", value_name = "[NAME=]FILE")]
    config_templates: Vec<String>,
    /// Compare two servers already running at these base URLs (scheme://host:port): no
    /// process control, no server-side metrics.
    #[arg(long, value_name = "URL", requires = "b_endpoint", conflicts_with_all = ["a", "b", "variants"])]
    a_endpoint: Option<String>,
    /// The candidate's base URL in endpoint mode.
    #[arg(long, value_name = "URL", requires = "a_endpoint")]
    b_endpoint: Option<String>,
    /// Run the baseline against itself with known extra costs: one variant per --burn-levels,
    /// the baseline command with `--burn PERCENT` appended (it must be a `loadterm serve`
    /// command); implies --aa.
    #[arg(long)]
    calibrate: bool,
    /// Injected extra costs of --calibrate, percent of the server's own CPU per request in
    /// the measured regime.
    #[arg(long, value_delimiter = ',', default_value = "1,3,10")]
    burn_levels: Vec<f64>,
    /// The change in CPU per request (req/s in endpoint mode) the run must resolve: rounds
    /// continue until the 95% interval is within ±1/2 of it (±1.5 points for 3%), so that a
    /// change of that size comes out significant in nearly every run.
    #[arg(long, value_name = "PCT", value_parser = parse_pct, default_value = "3%")]
    target_effect: f64,
    /// The metric whose interval --target-effect applies to, and which gets the headline's
    /// geometric-mean estimate [default: cpu_us_per_req, or rps in endpoint mode].
    #[arg(long, value_enum, value_name = "METRIC")]
    stop_on: Option<Metric>,
    /// Time budget of the whole comparison; rounds stop when it ends, interval resolved or
    /// not.
    #[arg(long, value_parser = parse_duration, default_value = "10m")]
    max_time: Duration,
    /// The variants are a patch series, in order (base, step 1, step 2, …; --variant): each
    /// step is also compared with the one before it, in the same paired rounds, and the
    /// rounds continue until every step's interval is as narrow as asked too.
    #[arg(long, conflicts_with_all = ["aa", "calibrate", "a_endpoint"])]
    series: bool,
    /// Measure the noise floor too: the baseline against a second copy of itself, in the
    /// same rounds.
    #[arg(long)]
    aa: bool,
    /// Where the CPU went: after every measured round, a profiled one (perf's cpu-clock
    /// samples of the server cores, with call stacks, kernel frames included); per function,
    /// self and inclusive µs per request with each variant's difference from the baseline and
    /// its 95% interval, a differential flame graph in the HTML report, folded stacks next to
    /// the JSON. Only unprofiled rounds feed the verdicts.
    #[arg(long, conflicts_with_all = ["fresh_process", "a_endpoint"])]
    profile: bool,
    /// Keep the first round (by default it is a warm-up, discarded).
    #[arg(long)]
    keep_first_round: bool,
    /// Seed of the per-round order (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// Markdown report.
    #[arg(long, value_name = "FILE")]
    markdown: Option<PathBuf>,
    /// JSON report: every run, every comparison, the environment.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// SVG chart of every cell.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// HTML report: the charts inline, the tables, the verdicts, the environment.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Results for a history tool (repeatable): bencher=FILE writes Bencher Metric Format
    /// JSON (`bencher run --adapter json --file FILE`), csv=FILE one flat CSV (timestamp,
    /// commit, proto, url, variant, metric, value, ci_low, ci_high, level): every variant's medians,
    /// every candidate's change against the baseline with its interval.
    #[arg(long = "export", value_name = "FORMAT=FILE")]
    exports: Vec<crate::export::Export>,
    /// The commit the results are about, in the CSV export [default: HEAD of the working
    /// directory's git repository, if any].
    #[arg(long, value_name = "REV")]
    commit: Option<String>,
    /// A change that fails the run, judged on its 95% interval (repeatable), e.g.
    /// 'cpu_us_per_req > +2%' or 'rps < -5%': exit status 1 when the whole interval of some
    /// variant's change lies beyond it, 0 when every interval lies within it, 3 when one
    /// straddles it or there is none (the run cannot tell).
    #[arg(long = "fail-if", value_name = "METRIC > PCT")]
    fail_if: Vec<Threshold>,
    /// Exit statuses of --fail-if's verdicts: plain (0, 1, 3) or git-bisect (0 good, 1 bad,
    /// 125 skip when the run cannot tell, 128 for a failure, which stops `git bisect run`).
    #[arg(long, value_name = "CODES", default_value = "plain", value_parser = parse_codes, requires = "fail_if")]
    exit_codes: Codes,
}

fn parse_codes(s: &str) -> Result<Codes, String> {
    s.parse()
}

/// "3%" or "3" → 0.03.
fn parse_pct(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("'{s}' is not a percentage"))?;
    if v > 0.0 && v < 100.0 {
        Ok(v / 100.0)
    } else {
        Err(format!("'{s}' must be between 0% and 100%"))
    }
}

fn with_size(url: &str, size: &str) -> String {
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    let mut parts: Vec<String> = query
        .split('&')
        .filter(|p| !p.is_empty() && !p.starts_with("s="))
        .map(str::to_owned)
        .collect();
    parts.insert(0, format!("s={size}"));
    format!("{path}?{}", parts.join("&"))
}

/// The variants: (name, what runs) in order, the baseline first.
fn variants(a: &AbArgs) -> Result<Vec<(String, VariantServer)>> {
    let templates = templates(&a.config_templates)?;
    let command = |name: &str, cmd: &str| VariantServer::Command {
        command: cmd.to_owned(),
        config: templates
            .iter()
            .find(|(n, _)| n.as_deref() == Some(name))
            .or_else(|| templates.iter().find(|(n, _)| n.is_none()))
            .map(|(_, t)| t.clone()),
    };
    let mut out: Vec<(String, VariantServer)> = Vec::new();
    if let (Some(ea), Some(eb)) = (&a.a_endpoint, &a.b_endpoint) {
        if !a.backends.is_empty() || !templates.is_empty() || a.calibrate {
            return Err(usage_error(
                "--backend, --config-template and --calibrate need servers started by ab, not endpoints",
            ));
        }
        out.push((a.a_name.clone(), VariantServer::Endpoint(ea.clone())));
        out.push((a.b_name.clone(), VariantServer::Endpoint(eb.clone())));
    } else if !a.variants.is_empty() {
        for v in &a.variants {
            let (n, c) = v
                .split_once('=')
                .ok_or_else(|| usage_error(format!("--variant '{v}': expected NAME=CMD")))?;
            out.push((n.to_owned(), command(n, c)));
        }
    } else {
        match (&a.a, &a.b) {
            (Some(ca), _) if a.calibrate => {
                out.push((a.a_name.clone(), command(&a.a_name, ca)));
                for level in &a.burn_levels {
                    if !(*level > 0.0 && *level <= 1000.0) {
                        return Err(usage_error(format!(
                            "--burn-levels: {level} is not a percentage in (0, 1000]"
                        )));
                    }
                    let name = format!("{}+burn{level}%", a.a_name);
                    let cmd = format!("{ca} --burn {level}");
                    out.push((name.clone(), command(&a.a_name, &cmd)));
                }
            }
            (Some(ca), Some(cb)) => {
                out.push((a.a_name.clone(), command(&a.a_name, ca)));
                out.push((a.b_name.clone(), command(&a.b_name, cb)));
            }
            (Some(_), None) => {
                return Err(usage_error(
                    "--b is missing: give the candidate's command (for an A/A run, the same command as --a; or --calibrate)",
                ))
            }
            _ => return Err(usage_error(
                "give --a CMD [--b CMD], several --variant NAME=CMD, or --a-endpoint/--b-endpoint",
            )),
        }
    }
    if out.len() < 2 {
        return Err(usage_error("at least two variants are needed"));
    }
    let mut names: Vec<&str> = out.iter().map(|v| v.0.as_str()).collect();
    names.sort_unstable();
    if names.windows(2).any(|w| w[0] == w[1]) {
        return Err(usage_error(
            "variant names must differ (use --a-name/--b-name)",
        ));
    }
    if let Some((Some(n), _)) = templates
        .iter()
        .find(|(n, _)| n.as_ref().is_some_and(|n| !out.iter().any(|v| v.0 == *n)))
    {
        return Err(usage_error(format!(
            "--config-template {n}=…: no variant is named {n}"
        )));
    }
    Ok(out)
}

/// `[NAME=]FILE` → (NAME, (file name, template text)).
#[allow(clippy::type_complexity)]
fn templates(specs: &[String]) -> Result<Vec<(Option<String>, (String, String))>> {
    specs
        .iter()
        .map(|spec| {
            let (name, file) = match spec.split_once('=') {
                Some((n, f)) => (Some(n.to_owned()), f),
                None => (None, spec.as_str()),
            };
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("--config-template: cannot read {file}"))?;
            let base = std::path::Path::new(file)
                .file_name()
                .and_then(|f| f.to_str())
                .unwrap_or("config")
                .to_owned();
            Ok((name, (base, text)))
        })
        .collect()
}

/// The comparison, reported; its verdict when --fail-if asked for one.
pub fn run(a: AbArgs) -> Result<Option<Judgement>> {
    let mut report = compare(&a)?;
    write_folded(&a, &mut report)?;
    print!("{}", report::terminal(&report));
    write_reports(&a, &report)?;
    if report.interrupted {
        return Err(Interrupted.into());
    }
    if report.cells.iter().all(|c| c.runs.is_empty()) {
        bail!("no run completed");
    }
    if a.fail_if.is_empty() {
        return Ok(None);
    }
    let (verdict, lines) = crate::threshold::judge_cells(&report.cells, &a.fail_if);
    for l in lines {
        println!("{l}");
    }
    Ok(verdict)
}

/// The comparison `a` asks for, measured: the library's one entry, for `run` and for the
/// drivers that ask it questions (the bisect). Progress goes to stderr; nothing is printed or
/// written.
pub(crate) fn compare(a: &AbArgs) -> Result<MatrixReport> {
    let t_start = std::time::Instant::now();
    let variants = checked_variants(a)?;
    let endpoint_mode = matches!(variants[0].1, VariantServer::Endpoint(_));
    procs::catch_interrupts()?;
    crate::cgroup::adopt_orphans();
    crate::fixture::remove_leftovers();
    let (server_host, host_report) = server_host(a)?;
    let client_hosts = client_hosts(a)?;
    let urls = client_hosts
        .iter()
        .filter(|h| !matches!(h, ClientHost::Here))
        .map(|h| format!("{h:?}"))
        .collect();
    let environment = crate::env::capture(host_report, urls);
    let mut bench =
        Bench::start(a, &variants, endpoint_mode, server_host, client_hosts).map_err(refusal)?;
    let cells = run_cells(a, &variants, &mut bench, t_start).map_err(refusal)?;
    drop(bench);
    let report = MatrixReport {
        interrupted: procs::interrupted(),
        environment,
        discarded_first_round: !a.keep_first_round,
        not_measured: endpoint_mode.then(|| {
            "endpoint mode: the servers are not started by ab, so server CPU per request, server CPU utilisation, RSS and context switches are not measured, and the contamination checks cover the client's cores only; latency, throughput and errors are, in interleaved paired rounds".to_owned()
        }),
        cells,
    };
    Ok(report)
}

impl AbArgs {
    /// The exit statuses the binary gives this command's result.
    pub fn exit_codes(&self) -> Codes {
        self.exit_codes
    }

    /// These options with `variants` (`NAME=CMD`, the baseline first) in place of the ones
    /// given, measured to ±`precision_pct` (or `rounds`, when the options fix them), without
    /// reports of their own: one question of a driver.
    pub(crate) fn question(
        &self,
        variants: Vec<String>,
        precision_pct: f64,
        rounds: Option<usize>,
    ) -> AbArgs {
        AbArgs {
            variants,
            target_effect: (precision_pct * 2.0 / 100.0).clamp(1e-4, 0.99),
            rounds,
            markdown: None,
            json: None,
            svg: None,
            html: None,
            exports: Vec::new(),
            fail_if: Vec::new(),
            ..self.clone()
        }
    }

    /// A driver names its own variants and writes its own reports: the options it cannot take.
    pub(crate) fn check_for_driver(&self, driver: &str) -> Result<()> {
        let taken = [
            ("--a", self.a.is_some()),
            ("--b", self.b.is_some()),
            ("--variant", !self.variants.is_empty()),
            ("--a-endpoint", self.a_endpoint.is_some()),
            ("--b-url", self.b_url.is_some()),
            ("--calibrate", self.calibrate),
            ("--aa", self.aa),
            ("--markdown", self.markdown.is_some()),
            ("--svg", self.svg.is_some()),
            ("--html", self.html.is_some()),
            ("--export", !self.exports.is_empty()),
            ("--fail-if", !self.fail_if.is_empty()),
        ];
        match taken.iter().find(|(_, given)| *given) {
            Some((flag, _)) => Err(usage_error(format!(
                "{driver}: {flag} is not an option of {driver} (it names the variants and writes its own report)"
            ))),
            None => Ok(()),
        }
    }

    /// The precision asked for (±points) and the fixed rounds, if any: a driver's first
    /// question.
    pub(crate) fn precision(&self) -> (f64, Option<usize>) {
        (self.target_effect * 100.0 / 2.0, self.rounds)
    }

    /// The metric the rounds are measured to (--stop-on; servers started by ab always have
    /// their CPU measured).
    pub(crate) fn stop_metric(&self) -> Metric {
        self.stop_on.unwrap_or(Metric::CpuUsPerReq)
    }

    /// --json: where a driver writes its report.
    pub(crate) fn json_path(&self) -> Option<&std::path::Path> {
        self.json.as_deref()
    }
}

/// Where the servers run: here, or on the agent's host (connected, its clock measured).
fn server_host(a: &AbArgs) -> Result<(Arc<ServerHost>, Option<crate::env::ServerHostReport>)> {
    let Some(url) = &a.server_host else {
        return Ok((Arc::new(ServerHost::here()), None));
    };
    let agent = AgentClient::connect(url, a.agent_auth.as_deref())?;
    let clock = absorbable_clock(&agent, window_duration(a))?;
    eprintln!(
        "ab: servers on {} ({}, {} CPUs) through the agent at {url}; its clock {:+.3} ms from this one's, round trip {:.3} ms",
        agent.facts.hostname,
        agent.facts.cpu_model,
        agent.facts.cpus,
        clock.offset_s * 1e3,
        clock.rtt_s * 1e3
    );
    let report = crate::env::ServerHostReport {
        agent: url.clone(),
        facts: agent.facts.clone(),
        clock_offset_ms: clock.offset_s * 1e3,
        round_trip_ms: clock.rtt_s * 1e3,
    };
    Ok((Arc::new(ServerHost::Agent(agent)), Some(report)))
}

/// The agent's clock offset, refused when the round trip leaves it too uncertain for a
/// window's edges (every round would be run again).
fn absorbable_clock(
    agent: &AgentClient,
    duration: Duration,
) -> Result<crate::agent::client::ClockOffset> {
    let clock = agent.clock()?;
    let slack = crate::measure::window_slack_s(duration);
    if clock.rtt_s / 2.0 > slack {
        return Err(usage_error(format!(
            "refused: the round trip to the agent at {} is {:.1} ms, so its clock's offset is known to ±{:.1} ms only, more than the {:.1} ms a window's edges can absorb (1% of --duration)",
            agent.url(),
            clock.rtt_s * 1e3,
            clock.rtt_s * 1e3 / 2.0,
            slack * 1e3
        )));
    }
    Ok(clock)
}

/// The measured time of each run: --duration, or its default.
fn window_duration(a: &AbArgs) -> Duration {
    a.duration.unwrap_or(Duration::from_secs(
        if a.fresh_process || a.a_endpoint.is_some() {
            5
        } else {
            1
        },
    ))
}

/// Where the load of a measured window runs: here, and on every --client-host's agent.
fn client_hosts(a: &AbArgs) -> Result<Arc<Vec<ClientHost>>> {
    let mut hosts = vec![ClientHost::Here];
    for url in &a.client_hosts {
        let agent = AgentClient::connect(url, a.agent_auth.as_deref())?;
        let clock = absorbable_clock(&agent, window_duration(a))?;
        eprintln!(
            "ab: a shard of the load on {} ({} CPUs) through the agent at {url}; its clock {:+.3} ms from this one's, round trip {:.3} ms",
            agent.facts.hostname,
            agent.facts.cpus,
            clock.offset_s * 1e3,
            clock.rtt_s * 1e3
        );
        hosts.push(ClientHost::Agent(Box::new(agent)));
    }
    Ok(Arc::new(hosts))
}

/// The address the servers listen on and the clients aim at.
fn listen_host(a: &AbArgs) -> Result<String> {
    match (&a.host, &a.server_host) {
        (Some(h), _) => Ok(h.clone()),
        (None, None) => Ok("127.0.0.1".into()),
        (None, Some(url)) => {
            let authority = url.split("://").nth(1).unwrap_or(url).trim_end_matches('/');
            match authority.rsplit_once(':') {
                Some((h, _)) => Ok(h.trim_matches(['[', ']']).to_owned()),
                None => bail!("--server-host {url}: no port"),
            }
        }
    }
}

/// Figures that cannot be the server's end the comparison like a command line that cannot run
/// (exit status 2): there is nothing to report.
fn refusal(e: anyhow::Error) -> anyhow::Error {
    if e.is::<crate::contam::Implausible>() {
        usage_error(format!("refused: {e:#}"))
    } else {
        e
    }
}

/// The variants once the options are checked, with the A/A twin (a second copy of the
/// baseline) last when --aa or --calibrate asks for one.
fn checked_variants(a: &AbArgs) -> Result<Vec<(String, VariantServer)>> {
    let mut variants = variants(a)?;
    validate(a)?;
    if a.aa || a.calibrate {
        let (name, target) = variants[0].clone();
        variants.push((format!("{name}'"), target));
    }
    Ok(variants)
}

/// What every cell of the comparison shares: the run its cells start from, how they are
/// measured, and the state carried from cell to cell (backends, the order's random generator).
struct Bench {
    /// Every run's spec but the protocol (set per cell) and the variant's own parts.
    base: RunSpec,
    regime: Regime,
    headline: Metric,
    /// A fresh server process for every run (always in endpoint mode: none is started).
    fresh: bool,
    backends: Backends,
    rng: rand::rngs::StdRng,
}

impl Bench {
    /// Read the machine's settings, start the backends and pin ab itself: before any cell.
    fn start(
        a: &AbArgs,
        variants: &[(String, VariantServer)],
        endpoint_mode: bool,
        server_host: Arc<ServerHost>,
        client_hosts: Arc<Vec<ClientHost>>,
    ) -> Result<Bench> {
        let host = listen_host(a)?;
        let reference = server_host.settings(a.server_cpus.first().copied().unwrap_or(0))?;
        // In endpoint mode the server is elsewhere: only the client's cores are ours to
        // check; on an agent's host, its CPUs share no core with the clients'.
        let smt = if endpoint_mode || server_host.is_remote() {
            Vec::new()
        } else {
            contam::smt_shared(&a.server_cpus, &a.client_cpus, contam::sysfs_siblings)
        };
        let rng = rand::rngs::StdRng::seed_from_u64(a.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        }));
        let mut vars = Vars::default();
        vars.set("host", &host);
        let backends = Backends::start(
            &server_host,
            &a.backends,
            &host,
            a.ports,
            &a.backend_cpus,
            a.accounting,
            &mut vars,
        )?;
        if !endpoint_mode {
            // ab wakes up at every window's edge: on the client's cores, not the server's
            // (pinned once the backends, which it must not pin, are started).
            procs::pin_self(&a.client_cpus)?;
        }
        let threads = a.threads.unwrap_or(a.client_cpus.len().max(1));
        let load_args = [
            "-c".to_owned(),
            a.connections.to_string(),
            "-m".to_owned(),
            a.streams.to_string(),
            "-t".to_owned(),
            threads.to_string(),
            // Open loop only: sends share wake-ups within 250 µs (under the pilot's 1 ms
            // lateness limit), which cut the client's CPU per request by 38-48% at 10 000 to
            // 40 000 req/s and so leaves it room at higher rates (docs/AB.md).
            "--send-grid".to_owned(),
            SEND_GRID.to_owned(),
        ];
        let fresh = a.fresh_process || endpoint_mode;
        let duration = window_duration(a);
        let base = RunSpec {
            target: variants[0].1.clone(),
            server_host,
            client_hosts,
            proto: String::new(),
            host,
            ports: a.ports,
            url: a.url.clone(),
            server_cpus: a.server_cpus.clone(),
            client_cpus: a.client_cpus.clone(),
            warmup: a.warmup,
            duration,
            load_args: load_args.to_vec(),
            vars,
            reference,
            smt,
            late_limit_pct: None,
            accounting: a.accounting,
        };
        Ok(Bench {
            base,
            regime: regime(a, endpoint_mode),
            headline: match a.stop_on {
                Some(m) => m,
                None if endpoint_mode => Metric::Rps,
                None => Metric::CpuUsPerReq,
            },
            fresh,
            backends,
            rng,
        })
    }
}

/// The measuring regime: a saturating client, a fixed rate, or (the default) a fraction of the
/// baseline's throughput.
fn regime(a: &AbArgs, endpoint_mode: bool) -> Regime {
    match (a.closed_loop, a.rate) {
        (true, _) => Regime::Closed,
        (_, Some(r)) => Regime::Rate(r),
        // The default regime needs the server's CPU to check its rate.
        _ if endpoint_mode => Regime::Closed,
        _ => Regime::RateFraction(a.rate_fraction),
    }
}

/// Every cell of the matrix (protocols × sizes × levels) measured in turn, until an interrupt.
fn run_cells(
    a: &AbArgs,
    variants: &[(String, VariantServer)],
    bench: &mut Bench,
    t_start: std::time::Instant,
) -> Result<Vec<Cell>> {
    let sizes: Vec<Option<&String>> = if a.size.is_empty() {
        vec![None]
    } else {
        a.size.iter().map(Some).collect()
    };
    let levels: Vec<Option<f64>> = if a.levels.is_empty() {
        vec![None]
    } else {
        a.levels.iter().copied().map(Some).collect()
    };
    let cell_count = a.proto.len() * sizes.len() * levels.len();
    let mut cells = Vec::new();
    for proto in &a.proto {
        for size in &sizes {
            // Every level of a request a fraction of the first level's closed-loop throughput.
            let mut closed = Vec::new();
            for level in &levels {
                if procs::interrupted() {
                    return Ok(cells);
                }
                // What is left of the budget, shared by the cells still to run.
                let left = a.max_time.saturating_sub(t_start.elapsed());
                let cells_left = (cell_count - cells.len()) as u32;
                let deadline = std::time::Instant::now() + left / cells_left.max(1);
                match run_cell(
                    a,
                    variants,
                    bench,
                    proto,
                    *size,
                    level.map(|l| (l, &closed[..])),
                    deadline,
                )? {
                    Some(cell) => {
                        if closed.is_empty() {
                            closed.clone_from(&cell.closed_pilot);
                        }
                        cells.push(cell);
                    }
                    None => return Ok(cells),
                }
            }
        }
    }
    Ok(cells)
}

/// One cell measured: its servers started (unless fresh per run), its rounds run until
/// `deadline`; `None` when an interrupt cut it short.
fn run_cell(
    a: &AbArgs,
    variants: &[(String, VariantServer)],
    bench: &mut Bench,
    proto: &str,
    size: Option<&String>,
    // The level (`--levels`) and the closed-loop pilot of the request's first level, if run.
    level: Option<(f64, &[crate::measure::Run])>,
    deadline: std::time::Instant,
) -> Result<Option<Cell>> {
    let t_cell = std::time::Instant::now();
    let template = RunSpec {
        proto: proto.to_owned(),
        ..bench.base.clone()
    };
    let (vs, specs) = cell_variants(a, variants, size, &template);
    let names: Vec<String> = vs.iter().map(|v| v.name.clone()).collect();
    let base = names[0].clone();
    let tag = match level {
        Some((l, _)) => format!("[{proto} {} level {l}]", vs[0].url),
        None => format!("[{proto} {}]", vs[0].url),
    };
    let mut servers = if bench.fresh {
        Servers::Fresh
    } else {
        eprintln!("{tag} starting {} servers", names.len());
        Servers::kept(&specs, &names)?
    };
    let cell = CellPlan {
        tag,
        names,
        specs,
        twin: a.aa || a.calibrate,
        regime: level.map_or(bench.regime, |(l, _)| Regime::Level(l)),
        rounds: a.rounds,
        // ±1/2 of the target: a change of the target's size then clears zero by about two
        // standard errors (±2/3 would leave one run in seven not significant).
        precision_pct: a.target_effect * 100.0 / 2.0,
        warmup_rounds: usize::from(!a.keep_first_round),
        deadline: Some(deadline),
        restart_every: a.restart_every,
        headline: bench.headline,
        together: !a.alternate,
        series: a.series,
        profile: a.profile,
        closed: level.map_or_else(Vec::new, |(_, c)| c.to_vec()),
        backends: &mut bench.backends,
        rng: &mut bench.rng,
    }
    .run(&mut servers, vs);
    drop(servers);
    let mut cell = match cell {
        Err(_) if procs::interrupted() => return Ok(None),
        c => c?,
    };
    if a.calibrate {
        let notes = calibration_notes(&cell.comparisons, &base, &a.burn_levels);
        cell.notes.extend(notes);
    }
    if a.series {
        cell.notes.push(format!(
            "a series of {} variants ({} steps): {} rounds in {:.0} s, every variant in every round",
            cell.variants.len(),
            cell.variants.len() - 1,
            cell.rounds,
            t_cell.elapsed().as_secs_f64()
        ));
    }
    Ok(Some(cell))
}

/// Each profiled cell's folded stacks, one file per variant next to the JSON report
/// (`ab.json` → `ab.h1-s_1k.B.folded`), in flamegraph.pl's format: for speedscope,
/// flamegraph.pl, inferno. Their names go into the report.
fn write_folded(a: &AbArgs, report: &mut MatrixReport) -> Result<()> {
    let Some(json) = &a.json else {
        return Ok(());
    };
    let stem = json.with_extension("");
    let safe = |t: &str| t.replace(|c: char| !c.is_ascii_alphanumeric(), "_");
    for c in &mut report.cells {
        let (proto, url) = (c.proto.clone(), c.url.clone());
        let Some(p) = &mut c.profile else { continue };
        for (name, stacks) in &p.folded {
            let path = PathBuf::from(format!(
                "{}.{proto}-{}.{}.folded",
                stem.display(),
                safe(&url),
                safe(name)
            ));
            std::fs::write(&path, crate::profile::CellProfile::folded_text(stacks))
                .with_context(|| format!("cannot write {}", path.display()))?;
            p.folded_files.push(path.display().to_string());
        }
    }
    Ok(())
}

/// The report in the files asked for (Markdown, JSON, SVG, HTML).
fn write_reports(a: &AbArgs, report: &MatrixReport) -> Result<()> {
    let write = |path: &Option<PathBuf>, text: &dyn Fn() -> Result<String>| -> Result<()> {
        if let Some(p) = path {
            std::fs::write(p, text()?).with_context(|| format!("cannot write {}", p.display()))?;
        }
        Ok(())
    };
    write(&a.markdown, &|| Ok(report::markdown(report)))?;
    write(
        &a.json,
        &|| Ok(serde_json::to_string_pretty(report)? + "\n"),
    )?;
    write(&a.svg, &|| crate::plot::report_svg(report))?;
    write(&a.html, &|| report::html(report, crate::plot::cell_svg))?;
    if a.exports.is_empty() {
        return Ok(());
    }
    let commit = a.commit.clone().unwrap_or_else(crate::export::head_commit);
    crate::export::write(&a.exports, report, &commit)
}

/// A cell's variants as reported, and what each run of them needs (`template` with the
/// variant's own target, request and `{variant}`).
fn cell_variants(
    a: &AbArgs,
    variants: &[(String, VariantServer)],
    size: Option<&String>,
    template: &RunSpec,
) -> (Vec<Variant>, Vec<RunSpec>) {
    variants
        .iter()
        .enumerate()
        .map(|(i, (name, target))| {
            let url = match (i, &a.b_url) {
                (1, Some(b)) => b,
                _ => &a.url,
            };
            let url = size.map_or(url.to_owned(), |s| with_size(url, s));
            let mut spec = template.clone();
            spec.target = target.clone();
            spec.url = url.clone();
            spec.vars.set("variant", name);
            let command = match target {
                VariantServer::Command { command, .. } => command.clone(),
                VariantServer::Endpoint(u) => format!("(endpoint) {u}"),
            };
            let variant = Variant {
                name: name.clone(),
                command,
                url,
                accounting: None,
            };
            (variant, spec)
        })
        .unzip()
}

/// Options that cannot go together or are out of range (clap checks the rest).
fn validate(a: &AbArgs) -> Result<()> {
    if a.rounds.is_some_and(|r| r < 2) {
        return Err(usage_error("--rounds must be at least 2"));
    }
    if !(a.rate_fraction > 0.0 && a.rate_fraction <= 1.0) {
        return Err(usage_error("--rate-fraction must be in (0, 1]"));
    }
    if a.levels.iter().any(|f| !(*f > 0.0 && *f <= 1.0)) {
        return Err(usage_error("--levels: each level must be in (0, 1]"));
    }
    if a.levels
        .iter()
        .enumerate()
        .any(|(i, f)| a.levels[..i].contains(f))
    {
        return Err(usage_error("--levels: a level is given twice"));
    }
    if a.rate.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
        return Err(usage_error(
            "--rate must be a positive number of requests per second",
        ));
    }
    if a.series && a.variants.len() < 3 {
        return Err(usage_error(
            "--series needs the base and at least two steps: --variant NAME=CMD, in order",
        ));
    }
    if a.restart_every == 0 {
        return Err(usage_error("--restart-every must be at least 1"));
    }
    if a.a_endpoint.is_some() && a.stop_on.is_some_and(Metric::server_side) {
        return Err(usage_error(
            "--stop-on: endpoint mode measures nothing on the server side",
        ));
    }
    if a.max_time.is_zero() {
        return Err(usage_error("--max-time must be more than 0"));
    }
    for p in &a.proto {
        if !matches!(p.as_str(), "h1" | "h1s" | "h2" | "h2c" | "h3") {
            return Err(usage_error(format!(
                "unknown protocol '{p}' (h1, h1s, h2, h2c, h3)"
            )));
        }
    }
    Ok(())
}

/// What --calibrate found, one sentence per injected level: the measured change with its
/// interval, whether it was detected, and whether the interval holds the injected value.
fn calibration_notes(comparisons: &[Comparison], base: &str, levels: &[f64]) -> Vec<String> {
    levels
        .iter()
        .filter_map(|level| {
            let name = format!("{base}+burn{level}%");
            let c = comparisons
                .iter()
                .find(|c| c.variant == name && c.metric == Metric::CpuUsPerReq)?;
            let (lo, hi) = c.ci_pct?;
            Some(format!(
                "calibration: injected +{level}% CPU per request, measured {} (95% CI {} to {}), {}, {}",
                signed_pct(c.change_pct),
                signed_pct(lo),
                signed_pct(hi),
                if c.significant {
                    "detected"
                } else {
                    "not detected"
                },
                if lo <= *level && *level <= hi {
                    "the interval holds the injected value"
                } else {
                    "the interval misses the injected value"
                }
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &[&str]) -> AbArgs {
        #[derive(clap::Parser)]
        struct Line {
            #[command(flatten)]
            ab: AbArgs,
        }
        <Line as clap::Parser>::try_parse_from(std::iter::once("ab").chain(line.iter().copied()))
            .unwrap()
            .ab
    }

    #[test]
    fn config_templates_by_variant_name() {
        let dir = std::env::temp_dir().join(format!("loadterm-ab-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (all, one) = (dir.join("all.conf"), dir.join("one.conf"));
        std::fs::write(&all, "every {variant}").unwrap();
        std::fs::write(&one, "only B").unwrap();
        let (all, one) = (all.to_str().unwrap(), one.to_str().unwrap());
        let v = variants(&args(&[
            "--a",
            "x",
            "--b",
            "y",
            "--config-template",
            all,
            "--config-template",
            &format!("B={one}"),
        ]))
        .unwrap();
        let config = |i: usize| match &v[i].1 {
            VariantServer::Command { config, .. } => config.clone().unwrap(),
            VariantServer::Endpoint(_) => panic!("a command"),
        };
        assert_eq!(
            config(0),
            ("all.conf".to_owned(), "every {variant}".to_owned())
        );
        assert_eq!(config(1), ("one.conf".to_owned(), "only B".to_owned()));
        let err = variants(&args(&[
            "--a",
            "x",
            "--b",
            "x",
            "--config-template",
            &format!("C={one}"),
        ]));
        assert!(err
            .unwrap_err()
            .to_string()
            .contains("no variant is named C"));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn calibrate_appends_burn_levels_to_the_baseline() {
        let v = variants(&args(&[
            "--a",
            "serve",
            "--calibrate",
            "--burn-levels",
            "2,5",
        ]))
        .unwrap();
        let names: Vec<&str> = v.iter().map(|v| v.0.as_str()).collect();
        assert_eq!(names, ["A", "A+burn2%", "A+burn5%"]);
        match &v[2].1 {
            VariantServer::Command { command, .. } => assert_eq!(command, "serve --burn 5"),
            VariantServer::Endpoint(_) => panic!("a command"),
        }
    }

    /// `--ports FIRST-LAST` keeps every listener ab starts in a range; a bad range is a usage
    /// error (clap's: exit 2, the reason given).
    #[test]
    fn ports_range_is_parsed_and_checked() {
        use procs::PortRange;
        assert_eq!(args(&["--a", "x"]).ports, PortRange::DEFAULT);
        assert_eq!(
            args(&["--a", "x", "--ports", "20000-20100"]).ports,
            PortRange {
                first: 20000,
                last: 20100
            }
        );
        #[derive(clap::Parser, Debug)]
        struct Line {
            #[command(flatten)]
            ab: AbArgs,
        }
        for (bad, why) in [
            ("20000", "not a range"),
            ("20100-20000", "at least two ports"),
            ("20000-20000", "at least two ports"),
            ("0-10", "'0' is not a port"),
            ("20000-70000", "'70000' is not a port"),
            ("a-b", "'a' is not a port"),
        ] {
            let e = <Line as clap::Parser>::try_parse_from(["ab", "--a", "x", "--ports", bad])
                .unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad}");
            assert!(e.to_string().contains(why), "{bad}: {e}");
        }
    }

    /// Free ports come from the range only, each port of it tried before giving up.
    #[test]
    fn free_ports_stay_in_the_range() {
        // Two neighbours, the first of them held: the second is the only answer.
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let first = held.local_addr().unwrap().port();
        let Some(last) = first.checked_add(1) else {
            return;
        };
        let range = procs::PortRange { first, last };
        match procs::free_port("127.0.0.1", range, &[]) {
            Ok(port) => assert_eq!(port, last),
            // The neighbour is someone else's right now: then nothing in the range is free.
            Err(e) => assert!(e.to_string().contains("--ports"), "{e}"),
        }
        let e = procs::free_port("127.0.0.1", range, &[last]).unwrap_err();
        assert!(
            e.to_string().contains(&format!("no free port in {range}")),
            "{e}"
        );
    }

    #[test]
    fn size_replacement() {
        assert_eq!(with_size("/?s=1k&t=5", "256k"), "/?s=256k&t=5");
        assert_eq!(with_size("/", "1k"), "/?s=1k");
        assert_eq!(with_size("/x?k=1", "2k"), "/x?s=2k&k=1");
    }
}

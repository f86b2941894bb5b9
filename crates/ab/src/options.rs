//! `loadterm ab`'s options, as clap reads them: what the command line asks for, read by the
//! checks, the matrix and the drivers (the bisect).

use crate::metric::Metric;
use crate::procs;
use crate::protocol::Protocol;
use crate::threshold::Threshold;
use anyhow::Result;
use loadterm_plan::exit::{usage_error, Codes};
use loadterm_plan::units::parse_duration;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, clap::Args)]
pub struct AbArgs {
    /// Baseline server command ({clear_port}, {tls_port}, {host} are replaced).
    #[arg(long = "a", value_name = "CMD")]
    pub(crate) a: Option<String>,
    /// Candidate server command.
    #[arg(long = "b", value_name = "CMD")]
    pub(crate) b: Option<String>,
    /// The baseline's name in reports.
    #[arg(long, default_value = "A")]
    pub(crate) a_name: String,
    /// The candidate's name in reports.
    #[arg(long, default_value = "B")]
    pub(crate) b_name: String,
    /// More variants, NAME=CMD (repeatable; the first is the baseline). Replaces --a/--b.
    #[arg(long = "variant", value_name = "NAME=CMD")]
    pub(crate) variants: Vec<String>,
    /// Request path and query.
    #[arg(long, default_value = "/?s=1k")]
    pub(crate) url: String,
    /// A different request for the second variant (known-effect checks).
    #[arg(long)]
    pub(crate) b_url: Option<String>,
    /// Protocols, comma-separated: a cell of the matrix each (with each --size).
    #[arg(long, value_enum, default_values_t = [Protocol::default()], value_delimiter = ',')]
    pub(crate) proto: Vec<Protocol>,
    /// Response sizes: replace `s=` in the URL, one matrix cell each (e.g. 1k,256k).
    #[arg(long, value_delimiter = ',')]
    pub(crate) size: Vec<String>,
    /// Measured rounds per cell (the warm-up round is extra). Default: rounds continue until
    /// the 95% interval of the change in CPU per request is within ±1/2 of --target-effect, or
    /// --max-time ends.
    #[arg(long)]
    pub(crate) rounds: Option<usize>,
    /// Measured time per run [default: 1s, or 5s with --fresh-process].
    #[arg(long, value_parser = parse_duration)]
    pub(crate) duration: Option<Duration>,
    /// Unmeasured load before measuring: each time a server starts.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub(crate) warmup: Duration,
    /// CPUs of the servers under test.
    #[arg(long, default_value = "0", value_delimiter = ',')]
    pub(crate) server_cpus: Vec<usize>,
    /// CPUs of the load client (and of ab itself).
    #[arg(long, default_value = "1", value_delimiter = ',')]
    pub(crate) client_cpus: Vec<usize>,
    /// How the servers' CPU and memory are read. Default: each server (and backend) in a
    /// cgroup ab makes below its own, cgroup v1 where the cpuacct controller is on a v1
    /// hierarchy, else v2; the /proc tree under the started process where none can be made.
    #[arg(long, value_enum)]
    pub(crate) accounting: Option<crate::cgroup::Accounting>,
    /// Address the servers listen on [default: 127.0.0.1, or the agent's address with
    /// --server-host].
    #[arg(long)]
    pub(crate) host: Option<String>,
    /// Run the variants and backends on another host, through `loadterm agent` there
    /// (https://HOST:PORT, or http://127.0.0.1:PORT for an agent on loopback without
    /// credentials). The load runs here, aimed at HOST; --server-cpus are that host's CPUs.
    #[arg(long, value_name = "URL", conflicts_with_all = ["a_endpoint", "b_endpoint"])]
    pub(crate) server_host: Option<String>,
    /// Run a shard of every measured window's load on another host too, through `loadterm
    /// agent` there (repeatable): with N client hosts, this machine and each of them take
    /// 1/(N+1) of the connections and of the rate (`loadterm load --shard`), all starting
    /// at the same instant, and their reports are merged. For a rate one machine cannot send.
    #[arg(
        long = "client-host",
        value_name = "URL",
        conflicts_with = "fresh_process"
    )]
    pub(crate) client_hosts: Vec<String>,
    /// The credentials for --server-host and --client-host (a directory made by `loadterm
    /// agent --init`, with ca.pem, ab.pem, ab.key and token).
    #[arg(long, value_name = "DIR")]
    pub(crate) agent_auth: Option<PathBuf>,
    /// Ports of every server and backend ab starts, FIRST-LAST (inclusive; two per server:
    /// {clear_port}, {tls_port}), e.g. to stay inside a firewall's opening.
    #[arg(long, value_name = "FIRST-LAST", default_value_t = procs::PortRange::DEFAULT)]
    pub(crate) ports: procs::PortRange,
    /// Client connections.
    #[arg(short = 'c', long, visible_alias = "clients", default_value_t = 50)]
    pub(crate) connections: usize,
    /// Client concurrent streams (pipelining depth on HTTP/1.1).
    #[arg(
        short = 'm',
        long,
        visible_alias = "max-concurrent-streams",
        default_value_t = 10
    )]
    pub(crate) streams: usize,
    /// Client threads (default: one per client CPU).
    #[arg(short = 't', long)]
    pub(crate) threads: Option<usize>,
    /// Closed loop: a saturating client, instead of the default fixed rate. CPU per request
    /// then includes batching, and is several times noisier.
    #[arg(long, conflicts_with_all = ["rate", "rate_fraction"])]
    pub(crate) closed_loop: bool,
    /// Open loop at this fixed rate (requests per second), instead of one chosen by a pilot.
    #[arg(long, conflicts_with = "rate_fraction")]
    pub(crate) rate: Option<f64>,
    /// The default regime: open loop at this fraction of the baseline's closed-loop
    /// throughput, found by a pilot, and lowered until the servers and clients have room.
    #[arg(long, value_name = "F", default_value_t = 0.5)]
    pub(crate) rate_fraction: f64,
    /// The comparison at each of these loads, fractions of the baseline's closed-loop
    /// throughput (e.g. 0.25,0.5,0.9): every level a cell of its own, with its paired rounds,
    /// all fractions of the throughput the first level's pilot measured, and the effect
    /// reported as a curve over the levels (a table, a chart in the HTML). A level without
    /// room for the servers or clients is kept, with a warning.
    #[arg(long, value_delimiter = ',', value_name = "F,F,…", conflicts_with_all = ["closed_loop", "rate", "rate_fraction", "a_endpoint"])]
    pub(crate) levels: Vec<f64>,
    /// A fresh server process for every run, instead of one per variant kept for the cell.
    #[arg(long)]
    pub(crate) fresh_process: bool,
    /// Measure the kept servers one after another (each in its own window) instead of all in
    /// the same window.
    #[arg(long)]
    pub(crate) alternate: bool,
    /// Kept servers are stopped and started again after this many measured rounds: each
    /// process carries a bias of its own (memory layout, allocator state) that only new
    /// processes average out.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub(crate) restart_every: usize,
    /// At most this many contaminated rounds of a cell run again; later ones are kept, with
    /// their flags in the report [default: as many as the rounds kept, plus 5]. 0 keeps every
    /// round: on a machine known to be noisy, a run time fixed by --rounds instead of cleaner
    /// rounds. (A window in which no request completed is always run again, up to the default.)
    #[arg(long, value_name = "N")]
    pub(crate) max_repeats: Option<usize>,
    /// A process started once before the first round and stopped at the end, pinned to
    /// --backend-cpus, never measured (repeatable). Its ports are {backend_port} and
    /// {backend_tls_port} in its own command and in the variants' (the N-th backend's also
    /// {backend_port_N}, {backend_tls_port_N}).
    #[arg(long = "backend", value_name = "CMD")]
    pub(crate) backends: Vec<String>,
    /// CPUs of the backends (default: not pinned).
    #[arg(long, value_delimiter = ',')]
    pub(crate) backend_cpus: Vec<usize>,
    /// A config file template rendered for every run with the same substitutions as the
    /// commands; its path is {config}. FILE for every variant, NAME=FILE for one (repeatable).
    #[arg(long = "config-template", value_name = "[NAME=]FILE")]
    pub(crate) config_templates: Vec<String>,
    /// Compare two servers already running at these base URLs (scheme://host:port): no
    /// process control, no server-side metrics.
    #[arg(long, value_name = "URL", requires = "b_endpoint", conflicts_with_all = ["a", "b", "variants"])]
    pub(crate) a_endpoint: Option<String>,
    /// The candidate's base URL in endpoint mode.
    #[arg(long, value_name = "URL", requires = "a_endpoint")]
    pub(crate) b_endpoint: Option<String>,
    /// Run the baseline against itself with known extra costs: one variant per --burn-levels,
    /// the baseline command with `--burn PERCENT` appended (it must be a `loadterm serve`
    /// command); implies --aa.
    #[arg(long)]
    pub(crate) calibrate: bool,
    /// Injected extra costs of --calibrate, percent of the server's own CPU per request in
    /// the measured regime.
    #[arg(long, value_delimiter = ',', default_value = "1,3,10")]
    pub(crate) burn_levels: Vec<f64>,
    /// The change in CPU per request (req/s in endpoint mode) the run must resolve: rounds
    /// continue until the 95% interval is within ±1/2 of it (±1.5 points for 3%), so that a
    /// change of that size comes out significant in nearly every run.
    #[arg(long, value_name = "PCT", value_parser = parse_pct, default_value = "3%")]
    pub(crate) target_effect: f64,
    /// The metric whose interval --target-effect applies to, and which gets the headline's
    /// geometric-mean estimate [default: cpu_us_per_req, or rps in endpoint mode].
    #[arg(long, value_enum, value_name = "METRIC")]
    pub(crate) stop_on: Option<Metric>,
    /// Time budget of the whole comparison; rounds stop when it ends, interval resolved or
    /// not.
    #[arg(long, value_parser = parse_duration, default_value = "10m")]
    pub(crate) max_time: Duration,
    /// The variants are a patch series, in order (base, step 1, step 2, …; --variant): each
    /// step is also compared with the one before it, in the same paired rounds, and the
    /// rounds continue until every step's interval is as narrow as asked too.
    #[arg(long, conflicts_with_all = ["aa", "calibrate", "a_endpoint"])]
    pub(crate) series: bool,
    /// Measure the noise floor too: the baseline against a second copy of itself, in the
    /// same rounds.
    #[arg(long)]
    pub(crate) aa: bool,
    /// Where the CPU went: after every measured round, a profiled one (perf's cpu-clock
    /// samples of the server cores, with call stacks, kernel frames included); per function,
    /// self and inclusive µs per request with each variant's difference from the baseline and
    /// its 95% interval, a differential flame graph in the HTML report, folded stacks next to
    /// the JSON. Only unprofiled rounds feed the verdicts.
    #[arg(long, conflicts_with_all = ["fresh_process", "a_endpoint"])]
    pub(crate) profile: bool,
    /// Keep the first round (by default it is a warm-up, discarded).
    #[arg(long)]
    pub(crate) keep_first_round: bool,
    /// Seed of the per-round order (default: from the clock).
    #[arg(long)]
    pub(crate) seed: Option<u64>,
    /// Markdown report.
    #[arg(long, value_name = "FILE")]
    pub(crate) markdown: Option<PathBuf>,
    /// JSON report: every run, every comparison, the environment.
    #[arg(long, value_name = "FILE")]
    pub(crate) json: Option<PathBuf>,
    /// SVG chart of every cell.
    #[arg(long, value_name = "FILE")]
    pub(crate) svg: Option<PathBuf>,
    /// HTML report: the charts inline, the tables, the verdicts, the environment.
    #[arg(long, value_name = "FILE")]
    pub(crate) html: Option<PathBuf>,
    /// Results for a history tool (repeatable): bencher=FILE writes Bencher Metric Format
    /// JSON (`bencher run --adapter json --file FILE`), csv=FILE one flat CSV (timestamp,
    /// commit, proto, url, variant, metric, value, ci_low, ci_high, level): every variant's medians,
    /// every candidate's change against the baseline with its interval.
    #[arg(long = "export", value_name = "FORMAT=FILE")]
    pub(crate) exports: Vec<crate::export::Export>,
    /// The commit the results are about, in the CSV export [default: HEAD of the working
    /// directory's git repository, if any].
    #[arg(long, value_name = "REV")]
    pub(crate) commit: Option<String>,
    /// A change that fails the run, judged on its 95% interval (repeatable), e.g.
    /// 'cpu_us_per_req > +2%' or 'rps < -5%': exit status 1 when the whole interval of some
    /// variant's change lies beyond it, 0 when every interval lies within it, 3 when one
    /// straddles it or there is none (the run cannot tell).
    #[arg(long = "fail-if", value_name = "METRIC > PCT")]
    pub(crate) fail_if: Vec<Threshold>,
    /// Exit statuses of --fail-if's verdicts: plain (0, 1, 3) or git-bisect (0 good, 1 bad,
    /// 125 skip when the run cannot tell, 128 for a failure, which stops `git bisect run`).
    #[arg(long, value_name = "CODES", default_value = "plain", value_parser = parse_codes, requires = "fail_if")]
    pub(crate) exit_codes: Codes,
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

/// The measured time of each run: --duration, or its default.
pub(crate) fn window_duration(a: &AbArgs) -> Duration {
    a.duration.unwrap_or(Duration::from_secs(
        if a.fresh_process || a.a_endpoint.is_some() {
            5
        } else {
            1
        },
    ))
}

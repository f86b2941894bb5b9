//! `loadterm load` command line and the run itself: the connections and the request budget
//! shared out to worker threads (`worker`), their results merged and reported.

use crate::record::Recorder;
use crate::report::{self, RunInfo};
use crate::sched::{Pace, RatePlan};
use crate::search::{self, Search, Slo, Trial};
use crate::setup::{ProtoChoice, Setup, SetupOptions};
use crate::shared::{Progress, Startup};
use crate::worker::{self, Job};
use anyhow::{bail, Context, Result};
use loadterm_plan::exit::{usage_error, Interrupted};
use loadterm_plan::units::parse_duration;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

#[derive(Debug, clap::Args)]
pub struct LoadArgs {
    /// Target URL(s); several are used round-robin (same scheme, host and port).
    #[arg(required_unless_present = "input_file", value_name = "URL")]
    urls: Vec<String>,
    /// Read more URLs from this file, one a line (as h2load's -i).
    #[arg(short = 'i', long, value_name = "PATH")]
    input_file: Option<PathBuf>,
    /// Total requests (default 1000 unless -D is given).
    #[arg(short = 'n', long = "requests")]
    requests: Option<u64>,
    /// Connections.
    #[arg(short = 'c', long = "clients", default_value_t = 1)]
    connections: usize,
    /// Worker threads (default: min(connections, CPUs)).
    #[arg(short = 't', long)]
    threads: Option<usize>,
    /// Concurrent requests per connection: streams on HTTP/2 and 3, pipelining depth on HTTP/1.1.
    #[arg(short = 'm', long = "max-concurrent-streams", default_value_t = 1)]
    streams: usize,
    /// Run for this long instead of a request count (e.g. 10s).
    #[arg(short = 'D', long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// With -D: run this long first without recording (refused with -n, as h2load needs -D
    /// for it: a -n run measures every request).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    warm_up_time: Option<Duration>,
    /// Extra request header, `name: value` (repeatable).
    #[arg(short = 'H', long = "header")]
    headers: Vec<String>,
    /// HTTP/1.1 (over TLS for https URLs).
    #[arg(long, group = "proto")]
    h1: bool,
    /// HTTP/2 over TLS (ALPN h2).
    #[arg(long, group = "proto")]
    h2: bool,
    /// HTTP/2 in clear text (prior knowledge).
    #[arg(long, group = "proto")]
    h2c: bool,
    /// HTTP/3 over QUIC.
    #[arg(long, group = "proto")]
    h3: bool,
    /// ALPN to offer, comma-separated (h2, http/1.1, h3); an alternative to --h1/--h2/--h3.
    #[arg(long, visible_alias = "npn-list", group = "proto", value_name = "LIST")]
    alpn_list: Option<String>,
    /// For http:// URLs: h2c or http/1.1 (default http/1.1; h2load's -p, whose default is h2c).
    #[arg(short = 'p', long, value_name = "PROTOID")]
    no_tls_proto: Option<String>,
    /// Do not verify the server certificate.
    #[arg(short = 'k', long)]
    insecure: bool,
    /// Trust these CA certificates (PEM) instead of the system bundle.
    #[arg(long, value_name = "FILE")]
    cacert: Option<PathBuf>,
    /// Connect here instead of the URL's host (the URL still gives Host and SNI).
    #[arg(long, value_name = "HOST:PORT")]
    connect_to: Option<String>,
    /// TLS server name (default: the URL's host).
    #[arg(long)]
    sni: Option<String>,
    /// Upload this file as the request body (POST unless --method says otherwise).
    #[arg(short = 'd', long = "data", value_name = "FILE")]
    data: Option<PathBuf>,
    /// Upload this many bytes as the request body.
    #[arg(long, value_name = "BYTES")]
    data_size: Option<usize>,
    /// Request method (default GET, or POST with a body).
    #[arg(long)]
    method: Option<String>,
    /// Open loop: requests per second across all connections, sent at scheduled times;
    /// latency is also reported from the intended send time (coordinated omission corrected).
    /// A schedule: steps `1000,2000,4000` (each --step-duration long), a ramp `1000..8000`
    /// (over -D), a mix (`500..2000,2000`), or `@FILE` of `TIME RATE` lines; each step is
    /// reported apart.
    #[arg(
        long,
        conflicts_with = "rate_per_conn",
        value_name = "RATE|SCHEDULE|@FILE"
    )]
    rate: Option<String>,
    /// With a --rate schedule: how long each step lasts (a ramp over -D: how long each piece
    /// of it reported apart is; default a tenth of it).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    step_duration: Option<Duration>,
    /// Open loop: requests per second per connection (h2load's --rps).
    #[arg(long, visible_alias = "rps")]
    rate_per_conn: Option<f64>,
    /// Open loop: sends due within the same window of this length share one timer wake-up,
    /// each at most this late (and measured from its intended time). At tens of thousands of
    /// requests per second a wake-up per send is most of the client's CPU. 0: every send on
    /// time to the microsecond.
    #[arg(long, value_parser = parse_duration, default_value = "0s", value_name = "DURATION")]
    send_grid: Duration,
    /// Resume TLS sessions (TLS 1.3 tickets, TLS 1.2 session IDs; QUIC too): `always` (once
    /// the first connection brought a ticket), `never` (every handshake a full one), or a
    /// fraction of the connections (0.5), spread evenly.
    #[arg(long, default_value = "always", value_name = "never|always|FRACTION")]
    tls_resume: crate::tls::ResumePolicy,
    /// Close each connection once it has started this many requests, and open a new one: new
    /// connections at the request rate / N, to measure handshakes.
    #[arg(long, value_name = "N")]
    requests_per_conn: Option<u64>,
    /// HTTP/3: send the first requests of a resumed connection as 0-RTT early data.
    #[arg(long = "0rtt")]
    zero_rtt: bool,
    /// Give up on a request (or connection attempt) after this long.
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    timeout: Duration,
    /// Pin worker threads to these CPUs (e.g. 1 or 2-3,5).
    #[arg(long, value_name = "LIST")]
    cpus: Option<String>,
    /// Write the results as JSON here (`-` for stdout); schema in docs/LOAD.md.
    #[arg(long, value_name = "FILE")]
    json: Option<String>,
    /// Write an HdrHistogram interval log (per-second latency histograms) here.
    #[arg(long, value_name = "FILE")]
    hdr_log: Option<PathBuf>,
    /// No progress line, no text summary (with --json -).
    #[arg(short = 'q', long)]
    quiet: bool,
    /// Run shard I of N (0-based): this process takes the share of -n, --rate and -c that
    /// thread I of -t N would, so that N shards together make the unsharded run.
    #[arg(long, value_name = "I/N", value_parser = parse_shard, conflicts_with = "shard_from_env")]
    shard: Option<Shard>,
    /// As --shard, the index I read from environment variable VAR (e.g.
    /// JOB_COMPLETION_INDEX/4 in a Kubernetes Indexed Job).
    #[arg(long, value_name = "VAR/N")]
    shard_from_env: Option<String>,
    /// Start the measured window at this instant (RFC 3339, or Unix seconds), any warm-up
    /// before it, so that shards on several machines measure the same window.
    #[arg(long, value_name = "TIME", value_parser = parse_start_at)]
    start_at: Option<SystemTime>,
    /// Search for the highest rate meeting every --slo: trials at a constant rate (each its
    /// warm-up, default 1s, then --step-duration, default 5s) from --rate (default 100),
    /// doubling while they pass, then bisecting between the last passing and first failing.
    #[arg(long, requires = "slo")]
    find_max_rate: bool,
    /// With --find-max-rate: an objective on the corrected latency or the errors, e.g.
    /// `p99<=10ms`, `p99.9<=50ms`, `mean<=2ms`, `errors<=0.1%` (repeatable; all must hold).
    #[arg(long, requires = "find_max_rate", value_name = "OBJECTIVE")]
    slo: Vec<String>,
    /// With --find-max-rate: the highest rate to try.
    #[arg(
        long,
        requires = "find_max_rate",
        default_value_t = 1e6,
        value_name = "RATE"
    )]
    max_rate: f64,
    /// With --find-max-rate: stop bisecting when the failing rate is within this share of
    /// the passing one (e.g. 5%).
    #[arg(
        long,
        requires = "find_max_rate",
        default_value = "5%",
        value_name = "PERCENT"
    )]
    precision: String,
    /// With --find-max-rate: write the latency curve here (percentiles against the offered
    /// rate): an SVG if the name ends in .svg, else an HTML page with the trials' table.
    #[arg(long, requires = "find_max_rate", value_name = "FILE")]
    plot: Option<PathBuf>,
    #[command(flatten)]
    h2load: crate::h2load::H2loadFlags,
}

/// `--find-max-rate`'s settings, checked.
struct Find {
    slos: Vec<Slo>,
    start: f64,
    max: f64,
    precision: f64,
    plot: Option<PathBuf>,
}

impl Find {
    /// The search's settings; -D and --step-duration become each trial's length.
    fn checked(a: &mut LoadArgs) -> Result<Option<Find>> {
        if !a.find_max_rate {
            return Ok(None);
        }
        if a.requests.is_some() || a.duration.is_some() || a.rate_per_conn.is_some() {
            bail!("--find-max-rate runs trials of --step-duration each: not with -n, -D or --rate-per-conn");
        }
        if a.shard.is_some() || a.shard_from_env.is_some() || a.hdr_log.is_some() {
            bail!("--find-max-rate runs in one process, with no --shard or --hdr-log");
        }
        let start: f64 = match &a.rate {
            None => 100.0,
            Some(r) => r
                .parse()
                .ok()
                .filter(|r: &f64| *r >= 1.0 && r.is_finite())
                .context("--rate with --find-max-rate: the first rate to try, 1 or more")?,
        };
        if !(a.max_rate >= start && a.max_rate.is_finite()) {
            bail!("--max-rate must be at least the first rate ({start})");
        }
        let precision = a
            .precision
            .trim()
            .trim_end_matches('%')
            .parse::<f64>()
            .ok()
            .filter(|p| *p > 0.0 && *p < 100.0)
            .context("--precision: a percentage between 0 and 100, e.g. 5%")?
            / 100.0;
        let slos = a
            .slo
            .iter()
            .map(|s| Slo::parse(s))
            .collect::<Result<Vec<_>>>()
            .context("--slo")?;
        a.rate = None;
        a.duration = Some(a.step_duration.take().unwrap_or(Duration::from_secs(5)));
        a.warm_up_time = Some(a.warm_up_time.unwrap_or(Duration::from_secs(1)));
        Ok(Some(Find {
            slos,
            start,
            max: a.max_rate,
            precision,
            plot: a.plot.clone(),
        }))
    }
}

/// One shard of a run: `index` in `0..count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

/// `I/N`, with I in 0..N.
fn parse_shard(s: &str) -> Result<Shard> {
    let (i, n) = s.split_once('/').context("expected I/N, e.g. 0/4")?;
    let (index, count): (usize, usize) = (
        i.trim()
            .parse()
            .with_context(|| format!("invalid shard index '{i}'"))?,
        n.trim()
            .parse()
            .with_context(|| format!("invalid shard count '{n}'"))?,
    );
    if index >= count {
        bail!("shard index {index} is not below the shard count {count} (indexes start at 0)");
    }
    Ok(Shard { index, count })
}

/// `VAR/N`: the index from the environment (read through `env`, so that tests need not set
/// the process's own).
fn shard_from_env(spec: &str, env: impl Fn(&str) -> Option<String>) -> Result<Shard> {
    let (var, n) = spec
        .split_once('/')
        .context("expected VAR/N, e.g. JOB_COMPLETION_INDEX/4")?;
    let i = env(var).with_context(|| format!("environment variable {var} is not set"))?;
    parse_shard(&format!("{i}/{n}")).with_context(|| format!("from {var}={i}"))
}

/// RFC 3339 (`2026-11-23T18:00:00Z`) or Unix seconds (`1795000000`, `1795000000.5`).
fn parse_start_at(s: &str) -> Result<SystemTime> {
    if let Ok(secs) = s.parse::<f64>() {
        if !(secs.is_finite() && secs >= 0.0) {
            bail!("invalid Unix time '{s}'");
        }
        return Ok(SystemTime::UNIX_EPOCH + Duration::from_secs_f64(secs));
    }
    let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .with_context(|| format!("'{s}' is neither RFC 3339 nor Unix seconds"))?;
    let ns = t.unix_timestamp_nanos();
    let ns = u64::try_from(ns).context("--start-at before 1970")?;
    Ok(SystemTime::UNIX_EPOCH + Duration::from_nanos(ns))
}

/// When the run starts sending (`t0`) and recording (`from`), and how late `from` is against
/// `--start-at`: the warm-up ends at the start time, unless this process came too late for
/// that, and then it keeps its whole warm-up and starts measuring late.
fn start_times(
    now: (SystemTime, Instant),
    start_at: Option<SystemTime>,
    warm: Duration,
) -> (Instant, Instant, Duration) {
    let (wall, mono) = now;
    // Time for the worker threads to start before the first send.
    let earliest = mono + Duration::from_millis(20);
    let Some(at) = start_at else {
        return (earliest, earliest + warm, Duration::ZERO);
    };
    let wanted_t0 = match at.duration_since(wall) {
        Ok(ahead) => (mono + ahead).checked_sub(warm),
        Err(behind) => mono
            .checked_sub(behind.duration())
            .and_then(|t| t.checked_sub(warm)),
    };
    let t0 = wanted_t0.map_or(earliest, |t| t.max(earliest));
    let from = t0 + warm;
    let late = wall_clock(now, from)
        .duration_since(at)
        .unwrap_or(Duration::ZERO);
    (t0, from, late)
}

/// The wall-clock time of `t`, an instant after `now`.
fn wall_clock(now: (SystemTime, Instant), t: Instant) -> SystemTime {
    now.0 + t.saturating_duration_since(now.1)
}

fn unix_s(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// `1`, `0-3`, `1,3-4`.
fn parse_cpus(s: &str) -> Result<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse()?, b.trim().parse()?);
                if a > b {
                    bail!("invalid CPU range '{part}'");
                }
                out.extend(a..=b);
            }
            None => out.push(
                part.trim()
                    .parse()
                    .with_context(|| format!("invalid CPU '{part}'"))?,
            ),
        }
    }
    if out.is_empty() {
        bail!("empty CPU list");
    }
    Ok(out)
}

fn proto(a: &LoadArgs) -> Result<Option<ProtoChoice>> {
    let clear = a.urls.first().is_some_and(|u| u.starts_with("http://"));
    Ok(if a.h1 {
        Some(ProtoChoice::H1)
    } else if a.h2 {
        Some(ProtoChoice::H2)
    } else if a.h2c {
        Some(ProtoChoice::H2c)
    } else if a.h3 {
        Some(ProtoChoice::H3)
    } else if let Some(list) = &a.alpn_list {
        match list.split(',').next().map(str::trim) {
            Some("h2") => Some(ProtoChoice::H2),
            Some("h3") => Some(ProtoChoice::H3),
            Some("http/1.1") => Some(ProtoChoice::H1),
            other => bail!(
                "unsupported ALPN '{}' (use h2, h3 or http/1.1)",
                other.unwrap_or("")
            ),
        }
    } else if let Some(p) = a.no_tls_proto.as_deref() {
        // As h2load: it chooses for http:// URLs only.
        let p = match p {
            "h2c" => ProtoChoice::H2c,
            "http/1.1" => ProtoChoice::H1,
            other => bail!("-p: unsupported protocol '{other}' (use h2c or http/1.1)"),
        };
        clear.then_some(p)
    } else {
        None
    })
}

/// Open loop when a rate plan is given, shared out over the run's connections.
fn pace(plan: Option<&Arc<RatePlan>>, connections: usize) -> Pace {
    match plan {
        Some(plan) => Pace::Open {
            plan: plan.clone(),
            connections: connections as u64,
        },
        None => Pace::Closed,
    }
}

/// The one rule for sharing out a run, used both across shards and across a process's
/// threads: part `i` of `parts` gets every `parts`-th of `slots` from the `i`-th, and a share of
/// `requests` in proportion to its slots, the rounding remainder spread one request each over
/// the first parts. The shares sum exactly to `requests`.
fn split(slots: &[u64], parts: usize, requests: Option<u64>) -> Vec<(Vec<u64>, Option<u64>)> {
    let connections = slots.len();
    let conns: Vec<Vec<u64>> = (0..parts)
        .map(|i| slots.iter().skip(i).step_by(parts).copied().collect())
        .collect();
    let base = |n: u64, c: &Vec<u64>| n * c.len() as u64 / connections as u64;
    let remainder = requests.map_or(0, |n| n - conns.iter().map(|c| base(n, c)).sum::<u64>());
    conns
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let share = requests.map(|n| base(n, &c) + u64::from((i as u64) < remainder));
            (c, share)
        })
        .collect()
}

/// Arguments as a shell line, quoted where needed, to paste and run again.
fn shell_line(args: impl Iterator<Item = std::ffi::OsString>) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./:=,@%+".contains(c);
    args.map(|a| {
        let a = a.to_string_lossy().into_owned();
        if !a.is_empty() && a.chars().all(plain) {
            a
        } else {
            format!("'{}'", a.replace('\'', r"'\''"))
        }
    })
    .collect::<Vec<_>>()
    .join(" ")
}

/// What ends a run, for the progress line.
#[derive(Debug, Clone, Copy)]
enum Goal {
    /// -n: this many requests (this process's share).
    Requests(u64),
    /// -D: this long from the first send, warm-up included.
    Time(Duration),
}

/// The live progress line: elapsed time, the last second's rate, and how far along the run
/// is, with an estimate of the time left (for -n: at the average rate so far).
fn progress_line(elapsed: Duration, done: u64, last_s: u64, errors: u64, goal: Goal) -> String {
    let secs = elapsed.as_secs_f64();
    let (of, eta) = match goal {
        Goal::Requests(n) => {
            let eta = (done > 0 && done < n).then(|| (n - done) as f64 * secs / done as f64);
            (format!("{done}/{n} done"), eta)
        }
        Goal::Time(d) => (
            format!("{done} done"),
            Some(d.as_secs_f64() - secs).filter(|s| *s > 0.0),
        ),
    };
    let eta = eta.map_or(String::new(), |s| format!("  ETA {s:.0}s"));
    format!("{secs:>6.1}s  {last_s:>8} req/s  {of}  {errors} errors{eta}")
}

pub fn run(mut a: LoadArgs) -> Result<()> {
    let Checked {
        data,
        shard,
        offer,
        plan,
        find,
    } = checked(&mut a)?;
    let setup = Arc::new(setup(&a, data, offer)?);
    let share = Share::new(&a, shard, plan)?;
    let outputs = outputs(&a)?;
    let stop = signals()?;
    if let Some(find) = find {
        return find_max_rate(&a, &setup, &share, &find, outputs, &stop);
    }
    let m = measure(&a, &setup, &share, &stop, !a.quiet)?;
    if let Some((mut file, path)) = outputs.hdr_log {
        use std::io::Write;
        file.write_all(&report::hdr_log(
            &m.total,
            wall_clock(m.window.now, m.window.t0),
        )?)
        .with_context(|| format!("cannot write {}", path.display()))?;
    }
    emit(&m.rep, outputs.json, a.quiet)?;
    if m.interrupted.is_some() {
        return Err(Interrupted.into());
    }
    all_failed(&m.total, &m.startup, setup.addr)
}

/// What one run measured.
struct Measured {
    total: Recorder,
    rep: report::Report,
    window: Window,
    interrupted: Option<Instant>,
    startup: Arc<Startup>,
}

/// One run: the workers started, their results joined and reported; the progress line on a
/// terminal when `progress`.
fn measure(
    a: &LoadArgs,
    setup: &Arc<Setup>,
    share: &Share,
    stop: &tokio::sync::watch::Receiver<Option<Instant>>,
    progress: bool,
) -> Result<Measured> {
    let interactive = progress && std::io::stderr().is_terminal();
    let progress = interactive.then(|| Arc::new(Progress::default()));
    let window = Window::start(a);
    // The slots this process runs (its shard's, when sharded).
    let startup = Arc::new(Startup::new(share.slots.len()));
    let step_plans = share.step_plans(a.connections);
    let step_starts: Vec<Instant> = step_plans
        .iter()
        .map(|s| window.from + Duration::from_secs_f64(s.start_s))
        .collect();
    let mut handles = Vec::new();
    for (i, (conns, requests)) in split(&share.slots, share.threads, share.requests)
        .into_iter()
        .enumerate()
    {
        handles.push(worker::spawn(
            i,
            Job {
                setup: setup.clone(),
                conns,
                share: requests,
                pace: share.pace.clone(),
                t0: window.t0,
                from: window.from,
                until: window.until,
                hdr_log: a.hdr_log.is_some(),
                steps: step_starts.clone(),
                progress: progress.clone(),
                cpu: share.cpus.as_ref().map(|c| c[i % c.len()]),
                send_grid: a.send_grid,
                startup: startup.clone(),
                stop: stop.clone(),
            },
        )?);
    }
    let goal = a
        .duration
        .map_or(Goal::Requests(share.requests.unwrap_or(0)), |d| {
            Goal::Time(window.warm + d)
        });
    let ticker = progress.map(|p| Ticker::start(p, window.t0, goal));
    let total = joined(handles);
    if let Some(ticker) = ticker {
        ticker.stop();
    }
    let total = total?;
    let interrupted = *stop.borrow();
    let info = run_info(a, setup, share, &window, &total, interrupted);
    let rate = share.mean_rate(a.connections, info.duration_s);
    let rep = report::build(&total, info, rate, &step_plans);
    Ok(Measured {
        total,
        rep,
        window,
        interrupted,
        startup,
    })
}

/// `--find-max-rate`: trials at the rates the search asks for, each a run of its own (fresh
/// connections, warm-up, `--step-duration` measured), until it is over; then the table, the
/// JSON and the plot.
fn find_max_rate(
    a: &LoadArgs,
    setup: &Arc<Setup>,
    share: &Share,
    find: &Find,
    outputs: Outputs<'_>,
    stop: &tokio::sync::watch::Receiver<Option<Instant>>,
) -> Result<()> {
    let mut search = Search::new(find.start, find.max, find.precision);
    let mut trials = Vec::new();
    let warm = a.warm_up_time.unwrap_or_default();
    while let Some(rate) = search.next() {
        let trial_share = share.at_rate(rate, warm);
        let (cpu0, wall0) = (process_cpu_s(), Instant::now());
        let m = measure(a, setup, &trial_share, stop, false)?;
        if m.interrupted.is_some() {
            break;
        }
        all_failed(&m.total, &m.startup, setup.addr)?;
        let busy = (process_cpu_s() - cpu0)
            / (wall0.elapsed().as_secs_f64() * share.threads as f64).max(1e-9);
        let slots = a.connections * a.streams;
        let trial = Trial::judge(rate, &m.rep, &m.total.corrected, busy, slots, &find.slos);
        if !a.quiet {
            eprintln!("loadterm: {}", search::trial_line(trials.len() + 1, &trial));
        }
        search.record(rate, trial.passed());
        trials.push(trial);
    }
    let outcome = search::Finding::new(
        Some(shell_line(std::env::args_os().skip(1))),
        &find.slos,
        &search,
        trials,
    );
    if let Some(path) = &find.plot {
        let doc = if path.extension().is_some_and(|e| e == "svg") {
            crate::curve::svg(&outcome, &find.slos)?
        } else {
            crate::curve::html(&outcome, &find.slos)?
        };
        std::fs::write(path, doc).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let to_stdout = matches!(outputs.json, Some(JsonOut::Stdout));
    if !(a.quiet || to_stdout) {
        stdout(&outcome.text())?;
    }
    if let Some(json) = outputs.json {
        json.write(&(serde_json::to_string_pretty(&outcome)? + "\n"))?;
    }
    if stop.borrow().is_some() {
        return Err(Interrupted.into());
    }
    if outcome.max_rate.is_none() {
        bail!("no rate met every objective (down to 1 req/s)");
    }
    Ok(())
}

/// This process's CPU time so far (user + system, every thread), in seconds.
#[allow(unsafe_code)] // getrusage
fn process_cpu_s() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct it is given.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    s(ru.ru_utime) + s(ru.ru_stime)
}

/// The protocol chosen and every request prepared: a target or option that cannot work is a
/// usage error.
fn setup(a: &LoadArgs, data: bytes::Bytes, offer: crate::setup::Offer) -> Result<Setup> {
    let proto = proto(a).map_err(usage_error)?;
    Setup::new(&SetupOptions {
        urls: &a.urls,
        proto,
        connect_to: a.connect_to.as_deref(),
        sni: a.sni.as_deref(),
        insecure: a.insecure,
        cacert: a.cacert.as_deref(),
        method: a.method.as_deref(),
        headers: &a.headers,
        data,
        streams: a.streams,
        timeout: a.timeout,
        offer,
        resume: a.tls_resume,
        requests_per_conn: a.requests_per_conn,
        zero_rtt: a.zero_rtt,
    })
    .map_err(|e| usage_error(format!("{e:#}")))
}

/// This process's part of the run and how it spreads over its worker threads.
#[derive(Clone)]
struct Share {
    /// This process's shard (from `--shard` or `--shard-from-env`).
    shard: Option<Shard>,
    /// `--cpus`, parsed.
    cpus: Option<Vec<usize>>,
    /// This process's share of -n (`None` with -D).
    requests: Option<u64>,
    /// Its connection slots: their numbers in the whole run, so that open-loop schedules
    /// stay phased across shards.
    slots: Vec<u64>,
    threads: usize,
    /// The open-loop rate plan of the whole run (all shards), if any.
    plan: Option<Arc<RatePlan>>,
    pace: Pace,
}

impl Share {
    fn new(a: &LoadArgs, shard: Option<Shard>, plan: Option<Arc<RatePlan>>) -> Result<Share> {
        let cpus = a
            .cpus
            .as_deref()
            .map(parse_cpus)
            .transpose()
            .map_err(|e| usage_error(format!("--cpus: {e:#}")))?;
        let requests = match (a.requests, a.duration) {
            (Some(_), Some(_)) => return Err(usage_error("use either -n or -D")),
            (_, None) if a.warm_up_time.is_some() => {
                return Err(usage_error(
                    "--warm-up-time needs -D (as in h2load): a -n run measures every request",
                ))
            }
            (n, None) => Some(n.unwrap_or(1000)),
            (None, Some(_)) => None,
        };
        let all: Vec<u64> = (0..a.connections as u64).collect();
        let (slots, requests) = match shard {
            Some(s) => split(&all, s.count, requests).swap_remove(s.index),
            None => (all, requests),
        };
        let available = std::thread::available_parallelism().map_or(1, |n| n.get());
        let threads = a
            .threads
            .unwrap_or_else(|| cpus.as_ref().map_or(available, Vec::len))
            .min(slots.len())
            .max(1);
        Ok(Share {
            shard,
            cpus,
            requests,
            slots,
            threads,
            pace: pace(plan.as_ref(), a.connections),
            plan,
        })
    }

    /// The same share at a constant `rate` (a trial of `--find-max-rate`).
    fn at_rate(&self, rate: f64, warm: Duration) -> Share {
        let plan = Arc::new(RatePlan::constant(rate, warm));
        Share {
            // No shards with --find-max-rate: these are all the run's connections.
            pace: pace(Some(&plan), self.slots.len()),
            plan: Some(plan),
            ..self.clone()
        }
    }

    /// This process's part of the run's connections, so of its sends.
    fn fraction(&self, connections: usize) -> f64 {
        self.slots.len() as f64 / connections as f64
    }

    /// The steps of the schedule, for this process's share (none at a constant rate).
    fn step_plans(&self, connections: usize) -> Vec<report::StepPlan> {
        let share = self.fraction(connections);
        let Some(plan) = &self.plan else {
            return Vec::new();
        };
        plan.steps()
            .iter()
            .map(|s| report::StepPlan {
                start_s: s.start,
                duration_s: s.len,
                rate_from: s.from * share,
                rate_to: s.to * share,
                intended: (plan.count(s.start + s.len) - plan.count(s.start)) * share,
            })
            .collect()
    }

    /// This process's share of the sends the plan intended in the first `d` seconds of the
    /// window, per second: the open-loop rate the report states.
    fn mean_rate(&self, connections: usize, d: f64) -> Option<f64> {
        let share = self.fraction(connections);
        self.plan.as_ref().map(|p| match p.steps() {
            [] => p.rate_at(0.0) * share,
            _ => p.count(d) / d.max(1e-9) * share,
        })
    }
}

/// The run's times: when it starts sending (`t0`) and recording (`from`), and when recording
/// ends (`until`, with -D).
struct Window {
    /// The wall clock and the monotonic clock read together, to convert instants.
    now: (SystemTime, Instant),
    t0: Instant,
    from: Instant,
    until: Option<Instant>,
    /// `--warm-up-time`.
    warm: Duration,
    /// How late `from` is against `--start-at`.
    late: Duration,
}

impl Window {
    /// The times from now, with a warning when `--start-at` could not be kept.
    fn start(a: &LoadArgs) -> Window {
        let warm = a.warm_up_time.unwrap_or_default();
        let now = (SystemTime::now(), Instant::now());
        let (t0, from, late) = start_times(now, a.start_at, warm);
        if a.start_at.is_some() && late > Duration::from_millis(1) {
            eprintln!(
                "loadterm: started late: the measured window begins {:.3}s after --start-at",
                late.as_secs_f64()
            );
        }
        Window {
            now,
            t0,
            from,
            until: a.duration.map(|d| from + d),
            warm,
            late,
        }
    }

    /// The measured time: the window (cut short by an interrupt), or for a -n run until the
    /// last response or the interrupt.
    fn measured_s(&self, total: &Recorder, interrupted: Option<Instant>) -> f64 {
        let (t0, from) = (self.t0, self.from);
        match (self.until, interrupted, total.first_done, total.last_done) {
            // Interrupted: the window ended then (at once, when it came during the warm-up).
            (Some(end), Some(at), _, _) => end.min(at).saturating_duration_since(from),
            (Some(end), None, _, _) => end.duration_since(from),
            (None, Some(at), _, _) => at.saturating_duration_since(t0),
            (None, None, Some(_), Some(last)) => last.duration_since(t0),
            _ => t0.elapsed(),
        }
        .as_secs_f64()
    }
}

/// What the report says about the run itself.
fn run_info(
    a: &LoadArgs,
    setup: &Setup,
    share: &Share,
    window: &Window,
    total: &Recorder,
    interrupted: Option<Instant>,
) -> RunInfo {
    let connections = share.slots.len();
    RunInfo {
        command: Some(shell_line(std::env::args_os().skip(1))),
        protocol: setup.proto.used(total.alpn).to_owned(),
        urls: a.urls.clone(),
        connections,
        threads: share.threads,
        streams: a.streams,
        duration_s: window.measured_s(total, interrupted),
        shard: share.shard.map(|s| report::ShardInfo {
            index: s.index,
            count: s.count,
        }),
        clock: report::Clock {
            origin_unix_s: unix_s(wall_clock(window.now, window.t0)),
            window_start_unix_s: unix_s(wall_clock(window.now, window.from)),
            start_at_unix_s: a.start_at.map(unix_s),
            late_s: window.late.as_secs_f64(),
        },
        interrupted: interrupted.is_some(),
    }
}

/// What the options come to once checked against each other (`-i` read into the URLs).
struct Checked {
    /// The request body to send.
    data: bytes::Bytes,
    /// This process's shard.
    shard: Option<Shard>,
    /// h2load's `-w`, `-W`, `-f`, `--header-table-size`.
    offer: crate::setup::Offer,
    /// The open-loop rate plan (`--rate`, `--rate-per-conn`).
    plan: Option<Arc<RatePlan>>,
    /// `--find-max-rate`.
    find: Option<Find>,
}

/// The options checked against each other before anything starts.
fn checked(a: &mut LoadArgs) -> Result<Checked> {
    if let Some(why) = a.h2load.refused() {
        return Err(usage_error(why));
    }
    let offer = a.h2load.offer().map_err(usage_error)?;
    if let Some(path) = &a.input_file {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("-i: cannot read {}", path.display()))
            .map_err(|e| usage_error(format!("{e:#}")))?;
        a.urls.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_owned),
        );
    }
    if a.connections == 0 || a.streams == 0 || a.threads == Some(0) {
        return Err(usage_error("-c, -m and -t must be at least 1"));
    }
    if a.requests == Some(0) || a.requests_per_conn == Some(0) {
        return Err(usage_error("-n and --requests-per-conn must be at least 1"));
    }
    if a.zero_rtt && !(a.h3 || a.alpn_list.as_deref().is_some_and(|l| l.starts_with("h3"))) {
        return Err(usage_error("--0rtt is for HTTP/3 (--h3)"));
    }
    let find = Find::checked(a).map_err(|e| usage_error(format!("{e:#}")))?;
    let plan = rate_plan(a).map_err(|e| usage_error(format!("{e:#}")))?;
    let data = match (&a.data, a.data_size) {
        (Some(_), Some(_)) => return Err(usage_error("use either -d or --data-size")),
        (Some(f), None) => bytes::Bytes::from(
            std::fs::read(f).with_context(|| format!("cannot read {}", f.display()))?,
        ),
        (None, Some(n)) => bytes::Bytes::from(vec![b'x'; n]),
        (None, None) => bytes::Bytes::new(),
    };
    let shard = match (&a.shard, &a.shard_from_env) {
        (Some(s), _) => Some(*s),
        (None, Some(spec)) => Some(
            shard_from_env(spec, |v| std::env::var(v).ok())
                .map_err(|e| usage_error(format!("--shard-from-env: {e:#}")))?,
        ),
        (None, None) => None,
    };
    if shard.is_some_and(|s| s.count > a.connections) {
        return Err(usage_error(
            "-c must be at least the shard count (each shard needs a connection)",
        ));
    }
    Ok(Checked {
        data,
        shard,
        offer,
        plan,
        find,
    })
}

/// The open-loop plan of `--rate` (a schedule sets -D when none is given) or `--rate-per-conn`.
fn rate_plan(a: &mut LoadArgs) -> Result<Option<Arc<RatePlan>>> {
    let warm = a.warm_up_time.unwrap_or_default();
    let plan = match (&a.rate, a.rate_per_conn) {
        (Some(spec), _) => {
            let (plan, length) =
                RatePlan::parse(spec, a.step_duration, a.duration, warm).context("--rate")?;
            if length.is_some() && a.requests.is_some() {
                bail!(
                    "a schedule runs for a time: use -D (or none: the schedule's length), not -n"
                );
            }
            a.duration = a.duration.or(length);
            plan
        }
        (None, Some(r)) if r > 0.0 && r.is_finite() => {
            RatePlan::constant(r * a.connections as f64, warm)
        }
        (None, Some(_)) => bail!("--rate-per-conn must be a positive number"),
        (None, None) if a.step_duration.is_some() => {
            bail!("--step-duration needs a --rate schedule")
        }
        (None, None) => return Ok(None),
    };
    Ok(Some(Arc::new(plan)))
}

/// Where the results go besides the summary: `--json`, and `--hdr-log` with its path.
struct Outputs<'a> {
    json: Option<JsonOut>,
    hdr_log: Option<(std::fs::File, &'a Path)>,
}

/// The outputs, opened now, so that a path that cannot be written is refused before the run
/// rather than after it.
fn outputs(a: &LoadArgs) -> Result<Outputs<'_>> {
    let json = a
        .json
        .as_deref()
        .map(JsonOut::open)
        .transpose()
        .map_err(|e| usage_error(format!("--json: {e:#}")))?;
    let hdr_log = a
        .hdr_log
        .as_deref()
        .map(|p| {
            std::fs::File::create(p)
                .with_context(|| format!("cannot create {}", p.display()))
                .map(|f| (f, p))
        })
        .transpose()
        .map_err(|e| usage_error(format!("--hdr-log: {e:#}")))?;
    Ok(Outputs { json, hdr_log })
}

/// The progress line on an interactive terminal, rewritten every second by a thread of its own.
struct Ticker {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Ticker {
    fn start(p: Arc<Progress>, t0: Instant, goal: Goal) -> Ticker {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut last = 0;
            while !stopped.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_secs(1));
                let done = p.done.load(Ordering::Relaxed);
                let errors = p.errors.load(Ordering::Relaxed);
                let line = progress_line(t0.elapsed(), done, done - last, errors, goal);
                eprint!("\r{line}   ");
                last = done;
            }
            eprint!("\r{:100}\r", "");
        });
        Ticker { stop, thread }
    }

    /// Stop, and clear the line.
    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
    }
}

/// The workers' results, merged.
fn joined(handles: Vec<std::thread::JoinHandle<Result<Recorder>>>) -> Result<Recorder> {
    let mut total: Option<Recorder> = None;
    for h in handles {
        let rec = h
            .join()
            .map_err(|_| anyhow::anyhow!("a worker thread panicked"))??;
        match &mut total {
            Some(t) => t.merge(&rec),
            None => total = Some(rec),
        }
    }
    Ok(total.expect("at least one worker"))
}

/// The run fails when no request completed and some failed: why, by kind.
fn all_failed(total: &Recorder, startup: &Startup, addr: std::net::SocketAddr) -> Result<()> {
    if total.completed > 0 || total.errors.total() == 0 {
        return Ok(());
    }
    let e = &total.errors;
    let first = total
        .first_reasons
        .values()
        .min()
        .map_or(String::new(), |(_, r)| format!("{r}; "));
    let stopped = if startup.stopped() {
        "stopped early, every connection failed before any was made: "
    } else {
        "no request completed: "
    };
    bail!(
        "{stopped}{first}{} connect, {} TLS, {} timeout, {} reset, {} protocol errors (server at {addr})",
        e.connect,
        e.tls,
        e.timeout,
        e.reset,
        e.protocol,
    )
}

/// SIGINT ends the run early, with its results (the workers watch the returned receiver: the
/// instant of the interrupt); a second SIGINT kills the process as usual. SIGUSR1 is ignored:
/// `kill -USR1 $(pidof loadterm)`, meant for the server's statistics, reaches load clients too,
/// and its default action would kill them. signal-hook's handlers, read on a thread of their own.
fn signals() -> Result<tokio::sync::watch::Receiver<Option<Instant>>> {
    use signal_hook::consts::{SIGINT, SIGUSR1};
    // A SIGINT ignored when we started (a background job of a non-interactive shell, nohup)
    // stays ignored, as it would without a handler: read before installing one.
    let watch_int = !sigint_ignored();
    // Once the first SIGINT is in, the next one has SIGINT's default action: it kills a run
    // whose summary the user will not wait for. Registered first, so that it runs before the
    // iterator's handler, which wakes the thread that sets the flag.
    let interrupted = Arc::new(AtomicBool::new(false));
    if watch_int {
        signal_hook::flag::register_conditional_default(SIGINT, interrupted.clone())
            .context("cannot handle SIGINT")?;
    }
    let caught: &[i32] = if watch_int {
        &[SIGINT, SIGUSR1]
    } else {
        &[SIGUSR1]
    };
    let mut caught =
        signal_hook::iterator::Signals::new(caught).context("cannot handle signals")?;
    let (tx, rx) = tokio::sync::watch::channel(None);
    std::thread::Builder::new()
        .name("load-signals".into())
        .spawn(move || {
            for signal in caught.forever() {
                if signal == SIGINT && !interrupted.swap(true, Ordering::Relaxed) {
                    let _ = tx.send(Some(Instant::now()));
                }
            }
        })
        .context("cannot start the signal thread")?;
    Ok(rx)
}

/// Whether SIGINT's disposition is "ignore" (read before installing a handler).
#[allow(unsafe_code)] // sigaction, read only
fn sigint_ignored() -> bool {
    // SAFETY: sigaction with a null new action only reads the current one into `old`.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGINT, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction == libc::SIG_IGN
    }
}

/// Where the JSON report goes: stdout, or a file created before the run.
pub(crate) enum JsonOut {
    Stdout,
    File(std::fs::File, String),
}

impl JsonOut {
    /// `-` is stdout; any other path is created (truncated) now.
    pub(crate) fn open(path: &str) -> Result<JsonOut> {
        if path == "-" {
            return Ok(JsonOut::Stdout);
        }
        let f = std::fs::File::create(path).with_context(|| format!("cannot create {path}"))?;
        Ok(JsonOut::File(f, path.to_owned()))
    }

    fn write(self, doc: &str) -> Result<()> {
        use std::io::Write;
        match self {
            JsonOut::Stdout => stdout(doc),
            JsonOut::File(mut f, path) => f
                .write_all(doc.as_bytes())
                .with_context(|| format!("cannot write {path}")),
        }
    }
}

/// The text summary on stdout (unless quiet or the JSON goes there) and the JSON where asked.
pub(crate) fn emit(rep: &report::Report, json: Option<JsonOut>, quiet: bool) -> Result<()> {
    let to_stdout = matches!(json, Some(JsonOut::Stdout));
    if !(quiet || to_stdout) {
        stdout(&report::text(rep))?;
    }
    if let Some(json) = json {
        json.write(&(serde_json::to_string_pretty(rep)? + "\n"))?;
    }
    Ok(())
}

/// Print to stdout; a reader that went away (`| head`) is not an error.
fn stdout(text: &str) -> Result<()> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.context("cannot write to stdout"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadterm_plan::exit::UsageError;

    /// Each worker's connection slots and share of `-n` in an unsharded run.
    fn assign(
        connections: usize,
        threads: usize,
        requests: Option<u64>,
    ) -> Vec<(Vec<u64>, Option<u64>)> {
        split(
            &(0..connections as u64).collect::<Vec<_>>(),
            threads,
            requests,
        )
    }

    #[test]
    fn command_lines_paste_back() {
        let line = shell_line(
            ["load", "-n", "5", "http://h/?s=1k&t=5", "-H", "x: it's", ""]
                .into_iter()
                .map(Into::into),
        );
        assert_eq!(line, r"load -n 5 'http://h/?s=1k&t=5' -H 'x: it'\''s' ''");
    }

    #[test]
    fn progress_lines() {
        let s = Duration::from_secs;
        assert_eq!(
            progress_line(s(2), 400, 200, 0, Goal::Requests(1000)),
            "   2.0s       200 req/s  400/1000 done  0 errors  ETA 3s"
        );
        assert_eq!(
            progress_line(s(3), 1000, 10, 1, Goal::Requests(1000)),
            "   3.0s        10 req/s  1000/1000 done  1 errors"
        );
        assert_eq!(
            progress_line(s(4), 50, 10, 0, Goal::Time(s(10))),
            "   4.0s        10 req/s  50 done  0 errors  ETA 6s"
        );
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpus("1").unwrap(), vec![1]);
        assert_eq!(parse_cpus("0-2,5").unwrap(), vec![0, 1, 2, 5]);
        assert!(parse_cpus("3-1").is_err() && parse_cpus("x").is_err() && parse_cpus("").is_err());
    }

    #[test]
    fn requests_split_across_workers() {
        // -n 10 -c 3 -t 2: worker 0 runs connections 0 and 2 (2/3 of 10, rounded down, and
        // the remainder), worker 1 connection 1.
        assert_eq!(
            assign(3, 2, Some(10)),
            [(vec![0, 2], Some(7)), (vec![1], Some(3))]
        );
        // -n 1 -c 4 -t 4: one worker gets the one request; -n 10: no worker gets twice
        // another's share (which would make the run last twice as long).
        let shares = |n| -> Vec<_> { assign(4, 4, Some(n)).into_iter().map(|(_, n)| n).collect() };
        assert_eq!(shares(1), [Some(1), Some(0), Some(0), Some(0)]);
        assert_eq!(shares(10), [Some(3), Some(3), Some(2), Some(2)]);
        // -D: no count, every connection still placed exactly once.
        let plan = assign(7, 3, None);
        assert!(plan.iter().all(|(_, n)| n.is_none()));
        let mut conns: Vec<u64> = plan.into_iter().flat_map(|(c, _)| c).collect();
        conns.sort_unstable();
        assert_eq!(conns, (0..7).collect::<Vec<_>>());
        for (n, c, t) in [(1001, 7, 3), (5, 50, 2), (100_000, 50, 1), (999_999, 13, 5)] {
            let plan = assign(c, t, Some(n));
            assert_eq!(
                plan.iter().filter_map(|(_, n)| *n).sum::<u64>(),
                n,
                "{n} {c} {t}"
            );
        }
    }

    #[test]
    fn rate_to_pace() {
        assert!(matches!(pace(None, 4), Pace::Closed));
        let mut a = args(&["--rate-per-conn", "250", "-c", "4", "u"]).unwrap();
        let plan = rate_plan(&mut a).unwrap();
        let Pace::Open { plan, connections } = pace(plan.as_ref(), 4) else {
            panic!("open loop expected");
        };
        assert_eq!((plan.rate_at(0.0), connections), (1000.0, 4));
        // A schedule sets the run's length, and is refused with -n.
        let mut a = args(&["--rate", "10,20", "--step-duration", "3s", "u"]).unwrap();
        rate_plan(&mut a).unwrap();
        assert_eq!(a.duration, Some(Duration::from_secs(6)));
        let mut a = args(&["--rate", "10,20", "--step-duration", "3s", "-n", "5", "u"]).unwrap();
        assert!(rate_plan(&mut a).is_err());
        let mut a = args(&["--step-duration", "3s", "u"]).unwrap();
        assert!(rate_plan(&mut a).is_err());
    }

    #[derive(clap::Parser)]
    struct Cmd {
        #[command(flatten)]
        load: LoadArgs,
    }

    fn args(argv: &[&str]) -> Result<LoadArgs, clap::Error> {
        use clap::Parser;
        Cmd::try_parse_from(std::iter::once("load").chain(argv.iter().copied())).map(|c| c.load)
    }

    #[test]
    fn invalid_options_are_usage_errors() {
        for argv in [
            &["-c", "0", "http://127.0.0.1:9/"][..],
            &["--rate=-1", "http://127.0.0.1:9/"],
            &["--alpn-list", "spdy/3", "http://127.0.0.1:9/"],
            &["ftp://127.0.0.1:9/"],
            &["--cpus", "3-1", "http://127.0.0.1:9/"],
            &["-n", "1", "-D", "1s", "http://127.0.0.1:9/"],
            &["-n", "1", "--warm-up-time", "1s", "http://127.0.0.1:9/"],
            &["--json", "/nonexistent/x.json", "http://127.0.0.1:9/"],
        ] {
            let e = run(args(argv).unwrap()).unwrap_err();
            assert!(e.downcast_ref::<UsageError>().is_some(), "{argv:?}: {e:#}");
        }
    }

    #[test]
    fn protocol_options() {
        let p = |argv: &[&str]| proto(&args(argv).unwrap());
        assert_eq!(p(&["u"]).unwrap(), None);
        assert_eq!(p(&["--h2c", "u"]).unwrap(), Some(ProtoChoice::H2c));
        assert_eq!(
            p(&["--alpn-list", "h3,h2", "u"]).unwrap(),
            Some(ProtoChoice::H3)
        );
        assert_eq!(
            p(&["--alpn-list", " http/1.1", "u"]).unwrap(),
            Some(ProtoChoice::H1)
        );
        assert!(p(&["--alpn-list", "spdy/3", "u"]).is_err());
        assert!(args(&["--h1", "--h2", "u"]).is_err());
        assert!(args(&["--rate", "5", "--rate-per-conn", "1", "u"]).is_err());
        let a = args(&["-n", "7", "-c", "3", "-m", "2", "-D", "2s", "u1", "u2"]).unwrap();
        assert_eq!(
            (a.requests, a.connections, a.streams, a.duration),
            (Some(7), 3, 2, Some(Duration::from_secs(2)))
        );
        assert_eq!(a.urls, ["u1", "u2"]);
    }

    #[test]
    fn shards_take_the_share_a_thread_would() {
        // -n 1001 -c 7 in 3 shards: each shard's slots and requests are thread i of -t 3's,
        // and the shards' threads then split their share again, summing to the whole run.
        let all: Vec<u64> = (0..7).collect();
        let shards = split(&all, 3, Some(1001));
        assert_eq!(shards, assign(7, 3, Some(1001)));
        assert_eq!(shards[1], (vec![1, 4], Some(286)));
        let mut total = 0;
        let mut slots = Vec::new();
        for (s, n) in &shards {
            for (c, k) in split(s, 2, *n) {
                total += k.unwrap();
                slots.extend(c);
            }
        }
        slots.sort_unstable();
        assert_eq!((total, slots), (1001, all));
    }

    #[test]
    fn shard_options() {
        assert_eq!(parse_shard("2/4").unwrap(), Shard { index: 2, count: 4 });
        for bad in ["4/4", "1", "a/2", "1/x", "0/0"] {
            assert!(parse_shard(bad).is_err(), "{bad}");
        }
        let env = |v: &str| (v == "JOB_COMPLETION_INDEX").then(|| "3".to_owned());
        assert_eq!(
            shard_from_env("JOB_COMPLETION_INDEX/8", env).unwrap(),
            Shard { index: 3, count: 8 }
        );
        let e = shard_from_env("OTHER/8", env).unwrap_err();
        assert!(format!("{e:#}").contains("OTHER is not set"), "{e:#}");
        assert!(shard_from_env("JOB_COMPLETION_INDEX/2", env).is_err());
        assert!(args(&["--shard", "0/2", "--shard-from-env", "X/2", "u"]).is_err());
        // More shards than connections leaves a shard with nothing to do.
        let e = run(args(&["--shard", "0/4", "-c", "3", "http://127.0.0.1:9/"]).unwrap());
        assert!(e.unwrap_err().downcast_ref::<UsageError>().is_some());
    }

    #[test]
    fn start_at_forms() {
        let t = parse_start_at("2026-11-23T18:00:00.5Z").unwrap();
        assert_eq!(
            t.duration_since(SystemTime::UNIX_EPOCH).unwrap(),
            Duration::from_millis(1_795_456_800_500)
        );
        assert_eq!(parse_start_at("2026-11-23T19:00:00.5+01:00").unwrap(), t);
        assert_eq!(parse_start_at("1795456800.5").unwrap(), t);
        for bad in ["tomorrow", "-5", "2026-11-23 18:00"] {
            assert!(parse_start_at(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn warm_up_ends_at_the_start_time_or_late() {
        let now = (SystemTime::now(), Instant::now());
        let warm = Duration::from_secs(2);
        let secs = Duration::from_secs;
        // 10 s ahead: sending starts 8 s from now, measuring at the start time, not late.
        let (t0, from, late) = start_times(now, Some(now.0 + secs(10)), warm);
        assert_eq!(
            (t0 - now.1, from - now.1, late),
            (secs(8), secs(10), Duration::ZERO)
        );
        // 1 s ahead, less than the warm-up: the warm-up is not cut short, so the window
        // starts 1.02 s late.
        let (t0, from, late) = start_times(now, Some(now.0 + secs(1)), warm);
        assert_eq!(t0 - now.1, Duration::from_millis(20));
        assert_eq!((from - t0, late), (warm, Duration::from_millis(1020)));
        // 5 s past: the whole warm-up, then measuring 5.02 + 2 s late.
        let (t0, from, late) = start_times(now, Some(now.0 - secs(5)), warm);
        assert_eq!(from - t0, warm);
        assert_eq!(late, Duration::from_millis(7020));
        // No start time: no lateness.
        assert_eq!(start_times(now, None, warm).2, Duration::ZERO);
    }
}

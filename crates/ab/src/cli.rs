//! `loadterm ab`: interleaved rounds of fresh server processes, paired statistics, verdicts.

use crate::compare::{compare, noise, signed_pct};
use crate::contam;
use crate::fixture::{Backends, Vars};
use crate::measure::{self, Run, RunSpec, Target, METRICS};
use crate::power;
use crate::report::{self, Cell, Report, Variant};
use anyhow::{bail, Context, Result};
use loadterm_plan::units::parse_duration;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct AbArgs {
    /// Baseline server command ({clear_port}, {tls_port}, {host} are replaced).
    #[arg(long = "a", value_name = "CMD")]
    a: Option<String>,
    /// Candidate server command.
    #[arg(long = "b", value_name = "CMD")]
    b: Option<String>,
    #[arg(long, default_value = "A")]
    a_name: String,
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
    /// Protocols: h1 (clear port), h2, h3 (TLS port), comma-separated.
    #[arg(long, default_value = "h1", value_delimiter = ',')]
    proto: Vec<String>,
    /// Response sizes: replace `s=` in the URL, one matrix cell each (e.g. 1k,256k).
    #[arg(long, value_delimiter = ',')]
    size: Vec<String>,
    #[arg(long, default_value_t = 10)]
    rounds: usize,
    /// Measured time per run.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    duration: Duration,
    /// Unmeasured load before each measured run.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    warmup: Duration,
    #[arg(long, default_value = "0", value_delimiter = ',')]
    server_cpus: Vec<usize>,
    #[arg(long, default_value = "1", value_delimiter = ',')]
    client_cpus: Vec<usize>,
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Client connections.
    #[arg(short = 'c', long, default_value_t = 50)]
    connections: usize,
    /// Client concurrent streams (pipelining depth on HTTP/1.1).
    #[arg(short = 'm', long, default_value_t = 10)]
    streams: usize,
    /// Client threads.
    #[arg(short = 't', long)]
    threads: Option<usize>,
    /// Open-loop rate (requests per second); latency then also coordinated-omission corrected.
    #[arg(long, conflicts_with = "rate_fraction")]
    rate: Option<f64>,
    /// Open-loop rate as a fraction of the baseline's saturation throughput, measured in a
    /// closed-loop pilot run of each cell (e.g. 0.5).
    #[arg(long, value_name = "F")]
    rate_fraction: Option<f64>,
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
    #[arg(long, value_name = "URL", requires = "a_endpoint")]
    b_endpoint: Option<String>,
    /// Run the baseline against itself with a known extra cost: one variant per
    /// --burn-levels, the baseline command with `--burn PERCENT` appended (it must be a
    /// `loadterm serve` command); implies --aa.
    #[arg(long)]
    calibrate: bool,
    /// Injected extra costs of --calibrate, percent of the server's own per-request CPU.
    #[arg(long, value_delimiter = ',', default_value = "3,10")]
    burn_levels: Vec<f64>,
    /// Plan the rounds so that a change of this size in CPU per request (req/s in endpoint
    /// mode) is detected with 80% power, from an A/A pilot (e.g. 3%).
    #[arg(long, value_name = "PCT", value_parser = parse_pct)]
    target_effect: Option<f64>,
    /// Rounds of the A/A pilot of --target-effect.
    #[arg(long, default_value_t = 8)]
    pilot_rounds: usize,
    /// Time budget of --target-effect: stop with "not measurable in the time allowed" when
    /// the planned rounds would not fit.
    #[arg(long, value_parser = parse_duration, requires = "target_effect")]
    max_time: Option<Duration>,
    /// Measure the noise floor first: the baseline against itself.
    #[arg(long)]
    aa: bool,
    /// Keep the first round (by default it is discarded as warm-up).
    #[arg(long)]
    keep_first_round: bool,
    /// Seed of the per-round order (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
    #[arg(long, value_name = "FILE")]
    markdown: Option<PathBuf>,
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// HTML report: the charts inline, the tables, the verdicts, the environment.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
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

/// A command line that cannot run (reported like clap's own errors: `main` exits with 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

fn usage_error(msg: impl std::fmt::Display) -> anyhow::Error {
    UsageError(msg.to_string()).into()
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
fn variants(a: &AbArgs) -> Result<Vec<(String, Target)>> {
    let templates = templates(&a.config_templates)?;
    let command = |name: &str, cmd: &str| Target::Command {
        command: cmd.to_owned(),
        config: templates
            .iter()
            .find(|(n, _)| n.as_deref() == Some(name))
            .or_else(|| templates.iter().find(|(n, _)| n.is_none()))
            .map(|(_, t)| t.clone()),
    };
    let mut out: Vec<(String, Target)> = Vec::new();
    if let (Some(ea), Some(eb)) = (&a.a_endpoint, &a.b_endpoint) {
        if !a.backends.is_empty() || !templates.is_empty() || a.calibrate {
            return Err(usage_error(
                "--backend, --config-template and --calibrate need servers started by ab, not endpoints",
            ));
        }
        out.push((a.a_name.clone(), Target::Endpoint(ea.clone())));
        out.push((a.b_name.clone(), Target::Endpoint(eb.clone())));
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
            (Some(ca), None) => {
                out.push((a.a_name.clone(), command(&a.a_name, ca)));
                out.push((a.b_name.clone(), command(&a.b_name, ca)));
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

/// Rounds of A against itself (the noise floor and the pilot): runs named `name` and `name'`.
fn aa_rounds(
    spec: &RunSpec,
    name: &str,
    rounds: usize,
    rng: &mut rand::rngs::StdRng,
    backends: &mut Backends,
) -> Result<Vec<Run>> {
    let twin = format!("{name}'");
    let mut out = Vec::new();
    for round in 0..rounds {
        backends.check_alive()?;
        let mut order = [0, 1];
        order.shuffle(rng);
        for k in order {
            let n = if k == 0 { name } else { twin.as_str() };
            out.push(measure::run(spec, n, round)?);
        }
    }
    Ok(out)
}

/// Per-round ratios `name'` / `name` of a metric.
fn aa_ratios(runs: &[Run], name: &str, metric: &str) -> Vec<f64> {
    let twin = format!("{name}'");
    runs.iter()
        .filter(|r| r.variant == twin)
        .filter_map(|r2| {
            let r1 = runs
                .iter()
                .find(|r| r.variant == name && r.round == r2.round)?;
            let v = r2.metric(metric) / r1.metric(metric);
            (v.is_finite() && v > 0.0).then_some(v)
        })
        .collect()
}

pub fn run(a: AbArgs) -> Result<()> {
    let t_start = std::time::Instant::now();
    let variants = variants(&a)?;
    if a.rounds < 2 {
        return Err(usage_error("--rounds must be at least 2"));
    }
    if a.target_effect.is_some() && a.pilot_rounds < 3 {
        return Err(usage_error("--pilot-rounds must be at least 3"));
    }
    if let Some(f) = a.rate_fraction {
        if !(f > 0.0 && f <= 1.0) {
            return Err(usage_error("--rate-fraction must be in (0, 1]"));
        }
    }
    for p in &a.proto {
        if !matches!(p.as_str(), "h1" | "h2" | "h3") {
            return Err(usage_error(format!("unknown protocol '{p}' (h1, h2, h3)")));
        }
    }
    let endpoint_mode = matches!(variants[0].1, Target::Endpoint(_));
    let aa = a.aa || a.calibrate;
    let environment = crate::env::capture();
    let reference = contam::settings(a.server_cpus.first().copied().unwrap_or(0));
    // In endpoint mode the server is elsewhere: only the client's cores are ours to check.
    let smt = if endpoint_mode {
        Vec::new()
    } else {
        contam::smt_shared(&a.server_cpus, &a.client_cpus, contam::sysfs_siblings)
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    }));
    let mut vars = Vars::default();
    vars.set("host", &a.host);
    let mut backends = Backends::start(&a.backends, &a.host, &a.backend_cpus, &mut vars)?;
    let mut base_args = vec![
        "-c".to_owned(),
        a.connections.to_string(),
        "-m".to_owned(),
        a.streams.to_string(),
    ];
    if let Some(t) = a.threads {
        base_args.extend(["-t".to_owned(), t.to_string()]);
    }
    let sizes: Vec<Option<&String>> = if a.size.is_empty() {
        vec![None]
    } else {
        a.size.iter().map(Some).collect()
    };
    let first = usize::from(!a.keep_first_round);
    let headline = if endpoint_mode {
        "rps"
    } else {
        "cpu_us_per_req"
    };
    let mut cells = Vec::new();
    for proto in &a.proto {
        for size in &sizes {
            let url_of = |i: usize| {
                let u = if i == 1 {
                    a.b_url.as_deref().unwrap_or(&a.url)
                } else {
                    &a.url
                };
                size.map_or(u.to_owned(), |s| with_size(u, s))
            };
            let vs: Vec<(Variant, Target)> = variants
                .iter()
                .enumerate()
                .map(|(i, (n, t))| {
                    let command = match t {
                        Target::Command { command, .. } => command.clone(),
                        Target::Endpoint(u) => format!("(endpoint) {u}"),
                    };
                    (
                        Variant {
                            name: n.clone(),
                            command,
                            url: url_of(i),
                        },
                        t.clone(),
                    )
                })
                .collect();
            let tag = format!("[{proto} {}]", vs[0].0.url);
            let spec = |k: usize, load_args: &[String]| {
                let mut v = vars.clone();
                v.set("variant", &vs[k].0.name);
                RunSpec {
                    target: vs[k].1.clone(),
                    proto: proto.clone(),
                    host: a.host.clone(),
                    url: vs[k].0.url.clone(),
                    server_cpus: a.server_cpus.clone(),
                    client_cpus: a.client_cpus.clone(),
                    warmup: a.warmup,
                    duration: a.duration,
                    load_args: load_args.to_vec(),
                    vars: v,
                    reference: reference.clone(),
                    smt: smt.clone(),
                }
            };
            // The load regime, decided once per cell.
            let mut load_args = base_args.clone();
            let regime = match (a.rate, a.rate_fraction) {
                (Some(r), _) => {
                    load_args.extend(["--rate".to_owned(), r.to_string()]);
                    format!(
                        "open loop at {r:.0} req/s (fixed --rate), -c {} -m {}",
                        a.connections, a.streams
                    )
                }
                (None, Some(f)) => {
                    eprintln!("{tag} pilot: the baseline's saturation throughput");
                    let pilot = measure::run(&spec(0, &base_args), &vs[0].0.name, 0)?;
                    let rate = (pilot.rps * f).max(1.0);
                    load_args.extend(["--rate".to_owned(), format!("{rate:.0}")]);
                    format!(
                        "open loop at {rate:.0} req/s = {f} × the baseline's saturation ({:.0} req/s closed loop in a pilot run), -c {} -m {}",
                        pilot.rps, a.connections, a.streams
                    )
                }
                (None, None) => format!(
                    "closed loop, saturating client (-c {} -m {})",
                    a.connections, a.streams
                ),
            };
            let mut notes = Vec::new();
            let mut rounds = a.rounds;
            if let Some(effect) = a.target_effect {
                eprintln!("{tag} A/A pilot: {} rounds", a.pilot_rounds);
                let pilot = aa_rounds(
                    &spec(0, &load_args),
                    &vs[0].0.name,
                    a.pilot_rounds,
                    &mut rng,
                    &mut backends,
                )?;
                let ratios = aa_ratios(&pilot, &vs[0].0.name, headline);
                let s = power::log_spread(&ratios)
                    .with_context(|| format!("{tag} the pilot measured no {headline} spread"))?;
                let sigma = power::sigma_upper(s, ratios.len());
                rounds = power::rounds_for(effect, sigma);
                let per_run = pilot.iter().map(|r| r.wall_s).sum::<f64>() / pilot.len() as f64;
                let runs_needed =
                    (rounds + first) * vs.len() + if aa { 2 * (rounds + first) } else { 0 };
                let estimate = per_run * runs_needed as f64;
                let plan = format!(
                    "planned {rounds} rounds for a {:.1}% change in {headline} with 80% power (5% two-sided) from an A/A pilot of {} rounds: log-ratio spread {:.2}% (80% upper bound {:.2}%), about {:.0} s of runs",
                    effect * 100.0, a.pilot_rounds, s * 100.0, sigma * 100.0, estimate
                );
                eprintln!("{tag} {plan}");
                if let Some(max) = a.max_time {
                    let left = max.as_secs_f64() - t_start.elapsed().as_secs_f64();
                    if estimate > left {
                        let affordable = ((left / per_run) as usize
                            / (vs.len() + if aa { 2 } else { 0 }))
                        .saturating_sub(first);
                        let reach = if affordable >= power::MIN_ROUNDS {
                            format!(
                                "the {affordable} rounds that fit resolve {:.1}%",
                                power::detectable(affordable, sigma) * 100.0
                            )
                        } else {
                            format!("fewer than {} rounds fit", power::MIN_ROUNDS)
                        };
                        bail!(
                            "not measurable in the time allowed: {tag} a {:.1}% change needs {rounds} rounds (about {estimate:.0} s); --max-time leaves {:.0} s, in which {reach}",
                            effect * 100.0, left.max(0.0)
                        );
                    }
                }
                notes.push(plan);
            }
            let mut aa_runs = Vec::new();
            if aa {
                eprintln!("{tag} A/A noise floor: {rounds} rounds");
                aa_runs = aa_rounds(
                    &spec(0, &load_args),
                    &vs[0].0.name,
                    rounds + first,
                    &mut rng,
                    &mut backends,
                )?;
                aa_runs.retain(|r| r.round >= first);
            }
            let mut runs = Vec::new();
            for round in 0..rounds + first {
                backends.check_alive()?;
                let mut order: Vec<usize> = (0..vs.len()).collect();
                order.shuffle(&mut rng);
                eprintln!(
                    "{tag} round {}/{}{}",
                    round + 1,
                    rounds + first,
                    if round < first {
                        " (warm-up, discarded)"
                    } else {
                        ""
                    }
                );
                for k in order {
                    let r = measure::run(&spec(k, &load_args), &vs[k].0.name, round)?;
                    if r.errors > 0 {
                        eprintln!(
                            "  warning: {} had {} transport errors in round {}",
                            vs[k].0.name,
                            r.errors,
                            round + 1
                        );
                    }
                    if round >= first {
                        runs.push(r);
                    }
                }
            }
            let base = &vs[0].0.name;
            let aa_name = format!("{base}'");
            let mut comparisons = Vec::new();
            for (v, _) in &vs[1..] {
                for metric in METRICS {
                    let floor = aa
                        .then(|| noise(metric, &aa_runs, base, &aa_name))
                        .flatten();
                    comparisons.extend(compare(metric, base, &v.name, &runs, floor));
                }
            }
            if a.calibrate {
                notes.extend(calibration_notes(
                    &comparisons,
                    &aa_runs,
                    base,
                    &a.burn_levels,
                    rounds,
                ));
            }
            cells.push(Cell {
                proto: proto.clone(),
                url: vs[0].0.url.clone(),
                variants: vs.into_iter().map(|(v, _)| v).collect(),
                runs,
                aa_runs,
                comparisons,
                regime,
                rounds,
                notes,
            });
        }
    }
    drop(backends);
    let report = Report {
        environment,
        discarded_first_round: !a.keep_first_round,
        not_measured: endpoint_mode.then(|| {
            "endpoint mode: the servers are not started by ab, so server CPU per request, server CPU utilisation, RSS and context switches are not measured, and the contamination checks cover the client's cores only; latency, throughput and errors are, in interleaved paired rounds".to_owned()
        }),
        cells,
    };
    print!("{}", report::terminal(&report));
    let write = |path: &Option<PathBuf>, text: &dyn Fn() -> Result<String>| -> Result<()> {
        if let Some(p) = path {
            std::fs::write(p, text()?).with_context(|| format!("cannot write {}", p.display()))?;
        }
        Ok(())
    };
    write(&a.markdown, &|| Ok(report::markdown(&report)))?;
    write(&a.json, &|| {
        Ok(serde_json::to_string_pretty(&report)? + "\n")
    })?;
    write(&a.svg, &|| crate::plot::report_svg(&report))?;
    write(&a.html, &|| report::html(&report, crate::plot::cell_svg))?;
    if report.cells.iter().all(|c| c.runs.is_empty()) {
        bail!("no run completed");
    }
    Ok(())
}

/// What --calibrate found: per injected level, the measured change and whether it was detected;
/// and the smallest change these rounds detect with 80% power, from the A/A spread.
fn calibration_notes(
    comparisons: &[crate::compare::Comparison],
    aa_runs: &[Run],
    base: &str,
    levels: &[f64],
    rounds: usize,
) -> Vec<String> {
    let mut notes = Vec::new();
    for level in levels {
        let name = format!("{base}+burn{level}%");
        if let Some(c) = comparisons
            .iter()
            .find(|c| c.variant == name && c.metric == "cpu_us_per_req")
        {
            notes.push(format!(
                "calibration: injected +{level}% CPU per request, measured {} ({}), {}",
                signed_pct(c.change_pct),
                c.ci_pct.map_or("no CI".into(), |(lo, hi)| format!(
                    "95% CI {} to {}",
                    signed_pct(lo),
                    signed_pct(hi)
                )),
                if c.significant {
                    "detected"
                } else {
                    "not detected"
                }
            ));
        }
    }
    let ratios = aa_ratios(aa_runs, base, "cpu_us_per_req");
    if rounds < power::MIN_ROUNDS {
        notes.push(format!(
            "calibration: no change is detectable with {rounds} rounds (the median's 95% CI needs at least {})",
            power::MIN_ROUNDS
        ));
    } else if let Some(s) = power::log_spread(&ratios) {
        notes.push(format!(
            "calibration: with {rounds} rounds of this length, the smallest change in CPU per request detected with 80% power is about {:.1}% (A/A log-ratio spread {:.2}% over {} rounds)",
            power::detectable(rounds, s) * 100.0,
            s * 100.0,
            ratios.len()
        ));
    }
    notes
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
            Target::Command { config, .. } => config.clone().unwrap(),
            Target::Endpoint(_) => panic!("a command"),
        };
        assert_eq!(
            config(0),
            ("all.conf".to_owned(), "every {variant}".to_owned())
        );
        assert_eq!(config(1), ("one.conf".to_owned(), "only B".to_owned()));
        let err = variants(&args(&[
            "--a",
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
            Target::Command { command, .. } => assert_eq!(command, "serve --burn 5"),
            Target::Endpoint(_) => panic!("a command"),
        }
    }

    #[test]
    fn size_replacement() {
        assert_eq!(with_size("/?s=1k&t=5", "256k"), "/?s=256k&t=5");
        assert_eq!(with_size("/", "1k"), "/?s=1k");
        assert_eq!(with_size("/x?k=1", "2k"), "/x?s=2k&k=1");
    }
}

//! The matrix of a comparison (protocols × sizes): what its cells share, each cell measured
//! in turn, and the report files written.

use crate::cell::{CellPlan, Regime, Servers};
use crate::compare::{signed_pct, Comparison};
use crate::contam;
use crate::fixture::Vars;
use crate::host::{Backends, ClientHost, ServerHost};
use crate::measure::{Run, RunSpec, VariantServer};
use crate::metric::Metric;
use crate::options::{window_duration, AbArgs};
use crate::procs;
use crate::protocol::Protocol;
use crate::report;
use crate::results::{Cell, MatrixReport, Variant};
use anyhow::{bail, Context, Result};
use rand::SeedableRng;
use std::path::PathBuf;
use std::sync::Arc;

/// `loadterm load --send-grid` of every run (it only acts in open loop).
const SEND_GRID: &str = "250us";

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

/// What every cell of the comparison shares: the run its cells start from, how they are
/// measured, and the state carried from cell to cell (backends, the order's random generator).
pub(crate) struct Bench {
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
    pub(crate) fn start(
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
            proto: Protocol::default(),
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
pub(crate) fn run_cells(
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
    for &proto in &a.proto {
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
                let level = level.map(|l| (l, &closed[..]));
                match run_cell(a, variants, bench, proto, *size, level, deadline)? {
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
    proto: Protocol,
    size: Option<&String>,
    // The level (`--levels`) and the closed-loop pilot of the request's first level, if run.
    level: Option<(f64, &[Run])>,
    deadline: std::time::Instant,
) -> Result<Option<Cell>> {
    let t_cell = std::time::Instant::now();
    let template = RunSpec {
        proto,
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
        max_repeats: a.max_repeats,
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
pub(crate) fn write_folded(a: &AbArgs, report: &mut MatrixReport) -> Result<()> {
    let Some(json) = &a.json else {
        return Ok(());
    };
    let stem = json.with_extension("");
    let safe = |t: &str| t.replace(|c: char| !c.is_ascii_alphanumeric(), "_");
    for c in &mut report.cells {
        let (proto, url) = (c.proto, c.url.clone());
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
pub(crate) fn write_reports(a: &AbArgs, report: &MatrixReport) -> Result<()> {
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

    #[test]
    fn size_replacement() {
        assert_eq!(with_size("/?s=1k&t=5", "256k"), "/?s=256k&t=5");
        assert_eq!(with_size("/", "1k"), "/?s=1k");
        assert_eq!(with_size("/x?k=1", "2k"), "/x?s=2k&k=1");
    }
}

//! `loadterm ab`: interleaved rounds of fresh server processes, paired statistics, verdicts.

use crate::compare::{compare, noise};
use crate::measure::{self, RunSpec, METRICS};
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
    #[arg(long)]
    rate: Option<f64>,
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

pub fn run(a: AbArgs) -> Result<()> {
    let mut variants: Vec<(String, String)> = Vec::new();
    if !a.variants.is_empty() {
        for v in &a.variants {
            let (n, c) = v
                .split_once('=')
                .ok_or_else(|| usage_error(format!("--variant '{v}': expected NAME=CMD")))?;
            variants.push((n.to_owned(), c.to_owned()));
        }
    } else {
        match (&a.a, &a.b) {
            (Some(ca), Some(cb)) => {
                variants = vec![
                    (a.a_name.clone(), ca.clone()),
                    (a.b_name.clone(), cb.clone()),
                ]
            }
            (Some(ca), None) => {
                variants = vec![
                    (a.a_name.clone(), ca.clone()),
                    (a.b_name.clone(), ca.clone()),
                ]
            }
            _ => {
                return Err(usage_error(
                    "give --a CMD [--b CMD] or several --variant NAME=CMD",
                ))
            }
        }
    }
    if variants.len() < 2 {
        return Err(usage_error("at least two variants are needed"));
    }
    let mut names: Vec<&str> = variants.iter().map(|v| v.0.as_str()).collect();
    names.sort_unstable();
    if names.windows(2).any(|w| w[0] == w[1]) {
        return Err(usage_error(
            "variant names must differ (use --a-name/--b-name)",
        ));
    }
    if a.rounds < 2 {
        return Err(usage_error("--rounds must be at least 2"));
    }
    for p in &a.proto {
        if !matches!(p.as_str(), "h1" | "h2" | "h3") {
            return Err(usage_error(format!("unknown protocol '{p}' (h1, h2, h3)")));
        }
    }
    let environment = crate::env::capture();
    let mut rng = rand::rngs::StdRng::seed_from_u64(a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    }));
    let mut load_args = vec![
        "-c".to_owned(),
        a.connections.to_string(),
        "-m".to_owned(),
        a.streams.to_string(),
    ];
    if let Some(t) = a.threads {
        load_args.extend(["-t".to_owned(), t.to_string()]);
    }
    if let Some(r) = a.rate {
        load_args.extend(["--rate".to_owned(), r.to_string()]);
    }
    let sizes: Vec<Option<&String>> = if a.size.is_empty() {
        vec![None]
    } else {
        a.size.iter().map(Some).collect()
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
            let vs: Vec<Variant> = variants
                .iter()
                .enumerate()
                .map(|(i, (n, c))| Variant {
                    name: n.clone(),
                    command: c.clone(),
                    url: url_of(i),
                })
                .collect();
            let spec = |v: &Variant| RunSpec {
                command: v.command.clone(),
                proto: proto.clone(),
                host: a.host.clone(),
                url: v.url.clone(),
                server_cpus: a.server_cpus.clone(),
                client_cpus: a.client_cpus.clone(),
                warmup: a.warmup,
                duration: a.duration,
                load_args: load_args.clone(),
            };
            let first = usize::from(!a.keep_first_round);
            let mut aa_runs = Vec::new();
            let aa_name = format!("{}'", vs[0].name);
            if a.aa {
                eprintln!(
                    "[{proto} {}] A/A noise floor: {} rounds",
                    vs[0].url, a.rounds
                );
                for round in 0..a.rounds + first {
                    let mut order = [0, 1];
                    order.shuffle(&mut rng);
                    for k in order {
                        let name = if k == 0 {
                            vs[0].name.clone()
                        } else {
                            aa_name.clone()
                        };
                        let r = measure::run(&spec(&vs[0]), &name, round)?;
                        if round >= first {
                            aa_runs.push(r);
                        }
                    }
                }
            }
            let mut runs = Vec::new();
            for round in 0..a.rounds + first {
                let mut order: Vec<usize> = (0..vs.len()).collect();
                order.shuffle(&mut rng);
                eprintln!(
                    "[{proto} {}] round {}/{}{}",
                    vs[0].url,
                    round + 1,
                    a.rounds + first,
                    if round < first {
                        " (warm-up, discarded)"
                    } else {
                        ""
                    }
                );
                for k in order {
                    let r = measure::run(&spec(&vs[k]), &vs[k].name, round)?;
                    if r.errors > 0 {
                        eprintln!(
                            "  warning: {} had {} transport errors in round {}",
                            vs[k].name,
                            r.errors,
                            round + 1
                        );
                    }
                    if round >= first {
                        runs.push(r);
                    }
                }
            }
            let mut comparisons = Vec::new();
            for v in &vs[1..] {
                for (metric, _) in METRICS {
                    let floor =
                        a.aa.then(|| noise(metric, &aa_runs, &vs[0].name, &aa_name))
                            .flatten();
                    comparisons.extend(compare(metric, &vs[0].name, &v.name, &runs, floor));
                }
            }
            cells.push(Cell {
                proto: proto.clone(),
                url: vs[0].url.clone(),
                variants: vs,
                runs,
                aa_runs,
                comparisons,
            });
        }
    }
    let report = Report {
        environment,
        rounds: a.rounds,
        discarded_first_round: !a.keep_first_round,
        cells,
    };
    print!("{}", report::terminal(&report));
    let write = |path: &Option<PathBuf>, text: String| -> Result<()> {
        if let Some(p) = path {
            std::fs::write(p, text).with_context(|| format!("cannot write {}", p.display()))?;
        }
        Ok(())
    };
    write(&a.markdown, report::markdown(&report))?;
    write(&a.json, serde_json::to_string_pretty(&report)? + "\n")?;
    write(&a.svg, report::svg(&report))?;
    if report.cells.iter().all(|c| c.runs.is_empty()) {
        bail!("no run completed");
    }
    Ok(())
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

//! `loadterm ab`: the command line, its checks, and the entry points that measure the
//! comparison (`matrix`) and report it.

pub use crate::options::AbArgs;

use crate::agent::client::AgentClient;
use crate::host::{ClientHost, ServerHost};
use crate::matrix::{run_cells, write_folded, write_reports, Bench};
use crate::measure::VariantServer;
use crate::metric::Metric;
use crate::options::window_duration;
use crate::procs;
use crate::report;
use crate::results::MatrixReport;
use anyhow::{bail, Context, Result};
use loadterm_plan::exit::{usage_error, Interrupted, Judgement};
use std::sync::Arc;
use std::time::Duration;

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
    Ok(())
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
    /// Levels are fractions of a throughput, each given once, and choose the load: no other
    /// regime beside them.
    #[test]
    fn levels_are_checked() {
        let a = args(&["--a", "x", "--b", "y", "--levels", "0.25,0.5,0.9"]);
        assert_eq!(a.levels, [0.25, 0.5, 0.9]);
        assert!(validate(&a).is_ok());
        for (bad, why) in [
            ("0,0.5", "in (0, 1]"),
            ("0.5,1.5", "in (0, 1]"),
            ("0.5,0.5", "given twice"),
        ] {
            let e = validate(&args(&["--a", "x", "--b", "y", "--levels", bad])).unwrap_err();
            assert!(e.to_string().contains(why), "{bad}: {e}");
        }
        #[derive(clap::Parser, Debug)]
        struct Line {
            #[command(flatten)]
            ab: AbArgs,
        }
        for other in [
            &["--rate", "100"][..],
            &["--rate-fraction", "0.3"],
            &["--closed-loop"],
        ] {
            let line = [&["ab", "--a", "x", "--levels", "0.5"][..], other].concat();
            let e = <Line as clap::Parser>::try_parse_from(line).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{other:?}: {e}");
        }
    }

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
}

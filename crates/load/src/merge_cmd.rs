//! `loadterm merge` command line: reads the files, hands them to `merge`, writes the results.

use crate::cli::{emit, JsonOut};
use crate::merge;
use crate::report::Report;
use anyhow::{Context, Result};
use loadterm_plan::exit::usage_error;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    /// JSON reports (`loadterm load --json`) and HdrHistogram interval logs (`--hdr-log`) of
    /// the runs to merge, told apart by their content.
    #[arg(required = true, value_name = "FILE")]
    inputs: Vec<PathBuf>,
    /// Write the merged report as JSON here (`-` for stdout); same schema as `loadterm load`.
    #[arg(long, value_name = "FILE")]
    json: Option<String>,
    /// Write the merged interval log here (required when interval logs are given).
    #[arg(long, value_name = "FILE")]
    hdr_log: Option<PathBuf>,
    /// Merge runs of different URLs, protocols, -m or loop modes all the same.
    #[arg(long)]
    force: bool,
    /// No text summary.
    #[arg(short = 'q', long)]
    quiet: bool,
}

pub fn run(a: MergeArgs) -> Result<()> {
    let mut reports = Vec::new();
    let mut logs = Vec::new();
    for path in &a.inputs {
        let name = path.display().to_string();
        let bytes = std::fs::read(path).with_context(|| format!("cannot read {name}"))?;
        // A report is a JSON object; an interval log is lines of text, none starting with `{`.
        if bytes.trim_ascii_start().starts_with(b"{") {
            let r: Report = serde_json::from_slice(&bytes).with_context(|| {
                format!("{name}: not a report of `loadterm load --json` (of this version)")
            })?;
            reports.push((name, r));
        } else {
            logs.push((name, bytes));
        }
    }
    if !logs.is_empty() && a.hdr_log.is_none() {
        return Err(usage_error(
            "interval logs given: say where to write their merge with --hdr-log",
        ));
    }
    if reports.is_empty() && a.json.is_some() {
        return Err(usage_error(
            "--json needs reports to merge (only interval logs were given)",
        ));
    }
    // All inputs are read and merged before anything is written.
    let report = (!reports.is_empty())
        .then(|| merge::reports(&reports, a.force))
        .transpose()?;
    let log = (!logs.is_empty())
        .then(|| {
            let named: Vec<(String, &[u8])> = logs
                .iter()
                .map(|(n, b)| (n.clone(), b.as_slice()))
                .collect();
            merge::interval_logs(&named)
        })
        .transpose()?;
    if let (Some(path), Some(log)) = (&a.hdr_log, log) {
        std::fs::write(path, log).with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let Some(r) = &report {
        let json = a.json.as_deref().map(JsonOut::open).transpose()?;
        emit(r, json, a.quiet)?;
    }
    Ok(())
}

//! What a comparison found: each matrix cell's variants, runs, comparisons and capacity, and
//! the whole matrix with the machine it ran on. Built by the cells, rendered by `report`,
//! `plot` and `export`.

use crate::compare::Comparison;
use crate::env::Environment;
use crate::measure::Run;
use crate::protocol::Protocol;
use serde::Serialize;

/// Results of one matrix cell (protocol × URL).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Cell {
    pub proto: Protocol,
    pub url: String,
    pub variants: Vec<Variant>,
    pub runs: Vec<Run>,
    pub aa_runs: Vec<Run>,
    pub comparisons: Vec<Comparison>,
    /// A series (`--series`): each variant against the one before it, from the same rounds.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<Comparison>,
    /// The load regime every verdict of this cell is about.
    pub regime: String,
    /// The load level asked for (`--levels`): a fraction of the baseline's closed-loop
    /// throughput.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level: Option<f64>,
    /// The open-loop rate of the rounds, per variant (none in a closed loop).
    pub rate: Option<f64>,
    /// The pilot's closed-loop window, which the next levels of the request reuse.
    #[serde(skip)]
    pub closed_pilot: Vec<Run>,
    /// Measured rounds (planned from a pilot with `--target-effect`).
    pub rounds: usize,
    /// How the rounds were planned, or what the calibration found (sentences).
    pub notes: Vec<String>,
    /// The profiled rounds' runs (`--profile`), which feed no verdict.
    pub profiled_runs: Vec<Run>,
    /// Where the CPU went (`--profile`).
    pub profile: Option<crate::profile::CellProfile>,
    /// Each variant's load against its closed-loop capacity (open loop after a pilot).
    pub capacity: Vec<Capacity>,
}

/// The load a verdict was taken at, against what the variant can do.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Capacity {
    pub variant: String,
    /// Its throughput in the pilot's closed-loop window.
    pub closed_loop_rps: f64,
    /// The rate of the rounds over that throughput.
    pub fraction: f64,
    /// CPU per request in that closed-loop window, and at the rate (median of the rounds).
    pub closed_loop_cpu_us_per_req: Option<f64>,
    pub cpu_us_per_req: Option<f64>,
}

/// Costs per request further apart than this between the rate and the closed loop: the
/// per-wake-up overhead of a low rate (or the batching of saturation) is then a large part of
/// what the verdict measures.
pub(crate) const COST_RATIO_WARN: f64 = 1.5;

impl Capacity {
    /// "load: B at 0.50 of its closed-loop capacity (8 200 req/s); CPU per request 14.2 µs at
    /// the rate, 11.0 µs in a closed loop (1.29×)", and a warning beyond `COST_RATIO_WARN`.
    pub(crate) fn note(&self) -> Option<String> {
        let (open, closed) = (self.cpu_us_per_req?, self.closed_loop_cpu_us_per_req?);
        let ratio = open / closed;
        let warn = if !(1.0 / COST_RATIO_WARN..=COST_RATIO_WARN).contains(&ratio) {
            format!(
                " — WARNING: over {COST_RATIO_WARN}× apart: at this load the cost per request is mostly {}, and a change in the response path may read differently at another load (--levels)",
                if ratio > 1.0 {
                    "per-wake-up overhead"
                } else {
                    "what saturation batches away"
                }
            )
        } else {
            String::new()
        };
        Some(format!(
            "load: {} at {:.2} of its closed-loop capacity ({:.0} req/s); CPU per request {open:.2} µs at the rate, {closed:.2} µs in a closed loop ({ratio:.2}×){warn}",
            self.variant, self.fraction, self.closed_loop_rps
        ))
    }
}

impl Cell {
    /// The headline metric: server CPU per request, or req/s when no server CPU was measured.
    pub(crate) fn headline(&self) -> crate::metric::Metric {
        if self.runs.iter().any(|r| r.cpu_us_per_req.is_some()) {
            crate::metric::Metric::CpuUsPerReq
        } else {
            crate::metric::Metric::Rps
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Variant {
    pub name: String,
    pub command: String,
    pub url: String,
    /// How its server's CPU and memory were read (none in endpoint mode).
    pub accounting: Option<crate::cgroup::Accounting>,
}

/// What `loadterm ab` reports: the machine it ran on and every cell of the matrix.
#[derive(Debug, Serialize)]
pub(crate) struct MatrixReport {
    /// SIGINT or SIGTERM ended the comparison: the cells hold the rounds measured until then.
    pub interrupted: bool,
    pub environment: Environment,
    pub discarded_first_round: bool,
    /// What this mode could not measure (endpoint mode: everything on the server side).
    pub not_measured: Option<String>,
    pub cells: Vec<Cell>,
}

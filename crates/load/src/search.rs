//! `--find-max-rate`: the objectives (`--slo`), each trial judged against them, and the search
//! for the highest rate that meets them all (sans-I/O: `cli` runs the trials it asks for).
//!
//! The search doubles the rate from the first one while trials pass, then bisects between the
//! last passing and the first failing rate until they are within `precision` of each other.

use crate::report::Report;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// What an objective bounds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Quantity {
    /// A percentile (0..100) of the corrected latency, from the intended send time.
    Percentile(f64),
    Mean,
    Max,
    /// Failed requests (transport errors and statuses other than 2xx/3xx) over those started.
    Errors,
}

/// One objective: `metric <= bound` (µs for latencies, a fraction for errors).
#[derive(Debug, Clone, PartialEq)]
pub struct Slo {
    pub metric: Quantity,
    pub bound: f64,
    /// As the user wrote it, for the report.
    text: String,
}

impl Slo {
    /// `p99<=10ms`, `p99.9<=50ms`, `mean<=2ms`, `max<=1s`, `errors<=0.1%` (or `<`).
    pub fn parse(s: &str) -> Result<Slo> {
        let (name, bound) = s
            .split_once("<=")
            .or_else(|| s.split_once('<'))
            .with_context(|| {
                format!("'{s}': expected METRIC<=BOUND, e.g. p99<=10ms or errors<=0.1%")
            })?;
        let (name, bound) = (name.trim().to_ascii_lowercase(), bound.trim());
        let metric = match name.as_str() {
            "errors" => Quantity::Errors,
            "mean" => Quantity::Mean,
            "max" => Quantity::Max,
            p => {
                let q: f64 = p
                    .strip_prefix('p')
                    .and_then(|q| q.parse().ok())
                    .with_context(|| {
                        format!("'{s}': unknown metric '{p}' (p50, p99, p99.9, mean, max, errors)")
                    })?;
                if !(q > 0.0 && q < 100.0) {
                    bail!("'{s}': a percentile between 0 and 100");
                }
                Quantity::Percentile(q)
            }
        };
        let bound = if metric == Quantity::Errors {
            let v = match bound.strip_suffix('%') {
                Some(pct) => pct.trim().parse::<f64>().map(|v| v / 100.0),
                None => bound.parse::<f64>(),
            }
            .with_context(|| format!("'{s}': an error share, e.g. 0.1% or 0.001"))?;
            if !(0.0..=1.0).contains(&v) {
                bail!("'{s}': an error share between 0 and 100%");
            }
            v
        } else {
            loadterm_plan::units::parse_duration(bound)
                .map_err(anyhow::Error::msg)
                .with_context(|| format!("'{s}'"))?
                .as_secs_f64()
                * 1e6
        };
        Ok(Slo {
            metric,
            bound,
            text: s.trim().to_owned(),
        })
    }

    /// As written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// What a trial came to on this objective; `None` when it has no figure (nothing completed).
    fn value(&self, t: &Trial) -> Option<f64> {
        match self.metric {
            Quantity::Errors => Some(t.errors),
            Quantity::Mean => t.corrected_mean_us,
            Quantity::Max => t.latency_at(100.0),
            Quantity::Percentile(q) => t.latency_at(q),
        }
    }
}

/// What one trial (a run at one constant rate) came to.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Trial {
    /// Offered (intended) rate.
    pub rate: f64,
    /// Completed per second.
    pub rps: f64,
    /// Failed over started.
    pub errors: f64,
    /// Sends more than 1 ms behind schedule, over those sent.
    pub late: f64,
    /// Intended sends that never happened, over those intended.
    pub missed: f64,
    /// The client's CPU time over its threads' wall time (1.0: every worker thread busy).
    pub client_cpu: f64,
    /// Corrected latency: the percentiles 50, 90, 99, 99.9 and the max, in µs.
    pub corrected_us: Option<Vec<(f64, f64)>>,
    pub corrected_mean_us: Option<f64>,
    /// The objectives it missed, as written (empty: it passed).
    pub failed: Vec<String>,
    /// Why the client, not the server, may have been the limit (none when it was not).
    pub client_limit: Option<String>,
}

/// Percentiles kept for each trial, for the table and the curve; an objective on another one
/// reads it from the trial's histogram when judged (`judge`).
pub const QUANTILES: [f64; 5] = [50.0, 90.0, 99.0, 99.9, 100.0];

/// The share of intended sends a trial may miss and still pass: fewer completions than that
/// means the server (or the client) did not carry the rate, whatever the latency of the
/// requests that were sent.
pub const MISSED_MAX: f64 = 0.01;
/// Client CPU (busy share of its threads) and late sends from which a failing trial is said
/// to be limited by the client.
pub const CLIENT_CPU_MAX: f64 = 0.9;
pub const LATE_MAX: f64 = 0.05;

impl Trial {
    /// A trial from its run's report, judged against `slos`; `hist` is the corrected
    /// latency's histogram, for the percentiles the objectives name.
    /// `slots` is how many requests the client can have in flight (-c × -m).
    pub fn judge(
        rate: f64,
        rep: &Report,
        hist: &hdrhistogram::Histogram<u64>,
        client_cpu: f64,
        slots: usize,
        slos: &[Slo],
    ) -> Trial {
        let ol = rep.open_loop.as_ref();
        let intended = rate * rep.run.duration_s;
        let sent = ol.map_or(0, |o| o.sent).max(1) as f64;
        let mut t = Trial {
            rate,
            rps: rep.rps,
            errors: rep.requests.failed as f64 / rep.requests.started.max(1) as f64,
            late: ol.map_or(0, |o| o.late) as f64 / sent,
            missed: ol.map_or(0, |o| o.missed) as f64 / intended.max(1.0),
            client_cpu,
            corrected_us: (!hist.is_empty()).then(|| {
                QUANTILES
                    .iter()
                    .map(|&q| (q, hist.value_at_quantile(q / 100.0) as f64))
                    .collect()
            }),
            corrected_mean_us: (!hist.is_empty()).then(|| hist.mean()),
            failed: Vec::new(),
            client_limit: None,
        };
        for slo in slos {
            let value = match slo.metric {
                Quantity::Percentile(q) if !hist.is_empty() => {
                    Some(hist.value_at_quantile(q / 100.0) as f64)
                }
                _ => slo.value(&t),
            };
            if value.is_none_or(|v| v > slo.bound) {
                t.failed.push(slo.text().to_owned());
            }
        }
        if t.missed > MISSED_MAX {
            t.failed
                .push(format!("{:.1}% of the sends missed", t.missed * 100.0));
        }
        if !t.failed.is_empty() {
            // Little's law: the rate times the time a request holds its slot is how many
            // slots it needs; with all of them busy, sends wait for one (late), whatever the
            // server could do with more.
            let held_s = rep.latency_us.as_ref().map_or(0.0, |p| p.mean / 1e6);
            let mut why = Vec::new();
            if client_cpu >= CLIENT_CPU_MAX {
                why.push(format!("its CPU {:.0}% busy", client_cpu * 100.0));
            }
            if t.late >= LATE_MAX {
                if rate * held_s >= 0.9 * slots as f64 {
                    why.push(format!(
                        "{:.1}% of sends late, every one of the {slots} request slots (-c × -m) \
                         busy: at {:.2} ms a request they carry at most {:.0} req/s",
                        t.late * 100.0,
                        held_s * 1e3,
                        slots as f64 / held_s.max(1e-9)
                    ));
                } else {
                    why.push(format!(
                        "{:.1}% of sends late with request slots free (its timers lagged: a busy machine)",
                        t.late * 100.0
                    ));
                }
            }
            t.client_limit = (!why.is_empty()).then(|| why.join("; "));
        }
        t
    }

    pub fn passed(&self) -> bool {
        self.failed.is_empty()
    }

    /// The corrected latency at percentile `q` (one of `QUANTILES`).
    pub fn latency_at(&self, q: f64) -> Option<f64> {
        self.corrected_us
            .as_ref()?
            .iter()
            .find(|(k, _)| *k == q)
            .map(|(_, v)| *v)
    }
}

/// The search's state: the last passing and first failing rates seen.
#[derive(Debug, Clone)]
pub struct Search {
    next: Option<f64>,
    pass: Option<f64>,
    fail: Option<f64>,
    precision: f64,
    max: f64,
}

impl Search {
    /// From `start`, doubling up to `max`, bisecting until within `precision` (a fraction).
    pub fn new(start: f64, max: f64, precision: f64) -> Search {
        Search {
            next: Some(start.min(max)),
            pass: None,
            fail: None,
            precision,
            max,
        }
    }

    /// The rate to try next, or `None` when the search is over.
    pub fn next(&self) -> Option<f64> {
        self.next
    }

    /// The trial at `rate` passed or not.
    pub fn record(&mut self, rate: f64, passed: bool) {
        if passed {
            self.pass = Some(self.pass.map_or(rate, |p| p.max(rate)));
        } else {
            self.fail = Some(self.fail.map_or(rate, |f| f.min(rate)));
        }
        self.next = match (self.pass, self.fail) {
            // Nothing fails up to the cap: that is the answer.
            (Some(p), None) if p >= self.max => None,
            (Some(p), None) => Some((p * 2.0).min(self.max)),
            // Even the first rate fails: bisect down towards 0.
            (None, Some(f)) if f <= 1.0 => None,
            (None, Some(f)) => Some(f / 2.0),
            (Some(p), Some(f)) if f - p <= self.precision * p => None,
            (Some(p), Some(f)) => Some(((p + f) / 2.0).round().max(1.0)),
            (None, None) => unreachable!("a rate was recorded"),
        };
        // Halving from a failing start: each halving is a bisection step, the upper bound
        // kept; once a rate passes, bisection proper takes over.
        if let (None, Some(_), Some(n)) = (self.pass, self.fail, self.next) {
            self.next = Some(n.round().max(1.0));
        }
    }

    /// The highest passing rate and the lowest failing one seen.
    pub fn bounds(&self) -> (Option<f64>, Option<f64>) {
        (self.pass, self.fail)
    }
}

/// What the search found, as reported (text, JSON, plot).
#[derive(Debug, Serialize, Deserialize)]
pub struct Finding {
    pub tool: String,
    pub version: String,
    pub command: Option<String>,
    /// The objectives, as written.
    pub objectives: Vec<String>,
    /// The highest rate that met every objective, if any did.
    pub max_rate: Option<f64>,
    /// The lowest rate that failed one (none: nothing failed up to --max-rate).
    pub first_failing_rate: Option<f64>,
    /// Why the client, not the server, may have been the limit at the first failing rate.
    pub client_limit: Option<String>,
    /// In the order run.
    pub trials: Vec<Trial>,
}

impl Finding {
    pub fn new(command: Option<String>, slos: &[Slo], s: &Search, trials: Vec<Trial>) -> Finding {
        let (max_rate, first_failing_rate) = s.bounds();
        let client_limit = first_failing_rate.and_then(|f| {
            trials
                .iter()
                .find(|t| t.rate == f)
                .and_then(|t| t.client_limit.clone())
        });
        Finding {
            tool: "loadterm".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            command,
            objectives: slos.iter().map(|s| s.text().to_owned()).collect(),
            max_rate,
            first_failing_rate,
            client_limit,
            trials,
        }
    }

    /// One sentence: what was found.
    pub fn verdict(&self) -> String {
        let obj = self.objectives.join(", ");
        let failing = |f: f64| {
            let why = self
                .trials
                .iter()
                .find(|t| t.rate == f)
                .map_or(String::new(), |t| format!(": {}", t.failed.join(", ")));
            format!("{f:.0} req/s failed{why}")
        };
        match (self.max_rate, self.first_failing_rate) {
            (Some(m), Some(f)) => format!(
                "highest rate meeting every objective ({obj}): {m:.0} req/s ({})",
                failing(f)
            ),
            (Some(m), None) => format!(
                "every rate tried met the objectives ({obj}), up to --max-rate {m:.0} req/s"
            ),
            (None, Some(f)) => format!("no rate met the objectives ({obj}): {}", failing(f)),
            (None, None) => "no trial completed".to_owned(),
        }
    }

    /// The text summary: the trials' table, the verdict, and a note when the client may have
    /// been the limit.
    pub fn text(&self) -> String {
        let mut s = match &self.command {
            Some(c) => format!("{} {}: {c}\n", self.tool, self.version),
            None => format!("{} {}\n", self.tool, self.version),
        };
        s += &format!(
            "{:>3} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9} {:>7} {:>6} {:>6}  verdict\n",
            "#", "offered/s", "done/s", "p50", "p90", "p99", "p99.9", "errors", "late", "cpu"
        );
        for (k, t) in self.trials.iter().enumerate() {
            s += &table_row(k + 1, t);
            s += "\n";
        }
        s += &self.verdict();
        s += "\n";
        if let Some(why) = &self.client_limit {
            s += &format!(
                "note: the client may have been the limit at the first failing rate: {why} \
                 (more -c or -m for slots; -t, --cpus, --send-grid or shards for CPU)\n"
            );
        }
        s += "latency: corrected for coordinated omission (from each request's intended send time)\n";
        s
    }
}

fn ms(us: Option<f64>) -> String {
    us.map_or("-".to_owned(), |us| {
        if us >= 1e6 {
            format!("{:.2}s", us / 1e6)
        } else {
            format!("{:.2}ms", us / 1e3)
        }
    })
}

fn table_row(k: usize, t: &Trial) -> String {
    let verdict = if t.passed() {
        "pass".to_owned()
    } else {
        format!("FAIL {}", t.failed.join(", "))
    };
    format!(
        "{k:>3} {:>10.0} {:>10.1} {:>9} {:>9} {:>9} {:>9} {:>6.2}% {:>5.1}% {:>5.0}%  {verdict}",
        t.rate,
        t.rps,
        ms(t.latency_at(50.0)),
        ms(t.latency_at(90.0)),
        ms(t.latency_at(99.0)),
        ms(t.latency_at(99.9)),
        t.errors * 100.0,
        t.late * 100.0,
        t.client_cpu * 100.0,
    )
}

/// A trial's line, printed on stderr as the search goes.
pub fn trial_line(k: usize, t: &Trial) -> String {
    format!(
        "trial {k}: {:.0} req/s offered, {:.1} done, p99 {}: {}",
        t.rate,
        t.rps,
        ms(t.latency_at(99.0)),
        if t.passed() {
            "pass".to_owned()
        } else {
            format!("fail ({})", t.failed.join(", "))
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objectives() {
        let s = Slo::parse("p99<=10ms").unwrap();
        assert_eq!((s.metric, s.bound), (Quantity::Percentile(99.0), 10_000.0));
        assert_eq!(Slo::parse("p99.9 <= 1s").unwrap().bound, 1e6);
        let e = Slo::parse("errors<=0.1%").unwrap();
        assert_eq!(e.metric, Quantity::Errors);
        assert!((e.bound - 0.001).abs() < 1e-12);
        assert_eq!(Slo::parse("mean<2ms").unwrap().metric, Quantity::Mean);
        for bad in [
            "p99",
            "p100<=1ms",
            "q99<=1ms",
            "errors<=200%",
            "p99<=10 parsecs",
            "errors<=x",
        ] {
            assert!(Slo::parse(bad).is_err(), "{bad}");
        }
    }

    /// A server that holds up to `capacity` req/s: the search finds it within its precision.
    fn find(capacity: f64, start: f64) -> (Search, usize) {
        let mut s = Search::new(start, 1e6, 0.05);
        let mut trials = 0;
        while let Some(r) = s.next() {
            trials += 1;
            assert!(trials < 40, "the search does not end");
            s.record(r, r <= capacity);
        }
        (s, trials)
    }

    #[test]
    fn the_search_brackets_the_capacity() {
        for (capacity, start) in [
            (1234.0, 100.0),
            (5000.0, 100.0),
            (80.0, 1000.0),
            (150.0, 150.0),
        ] {
            let (s, trials) = find(capacity, start);
            let (pass, fail) = s.bounds();
            let pass = pass.unwrap();
            assert!(
                pass <= capacity && pass >= capacity * 0.95,
                "{capacity}: {pass}"
            );
            if let Some(f) = fail {
                assert!(
                    f > capacity && f - pass <= 0.05 * pass + 1.0,
                    "{capacity}: {pass}..{f}"
                );
            }
            assert!(trials <= 16, "{capacity}: {trials} trials");
        }
        // Up to the cap without a failure: the cap is the answer.
        let mut s = Search::new(100.0, 300.0, 0.05);
        while let Some(r) = s.next() {
            s.record(r, true);
        }
        assert_eq!(s.bounds(), (Some(300.0), None));
        // Nothing passes, down to 1 req/s.
        let mut s = Search::new(100.0, 1e6, 0.05);
        while let Some(r) = s.next() {
            s.record(r, false);
        }
        assert_eq!(s.bounds(), (None, Some(1.0)));
    }
}

//! `--fail-if 'METRIC > +2%'`: a threshold on a metric's change, judged on its interval, never
//! on the point estimate, so that a verdict says what the measurement supports.

use crate::compare::{signed_pct, Comparison};
use crate::metric::Metric;
use crate::results::Cell;
use loadterm_plan::exit::Judgement;

/// A change of `metric` (variant / baseline − 1) that must not be passed: above `pct` when
/// `above`, else below it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Threshold {
    pub metric: Metric,
    pub above: bool,
    pub pct: f64,
}

impl std::str::FromStr for Threshold {
    type Err = String;
    fn from_str(s: &str) -> Result<Threshold, String> {
        let (metric, above, value) = match (s.split_once('>'), s.split_once('<')) {
            (Some((m, v)), None) => (m, true, v),
            (None, Some((m, v))) => (m, false, v),
            _ => return Err(format!("'{s}': expected METRIC > +PCT% or METRIC < -PCT%")),
        };
        let name = metric.trim();
        let metric = <Metric as clap::ValueEnum>::from_str(name, false).map_err(|_| {
            let names: Vec<&str> = Metric::COMPARED.iter().map(|m| m.name()).collect();
            format!(
                "'{name}' is not a metric ab compares ({})",
                names.join(", ")
            )
        })?;
        let v = value.trim().trim_end_matches('%');
        let pct: f64 = v
            .parse()
            .ok()
            .filter(|p: &f64| p.is_finite())
            .ok_or_else(|| format!("'{}' is not a change in percent (+2%, -5%)", value.trim()))?;
        Ok(Threshold { metric, above, pct })
    }
}

impl std::fmt::Display for Threshold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let op = if self.above { '>' } else { '<' };
        write!(f, "{} {op} {}", self.metric, signed_pct(self.pct))
    }
}

impl Threshold {
    /// Where the interval `(lo, hi)` of a change (percent) lies against the threshold.
    pub(crate) fn judge_interval(&self, (lo, hi): (f64, f64)) -> Judgement {
        let (beyond, within) = if self.above {
            (lo > self.pct, hi <= self.pct)
        } else {
            (hi < self.pct, lo >= self.pct)
        };
        match (beyond, within) {
            (true, _) => Judgement::Beyond,
            (_, true) => Judgement::Within,
            _ => Judgement::CannotTell,
        }
    }

    /// A comparison without an interval (too few rounds, a rate the client set) cannot tell.
    pub(crate) fn judge(&self, c: &Comparison) -> Judgement {
        c.ci_pct
            .map_or(Judgement::CannotTell, |ci| self.judge_interval(ci))
    }
}

/// Every threshold against every comparison of its metric, in every cell: the verdict of the
/// whole run, and one line per judgement for the terminal.
pub(crate) fn judge_cells(cells: &[Cell], rules: &[Threshold]) -> (Option<Judgement>, Vec<String>) {
    let mut lines = Vec::new();
    let mut verdicts = Vec::new();
    for rule in rules {
        let mut judged = 0;
        for cell in cells {
            for c in cell.comparisons.iter().filter(|c| c.metric == rule.metric) {
                let v = rule.judge(c);
                let interval = c.ci_pct.map_or("no interval".to_owned(), |(lo, hi)| {
                    format!("95% CI {} to {}", signed_pct(lo), signed_pct(hi))
                });
                lines.push(format!(
                    "fail-if {rule}: [{} {}] {} {} ({interval}): {}",
                    cell.proto,
                    cell.url,
                    c.variant,
                    signed_pct(c.change_pct),
                    words(v)
                ));
                verdicts.push(v);
                judged += 1;
            }
        }
        if judged == 0 {
            lines.push(format!(
                "fail-if {rule}: no comparison measured it: cannot tell"
            ));
            verdicts.push(Judgement::CannotTell);
        }
    }
    (Judgement::combine(verdicts), lines)
}

/// A verdict in words, as the terminal says it.
pub(crate) fn words(v: Judgement) -> &'static str {
    match v {
        Judgement::Within => "within (the whole interval is on the right side)",
        Judgement::Beyond => "BEYOND (the whole interval is past the threshold)",
        Judgement::CannotTell => {
            "cannot tell (the interval straddles the threshold, or there is none)"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_parse_and_print() {
        let t: Threshold = "cpu_us_per_req > +2%".parse().unwrap();
        assert_eq!(
            t,
            Threshold {
                metric: Metric::CpuUsPerReq,
                above: true,
                pct: 2.0
            }
        );
        assert_eq!(t.to_string(), "cpu_us_per_req > +2.0%");
        let t: Threshold = "rps<-5".parse().unwrap();
        assert!(!t.above && t.pct == -5.0);
        for bad in [
            "cpu > 2%",
            "cpu_us_per_req 2%",
            "cpu_us_per_req > x%",
            "rps <> 1",
        ] {
            assert!(bad.parse::<Threshold>().is_err(), "{bad}");
        }
    }

    #[test]
    fn the_interval_decides_not_the_estimate() {
        use Judgement::*;
        let up: Threshold = "cpu_us_per_req > +2%".parse().unwrap();
        assert_eq!(up.judge_interval((2.1, 5.0)), Beyond);
        assert_eq!(up.judge_interval((-1.0, 1.9)), Within);
        assert_eq!(up.judge_interval((-1.0, 2.0)), Within);
        // An estimate past the threshold with an interval that reaches back over it.
        assert_eq!(up.judge_interval((1.0, 5.0)), CannotTell);
        let down: Threshold = "rps < -5%".parse().unwrap();
        assert_eq!(down.judge_interval((-9.0, -6.0)), Beyond);
        assert_eq!(down.judge_interval((-4.0, 1.0)), Within);
        assert_eq!(down.judge_interval((-6.0, -4.0)), CannotTell);
    }
}

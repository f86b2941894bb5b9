//! Results for the history tools that track a project's benchmarks across commits: Bencher's
//! Metric Format (BMF) JSON, and one flat CSV per run (timestamp, commit, metric, value,
//! interval) that change-point tools read. Both hold the same points: every variant's median
//! of each metric, and every candidate's change against the baseline.

use crate::metric::Metric;
use crate::protocol::Protocol;
use crate::results::{Cell, MatrixReport};
use crate::stats;
use anyhow::{Context, Result};
use std::path::PathBuf;

/// `--export FORMAT=FILE`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Export {
    Bencher(PathBuf),
    Csv(PathBuf),
}

impl std::str::FromStr for Export {
    type Err = String;
    fn from_str(s: &str) -> Result<Export, String> {
        match s.split_once('=') {
            Some(("bencher", f)) if !f.is_empty() => Ok(Export::Bencher(f.into())),
            Some(("csv", f)) if !f.is_empty() => Ok(Export::Csv(f.into())),
            _ => Err(format!("'{s}': expected bencher=FILE or csv=FILE")),
        }
    }
}

/// One figure of a run: what it is about, its value and its 95% interval when it has one.
struct Point {
    /// "h1 /?s=1k B": the cell (named by the baseline's request) and the variant, Bencher's
    /// benchmark.
    benchmark: String,
    proto: Protocol,
    url: String,
    /// The load level of its cell (`--levels`).
    level: Option<f64>,
    variant: String,
    /// A metric (its median over the rounds), or `METRIC_change_pct` (against the baseline).
    measure: String,
    value: f64,
    ci: Option<(f64, f64)>,
}

fn points(cells: &[Cell]) -> Vec<Point> {
    let mut out = Vec::new();
    for c in cells {
        // The variant's own request (`--b-url`), in the cell named by the baseline's.
        let url = |variant: &str| {
            c.variants
                .iter()
                .find(|v| v.name == variant)
                .map_or(c.url.clone(), |v| v.url.clone())
        };
        let level = c.level.map_or_else(String::new, |l| format!(" level {l}"));
        let point = |variant: &str, measure: String, value: f64, ci| Point {
            benchmark: format!("{} {}{level} {variant}", c.proto, c.url),
            proto: c.proto,
            url: url(variant),
            level: c.level,
            variant: variant.to_owned(),
            measure,
            value,
            ci,
        };
        for v in &c.variants {
            for metric in Metric::COMPARED {
                let values: Vec<f64> = c
                    .runs
                    .iter()
                    .filter(|r| r.variant == v.name)
                    .filter_map(|r| metric.of(r))
                    .filter(|x| x.is_finite())
                    .collect();
                if values.is_empty() {
                    continue;
                }
                let m = stats::median(&values);
                out.push(point(
                    &v.name,
                    metric.name().to_owned(),
                    m,
                    stats::median_ci(&values),
                ));
            }
        }
        for cmp in &c.comparisons {
            out.push(point(
                &cmp.variant,
                format!("{}_change_pct", cmp.metric),
                cmp.change_pct,
                cmp.ci_pct,
            ));
        }
    }
    out
}

/// Bencher Metric Format: `{benchmark: {measure: {value, lower_value, upper_value}}}`.
fn bencher(cells: &[Cell]) -> serde_json::Value {
    let mut doc = serde_json::Map::new();
    for p in points(cells) {
        let mut metric = serde_json::Map::new();
        metric.insert("value".into(), p.value.into());
        if let Some((lo, hi)) = p.ci {
            metric.insert("lower_value".into(), lo.into());
            metric.insert("upper_value".into(), hi.into());
        }
        let bench = doc
            .entry(p.benchmark)
            .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
        if let serde_json::Value::Object(m) = bench {
            m.insert(p.measure, metric.into());
        }
    }
    doc.into()
}

/// One row per point, under a header; every row with the run's timestamp and commit.
fn csv(cells: &[Cell], timestamp: &str, commit: &str) -> String {
    let mut s =
        String::from("timestamp,commit,proto,url,variant,metric,value,ci_low,ci_high,level\n");
    for p in points(cells) {
        let (lo, hi) = p.ci.map_or((String::new(), String::new()), |(lo, hi)| {
            (lo.to_string(), hi.to_string())
        });
        let level = p.level.map_or_else(String::new, |l| l.to_string());
        let fields = [
            timestamp,
            commit,
            p.proto.name(),
            &p.url,
            &p.variant,
            &p.measure,
            &p.value.to_string(),
            &lo,
            &hi,
            &level,
        ];
        let quoted: Vec<String> = fields.iter().map(|f| csv_field(f)).collect();
        s += &quoted.join(",");
        s += "\n";
    }
    s
}

/// RFC 4180: a field with a comma, a quote or a line break is quoted, its quotes doubled.
fn csv_field(f: &str) -> String {
    if f.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", f.replace('"', "\"\""))
    } else {
        f.to_owned()
    }
}

/// Each export asked for, written. `commit`: the commit the results are about.
pub(crate) fn write(exports: &[Export], report: &MatrixReport, commit: &str) -> Result<()> {
    let timestamp = rfc3339(std::time::SystemTime::now());
    for e in exports {
        let (path, text) = match e {
            Export::Bencher(p) => (
                p,
                serde_json::to_string_pretty(&bencher(&report.cells))? + "\n",
            ),
            Export::Csv(p) => (p, csv(&report.cells, &timestamp, commit)),
        };
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// `2026-12-07T01:30:00Z`.
fn rfc3339(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// The commit the results are about when none is given: the working directory's HEAD, if it is
/// in a git repository.
pub(crate) fn head_commit() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_utc_civil_dates() {
        let t = |s: u64| rfc3339(std::time::UNIX_EPOCH + std::time::Duration::from_secs(s));
        assert_eq!(t(0), "1970-01-01T00:00:00Z");
        assert_eq!(t(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(t(1_796_607_000), "2026-12-07T01:30:00Z");
    }

    #[test]
    fn csv_fields_with_commas_are_quoted() {
        assert_eq!(csv_field("/?s=1k"), "/?s=1k");
        assert_eq!(csv_field("/?a=1,2"), "\"/?a=1,2\"");
        assert_eq!(csv_field("say \"x\""), "\"say \"\"x\"\"\"");
    }

    #[test]
    fn exports_parse() {
        assert_eq!(
            "bencher=a.json".parse::<Export>(),
            Ok(Export::Bencher("a.json".into()))
        );
        assert!("csv=".parse::<Export>().is_err());
        assert!("xml=a".parse::<Export>().is_err());
    }
}

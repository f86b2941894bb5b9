//! `loadterm bisect`: the first commit between a good and a bad revision whose change in the
//! headline metric stands. git decides which commit to test next (`git bisect`, in a worktree
//! of its own, with the terms `same` and `changed`); this driver owns only the worktrees and the
//! builds, cached by commit, and asks the comparison library one question per commit: is it
//! the same as good, changed like bad, or can the measurement not tell?

use crate::cli::AbArgs;
use crate::compare::{signed_pct, Comparison};
use crate::metric::Metric;
use crate::threshold::Threshold;
use anyhow::{bail, Context, Result};
use loadterm_plan::exit::{usage_error, Interrupted, Judgement};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

#[derive(Debug, clap::Args)]
pub struct BisectArgs {
    /// The git repository.
    #[arg(long, value_name = "DIR")]
    repo: PathBuf,
    /// A revision whose server is the reference.
    #[arg(long, value_name = "REV")]
    good: String,
    /// A later revision whose server costs differently.
    #[arg(long, value_name = "REV")]
    bad: String,
    /// How a revision is built, run by `sh -c` in its worktree: {src} is that worktree, {out}
    /// a directory of its own for the build's output, kept by commit.
    #[arg(long, value_name = "CMD")]
    build: String,
    /// A revision's server command: {bin} is its build's output directory ({out} of --build),
    /// {src} its worktree, and ab's own substitutions ({host}, {clear_port}, {tls_port}, …).
    #[arg(long = "run", value_name = "CMD")]
    run_cmd: String,
    /// Where the worktrees and builds are kept, one directory per commit [default:
    /// loadterm-bisect in the repository's git directory].
    #[arg(long, value_name = "DIR")]
    cache: Option<PathBuf>,
    /// How many times a commit the measurement cannot tell is measured again, each time to
    /// half the interval (twice the rounds), before it is skipped as `git bisect skip` would.
    #[arg(long, value_name = "N", default_value_t = 1)]
    retries: usize,
    #[command(flatten)]
    ab: AbArgs,
}

/// What one commit was found to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum StepVerdict {
    Same,
    Changed,
    Unknown,
    BuildFailed,
}

impl StepVerdict {
    fn term(self) -> &'static str {
        match self {
            StepVerdict::Same => "same",
            StepVerdict::Changed => "changed",
            StepVerdict::Unknown | StepVerdict::BuildFailed => "skip",
        }
    }
}

/// A measured change of the headline metric.
#[derive(Debug, Clone, Serialize)]
struct Change {
    metric: Metric,
    change_pct: f64,
    ci_pct: Option<(f64, f64)>,
    rounds: usize,
}

impl Change {
    fn of(c: &Comparison) -> Change {
        Change {
            metric: c.metric,
            change_pct: c.change_pct,
            ci_pct: c.ci_pct,
            rounds: c.rounds,
        }
    }

    fn text(&self) -> String {
        match self.ci_pct {
            Some((lo, hi)) => format!(
                "{} {} (95% CI {} to {}, {} rounds)",
                self.metric,
                signed_pct(self.change_pct),
                signed_pct(lo),
                signed_pct(hi),
                self.rounds
            ),
            None => format!(
                "{} {} (no interval, {} rounds)",
                self.metric,
                signed_pct(self.change_pct),
                self.rounds
            ),
        }
    }
}

#[derive(Debug, Serialize)]
struct BisectStep {
    commit: String,
    subject: String,
    verdict: StepVerdict,
    /// Against good; none when the build failed.
    change: Option<Change>,
    /// Measurements of this commit (one, plus one per retry).
    measurements: usize,
    build: &'static str,
    seconds: f64,
}

/// The report `--json` receives.
#[derive(Debug, Serialize)]
struct BisectReport {
    repo: String,
    good: String,
    bad: String,
    /// bad against good, the change bisected.
    good_to_bad: Option<Change>,
    /// "found", "no change", "cannot tell good from bad", "only skipped commits left".
    outcome: String,
    /// The first commit whose change stands (full hash).
    first_changed: Option<String>,
    /// When skipped commits hide it: every commit it could be.
    candidates: Vec<String>,
    /// The threshold each step was judged against: half of good → bad.
    threshold_pct: Option<f64>,
    steps: Vec<BisectStep>,
    builds: usize,
    seconds: f64,
}

/// The driver's state: the repository, the cache, what has been built.
struct Bisect<'a> {
    args: &'a BisectArgs,
    repo: PathBuf,
    cache: PathBuf,
    /// CPUs this process could use at the start: builds run there, not where ab pins itself.
    cpus: Vec<usize>,
    builds: usize,
}

/// `loadterm bisect`, reported on stdout and in --json.
pub fn run(args: BisectArgs) -> Result<Option<Judgement>> {
    args.ab.check_for_driver("bisect")?;
    let t0 = Instant::now();
    let repo = args
        .repo
        .canonicalize()
        .with_context(|| format!("--repo {}", args.repo.display()))?;
    let git_dir = git(&repo, &["rev-parse", "--git-common-dir"]).map_err(|e| {
        usage_error(format!(
            "--repo {}: not a git repository ({e:#})",
            repo.display()
        ))
    })?;
    let cache = match &args.cache {
        Some(c) => c.clone(),
        None => repo.join(git_dir).join("loadterm-bisect"),
    };
    std::fs::create_dir_all(&cache)
        .with_context(|| format!("cannot create {}", cache.display()))?;
    let commit = |rev: &str, flag: &str| {
        git(
            &repo,
            &[
                "rev-parse",
                "--verify",
                "--end-of-options",
                &format!("{rev}^{{commit}}"),
            ],
        )
        .map_err(|_| {
            usage_error(format!(
                "{flag} {rev}: no such commit in {}",
                repo.display()
            ))
        })
    };
    let (good, bad) = (commit(&args.good, "--good")?, commit(&args.bad, "--bad")?);
    if good == bad {
        return Err(usage_error("--good and --bad are the same commit"));
    }
    git(&repo, &["merge-base", "--is-ancestor", &good, &bad]).map_err(|_| {
        usage_error(format!(
            "--good {} is not an ancestor of --bad {}",
            args.good, args.bad
        ))
    })?;
    let mut b = Bisect {
        args: &args,
        repo,
        cache,
        cpus: allowed_cpus(),
        builds: 0,
    };
    let mut report = BisectReport {
        repo: b.repo.display().to_string(),
        good: good.clone(),
        bad: bad.clone(),
        good_to_bad: None,
        outcome: String::new(),
        first_changed: None,
        candidates: Vec::new(),
        threshold_pct: None,
        steps: Vec::new(),
        builds: 0,
        seconds: 0.0,
    };
    let verdict = b.bisect(&good, &bad, &mut report);
    report.builds = b.builds;
    report.seconds = t0.elapsed().as_secs_f64();
    if let Some(p) = args.ab.json_path() {
        std::fs::write(p, serde_json::to_string_pretty(&report)? + "\n")
            .with_context(|| format!("cannot write {}", p.display()))?;
    }
    verdict
}

impl Bisect<'_> {
    fn bisect(
        &mut self,
        good: &str,
        bad: &str,
        report: &mut BisectReport,
    ) -> Result<Option<Judgement>> {
        let say = |s: String| println!("bisect: {s}");
        let (precision, rounds) = self.args.ab.precision();
        // Both ends first: a pair ab cannot tell apart is refused before anything else is built.
        let good_cmd = self.end(good, "good")?;
        let bad_cmd = self.end(bad, "bad")?;
        // Changed: the whole interval beyond ±precision (half the target effect), so that an
        // A/A pair would need an estimate two half-widths out; no change: the whole interval
        // within ±the target effect. Between them, measured again to half the interval.
        let bound = |above: bool, pct: f64, metric: Metric| Threshold { metric, above, pct };
        let judge = |c: &Comparison| {
            let m = c.metric;
            let changed = bound(true, precision, m).judge(c) == Judgement::Beyond
                || bound(false, -precision, m).judge(c) == Judgement::Beyond;
            let same = bound(true, 2.0 * precision, m).judge(c) == Judgement::Within
                && bound(false, -2.0 * precision, m).judge(c) == Judgement::Within;
            match (changed, same) {
                (true, _) => StepVerdict::Changed,
                (_, true) => StepVerdict::Same,
                _ => StepVerdict::Unknown,
            }
        };
        let (c, ends, _) =
            self.ask((good, &good_cmd), (bad, &bad_cmd), precision, rounds, judge)?;
        let change = Change::of(&c);
        report.good_to_bad = Some(change.clone());
        match ends {
            StepVerdict::Same => {
                say(format!(
                    "no change between good and bad: {}, within ±{:.1}%: nothing to bisect",
                    change.text(),
                    2.0 * precision
                ));
                report.outcome = "no change".into();
                return Ok(None);
            }
            StepVerdict::Unknown | StepVerdict::BuildFailed => {
                say(format!(
                    "refused: cannot tell good from bad: {}: neither beyond ±{precision:.1}% nor within ±{:.1}% (a longer --max-time, or a larger --target-effect)",
                    change.text(),
                    2.0 * precision
                ));
                report.outcome = "cannot tell good from bad".into();
                return Ok(Some(Judgement::CannotTell));
            }
            StepVerdict::Changed => {}
        }
        say(format!(
            "good {} → bad {}: {}",
            short(good),
            short(bad),
            change.text()
        ));
        // A commit is "changed" when its whole interval is past half the change, "same" when it
        // is wholly on good's side: halfway, each side is two of good → bad's half-widths away.
        let threshold = Threshold {
            metric: c.metric,
            above: c.change_pct > 0.0,
            pct: c.change_pct / 2.0,
        };
        report.threshold_pct = Some(threshold.pct);
        let step_precision = precision.min(c.change_pct.abs() / 4.0);
        let control = self.cache.join("control");
        if control.exists() {
            let _ = git(
                &self.repo,
                &["worktree", "remove", "--force", path(&control)?],
            );
        }
        git(
            &self.repo,
            &[
                "worktree",
                "add",
                "--detach",
                "--force",
                path(&control)?,
                good,
            ],
        )?;
        let out = git(
            &control,
            &[
                "bisect",
                "start",
                "--no-checkout",
                "--term-old=same",
                "--term-new=changed",
                bad,
                good,
            ],
        )?;
        let mut done = finished(&out);
        while done.is_none() {
            if crate::procs::interrupted() {
                return Err(Interrupted.into());
            }
            let m = git(&control, &["rev-parse", "BISECT_HEAD"])?;
            let t = Instant::now();
            let subject = git(&self.repo, &["log", "-1", "--format=%s", &m])?;
            let cached = self.built(&m).is_some();
            let step = match self.server(&m)? {
                None => BisectStep {
                    commit: m.clone(),
                    subject,
                    verdict: StepVerdict::BuildFailed,
                    change: None,
                    measurements: 0,
                    build: "failed",
                    seconds: t.elapsed().as_secs_f64(),
                },
                Some(cmd) => {
                    let judge = |c: &Comparison| match threshold.judge(c) {
                        Judgement::Within => StepVerdict::Same,
                        Judgement::Beyond => StepVerdict::Changed,
                        Judgement::CannotTell => StepVerdict::Unknown,
                    };
                    let (c, verdict, n) =
                        self.ask((good, &good_cmd), (&m, &cmd), step_precision, rounds, judge)?;
                    let change = Change::of(&c);
                    BisectStep {
                        commit: m.clone(),
                        subject,
                        verdict,
                        change: Some(change),
                        measurements: n,
                        build: if cached { "cached" } else { "built" },
                        seconds: t.elapsed().as_secs_f64(),
                    }
                }
            };
            say(format!(
                "{} {:?}: {} ({}; threshold {} against good){}",
                short(&m),
                step.subject,
                match step.verdict {
                    StepVerdict::Same => "same",
                    StepVerdict::Changed => "changed",
                    StepVerdict::Unknown => "unknown, skipped",
                    StepVerdict::BuildFailed => "build failed, skipped",
                },
                step.change
                    .as_ref()
                    .map_or("not measured".to_owned(), Change::text),
                signed_pct(threshold.pct),
                if step.verdict == StepVerdict::BuildFailed {
                    format!(": see {}", self.dir(&m).join("build.log").display())
                } else {
                    String::new()
                }
            ));
            let out = git_bisect(&control, &[step.verdict.term(), &m])?;
            report.steps.push(step);
            done = finished(&out);
        }
        let _ = git(&control, &["bisect", "reset"]);
        let _ = git(
            &self.repo,
            &["worktree", "remove", "--force", path(&control)?],
        );
        match done {
            Some(Ended::Found(first)) => {
                let subject = git(&self.repo, &["log", "-1", "--format=%s", &first])?;
                let change = report
                    .steps
                    .iter()
                    .find(|s| s.commit == first)
                    .and_then(|s| s.change.clone())
                    .or(report.good_to_bad.clone());
                say(format!(
                    "first changed commit: {first} {subject:?}: against good {}",
                    change.map_or(String::new(), |c| c.text())
                ));
                report.outcome = "found".into();
                report.first_changed = Some(first);
                Ok(None)
            }
            Some(Ended::Skipped(candidates)) => {
                say(format!(
                    "only skipped commits are left: the first changed commit is one of {}",
                    candidates.join(", ")
                ));
                report.outcome = "only skipped commits left".into();
                report.candidates = candidates;
                Ok(Some(Judgement::CannotTell))
            }
            None => bail!("git bisect ended without a first changed commit"),
        }
    }

    /// The server command of good or bad, which must build.
    fn end(&mut self, commit: &str, which: &str) -> Result<String> {
        self.server(commit)?.with_context(|| {
            format!(
                "the build of {which} ({}) failed: see {}",
                short(commit),
                self.dir(commit).join("build.log").display()
            )
        })
    }

    /// `m` against `good` (commit, server command), judged by `judge`; an unknown answer is
    /// measured again to half the interval (twice the rounds), `--retries` times. The last
    /// comparison, its verdict, and how many measurements it took.
    fn ask(
        &self,
        good: (&str, &str),
        m: (&str, &str),
        precision: f64,
        rounds: Option<usize>,
        judge: impl Fn(&Comparison) -> StepVerdict,
    ) -> Result<(Comparison, StepVerdict, usize)> {
        let (mut p, mut r, mut n) = (precision, rounds, 0);
        loop {
            n += 1;
            let c = self.question(good.0, good.1, m.0, m.1, p, r)?;
            let v = judge(&c);
            if v != StepVerdict::Unknown || n > self.args.retries {
                return Ok((c, v, n));
            }
            println!(
                "bisect: {} cannot tell yet ({}): measured again to half the interval",
                short(m.0),
                Change::of(&c).text()
            );
            p /= 2.0;
            r = r.map(|r| r * 2);
        }
    }

    /// One question: `m` against `good`, to ±`precision` points (or `rounds`): the headline
    /// comparison.
    fn question(
        &self,
        good: &str,
        good_cmd: &str,
        m: &str,
        m_cmd: &str,
        precision: f64,
        rounds: Option<usize>,
    ) -> Result<Comparison> {
        let variants = vec![
            format!("{}={good_cmd}", short(good)),
            format!("{}={m_cmd}", short(m)),
        ];
        let report = crate::cli::compare(&self.args.ab.question(variants, precision, rounds))?;
        if report.interrupted {
            return Err(Interrupted.into());
        }
        let cell = report.cells.first().context("no cell was measured")?;
        // The headline, which the rounds were measured to.
        let headline = self.args.ab.stop_metric();
        cell.comparisons
            .iter()
            .find(|c| c.metric == headline)
            .cloned()
            .with_context(|| format!("no comparison of {headline} was measured"))
    }

    fn dir(&self, commit: &str) -> PathBuf {
        self.cache.join(commit)
    }

    /// A commit's build output directory, if it was built (None: its build failed), from the
    /// cache only.
    fn built(&self, commit: &str) -> Option<Option<PathBuf>> {
        let dir = self.dir(commit);
        match std::fs::read_to_string(dir.join("status")).ok()?.trim() {
            "ok" => Some(Some(dir.join("out"))),
            _ => Some(None),
        }
    }

    /// The server command of `commit`, built first if the cache does not have it; None when
    /// its build failed.
    fn server(&mut self, commit: &str) -> Result<Option<String>> {
        let dir = self.dir(commit);
        let src = dir.join("src");
        let out = match self.built(commit) {
            Some(out) => out,
            None => {
                if !src.join(".git").exists() {
                    let _ = std::fs::remove_dir_all(&src);
                    git(
                        &self.repo,
                        &[
                            "worktree",
                            "add",
                            "--detach",
                            "--force",
                            path(&src)?,
                            commit,
                        ],
                    )?;
                }
                let out = dir.join("out");
                std::fs::create_dir_all(&out)?;
                let cmd = self
                    .args
                    .build
                    .replace("{src}", path(&src)?)
                    .replace("{out}", path(&out)?);
                eprintln!("bisect: building {}: {cmd}", short(commit));
                let log = std::fs::File::create(dir.join("build.log"))?;
                let mut c = Command::new("sh");
                c.args(["-c", &cmd])
                    .current_dir(&src)
                    .stdin(Stdio::null())
                    .stdout(log.try_clone()?)
                    .stderr(log);
                crate::procs::pin(&mut c, &self.cpus)?;
                let ok = c
                    .status()
                    .with_context(|| format!("cannot run the build command {cmd:?}"))?
                    .success();
                self.builds += 1;
                std::fs::write(dir.join("status"), if ok { "ok\n" } else { "failed\n" })?;
                ok.then_some(out)
            }
        };
        Ok(out.map(|out| {
            let (src, out) = (src.display().to_string(), out.display().to_string());
            self.args
                .run_cmd
                .replace("{bin}", &out)
                .replace("{src}", &src)
        }))
    }
}

/// How a `git bisect` command's output says the bisect ended, if it did.
enum Ended {
    Found(String),
    Skipped(Vec<String>),
}

fn finished(out: &str) -> Option<Ended> {
    if let Some(line) = out
        .lines()
        .find(|l| l.ends_with("is the first changed commit"))
    {
        return line
            .split_whitespace()
            .next()
            .map(|h| Ended::Found(h.to_owned()));
    }
    if out.contains("only 'skip'ped commits left") {
        let candidates = out
            .lines()
            .skip_while(|l| !l.contains("could be any of"))
            .skip(1)
            .filter_map(|l| l.split_whitespace().next())
            .filter(|h| h.len() >= 7 && h.chars().all(|c| c.is_ascii_hexdigit()))
            .map(str::to_owned)
            .collect();
        return Some(Ended::Skipped(candidates));
    }
    None
}

/// `git -C dir bisect ARGS`: its output, also when it ends the bisect with a failing status
/// (only skipped commits left); an error when it says neither where it goes on nor how it ended.
fn git_bisect(dir: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .arg("bisect")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("cannot run git")?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    if out.status.success() || finished(&text).is_some() {
        return Ok(text);
    }
    bail!("git bisect {}: {}", args.join(" "), text.trim())
}

/// `git -C dir ARGS`, its stdout trimmed; an error with its stderr when it fails.
fn git(dir: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("cannot run git")?;
    if !out.status.success() {
        bail!(
            "git {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn path(p: &Path) -> Result<&str> {
    p.to_str()
        .with_context(|| format!("{}: not UTF-8", p.display()))
}

fn short(commit: &str) -> &str {
    &commit[..commit.len().min(12)]
}

/// The CPUs this process may run on now (`Cpus_allowed_list`, e.g. `0-1,4`).
fn allowed_cpus() -> Vec<usize> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap_or("")
        .trim();
    list.split(',')
        .filter_map(|part| match part.split_once('-') {
            Some((a, b)) => Some(a.parse().ok()?..=b.parse().ok()?),
            None => part.parse().ok().map(|c| c..=c),
        })
        .flatten()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gits_endings_are_read() {
        let found =
            "3e5a1b2c4d5e6f708192a3b4c5d6e7f809112233 is the first changed commit\ncommit 3e5a…\n";
        assert!(matches!(finished(found), Some(Ended::Found(h)) if h.starts_with("3e5a1b2c")));
        let skipped = "There are only 'skip'ped commits left to test.\nThe first changed commit could be any of:\naaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\nbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\nWe cannot bisect more!\n";
        match finished(skipped) {
            Some(Ended::Skipped(c)) => assert_eq!(c.len(), 2),
            _ => panic!("skipped"),
        }
        assert!(
            finished("Bisecting: 3 revisions left to test after this (roughly 2 steps)").is_none()
        );
    }

    #[test]
    fn cpu_lists_are_read() {
        assert!(!allowed_cpus().is_empty());
    }
}

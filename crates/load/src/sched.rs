//! When requests may be sent: closed loop, or open loop with a schedule of intended send times
//! per slot (a connection on HTTP/1.1, a stream slot on HTTP/2 and 3), following a rate plan
//! (a constant rate, steps, ramps, or a file of them).

use anyhow::{bail, Context, Result};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One piece of a rate plan: from `start` (seconds from the start of the measured window) for
/// `len` seconds, the rate going linearly from `from` to `to` requests per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RateSegment {
    pub start: f64,
    pub len: f64,
    pub from: f64,
    pub to: f64,
}

impl RateSegment {
    /// Sends intended in the first `x` seconds of the segment.
    fn count(&self, x: f64) -> f64 {
        let slope = (self.to - self.from) / self.len;
        self.from * x + slope * x * x / 2.0
    }

    /// Seconds into the segment of its `c`-th send (the inverse of `count`), in the form that
    /// stays exact for a flat rate and for a ramp from 0.
    fn time_of(&self, c: f64) -> f64 {
        let slope = (self.to - self.from) / self.len;
        let root = (self.from * self.from + 2.0 * slope * c).max(0.0).sqrt();
        2.0 * c / (self.from + root)
    }
}

/// The run's total rate over time: the segments, then the last rate held; the warm-up before
/// the window runs at the first segment's rate. `steps` are where the report cuts the window.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RatePlan {
    segments: Vec<RateSegment>,
    /// Sends intended before each segment (from the start of the window).
    before: Vec<f64>,
    warm: f64,
    steps: Vec<RateSegment>,
}

/// A schedule item: `R` or the ramp `A..B`.
fn item(s: &str) -> Result<(f64, f64)> {
    let rate = |r: &str| -> Result<f64> {
        let v: f64 = r
            .trim()
            .parse()
            .with_context(|| format!("invalid rate '{}'", r.trim()))?;
        if !(v >= 0.0 && v.is_finite()) {
            bail!(
                "invalid rate '{}': requests per second, 0 or more",
                r.trim()
            );
        }
        Ok(v)
    };
    match s.split_once("..") {
        Some((a, b)) => Ok((rate(a)?, rate(b)?)),
        None => {
            let r = rate(s)?;
            if r == 0.0 {
                bail!("a step at rate 0 would send nothing (use a small rate, e.g. 1)");
            }
            Ok((r, r))
        }
    }
}

/// A schedule item from its time: (start, from rate, to rate).
type Timed = (f64, f64, f64);

/// The lines of a schedule file: `TIME RATE` or `TIME A..B` (TIME a duration from the start
/// of the window: `0`, `30s`, `2m`), each in force until the next line's time; a last line of
/// a TIME alone ends the schedule. `#` starts a comment.
fn file_segments(text: &str) -> Result<(Vec<Timed>, Option<f64>)> {
    let mut items = Vec::new();
    let mut end = None;
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let ctx = || format!("line {}: '{line}'", n + 1);
        if end.is_some() {
            bail!(
                "{}: nothing may follow the line that ends the schedule",
                ctx()
            );
        }
        let mut words = line.split_whitespace();
        let t = words.next().unwrap_or("");
        let t = loadterm_plan::units::parse_duration(t)
            .map_err(anyhow::Error::msg)
            .with_context(ctx)?
            .as_secs_f64();
        if items.last().is_some_and(|&(prev, _, _)| t <= prev) || (items.is_empty() && t != 0.0) {
            bail!("{}: times must start at 0 and increase", ctx());
        }
        match (words.next(), words.next()) {
            (Some(r), None) => {
                let (a, b) = item(r).with_context(ctx)?;
                items.push((t, a, b));
            }
            (None, _) if !items.is_empty() => end = Some(t),
            _ => bail!(
                "{}: expected TIME RATE, TIME A..B, or a last TIME alone",
                ctx()
            ),
        }
    }
    if items.is_empty() {
        bail!("no schedule lines");
    }
    Ok((items, end))
}

impl RatePlan {
    /// A constant rate.
    pub(crate) fn constant(rate: f64, warm: Duration) -> RatePlan {
        RatePlan::new(
            vec![RateSegment {
                start: 0.0,
                len: f64::INFINITY,
                from: rate,
                to: rate,
            }],
            warm,
            Vec::new(),
        )
    }

    fn new(segments: Vec<RateSegment>, warm: Duration, steps: Vec<RateSegment>) -> RatePlan {
        let mut before = Vec::with_capacity(segments.len());
        let mut sum = 0.0;
        for s in &segments {
            before.push(sum);
            sum += if s.len.is_finite() {
                s.count(s.len)
            } else {
                0.0
            };
        }
        RatePlan {
            segments,
            before,
            warm: warm.as_secs_f64(),
            steps,
        }
    }

    /// `--rate`: `R`, steps `A,B,C` (each `step` long), a ramp `A..B` (over `run`, reported in
    /// pieces of `step`, by default ten), a mix (`1000..4000,4000`), or `@FILE`. `run` is -D: a
    /// longer run holds the last rate, a shorter one is refused. Returns the plan and, for a
    /// schedule, its length (the run's -D by default).
    pub(crate) fn parse(
        spec: &str,
        step: Option<Duration>,
        run: Option<Duration>,
        warm: Duration,
    ) -> Result<(RatePlan, Option<Duration>)> {
        let step = step.map(|d| d.as_secs_f64());
        let run_s = run.map(|d| d.as_secs_f64());
        let (items, mut end) = if let Some(path) = spec.strip_prefix('@') {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the schedule file {path}"))?;
            file_segments(&text).with_context(|| format!("schedule file {path}"))?
        } else {
            let items = spec.split(',').map(item).collect::<Result<Vec<_>>>()?;
            if let [(a, b)] = items[..] {
                if a == b {
                    if step.is_some() {
                        bail!("--step-duration needs a schedule (steps A,B,C or a ramp A..B)");
                    }
                    return Ok((RatePlan::constant(a, warm), None));
                }
                let len = run_s.context("a ramp A..B needs -D, the time it takes")?;
                return Ok((RatePlan::ramp(a, b, len, step, warm)?, run));
            }
            let len = step.context("steps A,B,C need --step-duration, how long each lasts")?;
            if len <= 0.0 {
                bail!("--step-duration must be more than 0");
            }
            let timed = items
                .iter()
                .enumerate()
                .map(|(k, &(a, b))| (k as f64 * len, a, b))
                .collect();
            (timed, Some(items.len() as f64 * len))
        };
        let end_s = match (end, run_s) {
            (Some(e), Some(r)) if r + 1e-9 < e => bail!(
                "the schedule lasts {e}s, longer than -D {r}s (a longer -D holds its last rate)"
            ),
            (_, Some(r)) => r,
            (Some(e), None) => e,
            (None, None) => bail!("the schedule's last line holds until -D: give -D, or end the file with a line of a time alone"),
        };
        let last = items.last().map_or(0.0, |i| i.0);
        if end_s <= last {
            bail!("-D {end_s}s ends before the schedule's last line ({last}s)");
        }
        end = end.or(Some(end_s));
        let mut segments: Vec<RateSegment> = items
            .iter()
            .zip(items.iter().skip(1).map(|i| i.0).chain(end))
            .map(|(&(start, from, to), next)| RateSegment {
                start,
                len: next - start,
                from,
                to,
            })
            .collect();
        let mut steps = segments.clone();
        let hold = segments.last().map_or(0.0, |s| s.to);
        if hold <= 0.0 {
            bail!("the schedule must not end at rate 0 (it would never send again)");
        }
        let sched_end = end.unwrap_or(end_s);
        if end_s > sched_end + 1e-9 {
            steps.push(RateSegment {
                start: sched_end,
                len: end_s - sched_end,
                from: hold,
                to: hold,
            });
        }
        segments.push(RateSegment {
            start: sched_end,
            len: f64::INFINITY,
            from: hold,
            to: hold,
        });
        Ok((
            RatePlan::new(segments, warm, steps),
            Some(Duration::from_secs_f64(end_s)),
        ))
    }

    /// A ramp from `a` to `b` over `len` seconds, reported in pieces of `step` (ten by default).
    fn ramp(a: f64, b: f64, len: f64, step: Option<f64>, warm: Duration) -> Result<RatePlan> {
        if b <= 0.0 {
            bail!("a ramp must not end at rate 0 (it would never send again)");
        }
        if len <= 0.0 {
            bail!("a ramp needs a -D of more than 0");
        }
        let piece = step.unwrap_or(len / 10.0).min(len);
        if piece <= 0.0 {
            bail!("--step-duration must be more than 0");
        }
        let ramp = RateSegment {
            start: 0.0,
            len,
            from: a,
            to: b,
        };
        let n = (len / piece - 1e-9).ceil().max(1.0) as usize;
        let steps = (0..n)
            .map(|k| {
                let start = k as f64 * piece;
                let end = (start + piece).min(len);
                let at = |t: f64| a + (b - a) * t / len;
                RateSegment {
                    start,
                    len: end - start,
                    from: at(start),
                    to: at(end),
                }
            })
            .collect();
        let hold = RateSegment {
            start: len,
            len: f64::INFINITY,
            from: b,
            to: b,
        };
        Ok(RatePlan::new(vec![ramp, hold], warm, steps))
    }

    /// The steps the report shows one by one (none for a constant rate).
    pub(crate) fn steps(&self) -> &[RateSegment] {
        &self.steps
    }

    /// The rate (requests per second) `t` seconds into the window (the first rate before it).
    pub(crate) fn rate_at(&self, t: f64) -> f64 {
        let k = self
            .segments
            .partition_point(|s| s.start <= t)
            .saturating_sub(1);
        let s = &self.segments[k];
        if t <= s.start || !s.len.is_finite() {
            return s.from;
        }
        s.from + (s.to - s.from) * ((t - s.start) / s.len).min(1.0)
    }

    /// Sends intended from the start of the window until `t` seconds into it.
    pub(crate) fn count(&self, t: f64) -> f64 {
        if t <= 0.0 {
            return t * self.segments[0].from;
        }
        let k = self.segments.partition_point(|s| s.start <= t) - 1;
        let s = &self.segments[k];
        self.before[k] + s.count(t - s.start)
    }

    /// The time of the run's `n`-th send (0 the first, when sending starts), in seconds from
    /// the start of sending.
    fn time_of(&self, n: u64) -> f64 {
        let first = self.segments[0].from;
        let c = n as f64 - first * self.warm;
        let t = if c < 0.0 {
            c / first
        } else {
            let k = self.before.partition_point(|&b| b <= c) - 1;
            let s = &self.segments[k];
            s.start + s.time_of(c - self.before[k])
        };
        t + self.warm
    }
}

/// Seconds as a duration, rounded to the nanosecond (so that 2 ms stays 2 ms).
fn nanos(s: f64) -> Duration {
    Duration::from_nanos((s * 1e9).round() as u64)
}

/// When requests may be sent.
#[derive(Debug, Clone)]
pub(crate) enum Pace {
    /// As fast as responses come back.
    Closed,
    /// The run's requests follow `plan`, shared out evenly: slot `k` (of `connections × -m`
    /// on HTTP/2 and 3, of `connections` on HTTP/1.1) sends the run's sends `k`, `k + slots`,
    /// ... `connections` is the run's total, for phasing the slots evenly.
    Open {
        plan: Arc<RatePlan>,
        connections: u64,
    },
}

/// Open-loop schedule of one slot: its intended send times. A sender that falls behind still
/// gets every past time, in order, so each late send is measured from when it was due.
#[derive(Debug)]
pub(crate) struct Schedule {
    next: Option<Instant>,
    /// Which of the run's sends is `next`, and the step to the slot's following one.
    n: u64,
    stride: u64,
    plan: Option<Arc<RatePlan>>,
    start: Instant,
}

impl Schedule {
    /// Slot `stream` of `streams` on connection `conn` (HTTP/1.1: stream 0 of 1).
    pub(crate) fn new(
        pace: &Pace,
        start: Instant,
        conn: u64,
        stream: u64,
        streams: u64,
    ) -> Schedule {
        match pace {
            Pace::Closed => Schedule {
                next: None,
                n: 0,
                stride: 0,
                plan: None,
                start,
            },
            Pace::Open { plan, connections } => {
                // The run's connections × streams slots take the run's sends in turn, so that
                // together they follow the plan exactly instead of sending in bursts.
                let n = stream * connections + conn;
                Schedule {
                    next: Some(start + nanos(plan.time_of(n))),
                    n,
                    stride: connections * streams,
                    plan: Some(plan.clone()),
                    start,
                }
            }
        }
    }

    /// The next intended time, if open loop.
    pub(crate) fn peek(&self) -> Option<Instant> {
        self.next
    }

    pub(crate) fn advance(&mut self) -> Option<Instant> {
        let now = self.next?;
        let plan = self.plan.as_ref()?;
        self.n += self.stride;
        self.next = Some(self.start + nanos(plan.time_of(self.n)));
        Some(now)
    }
}

/// The schedules of one connection slot, for whichever protocol it ends up speaking (with ALPN
/// that is known only after the handshake). They outlive connections: a reopened connection
/// carries on where the last one stopped instead of replaying the schedule from the start.
pub(crate) struct Schedules {
    pub h1: Schedule,
    pub streams: Vec<Schedule>,
}

impl Schedules {
    /// Connection `conn`'s schedules, with `streams` slots for HTTP/2 and 3.
    pub(crate) fn new(pace: &Pace, start: Instant, conn: u64, streams: u64) -> Schedules {
        Schedules {
            h1: Schedule::new(pace, start, conn, 0, 1),
            streams: (0..streams)
                .map(|s| Schedule::new(pace, start, conn, s, streams))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(rate_per_conn: f64, connections: u64) -> Pace {
        Pace::Open {
            plan: Arc::new(RatePlan::constant(
                rate_per_conn * connections as f64,
                Duration::ZERO,
            )),
            connections,
        }
    }

    /// The first `n` intended times of every slot of a run, merged and sorted, as offsets
    /// from `start` in nanoseconds.
    fn merged(pace: &Pace, connections: u64, streams: u64, n: usize) -> Vec<u128> {
        let start = Instant::now();
        let mut all = Vec::new();
        for c in 0..connections {
            for s in 0..streams {
                let mut sched = Schedule::new(pace, start, c, s, streams);
                all.extend((0..n).map(|_| (sched.advance().unwrap() - start).as_nanos()));
            }
        }
        all.sort_unstable();
        all
    }

    /// Durations are whole nanoseconds: 1 µs allows for their rounding, far below any spacing
    /// tested here.
    fn close(got: Duration, want_s: f64) -> bool {
        (got.as_secs_f64() - want_s).abs() < 1e-6
    }

    fn assert_spacing(times: &[u128], period_s: f64) {
        assert_eq!(times[0], 0);
        for (k, t) in times.iter().enumerate() {
            let want = k as f64 * period_s;
            let got = Duration::from_nanos(*t as u64);
            assert!(close(got, want), "send {k} at {got:?}, want {want} s");
        }
    }

    #[test]
    fn rate_across_connections_is_evenly_spaced() {
        // --rate 1000 -c 4: 250/s per connection, each every 4 ms, phased 1 ms apart.
        let pace = open(1000.0 / 4.0, 4);
        assert_spacing(&merged(&pace, 4, 1, 50), 0.001);
        let start = Instant::now();
        let mut third = Schedule::new(&pace, start, 2, 0, 1);
        let times: Vec<_> = (0..3).map(|_| third.advance().unwrap() - start).collect();
        assert_eq!(times, [2, 6, 10].map(Duration::from_millis));
    }

    #[test]
    fn streams_share_their_connection_rate() {
        // --rate 600 -c 2 -m 3 on HTTP/2: 300/s per connection, so each of its 3 stream slots
        // sends every 10 ms, and the 6 slots together every 1/600 s.
        let pace = open(300.0, 2);
        let start = Instant::now();
        let mut slot = Schedule::new(&pace, start, 1, 2, 3);
        let first = slot.advance().unwrap() - start;
        let second = slot.advance().unwrap() - start;
        assert!(close(second - first, 0.010), "{:?}", second - first);
        assert_spacing(&merged(&pace, 2, 3, 40), 1.0 / 600.0);
    }

    #[test]
    fn rate_per_conn_is_per_connection() {
        // --rate-per-conn 100 -c 3: each connection every 10 ms, all three every 3.33 ms.
        let pace = open(100.0, 3);
        assert_spacing(&merged(&pace, 3, 1, 30), 1.0 / 300.0);
    }

    #[test]
    fn late_sends_are_kept_not_skipped() {
        // A sender that fell behind gets every missed time in order (each is then recorded
        // as late, its latency corrected from that time); peeking does not consume one.
        let start = Instant::now() - Duration::from_secs(10);
        let mut s = Schedule::new(&open(100.0, 1), start, 0, 0, 1);
        assert_eq!(s.peek(), Some(start));
        assert_eq!(s.peek(), Some(start));
        let times: Vec<_> = (0..4).map(|_| s.advance().unwrap() - start).collect();
        assert_eq!(times, [0, 10, 20, 30].map(Duration::from_millis));
        assert_eq!(s.peek(), Some(start + Duration::from_millis(40)));
    }

    #[test]
    fn closed_loop_has_no_schedule() {
        let mut s = Schedule::new(&Pace::Closed, Instant::now(), 3, 1, 2);
        assert_eq!((s.peek(), s.advance()), (None, None));
    }

    #[test]
    fn a_connection_that_speaks_http1_gets_the_whole_connection_rate() {
        // With ALPN the protocol is known only after the handshake: -m 4 must not divide the
        // rate of a connection that ends up on HTTP/1.1.
        let start = Instant::now();
        let mut s = Schedules::new(&open(100.0, 1), start, 0, 4);
        let h1: Vec<_> = (0..2).map(|_| s.h1.advance().unwrap()).collect();
        assert_eq!(h1[1] - h1[0], Duration::from_millis(10));
        assert_eq!(s.streams.len(), 4);
        let h2: Vec<_> = (0..2).map(|_| s.streams[3].advance().unwrap()).collect();
        assert_eq!(h2[1] - h2[0], Duration::from_millis(40));
        assert_eq!(h2[0] - start, Duration::from_millis(30));
    }

    fn plan(
        spec: &str,
        step: Option<u64>,
        run: Option<u64>,
    ) -> Result<(RatePlan, Option<Duration>)> {
        RatePlan::parse(
            spec,
            step.map(Duration::from_secs),
            run.map(Duration::from_secs),
            Duration::ZERO,
        )
    }

    #[test]
    fn steps_send_at_each_rate_in_turn() {
        // 10/s for 2 s, then 100/s for 2 s: 20 sends 100 ms apart, then 10 ms apart.
        let (p, run) = plan("10,100", Some(2), None).unwrap();
        assert_eq!(run, Some(Duration::from_secs(4)));
        assert_eq!(p.steps().len(), 2);
        let t = |n| p.time_of(n);
        assert!((t(19) - 1.9).abs() < 1e-9 && (t(20) - 2.0).abs() < 1e-9);
        assert!((t(21) - 2.01).abs() < 1e-9 && (t(219) - 3.99).abs() < 1e-9);
        // After the schedule the last rate holds; the counts are the inverse of the times.
        assert!((t(230) - 4.1).abs() < 1e-9);
        for n in [0, 7, 20, 150, 230] {
            assert!((p.count(t(n)) - n as f64).abs() < 1e-6, "{n}");
        }
        assert_eq!(
            (p.rate_at(1.0), p.rate_at(2.5), p.rate_at(99.0)),
            (10.0, 100.0, 100.0)
        );
    }

    #[test]
    fn ramps_rise_linearly_and_are_reported_in_pieces() {
        // 0..200 over 10 s: the rate at t is 20 t, so the sends until t are 10 t².
        let (p, run) = plan("0..200", None, Some(10)).unwrap();
        assert_eq!(run, Some(Duration::from_secs(10)));
        for n in [1u64, 10, 250, 999] {
            let want = (n as f64 / 10.0).sqrt();
            assert!((p.time_of(n) - want).abs() < 1e-9, "{n}");
        }
        assert!((p.rate_at(5.0) - 100.0).abs() < 1e-9);
        let steps = p.steps();
        assert_eq!(steps.len(), 10);
        assert_eq!(
            (steps[3].start, steps[3].from, steps[3].to),
            (3.0, 60.0, 80.0)
        );
        // --step-duration cuts it differently; a longer -D holds the last rate.
        assert_eq!(
            plan("0..200", Some(4), Some(10)).unwrap().0.steps().len(),
            3
        );
        let (p, run) = plan("100,200", Some(5), Some(12)).unwrap();
        assert_eq!(run, Some(Duration::from_secs(12)));
        assert_eq!(p.steps().len(), 3);
        assert_eq!(p.steps()[2].len, 2.0);
    }

    #[test]
    fn warm_up_runs_at_the_first_rate() {
        let (p, _) = RatePlan::parse(
            "10,100",
            Some(Duration::from_secs(1)),
            None,
            Duration::from_secs(2),
        )
        .unwrap();
        // 20 sends in the 2 s warm-up, then the window's first at 2 s.
        assert!((p.time_of(0)).abs() < 1e-9);
        assert!((p.time_of(20) - 2.0).abs() < 1e-9);
        assert!((p.time_of(31) - 3.01).abs() < 1e-9);
    }

    #[test]
    fn schedule_files() {
        let dir = std::env::temp_dir().join(format!("loadterm-sched-{}", std::process::id()));
        std::fs::write(&dir, "# warm\n0 100\n10s 100..300  # ramp\n20s 300\n30s\n").unwrap();
        let spec = format!("@{}", dir.display());
        let (p, run) = plan(&spec, None, None).unwrap();
        assert_eq!(run, Some(Duration::from_secs(30)));
        assert_eq!(p.steps().len(), 3);
        assert!((p.rate_at(15.0) - 200.0).abs() < 1e-9);
        assert!((p.count(30.0) - (1000.0 + 2000.0 + 3000.0)).abs() < 1e-6);
        // Without an end line, -D ends the last one.
        std::fs::write(&dir, "0 100\n5 200\n").unwrap();
        assert!(plan(&spec, None, None).is_err());
        assert_eq!(plan(&spec, None, Some(8)).unwrap().0.steps()[1].len, 3.0);
        for bad in [
            "5 100\n",
            "0 100\n0 200\n",
            "0 x\n",
            "0 100\n10\n20 5\n",
            "0 0\n",
        ] {
            std::fs::write(&dir, bad).unwrap();
            assert!(plan(&spec, None, Some(60)).is_err(), "{bad:?}");
        }
        std::fs::remove_file(&dir).unwrap();
    }

    #[test]
    fn schedules_that_cannot_work_are_refused() {
        assert!(plan("100", None, None).unwrap().0.steps().is_empty());
        for (spec, step, run) in [
            ("100,200", None, None),       // steps without --step-duration
            ("100..200", None, None),      // a ramp without -D
            ("100,200", Some(5), Some(8)), // -D shorter than the steps
            ("100,0", Some(5), None),      // a step at 0
            ("100..0", None, Some(5)),     // ending at 0
            ("100", Some(5), None),        // --step-duration without a schedule
            ("1e400", None, None),
            ("-5", None, None),
        ] {
            assert!(plan(spec, step, run).is_err(), "{spec}");
        }
    }
}

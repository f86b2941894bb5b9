//! Per-worker measurements (no sharing on the request path), merged at the end.

use hdrhistogram::Histogram;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Highest latency the histograms track (longer ones are clamped to it).
const MAX_US: u64 = 3_600_000_000;

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_US, 3).expect("valid histogram bounds")
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Errors {
    pub connect: u64,
    pub tls: u64,
    pub timeout: u64,
    pub reset: u64,
    pub protocol: u64,
}

impl Errors {
    pub fn total(&self) -> u64 {
        self.connect + self.tls + self.timeout + self.reset + self.protocol
    }

    pub(crate) fn add(&mut self, o: &Errors) {
        self.connect += o.connect;
        self.tls += o.tls;
        self.timeout += o.timeout;
        self.reset += o.reset;
        self.protocol += o.protocol;
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ErrorKind {
    Connect,
    Tls,
    Timeout,
    Reset,
    Protocol,
}

impl ErrorKind {
    /// The name used in the report (the `errors` fields).
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::Tls => "tls",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Reset => "reset",
            ErrorKind::Protocol => "protocol",
        }
    }
}

/// A connection attempt that failed, and why (the reason is shown to the user as is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectFailure {
    pub kind: ErrorKind,
    pub reason: String,
}

impl ConnectFailure {
    pub fn new(kind: ErrorKind, reason: impl std::fmt::Display) -> ConnectFailure {
        ConnectFailure {
            kind,
            reason: format!("{}: {reason}", kind.name()),
        }
    }
}

/// One finished request's timestamps.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// When the schedule wanted the request sent (open loop only).
    pub intended: Option<Instant>,
    pub sent: Instant,
    pub first_byte: Instant,
    pub done: Instant,
    pub status: u16,
    pub head_bytes: u64,
    pub body_bytes: u64,
}

#[derive(Debug, Clone)]
pub struct Recorder {
    t0: Instant,
    /// Only requests finishing in [from, until) are recorded (warm-up before, end of run after).
    from: Instant,
    until: Option<Instant>,
    pub latency: Histogram<u64>,
    pub ttfb: Histogram<u64>,
    pub corrected: Histogram<u64>,
    /// Final statuses only.
    pub status: BTreeMap<u16, u64>,
    /// Interim (1xx) response heads, which precede a final one (or take its place when the
    /// server ends the exchange after one: that request is then an error).
    pub interim: u64,
    pub errors: Errors,
    /// The first reason given for each kind of error, and when (kept also during the warm-up:
    /// it explains what went wrong, it is not a measurement).
    pub first_reasons: BTreeMap<ErrorKind, (Instant, String)>,
    pub started: u64,
    /// Requests given back to send again (counted once in `started`).
    pub retried: u64,
    pub completed: u64,
    pub head_bytes: u64,
    pub body_bytes: u64,
    /// Open loop: sends later than 1 ms after their intended time.
    pub late: u64,
    /// Open loop: sends whose intended time fell in the window (sent whenever), so that
    /// `missed` counts exactly the intended sends that never happened.
    pub on_schedule: u64,
    pub first_done: Option<Instant>,
    pub last_done: Option<Instant>,
    /// Per second since t0: (requests completed, errors).
    pub series: Vec<(u64, u64)>,
    /// Latency histograms per second and step (0 without a schedule), when an interval log
    /// was asked for.
    pub intervals: Option<BTreeMap<(usize, usize), Histogram<u64>>>,
    /// When each step of a rate schedule starts (none without one).
    step_starts: Vec<Instant>,
    /// What each step's requests came to, by their intended send time.
    pub steps: Vec<StepRecord>,
    /// With ALPN: the protocols servers picked, `ALPN_H1` and `ALPN_H2` bits.
    pub alpn: u8,
    pub handshakes: Handshakes,
}

/// What the requests of one step of a rate schedule came to (by intended send time: a
/// request due in a step counts in it, however late it went or came back).
#[derive(Debug, Clone)]
pub struct StepRecord {
    pub latency: Histogram<u64>,
    pub corrected: Histogram<u64>,
    pub started: u64,
    pub completed: u64,
    /// Completed with a 2xx or 3xx status.
    pub succeeded: u64,
    /// Transport errors (by when they happened).
    pub errors: u64,
    pub late: u64,
    pub on_schedule: u64,
}

impl Default for StepRecord {
    fn default() -> StepRecord {
        StepRecord {
            latency: histogram(),
            corrected: histogram(),
            started: 0,
            completed: 0,
            succeeded: 0,
            errors: 0,
            late: 0,
            on_schedule: 0,
        }
    }
}

impl StepRecord {
    fn add(&mut self, o: &StepRecord) {
        self.latency.add(&o.latency).expect("same bounds");
        self.corrected.add(&o.corrected).expect("same bounds");
        self.started += o.started;
        self.completed += o.completed;
        self.succeeded += o.succeeded;
        self.errors += o.errors;
        self.late += o.late;
        self.on_schedule += o.on_schedule;
    }
}

/// TLS handshakes made, whole run (warm-up included, as the server counts them): full ones,
/// ones that resumed a session, and of those the ones whose 0-RTT data the server accepted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Handshakes {
    pub full: u64,
    pub resumed: u64,
    #[serde(rename = "0rtt")]
    pub early_data: u64,
}

impl Handshakes {
    pub(crate) fn add(&mut self, o: &Handshakes) {
        self.full += o.full;
        self.resumed += o.resumed;
        self.early_data += o.early_data;
    }

    /// QUIC's handshakes, all counted full so far, split by the certificates verified: a
    /// resumed handshake verifies none.
    pub(crate) fn settle_quic(&mut self, verified: u64) {
        let all = self.full + self.resumed;
        self.full = verified.min(all);
        self.resumed = all - self.full;
    }
}

pub const ALPN_H1: u8 = 1;
pub const ALPN_H2: u8 = 2;

fn us(d: Duration) -> u64 {
    (d.as_micros() as u64).clamp(1, MAX_US)
}

impl Recorder {
    pub fn new(t0: Instant, from: Instant, until: Option<Instant>, intervals: bool) -> Recorder {
        Recorder {
            t0,
            from,
            until,
            latency: histogram(),
            ttfb: histogram(),
            corrected: histogram(),
            status: BTreeMap::new(),
            interim: 0,
            errors: Errors::default(),
            first_reasons: BTreeMap::new(),
            started: 0,
            retried: 0,
            completed: 0,
            head_bytes: 0,
            body_bytes: 0,
            late: 0,
            on_schedule: 0,
            first_done: None,
            last_done: None,
            series: Vec::new(),
            intervals: intervals.then(BTreeMap::new),
            step_starts: Vec::new(),
            steps: Vec::new(),
            alpn: 0,
            handshakes: Handshakes::default(),
        }
    }

    /// Record the steps of a rate schedule apart, each starting at its instant.
    pub fn with_steps(mut self, starts: Vec<Instant>) -> Recorder {
        self.steps = vec![StepRecord::default(); starts.len()];
        self.step_starts = starts;
        self
    }

    /// The step a request intended (or sent, or failing) at `t` belongs to.
    fn step_of(&self, t: Instant) -> Option<usize> {
        (!self.steps.is_empty()).then(|| {
            self.step_starts
                .partition_point(|s| *s <= t)
                .saturating_sub(1)
        })
    }

    fn in_window(&self, t: Instant) -> bool {
        t >= self.from && self.until.is_none_or(|u| t < u)
    }

    fn second(&mut self, t: Instant) -> usize {
        let s = t.saturating_duration_since(self.t0).as_secs() as usize;
        if self.series.len() <= s {
            self.series.resize(s + 1, (0, 0));
        }
        s
    }

    pub fn sent(&mut self, intended: Option<Instant>, at: Instant) {
        let due_in_window = intended.is_some_and(|i| self.in_window(i));
        let started = self.in_window(at);
        let late = started
            && intended.is_some_and(|i| at.saturating_duration_since(i) > Duration::from_millis(1));
        self.on_schedule += u64::from(due_in_window);
        self.started += u64::from(started);
        self.late += u64::from(late);
        if let Some(k) = self.step_of(intended.unwrap_or(at)) {
            let s = &mut self.steps[k];
            s.on_schedule += u64::from(due_in_window);
            s.started += u64::from(started);
            s.late += u64::from(late);
        }
    }

    pub fn done(&mut self, s: &Sample) {
        if !self.in_window(s.done) {
            return;
        }
        self.completed += 1;
        *self.status.entry(s.status).or_default() += 1;
        self.head_bytes += s.head_bytes;
        self.body_bytes += s.body_bytes;
        let lat = us(s.done - s.sent);
        self.latency.saturating_record(lat);
        self.ttfb
            .saturating_record(us(s.first_byte.saturating_duration_since(s.sent)));
        let corrected = s.intended.map(|i| us(s.done.saturating_duration_since(i)));
        if let Some(c) = corrected {
            self.corrected.saturating_record(c);
        }
        let step = self.step_of(s.intended.unwrap_or(s.sent));
        if let Some(k) = step {
            let st = &mut self.steps[k];
            st.completed += 1;
            st.succeeded += u64::from((200..400).contains(&s.status));
            st.latency.saturating_record(lat);
            if let Some(c) = corrected {
                st.corrected.saturating_record(c);
            }
        }
        self.first_done.get_or_insert(s.done);
        self.last_done = Some(s.done);
        let sec = self.second(s.done);
        self.series[sec].0 += 1;
        if let Some(iv) = self.intervals.as_mut() {
            iv.entry((sec, step.unwrap_or(0)))
                .or_insert_with(histogram)
                .saturating_record(lat);
        }
    }

    pub fn retried(&mut self, n: u64, at: Instant) {
        if self.in_window(at) {
            self.retried += n;
        }
    }

    pub fn interim(&mut self, at: Instant) {
        if self.in_window(at) {
            self.interim += 1;
        }
    }

    pub fn error(&mut self, kind: ErrorKind, at: Instant) {
        if !self.in_window(at) {
            return;
        }
        match kind {
            ErrorKind::Connect => self.errors.connect += 1,
            ErrorKind::Tls => self.errors.tls += 1,
            ErrorKind::Timeout => self.errors.timeout += 1,
            ErrorKind::Reset => self.errors.reset += 1,
            ErrorKind::Protocol => self.errors.protocol += 1,
        }
        if let Some(k) = self.step_of(at) {
            self.steps[k].errors += 1;
        }
        let sec = self.second(at);
        self.series[sec].1 += 1;
    }

    /// A TLS handshake done: resumed or full.
    pub fn handshake(&mut self, resumed: bool) {
        if resumed {
            self.handshakes.resumed += 1;
        } else {
            self.handshakes.full += 1;
        }
    }

    /// Keep `f`'s reason if it is the first of its kind.
    pub fn reason(&mut self, f: &ConnectFailure, at: Instant) {
        self.first_reasons
            .entry(f.kind)
            .or_insert_with(|| (at, f.reason.clone()));
    }

    pub fn merge(&mut self, o: &Recorder) {
        self.latency.add(&o.latency).expect("same bounds");
        self.ttfb.add(&o.ttfb).expect("same bounds");
        self.corrected.add(&o.corrected).expect("same bounds");
        for (k, v) in &o.status {
            *self.status.entry(*k).or_default() += v;
        }
        self.interim += o.interim;
        self.alpn |= o.alpn;
        self.handshakes.add(&o.handshakes);
        self.errors.add(&o.errors);
        for (kind, (at, reason)) in &o.first_reasons {
            match self.first_reasons.get(kind) {
                Some((mine, _)) if mine <= at => {}
                _ => {
                    self.first_reasons.insert(*kind, (*at, reason.clone()));
                }
            }
        }
        self.started += o.started;
        self.retried += o.retried;
        self.completed += o.completed;
        self.head_bytes += o.head_bytes;
        self.body_bytes += o.body_bytes;
        self.late += o.late;
        self.on_schedule += o.on_schedule;
        self.first_done = match (self.first_done, o.first_done) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.last_done = self.last_done.max(o.last_done);
        if self.series.len() < o.series.len() {
            self.series.resize(o.series.len(), (0, 0));
        }
        for (a, b) in self.series.iter_mut().zip(&o.series) {
            a.0 += b.0;
            a.1 += b.1;
        }
        if let (Some(mine), Some(theirs)) = (self.intervals.as_mut(), o.intervals.as_ref()) {
            for (k, h) in theirs {
                mine.entry(*k)
                    .or_insert_with(histogram)
                    .add(h)
                    .expect("same bounds");
            }
        }
        for (a, b) in self.steps.iter_mut().zip(&o.steps) {
            a.add(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_and_merge() {
        let t0 = Instant::now();
        let from = t0 + Duration::from_secs(1);
        let mut a = Recorder::new(t0, from, Some(t0 + Duration::from_secs(3)), false);
        let mut b = a.clone();
        let sample = |done_ms: u64, lat_ms: u64| Sample {
            intended: None,
            sent: t0 + Duration::from_millis(done_ms - lat_ms),
            first_byte: t0 + Duration::from_millis(done_ms - lat_ms / 2),
            done: t0 + Duration::from_millis(done_ms),
            status: 200,
            head_bytes: 10,
            body_bytes: 100,
        };
        a.done(&sample(500, 10)); // warm-up: ignored
        a.done(&sample(1500, 10));
        b.done(&sample(2500, 30));
        b.done(&sample(3500, 10)); // after the end: ignored
        b.error(ErrorKind::Reset, t0 + Duration::from_millis(2600));
        // The earliest reason of each kind wins, whichever worker saw it.
        let tls = |n| ConnectFailure::new(ErrorKind::Tls, format!("bad {n}"));
        a.reason(&tls(1), t0 + Duration::from_millis(20));
        a.reason(&tls(2), t0 + Duration::from_millis(5));
        b.reason(&tls(3), t0 + Duration::from_millis(10));
        b.reason(&ConnectFailure::new(ErrorKind::Connect, "refused"), t0);
        a.merge(&b);
        let reasons: Vec<_> = a.first_reasons.values().map(|(_, r)| r.as_str()).collect();
        assert_eq!(reasons, ["connect: refused", "tls: bad 3"]);
        assert_eq!((a.completed, a.body_bytes, a.errors.reset), (2, 200, 1));
        assert_eq!(a.series, vec![(0, 0), (1, 0), (1, 1)]);
        assert_eq!(a.latency.max() / 1000, 30);
        assert_eq!(a.latency.min() / 1000, 10);
    }

    #[test]
    fn late_sends_and_corrected_latency() {
        let t0 = Instant::now();
        let ms = |m: u64| t0 + Duration::from_millis(m);
        let us = |u: u64| t0 + Duration::from_micros(u);
        let mut r = Recorder::new(t0, ms(100), Some(ms(10_000)), false);
        r.sent(Some(ms(200)), ms(201)); // 1 ms behind: on time
        r.sent(Some(ms(200)), us(201_001)); // just over 1 ms: late
        r.sent(Some(ms(300)), ms(250)); // early (never happens, must not count)
        r.sent(None, ms(500)); // closed loop: never late
        r.sent(Some(ms(10)), ms(50)); // during warm-up: not counted at all
        r.sent(Some(ms(90)), ms(110)); // due in warm-up, sent after: started, not on schedule
        r.sent(Some(ms(9_999)), ms(10_001)); // due in the window, sent after it: on schedule
        assert_eq!((r.started, r.late, r.on_schedule), (5, 2, 4));
        // Sent 300 ms after its intended time, answered 20 ms later.
        r.done(&Sample {
            intended: Some(ms(1000)),
            sent: ms(1300),
            first_byte: ms(1310),
            done: ms(1320),
            status: 200,
            head_bytes: 0,
            body_bytes: 0,
        });
        assert_eq!(r.latency.max() / 1000, 20);
        assert_eq!(r.ttfb.max() / 1000, 10);
        assert_eq!(r.corrected.max() / 1000, 320);
        let mut closed = Recorder::new(t0, t0, None, false);
        closed.done(&Sample {
            intended: None,
            sent: ms(1),
            first_byte: ms(2),
            done: ms(3),
            status: 200,
            head_bytes: 0,
            body_bytes: 0,
        });
        assert!(closed.corrected.is_empty() && closed.latency.len() == 1);
    }
}

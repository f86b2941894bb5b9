//! What one worker thread's tasks share: the setup, the recorder, the request budget (`-n`) or
//! deadline (`-D`), the pace. Shared between this worker's tasks only (Rc/RefCell), never across
//! threads (but for the progress counters).

use crate::record::{ConnectFailure, ErrorKind, Recorder};
use crate::sched::Pace;
use crate::setup::Setup;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Live counters for the progress line (shared across workers; relaxed atomics).
#[derive(Debug, Default)]
pub(crate) struct Progress {
    pub done: AtomicU64,
    pub errors: AtomicU64,
}

/// Stops a run that cannot work (a certificate the client does not trust, nothing listening)
/// instead of letting it burn its whole budget on retries: when every connection slot failed
/// its first attempt and no connection was ever made, the run ends (shared across workers).
#[derive(Debug)]
pub(crate) struct Startup {
    slots: u64,
    failed: AtomicU64,
    connected: AtomicBool,
    stopped: AtomicBool,
    /// The warning that the rate cannot be carried was printed (by one worker, once).
    rate_warned: AtomicBool,
}

impl Startup {
    pub(crate) fn new(slots: usize) -> Startup {
        Startup {
            slots: slots as u64,
            failed: AtomicU64::new(0),
            connected: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            rate_warned: AtomicBool::new(false),
        }
    }

    /// True the first time only: whether to print the warning that the rate cannot be carried.
    pub(crate) fn first_rate_warning(&self) -> bool {
        !self.rate_warned.swap(true, Ordering::Relaxed)
    }

    /// A connection was made (TCP, TLS and ALPN done, or QUIC handshake done).
    pub(crate) fn connected(&self) {
        if !self.connected.load(Ordering::Relaxed) {
            self.connected.store(true, Ordering::Relaxed);
        }
    }

    /// Whether a connection was ever made.
    pub(crate) fn any_connected(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
    }

    /// A slot's first attempt failed.
    fn first_attempt_failed(&self) {
        let failed = self.failed.fetch_add(1, Ordering::Relaxed) + 1;
        if failed >= self.slots && !self.connected.load(Ordering::Relaxed) {
            self.stopped.store(true, Ordering::Relaxed);
        }
    }

    /// Whether the run was stopped because no connection could be made.
    pub(crate) fn stopped(&self) -> bool {
        self.stopped.load(Ordering::Relaxed)
    }
}

/// One worker thread's state, shared by its connection tasks.
pub(crate) struct Worker {
    pub setup: Arc<Setup>,
    pub rec: RefCell<Recorder>,
    /// Requests this worker may still start (`-n`), or unlimited until `deadline` (`-D`).
    pub tickets: Option<Cell<u64>>,
    pub deadline: Option<Instant>,
    pub pace: Pace,
    pub start: Instant,
    pub progress: Option<Arc<Progress>>,
    pub endpoint: Option<quinn::Endpoint>,
    pub counter: Cell<u64>,
    pub startup: Arc<Startup>,
    /// Requests to send again, with their index and intended time: ones the server did not
    /// process (`inflight::unprocessed`).
    pub retries: RefCell<VecDeque<(u64, Option<Instant>)>>,
    /// `--tls-resume FRACTION`: the fraction's running sum, so that the share of connections
    /// that resume is exact, evenly spread.
    pub resumed_share: Cell<f64>,
}

impl Worker {
    /// Whether the next connection resumes a TLS session (`--tls-resume`).
    pub(crate) fn resume_next(&self) -> bool {
        match self.setup.resume {
            crate::tls::ResumePolicy::Never => false,
            crate::tls::ResumePolicy::Always => true,
            crate::tls::ResumePolicy::Fraction(f) => {
                let sum = self.resumed_share.get() + f;
                let resume = sum >= 1.0;
                self.resumed_share.set(if resume { sum - 1.0 } else { sum });
                resume
            }
        }
    }

    /// Whether more requests may start now: new ones, or ones given back.
    pub(crate) fn more(&self) -> bool {
        self.fresh() || (self.running() && !self.retries.borrow().is_empty())
    }

    /// Neither stopped nor past the deadline.
    fn running(&self) -> bool {
        !self.startup.stopped() && self.deadline.is_none_or(|d| Instant::now() < d)
    }

    /// Whether a new request may start: the budget (`-n`) or the deadline allows it.
    fn fresh(&self) -> bool {
        match &self.tickets {
            Some(t) => !self.startup.stopped() && t.get() > 0,
            None => self.running(),
        }
    }

    /// Take the right to send one request; returns its index (for round-robin URLs).
    pub(crate) fn take(&self) -> Option<u64> {
        if !self.fresh() {
            return None;
        }
        if let Some(t) = &self.tickets {
            t.set(t.get() - 1);
        }
        let i = self.counter.get();
        self.counter.set(i + 1);
        Some(i)
    }

    /// A request given back to send again: its index and intended time.
    pub(crate) fn take_retry(&self) -> Option<(u64, Option<Instant>)> {
        let mut retries = self.retries.borrow_mut();
        if retries.is_empty() || !self.running() {
            return None;
        }
        retries.pop_front()
    }

    /// A connection could not be made: that costs one request, a new one or else one given
    /// back (which would otherwise keep a `-n` run going), so that a run against a server
    /// that is gone ends.
    pub(crate) fn forfeit(&self) {
        if self.take().is_none() {
            self.take_retry();
        }
    }

    /// Requests the server did not process, to send again on another connection (RFC 9112
    /// §9.3.2), counted as retried rather than lost.
    pub(crate) fn give_back(&self, again: impl Iterator<Item = (u64, Option<Instant>)>) {
        let mut retries = self.retries.borrow_mut();
        let before = retries.len();
        retries.extend(again);
        let n = (retries.len() - before) as u64;
        self.rec.borrow_mut().retried(n, Instant::now());
    }

    pub(crate) fn error(&self, kind: ErrorKind) {
        self.rec.borrow_mut().error(kind, Instant::now());
        if let Some(p) = &self.progress {
            p.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A connection attempt failed: counted, its reason kept if it is the first of its kind;
    /// `first` when it was the slot's first attempt.
    pub(crate) fn failed(&self, f: &ConnectFailure, first: bool) {
        self.error(f.kind);
        self.rec.borrow_mut().reason(f, Instant::now());
        if first {
            self.startup.first_attempt_failed();
        }
    }

    /// An interim (1xx) response head arrived; the request still waits for its final one.
    pub(crate) fn interim(&self) {
        self.rec.borrow_mut().interim(Instant::now());
    }

    pub(crate) fn done(&self, s: &crate::record::Sample) {
        self.rec.borrow_mut().done(s);
        if let Some(p) = &self.progress {
            p.done.fetch_add(1, Ordering::Relaxed);
        }
    }
}

pub(crate) type WorkerRef = Rc<Worker>;

/// What one connection may still start (`--requests-per-conn`; unlimited without it): once
/// spent, the connection ends when its requests are answered and a new one is made.
pub(crate) struct Budget(Cell<u64>);

impl Budget {
    pub(crate) fn new(requests: Option<u64>) -> Budget {
        Budget(Cell::new(requests.unwrap_or(u64::MAX)))
    }

    pub(crate) fn spent(&self) -> bool {
        self.0.get() == 0
    }
}

impl Worker {
    /// As `more`, on a connection with budget `b`.
    pub(crate) fn more_on(&self, b: &Budget) -> bool {
        !b.spent() && self.more()
    }

    /// As `take`, spending one of the connection's budget `b`.
    pub(crate) fn take_on(&self, b: &Budget) -> Option<u64> {
        if b.spent() {
            return None;
        }
        let i = self.take()?;
        b.0.set(b.0.get() - 1);
        Some(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::setup::{Setup, SetupOptions};
    use std::time::Duration;

    fn worker(tickets: Option<u64>, deadline: Option<Instant>) -> Worker {
        let setup = Setup::new(&SetupOptions {
            urls: &["http://127.0.0.1:9/".to_owned()],
            proto: None,
            connect_to: None,
            sni: None,
            insecure: false,
            cacert: None,
            method: None,
            headers: &[],
            data: bytes::Bytes::new(),
            streams: 1,
            timeout: Duration::from_secs(1),
            offer: Default::default(),
            resume: crate::tls::ResumePolicy::Always,
            requests_per_conn: None,
            zero_rtt: false,
        })
        .unwrap();
        let now = Instant::now();
        Worker {
            setup: Arc::new(setup),
            rec: RefCell::new(Recorder::new(now, now, None, false)),
            tickets: tickets.map(Cell::new),
            deadline,
            pace: Pace::Closed,
            start: now,
            progress: None,
            endpoint: None,
            counter: Cell::new(0),
            startup: Arc::new(Startup::new(2)),
            retries: RefCell::default(),
            resumed_share: Cell::new(0.0),
        }
    }

    #[test]
    fn tickets_run_out() {
        let w = worker(Some(3), None);
        assert!(w.more());
        let taken: Vec<_> = std::iter::from_fn(|| w.take()).collect();
        assert_eq!(taken, [0, 1, 2]);
        assert!(!w.more());
        assert_eq!(w.take(), None);
    }

    #[test]
    fn requests_given_back_are_sent_again_past_the_budget() {
        let w = worker(Some(2), None);
        let t = Instant::now();
        assert_eq!((w.take(), w.take()), (Some(0), Some(1)));
        assert!(!w.more());
        w.give_back([(1, Some(t))].into_iter());
        assert!(w.more(), "a request given back is still to do");
        assert_eq!(w.take(), None, "but it takes no new ticket");
        assert_eq!(w.take_retry(), Some((1, Some(t))));
        assert!(!w.more() && w.take_retry().is_none());
        assert_eq!(w.rec.borrow().retried, 1);
    }

    #[test]
    fn failed_connections_use_up_new_requests_then_ones_given_back() {
        let w = worker(Some(2), None);
        assert_eq!(w.take(), Some(0));
        w.give_back([(0, None)].into_iter());
        w.forfeit();
        assert!(w.more(), "a new request went first");
        w.forfeit();
        assert!(!w.more() && w.take_retry().is_none());
    }

    #[test]
    fn requests_given_back_are_dropped_past_the_deadline() {
        let w = worker(None, Some(Instant::now()));
        w.give_back([(0, None)].into_iter());
        assert_eq!(w.take_retry(), None);
    }

    #[test]
    fn a_run_stops_when_every_first_attempt_fails() {
        let f = ConnectFailure::new(ErrorKind::Tls, "certificate verify failed");
        let w = worker(Some(100), None);
        w.failed(&f, true);
        w.failed(&f, false); // a retry: not a slot's first attempt
        assert!(w.more(), "one slot of two failed so far");
        w.failed(&f, true);
        assert!(!w.more() && w.take().is_none());
        assert_eq!(w.rec.borrow().errors.tls, 3);
        // Once a connection was made, failures never stop the run.
        let w = worker(Some(100), None);
        w.startup.connected();
        w.failed(&f, true);
        w.failed(&f, true);
        assert!(w.more());
    }

    #[test]
    fn duration_runs_stop_at_the_deadline() {
        let w = worker(None, Some(Instant::now() + Duration::from_secs(60)));
        assert_eq!((w.take(), w.take()), (Some(0), Some(1)));
        let w = worker(None, Some(Instant::now()));
        assert!(!w.more());
        assert_eq!(w.take(), None);
    }
}

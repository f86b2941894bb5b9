//! One worker thread: a current-thread runtime running its share of the connections. State is
//! shared between this worker's tasks only (Rc/RefCell), never across threads.

use crate::record::{ErrorKind, Recorder};
use crate::setup::Setup;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// When requests may be sent.
#[derive(Debug, Clone, Copy)]
pub enum Pace {
    /// As fast as responses come back.
    Closed,
    /// One request every `interval` per slot (connection on HTTP/1.1, stream on HTTP/2 and 3).
    Open { interval: Duration },
}

/// Live counters for the progress line (shared across workers; relaxed atomics).
#[derive(Debug, Default)]
pub struct Progress {
    pub done: AtomicU64,
    pub errors: AtomicU64,
}

pub struct Worker {
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
}

impl Worker {
    /// Whether more requests may start now.
    pub fn more(&self) -> bool {
        match &self.tickets {
            Some(t) => t.get() > 0,
            None => self.deadline.is_none_or(|d| Instant::now() < d),
        }
    }

    /// Take the right to send one request; returns its index (for round-robin URLs).
    pub fn take(&self) -> Option<u64> {
        if let Some(t) = &self.tickets {
            if t.get() == 0 {
                return None;
            }
            t.set(t.get() - 1);
        } else if !self.more() {
            return None;
        }
        let i = self.counter.get();
        self.counter.set(i + 1);
        Some(i)
    }

    pub fn error(&self, kind: ErrorKind) {
        self.rec.borrow_mut().error(kind, Instant::now());
        if let Some(p) = &self.progress {
            p.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn done(&self, s: &crate::record::Sample) {
        self.rec.borrow_mut().done(s);
        if let Some(p) = &self.progress {
            p.done.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Open-loop schedule of one slot: intended send times `start + k * interval`, with a random
/// phase so that slots do not fire in lockstep.
pub struct Schedule {
    next: Option<Instant>,
    interval: Duration,
}

impl Schedule {
    pub fn new(w: &Worker, slot: u64) -> Schedule {
        match w.pace {
            Pace::Closed => Schedule {
                next: None,
                interval: Duration::ZERO,
            },
            Pace::Open { interval } => {
                // Spread slots evenly over one interval (deterministic, no RNG needed).
                let phase = interval.mul_f64(
                    ((slot.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11) as f64) / (1u64 << 53) as f64,
                );
                Schedule {
                    next: Some(w.start + phase),
                    interval,
                }
            }
        }
    }

    /// Wait for the next intended time (open loop); returns it.
    pub async fn wait(&mut self) -> Option<Instant> {
        let next = self.next?;
        tokio::time::sleep_until(next.into()).await;
        self.next = Some(next + self.interval);
        Some(next)
    }

    /// The next intended time, if open loop.
    pub fn peek(&self) -> Option<Instant> {
        self.next
    }

    pub fn advance(&mut self) -> Option<Instant> {
        let n = self.next?;
        self.next = Some(n + self.interval);
        Some(n)
    }
}

pub type WorkerRef = Rc<Worker>;

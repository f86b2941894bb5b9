//! Per-thread state the exchanges need: the random generator (for the `r` suffix,
//! distributions and pieces) and the HTTP date, rendered once a second.

use loadterm_exchange::{http_date, Exchange, HttpDate, Request};
use loadterm_plan::Rng;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// `--seed`, set once at startup.
static SEED: OnceLock<u32> = OnceLock::new();
/// Threads that seeded their generator so far: each gets its own stream.
static SEEDED: AtomicU32 = AtomicU32::new(0);

/// Seed every thread's generator from `seed` (`None`: from entropy). Call before any request.
pub fn seed(seed: Option<u32>) {
    if let Some(s) = seed {
        let _ = SEED.set(s);
    }
}

fn thread_rng() -> Rng {
    match SEED.get() {
        // Golden-ratio steps keep the threads' streams apart.
        Some(s) => {
            let n = SEEDED.fetch_add(1, Ordering::Relaxed);
            Rng::new(s.wrapping_add(n.wrapping_mul(0x9E37_79B9)))
        }
        None => Rng::from_entropy(),
    }
}

thread_local! {
    static RNG: RefCell<Rng> = RefCell::new(thread_rng());
    static DATE: Cell<(u64, HttpDate)> = const { Cell::new((u64::MAX, [0; 29])) };
}

pub fn exchange(req: &Request<'_>, t_first: Instant) -> Exchange {
    RNG.with(|r| Exchange::new(req, &mut r.borrow_mut(), t_first))
}

/// The current HTTP date. The coarse clock costs a few nanoseconds (no system call, no
/// hardware counter read); the text is redone only when the second changes.
pub fn date() -> HttpDate {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to; CLOCK_REALTIME_COARSE exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
    let now = ts.tv_sec.max(0) as u64;
    DATE.with(|d| {
        let (secs, text) = d.get();
        if secs == now {
            return text;
        }
        let text = http_date(now);
        d.set((now, text));
        text
    })
}

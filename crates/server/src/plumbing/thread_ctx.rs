//! Per-thread state the exchanges need: the random generator (for the `r` suffix,
//! distributions and pieces) and the HTTP date, rendered once a second; and `--burn`, the
//! calibration-only extra cost per request.

use loadterm_exchange::{http_date, Exchange, HttpDate, RequestSummary};
use loadterm_plan::Rng;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// `--seed`, set once at startup.
static SEED: OnceLock<u32> = OnceLock::new();
/// Threads that seeded their generator so far: each gets its own stream.
static SEEDED: AtomicU32 = AtomicU32::new(0);

/// Seed every thread's generator from `seed` (`None`: from entropy). Call before any request.
pub(crate) fn seed(seed: Option<u32>) {
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
    /// Picoseconds of burn owed by this thread (negative after an overshoot).
    static BURN_DEBT: Cell<i64> = const { Cell::new(0) };
}

/// Every request's plan is built here, for all three engines: the one place `--burn` spins.
pub(crate) fn exchange(req: &RequestSummary<'_>, t_first: Instant) -> Exchange {
    if BURN_FRACTION.load(Relaxed) != 0 {
        burn();
    }
    // The generator is taken out and put back rather than the exchange built inside `with`:
    // returned through the closure, the exchange was copied twice more.
    let mut rng = RNG.with_borrow(Rng::clone);
    let x = Exchange::new(req, &mut rng, t_first);
    RNG.set(rng);
    x
}

/// `--burn PERCENT`: the extra fraction (f64 bits; 0 = off).
static BURN_FRACTION: AtomicU64 = AtomicU64::new(0);
static BURN_REQUESTS: AtomicU64 = AtomicU64::new(0);
static BURNED_NS: AtomicU64 = AtomicU64::new(0);
/// Spin-loop steps per microsecond (measured by `set_burn`).
static STEPS_PER_US: AtomicU64 = AtomicU64::new(0);
/// The current extra cost per request, picoseconds.
static BURN_PER_REQUEST_PS: AtomicU64 = AtomicU64::new(0);
/// (process CPU ns, requests, burned ns) at the last re-estimate.
static BURN_MARK: Mutex<Option<(u64, u64, u64)>> = Mutex::new(None);
/// Requests between re-estimates of the own cost per request (the first mark is taken at the
/// first request, so a short run burns from its 257th request on).
const BURN_WINDOW: u64 = 256;
/// Spin once this much is owed. Short spins keep the injected cost a cost and nothing else: a
/// 20 µs spin let requests that arrived meanwhile share the next read, and that batching gave
/// back a third of a 3% burn at half the saturation rate.
const BURN_QUANTUM_PS: i64 = 200_000;

pub(crate) fn set_burn(percent: f64) {
    BURN_FRACTION.store((percent / 100.0).to_bits(), Relaxed);
    if percent > 0.0 {
        // Spins are counted in loop steps, not timed: a clock reading per spin (a system call
        // of a few hundred nanoseconds, more on a busy VM) would be a cost of its own. The
        // fastest of 16 timings of 2^17 steps gives the rate: a slow timing (an interrupt, a
        // cold start) would make every later spin shorter than counted.
        let steps = 1u64 << 17;
        let ns = (0..16)
            .map(|_| {
                let t0 = cpu_ns(libc::CLOCK_THREAD_CPUTIME_ID);
                spin(steps);
                cpu_ns(libc::CLOCK_THREAD_CPUTIME_ID) - t0
            })
            .min()
            .unwrap_or(1)
            .max(1);
        STEPS_PER_US.store((steps * 1000 / ns).max(1), Relaxed);
    }
}

/// A chain of dependent multiply-adds: a fixed cost per step, no memory traffic. Never inlined,
/// so that the timed spins and the counted ones are the same code, and so that a profile
/// finds the injected cost in this function's own samples (`ab --profile`); a `while` loop,
/// as a range's iterator would be calls of its own in an unoptimized build.
#[inline(never)]
fn spin(steps: u64) {
    let mut x = std::hint::black_box(1u64);
    let mut i = 0;
    while i < steps {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        i += 1;
    }
    std::hint::black_box(x);
}

#[allow(unsafe_code)] // clock_gettime
fn cpu_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to; both CPU-time clocks exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec.max(0) as u64 * 1_000_000_000 + ts.tv_nsec.max(0) as u64
}

/// Spin for the requested fraction of the process's own CPU cost per request, measured over
/// the last `BURN_WINDOW` requests minus what was burnt in them (so the burn does not feed on
/// itself). Spinning is counted in loop steps, so preemption does not shorten it.
fn burn() {
    let n = BURN_REQUESTS.fetch_add(1, Relaxed) + 1;
    if n == 1 || n.is_multiple_of(BURN_WINDOW) {
        if let Ok(mut mark) = BURN_MARK.try_lock() {
            let now = (
                cpu_ns(libc::CLOCK_PROCESS_CPUTIME_ID),
                n,
                BURNED_NS.load(Relaxed),
            );
            if let Some((cpu, reqs, burned)) = *mark {
                let own = (now.0 - cpu).saturating_sub(now.2 - burned) as f64;
                let fraction = f64::from_bits(BURN_FRACTION.load(Relaxed));
                let ps = own * 1000.0 / (now.1 - reqs).max(1) as f64 * fraction;
                BURN_PER_REQUEST_PS.store(ps as u64, Relaxed);
            }
            *mark = Some(now);
        }
    }
    let debt = BURN_DEBT.get() + BURN_PER_REQUEST_PS.load(Relaxed) as i64;
    if debt < BURN_QUANTUM_PS {
        BURN_DEBT.set(debt);
        return;
    }
    let per_us = STEPS_PER_US.load(Relaxed);
    let steps = debt as u64 * per_us / 1_000_000;
    spin(steps);
    let spent_ps = (steps * 1_000_000 / per_us.max(1)) as i64;
    BURNED_NS.fetch_add(spent_ps as u64 / 1000, Relaxed);
    BURN_DEBT.set(debt - spent_ps);
}

/// The current HTTP date. The coarse clock costs a few nanoseconds (no system call, no
/// hardware counter read); the text is redone only when the second changes.
#[allow(unsafe_code)] // clock_gettime
pub(crate) fn date() -> HttpDate {
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

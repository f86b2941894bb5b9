//! Precise wake-ups: the load generator's open-loop sends and the server's delays (`t=`, `P=`).
//! Tokio's timer has 1 ms resolution and rounds up, so a send waited for with it left on
//! average ~0.75 ms after its intended time, and the coordinated-omission-corrected latency
//! included that lag (measured at 200 req/s against a 65 µs server: corrected p50 809 µs); a
//! server delay of `t=1` took 2.2 ms at the p50. Here each worker thread has one timerfd armed at the
//! earliest pending deadline (absolute CLOCK_MONOTONIC, the clock behind `Instant`), with the
//! thread's timer slack lowered, so wakes come within microseconds.
//!
//! What is left is the wake-up itself: an idle CPU is halted (on a VM, the host must run the
//! vCPU again), and the timer fires tens of microseconds after its time (p50 37 µs on the
//! 2-vCPU VM here, `t=1` at 1.13 ms from the client). So the timerfd is armed early by a low
//! quantile of the wake-up latencies it has seen ([`Latency`]), and a wake that comes before
//! its deadline spins the rest of the way: most wakes come after it and spin not at all; none
//! wakes a sleep before its deadline.

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::future::Future;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tokio::io::unix::AsyncFd;

#[derive(Default)]
struct Timers {
    /// Deadlines with the id of the sleep waiting for each (stale entries of dropped or
    /// finished sleeps are skipped when they come up).
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    wakers: HashMap<u64, Waker>,
    next_id: u64,
    /// Where the timerfd is armed.
    armed: Option<Instant>,
    /// How late the timerfd fires, learned: it is armed this much early.
    latency: Latency,
    /// Wake-ups are rounded up to multiples of this duration from this instant (`set_grid`);
    /// none: exact.
    grid: Option<(Duration, Instant)>,
}

impl Timers {
    /// When the timerfd must fire for a deadline `at`: on the grid if there is one, early by
    /// the learned latency.
    fn wake_for(&self, at: Instant) -> Instant {
        let at = self.on_grid(at);
        at.checked_sub(self.latency.early).unwrap_or(at)
    }

    fn on_grid(&self, at: Instant) -> Instant {
        let Some((grid, epoch)) = self.grid else {
            return at;
        };
        let grid = grid.as_nanos();
        let since = at.saturating_duration_since(epoch).as_nanos();
        let cells = since.div_ceil(grid);
        epoch + Duration::from_nanos(u64::try_from(cells * grid).unwrap_or(u64::MAX))
    }
}

struct Driver {
    fd: AsyncFd<OwnedFd>,
    timers: RefCell<Timers>,
}

thread_local! {
    static DRIVER: RefCell<Option<Rc<Driver>>> = const { RefCell::new(None) };
}

/// Set up this worker thread's timer and spawn its driver on the current `LocalSet`.
pub fn start() -> std::io::Result<()> {
    // SAFETY: plain syscalls; the fd is owned by `OwnedFd` from here on.
    let fd = unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1_000 as libc::c_ulong);
        let fd = libc::timerfd_create(
            libc::CLOCK_MONOTONIC,
            libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
        );
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        OwnedFd::from_raw_fd(fd)
    };
    // SAFETY: an OwnedFd keeps its fd open and unchanged until the AsyncFd drops it.
    let fd = unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .map_err(|e| e.into_parts().1)?;
    let driver = Rc::new(Driver {
        fd,
        timers: RefCell::default(),
    });
    DRIVER.with(|d| *d.borrow_mut() = Some(driver.clone()));
    tokio::task::spawn_local(async move {
        loop {
            let Ok(mut ready) = driver.fd.readable().await else {
                return;
            };
            let mut expirations = [0u8; 8];
            // SAFETY: reads 8 bytes into an 8-byte buffer from a valid fd.
            unsafe {
                libc::read(
                    driver.fd.as_raw_fd(),
                    expirations.as_mut_ptr().cast(),
                    expirations.len(),
                );
            }
            ready.clear_ready();
            driver.fire();
        }
    });
    Ok(())
}

/// A low quantile of how late the timerfd fires after the time it is armed for, tracked one
/// wake at a time (frugal streaming: each wake moves the estimate up by `QUANTILE × STEP` if it
/// was later, down by `(1 − QUANTILE) × STEP` if earlier, so that it settles where a
/// `QUANTILE` of the wakes are earlier). Capped: a thread that is busy, not halted, when its
/// timer fires does not make every wake spin long.
#[derive(Debug, Default)]
struct Latency {
    early: Duration,
}

impl Latency {
    const QUANTILE: f64 = 0.1;
    const STEP: Duration = Duration::from_micros(2);
    const MAX: Duration = Duration::from_micros(100);

    fn learn(&mut self, late: Duration) {
        self.early = if late > self.early {
            (self.early + Self::STEP.mul_f64(Self::QUANTILE)).min(Self::MAX)
        } else {
            self.early
                .saturating_sub(Self::STEP.mul_f64(1.0 - Self::QUANTILE))
        };
    }
}

impl Driver {
    fn fire(&self) {
        let mut t = self.timers.borrow_mut();
        let woke = Instant::now();
        if let Some(armed) = t.armed.take() {
            t.latency.learn(woke.saturating_duration_since(armed));
        }
        // Deadlines up to the margin the timerfd was armed early by are this wake's: each is
        // spun to (a halted CPU would wake late again), none is woken before its time.
        let horizon = woke + t.latency.early;
        while let Some(&Reverse((at, id))) = t.heap.peek() {
            if at > horizon {
                break;
            }
            t.heap.pop();
            if let Some(w) = t.wakers.remove(&id) {
                while Instant::now() < at {
                    std::hint::spin_loop();
                }
                w.wake();
            }
        }
        if let Some(&Reverse((at, _))) = t.heap.peek() {
            let wake = t.wake_for(at);
            self.arm(&mut t, wake);
        }
    }

    fn arm(&self, t: &mut Timers, at: Instant) {
        // Instant is CLOCK_MONOTONIC: convert by the offset from now, read in this order so
        // that the error makes the wake late by nanoseconds, never early.
        let instant = Instant::now();
        // A time already past fires at once: the latency learned counts from now.
        t.armed = Some(at.max(instant));
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: valid out-pointer.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
        let ns = now.tv_nsec as u128 + at.saturating_duration_since(instant).as_nanos();
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: now.tv_sec + (ns / 1_000_000_000) as libc::time_t,
                // A zero it_value would disarm: at least 1 ns.
                tv_nsec: ((ns % 1_000_000_000) as libc::c_long).max(1),
            },
        };
        // SAFETY: valid fd and itimerspec.
        unsafe {
            libc::timerfd_settime(
                self.fd.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        };
    }
}

/// Round this thread's wake-ups up to multiples of `grid` (zero: exact): deadlines that fall in
/// the same window then share one wake-up, each at most `grid` late. A client sending tens of
/// thousands of requests a second otherwise pays a timer wake-up (three system calls and a
/// context switch) per send. No effect without [`start`].
pub fn set_grid(grid: Duration) {
    DRIVER.with(|d| {
        if let Some(d) = d.borrow().as_ref() {
            let mut t = d.timers.borrow_mut();
            t.grid = (!grid.is_zero()).then(|| (grid, Instant::now()));
        }
    });
}

/// Sleep until `at`, precisely on a worker thread with [`start`]ed timer, else (tests, or if
/// the timerfd could not be made) with tokio's.
pub fn sleep_until(at: Instant) -> Sleep {
    Sleep {
        at,
        id: None,
        fallback: None,
    }
}

pub struct Sleep {
    at: Instant,
    id: Option<u64>,
    fallback: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Sleep {
    pub fn deadline(&self) -> Instant {
        self.at
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.at {
            return Poll::Ready(());
        }
        if let Some(f) = &mut self.fallback {
            return f.as_mut().poll(cx);
        }
        let Some(driver) = DRIVER.with(|d| d.borrow().clone()) else {
            let at = self.at;
            let f = self
                .fallback
                .insert(Box::pin(tokio::time::sleep_until(at.into())));
            return f.as_mut().poll(cx);
        };
        let mut t = driver.timers.borrow_mut();
        let id = match self.id {
            // Fired (its waker taken): the deadline is due, to within the clock conversion.
            Some(id) if !t.wakers.contains_key(&id) => return Poll::Ready(()),
            Some(id) => id,
            None => {
                let id = t.next_id;
                t.next_id += 1;
                t.heap.push(Reverse((self.at, id)));
                let wake = t.wake_for(self.at);
                if t.armed.is_none_or(|a| wake < a) {
                    driver.arm(&mut t, wake);
                }
                self.id = Some(id);
                id
            }
        };
        t.wakers.insert(id, cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            DRIVER.with(|d| {
                if let Some(d) = d.borrow().as_ref() {
                    d.timers.borrow_mut().wakers.remove(&id);
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_ups_round_up_to_the_grid() {
        let epoch = Instant::now();
        let mut t = Timers::default();
        let at = epoch + Duration::from_micros(130);
        assert_eq!(t.wake_for(at), at, "no grid: exact");
        t.grid = Some((Duration::from_micros(100), epoch));
        assert_eq!(t.wake_for(at), epoch + Duration::from_micros(200));
        let on_edge = epoch + Duration::from_micros(300);
        assert_eq!(
            t.wake_for(on_edge),
            on_edge,
            "never later than the cell's end"
        );
        assert_eq!(t.wake_for(epoch), epoch);
        t.latency.early = Duration::from_micros(30);
        assert_eq!(
            t.wake_for(at),
            epoch + Duration::from_micros(170),
            "the cell's end, early by the latency"
        );
    }

    #[test]
    fn the_margin_settles_at_a_low_quantile_of_the_latencies() {
        let mut l = Latency::default();
        // Latencies of 20 to 59 µs, evenly: the 10th percentile is 24 µs.
        for i in 0..20_000u64 {
            l.learn(Duration::from_micros(20 + (i * 7) % 40));
        }
        let early = l.early.as_micros();
        assert!((20..=28).contains(&early), "early by {early} µs");
        for _ in 0..20_000 {
            l.learn(Duration::from_millis(5));
        }
        assert_eq!(
            l.early,
            Latency::MAX,
            "a busy thread's late wakes are capped"
        );
    }

    /// The spin makes no sleep end early, even with the largest margin: many short sleeps, some
    /// with deadlines close together, on a real timerfd.
    #[test]
    fn no_sleep_ends_before_its_deadline() {
        let h = crate::spawn("timer-test".into(), || async {
            start().unwrap();
            for i in 0..300u64 {
                DRIVER.with(|d| {
                    let d = d.borrow();
                    d.as_ref().unwrap().timers.borrow_mut().latency.early = Latency::MAX;
                });
                let now = Instant::now();
                let ats = [100, 100 + i % 7, 180].map(|us| now + Duration::from_micros(us));
                let ends = sleep_all(ats).await;
                for (at, end) in ats.iter().zip(ends) {
                    assert!(end >= *at, "woken {:?} early", *at - end);
                }
            }
        })
        .unwrap();
        h.join().unwrap();
    }

    /// Sleeps until each of `ats` at once; when each ended.
    async fn sleep_all(ats: [Instant; 3]) -> [Instant; 3] {
        let ended = |at| async move {
            sleep_until(at).await;
            Instant::now()
        };
        let (a, b, c) = tokio::join!(ended(ats[0]), ended(ats[1]), ended(ats[2]));
        [a, b, c]
    }
}

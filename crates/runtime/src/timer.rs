//! Precise wake-ups: the load generator's open-loop sends and the server's delays (`t=`, `P=`).
//! Tokio's timer has 1 ms resolution and rounds up, so a send waited for with it left on
//! average ~0.75 ms after its intended time, and the coordinated-omission-corrected latency
//! included that lag (measured at 200 req/s against a 65 µs server: corrected p50 809 µs); a
//! server delay of `t=1` took 2.2 ms at the p50. Here each worker thread has one timerfd armed at the
//! earliest pending deadline (absolute CLOCK_MONOTONIC, the clock behind `Instant`), with the
//! thread's timer slack lowered, so wakes come within microseconds.

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
    /// Wake-ups are rounded up to multiples of this duration from this instant (`set_grid`);
    /// none: exact.
    grid: Option<(Duration, Instant)>,
}

impl Timers {
    /// When the timerfd must fire for a deadline `at`.
    fn wake_for(&self, at: Instant) -> Instant {
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

impl Driver {
    fn fire(&self) {
        let mut t = self.timers.borrow_mut();
        t.armed = None;
        let now = Instant::now();
        while let Some(&Reverse((at, id))) = t.heap.peek() {
            if at > now {
                break;
            }
            t.heap.pop();
            if let Some(w) = t.wakers.remove(&id) {
                w.wake();
            }
        }
        if let Some(&Reverse((at, _))) = t.heap.peek() {
            let wake = t.wake_for(at);
            self.arm(&mut t, wake);
        }
    }

    fn arm(&self, t: &mut Timers, at: Instant) {
        t.armed = Some(at);
        // Instant is CLOCK_MONOTONIC: convert by the offset from now, read in this order so
        // that the error makes the wake late by nanoseconds, never early.
        let instant = Instant::now();
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
    }
}

//! Worker threads, as the server and the load generator both run them: one current-thread tokio
//! runtime per thread (nothing on the request path is shared or locked), with a `LocalSet` so
//! that tasks may hold `Rc` state, pinned to CPUs (`cpus`, as ab's processes are too); their
//! precise timer (`timer`: a timerfd per thread, where tokio's timer rounds up to the next
//! millisecond); and `within`, the timeout both sides put around a connection's reads and writes.

#[allow(unsafe_code)] // sched_setaffinity, sched_getaffinity
pub mod cpus;
#[allow(unsafe_code)] // timerfd system calls
pub mod timer;

use std::future::Future;
use std::io;
use std::pin::{pin, Pin};
use std::task::Poll;
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// `op`'s output, or `None` once `limit` has passed. `timer`, one per connection, is armed
/// only if `op` has to wait: most reads and writes of a busy connection complete at once, and
/// `tokio::time::timeout` makes and drops a timer around each (on the server, timers and a
/// shutdown waiter per request were ~23% of an unpipelined request's user-space instructions).
pub async fn within<F: Future>(
    mut timer: Pin<&mut Sleep>,
    limit: Duration,
    op: F,
) -> Option<F::Output> {
    let mut op = pin!(op);
    let mut armed = false;
    std::future::poll_fn(|cx| {
        if let Poll::Ready(v) = op.as_mut().poll(cx) {
            if armed {
                // Taken out of the runtime's timer wheel: left there, extended by each later
                // wait, it would fire at every stale deadline and wake the thread for nothing
                // (+24% CPU per request at 7 000 unpipelined requests per second).
                timer.set(tokio::time::sleep(Duration::ZERO));
            }
            return Poll::Ready(Some(v));
        }
        if !armed {
            timer.as_mut().reset(Instant::now() + limit);
            armed = true;
        }
        timer.as_mut().poll(cx).map(|()| None)
    })
    .await
}

/// Start a thread named `name` and run the future that `make` builds there to completion (a
/// future that pins its thread does so with `cpus::CpuSet::pin_current` before its work). The
/// runtime is built before the thread starts, so that failing to build it is an error here
/// rather than a panic there.
pub fn spawn<F, Fut>(name: String, make: F) -> io::Result<JoinHandle<Fut::Output>>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future + 'static,
    Fut::Output: Send + 'static,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name(name)
        .spawn(move || tokio::task::LocalSet::new().block_on(&rt, make()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn runs_local_tasks_on_its_own_thread() {
        let main = std::thread::current().id();
        let h = super::spawn("t".into(), move || async move {
            let rc = std::rc::Rc::new(5);
            let local = tokio::task::spawn_local(async move { *rc * 2 });
            (std::thread::current().id() != main, local.await.unwrap())
        })
        .unwrap();
        assert_eq!(h.join().unwrap(), (true, 10));
    }
}

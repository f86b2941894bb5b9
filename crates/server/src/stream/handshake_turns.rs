//! One CPU-heavy step per turn of a worker's event loop, as HAProxy runs at most one heavy
//! tasklet (TLS handshakes are) per loop. A TLS handshake's polls cost its signing, key exchange
//! and tickets: under a handshake flood, dozens of them woken together ran back to back, and an
//! established connection's request, its readiness seen only at the next I/O poll, waited for
//! all of them (probe p99 5–10 ms instead of 0.3). Behind this gate each poll of a heavy future
//! waits for an I/O poll with no heavy step since, so a request waits for one step at most.
//!
//! Waiters queue in line and are handed the turn one at a time, rather than all retrying after
//! each I/O poll (N waiters polled again per step).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};

/// A place in line: `granted` once handed the next turn. (Shared with the gate of the
/// waiter's own thread only; `Send` because the tasks are.)
#[derive(Default)]
struct Place {
    granted: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Place {
    fn granted(&self) -> bool {
        self.granted.load(Ordering::Relaxed)
    }
}

#[derive(Default)]
struct Gate {
    /// Heavy steps run so far: unchanged across an I/O poll means none ran after it.
    turn: u64,
    /// A waiter holds the next turn and has not taken it yet.
    handed: bool,
    line: VecDeque<Arc<Place>>,
}

impl Gate {
    /// Hand the next turn to the first in line, unless someone holds it: the waker to wake.
    fn hand_on(&mut self) -> Option<Waker> {
        if self.handed {
            return None;
        }
        let next = self.line.pop_front()?;
        self.handed = true;
        next.granted.store(true, Ordering::Relaxed);
        let waker = next.waker.lock().map(|mut w| w.take());
        waker.ok().flatten()
    }
}

thread_local! {
    static GATE: RefCell<Gate> = RefCell::default();
}

fn with_gate(f: impl FnOnce(&mut Gate) -> Option<Waker>) {
    // At thread exit the gate may be gone: nothing is waiting then.
    if let Ok(Some(w)) = GATE.try_with(|g| f(&mut g.borrow_mut())) {
        w.wake();
    }
}

/// `inner`, each of its polls in a turn of the event loop of its own among this worker's heavy
/// futures.
pub(crate) async fn one_step_per_turn<F: Future + Unpin>(mut inner: F) -> F::Output {
    loop {
        take_turn().await;
        match std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut inner).poll(cx))).await {
            Poll::Ready(out) => return out,
            // `inner` holds our waker: wait for it, then for a turn again.
            Poll::Pending => pending_once().await,
        }
    }
}

/// Returns once an I/O poll happened with no heavy step after it; the caller's step is next.
async fn take_turn() {
    let before = GATE.with_borrow(|g| g.turn);
    // Tokio wakes a yielded task only after its next I/O poll.
    tokio::task::yield_now().await;
    let free = GATE.with_borrow_mut(|g| {
        let free = g.turn == before && !g.handed && g.line.is_empty();
        if free {
            g.turn += 1;
        }
        free
    });
    if free {
        return;
    }
    let mut place = InLine {
        place: Arc::default(),
        taken: false,
    };
    with_gate(|g| {
        g.line.push_back(place.place.clone());
        g.hand_on()
    });
    std::future::poll_fn(|cx| {
        if place.place.granted() {
            return Poll::Ready(());
        }
        if let Ok(mut w) = place.place.waker.lock() {
            *w = Some(cx.waker().clone());
        }
        Poll::Pending
    })
    .await;
    // Handed the turn: it starts after the next I/O poll.
    tokio::task::yield_now().await;
    place.taken = true;
    with_gate(|g| {
        g.turn += 1;
        g.handed = false;
        g.hand_on()
    });
}

/// A waiter's place; a waiter dropped in line (its handshake timed out or its task ended)
/// leaves it, passing the turn on if it held it.
struct InLine {
    place: Arc<Place>,
    taken: bool,
}

impl Drop for InLine {
    fn drop(&mut self) {
        if self.taken {
            return;
        }
        with_gate(|g| {
            if self.place.granted() {
                g.handed = false;
                g.hand_on()
            } else {
                g.line.retain(|p| !Arc::ptr_eq(p, &self.place));
                None
            }
        });
    }
}

/// Pending once (the waker is left with whoever holds it), ready when polled again.
async fn pending_once() {
    let mut first = true;
    std::future::poll_fn(|_| {
        if std::mem::take(&mut first) {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;
    use std::time::Duration;

    /// Steps of 3 ms each, 8 futures at once, and a timer of 1 ms: between two steps the timer
    /// (an I/O-driver event) is seen, so it fires after one step at most, not after all eight.
    #[test]
    fn a_timer_waits_for_one_heavy_step_at_most() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let local = tokio::task::LocalSet::new();
        let late = local.block_on(&rt, async {
            let steps = Rc::new(Cell::new(0u32));
            for _ in 0..8 {
                let steps = steps.clone();
                tokio::task::spawn_local(one_step_per_turn(Box::pin(async move {
                    std::thread::sleep(Duration::from_millis(3));
                    steps.set(steps.get() + 1);
                })));
            }
            // Armed before any step ran (this future is polled before the tasks).
            tokio::time::sleep(Duration::from_millis(1)).await;
            steps.get()
        });
        assert!(late <= 2, "{late} heavy steps ran before the timer fired");
    }
}

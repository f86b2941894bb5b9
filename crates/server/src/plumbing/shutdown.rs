//! Graceful shutdown: the signal handler fires one trigger; accept loops stop, HTTP/1
//! connections waiting for a request close, HTTP/2 and HTTP/3 connections get GOAWAY and finish
//! their streams. A `watch` channel works across the workers' separate runtimes; HTTP/1 waits use
//! a flag and a `Notify` instead, which cost less per request.

use crate::plumbing::stats::{self, Transport};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::futures::Notified;
use tokio::sync::{watch, Notify};

#[derive(Debug, Clone)]
pub(crate) struct Shutdown {
    flag: watch::Receiver<bool>,
    signal: Arc<Signal>,
}

/// What waiters that must not hold a `watch` receiver read: connections waiting for a next
/// request (idle or between requests) check `begun` at every wait and register once on `idle`.
#[derive(Debug, Default)]
struct Signal {
    begun: AtomicBool,
    idle: Notify,
}

/// Starts the shutdown (keep it alive for the life of the process).
#[derive(Debug)]
pub(crate) struct Trigger {
    tx: watch::Sender<bool>,
    signal: Arc<Signal>,
}

impl Trigger {
    /// Begin the shutdown: every waiter, of either kind, is woken.
    pub(crate) fn fire(&self) {
        // The flag first: a waiter woken by `idle` reads it.
        self.signal.begun.store(true, Ordering::Release);
        self.tx.send_replace(true);
        self.signal.idle.notify_waiters();
    }
}

impl Shutdown {
    /// The trigger and the flag to watch.
    pub(crate) fn new() -> (Trigger, Shutdown) {
        let (tx, flag) = watch::channel(false);
        let signal = Arc::new(Signal::default());
        (
            Trigger {
                tx,
                signal: signal.clone(),
            },
            Shutdown { flag, signal },
        )
    }

    /// Resolves once shutdown has begun (at once if it already has).
    pub(crate) async fn wait(&self) {
        let mut rx = self.flag.clone();
        if rx.wait_for(|&stop| stop).await.is_err() {
            // The trigger is gone without firing: the process is exiting anyway.
            std::future::pending::<()>().await;
        }
    }

    /// Whether shutdown has begun: one atomic load, cheap enough for every request's wait.
    pub(crate) fn begun(&self) -> bool {
        self.signal.begun.load(Ordering::Acquire)
    }

    /// For a connection waiting for a next request, lighter than `wait`: completes once shutdown
    /// begins after it was made (make it before reading `begun`, so that no wake-up falls
    /// between).
    pub(crate) fn idle_signal(&self) -> Notified<'_> {
        self.signal.idle.notified()
    }
}

/// Counts a connection as open until dropped: in `conns` (what `maxconn` and the shutdown wait
/// read across threads) and in the statistics of its transport.
pub(crate) struct ConnSlot(Arc<AtomicUsize>, Option<Transport>);

impl ConnSlot {
    pub(crate) fn new(conns: &Arc<AtomicUsize>, transport: Transport) -> ConnSlot {
        stats::accepted(transport);
        Self::hold(conns, Some(transport))
    }

    /// Holds the shutdown back without being a connection (a QUIC endpoint closing).
    pub(crate) fn closing(conns: &Arc<AtomicUsize>) -> ConnSlot {
        Self::hold(conns, None)
    }

    fn hold(conns: &Arc<AtomicUsize>, transport: Option<Transport>) -> ConnSlot {
        conns.fetch_add(1, Ordering::Relaxed);
        ConnSlot(conns.clone(), transport)
    }
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
        crate::plumbing::trim::released();
        if let Some(t) = self.1 {
            stats::closed(t);
        }
    }
}

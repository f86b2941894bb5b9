//! Graceful shutdown: the signal handler flips one flag; accept loops stop, idle HTTP/1
//! connections close, HTTP/2 and HTTP/3 connections get GOAWAY and finish their streams.
//! A `watch` channel works across the workers' separate runtimes.

use crate::stats::{self, Transport};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::futures::Notified;
use tokio::sync::{watch, Notify};

#[derive(Debug, Clone)]
pub(crate) struct Shutdown {
    flag: watch::Receiver<bool>,
    /// Idle HTTP/1 connections wait on this lighter signal (one `Notified` each, a third of
    /// `wait`'s future), which the accept loops raise once shutdown has begun.
    idle: Arc<Notify>,
}

impl Shutdown {
    /// The trigger (keep it alive for the life of the process) and the flag to watch.
    pub(crate) fn new() -> (watch::Sender<bool>, Shutdown) {
        let (tx, flag) = watch::channel(false);
        let idle = Arc::new(Notify::new());
        (tx, Shutdown { flag, idle })
    }

    /// Resolves once shutdown has begun (at once if it already has).
    pub(crate) async fn wait(&self) {
        let mut rx = self.flag.clone();
        if rx.wait_for(|&stop| stop).await.is_err() {
            // The trigger is gone without firing: the process is exiting anyway.
            std::future::pending::<()>().await;
        }
    }

    /// Whether shutdown has begun.
    pub(crate) fn begun(&self) -> bool {
        *self.flag.borrow()
    }

    /// For an idle connection, lighter than `wait`: completes once `wake_idle` is called after
    /// it was made (make it before reading `begun`, so that no wake-up falls between).
    pub(crate) fn idle_signal(&self) -> Notified<'_> {
        self.idle.notified()
    }

    /// Complete every `idle_signal` made so far (once shutdown has begun).
    pub(crate) fn wake_idle(&self) {
        self.idle.notify_waiters();
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
        crate::trim::released();
        if let Some(t) = self.1 {
            stats::closed(t);
        }
    }
}

//! Graceful shutdown: the signal handler flips one flag; accept loops stop, idle HTTP/1
//! connections close, HTTP/2 and HTTP/3 connections get GOAWAY and finish their streams.
//! A `watch` channel works across the workers' separate runtimes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::watch;

#[derive(Debug, Clone)]
pub struct Shutdown(watch::Receiver<bool>);

impl Shutdown {
    /// The trigger (keep it alive for the life of the process) and the flag to watch.
    pub fn new() -> (watch::Sender<bool>, Shutdown) {
        let (tx, rx) = watch::channel(false);
        (tx, Shutdown(rx))
    }

    /// Resolves once shutdown has begun (at once if it already has).
    pub async fn wait(&self) {
        let mut rx = self.0.clone();
        if rx.wait_for(|&stop| stop).await.is_err() {
            // The trigger is gone without firing: the process is exiting anyway.
            std::future::pending::<()>().await;
        }
    }
}

/// Counts a connection as open until dropped.
pub struct ConnSlot(Arc<AtomicUsize>);

impl ConnSlot {
    pub fn new(conns: &Arc<AtomicUsize>) -> ConnSlot {
        conns.fetch_add(1, Ordering::Relaxed);
        ConnSlot(conns.clone())
    }
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

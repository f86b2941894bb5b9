//! Memory given back after a burst of connections ends. glibc's malloc returns freed memory to
//! the system only from the top of a heap, so the memory of 10 000 connections closed (or
//! parked idle) would stay in the process's RSS at its peak, fragmented by what is still in use.
//! Once such a burst is over, `malloc_trim` releases the free pages wherever they are. With the
//! `jemalloc` feature (the binary's allocator), jemalloc's arenas are purged too: its own decay
//! would return their free pages only over some ten seconds, and each worker first gives its
//! thread cache back to the arenas (only the thread itself can). It runs off the request path,
//! and not while connections keep ending: memory freed then is reused.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Connections closed or parked, process-wide: each frees a connection's task and buffers.
static RELEASED: AtomicU64 = AtomicU64::new(0);

/// How often the burst is looked at.
const TICK: Duration = Duration::from_millis(500);
/// Releases that make a burst worth trimming after.
const BURST: u64 = 256;
/// Fewer releases than this in one tick: a quiet tick.
const QUIET: u64 = 128;
/// After a burst, trims at these counts of quiet ticks (3, 8, 18 and 30 s): a connection's
/// memory is not all freed when it is counted closed (a QUIC connection whose client vanished
/// drains for a while: 2 000 of them took about 15 s to free theirs).
const AFTER: [u32; 4] = [6, 16, 36, 60];

/// A connection was closed or parked.
pub(crate) fn released() {
    RELEASED.fetch_add(1, Ordering::Relaxed);
}

/// Start the thread that trims after bursts (for the life of the process).
pub(crate) fn start() -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("trim".into())
        .spawn(|| {
            let (mut counted, mut last, mut quiet, mut done) = (0, 0, 0, AFTER.len());
            loop {
                std::thread::sleep(TICK);
                let now = RELEASED.load(Ordering::Relaxed);
                quiet = if now - last < QUIET { quiet + 1 } else { 0 };
                last = now;
                if now - counted >= BURST {
                    counted = now;
                    done = 0;
                }
                if AFTER.get(done).is_some_and(|&after| quiet >= after) {
                    // The workers' own releases, then the purge of what they freed.
                    FLUSH.notify_waiters();
                    std::thread::sleep(FLUSHED_IN);
                    trim();
                    done += 1;
                }
            }
        })
        .map(drop)
}

/// Woken before each trim: every worker frees what it keeps for the next connections (its
/// buffer pool, up to 1 MiB after a burst) and flushes its jemalloc thread cache (after 2 000
/// HTTP/3 connections a worker's held 1.6 MB: RELIABILITY, "With jemalloc"). Only the thread
/// itself can.
static FLUSH: tokio::sync::Notify = tokio::sync::Notify::const_new();
/// Time given to the workers' releases before the purge.
const FLUSHED_IN: Duration = Duration::from_millis(50);

/// Run on each worker, for its life: release what the thread keeps when a trim is coming.
pub(crate) async fn release_thread_caches() {
    loop {
        FLUSH.notified().await;
        crate::buffers::clear();
        #[cfg(feature = "jemalloc")]
        jemalloc_do(c"thread.tcache.flush");
    }
}

/// Run a jemalloc control that takes and returns no value.
#[cfg(feature = "jemalloc")]
#[allow(unsafe_code)] // jemalloc's mallctl
fn jemalloc_do(name: &std::ffi::CStr) {
    // SAFETY: the controls named here take and return no value; the name is NUL-terminated.
    unsafe {
        tikv_jemalloc_sys::mallctl(
            name.as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        );
    }
}

#[allow(unsafe_code)] // malloc_trim
fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks and releases the allocator's free memory. glibc's malloc
    // still serves the C libraries (aws-lc) when the Rust allocator is jemalloc.
    unsafe {
        libc::malloc_trim(0);
    }
    // Every arena (MALLCTL_ARENAS_ALL).
    #[cfg(feature = "jemalloc")]
    jemalloc_do(c"arena.4096.purge");
}

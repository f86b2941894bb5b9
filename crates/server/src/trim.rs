//! Memory given back after a burst of connections ends. glibc's malloc returns freed memory to
//! the system only from the top of a heap, so the memory of 10 000 connections closed (or
//! parked idle) would stay in the process's RSS at its peak, fragmented by what is still in use.
//! Once such a burst is over, `malloc_trim` releases the free pages wherever they are. With the
//! `jemalloc` feature (the binary's allocator), jemalloc's arenas are purged too: its own decay
//! would return their free pages only over some ten seconds. It runs off the request path, and
//! not while connections keep ending: memory freed then is reused.

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
pub fn released() {
    RELEASED.fetch_add(1, Ordering::Relaxed);
}

/// Start the thread that trims after bursts (for the life of the process).
pub fn start() -> std::io::Result<()> {
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
                    trim();
                    done += 1;
                }
            }
        })
        .map(drop)
}

fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks and releases the allocator's free memory. glibc's malloc
    // still serves the C libraries (aws-lc) when the Rust allocator is jemalloc.
    unsafe {
        libc::malloc_trim(0);
    }
    #[cfg(feature = "jemalloc")]
    // SAFETY: "arena.<MALLCTL_ARENAS_ALL>.purge" takes and returns no value; the name is a
    // NUL-terminated string.
    unsafe {
        tikv_jemalloc_sys::mallctl(
            c"arena.4096.purge".as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        );
    }
}

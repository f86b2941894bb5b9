//! Connection buffers, lent per thread: a connection holds its read and write buffers only while
//! it has bytes in them, and gives them back while it waits for a next request, as HAProxy does.
//! An idle keep-alive connection then costs its socket and its task, not 20 KiB of buffers.

use std::cell::RefCell;

/// Buffers kept per thread for the next connection that needs one; beyond that, or beyond
/// `KEEP_SIZE`, they are freed, so a burst of connections does not pin its peak memory.
const KEEP: usize = 64;
const KEEP_SIZE: usize = 128 * 1024;

thread_local! {
    static FREE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// An empty buffer with room for at least `capacity` bytes.
pub fn take(capacity: usize) -> Vec<u8> {
    let mut buf = FREE.with_borrow_mut(Vec::pop).unwrap_or_default();
    buf.reserve(capacity);
    buf
}

/// Give `buf` back (emptied); an unallocated one is dropped.
pub fn give(mut buf: Vec<u8>) {
    if buf.capacity() == 0 || buf.capacity() > KEEP_SIZE {
        return;
    }
    buf.clear();
    FREE.with_borrow_mut(|free| {
        if free.len() < KEEP {
            free.push(buf);
        }
    });
}

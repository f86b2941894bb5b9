//! Connection buffers, lent per thread (the HTTP/1 engine's and the TLS stream's): a connection
//! holds its read and write buffers only while it has bytes in them, and gives them back while it
//! waits for a next request, as HAProxy does. An idle keep-alive connection then costs its socket
//! and its task, not 20 KiB of buffers.

use std::cell::RefCell;

/// Buffers kept per thread for the next connection that needs one; beyond that they are freed,
/// so a burst of connections does not pin its peak memory. A kept buffer is shrunk to
/// `KEEP_SIZE`: one that grew for a large response would otherwise be handed to the next
/// connection, which may grow its other buffer in turn, until every buffer in use and in the
/// pool had the largest size any response ever needed.
const KEEP: usize = 64;
const KEEP_SIZE: usize = 16 * 1024;

thread_local! {
    static FREE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// An empty buffer with room for at least `capacity` bytes.
pub(crate) fn take(capacity: usize) -> Vec<u8> {
    // Kept buffers hold at most `KEEP_SIZE`: one regrown would be copied, all of it.
    if capacity > KEEP_SIZE {
        return Vec::with_capacity(capacity);
    }
    let mut buf = FREE.with_borrow_mut(Vec::pop).unwrap_or_default();
    buf.reserve(capacity);
    buf
}

/// Give `buf` back (emptied); an unallocated one is dropped.
pub(crate) fn give(mut buf: Vec<u8>) {
    if buf.capacity() == 0 {
        return;
    }
    FREE.with_borrow_mut(|free| {
        if free.len() < KEEP {
            buf.clear();
            // In place: glibc shrinks a heap chunk by splitting it, without copying.
            buf.shrink_to(KEEP_SIZE);
            free.push(buf);
        }
    });
}

/// Free the kept buffers: after a burst, once the server is quiet (`trim`).
pub(crate) fn clear() {
    FREE.with_borrow_mut(|free| *free = Vec::new());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_that_grew_is_lent_again_at_the_kept_size() {
        let mut big = take(4096);
        big.resize(128 * 1024, b'x');
        give(big);
        let again = take(4096);
        assert!(again.is_empty());
        assert!(
            (4096..=KEEP_SIZE).contains(&again.capacity()),
            "capacity {}",
            again.capacity()
        );
    }
}

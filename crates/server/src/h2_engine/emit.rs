//! How response frames reach the transport (`--h2-emit`): a pass is what the connection
//! produces between two reads (every stream's HEADERS and DATA, the connection's control
//! frames), encoded straight into one reused buffer and written down in one (vectored) write, so
//! that a batch of responses leaves in full TLS records and one system call (measured:
//! docs/PERFORMANCE.md).
//!
//! What differs between the strategies is whether body bytes are copied into the pass:
//! - `drain` copies every byte into the buffer: one contiguous write per pass;
//! - `gather` keeps body bytes by reference (they are slices of `loadterm_plan::body`'s static
//!   blocks) and writes the pass as one vectored write of all its pieces;
//! - `hybrid` references body pieces of at least the threshold and copies smaller ones.
//!
//! Frame headers, HEADERS blocks and control frames are always in the buffer.

use loadterm_codec::h2::FRAME_HEAD;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::AsyncWrite;

/// The pass a stream's DATA fills up to before it waits for the pass to be written: sealed
/// (TLS adds at most 29 bytes per 16 KiB record) it fits one TCP segment of 64 KiB, GSO's and
/// loopback's largest (an MSS of 65 483 bytes), and it is one write of the TLS stream. Passes
/// of 64 KiB and a frame more take a second write for their last bytes, and twice the
/// segments (docs/PERFORMANCE.md).
pub(super) const LIMIT: usize = 60 * 1024;
const _: () = assert!(LIMIT <= crate::stream::tls_stream::WRITE_BATCH);
/// Segments per vectored write (Linux takes 1024; the TLS stream seals 64 KiB per call anyway).
const IOV: usize = 64;
/// Segments a connection's pass has room for from the start (192 bytes). Grown from empty, its
/// first push gave it 4 (96 bytes), jemalloc's size class of small objects that outlive a busy
/// connection: freed when the connection parked, the passes of 1 000 connections left that
/// class's slabs a third full (61 bytes per idle HTTP/2 connection over TLS; PERFORMANCE,
/// "Memory per idle connection").
const SEGMENTS: usize = 8;

/// A part of the pass, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Segment {
    /// `buf[start..end]`.
    Copied {
        start: usize,
        end: usize,
    },
    Referenced(&'static [u8]),
}

impl Segment {
    fn bytes<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        match *self {
            Segment::Copied { start, end } => &buf[start..end],
            Segment::Referenced(s) => s,
        }
    }
}

/// One pass being built and written.
pub(super) struct Pass {
    /// Body pieces of this many bytes or more are kept by reference (`usize::MAX`: never).
    by_reference: usize,
    buf: Vec<u8>,
    segments: Vec<Segment>,
    /// `buf[..covered]` is in `segments`.
    covered: usize,
    /// Bytes in the pass not yet written.
    queued: usize,
    /// Write position: the first segment not fully written, and the bytes of it that are.
    next: usize,
    written: usize,
}

impl Pass {
    /// `copy_up_to`: see `H2Args::copy_up_to`.
    pub(super) fn new(copy_up_to: u64) -> Pass {
        Pass {
            by_reference: usize::try_from(copy_up_to.saturating_add(1)).unwrap_or(usize::MAX),
            buf: Vec::new(),
            segments: Vec::with_capacity(SEGMENTS),
            covered: 0,
            queued: 0,
            next: 0,
            written: 0,
        }
    }

    /// The buffer frames are encoded into; [`Pass::copied`] then takes what was appended.
    pub(super) fn buf(&mut self) -> &mut Vec<u8> {
        if self.buf.capacity() == 0 {
            self.buf = crate::buffers::take(16 * 1024);
        }
        &mut self.buf
    }

    /// What was appended to the buffer since the last call is part of the pass.
    pub(super) fn copied(&mut self) {
        let end = self.buf.len();
        if end == self.covered {
            return;
        }
        self.queued += end - self.covered;
        match self.segments.last_mut() {
            Some(Segment::Copied { end: e, .. }) if *e == self.covered => *e = end,
            _ => self.segments.push(Segment::Copied {
                start: self.covered,
                end,
            }),
        }
        self.covered = end;
    }

    /// A body piece (a slice of the static body blocks): referenced or copied, per the mode.
    pub(super) fn body(&mut self, piece: &'static [u8]) {
        if piece.len() >= self.by_reference {
            self.copied();
            self.queued += piece.len();
            self.segments.push(Segment::Referenced(piece));
        } else {
            self.buf().extend_from_slice(piece);
            self.copied();
        }
    }

    /// Bytes waiting to be written.
    pub(super) fn queued(&self) -> usize {
        self.queued
    }

    /// The DATA payload one more frame may carry without taking the pass past `LIMIT`.
    pub(super) fn room(&self) -> usize {
        LIMIT.saturating_sub(self.queued + FRAME_HEAD)
    }

    /// Write the whole pass to `io`.
    pub(super) fn poll_write<IO: AsyncWrite + Unpin>(
        &mut self,
        io: &mut IO,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        while self.next < self.segments.len() {
            let mut iov = [IoSlice::new(&[]); IOV];
            let mut count = 0;
            for (i, segment) in self.segments[self.next..].iter().take(IOV).enumerate() {
                let bytes = segment.bytes(&self.buf);
                let skip = if i == 0 { self.written } else { 0 };
                iov[count] = IoSlice::new(&bytes[skip..]);
                count += 1;
            }
            let mut n = ready!(Pin::new(&mut *io).poll_write_vectored(cx, &iov[..count]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.queued -= n;
            while n > 0 {
                let len = self.segments[self.next].bytes(&self.buf).len();
                let step = n.min(len - self.written);
                self.written += step;
                n -= step;
                if self.written == len {
                    self.next += 1;
                    self.written = 0;
                }
            }
        }
        self.buf.clear();
        self.segments.clear();
        self.covered = 0;
        self.next = 0;
        Poll::Ready(Ok(()))
    }

    /// Give the buffer back to the thread's pool (an idle connection holds none).
    pub(super) fn release(&mut self) {
        if self.queued == 0 {
            crate::buffers::give(std::mem::take(&mut self.buf));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{EmitMode, H2Args};
    use loadterm_plan::body::{self, BodyKind};

    /// Records every write (a vectored write as one entry).
    #[derive(Default)]
    struct Log(Vec<Vec<u8>>);

    impl AsyncWrite for Log {
        fn poll_write(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            data: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.poll_write_vectored(cx, &[IoSlice::new(data)])
        }
        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            let all: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
            let n = all.len();
            self.0.push(all);
            Poll::Ready(Ok(n))
        }
        fn is_write_vectored(&self) -> bool {
            true
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn pass(strategy: EmitMode, threshold: u64) -> Pass {
        let args = H2Args {
            emit: Some(strategy),
            emit_threshold: threshold,
            ..crate::config::defaults()
        };
        Pass::new(args.copy_up_to())
    }

    /// A frame header and a 1000-byte body piece, `n` times.
    fn fill(p: &mut Pass, n: usize) -> Vec<u8> {
        let mut want = Vec::new();
        for i in 0..n {
            p.buf().extend_from_slice(&[i as u8; 9]);
            p.copied();
            let piece = body::slice(BodyKind::Pattern, 0, 1000);
            p.body(piece);
            want.extend_from_slice(&[i as u8; 9]);
            want.extend_from_slice(piece);
        }
        want
    }

    fn write(p: &mut Pass) -> Vec<Vec<u8>> {
        let mut log = Log::default();
        let cx = &mut Context::from_waker(std::task::Waker::noop());
        assert!(p.poll_write(&mut log, cx).is_ready());
        log.0
    }

    #[test]
    fn a_pass_leaves_in_one_write() {
        for strategy in [EmitMode::Drain, EmitMode::Gather, EmitMode::Hybrid] {
            let mut p = pass(strategy, 2048);
            let want = fill(&mut p, 10);
            assert_eq!(p.queued(), want.len());
            assert_eq!(write(&mut p), [want], "{strategy:?}");
            assert_eq!(p.queued(), 0);
        }
    }

    #[test]
    fn only_drain_and_small_hybrid_pieces_are_copied() {
        // (strategy, threshold, body bytes copied into the pass)
        for (strategy, threshold, copied) in [
            (EmitMode::Drain, 0, 3000),
            (EmitMode::Gather, u64::MAX, 0),
            (EmitMode::Hybrid, 1000, 0),
            (EmitMode::Hybrid, 1001, 3000),
        ] {
            let mut p = pass(strategy, threshold);
            let want = fill(&mut p, 3);
            assert_eq!(p.buf.len(), 27 + copied, "{strategy:?} {threshold}");
            assert_eq!(write(&mut p).concat(), want);
        }
    }

    #[test]
    fn without_the_option_pieces_from_2k_go_by_reference() {
        // Hybrid is the default (docs/PERFORMANCE.md, "Round 2, closing"): drain's copy of
        // large bodies cost 6.5% more CPU at 256 KiB over TLS.
        let args: H2Args = crate::config::defaults();
        assert_eq!(args.emit, None);
        assert_eq!(args.copy_up_to(), 2047);
    }

    #[test]
    fn a_pass_of_many_pieces_goes_in_several_writes_in_order() {
        let mut p = pass(EmitMode::Gather, 0);
        let want = fill(&mut p, 200);
        let writes = write(&mut p);
        assert!(writes.len() >= 4, "IOV pieces per write");
        assert_eq!(writes.concat(), want);
    }
}

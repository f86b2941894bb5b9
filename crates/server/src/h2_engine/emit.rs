//! How the `h2` crate's frames reach the transport (`--h2-emit`). Its encoder holds one DATA frame
//! at a time and flushes the transport before encoding the next (hyperium/h2#902), and the TLS
//! stream (`tls_stream`) turns every write into TLS records and a system call: one write per
//! response, a 9-byte record per frame header. Here writes are collected and flushes deferred: a pass (what
//! the connection produces between two reads) goes down in one write when `LIMIT` is reached, at
//! shutdown, or just before the connection reads again (its task is woken for that), so a batch of
//! responses leaves in full TLS records and one system call (measured: docs/PERFORMANCE.md).
//!
//! What differs between the strategies is whether body bytes are copied into the pass:
//! - `drain` copies every byte into one buffer: one contiguous write per pass;
//! - `gather` keeps body bytes by reference (they are slices of `loadterm_plan::body`'s static
//!   blocks) and writes the pass as one vectored write of all its pieces: no copy here;
//! - `hybrid` references body pieces of at least the threshold and copies smaller ones.
//!
//! Frame headers and HEADERS frames live in `h2`'s reused buffer and are always copied.

use loadterm_plan::body;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes collected before they are pushed down regardless of flushes.
const LIMIT: usize = 64 * 1024;
/// Segments per vectored write (Linux takes 1024; rustls makes records of up to 16 KiB anyway).
const IOV: usize = 64;

/// A part of the pass, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Segment {
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

pub(super) struct WriteBatcher<IO> {
    io: IO,
    /// Body pieces of this many bytes or more are kept by reference (`usize::MAX`: never).
    by_reference: usize,
    buf: Vec<u8>,
    segments: Vec<Segment>,
    /// Bytes collected and not yet written.
    queued: usize,
    /// Write position: the first segment not fully written, and the bytes of it that are.
    next: usize,
    written: usize,
    /// A flush was deferred: write the pass and flush `io` at the next poll.
    deferred: bool,
    /// We woke our own task for that and it has not read since.
    woken: bool,
    /// The last attempt found the socket full: its readiness will wake the task, so flushes
    /// must not wake it again (that would spin).
    blocked: bool,
}

impl<IO> WriteBatcher<IO> {
    /// `copy_up_to`: see `H2Args::copy_up_to`.
    pub(super) fn new(io: IO, copy_up_to: u64) -> Self {
        WriteBatcher {
            io,
            by_reference: usize::try_from(copy_up_to.saturating_add(1)).unwrap_or(usize::MAX),
            buf: Vec::new(),
            segments: Vec::new(),
            queued: 0,
            next: 0,
            written: 0,
            deferred: false,
            woken: false,
            blocked: false,
        }
    }

    fn collect(&mut self, data: &[u8]) {
        self.queued += data.len();
        if data.len() >= self.by_reference {
            if let Some(s) = body::as_static(data) {
                self.segments.push(Segment::Referenced(s));
                return;
            }
        }
        let start = self.buf.len();
        self.buf.extend_from_slice(data);
        match self.segments.last_mut() {
            Some(Segment::Copied { end, .. }) if *end == start => *end = self.buf.len(),
            _ => self.segments.push(Segment::Copied {
                start,
                end: self.buf.len(),
            }),
        }
    }
}

impl<IO: AsyncWrite + Unpin> WriteBatcher<IO> {
    /// Write everything collected to `io`.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.next < self.segments.len() {
            let mut iov = [IoSlice::new(&[]); IOV];
            let mut count = 0;
            for (i, segment) in self.segments[self.next..].iter().take(IOV).enumerate() {
                let bytes = segment.bytes(&self.buf);
                let skip = if i == 0 { self.written } else { 0 };
                iov[count] = IoSlice::new(&bytes[skip..]);
                count += 1;
            }
            let mut n = ready!(Pin::new(&mut self.io).poll_write_vectored(cx, &iov[..count]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.queued -= n;
            // Advance past what was written.
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
        self.next = 0;
        Poll::Ready(Ok(()))
    }

    /// Carry out a deferred flush.
    fn poll_deferred(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.deferred {
            let r = match self.poll_drain(cx) {
                Poll::Ready(Ok(())) => Pin::new(&mut self.io).poll_flush(cx),
                other => other,
            };
            self.blocked = r.is_pending();
            ready!(r)?;
            self.deferred = false;
        }
        Poll::Ready(Ok(()))
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for WriteBatcher<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        // Pending here means the socket is full: the waker is registered for it, and the read
        // may go on meanwhile.
        self.woken = false;
        if let Poll::Ready(Err(e)) = self.poll_deferred(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for WriteBatcher<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(data)])
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if self.queued > 0
            && (self.queued + total > LIMIT || self.segments.len() + bufs.len() > IOV)
        {
            ready!(self.poll_drain(cx))?;
        }
        for b in bufs {
            self.collect(b);
        }
        Poll::Ready(Ok(total))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.queued == 0 {
            return Pin::new(&mut self.io).poll_flush(cx);
        }
        self.deferred = true;
        if self.blocked || self.queued >= LIMIT {
            return self.poll_deferred(cx);
        }
        // Defer: more frames may follow in this same turn of the connection. The wake makes
        // sure the connection is polled (and reads, and so flushes) once more before it sleeps.
        if !self.woken {
            self.woken = true;
            cx.waker().wake_by_ref();
        }
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.deferred = true;
        ready!(self.poll_deferred(cx))?;
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{EmitMode, H2Args};
    use loadterm_plan::body::BodyKind;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Records every write the inner stream receives (a vectored write as one entry); reads
    /// return end of stream.
    #[derive(Default)]
    struct Log(Vec<Vec<u8>>);

    impl AsyncRead for Log {
        fn poll_read(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            _: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

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
            let all = bufs
                .iter()
                .flat_map(|b| b.iter().copied())
                .collect::<Vec<u8>>();
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

    /// A frame header (copied from `h2`'s buffer) and a 1000-byte body piece, `n` times.
    fn frames(n: usize) -> Vec<Vec<u8>> {
        (0..n)
            .flat_map(|i| {
                [
                    vec![i as u8; 9],
                    body::slice(BodyKind::Pattern, 0, 1000).to_vec(),
                ]
            })
            .collect()
    }

    /// The writer `--h2-emit strategy --h2-emit-threshold threshold` gives.
    fn emit(strategy: EmitMode, threshold: u64) -> WriteBatcher<Log> {
        let args = H2Args {
            emit: Some(strategy),
            emit_threshold: threshold,
            ..crate::config::defaults()
        };
        WriteBatcher::new(Log::default(), args.copy_up_to())
    }

    async fn pass(e: &mut WriteBatcher<Log>, n: usize) {
        for i in 0..n {
            e.write_all(&[i as u8; 9]).await.unwrap();
            e.write_all(body::slice(BodyKind::Pattern, 0, 1000))
                .await
                .unwrap();
            e.flush().await.unwrap();
        }
    }

    #[tokio::test]
    async fn a_pass_leaves_in_one_write_just_before_the_next_read() {
        for strategy in [EmitMode::Drain, EmitMode::Gather, EmitMode::Hybrid] {
            let mut e = emit(strategy, 2048);
            pass(&mut e, 10).await;
            assert!(e.io.0.is_empty(), "{strategy:?}: flushes are deferred");
            let _ = e.read(&mut [0u8; 16]).await.unwrap();
            assert_eq!(e.io.0, vec![frames(10).concat()], "{strategy:?}");
        }
    }

    #[tokio::test]
    async fn only_drain_and_small_hybrid_pieces_are_copied() {
        // (strategy, threshold, body bytes copied into the pass)
        for (strategy, threshold, copied) in [
            (EmitMode::Drain, 0, 3000),
            (EmitMode::Gather, u64::MAX, 0),
            (EmitMode::Hybrid, 1000, 0),
            (EmitMode::Hybrid, 1001, 3000),
        ] {
            let mut e = emit(strategy, threshold);
            pass(&mut e, 3).await;
            assert_eq!(e.buf.len(), 27 + copied, "{strategy:?} {threshold}");
            e.shutdown().await.unwrap();
            assert_eq!(e.io.0.concat(), frames(3).concat());
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

    #[tokio::test]
    async fn a_pass_larger_than_the_limit_goes_in_parts_in_order() {
        for strategy in [EmitMode::Drain, EmitMode::Gather] {
            let mut e = emit(strategy, 0);
            pass(&mut e, 200).await;
            e.write_all(&vec![b'x'; 70_000]).await.unwrap();
            e.write_all(b"tail").await.unwrap();
            e.shutdown().await.unwrap();
            let want = [frames(200).concat(), vec![b'x'; 70_000], b"tail".to_vec()].concat();
            assert_eq!(e.io.0.concat(), want, "{strategy:?}");
            assert!(
                e.io.0.len() >= 4,
                "{strategy:?}: split at LIMIT or IOV pieces"
            );
            assert!(e.io.0.iter().all(|w| w.len() <= 70_000 + 4), "{strategy:?}");
        }
    }
}

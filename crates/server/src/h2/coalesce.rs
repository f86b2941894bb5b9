//! Write coalescing under the `h2` crate. Its encoder holds one DATA frame at a time and flushes
//! the transport before encoding the next (hyperium/h2#902), and tokio-rustls turns every write
//! into a TLS record and a system call: one `writev` per response, a 9-byte record per frame
//! header. Here writes are collected and flushes deferred: the bytes go down when `LIMIT` is
//! reached, at shutdown, or just before the connection reads again (its task is woken for that),
//! so a batch of responses leaves in full TLS records and one system call
//! (measured: docs/PERFORMANCE.md).

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes collected before they are pushed down regardless of flushes; also the size from which a
/// single write bypasses the buffer.
const LIMIT: usize = 64 * 1024;

pub struct Coalesce<IO> {
    io: IO,
    buf: Vec<u8>,
    /// Bytes of `buf` already written to `io`.
    sent: usize,
    /// A flush was deferred: write `buf` and flush `io` at the next poll.
    deferred: bool,
    /// We woke our own task for that and it has not read since.
    woken: bool,
    /// The last attempt found the socket full: its readiness will wake the task, so flushes
    /// must not wake it again (that would spin).
    blocked: bool,
}

impl<IO> Coalesce<IO> {
    pub fn new(io: IO) -> Self {
        Coalesce {
            io,
            buf: Vec::new(),
            sent: 0,
            deferred: false,
            woken: false,
            blocked: false,
        }
    }
}

impl<IO: AsyncWrite + Unpin> Coalesce<IO> {
    /// Write everything collected to `io`.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.buf.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.buf[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.buf.clear();
        self.sent = 0;
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

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for Coalesce<IO> {
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

impl<IO: AsyncWrite + Unpin> AsyncWrite for Coalesce<IO> {
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
        if !self.buf.is_empty() && self.buf.len() + total > LIMIT {
            ready!(self.poll_drain(cx))?;
        }
        if self.buf.is_empty() && total >= LIMIT {
            // Large enough to make full records by itself: no copy.
            return Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        }
        for b in bufs {
            self.buf.extend_from_slice(b);
        }
        Poll::Ready(Ok(total))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.buf.is_empty() {
            return Pin::new(&mut self.io).poll_flush(cx);
        }
        self.deferred = true;
        if self.blocked || self.buf.len() >= LIMIT {
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
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Records every write the inner stream receives; reads return end of stream.
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
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            data: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.0.push(data.to_vec());
            Poll::Ready(Ok(data.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn flushes_are_deferred_to_the_next_read_and_order_is_kept() {
        let mut c = Coalesce::new(Log::default());
        for i in 0..10u8 {
            c.write_all(&[i; 100]).await.unwrap();
            c.flush().await.unwrap();
        }
        assert!(c.io.0.is_empty(), "flushes are deferred");
        let _ = c.read(&mut [0u8; 16]).await.unwrap();
        assert_eq!(c.io.0.len(), 1, "one write before reading");
        c.write_all(&[b'x'; 70_000]).await.unwrap();
        c.write_all(b"tail").await.unwrap();
        c.write_all(&vec![b'y'; LIMIT]).await.unwrap();
        c.shutdown().await.unwrap();
        let want = [
            (0..10u8).flat_map(|i| [i; 100]).collect::<Vec<_>>(),
            vec![b'x'; 70_000],
            b"tail".to_vec(),
            vec![b'y'; LIMIT],
        ]
        .concat();
        assert_eq!(c.io.0.concat(), want);
        // Writes of LIMIT or more go straight through, not copied into one buffer with the rest.
        assert_eq!(c.io.0.len(), 4);
    }
}

//! One forwarding wrapper for byte streams: [`Layered`] forwards every read, write, flush and
//! shutdown to the stream inside, and a [`Layer`] changes only what it needs to (counting bytes,
//! replaying a prefix, weighing frames). The `AsyncRead` and `AsyncWrite` forwarding is written
//! here once; each layer is monomorphized into it, so forwarding costs nothing at run time.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What a wrapper adds to the stream inside. Every method has the forwarding default.
pub(crate) trait Layer {
    /// Before a read: `Some` answers it without reading the stream inside.
    fn before_read(&mut self, buf: &mut ReadBuf<'_>) -> Option<Poll<io::Result<()>>> {
        let _ = buf;
        None
    }

    /// A read from the stream inside filled `buf` from `start` on; `false` withholds the read
    /// (it stays pending: the layer has said, or will say, why to whoever drives the stream).
    fn have_read(&mut self, buf: &mut ReadBuf<'_>, start: usize) -> bool {
        let _ = (buf, start);
        true
    }

    /// A write handed `n` bytes to the stream inside.
    fn wrote(&mut self, n: usize) {
        let _ = n;
    }

    /// Shut `io`'s write side down.
    fn poll_shutdown<IO: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        io: &mut IO,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(io).poll_shutdown(cx)
    }
}

/// A byte stream `io` with `layer` on top.
pub(crate) struct Layered<IO, L> {
    pub(crate) io: IO,
    pub(crate) layer: L,
}

impl<IO, L> Layered<IO, L> {
    pub(crate) fn get_ref(&self) -> &IO {
        &self.io
    }

    pub(crate) fn into_inner(self) -> IO {
        self.io
    }
}

impl<IO: AsyncRead + Unpin, L: Layer + Unpin> AsyncRead for Layered<IO, L> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(r) = this.layer.before_read(buf) {
            return r;
        }
        let start = buf.filled().len();
        let r = Pin::new(&mut this.io).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = r {
            if !this.layer.have_read(buf, start) {
                return Poll::Pending;
            }
        }
        r
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin, L: Layer + Unpin> AsyncWrite for Layered<IO, L> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = r {
            this.layer.wrote(n);
        }
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = r {
            this.layer.wrote(n);
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.layer.poll_shutdown(&mut this.io, cx)
    }
}

//! The TCP socket under a TLS stream, which can leave the stream while the connection is
//! parked: the TLS state stays where it is (`tls_stream::Parked`), and only the socket moves
//! between tokio and the parking lot.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// A socket that `detach` takes out and `attach` puts back; without it, reads and writes fail
/// (`NotConnected`), which no engine sees: a connection is parked only between busy periods.
pub(crate) struct Detachable(Option<TcpStream>);

impl Detachable {
    pub(crate) fn new(sock: TcpStream) -> Self {
        Detachable(Some(sock))
    }

    pub(crate) fn get_ref(&self) -> Option<&TcpStream> {
        self.0.as_ref()
    }

    pub(crate) fn detach(&mut self) -> Option<TcpStream> {
        self.0.take()
    }

    pub(crate) fn attach(&mut self, sock: TcpStream) {
        self.0 = Some(sock);
    }

    fn sock(&mut self) -> io::Result<Pin<&mut TcpStream>> {
        match &mut self.0 {
            Some(sock) => Ok(Pin::new(sock)),
            None => Err(io::ErrorKind::NotConnected.into()),
        }
    }
}

impl AsyncRead for Detachable {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.get_mut().sock()?.poll_read(cx, buf)
    }
}

impl AsyncWrite for Detachable {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().sock()?.poll_write(cx, data)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().sock()?.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().sock()?.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().sock()?.poll_shutdown(cx)
    }
}

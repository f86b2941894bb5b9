//! What the engines serve over: a connection's byte stream (`ByteStream`: clear TCP, TLS, the
//! bytes of an upgrade or a ClientHello replayed first), and what TLS runs over (`TlsInner`),
//! with what each can do for parking (its socket alone, taken out and put back).

use crate::plumbing::stats::{Metered, Transport};
use crate::stream::arrival;
use crate::stream::prefixed::Prefixed;
use crate::stream::tls_stream::TlsStream;
use std::io;
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::TcpStream;

/// A connection's byte stream; clear TCP exposes its socket so large bodies can be spliced.
pub(crate) trait ByteStream: AsyncRead + AsyncWrite + Unpin {
    fn tcp(&self) -> Option<&TcpStream> {
        None
    }

    /// The socket whose readiness announces the next request, if nothing this stream holds
    /// would be read first: waiting on it needs no buffer.
    fn idle_socket(&self) -> Option<&TcpStream>;

    /// The connection turns idle: give back the buffers the stream holds with nothing in them.
    fn release(&mut self) {}

    /// The stream is its socket, and nothing more, whenever `idle_socket` gives it: once idle
    /// for `park::PARK_AFTER` it can be handed over whole (`h1::Handover::Idle`) and the task end.
    const PARKS: bool = false;

    /// Have the kernel stamp the bytes that arrive from now on (`crate::stream::arrival`);
    /// `false` if this stream cannot tell when its bytes arrived.
    fn stamp_arrivals(&mut self) -> bool {
        false
    }

    /// Read into `buf` as `read_buf` does, with the arrival of the bytes read if the kernel
    /// stamped them.
    async fn read_stamped(&mut self, buf: &mut Vec<u8>) -> io::Result<(usize, Option<Instant>)> {
        self.read_buf(buf).await.map(|n| (n, None))
    }
}

impl ByteStream for Metered<TcpStream> {
    fn tcp(&self) -> Option<&TcpStream> {
        Some(self.get_ref())
    }

    fn idle_socket(&self) -> Option<&TcpStream> {
        Some(self.get_ref())
    }

    const PARKS: bool = true;

    fn stamp_arrivals(&mut self) -> bool {
        arrival::enable(self.get_ref()).is_ok()
    }

    async fn read_stamped(&mut self, buf: &mut Vec<u8>) -> io::Result<(usize, Option<Instant>)> {
        let read = arrival::read(self.get_ref(), buf).await;
        if let Ok((n, _)) = read {
            self.layer.count_in(n);
        }
        read
    }
}

/// HTTP/2 after `Upgrade: h2c`, behind what the client sent after the upgrading request: it
/// parks as its socket does once that has been read.
impl<IO: ByteStream> ByteStream for Prefixed<IO> {
    fn idle_socket(&self) -> Option<&TcpStream> {
        self.drained()?.idle_socket()
    }

    const PARKS: bool = IO::PARKS;
}

/// What TLS runs over: a TCP socket, or one behind the replayed ClientHello (`--ja4`).
pub(crate) trait TlsInner: Sized {
    /// The socket, once reading the stream means reading it.
    fn socket(&self) -> Option<&TcpStream>;

    /// The socket can be taken out (`detach`) for the connection to be parked while idle,
    /// rustls's state kept apart (`tls_stream::Parked`).
    const PARKS: bool = false;

    /// Take the socket out, to park the connection: nothing else of this stream is kept,
    /// `attach` makes it again (`None`, the stream dropped, unless `PARKS`).
    fn detach(self) -> Option<TcpStream> {
        None
    }

    /// The stream again around the socket `detach` took (a stream that does not park is never
    /// given one).
    fn attach(sock: TcpStream) -> Option<Self> {
        drop(sock);
        None
    }
}

impl TlsInner for TcpStream {
    fn socket(&self) -> Option<&TcpStream> {
        Some(self)
    }

    const PARKS: bool = true;

    fn detach(self) -> Option<TcpStream> {
        Some(self)
    }

    fn attach(sock: TcpStream) -> Option<Self> {
        Some(sock)
    }
}

/// Metered as `workers::handshake` meters what TLS runs over: made again around a parked
/// socket, it counts its bytes as TLS's too.
impl<IO: TlsInner> TlsInner for Metered<IO> {
    fn socket(&self) -> Option<&TcpStream> {
        self.get_ref().socket()
    }

    const PARKS: bool = IO::PARKS;

    fn detach(self) -> Option<TcpStream> {
        self.io.detach()
    }

    fn attach(sock: TcpStream) -> Option<Self> {
        Some(Metered::new(IO::attach(sock)?, Transport::Tls))
    }
}

/// Parked only once the ClientHello's replay is over (it is, by the first idle spell): nothing
/// is left to replay when it is made again.
impl TlsInner for Prefixed<TcpStream> {
    fn socket(&self) -> Option<&TcpStream> {
        self.drained()
    }

    const PARKS: bool = true;

    fn detach(self) -> Option<TcpStream> {
        self.drained()?;
        Some(self.io)
    }

    fn attach(sock: TcpStream) -> Option<Self> {
        Some(Prefixed::new(Vec::new(), sock))
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin + TlsInner> ByteStream for TlsStream<IO> {
    /// Only when the stream holds no ciphertext, plaintext or close_notify (a read would
    /// return them at once) and has no output to send.
    fn idle_socket(&self) -> Option<&TcpStream> {
        self.is_quiet().then(|| self.get_ref().socket()).flatten()
    }

    fn release(&mut self) {
        TlsStream::release(self);
    }

    /// rustls's state stays in the stream; `workers` takes the socket out to park it.
    const PARKS: bool = IO::PARKS;
}

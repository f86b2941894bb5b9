//! The lingering close, one rule for every TCP connection the server ends (HTTP/1.x, and
//! HTTP/2 through its flood guard): closing a socket with unread bytes resets the connection,
//! and the kernel then discards what the client had not read yet, the end of the response (or
//! the GOAWAY) included: a pipelining client, a flooding one, or one whose requests were refused
//! is still writing. So the write side is shut down (FIN, after TLS's close_notify), then what
//! the client sends is read and dropped until it closes, for at most `LINGER` and
//! `LINGER_BYTES` in all: a client that goes on sending is closed on.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// How long a closing connection discards what the client still sends, from the start of the
/// shutdown, before it is closed whatever the client does.
pub(crate) const LINGER: Duration = Duration::from_secs(1);
/// How much a closing connection reads and drops before it is closed whatever the client does:
/// what a flooding client typically has in flight towards us (its send buffer and our receive
/// buffer: a 256 KiB bound lost an HTTP/2 ping flood's GOAWAY to the reset under a CPU hog), and
/// much less than a flood that goes on (a 20 MB CONTINUATION flood was read whole without a
/// bound).
pub(crate) const LINGER_BYTES: usize = 4 << 20;

/// A lingering close in progress: its deadline runs from its creation.
pub(crate) struct Linger {
    /// Boxed: the connections that hold a `Linger` keep it only while closing.
    deadline: Pin<Box<Sleep>>,
    shut: bool,
    left: usize,
}

impl Linger {
    pub(crate) fn new() -> Linger {
        Linger {
            deadline: Box::pin(tokio::time::sleep(LINGER)),
            shut: false,
            left: LINGER_BYTES,
        }
    }

    /// Shut `io`'s write side down, then read and drop until the client closes, the deadline
    /// passes or `LINGER_BYTES` are read. Errors end it: the connection is gone.
    pub(crate) fn poll<IO: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        io: &mut IO,
        cx: &mut Context<'_>,
    ) -> Poll<()> {
        if self.deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(());
        }
        if !self.shut {
            if ready!(Pin::new(&mut *io).poll_shutdown(cx)).is_err() {
                return Poll::Ready(());
            }
            self.shut = true;
        }
        // On the stack of this call only: nothing of it stays in the connection's future.
        let mut scratch = [0u8; 4096];
        loop {
            let mut buf = ReadBuf::new(&mut scratch);
            match ready!(Pin::new(&mut *io).poll_read(cx, &mut buf)) {
                Ok(()) if !buf.filled().is_empty() && buf.filled().len() < self.left => {
                    self.left -= buf.filled().len();
                }
                // The client closed (or reset): nothing left to lose; or it goes on sending.
                _ => return Poll::Ready(()),
            }
        }
    }
}

/// Close `io` with a lingering close.
pub(crate) async fn close<IO: AsyncRead + AsyncWrite + Unpin>(io: &mut IO) {
    let mut linger = Linger::new();
    poll_fn(|cx| linger.poll(io, cx)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// The client reads the end and a FIN; what it still sends is dropped until it closes.
    #[tokio::test]
    async fn the_linger_lasts_until_the_client_closes() {
        let (mut client, mut server) = tokio::io::duplex(1 << 16);
        server.write_all(b"the end").await.unwrap();
        let mut shut = tokio::spawn(async move { close(&mut server).await });
        let mut out = Vec::new();
        client.read_to_end(&mut out).await.unwrap();
        assert_eq!(out, b"the end", "the last bytes, then FIN");
        client.write_all(&[0; 9000]).await.unwrap();
        let early = tokio::time::timeout(Duration::from_millis(50), &mut shut);
        assert!(early.await.is_err(), "closed before the client did");
        drop(client);
        shut.await.unwrap();
    }

    /// A client that neither reads nor closes holds the close for `LINGER`, no longer.
    #[tokio::test(start_paused = true)]
    async fn the_linger_ends_at_its_deadline() {
        let (_client, mut server) = tokio::io::duplex(1 << 16);
        let start = tokio::time::Instant::now();
        close(&mut server).await;
        let took = start.elapsed();
        assert!(took >= LINGER && took < 2 * LINGER, "{took:?}");
    }

    /// A client that goes on sending is closed on once `LINGER_BYTES` are dropped, before the
    /// deadline: the linger absorbs what was in flight, not a flood.
    #[tokio::test(start_paused = true)]
    async fn the_linger_ends_after_its_bytes() {
        let (mut client, mut server) = tokio::io::duplex(1 << 16);
        // Sends up to 4 × LINGER_BYTES, and holds the connection open: a linger without a byte
        // bound would drain it all and then wait out its deadline.
        let flood = tokio::spawn(async move {
            let chunk = [0u8; 16 * 1024];
            let mut sent = 0;
            while sent < 4 * LINGER_BYTES && client.write_all(&chunk).await.is_ok() {
                sent += chunk.len();
            }
            (sent, client)
        });
        let start = tokio::time::Instant::now();
        close(&mut server).await;
        assert!(start.elapsed() < LINGER, "{:?}", start.elapsed());
        drop(server);
        let (sent, _client) = flood.await.unwrap();
        assert!((LINGER_BYTES..4 * LINGER_BYTES).contains(&sent), "{sent}");
    }
}

//! The HTTP/2 engine as a simulated pair: `serve_connection` on one end of an in-memory duplex
//! stream, the `h2` crate's client on the other (an independent implementation), on tokio's paused clock (timeouts are reached
//! at once and measured in simulated time). No socket.

use super::{serve_connection, H2ConnError};
use crate::config;
use crate::plumbing::shutdown::Trigger;
use bytes::Bytes;
use loadterm_plan::body::{self, BodyKind};
use std::cell::RefCell;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, DuplexStream, ReadBuf};
use tokio::task::JoinHandle;
use tokio::time::Instant;

const TIMEOUT: Duration = Duration::from_secs(5);

/// Runs a test on a `LocalSet`, as the server's workers run: the engine spawns its waiting
/// streams on the thread.
async fn local<F: std::future::Future>(f: F) -> F::Output {
    tokio::task::LocalSet::new().run_until(f).await
}

/// The engine serving one end of a duplex stream: the client's end and the shutdown trigger.
fn server() -> (DuplexStream, Trigger, JoinHandle<Result<(), H2ConnError>>) {
    let (stop, cfg) = config::for_tests(TIMEOUT);
    let (client, server) = tokio::io::duplex(1 << 20);
    let served = tokio::task::spawn_local(async move {
        // A duplex stream does not park: the connection ends in its task.
        serve_connection(server, cfg, Vec::new())
            .await
            .map(|idle| assert!(idle.is_none()))
    });
    (client, stop, served)
}

/// An HTTP/2 client on `io`; its connection is driven by a task of its own, which ends when the
/// server closes the connection.
async fn client(io: DuplexStream) -> (h2::client::SendRequest<Bytes>, JoinHandle<()>) {
    let (send, conn) = h2::client::handshake(io).await.expect("client handshake");
    let conn = tokio::spawn(async move {
        let _ = conn.await;
    });
    (send, conn)
}

/// GET `target`: the status and the body.
async fn get(send: &mut h2::client::SendRequest<Bytes>, target: &str) -> (u16, Vec<u8>) {
    let req = http::Request::get(format!("http://x{target}"))
        .body(())
        .unwrap();
    let (resp, _) = send
        .clone()
        .ready()
        .await
        .unwrap()
        .send_request(req, true)
        .unwrap();
    let resp = resp.await.expect("a response");
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut bytes = Vec::new();
    while let Some(data) = body.data().await {
        let data = data.unwrap();
        body.flow_control().release_capacity(data.len()).unwrap();
        bytes.extend_from_slice(&data);
    }
    (status, bytes)
}

fn pattern(size: u64) -> Vec<u8> {
    (0..size)
        .map(|i| body::byte_at(BodyKind::Pattern, i))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn concurrent_streams_on_one_connection() {
    local(async {
        let (io, _stop, served) = server();
        let (send, conn) = client(io).await;
        let mut a = send.clone();
        let mut b = send.clone();
        // A delayed stream does not hold the others back.
        let slow = tokio::spawn(async move { get(&mut a, "/?s=5&t=1000").await });
        let sizes = [0, 10, 70_000];
        let fast = futures::future::join_all(sizes.map(|size| {
            let mut s = b.clone();
            async move { get(&mut s, &format!("/?s={size}")).await }
        }))
        .await;
        for (size, (status, bytes)) in sizes.iter().zip(fast) {
            assert_eq!(status, 200, "s={size}");
            assert!(bytes == pattern(*size), "s={size}: {} bytes", bytes.len());
        }
        assert!(!slow.is_finished(), "the delayed stream was not delayed");
        assert_eq!(slow.await.unwrap(), (200, pattern(5)));
        assert_eq!(get(&mut b, "/?r=404").await.0, 404);
        // The client closes (its handles gone, no stream open): no error on the server's side.
        drop((send, b));
        conn.await.unwrap();
        assert!(served.await.unwrap().is_ok());
    })
    .await
}

#[tokio::test(start_paused = true)]
async fn idle_connection_gets_goaway_at_the_timeout() {
    local(async {
        let (io, _stop, served) = server();
        let (mut send, conn) = client(io).await;
        assert_eq!(get(&mut send, "/?s=1").await, (200, pattern(1)));
        let t = Instant::now();
        // No stream for a whole timeout: GOAWAY, and the server ends the connection.
        conn.await.unwrap();
        assert!(served.await.unwrap().is_ok());
        assert!(t.elapsed() >= TIMEOUT, "closed after {:?}", t.elapsed());
        assert!(t.elapsed() < TIMEOUT * 2, "closed after {:?}", t.elapsed());
    })
    .await
}

#[tokio::test(start_paused = true)]
async fn shutdown_finishes_the_streams_in_progress() {
    local(async {
        let (io, stop, served) = server();
        let (send, conn) = client(io).await;
        let mut s = send.clone();
        let slow = tokio::spawn(async move { get(&mut s, "/?s=3&t=2000").await });
        tokio::time::sleep(Duration::from_millis(500)).await;
        let t = Instant::now();
        stop.fire();
        assert_eq!(slow.await.unwrap(), (200, pattern(3)));
        drop(send);
        conn.await.unwrap();
        assert!(served.await.unwrap().is_ok());
        assert!(t.elapsed() < TIMEOUT, "closed after {:?}", t.elapsed());
    })
    .await
}

#[tokio::test(start_paused = true)]
async fn a_silent_client_is_a_handshake_timeout() {
    local(async {
        let (_io, _stop, served) = server();
        let t = Instant::now();
        let served = served.await.unwrap();
        assert!(
            matches!(served, Err(H2ConnError::HandshakeTimeout)),
            "{served:?}"
        );
        assert!(t.elapsed() >= TIMEOUT, "{:?}", t.elapsed());
    })
    .await
}

#[tokio::test(start_paused = true)]
async fn a_bad_preface_is_an_h2_error() {
    local(async {
        let (mut io, _stop, served) = server();
        io.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let served = served.await.unwrap();
        assert!(
            matches!(served, Err(H2ConnError::Protocol(ref e)) if e.code == 0x1),
            "{served:?}"
        );
    })
    .await
}

/// The server's end of a duplex stream that writes down the bytes of every write the engine
/// makes (a vectored write as one, as a socket takes it).
struct Recorder {
    io: DuplexStream,
    writes: Rc<RefCell<Vec<usize>>>,
}

impl AsyncRead for Recorder {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Recorder {
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
        let all: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
        let n = ready!(Pin::new(&mut self.io).poll_write(cx, &all))?;
        self.writes.borrow_mut().push(n);
        Poll::Ready(Ok(n))
    }
    fn is_write_vectored(&self) -> bool {
        true
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl crate::stream::ByteStream for Recorder {
    fn idle_socket(&self) -> Option<&tokio::net::TcpStream> {
        None
    }
}

/// A large body begins in the pass with its head and fills every pass up to `emit::LIMIT`:
/// each write but the response's last is a full pass (a pass one frame longer took a second,
/// tiny, write; a head alone, another).
#[tokio::test(start_paused = true)]
async fn a_large_body_leaves_in_full_passes() {
    use super::emit::LIMIT;
    local(async {
        let (_stop, cfg) = config::for_tests(TIMEOUT);
        let (client_io, server_io) = tokio::io::duplex(1 << 20);
        let writes = Rc::new(RefCell::new(Vec::new()));
        let recorder = Recorder {
            io: server_io,
            writes: writes.clone(),
        };
        let served = tokio::task::spawn_local(serve_connection(recorder, cfg, Vec::new()));
        // Windows wide enough that only the pass cuts the body.
        let (mut send, conn) = h2::client::Builder::new()
            .initial_window_size(1 << 20)
            .initial_connection_window_size(1 << 24)
            .handshake::<_, Bytes>(client_io)
            .await
            .expect("client handshake");
        let conn = tokio::spawn(async move {
            let _ = conn.await;
        });
        assert_eq!(get(&mut send, "/?s=0").await.0, 200);
        writes.borrow_mut().clear();
        let (status, bytes) = get(&mut send, "/?s=256k").await;
        assert_eq!(status, 200);
        assert!(bytes == pattern(256 << 10), "{} bytes", bytes.len());
        let w = writes.borrow().clone();
        let total: usize = w.iter().sum();
        assert!(w.iter().all(|&n| n <= LIMIT), "{w:?}");
        assert_eq!(w.len(), total.div_ceil(LIMIT), "{w:?}");
        drop(send);
        conn.await.unwrap();
        assert!(served.await.unwrap().is_ok());
    })
    .await
}

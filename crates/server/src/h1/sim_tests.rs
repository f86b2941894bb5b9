//! The HTTP/1 engine as a simulated pair: `conn::serve` on one end of an in-memory duplex
//! stream, the test as the client on the other, and tokio's paused clock (it jumps ahead whenever
//! both ends wait, so timeouts are reached at once and measured in simulated time). No socket:
//! the duplex stream has none to wait on, so an idle connection waits in its busy period.

use super::{serve, ListenerOptions};
use crate::config;
use crate::plumbing::shutdown::Trigger;
use crate::stream::ByteStream;
use loadterm_plan::body::{self, BodyKind};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::Instant;

impl ByteStream for DuplexStream {
    fn idle_socket(&self) -> Option<&TcpStream> {
        None
    }
}

const TIMEOUT: Duration = Duration::from_secs(5);

/// The client's end of a connection served by the engine, and the shutdown trigger.
struct Pair {
    client: DuplexStream,
    /// Bytes read from the server and not yet taken as a response.
    read: Vec<u8>,
    stop: Trigger,
    server: JoinHandle<()>,
}

fn pair() -> Pair {
    let (stop, cfg) = config::for_tests(TIMEOUT);
    let opts = ListenerOptions {
        h2c_upgrade: false,
        extra: Vec::new(),
        splice: false,
    };
    let (client, server) = tokio::io::duplex(256 * 1024);
    let server = tokio::spawn(async move {
        // A duplex stream never parks nor upgrades here: the engine ends with the connection.
        assert!(serve(server, cfg, opts, None).await.is_none());
    });
    Pair {
        client,
        read: Vec::new(),
        stop,
        server,
    }
}

/// A response as the client reads it.
#[derive(Debug)]
struct Response {
    head: String,
    body: Vec<u8>,
}

impl Pair {
    async fn send(&mut self, bytes: &str) {
        self.client.write_all(bytes.as_bytes()).await.unwrap();
    }

    /// Read more from the server; false at the end of the stream.
    async fn more(&mut self) -> bool {
        let mut buf = [0u8; 4096];
        let n = self.client.read(&mut buf).await.unwrap();
        self.read.extend_from_slice(&buf[..n]);
        n > 0
    }

    /// The next response (its body framed by content-length), or `None` if the server closed
    /// the connection first.
    async fn response(&mut self) -> Option<Response> {
        let end = loop {
            if let Some(at) = self.read.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            if !self.more().await {
                assert!(self.read.is_empty(), "truncated head: {:?}", self.read);
                return None;
            }
        };
        let head = String::from_utf8(self.read[..end].to_vec()).unwrap();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .map_or(0, |v| v.parse().unwrap());
        while self.read.len() < end + len {
            assert!(self.more().await, "truncated body after {head:?}");
        }
        let body = self.read[end..end + len].to_vec();
        self.read.drain(..end + len);
        Some(Response { head, body })
    }

    /// The server closes the connection: nothing more comes.
    async fn closed(&mut self) {
        assert!(!self.more().await, "unexpected bytes: {:?}", self.read);
        (&mut self.server).await.unwrap();
    }
}

fn dummy(resp: &Response, size: usize) {
    assert!(
        resp.head.starts_with("HTTP/1.1 200 OK\r\n"),
        "{}",
        resp.head
    );
    assert_eq!(resp.body.len(), size, "{}", resp.head);
    assert_eq!(resp.body, body::slice(BodyKind::Pattern, 0, size));
}

#[tokio::test(start_paused = true)]
async fn keep_alive_serves_requests_one_after_another() {
    let mut p = pair();
    for size in [10, 3000, 0] {
        p.send(&format!("GET /?s={size} HTTP/1.1\r\nhost: x\r\n\r\n"))
            .await;
        let resp = p.response().await.expect("answered on the same connection");
        dummy(&resp, size);
        assert!(!resp.head.contains("connection: close"), "{}", resp.head);
    }
    // HTTP/1.0 without keep-alive: the body is delimited by the close.
    p.send("GET /?s=4 HTTP/1.0\r\n\r\n").await;
    while p.more().await {}
    let all = String::from_utf8(std::mem::take(&mut p.read)).unwrap();
    assert!(all.starts_with("HTTP/1.0 200 OK\r\n"), "{all}");
    assert!(!all.contains("content-length"), "{all}");
    assert!(all.ends_with("\r\n\r\n.123"), "{all}");
    p.closed().await;
}

#[tokio::test(start_paused = true)]
async fn pipelined_requests_are_answered_in_order() {
    let mut p = pair();
    // Three requests in one write, the second with a body that must not be taken for a request.
    p.send(
        "GET /?s=1 HTTP/1.1\r\nhost: x\r\n\r\n\
         POST /?s=2 HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nGET /\
         GET /?s=3 HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    for size in [1, 2, 3] {
        dummy(&p.response().await.expect("pipelined response"), size);
    }
    p.closed().await;
}

#[tokio::test(start_paused = true)]
async fn half_close_after_a_request_still_gets_its_answer() {
    let mut p = pair();
    p.send("GET /?s=7 HTTP/1.1\r\nhost: x\r\n\r\n").await;
    p.client.shutdown().await.unwrap();
    dummy(
        &p.response().await.expect("answered after the client's FIN"),
        7,
    );
    p.closed().await;
}

#[tokio::test(start_paused = true)]
async fn idle_connection_closes_after_the_timeout_silently() {
    let mut p = pair();
    p.send("GET /?s=1 HTTP/1.1\r\nhost: x\r\n\r\n").await;
    dummy(&p.response().await.unwrap(), 1);
    let t = Instant::now();
    p.closed().await;
    // Closed once the client timeout passed with no next request, and not before.
    assert!(t.elapsed() >= TIMEOUT, "closed after {:?}", t.elapsed());
    assert!(t.elapsed() < TIMEOUT * 2, "closed after {:?}", t.elapsed());
}

#[tokio::test(start_paused = true)]
async fn incomplete_head_is_answered_408_at_the_timeout() {
    let mut p = pair();
    let t = Instant::now();
    p.send("GET /?s=1 HTTP/1.1\r\nhost: x\r\n").await;
    let resp = p.response().await.expect("an error page");
    assert!(
        resp.head.starts_with("HTTP/1.1 408 Request Time-out\r\n"),
        "{}",
        resp.head
    );
    assert!(resp.head.contains("connection: close"), "{}", resp.head);
    assert!(t.elapsed() >= TIMEOUT, "408 after {:?}", t.elapsed());
    p.closed().await;
}

#[tokio::test(start_paused = true)]
async fn a_delayed_response_waits_in_simulated_time() {
    let mut p = pair();
    let t = Instant::now();
    p.send("GET /?s=2&t=1500 HTTP/1.1\r\nhost: x\r\n\r\n").await;
    dummy(&p.response().await.unwrap(), 2);
    assert!(
        t.elapsed() >= Duration::from_millis(1500),
        "{:?}",
        t.elapsed()
    );
    assert!(t.elapsed() < TIMEOUT, "{:?}", t.elapsed());
}

#[tokio::test(start_paused = true)]
async fn shutdown_closes_an_idle_connection_at_once() {
    let mut p = pair();
    p.send("GET /?s=1 HTTP/1.1\r\nhost: x\r\n\r\n").await;
    dummy(&p.response().await.unwrap(), 1);
    // Waiting for a next request: shutdown ends the wait, well before the timeout.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let t = Instant::now();
    p.stop.fire();
    p.closed().await;
    assert!(t.elapsed() < TIMEOUT, "closed after {:?}", t.elapsed());
}

#[tokio::test(start_paused = true)]
async fn shutdown_lets_the_request_in_progress_finish() {
    let mut p = pair();
    p.send("GET /?s=3&t=2000 HTTP/1.1\r\nhost: x\r\n\r\n").await;
    // Shutdown while the response is delayed: it is still sent in full, then the connection
    // closes instead of waiting for a next request.
    tokio::time::sleep(Duration::from_millis(500)).await;
    p.stop.fire();
    dummy(&p.response().await.expect("the response in progress"), 3);
    let t = Instant::now();
    p.closed().await;
    assert!(t.elapsed() < TIMEOUT, "closed after {:?}", t.elapsed());
}

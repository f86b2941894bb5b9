//! The HTTP/3 engine as a simulated pair: the server's QUIC endpoint (`serve_endpoint`, the
//! engine's socket layer included) and a quinn client endpoint, each on one end of an in-memory
//! UDP link, in one process, on tokio's paused clock (quinn reads its clock through tokio, so
//! its timers are simulated too). The client speaks HTTP/3 with `loadterm-h3`, as the load
//! generator does. No socket.

use super::{serve_endpoint, server_config};
use crate::config;
use crate::plumbing::shutdown::Trigger;
use crate::workers::tls_sim_tests::identity;
use loadterm_h3::frame::{self, code};
use loadterm_h3::qpack;
use loadterm_h3::reader::{ReadError, Reader};
use loadterm_plan::body::{self, BodyKind};
use quinn::udp::{RecvMeta, Transmit};
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

const TIMEOUT: Duration = Duration::from_secs(5);

/// One end of an in-memory UDP link: what it sends comes out of the other end, whole, in order,
/// at once; nothing is lost.
#[derive(Debug)]
struct MemUdp {
    local: SocketAddr,
    peer: SocketAddr,
    to_peer: mpsc::UnboundedSender<Vec<u8>>,
    from_peer: Mutex<mpsc::UnboundedReceiver<Vec<u8>>>,
}

/// A link between `a` and `b`.
fn udp_pair(a: SocketAddr, b: SocketAddr) -> (Arc<MemUdp>, Arc<MemUdp>) {
    let (a_tx, b_rx) = mpsc::unbounded_channel();
    let (b_tx, a_rx) = mpsc::unbounded_channel();
    let end = |local, peer, to_peer, from_peer| {
        Arc::new(MemUdp {
            local,
            peer,
            to_peer,
            from_peer: Mutex::new(from_peer),
        })
    };
    (end(a, b, a_tx, a_rx), end(b, a, b_tx, b_rx))
}

impl quinn::AsyncUdpSocket for MemUdp {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn quinn::UdpPoller>> {
        Box::pin(AlwaysWritable)
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        assert_eq!(transmit.destination, self.peer, "one peer per link");
        // One segment per transmit (`max_transmit_segments` is 1); a peer gone is a datagram
        // lost, as on UDP.
        let _ = self.to_peer.send(transmit.contents.to_vec());
        Ok(())
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        match self.from_peer.lock().unwrap().poll_recv(cx) {
            Poll::Ready(Some(datagram)) => {
                let len = datagram.len();
                bufs[0][..len].copy_from_slice(&datagram);
                meta[0] = RecvMeta {
                    addr: self.peer,
                    len,
                    stride: len,
                    ecn: None,
                    dst_ip: Some(self.local.ip()),
                };
                Poll::Ready(Ok(1))
            }
            // The peer's end is gone: nothing will come again, as from a silent peer.
            Poll::Ready(None) | Poll::Pending => Poll::Pending,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }

    fn may_fragment(&self) -> bool {
        false
    }
}

/// Sends never block on the link.
#[derive(Debug)]
struct AlwaysWritable;

impl quinn::UdpPoller for AlwaysWritable {
    fn poll_writable(self: Pin<&mut Self>, _: &mut Context) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// The engine's endpoint, serving at one end of a link.
struct Server {
    /// The client's end of the link.
    udp: Arc<MemUdp>,
    roots: rustls::RootCertStore,
    stop: Trigger,
    /// Open connections, as the engine counts them.
    conns: Arc<AtomicUsize>,
    served: JoinHandle<anyhow::Result<()>>,
}

fn server() -> Server {
    let (identity, roots) = identity();
    let (stop, cfg) = config::for_tests(TIMEOUT);
    let quic = server_config(&identity, &cfg).unwrap();
    let (server_udp, udp) = udp_pair(
        "127.0.0.1:4433".parse().unwrap(),
        "127.0.0.1:50000".parse().unwrap(),
    );
    let conns = Arc::new(AtomicUsize::new(0));
    let served = tokio::spawn(serve_endpoint(server_udp, quic, cfg, conns.clone()));
    Server {
        udp,
        roots,
        stop,
        conns,
        served,
    }
}

/// An HTTP/3 client connection: its control stream held open (closing it is a connection
/// error), and the stream ID of the server's GOAWAY once one came.
struct Client {
    conn: quinn::Connection,
    _control: quinn::SendStream,
    goaway: watch::Receiver<Option<u64>>,
    _endpoint: quinn::Endpoint,
}

async fn connect(s: &Server) -> Client {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(s.roots.clone())
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    // Longer than the server's, so that the server's idle timeout is the one that applies.
    let mut transport = quinn::TransportConfig::default();
    transport.max_idle_timeout(Some(Duration::from_secs(60).try_into().unwrap()));
    config.transport_config(Arc::new(transport));
    let endpoint = quinn::Endpoint::new_with_abstract_socket(
        quinn::EndpointConfig::default(),
        None,
        s.udp.clone(),
        Arc::new(quinn::TokioRuntime),
    )
    .unwrap();
    let server = s.udp.peer;
    let conn = endpoint
        .connect_with(config, server, "localhost")
        .unwrap()
        .await
        .expect("QUIC handshake");
    let mut control = conn.open_uni().await.unwrap();
    let mut hello = vec![frame::STREAM_CONTROL as u8];
    frame::put_frame(&mut hello, frame::SETTINGS, &[]);
    control.write_all(&hello).await.unwrap();
    let (tx, goaway) = watch::channel(None);
    tokio::spawn(server_control(conn.clone(), tx));
    Client {
        conn,
        _control: control,
        goaway,
        _endpoint: endpoint,
    }
}

/// Read the server's control stream; its GOAWAY's stream ID goes to `goaway`.
async fn server_control(conn: quinn::Connection, goaway: watch::Sender<Option<u64>>) {
    let Ok(recv) = conn.accept_uni().await else {
        return;
    };
    let mut r = Reader::new(recv);
    assert_eq!(r.varint().await, Ok(Some(frame::STREAM_CONTROL)));
    while let Ok(Some((ty, len))) = r.frame_head().await {
        let payload = r.payload(len as usize).await.unwrap();
        if ty == frame::GOAWAY {
            let (id, _) = frame::get_varint(&payload).unwrap();
            goaway.send_replace(Some(id));
        }
    }
}

/// A request's HEADERS frame (`:method`, `:scheme`, `:authority`, `:path`, then `fields`),
/// and its body in one DATA frame if not empty.
fn request(method: &str, path: &str, fields: &[(&str, &[u8])], body: &[u8]) -> Vec<u8> {
    let mut section = Vec::new();
    qpack::begin(&mut section);
    qpack::field(&mut section, ":method", method.as_bytes());
    qpack::field(&mut section, ":scheme", b"https");
    qpack::field(&mut section, ":authority", b"localhost");
    qpack::field(&mut section, ":path", path.as_bytes());
    for (name, value) in fields {
        qpack::field(&mut section, name, value);
    }
    let mut out = Vec::new();
    frame::put_frame(&mut out, frame::HEADERS, &section);
    if !body.is_empty() {
        frame::put_frame(&mut out, frame::DATA, body);
    }
    out
}

#[derive(Debug)]
struct Response {
    status: u16,
    fields: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

impl Response {
    fn field(&self, name: &str) -> Option<&[u8]> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    }
}

/// Send `request` on a new stream and read the response (its final head, fields and body),
/// or how the server ended the stream.
async fn exchange(conn: &quinn::Connection, request: Vec<u8>) -> Result<Response, ReadError> {
    let (mut send, recv) = conn.open_bi().await.unwrap();
    send.write_all(&request).await.unwrap();
    send.finish().unwrap();
    let mut r = Reader::new(recv);
    let mut response = Response {
        status: 0,
        fields: Vec::new(),
        body: Vec::new(),
    };
    while let Some((ty, len)) = r.frame_head().await? {
        let payload = r.payload(len as usize).await?;
        match ty {
            frame::HEADERS => {
                let mut fields = Vec::new();
                qpack::QpackDecoder::default()
                    .decode(&payload, 1 << 20, |n, v| {
                        fields.push((String::from_utf8_lossy(n).into_owned(), v.to_vec()))
                    })
                    .unwrap();
                response.fields = fields;
                let status = response.field(":status").unwrap();
                response.status = std::str::from_utf8(status).unwrap().parse().unwrap();
            }
            frame::DATA => response.body.extend_from_slice(&payload),
            _ => {}
        }
    }
    Ok(response)
}

async fn get(conn: &quinn::Connection, path: &str) -> Response {
    exchange(conn, request("GET", path, &[], &[]))
        .await
        .expect("a response")
}

fn pattern(size: u64) -> Vec<u8> {
    (0..size)
        .map(|i| body::byte_at(BodyKind::Pattern, i))
        .collect()
}

/// Wait (in simulated time) until the engine counts no open connection.
async fn all_closed(conns: &AtomicUsize) {
    tokio::time::timeout(TIMEOUT * 4, async {
        while conns.load(Ordering::Relaxed) > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("every connection closed");
}

#[tokio::test(start_paused = true)]
async fn requests_one_after_another_on_one_connection() {
    let s = server();
    let c = connect(&s).await;
    for size in [0, 10, 1000, 70_000, 10] {
        let r = get(&c.conn, &format!("/?s={size}")).await;
        assert_eq!(r.status, 200, "s={size}");
        assert!(r.body == pattern(size), "s={size}: {} bytes", r.body.len());
    }
    assert_eq!(s.conns.load(Ordering::Relaxed), 1, "one connection served");
}

#[tokio::test(start_paused = true)]
async fn concurrent_streams_on_one_connection() {
    let s = server();
    let c = connect(&s).await;
    // A delayed stream does not hold the others back.
    let slow = tokio::spawn({
        let conn = c.conn.clone();
        async move { get(&conn, "/?s=5&t=1000").await }
    });
    let sizes = [0, 10, 70_000, 3];
    let fast = futures::future::join_all(sizes.map(|size| {
        let conn = c.conn.clone();
        async move { get(&conn, &format!("/?s={size}")).await }
    }))
    .await;
    for (size, r) in sizes.iter().zip(fast) {
        assert_eq!(r.status, 200, "s={size}");
        assert!(r.body == pattern(*size), "s={size}: {} bytes", r.body.len());
    }
    assert!(!slow.is_finished(), "the delayed stream was not delayed");
    let slow = slow.await.unwrap();
    assert_eq!((slow.status, slow.body), (200, pattern(5)));
}

#[tokio::test(start_paused = true)]
async fn a_client_may_have_as_many_requests_in_flight_as_the_limit() {
    let s = server();
    let c = connect(&s).await;
    // The connection starts with fewer streams than `--h3-max-streams` (100) and grows its
    // limit as they are used: 100 delayed requests all wait their second at once.
    let start = tokio::time::Instant::now();
    let all = futures::future::join_all((0..100).map(|_| {
        let conn = c.conn.clone();
        async move { get(&conn, "/?s=3&t=1000").await }
    }))
    .await;
    for r in all {
        assert_eq!((r.status, r.body), (200, pattern(3)));
    }
    let took = start.elapsed();
    // At 52 streams at a time, 100 requests of a second would take 2 s.
    assert!(
        took < Duration::from_millis(1500),
        "{took:?}: waited for streams"
    );
}

#[tokio::test(start_paused = true)]
async fn a_client_has_three_unidirectional_streams_and_no_datagrams() {
    let s = server();
    let c = connect(&s).await;
    assert_eq!(c.conn.max_datagram_size(), None, "DATAGRAM frames offered");
    // The control stream (open since `connect`), a grease stream (a reserved type, RFC 9114
    // §6.2.3) and the QPACK encoder stream: the three allowed.
    let mut grease = c.conn.open_uni().await.unwrap();
    grease.write_all(&[0x21]).await.unwrap();
    let mut encoder = c.conn.open_uni().await.unwrap();
    encoder
        .write_all(&[frame::STREAM_QPACK_ENCODER as u8])
        .await
        .unwrap();
    // The QPACK decoder stream comes once the server has stopped the grease stream and the
    // client has reset it in answer (RFC 9000 §3.5; quinn resets a stopped stream it drops).
    let stopped = grease.stopped().await.unwrap();
    assert_eq!(stopped, Some(code::STREAM_CREATION_ERROR.into()));
    drop(grease);
    let mut decoder = tokio::time::timeout(TIMEOUT, c.conn.open_uni())
        .await
        .expect("a unidirectional stream freed by the stopped one")
        .unwrap();
    decoder
        .write_all(&[frame::STREAM_QPACK_DECODER as u8])
        .await
        .unwrap();
    let r = get(&c.conn, "/?s=10").await;
    assert_eq!((r.status, r.body), (200, pattern(10)));
    // No fourth while those three are open.
    let fourth = tokio::time::timeout(TIMEOUT, c.conn.open_uni()).await;
    assert!(
        fourth.is_err(),
        "a fourth unidirectional stream was allowed"
    );
}

#[tokio::test(start_paused = true)]
async fn a_request_body_is_read_before_the_answer() {
    let s = server();
    let c = connect(&s).await;
    let (path, data) = ("/?s=4", vec![b'x'; 5000]);
    let length = data.len().to_string();
    let fields: [(&str, &[u8]); 1] = [("content-length", length.as_bytes())];
    let r = exchange(&c.conn, request("POST", path, &fields, &data))
        .await
        .expect("a response");
    assert_eq!((r.status, &r.body), (200, &pattern(4)));
    // x-req counts the request: its head as HTTP/1.1 would spell it, and the body read.
    let field_bytes = "content-length".len() + length.len() + 4;
    let size = loadterm_exchange::head_bytes(4, path.len(), field_bytes) + 5000;
    let x_req = String::from_utf8(r.field("x-req").unwrap().to_vec()).unwrap();
    assert!(x_req.starts_with(&format!("size={size}, ")), "{x_req}");
}

#[tokio::test(start_paused = true)]
async fn query_parameters_shape_the_response() {
    let s = server();
    let c = connect(&s).await;
    let r = get(&c.conn, "/?s=1k&r=404&c=0").await;
    assert_eq!(r.status, 404);
    assert_eq!(r.field("content-length"), Some(&b"1024"[..]));
    assert_eq!(r.field("cache-control"), Some(&b"no-cache"[..]));
    assert!(r.body == pattern(1024), "{} bytes", r.body.len());
}

#[tokio::test(start_paused = true)]
async fn a_malformed_request_is_reset_and_the_connection_serves_on() {
    let s = server();
    let c = connect(&s).await;
    // An upper-case field name (RFC 9114 §4.2): the stream is reset with H3_MESSAGE_ERROR.
    let bad = request("GET", "/?s=1", &[("X-Upper", b"1")], &[]);
    let refused = exchange(&c.conn, bad).await.unwrap_err();
    assert_eq!(refused, ReadError::Reset(code::MESSAGE_ERROR.into()));
    // Only that stream: the connection answers the next request.
    assert_eq!(get(&c.conn, "/?s=1").await.status, 200);
}

#[tokio::test(start_paused = true)]
async fn a_request_head_left_incomplete_gets_408_at_the_timeout() {
    let s = server();
    let c = connect(&s).await;
    let t = Instant::now();
    let (mut send, recv) = c.conn.open_bi().await.unwrap();
    // A HEADERS frame's head announcing a section that never comes.
    let mut head = Vec::new();
    frame::put_frame_head(&mut head, frame::HEADERS, 100);
    send.write_all(&head).await.unwrap();
    let mut r = Reader::new(recv);
    let (ty, len) = r.frame_head().await.unwrap().unwrap();
    assert_eq!(ty, frame::HEADERS);
    let section = r.payload(len as usize).await.unwrap();
    assert_eq!(qpack::status(&section, &mut Vec::new()), Some(408));
    assert!(t.elapsed() >= TIMEOUT, "answered after {:?}", t.elapsed());
    // Before the transport's idle timeout (one grace second later) could close the connection.
    assert!(c.conn.close_reason().is_none());
}

#[tokio::test(start_paused = true)]
async fn w_closes_the_connection_when_no_request_follows() {
    let s = server();
    let c = connect(&s).await;
    let t = Instant::now();
    assert_eq!(get(&c.conn, "/?s=1&w=500").await.status, 200);
    // No request within 500 ms: GOAWAY, then the connection closed with H3_NO_ERROR.
    let why = c.conn.closed().await;
    let quinn::ConnectionError::ApplicationClosed(close) = why else {
        panic!("{why:?}");
    };
    assert_eq!(close.error_code, code::NO_ERROR.into());
    assert_eq!(*c.goaway.borrow(), Some(4));
    let elapsed = t.elapsed();
    assert!(
        elapsed >= Duration::from_millis(500),
        "closed after {elapsed:?}"
    );
    assert!(elapsed < TIMEOUT, "closed after {elapsed:?}");
}

#[tokio::test(start_paused = true)]
async fn an_idle_connection_closes_at_the_idle_timeout() {
    let s = server();
    let c = connect(&s).await;
    assert_eq!(get(&c.conn, "/?s=1").await.status, 200);
    let t = Instant::now();
    // Nothing for the timeout plus the grace second (`max_idle_timeout`): closed silently.
    let why = c.conn.closed().await;
    assert!(matches!(why, quinn::ConnectionError::TimedOut), "{why:?}");
    let idle = TIMEOUT + super::IDLE_GRACE;
    assert!(t.elapsed() >= idle, "closed after {:?}", t.elapsed());
    assert!(t.elapsed() < idle * 2, "closed after {:?}", t.elapsed());
    all_closed(&s.conns).await;
}

#[tokio::test(start_paused = true)]
async fn shutdown_sends_goaway_and_finishes_the_requests_in_progress() {
    let s = server();
    let c = connect(&s).await;
    let slow = tokio::spawn({
        let conn = c.conn.clone();
        async move { get(&conn, "/?s=3&t=2000").await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t = Instant::now();
    s.stop.fire();
    // GOAWAY names the first stream not served: the one after the slow request's (stream 0).
    let mut goaway = c.goaway.clone();
    let id = *goaway.wait_for(Option::is_some).await.unwrap();
    assert_eq!(id, Some(4));
    let slow = slow.await.unwrap();
    assert_eq!((slow.status, slow.body), (200, pattern(3)));
    let why = c.conn.closed().await;
    let quinn::ConnectionError::ApplicationClosed(close) = why else {
        panic!("{why:?}");
    };
    assert_eq!(close.error_code, code::NO_ERROR.into());
    // The endpoint ends once its connections have.
    s.served.await.unwrap().unwrap();
    assert_eq!(s.conns.load(Ordering::Relaxed), 0);
    assert!(t.elapsed() < TIMEOUT, "closed after {:?}", t.elapsed());
}

#[tokio::test(start_paused = true)]
async fn a_body_larger_than_the_clients_window_goes_out_whole() {
    let s = server();
    let c = connect(&s).await;
    // Over quinn's stream receive window (1.25 MB): the server's writes wait for credit.
    let size = 3 << 20;
    let r = get(&c.conn, &format!("/?s={size}")).await;
    assert_eq!(r.status, 200);
    assert!(r.body == pattern(size), "{} bytes", r.body.len());
}

#[tokio::test(start_paused = true)]
async fn a_client_that_stops_reading_is_dropped_at_the_write_timeout() {
    let s = server();
    let c = connect(&s).await;
    let (mut send, recv) = c.conn.open_bi().await.unwrap();
    send.write_all(&request("GET", "/?s=8m", &[], &[]))
        .await
        .unwrap();
    send.finish().unwrap();
    // Nothing read: the server's writes stop at the client's window, then it gives up.
    tokio::time::sleep(TIMEOUT + Duration::from_millis(500)).await;
    let mut r = Reader::new(recv);
    let ended = loop {
        match r.chunk().await {
            Ok(Some(_)) => {}
            other => break other,
        }
    };
    assert_eq!(ended, Err(ReadError::Reset(code::REQUEST_CANCELLED.into())));
}

//! Idle HTTP/1.1 keep-alive connections (issue 16): once a connection has waited for its next
//! request long enough to give back its buffers and its request state (the server's hold is
//! 10 ms), what comes next is answered as on a busy connection — one request, a pipelined burst,
//! a request arriving in pieces — on clear TCP and over TLS. A connection idle for a second is
//! parked out of its task (`park.rs`; over TLS, its rustls session boxed beside the socket):
//! answered the same once it resumes, closed at its idle timeout and at shutdown as a
//! connection in its task is. HTTP/2 connections (h2c, upgraded from HTTP/1.1 and over TLS)
//! park the same way, their codec state put away with the client's settings and HPACK table.

use crate::common;

use common::h2raw::{self, END_HEADERS, END_STREAM, GOAWAY, HEADERS};
use common::http1::assert_body;
use common::metrics::scrape;
use common::Server;
use loadterm_plan::BodyKind;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Many times the server's idle hold, so that the connection has turned idle even on a loaded
/// machine.
const IDLE: Duration = Duration::from_millis(300);
/// How long a connection may take to be parked (the server's `PARK_AFTER` is 1 s): a
/// deadline for a busy machine, not a wait.
const PARK_DEADLINE: Duration = Duration::from_secs(30);

trait Wire: Read + Write {}
impl<T: Read + Write> Wire for T {}

#[derive(Clone, Copy)]
enum Tr {
    Clear,
    Tls,
}

/// An idle spell: `IDLE` long, or until the server has parked the connection.
#[derive(Clone, Copy)]
enum Spell {
    Idle,
    Parked,
}

/// A server, its certificate (PEM) for TLS clients to verify, and its statistics' address.
fn server() -> (Server, PathBuf, SocketAddr) {
    server_with(&[])
}

/// As `server`, with more options.
fn server_with(extra: &[&str]) -> (Server, PathBuf, SocketAddr) {
    static SERVERS: AtomicUsize = AtomicUsize::new(0);
    let n = SERVERS.fetch_add(1, Ordering::Relaxed);
    let pem = std::env::temp_dir().join(format!("loadterm-idle-{}-{n}.pem", std::process::id()));
    let metrics = SocketAddr::from(([127, 0, 0, 1], common::free_port()));
    let s = Server::start(
        &[
            "-t",
            "1",
            "--no-quic",
            "--cert-out",
            pem.to_str().unwrap(),
            "--metrics",
            &metrics.to_string(),
        ]
        .iter()
        .chain(extra)
        .copied()
        .collect::<Vec<_>>(),
    );
    (s, pem, metrics)
}

/// Let the one connection of the server at `metrics` sit idle for `spell`.
fn idle_spell(spell: Spell, metrics: SocketAddr) {
    match spell {
        Spell::Idle => std::thread::sleep(IDLE),
        Spell::Parked => wait_parked(metrics),
    }
}

/// Wait until the server at `metrics` shows its one idle connection parked.
fn wait_parked(metrics: SocketAddr) {
    common::wait_until("the idle connection is parked", PARK_DEADLINE, || {
        scrape(metrics).sum("loadterm_connections_parked", &[]) == 1
    });
}

fn connect(s: &Server, pem: &PathBuf, tr: Tr) -> Box<dyn Wire> {
    connect_alpn(s, pem, tr, b"http/1.1")
}

/// A connection to the server; over TLS, offering `alpn` alone.
fn connect_alpn(s: &Server, pem: &PathBuf, tr: Tr, alpn: &[u8]) -> Box<dyn Wire> {
    let port = match tr {
        Tr::Clear => s.clear_port,
        Tr::Tls => s.tls_port,
    };
    let tcp = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    tcp.set_nodelay(true).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    match tr {
        Tr::Clear => Box::new(tcp),
        Tr::Tls => {
            let mut roots = rustls::RootCertStore::empty();
            for c in rustls_pemfile::certs(&mut std::fs::read(pem).unwrap().as_slice()) {
                roots.add(c.unwrap()).unwrap();
            }
            let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
            let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth();
            cfg.alpn_protocols = vec![alpn.to_vec()];
            let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
            let conn = rustls::ClientConnection::new(Arc::new(cfg), name).unwrap();
            Box::new(rustls::StreamOwned::new(conn, tcp))
        }
    }
}

fn fill(w: &mut dyn Wire, buf: &mut Vec<u8>) {
    let mut tmp = [0u8; 16 * 1024];
    let n = w.read(&mut tmp).expect("read");
    assert!(n > 0, "the server closed the connection");
    buf.extend_from_slice(&tmp[..n]);
}

/// The next response on `w` (bytes that arrive early stay in `buf`): status and body.
fn response(w: &mut dyn Wire, buf: &mut Vec<u8>) -> (u16, Vec<u8>) {
    let head_len = loop {
        if let Some(i) = buf.windows(4).position(|x| x == b"\r\n\r\n") {
            break i + 4;
        }
        fill(w, buf);
    };
    let mut fields = [httparse::EMPTY_HEADER; 32];
    let mut r = httparse::Response::new(&mut fields);
    r.parse(&buf[..head_len]).expect("a valid response head");
    let status = r.code.unwrap();
    let len: usize = r
        .headers
        .iter()
        .find(|f| f.name.eq_ignore_ascii_case("content-length"))
        .map(|f| std::str::from_utf8(f.value).unwrap().parse().unwrap())
        .expect("content-length");
    buf.drain(..head_len);
    while buf.len() < len {
        fill(w, buf);
    }
    (status, buf.drain(..len).collect())
}

fn get(size: &str) -> String {
    format!("GET /?s={size} HTTP/1.1\r\nHost: x\r\n\r\n")
}

/// One request, an idle spell, a pipelined burst in one write, another idle spell, one more.
fn next_requests_after_idle(tr: Tr, spell: Spell) {
    next_requests_after_idle_on(server(), tr, spell);
}

fn next_requests_after_idle_on(
    (s, pem, metrics): (Server, PathBuf, SocketAddr),
    tr: Tr,
    spell: Spell,
) {
    let mut c = connect(&s, &pem, tr);
    let mut buf = Vec::new();
    c.write_all(get("1k").as_bytes()).unwrap();
    assert_eq!(response(&mut *c, &mut buf), (200, body(1024)));
    idle_spell(spell, metrics);
    let burst = ["5", "20k", "1", "300"];
    let all: String = burst.iter().map(|size| get(size)).collect();
    c.write_all(all.as_bytes()).unwrap();
    for (size, len) in burst.iter().zip([5, 20 * 1024, 1, 300]) {
        let (status, got) = response(&mut *c, &mut buf);
        assert_eq!((status, got.len()), (200, len), "s={size}");
        assert_body(&got, BodyKind::Pattern);
    }
    idle_spell(spell, metrics);
    c.write_all(get("2k").as_bytes()).unwrap();
    assert_eq!(response(&mut *c, &mut buf), (200, body(2048)));
    assert!(buf.is_empty(), "nothing beyond the responses");
}

/// A request whose first bytes end the idle spell and whose rest comes well after the hold.
fn request_in_pieces_after_idle(tr: Tr, spell: Spell) {
    let (s, pem, metrics) = server();
    let mut c = connect(&s, &pem, tr);
    let mut buf = Vec::new();
    c.write_all(get("10").as_bytes()).unwrap();
    assert_eq!(response(&mut *c, &mut buf), (200, body(10)));
    idle_spell(spell, metrics);
    let request = get("3k");
    for piece in [&request[..5], &request[5..20], &request[20..]] {
        c.write_all(piece.as_bytes()).unwrap();
        c.flush().unwrap();
        std::thread::sleep(IDLE);
    }
    assert_eq!(response(&mut *c, &mut buf), (200, body(3072)));
}

fn body(len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| loadterm_plan::body::byte_at(BodyKind::Pattern, i))
        .collect()
}

/// Block until the server closes `c` (reads discarded); how long that took.
fn until_closed(c: &mut TcpStream) -> Duration {
    let t0 = Instant::now();
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut sink = [0u8; 4096];
    loop {
        match c.read(&mut sink) {
            Ok(0) | Err(_) => return t0.elapsed(),
            Ok(_) => {}
        }
    }
}

/// One `GET /?s=1k` on a new clear connection, response read.
fn one_request(s: &Server) -> TcpStream {
    let mut c = TcpStream::connect(s.clear_addr()).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = Vec::new();
    c.write_all(get("1k").as_bytes()).unwrap();
    assert_eq!(response(&mut c, &mut buf), (200, body(1024)));
    c
}

#[test]
fn idle_connection_answers_next_request_and_burst_clear() {
    next_requests_after_idle(Tr::Clear, Spell::Idle);
}

#[test]
fn idle_connection_answers_next_request_and_burst_tls() {
    next_requests_after_idle(Tr::Tls, Spell::Idle);
}

#[test]
fn request_in_pieces_across_idle_spell_clear() {
    request_in_pieces_after_idle(Tr::Clear, Spell::Idle);
}

#[test]
fn request_in_pieces_across_idle_spell_tls() {
    request_in_pieces_after_idle(Tr::Tls, Spell::Idle);
}

#[test]
fn parked_connection_answers_next_request_and_burst() {
    next_requests_after_idle(Tr::Clear, Spell::Parked);
}

#[test]
fn request_in_pieces_across_parking() {
    request_in_pieces_after_idle(Tr::Clear, Spell::Parked);
}

#[test]
fn parked_tls_connection_answers_next_request_and_burst() {
    next_requests_after_idle(Tr::Tls, Spell::Parked);
}

#[test]
fn request_in_pieces_across_parking_tls() {
    request_in_pieces_after_idle(Tr::Tls, Spell::Parked);
}

/// `--ja4`: TLS runs behind the replayed ClientHello, drained by the time the connection parks.
#[test]
fn parked_tls_connection_with_ja4_answers_next_requests() {
    next_requests_after_idle_on(server_with(&["--ja4"]), Tr::Tls, Spell::Parked);
}

#[test]
fn parked_tls_connection_closes_at_shutdown() {
    let (mut s, pem, metrics) = server_with(&["--timeout", "60s"]);
    let mut c = connect(&s, &pem, Tr::Tls);
    let mut buf = Vec::new();
    c.write_all(get("1k").as_bytes()).unwrap();
    assert_eq!(response(&mut *c, &mut buf), (200, body(1024)));
    wait_parked(metrics);
    s.sigterm();
    // The read timeout is 10 s: a read that ends before it saw the connection end.
    let mut sink = [0u8; 4096];
    let t0 = Instant::now();
    while let Ok(1..) = c.read(&mut sink) {}
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "closed {:?} after SIGTERM",
        t0.elapsed()
    );
    let status = s.child.wait().expect("wait for the server");
    assert!(status.success(), "the server exits cleanly: {status}");
}

#[test]
fn parked_connection_closes_at_its_idle_timeout() {
    let s = Server::start(&["-t", "1", "--no-quic", "--timeout", "4s"]);
    let mut c = one_request(&s);
    // Parked after 1 s; closed 4 s after the response, not before (nothing is sent first).
    let took = until_closed(&mut c);
    assert!(
        took >= Duration::from_millis(3900) && took < Duration::from_secs(30),
        "closed after {took:?}, the idle timeout is 4 s"
    );
    // The server still serves, and parks again.
    let _ = one_request(&s);
}

#[test]
fn parked_connection_closes_at_shutdown() {
    let (mut s, _, metrics) = server_with(&["--timeout", "60s"]);
    let mut c = one_request(&s);
    wait_parked(metrics);
    s.sigterm();
    let took = until_closed(&mut c);
    assert!(
        took < Duration::from_secs(20),
        "closed {took:?} after SIGTERM"
    );
    let status = s.child.wait().expect("wait for the server");
    assert!(status.success(), "the server exits cleanly: {status}");
}

/// HTTP/2: the preface and SETTINGS sent on a new connection (TLS: ALPN `h2`).
fn h2_connect(s: &Server, pem: &PathBuf, tr: Tr) -> Box<dyn Wire> {
    let mut c = connect_alpn(s, pem, tr, b"h2");
    c.write_all(&h2raw::hello()).unwrap();
    c
}

/// The response on `stream`, read to its END_STREAM: whether a HEADERS frame came, and the
/// body. A GOAWAY or RST_STREAM first fails the test.
fn h2_body(c: &mut dyn Wire, stream: u32) -> (bool, Vec<u8>) {
    let (mut head, mut body) = (false, Vec::new());
    loop {
        let (ty, flags, id, payload) = h2raw::next_frame(c).expect("the response before the close");
        assert!(
            ty != GOAWAY && ty != h2raw::RST_STREAM,
            "frame {ty} {payload:?}"
        );
        if id != stream {
            continue;
        }
        match ty {
            HEADERS => head = true,
            h2raw::DATA => body.extend_from_slice(&payload),
            _ => {}
        }
        if flags & END_STREAM != 0 {
            return (head, body);
        }
    }
}

/// A GET of `/?s=1k` on `stream`. Its `x-n` field, `Some`: a new literal the server indexes
/// (RFC 7541 §6.2.1); `None`: the field by its index in the server's dynamic table (62, the
/// newest), which only a server that kept its table can decode.
fn h2_get_1k(c: &mut dyn Wire, stream: u32, x_n: Option<&[u8]>) {
    let mut block = h2raw::request_block("/?s=1k", &[]);
    match x_n {
        Some(value) => {
            block.push(0x40);
            h2raw::int7(&mut block, 3);
            block.extend_from_slice(b"x-n");
            h2raw::int7(&mut block, value.len());
            block.extend_from_slice(value);
        }
        None => block.push(0x80 | 62),
    }
    let frame = h2raw::frame(HEADERS, END_HEADERS | END_STREAM, stream, &block);
    c.write_all(&frame).unwrap();
}

/// One request, parked, the next stream (its field from the HPACK table the first request
/// filled), parked again, one more.
fn parked_h2_connection_answers_next_streams(tr: Tr) {
    let (s, pem, metrics) = server();
    let mut c = h2_connect(&s, &pem, tr);
    h2_get_1k(&mut *c, 1, Some(b"first"));
    assert_eq!(h2_body(&mut *c, 1), (true, body(1024)));
    for stream in [3, 5] {
        wait_parked(metrics);
        h2_get_1k(&mut *c, stream, None);
        assert_eq!(
            h2_body(&mut *c, stream),
            (true, body(1024)),
            "stream {stream}"
        );
    }
}

#[test]
fn parked_h2c_connection_answers_next_streams() {
    parked_h2_connection_answers_next_streams(Tr::Clear);
}

#[test]
fn parked_h2_tls_connection_answers_next_streams() {
    parked_h2_connection_answers_next_streams(Tr::Tls);
}

/// A parked HTTP/2 connection at its idle timeout: GOAWAY, then the close (as one in its task).
#[test]
fn parked_h2_connection_says_goaway_at_its_idle_timeout() {
    let (s, pem, metrics) = server_with(&["--timeout", "3s"]);
    let mut c = h2_connect(&s, &pem, Tr::Clear);
    h2_get_1k(&mut *c, 1, Some(b"first"));
    assert_eq!(h2_body(&mut *c, 1), (true, body(1024)));
    wait_parked(metrics);
    let t0 = Instant::now();
    let goaway = loop {
        match h2raw::next_frame(&mut *c) {
            Some((GOAWAY, _, _, payload)) => break payload,
            Some(_) => {}
            None => panic!("closed without GOAWAY after {:?}", t0.elapsed()),
        }
    };
    assert_eq!(&goaway[..4], &1u32.to_be_bytes(), "last stream 1");
    assert_eq!(&goaway[4..8], &0u32.to_be_bytes(), "NO_ERROR");
    assert!(
        h2raw::next_frame(&mut *c).is_none(),
        "closed after the GOAWAY"
    );
}

/// A parked HTTP/2 connection over TLS at SIGTERM: GOAWAY and the close, the server exits cleanly.
#[test]
fn parked_h2_tls_connection_says_goaway_at_shutdown() {
    let (mut s, pem, metrics) = server_with(&["--timeout", "60s"]);
    let mut c = h2_connect(&s, &pem, Tr::Tls);
    h2_get_1k(&mut *c, 1, Some(b"first"));
    assert_eq!(h2_body(&mut *c, 1), (true, body(1024)));
    wait_parked(metrics);
    s.sigterm();
    let mut goaway = false;
    while let Some((ty, ..)) = h2raw::next_frame(&mut *c) {
        goaway |= ty == GOAWAY;
    }
    assert!(goaway, "GOAWAY before the close");
    let status = s.child.wait().expect("wait for the server");
    assert!(status.success(), "the server exits cleanly: {status}");
}

/// `Upgrade: h2c`: the upgrading request answered as stream 1, the connection parked once the
/// request replayed as stream 1 is read, and served again as one by prior knowledge is (the
/// HPACK entry stream 3 indexed used by stream 5, after parking again).
#[test]
fn parked_upgraded_h2c_connection_answers_next_streams() {
    let (s, _, metrics) = server();
    let mut c = TcpStream::connect(s.clear_addr()).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    h2raw::upgrade(&mut c, "/?s=1k");
    c.write_all(&h2raw::hello()).unwrap();
    assert_eq!(h2_body(&mut c, 1), (true, body(1024)), "stream 1");
    for (stream, x_n) in [(3, Some(&b"first"[..])), (5, None)] {
        wait_parked(metrics);
        h2_get_1k(&mut c, stream, x_n);
        assert_eq!(
            h2_body(&mut c, stream),
            (true, body(1024)),
            "stream {stream}"
        );
    }
}

/// The client's settings outlive parking: its HPACK table of 0 (the response's block starts
/// with a table size update to 0) and its stream window of 100 bytes (the body comes 100 bytes
/// at a time until the client opens the window), though parked before its first request.
#[test]
fn parked_h2_connection_keeps_the_clients_settings() {
    let (s, pem, metrics) = server();
    let mut c = connect_alpn(&s, &pem, Tr::Tls, b"h2");
    let mut settings = Vec::new();
    for (id, value) in [(0x1u16, 0u32), (0x4, 100)] {
        settings.extend_from_slice(&id.to_be_bytes());
        settings.extend_from_slice(&value.to_be_bytes());
    }
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend(h2raw::frame(h2raw::SETTINGS, 0, 0, &settings));
    c.write_all(&hello).unwrap();
    wait_parked(metrics);
    h2_get_1k(&mut *c, 1, Some(b"x"));
    assert_eq!(
        small_window_1k(&mut *c, 1),
        (0x20, vec![100, 924]),
        "a table size update first, DATA frames within the client's window"
    );
}

/// `Upgrade: h2c` whose `HTTP2-Settings` (then an empty SETTINGS frame) say an HPACK table of 0
/// and a stream window of 100 bytes: the upgrading request's answer (stream 1) is within them
/// (its block starts with the table size update), and so is the next one's, after parking (the
/// update not sent again).
#[test]
fn parked_upgraded_h2c_connection_keeps_the_http2_settings() {
    let (s, _, metrics) = server();
    let mut c = TcpStream::connect(s.clear_addr()).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let settings = h2raw::http2_settings(&[(0x1, 0), (0x4, 100)]);
    h2raw::upgrade_with(&mut c, "/?s=1k", &settings);
    c.write_all(&h2raw::hello()).unwrap();
    assert_eq!(small_window_1k(&mut c, 1), (0x20, vec![100, 924]));
    wait_parked(metrics);
    h2_get_1k(&mut c, 3, Some(b"x"));
    assert_eq!(small_window_1k(&mut c, 3), (0x88, vec![100, 924]));
}

/// The 1 KiB response on `stream` to a client whose stream window is 100 bytes, opened by the
/// rest of the body after the first DATA frame: its header block's first byte (0x20: a table
/// size update to 0; 0x88: `:status: 200`) and its DATA frames' sizes.
fn small_window_1k(c: &mut dyn Wire, stream: u32) -> (u8, Vec<usize>) {
    let (mut first, mut data) = (0, Vec::new());
    loop {
        let (ty, flags, id, payload) = h2raw::next_frame(c).expect("the response");
        assert!(ty != GOAWAY && ty != h2raw::RST_STREAM, "frame {ty}");
        if id != stream {
            continue;
        }
        match ty {
            HEADERS => first = payload[0],
            h2raw::DATA => {
                data.push(payload.len());
                if data.len() == 1 {
                    let update = 924u32.to_be_bytes();
                    c.write_all(&h2raw::frame(h2raw::WINDOW_UPDATE, 0, stream, &update))
                        .unwrap();
                }
            }
            _ => {}
        }
        if flags & END_STREAM != 0 {
            return (first, data);
        }
    }
}

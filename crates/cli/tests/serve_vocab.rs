//! httpterm's parameters (b B w P e p, k=2), distributions and conditional requests, against
//! the real `loadterm serve` over real sockets: HTTP/1.1 clear and TLS, HTTP/2 (h2c and TLS)
//! with raw frames or curl, HTTP/3 with aioquic, and the load generator. Times are checked
//! with lower bounds the server cannot beat and upper bounds a loaded machine stays under.

use crate::common;

use common::h2raw::{self, DATA, END_HEADERS, END_STREAM, GOAWAY, HEADERS};
use common::have_aioquic;
use common::Server;
use serde_json::Value;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A byte stream to the server: clear TCP or TLS.
trait Rw: Read + Write {}
impl<T: Read + Write> Rw for T {}

struct Srv {
    s: Server,
    ca: PathBuf,
}

impl Drop for Srv {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.ca);
    }
}

/// `loadterm serve -t 1` writing its certificates where the TLS clients find them.
fn start(extra: &[&str]) -> Srv {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let ca = std::env::temp_dir().join(format!("loadterm-vocab-{}-{n}.pem", std::process::id()));
    let mut args = vec!["-t", "1", "--cert-out", ca.to_str().unwrap()];
    args.extend_from_slice(extra);
    let s = Server::start(&args);
    Srv { s, ca }
}

fn tls_config(ca: &PathBuf, alpn: &[u8]) -> Arc<rustls::ClientConfig> {
    let mut store = rustls::RootCertStore::empty();
    for c in rustls_pemfile::certs(&mut std::fs::read(ca).unwrap().as_slice()) {
        store.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(store)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![alpn.to_vec()];
    Arc::new(cfg)
}

#[derive(Clone, Copy, Debug)]
enum Tr {
    Clear,
    Tls,
}

/// A connection speaking HTTP/1.1 (`alpn` "http/1.1") or HTTP/2 ("h2"), clear or TLS.
fn connect(srv: &Srv, tr: Tr, alpn: &[u8]) -> Box<dyn Rw> {
    let port = match tr {
        Tr::Clear => srv.s.clear_port,
        Tr::Tls => srv.s.tls_port,
    };
    let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_nodelay(true).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    match tr {
        Tr::Clear => Box::new(tcp),
        Tr::Tls => {
            let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
            let conn = rustls::ClientConnection::new(tls_config(&srv.ca, alpn), name).unwrap();
            Box::new(rustls::StreamOwned::new(conn, tcp))
        }
    }
}

/// More bytes into `buf`; false at the end of the stream (a reset counts as one).
fn fill(c: &mut dyn Rw, buf: &mut Vec<u8>) -> bool {
    let mut tmp = [0u8; 65536];
    match c.read(&mut tmp) {
        Ok(0) => false,
        Ok(n) => {
            buf.extend_from_slice(&tmp[..n]);
            true
        }
        Err(e) if e.kind() == ErrorKind::ConnectionReset => false,
        // rustls: the peer closed without close_notify.
        Err(e) if e.kind() == ErrorKind::UnexpectedEof => false,
        Err(e) => panic!("read: {e}"),
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Everything until the server closes.
fn read_to_close(c: &mut dyn Rw) -> Vec<u8> {
    let mut buf = Vec::new();
    while fill(c, &mut buf) {}
    buf
}

/// One response head (lower-cased text) from `buf`/`c`; the bytes after it stay in `buf`.
fn read_head(c: &mut dyn Rw, buf: &mut Vec<u8>) -> String {
    let end = loop {
        if let Some(i) = find(buf, b"\r\n\r\n") {
            break i + 4;
        }
        assert!(fill(c, buf), "closed before a complete head");
    };
    let head = String::from_utf8(buf.drain(..end).collect()).unwrap();
    head.to_ascii_lowercase()
}

/// Exactly `n` body bytes.
fn read_body(c: &mut dyn Rw, buf: &mut Vec<u8>, n: usize) -> Vec<u8> {
    while buf.len() < n {
        assert!(fill(c, buf), "closed mid-body");
    }
    buf.drain(..n).collect()
}

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n")
}

/// A plain request on the same connection still gets its answer: the connection's framing held.
fn next_request_works(c: &mut dyn Rw, buf: &mut Vec<u8>) {
    c.write_all(get("/?s=3").as_bytes()).unwrap();
    let head = read_head(c, buf);
    assert!(head.starts_with("http/1.1 200 ok"), "{head}");
    assert_eq!(read_body(c, buf, 3), b".12");
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n as u64)
        .map(|i| loadterm_plan::body::byte_at(loadterm_plan::BodyKind::Pattern, i))
        .collect()
}

// ---------------------------------------------------------------- raw HTTP/2

/// The preface and an empty SETTINGS on a fresh connection.
fn h2_open(srv: &Srv, tr: Tr) -> Box<dyn Rw> {
    let mut c = connect(srv, tr, b"h2");
    c.write_all(&h2raw::hello()).unwrap();
    c
}

/// A response's frames on `stream` (HEADERS and DATA), each with when it arrived, up to the one
/// that ends the stream.
struct H2Frame {
    ty: u8,
    flags: u8,
    payload: Vec<u8>,
    at: Instant,
}

fn h2_response(c: &mut dyn Rw, stream: u32) -> Vec<H2Frame> {
    let mut out = Vec::new();
    loop {
        let (ty, flags, id, payload) = h2raw::next_frame(c).expect("connection ended mid-response");
        if id != stream || !(ty == HEADERS || ty == DATA) {
            continue;
        }
        out.push(H2Frame {
            ty,
            flags,
            payload,
            at: Instant::now(),
        });
        if flags & END_STREAM != 0 {
            return out;
        }
    }
}

fn h2_get(c: &mut dyn Rw, stream: u32, path: &str) {
    let block = h2raw::request_block(path, &[]);
    c.write_all(&h2raw::frame(
        HEADERS,
        END_HEADERS | END_STREAM,
        stream,
        &block,
    ))
    .unwrap();
}

fn data_frames(frames: &[H2Frame]) -> Vec<&H2Frame> {
    frames.iter().filter(|f| f.ty == DATA).collect()
}

// ---------------------------------------------------------------- HTTP/3 (aioquic) and tools

fn h3(srv: &Srv, requests: &[&str]) -> Vec<Value> {
    common::h3get(srv.s.tls_port, &[], requests)
}

/// curl's exit code and output (headers with -i).
fn curl(args: &[&str]) -> (i32, String) {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "20"])
        .args(args)
        .output()
        .expect("curl");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn https(srv: &Srv, path: &str) -> String {
    format!("https://127.0.0.1:{}{path}", srv.s.tls_port)
}

fn http(srv: &Srv, path: &str) -> String {
    format!("http://127.0.0.1:{}{path}", srv.s.clear_port)
}

// ================================================================ b: a lying content-length

/// `b` below the body: the head says 4, all 10 bytes follow, then the server closes.
fn b_shorter(tr: Tr) {
    let srv = start(&[]);
    let mut c = connect(&srv, tr, b"http/1.1");
    c.write_all(get("/?s=10&b=4").as_bytes()).unwrap();
    let all = read_to_close(&mut *c);
    let end = find(&all, b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&all[..end]).to_string();
    assert!(head.contains("\r\ncontent-length: 4\r\n"), "{head}");
    assert!(head.contains("\r\nconnection: close\r\n"), "{head}");
    assert_eq!(
        &all[end..],
        pattern(10),
        "the whole real body, then the close"
    );
}

#[test]
fn b_shorter_than_the_body_h1() {
    b_shorter(Tr::Clear);
}

#[test]
fn b_shorter_than_the_body_h1_tls() {
    b_shorter(Tr::Tls);
}

/// `b` above the body: the head says 10, 4 bytes follow, then the close (a truncated response).
fn b_longer(tr: Tr) {
    let srv = start(&[]);
    let mut c = connect(&srv, tr, b"http/1.1");
    c.write_all(get("/?s=4&b=10").as_bytes()).unwrap();
    let all = read_to_close(&mut *c);
    let end = find(&all, b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&all[..end]).to_string();
    assert!(head.contains("\r\ncontent-length: 10\r\n"), "{head}");
    assert_eq!(&all[end..], pattern(4));
}

#[test]
fn b_longer_than_the_body_h1() {
    b_longer(Tr::Clear);
}

#[test]
fn b_longer_than_the_body_h1_tls() {
    b_longer(Tr::Tls);
}

/// curl sees a truncated transfer (exit 18) on HTTP/1.1.
#[test]
fn b_truncated_response_curl_h1() {
    if !common::have_tool("curl") {
        return;
    }
    let srv = start(&[]);
    let (code, out) = curl(&["-i", &http(&srv, "/?s=4&b=10")]);
    assert_eq!(code, 18, "partial file: {out}");
    assert!(out.contains("content-length: 10"), "{out}");
}

/// HTTP/2: the field as asked, the real body in DATA frames that end the stream: the server's
/// framing and flow control hold; the connection carries on.
fn b_h2_framing(tr: Tr) {
    let srv = start(&[]);
    let mut c = h2_open(&srv, tr);
    h2_get(&mut *c, 1, "/?s=10&b=4");
    let frames = h2_response(&mut *c, 1);
    assert_eq!(frames[0].ty, HEADERS);
    let data: Vec<u8> = data_frames(&frames)
        .iter()
        .flat_map(|f| f.payload.clone())
        .collect();
    assert_eq!(data, pattern(10));
    h2_get(&mut *c, 3, "/?s=3");
    let frames = h2_response(&mut *c, 3);
    let n: usize = data_frames(&frames).iter().map(|f| f.payload.len()).sum();
    assert_eq!(n, 3, "the next stream is served");
}

#[test]
fn b_h2c_keeps_its_framing() {
    b_h2_framing(Tr::Clear);
}

#[test]
fn b_h2_tls_keeps_its_framing() {
    b_h2_framing(Tr::Tls);
}

/// curl (nghttp2) finds the response malformed (RFC 9113 §8.1.1) and fails the transfer with
/// its HTTP/2 stream error (92); the truth passes.
#[test]
fn b_h2_curl_rejects_the_lie() {
    if !common::have_tool("curl") {
        return;
    }
    let srv = start(&[]);
    for path in ["/?s=10&b=4", "/?s=4&b=10"] {
        let (code, _) = curl(&["-k", "--http2", &https(&srv, path)]);
        assert_eq!(code, 92, "{path}");
        let (code, _) = curl(&["--http2-prior-knowledge", &http(&srv, path)]);
        assert_eq!(code, 92, "h2c {path}");
    }
    let (code, body) = curl(&["-k", "--http2", &https(&srv, "/?s=4&b=4")]);
    assert_eq!((code, body.as_str()), (0, ".123"));
}

/// aioquic finds the response malformed (RFC 9114 §4.1.2) and closes with H3_MESSAGE_ERROR.
#[test]
fn b_h3_client_finds_the_response_malformed() {
    if !have_aioquic() {
        return;
    }
    let srv = start(&[]);
    let r = h3(&srv, &[r#"{"path": "/?s=10&b=4", "timeout": 10}"#]);
    assert_eq!(r[0]["closed"].as_u64(), Some(0x10e), "{}", r[0]);
}

// ================================================================ k=2: one-byte chunks

fn k2_exact(tr: Tr) {
    let srv = start(&[]);
    let mut c = connect(&srv, tr, b"http/1.1");
    c.write_all(get("/?s=3&k=2").as_bytes()).unwrap();
    let mut buf = Vec::new();
    let head = read_head(&mut *c, &mut buf);
    assert!(
        head.contains("\r\ntransfer-encoding: chunked\r\n"),
        "{head}"
    );
    let want = b"1\r\n1\r\n1\r\n1\r\n1\r\n1\r\n0\r\n\r\n";
    assert_eq!(read_body(&mut *c, &mut buf, want.len()), want);
    next_request_works(&mut *c, &mut buf);
}

#[test]
fn k2_one_byte_chunks_h1() {
    k2_exact(Tr::Clear);
}

#[test]
fn k2_one_byte_chunks_h1_tls() {
    k2_exact(Tr::Tls);
}

fn k2_frames(tr: Tr) {
    let srv = start(&[]);
    let mut c = h2_open(&srv, tr);
    h2_get(&mut *c, 1, "/?s=3&k=2");
    let frames = h2_response(&mut *c, 1);
    let data = data_frames(&frames);
    let payloads: Vec<&[u8]> = data.iter().map(|f| f.payload.as_slice()).collect();
    assert_eq!(payloads, [b"1", b"1", b"1"]);
    assert_eq!(data[2].flags & END_STREAM, END_STREAM);
}

#[test]
fn k2_one_byte_data_frames_h2c() {
    k2_frames(Tr::Clear);
}

#[test]
fn k2_one_byte_data_frames_h2_tls() {
    k2_frames(Tr::Tls);
}

#[test]
fn k2_one_byte_data_frames_h3() {
    if !have_aioquic() {
        return;
    }
    let srv = start(&[]);
    let r = &h3(&srv, &[r#"{"path": "/?s=3&k=2"}"#])[0];
    assert_eq!(r["body_head"], "111", "{r}");
    assert_eq!(r["data_events"].as_u64(), Some(3), "{r}");
}

#[test]
fn k2_curl_reads_one_byte_chunks() {
    if !common::have_tool("curl") {
        return;
    }
    let srv = start(&[]);
    let (code, raw) = curl(&["--raw", &http(&srv, "/?s=2&k=2")]);
    assert_eq!((code, raw.as_str()), (0, "1\r\n1\r\n1\r\n1\r\n0\r\n\r\n"));
    let (code, body) = curl(&["-k", "--http2", &https(&srv, "/?s=2&k=2")]);
    assert_eq!((code, body.as_str()), (0, "11"));
}

// ================================================================ P: pause after the response

/// The next request is answered only after the pause.
fn pause_h1(tr: Tr) {
    let srv = start(&[]);
    let mut c = connect(&srv, tr, b"http/1.1");
    let mut buf = Vec::new();
    let t0 = Instant::now();
    c.write_all(get("/?s=5&P=400").as_bytes()).unwrap();
    let head = read_head(&mut *c, &mut buf);
    assert!(head.contains("content-length: 5"), "{head}");
    assert_eq!(read_body(&mut *c, &mut buf, 5), b".1234");
    next_request_works(&mut *c, &mut buf);
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(5),
        "{took:?}"
    );
}

#[test]
fn p_upper_pauses_after_the_response_h1() {
    pause_h1(Tr::Clear);
}

#[test]
fn p_upper_pauses_after_the_response_h1_tls() {
    pause_h1(Tr::Tls);
}

/// HTTP/2: the body arrives, the stream ends only after the pause.
fn pause_h2(tr: Tr) {
    let srv = start(&[]);
    let mut c = h2_open(&srv, tr);
    let t0 = Instant::now();
    h2_get(&mut *c, 1, "/?s=5&P=400");
    let frames = h2_response(&mut *c, 1);
    let data = data_frames(&frames);
    assert_eq!(data[0].payload, b".1234");
    assert_eq!(
        data[0].flags & END_STREAM,
        0,
        "the body does not end the stream"
    );
    let end = frames.last().unwrap();
    assert!(end.payload.is_empty() && end.flags & END_STREAM != 0);
    let took = end.at - t0;
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(5),
        "{took:?}"
    );
}

#[test]
fn p_upper_ends_the_stream_after_the_pause_h2c() {
    pause_h2(Tr::Clear);
}

#[test]
fn p_upper_ends_the_stream_after_the_pause_h2_tls() {
    pause_h2(Tr::Tls);
}

#[test]
fn p_upper_ends_the_stream_after_the_pause_h3() {
    if !have_aioquic() {
        return;
    }
    let srv = start(&[]);
    let r = &h3(&srv, &[r#"{"path": "/?s=5&P=400"}"#])[0];
    assert_eq!(r["body_head"], ".1234", "{r}");
    let took = r["elapsed"].as_f64().unwrap();
    assert!((0.4..5.0).contains(&took), "{r}");
}

// ================================================================ w: idle time for the next request

/// The server closes the idle connection after w, long before its 25 s default.
fn idle_h1(tr: Tr) {
    let srv = start(&[]);
    let mut c = connect(&srv, tr, b"http/1.1");
    let mut buf = Vec::new();
    let t0 = Instant::now();
    c.write_all(get("/?s=1&w=300").as_bytes()).unwrap();
    read_head(&mut *c, &mut buf);
    read_body(&mut *c, &mut buf, 1);
    assert!(!fill(&mut *c, &mut buf), "nothing else arrives: the close");
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(5),
        "{took:?}"
    );
}

#[test]
fn w_closes_the_idle_connection_h1() {
    idle_h1(Tr::Clear);
}

#[test]
fn w_closes_the_idle_connection_h1_tls() {
    idle_h1(Tr::Tls);
}

/// HTTP/2: GOAWAY after w without a new stream.
fn idle_h2(tr: Tr) {
    let srv = start(&[]);
    let mut c = h2_open(&srv, tr);
    let t0 = Instant::now();
    h2_get(&mut *c, 1, "/?w=300");
    h2_response(&mut *c, 1);
    loop {
        let (ty, ..) = h2raw::next_frame(&mut *c).expect("GOAWAY before the close");
        if ty == GOAWAY {
            break;
        }
    }
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(5),
        "{took:?}"
    );
}

#[test]
fn w_goaway_on_the_idle_connection_h2c() {
    idle_h2(Tr::Clear);
}

#[test]
fn w_goaway_on_the_idle_connection_h2_tls() {
    idle_h2(Tr::Tls);
}

#[test]
fn w_closes_the_idle_connection_h3() {
    if !have_aioquic() {
        return;
    }
    let srv = start(&[]);
    let r = h3(&srv, &[r#"{"path": "/?w=300"}"#, r#"{"wait_close": 10}"#]);
    assert_eq!(r[0]["status"].as_u64(), Some(200), "{}", r[0]);
    // H3_NO_ERROR, well before the 25 s timeout.
    assert_eq!(r[1]["closed"].as_u64(), Some(0x100), "{}", r[1]);
    assert!(r[1]["elapsed"].as_f64().unwrap() < 5.0, "{}", r[1]);
    // With its GOAWAY first (no request from stream 4 on), not dropped by the close.
    assert_eq!(r[1]["goaway"].as_u64(), Some(4), "{}", r[1]);
}

// ================================================================ B: partial read of the body

/// Only 1000 of 50000 body bytes sent: the answer comes anyway (x-req counts what was read);
/// the rest is drained afterwards and the connection serves the next request.
fn partial_h1(tr: Tr) {
    let srv = start(&[]);
    let mut c = connect(&srv, tr, b"http/1.1");
    let head = "POST /?s=2&B=1000 HTTP/1.1\r\nHost: x\r\nContent-Length: 50000\r\n\r\n";
    let mut first = head.as_bytes().to_vec();
    first.extend(vec![b'x'; 1000]);
    c.write_all(&first).unwrap();
    let mut buf = Vec::new();
    let resp = read_head(&mut *c, &mut buf);
    assert!(resp.starts_with("http/1.1 200"), "{resp}");
    let size = format!("x-req: size={}, ", head.len() + 1000);
    assert!(resp.contains(&size), "{resp}");
    assert_eq!(read_body(&mut *c, &mut buf, 2), b".1");
    c.write_all(&vec![b'y'; 49000]).unwrap();
    next_request_works(&mut *c, &mut buf);
}

#[test]
fn b_upper_answers_before_the_whole_body_h1() {
    partial_h1(Tr::Clear);
}

#[test]
fn b_upper_answers_before_the_whole_body_h1_tls() {
    partial_h1(Tr::Tls);
}

/// HTTP/2: the response starts after the first DATA; the stream ends once the rest is read.
fn partial_h2(tr: Tr) {
    let srv = start(&[]);
    let mut c = h2_open(&srv, tr);
    let block = h2raw::request_block("/?s=2&B=1000", &[]);
    c.write_all(&h2raw::frame(HEADERS, END_HEADERS, 1, &block))
        .unwrap();
    c.write_all(&h2raw::frame(DATA, 0, 1, &[b'x'; 1000]))
        .unwrap();
    let mut head_seen = false;
    let mut body = Vec::new();
    // The head and the body, but not the end of the stream: the request is not over.
    while body.len() < 2 {
        let (ty, flags, id, p) =
            h2raw::next_frame(&mut *c).expect("response before the rest of the body");
        if id != 1 {
            continue;
        }
        assert_eq!(
            flags & END_STREAM,
            0,
            "ended before the request body was read"
        );
        head_seen |= ty == HEADERS;
        if ty == DATA {
            body.extend(p);
        }
    }
    assert!(head_seen);
    c.write_all(&h2raw::frame(DATA, END_STREAM, 1, &[b'y'; 9000]))
        .unwrap();
    let rest = h2_response(&mut *c, 1);
    assert!(rest.last().unwrap().flags & END_STREAM != 0);
    assert_eq!(body, b".1");
}

#[test]
fn b_upper_answers_before_the_whole_body_h2c() {
    partial_h2(Tr::Clear);
}

#[test]
fn b_upper_answers_before_the_whole_body_h2_tls() {
    partial_h2(Tr::Tls);
}

#[test]
fn b_upper_answers_before_the_whole_body_h3() {
    if !have_aioquic() {
        return;
    }
    let srv = start(&[]);
    let r = h3(
        &srv,
        &[
            r#"{"path": "/?s=2&B=1000", "data": 300000}"#,
            r#"{"path": "/?s=3"}"#,
        ],
    );
    assert_eq!(r[0]["status"].as_u64(), Some(200), "{}", r[0]);
    let xreq = r[0]["headers"]["x-req"].as_str().unwrap();
    let size: u64 = xreq["size=".len()..xreq.find(',').unwrap()]
        .parse()
        .unwrap();
    assert!(
        (1000..300_000).contains(&size),
        "answered after ~1000 of 300000 body bytes: {xreq}"
    );
    assert_eq!(r[1]["body_len"].as_u64(), Some(3), "{}", r[1]);
}

// ================================================================ e: ETag, 304 and 412

/// The ETag of `/?e=1&s=5`: httpterm's sum of the target's big-endian words, plus 1.
const TAG: &str = "\"9565D87B\"";

fn conditional_h1(tr: Tr, field: &str, want: &str) {
    let srv = start(&[]);
    let mut c = connect(&srv, tr, b"http/1.1");
    let mut buf = Vec::new();
    c.write_all(get("/?e=1&s=5").as_bytes()).unwrap();
    let head = read_head(&mut *c, &mut buf);
    assert!(
        head.contains(&format!("\r\netag: {}\r\n", TAG.to_ascii_lowercase())),
        "{head}"
    );
    read_body(&mut *c, &mut buf, 5);
    let req = format!("GET /?e=1&s=5 HTTP/1.1\r\nHost: x\r\n{field}\r\n\r\n");
    c.write_all(req.as_bytes()).unwrap();
    let head = read_head(&mut *c, &mut buf);
    assert!(head.starts_with(want), "{head}");
    assert!(head.contains("etag: "), "{head}");
    if want.contains("412") {
        assert!(head.contains("content-length: 0"), "{head}");
    }
    next_request_works(&mut *c, &mut buf);
}

#[test]
fn e_if_none_match_gives_304_h1() {
    conditional_h1(
        Tr::Clear,
        &format!("If-None-Match: \"x\", W/{TAG}"),
        "http/1.1 304 not modified",
    );
}

#[test]
fn e_if_match_gives_412_h1_tls() {
    conditional_h1(
        Tr::Tls,
        "If-Match: \"other\"",
        "http/1.1 412 precondition failed",
    );
}

#[test]
fn e_conditionals_with_curl_h2_and_h2c() {
    if !common::have_tool("curl") {
        return;
    }
    let srv = start(&[]);
    let inm = format!("If-None-Match: {TAG}");
    let (_, out) = curl(&[
        "-i",
        "--http2-prior-knowledge",
        "-H",
        &inm,
        &http(&srv, "/?e=1&s=5"),
    ]);
    assert!(out.starts_with("HTTP/2 304"), "{out}");
    assert!(out.contains(&format!("etag: {TAG}")), "{out}");
    let (_, out) = curl(&[
        "-ik",
        "--http2",
        "-X",
        "POST",
        "-H",
        "If-None-Match: *",
        &https(&srv, "/?e=1&s=5"),
    ]);
    assert!(out.starts_with("HTTP/2 412"), "{out}");
    let (_, out) = curl(&[
        "-ik",
        "--http2",
        "-H",
        "If-Match: *",
        &https(&srv, "/?e=1&s=5"),
    ]);
    assert!(out.starts_with("HTTP/2 200"), "{out}");
}

#[test]
fn e_conditionals_h3() {
    if !have_aioquic() {
        return;
    }
    let srv = start(&[]);
    let r = h3(
        &srv,
        &[
            r#"{"path": "/?e=1&s=5", "headers": [["if-none-match", "*"]]}"#,
            r#"{"path": "/?e=1&s=5", "headers": [["if-match", "W/\"9565D87B\""]]}"#,
        ],
    );
    assert_eq!(r[0]["status"].as_u64(), Some(304), "{}", r[0]);
    assert_eq!(r[0]["headers"]["etag"], TAG, "{}", r[0]);
    assert_eq!(r[0]["body_len"].as_u64(), Some(0));
    // If-Match compares strongly: a weak tag fails.
    assert_eq!(r[1]["status"].as_u64(), Some(412), "{}", r[1]);
}

/// Repeated `If-None-Match` lines are one list (RFC 9110 §5.3): the tag in the second line
/// matches, so 304. HTTP/2 sends each line as its own field.
#[test]
fn e_repeated_if_none_match_lines_are_joined_h2() {
    if !common::have_tool("curl") {
        return;
    }
    let srv = start(&[]);
    let second = format!("If-None-Match: {TAG}");
    let (_, out) = curl(&[
        "-i",
        "--http2-prior-knowledge",
        "-H",
        "If-None-Match: \"other\"",
        "-H",
        &second,
        &http(&srv, "/?e=1&s=5"),
    ]);
    assert!(out.starts_with("HTTP/2 304"), "{out}");
}

/// The same over HTTP/3: two `if-none-match` fields, the second one matching.
#[test]
fn e_repeated_if_none_match_lines_are_joined_h3() {
    if !have_aioquic() {
        return;
    }
    let srv = start(&[]);
    let r = h3(
        &srv,
        &[
            r#"{"path": "/?e=1&s=5", "headers": [["if-none-match", "\"other\""], ["if-none-match", "\"9565D87B\""]]}"#,
        ],
    );
    assert_eq!(r[0]["status"].as_u64(), Some(304), "{}", r[0]);
}

/// What a cache in front sees: h2load counts only 304s when it revalidates.
#[test]
fn e_h2load_counts_304s() {
    if !common::have_tool("h2load") {
        return;
    }
    let srv = start(&[]);
    let out = Command::new("h2load")
        .args(["-n", "100", "-c", "2", "-H", "if-none-match: *"])
        .arg(http(&srv, "/?e=7&s=1k"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("status codes: 0 2xx, 100 3xx, 0 4xx, 0 5xx"),
        "{text}"
    );
}

// ================================================================ p: the body in pieces

/// Pieces of at most 10 bytes with pauses of 0..15 ms between them: several reads, over time.
fn pieces_h1(tr: Tr) {
    let srv = start(&[]);
    let mut c = connect(&srv, tr, b"http/1.1");
    let mut buf = Vec::new();
    c.write_all(get("/?s=300&p=10").as_bytes()).unwrap();
    let head = read_head(&mut *c, &mut buf);
    assert!(head.contains("content-length: 300"), "{head}");
    let t0 = Instant::now();
    let mut reads = 0;
    while buf.len() < 300 {
        assert!(fill(&mut *c, &mut buf));
        reads += 1;
    }
    // At least 30 pieces with about 7 ms between them: even a slow reader sees several.
    assert!(reads >= 5, "{reads} reads");
    assert!(
        t0.elapsed() >= Duration::from_millis(30),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(buf, pattern(300));
    buf.clear();
    next_request_works(&mut *c, &mut buf);
}

#[test]
fn p_pieces_h1() {
    pieces_h1(Tr::Clear);
}

#[test]
fn p_pieces_h1_tls() {
    pieces_h1(Tr::Tls);
}

/// One DATA frame per piece, none above p.
fn pieces_h2(tr: Tr) {
    let srv = start(&[]);
    let mut c = h2_open(&srv, tr);
    h2_get(&mut *c, 1, "/?s=300&p=10");
    let frames = h2_response(&mut *c, 1);
    let data = data_frames(&frames);
    assert!(
        data.iter().all(|f| (1..=10).contains(&f.payload.len())),
        "pieces of 1..=10 bytes"
    );
    assert!(data.len() >= 30);
    let body: Vec<u8> = data.iter().flat_map(|f| f.payload.clone()).collect();
    assert_eq!(body, pattern(300));
    let took = data.last().unwrap().at - data[0].at;
    assert!(took >= Duration::from_millis(30), "{took:?}");
}

#[test]
fn p_pieces_h2c() {
    pieces_h2(Tr::Clear);
}

#[test]
fn p_pieces_h2_tls() {
    pieces_h2(Tr::Tls);
}

#[test]
fn p_pieces_h3() {
    if !have_aioquic() {
        return;
    }
    let srv = start(&[]);
    let r = &h3(&srv, &[r#"{"path": "/?s=300&p=10"}"#])[0];
    assert_eq!(r["body_len"].as_u64(), Some(300), "{r}");
    assert!(r["data_events"].as_u64().unwrap() >= 30, "{r}");
    assert!(r["last_data"].as_f64().unwrap() >= 0.03, "{r}");
}

#[test]
fn p_pieces_curl_h2() {
    if !common::have_tool("curl") {
        return;
    }
    let srv = start(&[]);
    let (code, body) = curl(&["-k", "--http2", &https(&srv, "/?s=300&p=10")]);
    assert_eq!(code, 0);
    assert_eq!(body.as_bytes(), pattern(300));
}

// ================================================================ distributions

/// Statuses drawn from `r=200:90,503:10`, 600 times: the 503s within 5 standard deviations.
#[test]
fn distribution_counts_within_binomial_bounds() {
    let srv = start(&["--seed", "11"]);
    let mut c = connect(&srv, Tr::Clear, b"http/1.1");
    let mut buf = Vec::new();
    let n = 600;
    let mut slow = 0;
    for _ in 0..n {
        c.write_all(get("/?r=200:90,503:10").as_bytes()).unwrap();
        let head = read_head(&mut *c, &mut buf);
        match &head[9..12] {
            "200" => {}
            "503" => slow += 1,
            other => panic!("status {other}"),
        }
    }
    let (mean, sd) = (n as f64 * 0.1, (n as f64 * 0.1 * 0.9).sqrt());
    assert!(
        (slow as f64 - mean).abs() < 5.0 * sd,
        "{slow} 503s of {n} (expected {mean})"
    );
}

/// The sizes a seeded server draws from `s=1-1000`, request after request.
fn sizes(seed: &str) -> Vec<usize> {
    let srv = start(&["--seed", seed]);
    let mut c = connect(&srv, Tr::Clear, b"http/1.1");
    let mut buf = Vec::new();
    (0..40)
        .map(|_| {
            c.write_all(get("/?s=1-1000").as_bytes()).unwrap();
            let head = read_head(&mut *c, &mut buf);
            let at = head.find("content-length: ").unwrap() + 16;
            let n: usize = head[at..at + head[at..].find('\r').unwrap()]
                .parse()
                .unwrap();
            read_body(&mut *c, &mut buf, n);
            n
        })
        .collect()
}

#[test]
fn distribution_draws_are_reproducible_with_seed() {
    let a = sizes("42");
    assert!(a.iter().all(|n| (1..=1000).contains(n)), "{a:?}");
    assert_eq!(a, sizes("42"), "same seed, same draws");
    assert_ne!(a, sizes("43"), "another seed, other draws");
}

/// On HTTP/2 and HTTP/3 (and in the control header) too.
#[test]
fn distribution_on_h2_and_h3() {
    let srv = start(&[]);
    if common::have_tool("curl") {
        let (_, out) = curl(&[
            "-ik",
            "--http2",
            "-H",
            "x-loadterm: r=201-202",
            &https(&srv, "/"),
        ]);
        assert!(
            out.starts_with("HTTP/2 201") || out.starts_with("HTTP/2 202"),
            "{out}"
        );
    }
    if have_aioquic() {
        let r = &h3(&srv, &[r#"{"path": "/?s=5:1,7:1"}"#])[0];
        let n = r["body_len"].as_u64().unwrap();
        assert!(n == 5 || n == 7, "{r}");
    }
}

/// The load generator sees the 1% of 500 ms answers at p99.9.
#[test]
fn distribution_shows_at_p99_9_in_the_load_generator() {
    let srv = start(&["--no-quic"]);
    let out = Command::new(common::bin())
        .args(["load", "-n", "3000", "-c", "30", "-k", "--json", "-", "-q"])
        .arg(http(&srv, "/?t=5ms:99,500ms:1"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let p999 = r["latency_us"]["p99_9"].as_f64().unwrap() / 1000.0;
    let p50 = r["latency_us"]["p50"].as_f64().unwrap() / 1000.0;
    assert!((480.0..2500.0).contains(&p999), "p99.9 {p999} ms");
    assert!(p50 < 400.0, "p50 {p50} ms");
}

// ================================================================ bad values

#[test]
fn bad_values_get_a_400_naming_the_parameter() {
    let srv = start(&["--no-quic"]);
    let many = vec!["1:1"; 65].join(",");
    let too_many = format!("/?r={many}");
    for (path, names) in [
        ("/?p=0", "p=0"),
        ("/?b=-2", "b=-2"),
        ("/?t=1ms:x,2ms:1", "t: a weight"),
        ("/?t=10-1ms", "t: a range"),
        (too_many.as_str(), "more than 64 entries"),
    ] {
        let mut c = connect(&srv, Tr::Clear, b"http/1.1");
        c.write_all(get(path).as_bytes()).unwrap();
        let all = String::from_utf8(read_to_close(&mut *c)).unwrap();
        assert!(all.starts_with("HTTP/1.1 400 "), "{path}: {all}");
        assert!(all.contains(names), "{path}: {all}");
    }
}

/// `t` counts from the request's arrival on the host, not from when the server got to read it
/// (the kernel's stamp, on a connection whose requests have waited before: the first wait turns
/// the stamps on; the kernel turns stamping on for the host a moment after the first socket asks,
/// which that wait's 300 ms covers). The server is stopped while a `t=1000` request arrives and
/// continued 1.5 s later: the answer comes at once, where counting from the read made it wait a
/// second more.
#[test]
fn t_counts_from_the_requests_arrival_h1() {
    let s = Server::start(&["-t", "1", "--no-quic"]);
    let kill = |sig: &str| {
        let st = Command::new("kill")
            .args([sig, &s.child.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success(), "kill {sig}");
    };
    let mut c = common::http1::connect(s.clear_port);
    let mut buf = Vec::new();
    c.write_all(b"GET /?t=300 HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert_eq!(
        common::http1::read_response(&mut c, &mut buf, false).status,
        200
    );
    kill("-STOP");
    c.write_all(b"GET /?t=1000 HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let resumed = std::time::Instant::now();
    kill("-CONT");
    assert_eq!(
        common::http1::read_response(&mut c, &mut buf, false).status,
        200
    );
    let waited = resumed.elapsed();
    assert!(
        waited.as_millis() < 900,
        "answered {waited:?} after the server resumed"
    );
}

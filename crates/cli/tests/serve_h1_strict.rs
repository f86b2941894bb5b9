//! Strict HTTP/1.x request parsing (RFC 9112), over raw sockets against the real binary: every
//! refusal gets its status, `connection: close`, then the connection closes and a request
//! pipelined after the bad one is never answered. And what `--lenient` lets through.

use crate::common;

use common::http1::{connect, fill, find, read_response};
use common::Server;
use std::io::Write;

/// A valid request sent right after the bad one: it must never be answered.
const NEXT: &[u8] = b"GET /?s=7 HTTP/1.1\r\nHost: x\r\n\r\n";

/// One row: its name (in assertion messages), the bad request bytes, the status expected.
type Row = (&'static str, Vec<u8>, u16);

fn strict() -> Server {
    Server::start(&["-t", "1", "--no-quic"])
}

fn lenient() -> Server {
    Server::start(&["-t", "1", "--no-quic", "--lenient"])
}

/// Sends `bad` then `NEXT` on one connection; checks the refusal, the close, and that nothing
/// else (above all, no answer to `NEXT`) arrives before the end of the stream.
fn assert_refused(port: u16, name: &str, bad: &[u8], status: u16) {
    let mut c = connect(port);
    // The server may close while a large request is still being written: the response is
    // what counts.
    let _ = c.write_all(&[bad, NEXT].concat());
    let mut buf = Vec::new();
    let r = read_response(&mut c, &mut buf, false);
    assert_eq!(r.status, status, "{name}: status ({:?})", r.head);
    assert_eq!(r.header("connection"), Some("close"), "{name}: connection");
    assert_eq!(r.header("content-type"), Some("text/plain"), "{name}: type");
    assert!(
        r.body.starts_with(format!("{status} ").as_bytes()),
        "{name}: body {:?}",
        String::from_utf8_lossy(&r.body)
    );
    // Up to the end of the stream (the read timeout is 10 s: a server that keeps the connection
    // open fails here, without any tight timing).
    while fill(&mut c, &mut buf) {}
    assert!(
        find(&buf, b"HTTP/1.").is_none(),
        "{name}: more after the refusal: {:?}",
        String::from_utf8_lossy(&buf)
    );
}

/// Sends `req` then `NEXT`; both are answered with `status` then 200 (HTTP/1.0 requests need
/// `K=1` to stay open).
fn assert_accepted(port: u16, name: &str, req: &[u8], status: u16) {
    let mut c = connect(port);
    c.write_all(&[req, NEXT].concat()).unwrap();
    let mut buf = Vec::new();
    let r = read_response(&mut c, &mut buf, false);
    assert_eq!(r.status, status, "{name}: status ({:?})", r.head);
    let r = read_response(&mut c, &mut buf, false);
    assert_eq!(
        (r.status, r.body.len()),
        (200, 7),
        "{name}: the next request"
    );
}

fn rows(port: u16, rows: Vec<Row>) {
    for (name, bad, status) in rows {
        assert_refused(port, name, &bad, status);
    }
}

fn post(fields: &str, body: &str) -> Vec<u8> {
    format!("POST /?s=3 HTTP/1.1\r\nHost: x\r\n{fields}\r\n{body}").into_bytes()
}

fn chunked(body: &str) -> Vec<u8> {
    post("Transfer-Encoding: chunked\r\n", body)
}

/// The chunked bullets: the codec is strict, here proved over the socket.
#[test]
fn chunked_framing_violations_are_400() {
    let s = strict();
    let long_ext = format!("5;x={}\r\nhello\r\n0\r\n\r\n", "a".repeat(64 << 10));
    rows(
        s.clear_port,
        vec![
            (
                "bare ';' after the size",
                chunked("5;\r\nhello\r\n0\r\n\r\n"),
                400,
            ),
            (
                "invalid extension token",
                chunked("5;bad[=x\r\nhello\r\n0\r\n\r\n"),
                400,
            ),
            (
                "CTL in an extension",
                chunked("5;a=\x01\r\nhello\r\n0\r\n\r\n"),
                400,
            ),
            (
                "NUL in an extension",
                chunked("5;a\x00=b\r\nhello\r\n0\r\n\r\n"),
                400,
            ),
            (
                "whitespace after the size",
                chunked("5 \r\nhello\r\n0\r\n\r\n"),
                400,
            ),
            (
                "bare LF after the size",
                chunked("5\nhello\r\n0\r\n\r\n"),
                400,
            ),
            (
                "bare LF after chunk data",
                chunked("5\r\nhello\n0\r\n\r\n"),
                400,
            ),
            (
                "bare LF in the trailer section",
                chunked("5\r\nhello\r\n0\r\nT: v\n\r\n"),
                400,
            ),
            (
                "bare LF ending the body",
                chunked("5\r\nhello\r\n0\r\n\n"),
                400,
            ),
            ("64 KiB chunk extension", chunked(&long_ext), 400),
            ("size not hex", chunked("zz\r\nhello\r\n0\r\n\r\n"), 400),
        ],
    );
    // Extensions that are well formed are fine.
    assert_accepted(
        s.clear_port,
        "valid extensions",
        &chunked("5;a=b;c=\"d e\"\r\nhello\r\n0\r\nT: v\r\n\r\n"),
        200,
    );
}

/// Every mix of Content-Length and Transfer-Encoding, obfuscated codings, and bad lengths.
#[test]
fn content_length_and_transfer_encoding_conflicts_are_400() {
    let s = strict();
    rows(
        s.clear_port,
        vec![
            (
                "TE then CL",
                post(
                    "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n",
                    "0\r\n\r\n",
                ),
                400,
            ),
            (
                "CL then TE",
                post(
                    "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n",
                    "0\r\n\r\n",
                ),
                400,
            ),
            (
                "empty TE next to CL",
                post("Transfer-Encoding:\r\nContent-Length: 3\r\n", "abc"),
                400,
            ),
            ("empty TE alone", post("Transfer-Encoding: \r\n", ""), 400),
            (
                "TE identity",
                post("Transfer-Encoding: identity\r\n", ""),
                400,
            ),
            (
                "TE xchunked",
                post("Transfer-Encoding: xchunked\r\n", "0\r\n\r\n"),
                400,
            ),
            (
                "TE chunked, gzip",
                post("Transfer-Encoding: chunked, gzip\r\n", "0\r\n\r\n"),
                400,
            ),
            (
                "TE chunked twice",
                post(
                    "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
                    "0\r\n\r\n",
                ),
                400,
            ),
            (
                "TE quoted",
                post("Transfer-Encoding: \"chunked\"\r\n", "0\r\n\r\n"),
                400,
            ),
            (
                "TE with a VT",
                post("Transfer-Encoding:\x0bchunked\r\n", "0\r\n\r\n"),
                400,
            ),
            (
                "TE space before colon",
                post("Transfer-Encoding : chunked\r\n", "0\r\n\r\n"),
                400,
            ),
            (
                "TE folded",
                post("Transfer-Encoding:\r\n chunked\r\n", "0\r\n\r\n"),
                400,
            ),
            (
                "TE on HTTP/1.0",
                b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".to_vec(),
                400,
            ),
            (
                "CL twice, same",
                post("Content-Length: 3\r\nContent-Length: 3\r\n", "abc"),
                400,
            ),
            (
                "CL twice, different",
                post("Content-Length: 3\r\nContent-Length: 4\r\n", "abcd"),
                400,
            ),
            ("CL list", post("Content-Length: 3, 3\r\n", "abc"), 400),
            ("CL negative", post("Content-Length: -1\r\n", ""), 400),
            ("CL signed", post("Content-Length: +3\r\n", "abc"), 400),
            (
                "CL not a number",
                post("Content-Length: 3x\r\n", "abc"),
                400,
            ),
            ("CL empty", post("Content-Length:\r\n", ""), 400),
            ("CL hex", post("Content-Length: 0x3\r\n", "abc"), 400),
            (
                "CL over 2^64",
                post("Content-Length: 99999999999999999999\r\n", ""),
                400,
            ),
        ],
    );
}

/// Field syntax and line endings (RFC 9112 §2.2, §5; RFC 9110 §5.5), and the limits.
#[test]
fn field_syntax_line_endings_and_limits() {
    let s = strict();
    rows(
        s.clear_port,
        vec![
            ("obs-fold", post("X-A: a\r\n b\r\n", ""), 400),
            ("whitespace before the colon", post("X-A : a\r\n", ""), 400),
            ("tab before the colon", post("X-A\t: a\r\n", ""), 400),
            ("CR-only line ending", post("X-A: a\rX-B: b\r\n", ""), 400),
            (
                "CR-only request line",
                b"GET / HTTP/1.1\rHost: x\r\n\r\n".to_vec(),
                400,
            ),
            ("bare LF in the head", post("X-A: a\nX-B: b\r\n", ""), 400),
            (
                "bare LF ending the request line",
                b"GET / HTTP/1.1\nHost: x\r\n\r\n".to_vec(),
                400,
            ),
            (
                "bare LF ending the head",
                b"GET / HTTP/1.1\r\nHost: x\r\n\n".to_vec(),
                400,
            ),
            ("NUL in a value", post("X-A: a\x00b\r\n", ""), 400),
            ("CTL in a value", post("X-A: a\x1bb\r\n", ""), 400),
            ("DEL in a value", post("X-A: a\x7fb\r\n", ""), 400),
            ("name not a token", post("X(A): a\r\n", ""), 400),
            ("empty name", post(": a\r\n", ""), 400),
            (
                "field over 8 KiB",
                post(&format!("X-A: {}\r\n", "a".repeat(9 << 10)), ""),
                431,
            ),
            (
                "head over 16 KiB",
                post(
                    &format!("X-A: {0}\r\nX-B: {0}\r\nX-C: {0}\r\n", "a".repeat(6 << 10)),
                    "",
                ),
                431,
            ),
            (
                "101 fields",
                post(
                    &(0..101)
                        .map(|i| format!("X-{i}: v\r\n"))
                        .collect::<String>(),
                    "",
                ),
                431,
            ),
        ],
    );
}

/// Host rules (RFC 9112 §3.2).
#[test]
fn host_rules() {
    let s = strict();
    let get = |host: &str| format!("GET /?s=3 HTTP/1.1\r\n{host}\r\n").into_bytes();
    rows(
        s.clear_port,
        vec![
            ("missing on HTTP/1.1", get(""), 400),
            ("twice, same value", get("Host: x\r\nHost: x\r\n"), 400),
            (
                "twice, different values",
                get("Host: x\r\nHost: y\r\n"),
                400,
            ),
            ("empty", get("Host:\r\n"), 400),
            ("list 'a, b'", get("Host: a, b\r\n"), 400),
            ("userinfo", get("Host: user@host\r\n"), 400),
            ("path", get("Host: host/path\r\n"), 400),
            ("port not a number", get("Host: host:http\r\n"), 400),
            ("unclosed IP literal", get("Host: [::1\r\n"), 400),
        ],
    );
    for (name, host) in [
        ("name and port", "Host: a.example:8080\r\n"),
        ("IPv4", "Host: 127.0.0.1\r\n"),
        ("IPv6", "Host: [::1]:8888\r\n"),
    ] {
        assert_accepted(s.clear_port, name, &get(host), 200);
    }
    // HTTP/1.0 needs no Host.
    assert_accepted(
        s.clear_port,
        "HTTP/1.0 without Host",
        b"GET /?s=3&K=1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
        200,
    );
}

/// Request line: method, request-target forms and bytes, version.
#[test]
fn request_line_rules() {
    let s = strict();
    let line = |l: &str| format!("{l}\r\nHost: x\r\n\r\n").into_bytes();
    let method = "A".repeat(100 << 10);
    rows(
        s.clear_port,
        vec![
            ("asterisk-form on GET", line("GET * HTTP/1.1"), 400),
            (
                "raw non-ASCII in the target",
                line("GET /caf\u{e9} HTTP/1.1"),
                400,
            ),
            (
                "raw high byte in the target",
                [&b"GET /\xff HTTP/1.1\r\nHost: x\r\n\r\n"[..]].concat(),
                400,
            ),
            ("fragment in the target", line("GET /a#b HTTP/1.1"), 400),
            ("'{' in the target", line("GET /a{b} HTTP/1.1"), 400),
            ("bad percent-escape", line("GET /%zz HTTP/1.1"), 400),
            ("relative target", line("GET a/b HTTP/1.1"), 400),
            (
                "userinfo in absolute-form",
                line("GET http://u@x/ HTTP/1.1"),
                400,
            ),
            ("CTL in the target", line("GET /\x01 HTTP/1.1"), 400),
            ("two spaces", line("GET  / HTTP/1.1"), 400),
            ("method not a token", line("G@T / HTTP/1.1"), 400),
            (
                "100 KB method",
                format!("{method} / HTTP/1.1\r\nHost: x\r\n\r\n").into_bytes(),
                501,
            ),
            ("HTTP/2.0 on the HTTP/1 parser", line("GET / HTTP/2.0"), 505),
            ("HTTP/1.2", line("GET / HTTP/1.2"), 505),
            ("not HTTP", line("GET / FTP/1.0"), 400),
            ("no version", line("GET /"), 400),
        ],
    );
    assert_accepted(s.clear_port, "OPTIONS *", &line("OPTIONS * HTTP/1.1"), 200);
    assert_accepted(
        s.clear_port,
        "absolute-form",
        &line("GET http://a.example:80/?s=3 HTTP/1.1"),
        200,
    );
    assert_accepted(
        s.clear_port,
        "escaped UTF-8",
        &line("GET /caf%C3%A9?s=3 HTTP/1.1"),
        200,
    );
}

/// A request line of binary garbage is not a request line: 400 (RFC 9112 §3), not the 501 of a
/// method too long, though its first word is longer than any method.
#[test]
fn binary_garbage_is_400() {
    let s = strict();
    // Every byte but SP, from 0xff down: one word of 255 bytes, CR and LF inside it.
    let garbage: Vec<u8> = (0..=255u8).rev().filter(|&b| b != b' ').collect();
    assert_refused(s.clear_port, "binary garbage", &garbage, 400);
}

/// A 2xx to CONNECT opens a tunnel; the server must not answer 2xx and go on parsing HTTP.
#[test]
fn connect_is_refused_and_closes() {
    let s = strict();
    assert_refused(
        s.clear_port,
        "CONNECT",
        b"CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n",
        501,
    );
    let l = lenient();
    assert_refused(
        l.clear_port,
        "CONNECT, lenient",
        b"CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n",
        501,
    );
}

/// No 1xx to an HTTP/1.0 client (RFC 9110 §15.2), even when it asks with Expect.
#[test]
fn no_100_continue_to_http10() {
    let s = strict();
    let mut c = connect(s.clear_port);
    c.write_all(b"POST /?s=3 HTTP/1.0\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\nbody")
        .unwrap();
    let r = read_response(&mut c, &mut Vec::new(), false);
    assert_eq!((r.status, r.body.len()), (200, 3), "{:?}", r.head);
}

/// `--lenient` (and haterm's `-G` line) accepts what haterm accepts, but the framing rules stay.
#[test]
fn lenient_mode() {
    let l = lenient();
    for (name, req) in [
        ("no Host on HTTP/1.1", &b"GET /?s=1 HTTP/1.1\r\n\r\n"[..]),
        ("two Hosts", b"GET /?s=1 HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
        ("Host with userinfo", b"GET /?s=1 HTTP/1.1\r\nHost: u@h\r\n\r\n"),
        ("asterisk-form on GET", b"GET * HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("raw non-ASCII target", b"GET /\xc3\xa9?s=1 HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("bare LF in the head", b"GET /?s=1 HTTP/1.1\nHost: x\n\n"),
        (
            "TE on HTTP/1.0",
            b"POST /?s=1&K=1 HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        ),
    ] {
        assert_accepted(l.clear_port, name, req, 200);
    }
    rows(
        l.clear_port,
        vec![
            (
                "lenient: TE and CL",
                post(
                    "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n",
                    "0\r\n\r\n",
                ),
                400,
            ),
            (
                "lenient: empty TE next to CL",
                post("Transfer-Encoding:\r\nContent-Length: 3\r\n", "abc"),
                400,
            ),
            (
                "lenient: CL twice",
                post("Content-Length: 3\r\nContent-Length: 3\r\n", "abc"),
                400,
            ),
            (
                "lenient: TE xchunked",
                post("Transfer-Encoding: xchunked\r\n", "0\r\n\r\n"),
                400,
            ),
            (
                "lenient: bare ';' after the size",
                chunked("5;\r\nhello\r\n0\r\n\r\n"),
                400,
            ),
            (
                "lenient: bare LF after chunk data",
                chunked("5\r\nhello\n0\r\n\r\n"),
                400,
            ),
            ("lenient: obs-fold", post("X-A: a\r\n b\r\n", ""), 400),
            (
                "lenient: CR-only line ending",
                post("X-A: a\rX-B: b\r\n", ""),
                400,
            ),
            (
                "lenient: 100 KB method",
                format!("{} / HTTP/1.1\r\n\r\n", "A".repeat(100 << 10)).into_bytes(),
                501,
            ),
        ],
    );
    // haterm's spelling of the same switch.
    let g = Server::start(&[
        "-t",
        "1",
        "--no-quic",
        "-G",
        "option accept-unsafe-violations-in-http-request",
    ]);
    assert_accepted(
        g.clear_port,
        "-G line: no Host",
        b"GET /?s=1 HTTP/1.1\r\n\r\n",
        200,
    );
    assert_refused(
        g.clear_port,
        "-G line: TE and CL",
        &post(
            "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n",
            "0\r\n\r\n",
        ),
        400,
    );
}

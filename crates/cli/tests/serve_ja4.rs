//! `loadterm serve --ja4`: real clients (curl, openssl s_client, aioquic, our own load
//! generator) get a well-formed, stable `x-ja4` (`t…` over TCP, `q…` over QUIC); broken
//! ClientHellos get a TLS alert and a close.

use crate::common;

use common::have_aioquic;
use common::{free_port, have_tool, wait_tcp, Server};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

/// JA4's shape: `[tq]` version `[di]` two 2-digit counts, two ALPN characters, `_`, 12 hex,
/// `_`, 12 hex.
fn assert_ja4(fp: &str, transport: char) {
    let b = fp.as_bytes();
    let ok = b.len() == 36
        && b[0] == transport as u8
        && ["13", "12", "11", "10", "s3", "s2", "00"].contains(&&fp[1..3])
        && matches!(b[3], b'd' | b'i')
        && b[4..8].iter().all(u8::is_ascii_digit)
        && b[8..10].iter().all(u8::is_ascii_alphanumeric)
        && b[10] == b'_'
        && b[23] == b'_'
        && b[11..23]
            .iter()
            .chain(&b[24..36])
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c));
    assert!(ok, "not a {transport}… JA4 fingerprint: {fp:?}");
}

/// The `x-ja4` of one curl request (`args` pick the protocol).
fn curl_ja4(port: u16, args: &[&str]) -> Option<String> {
    let out = Command::new("curl")
        .args(["-sk", "-o", "/dev/null", "-D", "-", "--max-time", "20"])
        .args(args)
        .arg(format!("https://localhost:{port}/?s=10"))
        .output()
        .expect("curl");
    assert!(out.status.success(), "curl failed: {out:?}");
    header(&String::from_utf8_lossy(&out.stdout), "x-ja4")
}

fn header(head: &str, name: &str) -> Option<String> {
    head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_string())
    })
}

#[test]
fn curl_h2_gets_a_stable_ja4() {
    if !have_tool("curl") {
        return;
    }
    let s = Server::start(&["--ja4", "-t", "1"]);
    let a = curl_ja4(s.tls_port, &["--http2"]).expect("x-ja4 on HTTP/2");
    assert_ja4(&a, 't');
    // curl names localhost (SNI) and offers h2 first.
    assert_eq!(&a[3..4], "d", "{a}");
    assert_eq!(&a[8..10], "h2", "{a}");
    assert_eq!(curl_ja4(s.tls_port, &["--http2"]).as_deref(), Some(&*a));
}

#[test]
fn curl_h1_gets_a_stable_ja4() {
    if !have_tool("curl") {
        return;
    }
    let s = Server::start(&["--ja4", "-t", "1"]);
    let a = curl_ja4(s.tls_port, &["--http1.1"]).expect("x-ja4 on HTTP/1.1");
    assert_ja4(&a, 't');
    assert_eq!(&a[8..10], "h1", "{a}");
    assert_eq!(curl_ja4(s.tls_port, &["--http1.1"]).as_deref(), Some(&*a));
}

#[test]
fn without_the_flag_there_is_no_ja4() {
    if !have_tool("curl") {
        return;
    }
    let s = Server::start(&["-t", "1"]);
    assert_eq!(curl_ja4(s.tls_port, &["--http2"]), None);
}

/// The `x-ja4` openssl s_client gets for one HTTP/1.1 request.
fn openssl_ja4(port: u16) -> Option<String> {
    let mut child = Command::new("openssl")
        .args(["s_client", "-quiet", "-connect"])
        .arg(format!("127.0.0.1:{port}"))
        .args(["-servername", "localhost", "-alpn", "http/1.1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"GET /?s=10 HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let _ = child.wait();
    header(&out, "x-ja4")
}

#[test]
fn openssl_s_client_gets_a_stable_ja4() {
    if !have_tool("openssl") {
        return;
    }
    let s = Server::start(&["--ja4", "-t", "1"]);
    let a = openssl_ja4(s.tls_port).expect("x-ja4");
    assert_ja4(&a, 't');
    assert_eq!(&a[8..10], "h1", "{a}");
    assert_eq!(openssl_ja4(s.tls_port).as_deref(), Some(&*a));
}

/// `pad_alpn`: bytes of extra ALPN names aioquic offers (0: none).
fn h3_ja4(port: u16, pad_alpn: usize) -> Option<String> {
    let pad = pad_alpn.to_string();
    let v = common::h3get(
        port,
        &[("H3GET_PAD_ALPN", &pad)],
        &[r#"{"path": "/?s=10"}"#],
    );
    assert_eq!(v.len(), 1, "{v:?}");
    v[0]["headers"]["x-ja4"].as_str().map(str::to_string)
}

#[test]
fn aioquic_gets_a_stable_ja4() {
    if !have_aioquic() {
        return;
    }
    let s = Server::start(&["--ja4", "-t", "1"]);
    let a = h3_ja4(s.tls_port, 0).expect("x-ja4 over HTTP/3");
    assert_ja4(&a, 'q');
    assert_eq!(&a[8..10], "h3", "{a}");
    assert_eq!(h3_ja4(s.tls_port, 0).as_deref(), Some(&*a));
}

#[test]
fn quic_client_hello_over_several_initials_is_reassembled() {
    if !have_aioquic() {
        return;
    }
    let s = Server::start(&["--ja4", "-t", "1"]);
    // 1500 more bytes of ALPN names: the ClientHello needs two Initial packets or more. JA4
    // reads only the first ALPN name and leaves ALPN out of the extension hash, so the
    // fingerprint is the one of the same client with a one-packet ClientHello.
    let one_packet = h3_ja4(s.tls_port, 0).expect("x-ja4, one Initial");
    let several = h3_ja4(s.tls_port, 1500).expect("x-ja4, several Initials");
    assert_eq!(several, one_packet);
}

/// Run `loadterm load` (2 connections) against a `--ja4` server, stop the server, and return
/// the fingerprint table it printed: our load generator reads no response headers, so its
/// fingerprints are checked where the server counts them.
fn load_fingerprints(proto: &str) -> String {
    let (clear, tls) = (free_port(), free_port());
    let log = std::env::temp_dir().join(format!("loadterm-ja4-{}-{proto}", std::process::id()));
    let mut server = Command::new(common::bin())
        .args(["serve", "--ja4", "-t", "1", "-L"])
        .arg(format!("127.0.0.1:{clear}:{tls}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("loadterm serve");
    assert!(
        wait_tcp(tls, Duration::from_secs(10)),
        "server did not start"
    );
    let load = Command::new(common::bin())
        .args(["load", "-k", proto, "-c", "2", "-n", "40"])
        .arg(format!("https://127.0.0.1:{tls}/?s=10"))
        .output()
        .expect("loadterm load");
    assert!(load.status.success(), "loadterm load: {load:?}");
    let _ = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status();
    let status = server.wait().unwrap();
    assert!(status.success(), "server exit {status:?}");
    let report = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    report
}

/// The table says: 2 connections, 1 distinct fingerprint (the same for both), of this shape.
fn assert_one_fingerprint(report: &str, transport: char, alpn: &str) {
    assert!(
        report.contains("JA4 fingerprints: 2 connection(s), 1 distinct"),
        "{report}"
    );
    let line = report
        .lines()
        .find(|l| l.trim_start().starts_with("2  "))
        .unwrap_or_else(|| panic!("no count line: {report}"));
    let fp = line.split_whitespace().nth(1).unwrap();
    assert_ja4(fp, transport);
    // An IP address in the URL: no SNI.
    assert_eq!(&fp[3..4], "i", "{fp}");
    assert_eq!(&fp[8..10], alpn, "{fp}");
}

#[test]
fn loadterm_load_h1_over_tls_has_one_stable_ja4() {
    assert_one_fingerprint(&load_fingerprints("--h1"), 't', "h1");
}

#[test]
fn loadterm_load_h2_has_one_stable_ja4() {
    assert_one_fingerprint(&load_fingerprints("--h2"), 't', "h2");
}

#[test]
fn loadterm_load_h3_has_one_stable_ja4() {
    assert_one_fingerprint(&load_fingerprints("--h3"), 'q', "h3");
}

/// Send `bytes` (then close our side if `eof`) and return everything the server sends until
/// it closes.
fn exchange(port: u16, bytes: &[u8], eof: bool) -> Vec<u8> {
    let mut sock = TcpStream::connect(("127.0.0.1", port)).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    sock.write_all(bytes).unwrap();
    if eof {
        sock.shutdown(std::net::Shutdown::Write).unwrap();
    }
    let mut got = Vec::new();
    // A timeout here (no close) fails the test: the server must close.
    sock.read_to_end(&mut got).expect("the server closes");
    got
}

/// A fatal `decode_error` alert (RFC 8446 §6.2) in a plaintext record.
const DECODE_ERROR_ALERT: &[u8] = &[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 50];

#[test]
fn malformed_client_hello_gets_an_alert_and_a_close() {
    let s = Server::start(&["--ja4", "-t", "1"]);
    // A complete handshake record holding a "ClientHello" of one byte.
    let got = exchange(
        s.tls_port,
        &[0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0, 0, 1, 0x03],
        false,
    );
    assert_eq!(got, DECODE_ERROR_ALERT);
}

#[test]
fn truncated_client_hello_gets_an_alert_and_a_close() {
    let s = Server::start(&["--ja4", "-t", "1"]);
    // The record announces 512 bytes; the client sends 4 and stops sending.
    let got = exchange(
        s.tls_port,
        &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc],
        true,
    );
    assert_eq!(got, DECODE_ERROR_ALERT);
}

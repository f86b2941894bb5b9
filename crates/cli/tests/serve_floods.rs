//! HTTP/2 protections, with raw frames on the h2c port: CONTINUATION, PING and SETTINGS floods,
//! oversized header lists, too many concurrent streams. Each test checks what the server does to
//! the offending connection, that its memory stays bounded, and that it still serves afterwards.

use crate::common;

use common::h2raw::*;
use common::Server;
use std::io::{ErrorKind, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Read until the server sends GOAWAY or closes; returns the GOAWAY error code if any.
fn goaway_or_close(c: &mut TcpStream, limit: Duration) -> Option<u32> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        match next_frame(c) {
            Some((GOAWAY, _, _, p)) => return Some(u32::from_be_bytes([p[4], p[5], p[6], p[7]])),
            Some(_) => {}
            None => return None,
        }
    }
    panic!("the server neither sent GOAWAY nor closed within {limit:?}");
}

/// A fresh connection gets `/?s=3` answered: HEADERS then 3 bytes of DATA.
fn still_serves(s: &Server) {
    let mut c = open(s.clear_port);
    let block = request_block("/?s=3", &[]);
    c.write_all(&frame(HEADERS, END_STREAM | END_HEADERS, 1, &block))
        .unwrap();
    let mut got_headers = false;
    loop {
        let (ty, flags, stream, p) = next_frame(&mut c).expect("no response on a fresh connection");
        if stream != 1 {
            continue;
        }
        match ty {
            HEADERS => got_headers = true,
            DATA => {
                assert!(got_headers);
                assert_eq!(p, b".12");
                assert!(flags & END_STREAM != 0);
                return;
            }
            other => panic!("unexpected frame type {other} on stream 1"),
        }
    }
}

/// Write `chunk` until `total` bytes went out or the server stops taking them; bytes written.
fn flood(c: &mut TcpStream, chunk: &[u8], total: usize) -> usize {
    let mut sent = 0;
    while sent < total {
        match c.write(chunk) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => break, // reset, closed, or the write timeout: the server stopped reading
        }
    }
    sent
}

#[test]
fn continuation_flood_is_cut_off() {
    let s = Server::start(&["-t", "1", "--no-quic"]);
    let before = s.rss_kib();
    let mut c = open(s.clear_port);
    // HEADERS without END_HEADERS, then endless CONTINUATION frames of header bytes.
    c.write_all(&frame(HEADERS, END_STREAM, 1, &request_block("/", &[])))
        .unwrap();
    let mut junk = Vec::new();
    field(&mut junk, "x-flood", &[b'a'; 16_000]);
    let cont = frame(CONTINUATION, 0, 1, &junk);
    let total = 20 << 20;
    let sent = flood(&mut c, &cont, total);
    assert!(
        sent < total,
        "the server took all {sent} bytes of CONTINUATION"
    );
    goaway_or_close(&mut c, Duration::from_secs(5));
    assert!(
        s.rss_kib() < before + 50 * 1024,
        "RSS grew from {before} KiB to {} KiB",
        s.rss_kib()
    );
    still_serves(&s);
}

#[test]
fn oversized_header_list_is_refused_and_a_smaller_one_served() {
    let s = Server::start(&["-t", "1", "--no-quic", "--h2-max-header-list", "16384"]);
    let mut c = open(s.clear_port);
    // One request just under the limit, one far over it (split over CONTINUATION frames).
    let ok = request_block("/?s=1", &[("x-a", &[b'a'; 8000])]);
    c.write_all(&frame(HEADERS, END_STREAM | END_HEADERS, 1, &ok))
        .unwrap();
    let big = request_block("/?s=1", &[("x-b", &[b'b'; 40_000])]);
    let (first, rest) = big.split_at(16_000);
    let mut out = frame(HEADERS, END_STREAM, 3, first);
    for (i, part) in rest.chunks(16_000).enumerate() {
        let last = (i + 1) * 16_000 >= rest.len();
        out.extend(frame(
            CONTINUATION,
            if last { END_HEADERS } else { 0 },
            3,
            part,
        ));
    }
    c.write_all(&out).unwrap();
    let (mut served, mut refused) = (false, None);
    let t0 = Instant::now();
    while !(served && refused.is_some()) && t0.elapsed() < Duration::from_secs(5) {
        match next_frame(&mut c) {
            Some((HEADERS, _, 1, _)) => served = true,
            // RFC 9113 §10.5.1: a 431 response or a stream reset are both allowed.
            Some((HEADERS, _, 3, _)) => refused = Some("response (431)"),
            Some((RST_STREAM, _, 3, _)) => refused = Some("RST_STREAM"),
            Some((GOAWAY, _, _, _)) => refused = Some("GOAWAY"),
            Some(_) => {}
            None => break,
        }
    }
    assert!(served, "the request under the limit was not answered");
    assert!(
        refused.is_some(),
        "the oversized header list was not refused"
    );
    still_serves(&s);
}

#[test]
fn invalid_hpack_is_a_connection_error() {
    let s = Server::start(&["-t", "1", "--no-quic"]);
    let mut c = open(s.clear_port);
    // Indexed field 126: beyond the static table and the (empty) dynamic table.
    c.write_all(&frame(HEADERS, END_STREAM | END_HEADERS, 1, &[0xfe]))
        .unwrap();
    // RFC 9113 §4.3 asks for COMPRESSION_ERROR (0x9); the h2 crate sends PROTOCOL_ERROR (0x1).
    // Either way the connection ends with an error, which is what protects the server.
    let code = goaway_or_close(&mut c, Duration::from_secs(5));
    assert!(matches!(code, Some(0x1 | 0x9)), "GOAWAY code {code:?}");
    still_serves(&s);
}

#[test]
fn ping_and_settings_floods_stay_bounded() {
    let s = Server::start(&["-t", "1", "--no-quic"]);
    let before = s.rss_kib();
    for (name, f) in [
        ("PING", frame(PING, 0, 0, &[7; 8])),
        ("SETTINGS", frame(SETTINGS, 0, 0, &[0, 3, 0, 0, 0, 100])),
    ] {
        let mut c = open(s.clear_port);
        // Never read: every PING and SETTINGS asks for an acknowledgement the client ignores.
        let burst: Vec<u8> = f.iter().copied().cycle().take(f.len() * 4096).collect();
        let sent = flood(&mut c, &burst, 200 << 20);
        let rss = s.rss_kib();
        assert!(
            rss < before + 50 * 1024,
            "{name} flood ({sent} bytes sent): RSS grew from {before} KiB to {rss} KiB"
        );
        drop(c);
        still_serves(&s);
    }
}

#[test]
fn streams_beyond_the_limit_are_refused() {
    let s = Server::start(&["-t", "1", "--no-quic", "--h2-max-streams", "8"]);
    let mut c = open(s.clear_port);
    // Wait for the server's SETTINGS (with the limit) and acknowledge them, as a client must.
    loop {
        let (ty, flags, _, _) = next_frame(&mut c).unwrap();
        if ty == SETTINGS && flags & 1 == 0 {
            c.write_all(&frame(SETTINGS, 1, 0, &[])).unwrap();
            break;
        }
    }
    let block = request_block("/?t=1000&s=1", &[]);
    let mut out = Vec::new();
    for i in 0..20u32 {
        out.extend(frame(HEADERS, END_STREAM | END_HEADERS, 2 * i + 1, &block));
    }
    c.write_all(&out).unwrap();
    let (mut answered, mut refused) = (0, 0);
    let t0 = Instant::now();
    while answered + refused < 20 && t0.elapsed() < Duration::from_secs(5) {
        match next_frame(&mut c) {
            Some((HEADERS, _, _, _)) => answered += 1,
            Some((RST_STREAM, _, _, p)) => {
                // RFC 9113 §5.1.2: REFUSED_STREAM (0x7), so the client may retry.
                assert_eq!(u32::from_be_bytes([p[0], p[1], p[2], p[3]]), 0x7);
                refused += 1;
            }
            Some(_) => {}
            None => break,
        }
    }
    assert_eq!((answered, refused), (8, 12));
    still_serves(&s);
}

//! The bodies of the HTTP/2 fuzz targets: `fuzz/fuzz_targets/h2_frames.rs` and `h2_server.rs`
//! (cargo-fuzz, nightly) call them, and so does a stable test (`h2::fuzz_tests`, in CI),
//! which feeds them a seeded stream of mutated conversations for a bounded time. Each takes
//! any bytes and panics on a finding: a panic of the connection itself, events that depend on
//! how the bytes were split into reads, output that is not well-formed HTTP/2 or grows without
//! bound, or an error that is not one of RFC 9113's (§7) with the GOAWAY that says it.

use super::{code, frame_len, Connection, Event, LocalSettings, Role, FRAME_HEAD, PREFACE};
use super::{GOAWAY, PING, RST_STREAM, SETTINGS, WINDOW_UPDATE};
use crate::fields::RequestFields;
use crate::hpack::{HpackDecoder, HpackError};

/// The largest error code RFC 9113 defines (HTTP_1_1_REQUIRED).
const LAST_CODE: u32 = 0xd;

/// `data` as the frames a server reads after a valid client preface and SETTINGS: the frame
/// decoder (lengths, padding, priority, CONTINUATION, flow control) reaches the same events and
/// the same end whether the bytes come whole or one at a time, and fails only with an RFC
/// error code.
pub fn frames(data: &[u8]) {
    let (whole, end) = events(data, usize::MAX);
    let (bytewise, end1) = events(data, 1);
    assert_eq!(end, end1, "the end depends on the reads");
    assert_eq!(
        merged(whole),
        merged(bytewise),
        "the events depend on the reads"
    );
    if let Some(code) = end {
        assert!((1..=LAST_CODE).contains(&code), "error code {code:#x}");
    }
}

/// The events as owned text, and the error code the input ended with.
fn events(input: &[u8], piece: usize) -> (Vec<String>, Option<u32>) {
    let mut c = Connection::new(Role::Server, LocalSettings::default());
    let mut seen = Vec::new();
    let hello = [PREFACE, &[0, 0, 0, SETTINGS, 0, 0, 0, 0, 0]].concat();
    for mut chunk in hello.chunks(piece).chain(input.chunks(piece)) {
        loop {
            match c.recv(&mut chunk) {
                Ok(Some(Event::Data {
                    stream,
                    data,
                    end_stream,
                    ..
                })) => seen.push(format!("data {stream} {} {end_stream}", data.len())),
                Ok(Some(ev)) => seen.push(format!("{ev:?}")),
                Ok(None) => break,
                Err(e) => return (seen, Some(e.code)),
            }
        }
    }
    (seen, None)
}

/// A DATA frame's payload comes in as many events as reads: merged per frame, by stream.
fn merged(events: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for e in events {
        if let (Some(last), Some(rest)) = (out.last_mut(), e.strip_prefix("data ")) {
            let a: Vec<&str> = last
                .strip_prefix("data ")
                .unwrap_or("")
                .split(' ')
                .collect();
            let b: Vec<&str> = rest.split(' ').collect();
            if a.len() == 3 && a[0] == b[0] && a[2] == "false" {
                let n = a[1].parse::<usize>().unwrap_or(0) + b[1].parse::<usize>().unwrap_or(0);
                *last = format!("data {} {n} {}", b[0], b[2]);
                continue;
            }
        }
        if e.starts_with("data ") && e.ends_with(" 0 false") {
            continue;
        }
        out.push(e);
    }
    out
}

/// `data` as a whole client connection to the server role, answered as the server's engine
/// does (HPACK decoded, fields checked, every request answered with a head and a body, malformed
/// ones reset), in reads whose size the last byte picks: what the connection writes parses as
/// HTTP/2 frames within the peer's frame size and carries RFC error codes, stays bounded, and a
/// connection error ends with its GOAWAY.
pub fn server(data: &[u8]) {
    let mut c = Connection::new(Role::Server, LocalSettings::default());
    let mut decoder = HpackDecoder::default();
    let mut fields = RequestFields::default();
    let mut out = Vec::new();
    let mut answer = Vec::new();
    let piece = 1 + data.last().copied().unwrap_or(0) as usize * 7;
    for mut chunk in data.chunks(piece) {
        let mut failed = None;
        loop {
            match c.recv(&mut chunk) {
                Ok(Some(Event::Headers {
                    stream,
                    block,
                    first,
                    discard,
                    ..
                })) => {
                    fields.begin();
                    let decoded = decoder.decode(block, 16 << 10, |n, v| fields.field(n, v));
                    if decoded == Err(HpackError::Invalid) {
                        c.fail(code::COMPRESSION_ERROR, "invalid HPACK");
                    } else if !discard && first {
                        match fields.finish() {
                            Ok(_) => answer.push(stream),
                            Err(_) => c.reset(stream, code::PROTOCOL_ERROR),
                        }
                    }
                }
                Ok(Some(Event::Reset {
                    code,
                    remote: false,
                    ..
                })) => assert!(code <= LAST_CODE, "reset code {code:#x}"),
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => {
                    assert!((1..=LAST_CODE).contains(&e.code), "error {e:?}");
                    failed = Some(e.code);
                    break;
                }
            }
        }
        for stream in answer.drain(..) {
            c.headers(&mut out, stream, false, |o| o.push(0x88));
            let n = c.send_window(stream).min(c.max_frame()).min(100);
            if c.data(&mut out, stream, n, true) {
                out.resize(out.len() + n, b'x');
            }
        }
        c.take_control(&mut out);
        assert!(out.len() < 1 << 22, "{} bytes out for one read", out.len());
        let last = well_formed(&out, c.max_frame());
        if let Some(code) = failed {
            assert_eq!(last, Some((GOAWAY, code)), "the error's GOAWAY last");
            return;
        }
        out.clear();
    }
}

/// Check that `out` is whole HTTP/2 frames, each within `max_frame` and shaped as RFC 9113
/// says for its type; the last frame's type and, for RST_STREAM and GOAWAY, its error code.
fn well_formed(mut out: &[u8], max_frame: usize) -> Option<(u8, u32)> {
    let mut last = None;
    while !out.is_empty() {
        assert!(out.len() >= FRAME_HEAD, "a cut frame header");
        let len = frame_len(out);
        let (ty, stream) = (out[3], u32::from_be_bytes([out[5], out[6], out[7], out[8]]));
        assert!(
            len <= max_frame,
            "a frame of type {ty}, {len} bytes (max {max_frame})"
        );
        assert!(out.len() >= FRAME_HEAD + len, "a cut frame");
        let p = &out[FRAME_HEAD..FRAME_HEAD + len];
        let word = |at: usize| u32::from_be_bytes([p[at], p[at + 1], p[at + 2], p[at + 3]]);
        let code = match ty {
            RST_STREAM => {
                assert!(len == 4 && stream != 0, "RST_STREAM {len} on {stream}");
                word(0)
            }
            GOAWAY => {
                assert!(len >= 8 && stream == 0, "GOAWAY {len} on {stream}");
                word(4)
            }
            SETTINGS => {
                assert!(
                    len.is_multiple_of(6) && stream == 0,
                    "SETTINGS {len} on {stream}"
                );
                0
            }
            PING => {
                assert!(len == 8 && stream == 0, "PING {len} on {stream}");
                0
            }
            WINDOW_UPDATE => {
                assert!(len == 4, "WINDOW_UPDATE {len}");
                assert!((1..1 << 31).contains(&word(0)), "increment {}", word(0));
                0
            }
            _ => {
                assert!(stream != 0, "frame type {ty} on stream 0");
                0
            }
        };
        assert!(code <= LAST_CODE, "error code {code:#x} in frame type {ty}");
        last = Some((ty, code));
        out = &out[FRAME_HEAD + len..];
    }
    last
}

//! `Upgrade: h2c` (RFC 7540 §3.2). After the `101`, the request that carried the upgrade is
//! stream 1 of the new HTTP/2 connection, and its `HTTP2-Settings` the client's first settings
//! (`Connection::upgrade_settings`). So that the engine takes stream 1 as any other, we encode
//! that request as a HEADERS frame and insert it into the client's bytes right after its
//! connection preface and first SETTINGS frame; the engine then sees an ordinary
//! prior-knowledge connection whose first stream is already half-closed.

use crate::stream::prefixed::Prefixed;
use loadterm_codec::h2::{flag, HEADERS, PREFACE, SETTINGS};
use loadterm_codec::hpack::put_literal;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};

/// Frame payloads above this need the peer's consent (SETTINGS_MAX_FRAME_SIZE), which a
/// client's first frames cannot have given yet.
const DEFAULT_MAX_FRAME: usize = 16_384;

/// Hop-by-hop fields that do not exist in HTTP/2 (RFC 9113 §8.2.2), plus `host` (→ `:authority`);
/// `http2-settings` is taken out (`upgrading`).
const DROPPED: &[&str] = &[
    "connection",
    "upgrade",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "host",
];

/// After the `101`: wait for the client's preface and first SETTINGS (within `timeout`) and
/// return the connection with stream 1, whose HPACK block is `block` (`upgrading`), inserted.
/// `None`: the client did not follow up with HTTP/2.
pub(crate) async fn rewind<IO: AsyncRead + Unpin>(
    mut io: IO,
    mut buffered: Vec<u8>,
    block: &[u8],
    timeout: Duration,
) -> Option<Prefixed<IO>> {
    loop {
        match insert_stream1(&buffered, block) {
            Preface::Ready(bytes) => return Some(Prefixed::new(bytes, io)),
            Preface::Invalid => return None,
            Preface::Partial => {
                buffered.reserve(4096);
                match tokio::time::timeout(timeout, io.read_buf(&mut buffered)).await {
                    Ok(Ok(n)) if n > 0 => {}
                    _ => return None,
                }
            }
        }
    }
}

/// The upgrading request whose head is `head` (complete, parsed once already): stream 1's HPACK
/// block and its `HTTP2-Settings` value; `None` if its fields do not fit one frame (the HTTP/1
/// engine only upgrades heads that do, with one `HTTP2-Settings`).
pub(crate) fn upgrading(head: &[u8]) -> Option<(Vec<u8>, &[u8])> {
    // More fields than the HTTP/1 engine accepts.
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut req = httparse::Request::new(&mut headers);
    req.parse(head).ok()?;
    let (method, path) = (req.method?, req.path?);
    let mut block = Vec::with_capacity(head.len() + 32);
    put_literal(&mut block, b":method", method.as_bytes());
    put_literal(&mut block, b":scheme", b"http");
    put_literal(&mut block, b":path", path.as_bytes());
    if let Some(host) = req
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("host"))
    {
        put_literal(&mut block, b":authority", host.value);
    }
    let mut settings = None;
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("http2-settings") {
            settings = Some(h.value.trim_ascii());
        } else if !DROPPED.iter().any(|d| h.name.eq_ignore_ascii_case(d)) {
            put_literal(&mut block, h.name.to_ascii_lowercase().as_bytes(), h.value);
        }
    }
    (block.len() <= DEFAULT_MAX_FRAME).then_some((block, settings?))
}

/// What the client has sent since the `101`, with stream 1 inserted.
#[derive(Debug, PartialEq, Eq)]
enum Preface {
    /// Need more bytes (the preface or the first SETTINGS frame is incomplete).
    Partial,
    /// Not an HTTP/2 connection preface followed by SETTINGS: close.
    Invalid,
    Ready(Vec<u8>),
}

fn insert_stream1(client: &[u8], block: &[u8]) -> Preface {
    let n = client.len().min(PREFACE.len());
    if client[..n] != PREFACE[..n] {
        return Preface::Invalid;
    }
    let at = PREFACE.len();
    let Some(frame) = client.get(at..at + 9) else {
        return Preface::Partial;
    };
    let len = u32::from_be_bytes([0, frame[0], frame[1], frame[2]]) as usize;
    if frame[3] != SETTINGS || len > DEFAULT_MAX_FRAME {
        return Preface::Invalid;
    }
    let end = at + 9 + len;
    if client.len() < end {
        return Preface::Partial;
    }
    let mut out = Vec::with_capacity(client.len() + 9 + block.len());
    out.extend_from_slice(&client[..end]);
    out.extend_from_slice(&(block.len() as u32).to_be_bytes()[1..]);
    out.extend_from_slice(&[HEADERS, flag::END_STREAM | flag::END_HEADERS, 0, 0, 0, 1]);
    out.extend_from_slice(block);
    out.extend_from_slice(&client[end..]);
    Preface::Ready(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const UPGRADE: &[u8] =
        b"GET /?s=1k HTTP/1.1\r\nHost: h:1\r\nConnection: Upgrade, HTTP2-Settings\r\n\
        Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\nX-Loadterm: s=2\r\n\r\n";

    /// Decode our own literal-only blocks back to (name, value) pairs.
    fn decode(mut b: &[u8]) -> Vec<(String, String)> {
        let mut out = vec![];
        while !b.is_empty() {
            assert_eq!(b[0], 0);
            b = &b[1..];
            let mut pair = vec![];
            for _ in 0..2 {
                let (len, used) = if b[0] < 127 {
                    (b[0] as usize, 1)
                } else {
                    let mut v = 127usize;
                    let mut i = 1;
                    let mut shift = 0;
                    loop {
                        v += ((b[i] & 0x7f) as usize) << shift;
                        shift += 7;
                        i += 1;
                        if b[i - 1] & 0x80 == 0 {
                            break (v, i);
                        }
                    }
                };
                pair.push(String::from_utf8(b[used..used + len].to_vec()).unwrap());
                b = &b[used + len..];
            }
            out.push((pair[0].clone(), pair[1].clone()));
        }
        out
    }

    #[test]
    fn upgrade_request_becomes_pseudo_headers_without_hop_by_hop_fields() {
        let (block, settings) = upgrading(UPGRADE).unwrap();
        assert_eq!(settings, b"AAMAAABkAAQAAP__");
        let fields = decode(&block);
        let names: Vec<_> = fields.iter().map(|(n, v)| format!("{n}={v}")).collect();
        assert_eq!(
            names,
            [
                ":method=GET",
                ":scheme=http",
                ":path=/?s=1k",
                ":authority=h:1",
                "x-loadterm=s=2"
            ]
        );
    }

    /// The HTTP/1 engine upgrades heads of up to 16 KiB - 256 bytes; the worst case for their
    /// HPACK coding (many fields with values long enough for 2-byte lengths) still fits one frame.
    #[test]
    fn largest_upgraded_head_fits_one_frame() {
        let mut head = b"GET /p HTTP/1.1\r\nHost: h\r\nHTTP2-Settings: \r\n".to_vec();
        while head.len() < 16 * 1024 - 256 - 150 {
            head.extend_from_slice(b"x: ");
            head.extend_from_slice(&[b'v'; 128]);
            head.extend_from_slice(b"\r\n");
        }
        head.extend_from_slice(b"\r\n");
        let (block, _) = upgrading(&head).expect("fits");
        assert!(block.len() <= DEFAULT_MAX_FRAME);
        let huge = [&head[..head.len() - 2], &[b'a'; 1000][..], b"\r\n\r\n"].concat();
        assert_eq!(upgrading(&huge), None);
    }

    #[test]
    fn long_values_use_multi_byte_lengths() {
        let mut b = vec![];
        put_literal(&mut b, b"x", &[b'v'; 300]);
        assert_eq!(&b[..6], &[0, 1, b'x', 127, 45 | 0x80, 1]);
        assert_eq!(decode(&b), [("x".to_owned(), "v".repeat(300))]);
    }

    #[test]
    fn headers_frame_follows_the_first_settings_frame() {
        let settings = [0, 0, 6, SETTINGS, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 100];
        let ping = [0, 0, 8, 6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
        let client = [PREFACE, &settings, &ping].concat();
        for cut in 0..PREFACE.len() + settings.len() {
            assert_eq!(
                insert_stream1(&client[..cut], b"blk"),
                Preface::Partial,
                "cut {cut}"
            );
        }
        let Preface::Ready(out) = insert_stream1(&client, b"blk") else {
            panic!("not inserted")
        };
        let headers = [0, 0, 3, HEADERS, 5, 0, 0, 0, 1, b'b', b'l', b'k'];
        assert_eq!(out, [PREFACE, &settings, &headers, &ping].concat());
    }

    #[test]
    fn anything_but_preface_then_settings_is_invalid() {
        assert_eq!(insert_stream1(b"GET / HTTP/1.1\r\n", b""), Preface::Invalid);
        let ping_first = [PREFACE, &[0, 0, 8, 6, 0, 0, 0, 0, 0][..]].concat();
        assert_eq!(insert_stream1(&ping_first, b""), Preface::Invalid);
    }
}

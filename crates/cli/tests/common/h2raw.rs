//! Raw HTTP/2 frames for tests that send what no well-behaved client would: frame and HPACK
//! literal encoding, the client preface, reading the server's frames.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

pub(crate) const DATA: u8 = 0x0;
pub(crate) const HEADERS: u8 = 0x1;
pub(crate) const RST_STREAM: u8 = 0x3;
pub(crate) const SETTINGS: u8 = 0x4;
pub(crate) const PING: u8 = 0x6;
pub(crate) const GOAWAY: u8 = 0x7;
pub(crate) const WINDOW_UPDATE: u8 = 0x8;
pub(crate) const CONTINUATION: u8 = 0x9;
pub(crate) const END_STREAM: u8 = 0x1;
pub(crate) const END_HEADERS: u8 = 0x4;

pub(crate) fn frame(ty: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.extend_from_slice(&[ty, flags]);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// HPACK integer with a 7-bit prefix (RFC 7541 §5.1).
pub(crate) fn int7(out: &mut Vec<u8>, mut v: usize) {
    if v < 127 {
        out.push(v as u8);
        return;
    }
    out.push(127);
    v -= 127;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

/// HPACK literal field without indexing, new name, no Huffman.
pub(crate) fn field(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.push(0);
    int7(out, name.len());
    out.extend_from_slice(name.as_bytes());
    int7(out, value.len());
    out.extend_from_slice(value);
}

pub(crate) fn request_block(path: &str, extra: &[(&str, &[u8])]) -> Vec<u8> {
    let mut b = Vec::new();
    field(&mut b, ":method", b"GET");
    field(&mut b, ":scheme", b"http");
    field(&mut b, ":path", path.as_bytes());
    field(&mut b, ":authority", b"x");
    for (n, v) in extra {
        field(&mut b, n, v);
    }
    b
}

/// Connect, send the preface and an empty SETTINGS frame.
pub(crate) fn open(port: u16) -> TcpStream {
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.set_write_timeout(Some(Duration::from_secs(3))).unwrap();
    c.write_all(&hello()).unwrap();
    c
}

/// Ask for HTTP/2 by `Upgrade: h2c` with a GET of `path` (stream 1), and read the 101's head.
pub(crate) fn upgrade(c: &mut TcpStream, path: &str) {
    upgrade_with(c, path, "AAMAAABkAAQAAP__");
}

/// `upgrade`, with `settings` as the `HTTP2-Settings` value.
pub(crate) fn upgrade_with(c: &mut TcpStream, path: &str, settings: &str) {
    write!(
        c,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\n\
         Upgrade: h2c\r\nHTTP2-Settings: {settings}\r\n\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8];
    while !head.ends_with(b"\r\n\r\n") {
        c.read_exact(&mut byte).expect("the 101's head");
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 101"),
        "{:?}",
        String::from_utf8_lossy(&head)
    );
}

/// `HTTP2-Settings`' value for the settings `(id, value)`: base64url without padding.
pub(crate) fn http2_settings(settings: &[(u16, u32)]) -> String {
    use base64::Engine;
    let payload: Vec<u8> = settings
        .iter()
        .flat_map(|(id, v)| [&id.to_be_bytes()[..], &v.to_be_bytes()].concat())
        .collect();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(payload)
}

/// What a client sends first: the preface and an empty SETTINGS frame.
pub(crate) fn hello() -> Vec<u8> {
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend(frame(SETTINGS, 0, 0, &[]));
    hello
}

/// The next frame from the server: (type, flags, stream, payload); `None` at close or timeout.
pub(crate) fn next_frame<R: Read + ?Sized>(c: &mut R) -> Option<(u8, u8, u32, Vec<u8>)> {
    let mut h = [0u8; 9];
    c.read_exact(&mut h).ok()?;
    let len = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
    let mut p = vec![0u8; len];
    c.read_exact(&mut p).ok()?;
    let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
    Some((h[3], h[4], stream, p))
}

//! Header values shared by every protocol, appended into a reused buffer (no `format!` on
//! the hot path), and the whole HTTP/1.x response head.

use crate::h1::{ConnHeader, Framing};
use crate::{reason, Plan};

/// Measurements reported in `x-req` / `x-rsp`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timing {
    /// Request bytes received (head and body so far).
    pub req_bytes: u64,
    /// Milliseconds from the first request byte to the complete request (or to the response
    /// when the body is drained afterwards).
    pub req_ms: u64,
    /// Milliseconds from the complete request to the response head, delay included.
    pub real_ms: u64,
}

fn num(buf: &mut Vec<u8>, n: u64) {
    buf.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// `x-req` value: `size=<request bytes>, time=<ms> ms`.
pub fn x_req(buf: &mut Vec<u8>, t: &Timing) {
    buf.extend_from_slice(b"size=");
    num(buf, t.req_bytes);
    buf.extend_from_slice(b", time=");
    num(buf, t.req_ms);
    buf.extend_from_slice(b" ms");
}

/// `x-rsp` value, in haterm's field order with the commas fixed:
/// `id=dummy, code=200, cache=1[, chunked], size=100, time=0 ms (0 real)`.
pub fn x_rsp(buf: &mut Vec<u8>, plan: &Plan, t: &Timing) {
    buf.extend_from_slice(b"id=dummy, code=");
    num(buf, plan.status as u64);
    buf.extend_from_slice(if plan.cacheable {
        b", cache=1"
    } else {
        b", cache=0"
    });
    if plan.chunked {
        buf.extend_from_slice(b", chunked");
    }
    buf.extend_from_slice(b", size=");
    num(buf, plan.size);
    buf.extend_from_slice(b", time=");
    num(buf, plan.delay_ms);
    buf.extend_from_slice(b" ms (");
    num(buf, t.real_ms);
    buf.extend_from_slice(b" real)");
}

/// Append the complete HTTP/1.x head (status line to blank line) for `plan` as framed.
/// Header order is haterm's: content-length, cache-control, x-req, x-rsp, connection,
/// transfer-encoding.
/// `extra`: further header lines, each CRLF-terminated (usually empty).
pub fn h1_head(buf: &mut Vec<u8>, plan: &Plan, framing: &Framing, t: &Timing, extra: &[u8]) {
    buf.extend_from_slice(if framing.response_11 {
        b"HTTP/1.1 "
    } else {
        b"HTTP/1.0 "
    });
    num(buf, plan.status as u64);
    buf.push(b' ');
    buf.extend_from_slice(reason::phrase(plan.status).as_bytes());
    buf.extend_from_slice(b"\r\n");
    if let Some(len) = framing.content_length {
        buf.extend_from_slice(b"content-length: ");
        num(buf, len);
        buf.extend_from_slice(b"\r\n");
    }
    if !plan.cacheable {
        buf.extend_from_slice(b"cache-control: no-cache\r\n");
    }
    buf.extend_from_slice(b"x-req: ");
    x_req(buf, t);
    buf.extend_from_slice(b"\r\nx-rsp: ");
    x_rsp(buf, plan, t);
    buf.extend_from_slice(b"\r\n");
    match framing.conn_header {
        Some(ConnHeader::Close) => buf.extend_from_slice(b"connection: close\r\n"),
        Some(ConnHeader::KeepAlive) => buf.extend_from_slice(b"connection: keep-alive\r\n"),
        None => {}
    }
    if framing.chunked_te {
        buf.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    buf.extend_from_slice(extra);
    buf.extend_from_slice(b"\r\n");
}

/// Append one chunk-size line (`<HEX>\r\n`) for a chunk of `len` bytes.
pub fn chunk_size_line(buf: &mut Vec<u8>, len: usize) {
    let mut digits = [0u8; 16];
    let mut i = digits.len();
    let mut n = len;
    loop {
        i -= 1;
        digits[i] = b"0123456789ABCDEF"[n & 15];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    buf.extend_from_slice(&digits[i..]);
    buf.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::h1::{framing, H1Request};
    use crate::{Outcome, Request, Rng};

    fn head(target: &str, req: H1Request) -> String {
        let Outcome::Respond(plan) = Plan::from_request(
            &Request {
                target: target.as_bytes(),
                control: None,
                is_head: req.is_head,
            },
            &mut Rng::new(1),
        ) else {
            panic!()
        };
        let mut buf = Vec::new();
        h1_head(
            &mut buf,
            &plan,
            &framing(&req, &plan),
            &Timing::default(),
            b"",
        );
        String::from_utf8(buf).unwrap()
    }

    #[test]
    fn haterm_shaped_heads() {
        assert_eq!(
            head("/?s=100", H1Request::HTTP11),
            "HTTP/1.1 200 OK\r\ncontent-length: 100\r\nx-req: size=0, time=0 ms\r\n\
             x-rsp: id=dummy, code=200, cache=1, size=100, time=0 ms (0 real)\r\n\r\n"
        );
        assert_eq!(
            head("/?s=60&c=0&k=1", H1Request::HTTP11),
            "HTTP/1.1 200 OK\r\ncache-control: no-cache\r\nx-req: size=0, time=0 ms\r\n\
             x-rsp: id=dummy, code=200, cache=0, chunked, size=60, time=0 ms (0 real)\r\n\
             transfer-encoding: chunked\r\n\r\n"
        );
        assert_eq!(
            head("/?s=10&C=1", H1Request::HTTP11),
            "HTTP/1.1 200 OK\r\nx-req: size=0, time=0 ms\r\n\
             x-rsp: id=dummy, code=200, cache=1, size=10, time=0 ms (0 real)\r\nconnection: close\r\n\r\n"
        );
        assert!(head("/?r=404&s=5", H1Request::HTTP11).starts_with("HTTP/1.1 404 Not Found\r\n"));
        assert!(head("/?r=999", H1Request::HTTP11).starts_with("HTTP/1.1 999 Other\r\n"));
    }

    #[test]
    fn chunk_lines() {
        let mut b = Vec::new();
        chunk_size_line(&mut b, 60);
        chunk_size_line(&mut b, 0);
        chunk_size_line(&mut b, 65536);
        assert_eq!(b, b"3C\r\n0\r\n10000\r\n");
    }
}

//! HTTP/1.x response encoding (sans-I/O), beside the request parser (`head`) and the request body
//! decoder (`body`): every byte of a response that the HTTP/1 engine writes comes from here. Heads
//! (status line, the exchange's fields in its order, extra lines; the last one rendered reused
//! while heads repeat), the interim `100` and `101`, the body as static slices, and chunked
//! framing (size lines, the last chunk, `k=2`'s one-byte chunks). `conn` only moves these bytes
//! (buffer, flush, writev, splice).

use loadterm_exchange::{FieldName, FieldSink, HttpDate, ResponseHead};
use loadterm_plan::body::{self, BodyKind};
use loadterm_plan::reason;
use std::cell::RefCell;

/// The interim answer to `Expect: 100-continue`.
pub(super) const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";
/// The answer that switches the connection to HTTP/2 (`Upgrade: h2c`).
pub(super) const SWITCHING: &[u8] =
    b"HTTP/1.1 101 Switching Protocols\r\nconnection: Upgrade\r\nupgrade: h2c\r\n\r\n";
/// The last chunk of a chunked body (no extensions, no trailers).
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

thread_local! {
    static HEADS: RefCell<HeadCache> = RefCell::new(HeadCache::default());
}

/// Append `head`, dated now, with `extra` header lines (each CRLF-terminated, usually none).
pub fn head(out: &mut Vec<u8>, head: &ResponseHead, extra: &[u8]) {
    let date = crate::plumbing::thread_ctx::date();
    HEADS.with_borrow_mut(|heads| heads.write(head, &date, extra, out));
}

/// Append the whole head (status line to blank line): `date` (if the head has one) valued
/// `date`, then the fields, then `extra`.
fn write_head(out: &mut Vec<u8>, head: &ResponseHead, date: &HttpDate, extra: &[u8]) {
    // Room for a typical head, so the appends below do not grow the buffer one by one.
    out.reserve(256 + extra.len());
    out.extend_from_slice(if head.h1_11 {
        b"HTTP/1.1 "
    } else {
        b"HTTP/1.0 "
    });
    out.extend_from_slice(itoa::Buffer::new().format(head.status).as_bytes());
    out.push(b' ');
    out.extend_from_slice(reason::phrase(head.status).as_bytes());
    out.extend_from_slice(b"\r\n");
    head.each_field(&mut Lines(out), date);
    out.extend_from_slice(extra);
    out.extend_from_slice(b"\r\n");
}

/// Field lines written straight into the output.
struct Lines<'a>(&'a mut Vec<u8>);

impl FieldSink for Lines<'_> {
    #[inline]
    fn field(&mut self, name: FieldName, value: &[u8]) {
        self.rendered(name, |out| out.extend_from_slice(value))
    }
    #[inline]
    fn rendered(&mut self, name: FieldName, render: impl FnOnce(&mut Vec<u8>)) {
        self.0.extend_from_slice(name.line.as_bytes());
        render(self.0);
        self.0.extend_from_slice(b"\r\n");
    }
}

/// The last head rendered, copied while heads repeat. Benchmark traffic asks the same question
/// over and over, so consecutive heads are usually identical (same plan, timing, date second and
/// extra lines); copying the last rendering instead of writing it anew saves most of the head's
/// cost (measured in docs/PERFORMANCE.md). One per thread.
#[derive(Debug, Default)]
struct HeadCache {
    last: Option<(ResponseHead, HttpDate)>,
    /// The extra lines `rendered` was made with.
    extra: Vec<u8>,
    rendered: Vec<u8>,
}

impl HeadCache {
    /// Append `head` as [`write_head`] would.
    fn write(&mut self, head: &ResponseHead, date: &HttpDate, extra: &[u8], out: &mut Vec<u8>) {
        let key = (*head, *date);
        if self.last != Some(key) || self.extra != extra {
            self.rendered.clear();
            write_head(&mut self.rendered, head, date, extra);
            self.extra.clear();
            self.extra.extend_from_slice(extra);
            self.last = Some(key);
        }
        out.extend_from_slice(&self.rendered);
    }
}

/// `len` body bytes of `kind` from `offset`, as static slices of at most `body::WINDOW` bytes.
pub fn slices(kind: BodyKind, offset: u64, len: u64) -> impl Iterator<Item = &'static [u8]> {
    let end = offset + len;
    let mut at = offset;
    std::iter::from_fn(move || {
        (at < end).then(|| {
            let s = body::slice(kind, at, (end - at).min(body::WINDOW as u64) as usize);
            at += s.len() as u64;
            s
        })
    })
}

/// One piece of a body sent in pieces (`p`): its bytes, at most `body::WINDOW` of them.
pub(super) fn piece(kind: BodyKind, offset: u64, len: u64) -> &'static [u8] {
    body::slice(kind, offset, len as usize)
}

/// Append the line that starts a chunk of `len` data bytes: `<UPPERHEX>\r\n`.
pub fn chunk_start(out: &mut Vec<u8>, len: usize) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let digits = ((usize::BITS - len.leading_zeros()).div_ceil(4)).max(1);
    for k in (0..digits).rev() {
        out.push(HEX[(len >> (4 * k)) & 0xf]);
    }
    out.extend_from_slice(b"\r\n");
}

/// Append the CRLF that ends a chunk's data.
pub fn chunk_end(out: &mut Vec<u8>) {
    out.extend_from_slice(b"\r\n");
}

/// One chunk per byte (`k=2`, httpterm's chunking), repeated: a body of `n` such chunks is the
/// first `6 * n` bytes of as many copies as needed. The byte is always `1`: chunked bodies are
/// made of ones (`k` wins over `R`).
static BYTE_CHUNKS: [u8; 6 * 1024] = {
    let mut b = [0u8; 6 * 1024];
    let mut i = 0;
    while i < b.len() {
        b[i] = b"1\r\n1\r\n"[i % 6];
        i += 1;
    }
    b
};

/// `len` body bytes (all ones) as one-byte chunks, in static blocks; the last chunk is not
/// included.
pub(super) fn byte_chunks(len: u64) -> impl Iterator<Item = &'static [u8]> {
    let mut left = len * 6;
    std::iter::from_fn(move || {
        (left > 0).then(|| {
            let n = left.min(BYTE_CHUNKS.len() as u64) as usize;
            left -= n as u64;
            &BYTE_CHUNKS[..n]
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadterm_codec::chunked;
    use loadterm_exchange::{
        http_date, Action, Exchange, ExchangeEnd, RequestSummary, StepDriver, Version,
    };
    use loadterm_plan::{pages, Rng};
    use std::borrow::Cow;
    use std::time::Instant;

    fn request(target: &str, head_bytes: u64, date: bool) -> ResponseHead {
        let req = RequestSummary {
            version: Version::Http11,
            is_head: false,
            target: target.as_bytes(),
            control: None,
            expect_continue: false,
            conn_close: false,
            conn_keep_alive: false,
            has_body: false,
            head_bytes,
            date,
            is_get: true,
            if_match: None,
            if_none_match: None,
        };
        let now = Instant::now();
        let x = Exchange::new(&req, &mut Rng::new(1), now);
        let Action::Head(h) = StepDriver::new(x, now).poll() else {
            panic!("{target}: no head first")
        };
        h
    }

    fn rendered(head: &ResponseHead, date: &HttpDate, extra: &[u8]) -> String {
        let mut buf = Vec::new();
        write_head(&mut buf, head, date, extra);
        String::from_utf8(buf).unwrap()
    }

    #[test]
    fn error_pages_without_a_plan() {
        let page = pages::ErrorPage::HeadersTooLarge;
        let x = Exchange::error(page, Version::Http11, false, Instant::now());
        let mut d = StepDriver::new(x, Instant::now());
        let Action::Head(h) = d.poll() else { panic!() };
        assert_eq!(
            rendered(&h, &http_date(0), b""),
            format!("HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: {}\r\ncache-control: no-cache\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\n", page.body().len())
        );
        assert_eq!(d.poll(), Action::Text(Cow::Borrowed(page.body())));
        assert_eq!(d.poll(), Action::Done(ExchangeEnd::Close));
    }

    #[test]
    fn haterm_shaped_heads() {
        let head =
            |target: &str, extra: &[u8]| rendered(&request(target, 0, false), &http_date(0), extra);
        assert_eq!(
            head("/?s=100", b""),
            "HTTP/1.1 200 OK\r\ncontent-length: 100\r\nx-req: size=0, time=0 ms\r\n\
             x-rsp: id=dummy, code=200, cache=1, size=100, time=0 ms (0 real)\r\n\r\n"
        );
        assert_eq!(
            head("/?s=60&c=0&k=1", b"alt-svc: h3=\":1\"\r\n"),
            "HTTP/1.1 200 OK\r\ncache-control: no-cache\r\nx-req: size=0, time=0 ms\r\n\
             x-rsp: id=dummy, code=200, cache=0, chunked, size=60, time=0 ms (0 real)\r\n\
             transfer-encoding: chunked\r\nalt-svc: h3=\":1\"\r\n\r\n"
        );
        assert!(head("/?r=999", b"").starts_with("HTTP/1.1 999 Other\r\n"));
    }

    #[test]
    fn head_cache_copies_only_what_repeats() {
        let extra = b"alt-svc: h3=\":1\"\r\n";
        let mut heads = HeadCache::default();
        // Repeats, then a change in each part of the key: the plan, the timing, the date, the
        // extra lines.
        let seq = [
            (request("/?s=1k", 40, true), http_date(0), &extra[..]),
            (request("/?s=1k", 40, true), http_date(0), &extra[..]),
            (request("/?s=2k", 40, true), http_date(0), &extra[..]),
            (request("/?s=2k", 41, true), http_date(0), &extra[..]),
            (request("/?s=2k", 41, true), http_date(1), &extra[..]),
            (request("/?s=2k", 41, true), http_date(1), &b""[..]),
            (request("/?s=1k", 40, true), http_date(0), &extra[..]),
        ];
        let mut out = Vec::new();
        let mut want = Vec::new();
        for (h, date, extra) in &seq {
            heads.write(h, date, extra, &mut out);
            write_head(&mut want, h, date, extra);
            assert_eq!(
                String::from_utf8_lossy(&out),
                String::from_utf8_lossy(&want)
            );
        }
    }

    #[test]
    fn size_lines() {
        for (len, want) in [
            (0, "0\r\n"),
            (1, "1\r\n"),
            (15, "F\r\n"),
            (16, "10\r\n"),
            (0xabc, "ABC\r\n"),
            (usize::MAX, "FFFFFFFFFFFFFFFF\r\n"),
        ] {
            let mut out = Vec::new();
            chunk_start(&mut out, len);
            assert_eq!(out, want.as_bytes(), "{len}");
        }
    }

    /// Decode what the encoder wrote with the strict decoder the load client uses.
    fn decoded(body: &[u8]) -> u64 {
        let mut d = chunked::ChunkedDecoder::new();
        assert_eq!(d.feed(body), Ok(body.len()));
        assert!(d.is_done());
        d.data_bytes()
    }

    #[test]
    fn chunked_bodies_decode() {
        let mut body = Vec::new();
        for len in [1, 4095, 4096, 70000] {
            chunk_start(&mut body, len);
            body.resize(body.len() + len, b'x');
            chunk_end(&mut body);
        }
        body.extend_from_slice(LAST_CHUNK);
        assert_eq!(decoded(&body), 1 + 4095 + 4096 + 70000);
        // One-byte chunks across the block's end.
        for len in [1, 1023, 1024, 1025, 5000] {
            let mut body: Vec<u8> = byte_chunks(len).flatten().copied().collect();
            assert_eq!(body.len() as u64, 6 * len);
            body.extend_from_slice(LAST_CHUNK);
            assert_eq!(decoded(&body), len, "{len}");
        }
    }

    #[test]
    fn slices_cover_the_body_once() {
        let size = 3 * body::WINDOW as u64 + 17;
        for offset in [0, 5, body::WINDOW as u64 - 1] {
            let parts: Vec<&[u8]> = slices(BodyKind::Pattern, offset, size).collect();
            assert!(parts
                .iter()
                .all(|p| p.len() <= body::WINDOW && !p.is_empty()));
            let joined = parts.concat();
            assert_eq!(joined.len() as u64, size);
            let mut at = offset;
            for p in &parts {
                assert_eq!(*p, body::slice(BodyKind::Pattern, at, p.len()));
                at += p.len() as u64;
            }
        }
        assert_eq!(slices(BodyKind::Ones, 7, 0).count(), 0);
    }
}

//! Request-head parsing (sans-I/O): bytes in, a `Head` or a verdict out.

use loadterm_plan::pages::ErrorPage;

/// Largest request head accepted (431 beyond).
pub const MAX_HEAD: usize = 16 * 1024;
/// Longest request-target accepted (414 beyond).
pub const MAX_URI: usize = 8 * 1024;
/// Most header fields accepted (431 beyond); haterm's limit is 101.
pub const MAX_HEADERS: usize = 100;
/// Largest head honoured for `Upgrade: h2c`: its fields, HPACK-coded as literals, must fit the
/// single 16 KiB HEADERS frame of stream 1 (pseudo-fields and integer prefixes add well under
/// 256 bytes to the head's own size).
const MAX_UPGRADE_HEAD: usize = 16 * 1024 - 256;

/// How the request body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    None,
    Length(u64),
    Chunked,
}

/// What the engine needs from a request head; target and control header are copied out so that
/// the read buffer can be reused.
#[derive(Debug, Default)]
pub struct Head {
    pub len: usize,
    pub is_11: bool,
    pub is_head: bool,
    pub conn_close: bool,
    pub conn_keep_alive: bool,
    /// `Expect: 100-continue`.
    pub expect: bool,
    /// `Upgrade: h2c` to honour (RFC 7540 §3.2): with `Connection: Upgrade` and
    /// `HTTP2-Settings`, on a GET or HEAD (methods that carry no body), head small enough.
    pub upgrade_h2c: bool,
    pub target: Vec<u8>,
    pub control: Option<Vec<u8>>,
    pub body: Option<BodyFraming>,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// Need more bytes.
    Partial,
    Complete,
    Error(ErrorPage),
}

/// Parse the head at the start of `buf` into `head` (reused between requests).
pub fn parse(buf: &[u8], head: &mut Head) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            return if buf.len() >= MAX_HEAD {
                Parsed::Error(
                    if req.path.is_none() && !buf.contains(&b'\n') && buf.len() > MAX_URI {
                        ErrorPage::UriTooLong
                    } else {
                        ErrorPage::HeadersTooLarge
                    },
                )
            } else if req.path.is_none()
                && buf.len() > MAX_URI + 32
                && !buf[..MAX_URI].contains(&b'\n')
            {
                Parsed::Error(ErrorPage::UriTooLong)
            } else {
                Parsed::Partial
            };
        }
        Err(httparse::Error::TooManyHeaders) => return Parsed::Error(ErrorPage::HeadersTooLarge),
        Err(_) => return Parsed::Error(ErrorPage::BadRequest),
    };
    if len > MAX_HEAD {
        return Parsed::Error(ErrorPage::HeadersTooLarge);
    }
    let (Some(method), Some(path), Some(version)) = (req.method, req.path, req.version) else {
        return Parsed::Error(ErrorPage::BadRequest);
    };
    if path.len() > MAX_URI {
        return Parsed::Error(ErrorPage::UriTooLong);
    }
    head.len = len;
    head.is_11 = version >= 1;
    head.is_head = method == "HEAD";
    head.target.clear();
    head.target.extend_from_slice(path.as_bytes());
    head.conn_close = false;
    head.conn_keep_alive = false;
    head.expect = false;
    head.upgrade_h2c = false;
    head.control = None;
    let mut length: Option<u64> = None;
    let mut chunked = false;
    let mut other_te = false;
    let mut upgrade = false;
    let mut settings = false;
    for h in req.headers.iter() {
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            let Some(v) = parse_length(h.value) else {
                return Parsed::Error(ErrorPage::BadRequest);
            };
            if length.is_some_and(|l| l != v) {
                return Parsed::Error(ErrorPage::BadRequest);
            }
            length = Some(v);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            for coding in tokens(h.value) {
                // `chunked` must be the last coding; anything after it is an error below.
                if chunked {
                    other_te = true;
                }
                if coding.eq_ignore_ascii_case(b"chunked") {
                    chunked = true;
                } else {
                    other_te = true;
                }
            }
        } else if name.eq_ignore_ascii_case(b"connection") {
            for t in tokens(h.value) {
                head.conn_close |= t.eq_ignore_ascii_case(b"close");
                head.conn_keep_alive |= t.eq_ignore_ascii_case(b"keep-alive");
                upgrade |= t.eq_ignore_ascii_case(b"upgrade");
            }
        } else if name.eq_ignore_ascii_case(b"expect") {
            head.expect = h.value.trim_ascii().eq_ignore_ascii_case(b"100-continue");
        } else if name.eq_ignore_ascii_case(b"upgrade") {
            head.upgrade_h2c = tokens(h.value).any(|t| t.eq_ignore_ascii_case(b"h2c"));
        } else if name.eq_ignore_ascii_case(b"http2-settings") {
            settings = true;
        } else if name.eq_ignore_ascii_case(loadterm_plan::CONTROL_HEADER.as_bytes()) {
            head.control = Some(h.value.to_vec());
        }
    }
    head.upgrade_h2c &=
        upgrade && settings && matches!(method, "GET" | "HEAD") && len <= MAX_UPGRADE_HEAD;
    // RFC 9112 §6.1: a transfer coding other than a final chunked cannot be framed; a request
    // with both Transfer-Encoding and Content-Length is a smuggling vector: refuse both.
    if other_te || (chunked && length.is_some()) {
        return Parsed::Error(ErrorPage::BadRequest);
    }
    head.body = Some(if chunked {
        BodyFraming::Chunked
    } else {
        match length {
            Some(0) | None => BodyFraming::None,
            Some(n) => BodyFraming::Length(n),
        }
    });
    Parsed::Complete
}

fn parse_length(v: &[u8]) -> Option<u64> {
    let v = v.trim_ascii();
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

fn tokens(v: &[u8]) -> impl Iterator<Item = &[u8]> {
    v.split(|&b| b == b',')
        .map(|t| t.trim_ascii())
        .filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> (Parsed, Head) {
        let mut h = Head::default();
        (parse(s.as_bytes(), &mut h), h)
    }

    #[test]
    fn basics() {
        let (r, h) = p("GET /?s=1 HTTP/1.1\r\nHost: x\r\nConnection: Keep-Alive, foo\r\nx-loadterm: r=404\r\n\r\nrest");
        assert_eq!(r, Parsed::Complete);
        assert!(h.is_11 && h.conn_keep_alive && !h.conn_close);
        assert_eq!(h.target, b"/?s=1");
        assert_eq!(h.control.as_deref(), Some(&b"r=404"[..]));
        assert_eq!(h.len, "GET /?s=1 HTTP/1.1\r\nHost: x\r\nConnection: Keep-Alive, foo\r\nx-loadterm: r=404\r\n\r\n".len());
        assert_eq!(h.body, Some(BodyFraming::None));
    }

    #[test]
    fn framing() {
        assert_eq!(
            p("POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\n").1.body,
            Some(BodyFraming::Length(10))
        );
        assert_eq!(
            p("POST / HTTP/1.1\r\nContent-Length: 10\r\nContent-Length: 10\r\n\r\n")
                .1
                .body,
            Some(BodyFraming::Length(10))
        );
        assert_eq!(
            p("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
                .1
                .body,
            Some(BodyFraming::Chunked)
        );
        for bad in [
            "POST / HTTP/1.1\r\nContent-Length: 10\r\nContent-Length: 11\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            "GET / HTTP/1.1\r\nbad header\r\n\r\n",
            "\x01\x02 garbage\r\n\r\n",
        ] {
            assert_eq!(p(bad).0, Parsed::Error(ErrorPage::BadRequest), "{bad:?}");
        }
    }

    #[test]
    fn limits() {
        let long_uri = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(MAX_URI + 1));
        assert_eq!(p(&long_uri).0, Parsed::Error(ErrorPage::UriTooLong));
        let unfinished_uri = format!("GET /{}", "a".repeat(MAX_URI + 100));
        assert_eq!(p(&unfinished_uri).0, Parsed::Error(ErrorPage::UriTooLong));
        let big = format!("GET / HTTP/1.1\r\nx: {}\r\n", "a".repeat(MAX_HEAD));
        assert_eq!(p(&big).0, Parsed::Error(ErrorPage::HeadersTooLarge));
        let many: String = (0..MAX_HEADERS + 1)
            .map(|i| format!("h{i}: v\r\n"))
            .collect();
        assert_eq!(
            p(&format!("GET / HTTP/1.1\r\n{many}\r\n")).0,
            Parsed::Error(ErrorPage::HeadersTooLarge)
        );
        assert_eq!(p("GET / HTTP/1.1\r\nHost: x\r\n").0, Parsed::Partial);
    }

    #[test]
    fn versions_and_upgrade() {
        assert!(!p("GET / HTTP/1.0\r\n\r\n").1.is_11);
        assert!(p("HEAD / HTTP/1.1\r\n\r\n").1.is_head);
        let up = "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n";
        assert!(p(&format!("GET / HTTP/1.1\r\n{up}\r\n")).1.upgrade_h2c);
        assert!(p(&format!("HEAD / HTTP/1.1\r\n{up}\r\n")).1.upgrade_h2c);
        // A body may follow a POST: served as HTTP/1.1.
        assert!(!p(&format!("POST / HTTP/1.1\r\n{up}\r\n")).1.upgrade_h2c);
        assert!(
            !p("GET / HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n")
                .1
                .upgrade_h2c
        );
        assert!(
            !p("GET / HTTP/1.1\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n")
                .1
                .upgrade_h2c
        );
        let big = format!(
            "GET / HTTP/1.1\r\n{up}x: {}\r\n\r\n",
            "a".repeat(MAX_UPGRADE_HEAD)
        );
        assert!(!p(&big).1.upgrade_h2c);
    }
}

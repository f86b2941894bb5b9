//! Request-head parsing (sans-I/O): bytes in, a `RequestHead` or a verdict out.

use loadterm_exchange::HeadBuilder;
use loadterm_plan::pages::ErrorPage;
use std::ops::Range;

/// Largest request head accepted (431 beyond).
pub const MAX_HEAD: usize = 16 * 1024;
/// Longest request-target accepted (414 beyond).
pub const MAX_URI: usize = 8 * 1024;
/// Largest header field line (name and value) accepted (431 beyond).
pub const MAX_FIELD: usize = 8 * 1024;
/// Longest method accepted (501 beyond): registered methods are at most 17 bytes long.
pub const MAX_METHOD: usize = 32;
/// Most header fields accepted (431 beyond); haterm's limit is 101.
pub const MAX_HEADERS: usize = 100;

/// How the request body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    None,
    Length(u64),
    Chunked,
}

/// What the engine needs from a request head: its framing here, what the exchange reads of it
/// in `request` (copied out, so that the read buffer can be reused).
#[derive(Debug, Default)]
pub struct RequestHead {
    pub len: usize,
    pub is_11: bool,
    /// The method, target and fields, as every engine builds them.
    pub request: HeadBuilder,
    /// `Upgrade: h2c` to honour (RFC 7540 §3.2): with `Connection: Upgrade, HTTP2-Settings`
    /// and exactly one `HTTP2-Settings` field (§3.2.1), on a GET or HEAD (methods that carry
    /// no body).
    pub upgrade_h2c: bool,
    /// Where the (last) `HTTP2-Settings` value lies in the parsed buffer.
    pub http2_settings: Option<Range<usize>>,
    /// Where the method and the (last) Host value lie in the parsed buffer: offsets, not copies,
    /// so that the differential test can compare them at no cost to the server.
    pub method: Range<usize>,
    pub host: Option<Range<usize>>,
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
///
/// Strict (RFC 9112) unless `lenient`, which skips the rules haterm does not enforce (Host,
/// request-target form and bytes, bare LF line endings, Transfer-Encoding on HTTP/1.0) but keeps
/// the limits and every framing rule that decides where the request ends.
pub fn parse(buf: &[u8], head: &mut RequestHead, lenient: bool) -> Parsed {
    // Left uninitialised: filling 100 empty headers (3.2 KB) cost more than parsing a small head.
    let mut headers = [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let len = match req.parse_with_uninit_headers(buf, &mut headers) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return partial(buf, &req),
        Err(e) => return Parsed::Error(refusal(buf, e)),
    };
    let (Some(method), Some(path), Some(version)) = (req.method, req.path, req.version) else {
        return Parsed::Error(ErrorPage::InvalidRequestLine);
    };
    if method.len() > MAX_METHOD {
        return Parsed::Error(ErrorPage::MethodTooLong);
    }
    if len > MAX_HEAD {
        return Parsed::Error(ErrorPage::HeadersTooLarge);
    }
    if path.len() > MAX_URI {
        return Parsed::Error(ErrorPage::UriTooLong);
    }
    // After a 2xx, CONNECT's connection is a tunnel: answering and then reading HTTP again
    // would desynchronise us from the client and any proxy, so it is refused in both modes.
    if method == "CONNECT" {
        return Parsed::Error(ErrorPage::Connect);
    }
    // Lenient mode takes any target httparse took, and skips the Host rules that read its form.
    let form = if lenient {
        None
    } else {
        match target_form(method, path.as_bytes()) {
            Some(f) => Some(f),
            None => return Parsed::Error(ErrorPage::InvalidTarget),
        }
    };
    // httparse takes a bare LF for a line end (RFC 9112 §2.2 allows, not requires, that); a
    // proxy that does not would read the next line as part of this one. Each line end is found
    // from the slices httparse returned, so the head is not scanned again.
    if !lenient {
        let after_version = offset(buf, path.as_bytes()) + path.len() + " HTTP/1.x".len();
        if buf[after_version] != b'\r' || buf[len - 2] != b'\r' {
            return Parsed::Error(ErrorPage::InvalidLineEnding);
        }
    }
    head.len = len;
    head.is_11 = version >= 1;
    head.request.begin();
    head.request.method(method.as_bytes());
    head.request.target(path.as_bytes());
    let m = offset(buf, method.as_bytes());
    head.method = m..m + method.len();
    head.host = None;
    head.upgrade_h2c = false;
    head.http2_settings = None;
    let seen = match read_fields(buf, req.headers, head, lenient) {
        Ok(seen) => seen,
        Err(page) => return Parsed::Error(page),
    };
    head.upgrade_h2c &= seen.upgrade
        && seen.settings_option
        && seen.settings == 1
        && matches!(method, "GET" | "HEAD");
    match body_framing(buf, head, form, &seen, lenient) {
        Ok(framing) => {
            head.body = Some(framing);
            Parsed::Complete
        }
        Err(page) => Parsed::Error(page),
    }
}

/// What the field lines said that is judged once all are read: the body's framing and an h2c
/// upgrade's fields.
#[derive(Default)]
struct SeenFields {
    length: Option<u64>,
    te: bool,
    chunked: bool,
    other_te: bool,
    /// `Connection: Upgrade`, `Connection: HTTP2-Settings`, and `HTTP2-Settings` fields.
    upgrade: bool,
    settings_option: bool,
    settings: usize,
}

/// Reads the field lines into `head`, refusing what one line alone shows wrong.
fn read_fields(
    buf: &[u8],
    headers: &[httparse::Header<'_>],
    head: &mut RequestHead,
    lenient: bool,
) -> Result<SeenFields, ErrorPage> {
    let mut seen = SeenFields::default();
    for h in headers {
        let name = h.name.as_bytes();
        if name.len() + h.value.len() > MAX_FIELD {
            return Err(ErrorPage::FieldTooLarge);
        }
        if !lenient {
            let mut end = offset(buf, h.value) + h.value.len();
            while matches!(buf[end], b' ' | b'\t') {
                end += 1;
            }
            if buf[end] != b'\r' {
                return Err(ErrorPage::InvalidLineEnding);
            }
        }
        if name.eq_ignore_ascii_case(b"host") {
            if head.host.is_some() && !lenient {
                return Err(ErrorPage::DuplicateHost);
            }
            let at = offset(buf, h.value);
            head.host = Some(at..at + h.value.len());
        } else if name.eq_ignore_ascii_case(b"content-length") {
            // RFC 9110 §8.6 lets a recipient merge identical repeats; refusing every repeat
            // leaves nothing for a proxy in front to have merged differently.
            if seen.length.is_some() {
                return Err(ErrorPage::InvalidContentLength);
            }
            let Some(v) = parse_length(h.value) else {
                return Err(ErrorPage::InvalidContentLength);
            };
            seen.length = Some(v);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            seen.te = true;
            let mut any = false;
            for coding in tokens(h.value) {
                any = true;
                // `chunked` must be the last coding, and applied once.
                seen.other_te |= seen.chunked || !coding.eq_ignore_ascii_case(b"chunked");
                seen.chunked = true;
            }
            // An empty value is no coding at all: some proxies frame by Content-Length then.
            seen.other_te |= !any;
        } else if name.eq_ignore_ascii_case(b"connection") {
            // Its `close` and `keep-alive` are the exchange's (`request`); an upgrade's options
            // are read here.
            for t in tokens(h.value) {
                seen.upgrade |= t.eq_ignore_ascii_case(b"upgrade");
                seen.settings_option |= t.eq_ignore_ascii_case(b"http2-settings");
            }
            head.request.field(name, h.value);
        } else if name.eq_ignore_ascii_case(b"upgrade") {
            head.upgrade_h2c = tokens(h.value).any(|t| t.eq_ignore_ascii_case(b"h2c"));
        } else if name.eq_ignore_ascii_case(b"http2-settings") {
            seen.settings += 1;
            let at = offset(buf, h.value);
            head.http2_settings = Some(at..at + h.value.len());
        } else {
            head.request.field(name, h.value);
        }
    }
    Ok(seen)
}

/// The rules that need every field line read: Host (strict mode), then how the body is framed.
fn body_framing(
    buf: &[u8],
    head: &RequestHead,
    form: Option<Form>,
    seen: &SeenFields,
    lenient: bool,
) -> Result<BodyFraming, ErrorPage> {
    if !lenient {
        // RFC 9112 §3.2: exactly one Host on HTTP/1.1, valid, and empty only when the target
        // carries the authority itself.
        match &head.host {
            None if head.is_11 => return Err(ErrorPage::MissingHost),
            Some(r) if r.is_empty() && form != Some(Form::Absolute) && head.is_11 => {
                return Err(ErrorPage::InvalidHost)
            }
            Some(r) if !r.is_empty() && !valid_authority(&buf[r.clone()]) => {
                return Err(ErrorPage::InvalidHost)
            }
            _ => {}
        }
        // RFC 9112 §6.1: an HTTP/1.0 recipient cannot have meant chunked framing.
        if seen.te && !head.is_11 {
            return Err(ErrorPage::TransferEncodingOnHttp10);
        }
    }
    // RFC 9112 §6.1: a transfer coding other than a final chunked cannot be framed; a request
    // with both Transfer-Encoding and Content-Length is a smuggling vector: refuse both.
    if seen.other_te {
        return Err(ErrorPage::InvalidTransferEncoding);
    }
    if seen.chunked && seen.length.is_some() {
        return Err(ErrorPage::TransferEncodingWithLength);
    }
    Ok(if seen.chunked {
        BodyFraming::Chunked
    } else {
        match seen.length {
            Some(0) | None => BodyFraming::None,
            Some(n) => BodyFraming::Length(n),
        }
    })
}

/// An incomplete head: wait for more, unless a limit is already exceeded.
fn partial(buf: &[u8], req: &httparse::Request) -> Parsed {
    if req.method.is_none() {
        // Leading empty lines are skipped (RFC 9112 §2.2); what follows is the method so far.
        let start = buf
            .iter()
            .position(|&b| b != b'\r' && b != b'\n')
            .unwrap_or(buf.len());
        if buf.len() - start > MAX_METHOD {
            return Parsed::Error(ErrorPage::MethodTooLong);
        }
    }
    if buf.len() >= MAX_HEAD {
        Parsed::Error(
            if req.path.is_none() && !buf.contains(&b'\n') && buf.len() > MAX_URI {
                ErrorPage::UriTooLong
            } else {
                ErrorPage::HeadersTooLarge
            },
        )
    } else if req.path.is_none() && buf.len() > MAX_URI + 32 && !buf[..MAX_URI].contains(&b'\n') {
        Parsed::Error(ErrorPage::UriTooLong)
    } else {
        Parsed::Partial
    }
}

/// The page for what httparse refused.
fn refusal(buf: &[u8], e: httparse::Error) -> ErrorPage {
    match e {
        httparse::Error::TooManyHeaders => ErrorPage::HeadersTooLarge,
        httparse::Error::HeaderName => ErrorPage::InvalidFieldName,
        // A CR not followed by LF, in a value or ending one.
        httparse::Error::HeaderValue if cr_alone(buf) => ErrorPage::InvalidLineEnding,
        httparse::Error::HeaderValue => ErrorPage::InvalidFieldValue,
        httparse::Error::NewLine => ErrorPage::InvalidLineEnding,
        // httparse says Token for a bad method and for a bad target alike.
        httparse::Error::Token => {
            let method = first_word(buf);
            // Only the token characters the word starts with can be a method: binary garbage
            // is not a request line (400), whatever its length. A token longer than any method
            // is refused as `partial` refuses it, however the bytes were split into reads.
            let token = method
                .iter()
                .position(|&b| CLASS[b as usize] & TCHAR == 0)
                .unwrap_or(method.len());
            if token > MAX_METHOD {
                ErrorPage::MethodTooLong
            } else if token == 0 || token < method.len() {
                ErrorPage::InvalidMethod
            } else if buf[offset(buf, method) + method.len()..].starts_with(b"  ") {
                // An empty target: two spaces after the method.
                ErrorPage::InvalidRequestLine
            } else {
                ErrorPage::InvalidTarget
            }
        }
        httparse::Error::Version if well_formed_version(buf) => ErrorPage::VersionNotSupported,
        _ => ErrorPage::InvalidRequestLine,
    }
}

fn first_word(buf: &[u8]) -> &[u8] {
    let start = buf
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(buf.len());
    let rest = &buf[start..];
    &rest[..rest.iter().position(|&b| b == b' ').unwrap_or(rest.len())]
}

fn cr_alone(buf: &[u8]) -> bool {
    buf.windows(2).any(|w| w[0] == b'\r' && w[1] != b'\n')
}

/// The request line's third word is `HTTP/` DIGIT `.` DIGIT (a version, just not ours).
fn well_formed_version(buf: &[u8]) -> bool {
    let line = buf
        .split(|&b| b == b'\n')
        .find(|l| !l.is_empty() && l != b"\r");
    let Some(v) = line.and_then(|l| l.split(|&b| b == b' ').nth(2)) else {
        return false;
    };
    let v = v.strip_suffix(b"\r").unwrap_or(v);
    v.len() == 8
        && v.starts_with(b"HTTP/")
        && v[5].is_ascii_digit()
        && v[6] == b'.'
        && v[7].is_ascii_digit()
}

/// Offset of `part`, a slice of `buf`, in `buf`.
fn offset(buf: &[u8], part: &[u8]) -> usize {
    part.as_ptr() as usize - buf.as_ptr() as usize
}

/// RFC 9112 §3.2: which form the request-target has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    Origin,
    Absolute,
    Asterisk,
}

// Byte classes of RFC 3986, by table so that each byte costs one lookup.
const UNRESERVED_SUB: u8 = 1; // unreserved / sub-delims
const PATH_EXTRA: u8 = 2; // ":" "@" "/" "?" (with the above: what a path and query hold)
const PCT: u8 = 4; // "%", followed by two hex digits
const SCHEME: u8 = 8; // ALPHA / DIGIT / "+" / "-" / "."
const IP_LITERAL: u8 = 16; // inside "[...]": HEXDIG ":" "." and IPvFuture's unreserved/sub-delims
const TCHAR: u8 = 32; // RFC 9110 §5.6.2 token characters

static CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        let mut c = 0;
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            c |= UNRESERVED_SUB | IP_LITERAL;
        }
        if matches!(
            b,
            b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'='
        ) {
            c |= UNRESERVED_SUB | IP_LITERAL;
        }
        if matches!(b, b':' | b'@' | b'/' | b'?') {
            c |= PATH_EXTRA;
        }
        if b == b':' {
            c |= IP_LITERAL;
        }
        if b == b'%' {
            c |= PCT;
        }
        if b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.') {
            c |= SCHEME;
        }
        if loadterm_codec::syntax::is_tchar(b) {
            c |= TCHAR;
        }
        t[i] = c;
        i += 1;
    }
    t
};

/// Every byte of `s` is in `class` or a valid percent-escape.
fn all_in(s: &[u8], class: u8) -> bool {
    // Most targets and hosts have no escape: one lookup per byte, no branch on `%`.
    if s.iter().all(|&b| CLASS[b as usize] & class != 0) {
        return true;
    }
    let mut i = 0;
    while i < s.len() {
        let c = CLASS[s[i] as usize];
        if c & PCT != 0 {
            if !(i + 2 < s.len() && s[i + 1].is_ascii_hexdigit() && s[i + 2].is_ascii_hexdigit()) {
                return false;
            }
            i += 3;
        } else if c & class != 0 {
            i += 1;
        } else {
            return false;
        }
    }
    true
}

/// The form of `target` if it is valid for `method` (CONNECT is refused before).
fn target_form(method: &str, target: &[u8]) -> Option<Form> {
    match target.first()? {
        b'/' => all_in(target, UNRESERVED_SUB | PATH_EXTRA).then_some(Form::Origin),
        b'*' if target.len() == 1 && method == "OPTIONS" => Some(Form::Asterisk),
        b if b.is_ascii_alphabetic() => {
            // absolute-form: scheme "://" authority path-abempty [ "?" query ].
            let colon = target.iter().position(|&b| b == b':')?;
            let (scheme, rest) = (&target[..colon], target[colon + 1..].strip_prefix(b"//")?);
            let end = rest
                .iter()
                .position(|&b| b == b'/' || b == b'?')
                .unwrap_or(rest.len());
            (scheme.iter().all(|&b| CLASS[b as usize] & SCHEME != 0)
                && end > 0
                && valid_authority(&rest[..end])
                && all_in(&rest[end..], UNRESERVED_SUB | PATH_EXTRA))
            .then_some(Form::Absolute)
        }
        _ => None,
    }
}

/// `uri-host [":" port]` (RFC 9112 §3.2), the host not empty; no userinfo.
fn valid_authority(v: &[u8]) -> bool {
    let (host_ok, rest) = if let Some(inner) = v.strip_prefix(b"[") {
        let Some(close) = inner.iter().position(|&b| b == b']') else {
            return false;
        };
        let ip = &inner[..close];
        (
            !ip.is_empty() && ip.iter().all(|&b| CLASS[b as usize] & IP_LITERAL != 0),
            &inner[close + 1..],
        )
    } else {
        // One pass over the usual reg-name or IPv4 address; a percent-escape takes the slow path.
        let end = v
            .iter()
            .position(|&b| CLASS[b as usize] & UNRESERVED_SUB == 0)
            .unwrap_or(v.len());
        let colon = if v.get(end) == Some(&b'%') {
            v.iter().position(|&b| b == b':').unwrap_or(v.len())
        } else {
            end
        };
        (
            colon > 0 && (colon == end || all_in(&v[..colon], UNRESERVED_SUB)),
            &v[colon..],
        )
    };
    host_ok
        && match rest.split_first() {
            None => true,
            Some((b':', port)) => port.iter().all(u8::is_ascii_digit),
            Some(_) => false,
        }
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

    fn p(s: &str) -> (Parsed, RequestHead) {
        let mut h = RequestHead::default();
        (parse(s.as_bytes(), &mut h, false), h)
    }

    fn summary(h: &RequestHead) -> loadterm_exchange::RequestSummary<'_> {
        h.request
            .summary(loadterm_exchange::Version::Http11, false, 0, false)
    }

    fn lenient(s: &str) -> Parsed {
        parse(s.as_bytes(), &mut RequestHead::default(), true)
    }

    #[test]
    fn basics() {
        let req = "GET /?s=1 HTTP/1.1\r\nHost: x\r\nConnection: Keep-Alive, foo\r\nx-loadterm: r=404\r\n\r\n";
        let (r, h) = p(&format!("{req}rest"));
        assert_eq!(r, Parsed::Complete);
        let s = summary(&h);
        assert!(h.is_11 && s.conn_keep_alive && !s.conn_close);
        assert_eq!(s.target, b"/?s=1");
        assert_eq!(s.control, Some(&b"r=404"[..]));
        assert_eq!(h.len, req.len());
        assert_eq!(h.body, Some(BodyFraming::None));
        assert_eq!((h.method.clone(), h.host.clone()), (0..3, Some(26..27)));
        assert_eq!(
            (summary(&h).if_match, summary(&h).if_none_match),
            (None, None)
        );
    }

    #[test]
    fn conditional_fields_are_joined() {
        let req = "GET / HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"a\"\r\nif-match: *\r\n\
                   If-None-Match: W/\"b\"\r\n\r\n";
        let (r, h) = p(req);
        assert_eq!(r, Parsed::Complete);
        let s = summary(&h);
        assert_eq!(s.if_none_match, Some(&b"\"a\", W/\"b\""[..]));
        assert_eq!(s.if_match, Some(&b"*"[..]));
    }

    #[test]
    fn framing() {
        let post = "POST / HTTP/1.1\r\nHost: x\r\n";
        assert_eq!(
            p(&format!("{post}Content-Length: 10\r\n\r\n")).1.body,
            Some(BodyFraming::Length(10))
        );
        assert_eq!(
            p(&format!("{post}Transfer-Encoding: chunked\r\n\r\n"))
                .1
                .body,
            Some(BodyFraming::Chunked)
        );
        assert_eq!(
            p(&format!("{post}Transfer-Encoding: ,\tchunked ,\r\n\r\n"))
                .1
                .body,
            Some(BodyFraming::Chunked)
        );
        use ErrorPage::*;
        for (bad, page) in [
            // Identical repeats were merged before; now every repeat is refused.
            (
                "Content-Length: 10\r\nContent-Length: 10",
                InvalidContentLength,
            ),
            (
                "Content-Length: 10\r\nContent-Length: 11",
                InvalidContentLength,
            ),
            ("Content-Length: -1", InvalidContentLength),
            ("Content-Length: 1x", InvalidContentLength),
            ("Content-Length: 1, 1", InvalidContentLength),
            ("Content-Length: ", InvalidContentLength),
            ("Transfer-Encoding: gzip", InvalidTransferEncoding),
            ("Transfer-Encoding: chunked, gzip", InvalidTransferEncoding),
            (
                "Transfer-Encoding: chunked, chunked",
                InvalidTransferEncoding,
            ),
            (
                "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked",
                InvalidTransferEncoding,
            ),
            ("Transfer-Encoding: xchunked", InvalidTransferEncoding),
            ("Transfer-Encoding: \"chunked\"", InvalidTransferEncoding),
            (
                "Transfer-Encoding:\r\nContent-Length: 3",
                InvalidTransferEncoding,
            ),
            (
                "Transfer-Encoding: chunked\r\nContent-Length: 3",
                TransferEncodingWithLength,
            ),
            ("Transfer-Encoding : chunked", InvalidFieldName),
            ("X: a\r\n folded", InvalidFieldName),
            ("bad header", InvalidFieldName),
            ("X: a\x00b", InvalidFieldValue),
            ("X: a\x7fb", InvalidFieldValue),
            ("X: a\rB: c", InvalidLineEnding),
            ("X: a\nB: c", InvalidLineEnding),
        ] {
            for mode in [false, true] {
                let req = format!("{post}{bad}\r\n\r\n");
                let got = parse(req.as_bytes(), &mut RequestHead::default(), mode);
                // Bare LF is a MAY of RFC 9112 §2.2 that lenient mode takes.
                let want = if mode && bad.contains("a\nB") {
                    Parsed::Complete
                } else {
                    Parsed::Error(page)
                };
                assert_eq!(got, want, "{bad:?} lenient={mode}");
            }
        }
        assert_eq!(
            p("\x01\x02 garbage\r\n\r\n").0,
            Parsed::Error(InvalidMethod)
        );
    }

    #[test]
    fn binary_garbage_is_not_a_request_line() {
        // Longer than any method and no space in it: still 400, not the long method's 501.
        let garbage: Vec<u8> = (0..=255u8).filter(|&b| b != b' ').rev().collect();
        let got = parse(&garbage, &mut RequestHead::default(), false);
        assert_eq!(got, Parsed::Error(ErrorPage::InvalidMethod));
        let text = [&b"GET"[..], &[0xff; 64], b"\r\n\r\n"].concat();
        let got = parse(&text, &mut RequestHead::default(), true);
        assert_eq!(got, Parsed::Error(ErrorPage::InvalidMethod));
        // A token longer than any method, then a byte that ends it badly: 501 as when the
        // token arrives alone.
        let long = [&[b'A'; MAX_METHOD + 1][..], b"\x00 / HTTP/1.1\r\n\r\n"].concat();
        let got = parse(&long, &mut RequestHead::default(), false);
        assert_eq!(got, Parsed::Error(ErrorPage::MethodTooLong));
    }

    #[test]
    fn request_line_and_host() {
        use ErrorPage::*;
        for (req, want) in [
            ("GET / HTTP/1.1\r\nHost: a.example:8080\r\n", None),
            ("GET / HTTP/1.1\r\nHost: [::1]:80\r\n", None),
            ("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n", None),
            ("GET / HTTP/1.1\r\nHost: x%41\r\n", None),
            ("GET / HTTP/1.0\r\n", None),
            ("OPTIONS * HTTP/1.1\r\nHost: x\r\n", None),
            ("GET http://a.example/p?q HTTP/1.1\r\nHost: b\r\n", None),
            ("GET http://a.example HTTP/1.1\r\nHost:\r\n", None),
            ("GET /a/b;c=d/%7e?x=/?@:&y HTTP/1.1\r\nHost: x\r\n", None),
            ("GET / HTTP/1.1\r\n", Some(MissingHost)),
            (
                "GET / HTTP/1.1\r\nHost: x\r\nHost: x\r\n",
                Some(DuplicateHost),
            ),
            (
                "GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n",
                Some(DuplicateHost),
            ),
            ("GET / HTTP/1.1\r\nHost:\r\n", Some(InvalidHost)),
            ("GET / HTTP/1.1\r\nHost: a, b\r\n", Some(InvalidHost)),
            ("GET / HTTP/1.1\r\nHost: user@host\r\n", Some(InvalidHost)),
            ("GET / HTTP/1.1\r\nHost: host/path\r\n", Some(InvalidHost)),
            ("GET / HTTP/1.1\r\nHost: host:8x\r\n", Some(InvalidHost)),
            ("GET / HTTP/1.1\r\nHost: [::1\r\n", Some(InvalidHost)),
            ("GET / HTTP/1.1\r\nHost: %zz\r\n", Some(InvalidHost)),
            ("GET / HTTP/1.0\r\nHost: a b\r\n", Some(InvalidHost)),
            ("GET * HTTP/1.1\r\nHost: x\r\n", Some(InvalidTarget)),
            ("OPTIONS *x HTTP/1.1\r\nHost: x\r\n", Some(InvalidTarget)),
            ("GET x HTTP/1.1\r\nHost: x\r\n", Some(InvalidTarget)),
            ("GET /\u{e9} HTTP/1.1\r\nHost: x\r\n", Some(InvalidTarget)),
            ("GET /a#f HTTP/1.1\r\nHost: x\r\n", Some(InvalidTarget)),
            ("GET /a{b} HTTP/1.1\r\nHost: x\r\n", Some(InvalidTarget)),
            ("GET /%4 HTTP/1.1\r\nHost: x\r\n", Some(InvalidTarget)),
            (
                "GET http://u@a/ HTTP/1.1\r\nHost: x\r\n",
                Some(InvalidTarget),
            ),
            ("GET http:/a HTTP/1.1\r\nHost: x\r\n", Some(InvalidTarget)),
            ("GET /\x01 HTTP/1.1\r\nHost: x\r\n", Some(InvalidTarget)),
            (
                "CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n",
                Some(Connect),
            ),
            ("GET / HTTP/2.0\r\nHost: x\r\n", Some(VersionNotSupported)),
            ("GET / HTTP/1.2\r\nHost: x\r\n", Some(VersionNotSupported)),
            ("GET / HTCPCP/1.0\r\nHost: x\r\n", Some(InvalidRequestLine)),
            ("GET  / HTTP/1.1\r\nHost: x\r\n", Some(InvalidRequestLine)),
            ("G(T / HTTP/1.1\r\nHost: x\r\n", Some(InvalidMethod)),
            ("GET / HTTP/1.1\nHost: x\r\n", Some(InvalidLineEnding)),
            (
                "GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n",
                Some(TransferEncodingOnHttp10),
            ),
        ] {
            let got = p(&format!("{req}\r\n")).0;
            let want = want.map_or(Parsed::Complete, Parsed::Error);
            assert_eq!(got, want, "{req:?}");
        }
        // Lenient mode accepts every rule above except CONNECT and the version.
        for req in [
            "GET / HTTP/1.1\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n",
            "GET / HTTP/1.1\r\nHost: user@host\r\n",
            "GET * HTTP/1.1\r\n",
            "GET /\u{e9}{} HTTP/1.1\r\n",
            "GET / HTTP/1.1\nHost: x\n",
            "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n",
        ] {
            assert_eq!(lenient(&format!("{req}\r\n")), Parsed::Complete, "{req:?}");
        }
        assert_eq!(
            lenient("CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n"),
            Parsed::Error(Connect)
        );
    }

    #[test]
    fn limits() {
        let long_uri = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(MAX_URI + 1));
        assert_eq!(p(&long_uri).0, Parsed::Error(ErrorPage::UriTooLong));
        let unfinished_uri = format!("GET /{}", "a".repeat(MAX_URI + 100));
        assert_eq!(p(&unfinished_uri).0, Parsed::Error(ErrorPage::UriTooLong));
        let big = format!("GET / HTTP/1.1\r\nx: {}\r\n", "a".repeat(MAX_HEAD));
        assert_eq!(p(&big).0, Parsed::Error(ErrorPage::HeadersTooLarge));
        let field = format!("GET / HTTP/1.1\r\nx: {}\r\n\r\n", "a".repeat(MAX_FIELD));
        assert_eq!(p(&field).0, Parsed::Error(ErrorPage::FieldTooLarge));
        let many: String = (0..MAX_HEADERS + 1)
            .map(|i| format!("h{i}: v\r\n"))
            .collect();
        assert_eq!(
            p(&format!("GET / HTTP/1.1\r\n{many}\r\n")).0,
            Parsed::Error(ErrorPage::HeadersTooLarge)
        );
        assert_eq!(p("GET / HTTP/1.1\r\nHost: x\r\n").0, Parsed::Partial);
        // A long method is refused as soon as it is longer than any known, complete or not.
        let method = "A".repeat(100 * 1024);
        assert_eq!(p(&method[..MAX_METHOD]).0, Parsed::Partial);
        assert_eq!(p(&method).0, Parsed::Error(ErrorPage::MethodTooLong));
        assert_eq!(
            p(&format!("{method} / HTTP/1.1\r\nHost: x\r\n\r\n")).0,
            Parsed::Error(ErrorPage::MethodTooLong)
        );
        assert_eq!(
            p(&format!(
                "{} / HTTP/1.1\r\nHost: x\r\n\r\n",
                &method[..MAX_METHOD + 1]
            ))
            .0,
            Parsed::Error(ErrorPage::MethodTooLong)
        );
    }

    #[test]
    fn versions_and_upgrade() {
        assert!(!p("GET / HTTP/1.0\r\n\r\n").1.is_11);
        assert!(p("HEAD / HTTP/1.1\r\nHost: x\r\n\r\n").1.request.is_head());
        let up = "Host: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n";
        assert!(p(&format!("GET / HTTP/1.1\r\n{up}\r\n")).1.upgrade_h2c);
        assert!(p(&format!("HEAD / HTTP/1.1\r\n{up}\r\n")).1.upgrade_h2c);
        // A body may follow a POST: served as HTTP/1.1.
        assert!(!p(&format!("POST / HTTP/1.1\r\n{up}\r\n")).1.upgrade_h2c);
        assert!(
            !p("GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n")
                .1
                .upgrade_h2c
        );
        assert!(
            !p("GET / HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n")
                .1
                .upgrade_h2c
        );
        // RFC 7540 §3.2.1: `HTTP2-Settings` once, and named in `Connection`.
        let once = "Connection: Upgrade\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n";
        assert!(
            !p(&format!("GET / HTTP/1.1\r\nHost: x\r\n{once}\r\n"))
                .1
                .upgrade_h2c
        );
        let twice = format!("{up}HTTP2-Settings: AAMAAABkAAQAAP__\r\n");
        assert!(!p(&format!("GET / HTTP/1.1\r\n{twice}\r\n")).1.upgrade_h2c);
        // The value, for the HTTP/2 connection's first settings.
        let req = format!("GET / HTTP/1.1\r\n{up}\r\n");
        let h = p(&req).1;
        assert_eq!(
            &req.as_bytes()[h.http2_settings.unwrap()],
            b"AAMAAABkAAQAAP__"
        );
    }
}

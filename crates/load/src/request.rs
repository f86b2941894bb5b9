//! Requests, built once per URL: the whole HTTP/1.1 request head, the HTTP/2 header block,
//! the HTTP/3 HEADERS frame.

use bytes::Bytes;
use loadterm_codec::hpack;

/// The request's fields for HTTP/2 and HTTP/3: pseudo-headers first, then user-agent (unless
/// given), the -H headers (less Host, which is :authority, and connection-specific ones, which
/// are malformed there: RFC 9113 §8.2.2, RFC 9114 §4.2), content-length for uploads.
pub(crate) fn fields(
    method: &http::Method,
    tls: bool,
    authority: &str,
    path: &str,
    headers: &[(http::HeaderName, http::HeaderValue)],
    data_len: usize,
) -> Vec<(String, Vec<u8>)> {
    use http::header;
    let has = |name: &header::HeaderName| headers.iter().any(|(n, _)| n == name);
    let skip = [
        header::HOST,
        header::CONNECTION,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
        header::HeaderName::from_static("keep-alive"),
        header::HeaderName::from_static("proxy-connection"),
    ];
    let mut f: Vec<(String, Vec<u8>)> = vec![
        (":method".into(), method.as_str().into()),
        (":scheme".into(), if tls { "https" } else { "http" }.into()),
        (":authority".into(), authority.into()),
        (":path".into(), path.into()),
    ];
    if !has(&header::USER_AGENT) {
        let ua = format!("loadterm/{}", env!("CARGO_PKG_VERSION"));
        f.push(("user-agent".into(), ua.into()));
    }
    f.extend(
        headers
            .iter()
            .filter(|(n, _)| !skip.contains(n))
            .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec())),
    );
    if data_len > 0 && !has(&header::CONTENT_LENGTH) {
        f.push(("content-length".into(), data_len.to_string().into()));
    }
    f
}

/// The HTTP/2 request's header block (HPACK without indexing: one block serves every
/// connection and stream).
pub(crate) fn h2_block<'a>(fields: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> Vec<u8> {
    let mut out = Vec::new();
    for (n, v) in fields {
        hpack::put_field(&mut out, n.as_bytes(), v);
    }
    out
}

/// The HTTP/3 request's HEADERS frame (QPACK, static table and literals) and, for uploads, the DATA frame's head.
pub(crate) fn h3<'a>(
    fields: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    data_len: usize,
) -> Bytes {
    use loadterm_h3::{frame, qpack};
    let mut section = Vec::new();
    qpack::begin(&mut section);
    for (n, v) in fields {
        qpack::field(&mut section, n, v);
    }
    let mut out = Vec::with_capacity(section.len() + 16);
    frame::put_frame(&mut out, frame::HEADERS, &section);
    if data_len > 0 {
        frame::put_frame_head(&mut out, frame::DATA, data_len as u64);
    }
    Bytes::from(out)
}

pub(crate) fn h1(
    method: &http::Method,
    path: &str,
    authority: &str,
    headers: &[(http::HeaderName, http::HeaderValue)],
    data_len: usize,
) -> Bytes {
    let mut r = format!("{method} {path} HTTP/1.1\r\n").into_bytes();
    let has = |name: &str| {
        headers
            .iter()
            .any(|(n, _)| n.as_str().eq_ignore_ascii_case(name))
    };
    if !has("host") {
        r.extend_from_slice(format!("Host: {authority}\r\n").as_bytes());
    }
    if !has("user-agent") {
        r.extend_from_slice(
            format!("User-Agent: loadterm/{}\r\n", env!("CARGO_PKG_VERSION")).as_bytes(),
        );
    }
    for (n, v) in headers {
        r.extend_from_slice(n.as_str().as_bytes());
        r.extend_from_slice(b": ");
        r.extend_from_slice(v.as_bytes());
        r.extend_from_slice(b"\r\n");
    }
    if data_len > 0 && !has("content-length") {
        r.extend_from_slice(format!("Content-Length: {data_len}\r\n").as_bytes());
    }
    r.extend_from_slice(b"\r\n");
    Bytes::from(r)
}

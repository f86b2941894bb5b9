//! A minimal blocking HTTP/1.x client for byte-level checks against the real server.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

pub(crate) struct Response {
    pub head: String,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

pub(crate) fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Reads one response from `s`, using `buf` for bytes that arrive early (pipelining).
/// `head_request`: the response has no body whatever its headers say.
pub(crate) fn read_response(s: &mut TcpStream, buf: &mut Vec<u8>, head_request: bool) -> Response {
    let head_len = loop {
        if let Some(i) = find(buf, b"\r\n\r\n") {
            break i + 4;
        }
        fill(s, buf)
            .then_some(())
            .expect("connection closed before a complete head");
    };
    let head = String::from_utf8(buf[..head_len].to_vec()).expect("utf-8 head");
    let mut hs = [httparse::EMPTY_HEADER; 32];
    let mut r = httparse::Response::new(&mut hs);
    r.parse(&buf[..head_len]).expect("valid response head");
    let status = r.code.unwrap();
    let headers: Vec<(String, String)> = r
        .headers
        .iter()
        .map(|h| {
            (
                h.name.to_string(),
                String::from_utf8_lossy(h.value).into_owned(),
            )
        })
        .collect();
    buf.drain(..head_len);
    let mut resp = Response {
        head,
        status,
        headers,
        body: Vec::new(),
    };
    if head_request || status < 200 || status == 204 || status == 304 {
        return resp;
    }
    if let Some(cl) = resp.header("content-length") {
        let n: usize = cl.parse().unwrap();
        while buf.len() < n {
            fill(s, buf).then_some(()).expect("closed mid-body");
        }
        resp.body = buf.drain(..n).collect();
    } else if resp
        .header("transfer-encoding")
        .is_some_and(|v| v.contains("chunked"))
    {
        loop {
            let line_end = loop {
                if let Some(i) = find(buf, b"\r\n") {
                    break i;
                }
                fill(s, buf).then_some(()).expect("closed in chunk size");
            };
            let size =
                usize::from_str_radix(std::str::from_utf8(&buf[..line_end]).unwrap(), 16).unwrap();
            buf.drain(..line_end + 2);
            while buf.len() < size + 2 {
                fill(s, buf).then_some(()).expect("closed in chunk");
            }
            resp.body.extend(buf.drain(..size));
            assert_eq!(&buf[..2], b"\r\n", "chunk not followed by CRLF");
            buf.drain(..2);
            if size == 0 {
                break;
            }
        }
    } else {
        while fill(s, buf) {}
        resp.body = std::mem::take(buf);
    }
    resp
}

/// Reads more bytes; false at end of stream.
pub(crate) fn fill(s: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    let mut tmp = [0u8; 65536];
    loop {
        match s.read(&mut tmp) {
            Ok(0) => return false,
            Ok(n) => {
                buf.extend_from_slice(&tmp[..n]);
                return true;
            }
            // A socket read with a timeout is not restarted after a signal handler runs, and
            // the tests share one process: another test's child exiting (SIGCHLD, handled by
            // tokio) interrupts it.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return false,
            Err(e) => panic!("read: {e}"),
        }
    }
}

/// Whether the server closes the connection within `wait` (nothing else arriving).
pub(crate) fn closed_within(s: &mut TcpStream, wait: Duration) -> bool {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut b = [0u8; 1];
    let r = matches!(s.read(&mut b), Ok(0))
        || matches!(s.read(&mut b), Err(ref e) if e.kind() == std::io::ErrorKind::ConnectionReset);
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    r
}

/// One request, one response, on a fresh connection.
pub(crate) fn get(port: u16, request: &str) -> Response {
    let mut s = connect(port);
    s.write_all(request.as_bytes()).unwrap();
    read_response(&mut s, &mut Vec::new(), request.starts_with("HEAD "))
}

pub(crate) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Every byte of `body` matches the body pattern of `kind` from offset 0.
pub(crate) fn assert_body(body: &[u8], kind: loadterm_plan::BodyKind) {
    for (i, &b) in body.iter().enumerate() {
        assert_eq!(
            b,
            loadterm_plan::body::byte_at(kind, i as u64),
            "body byte {i} of {}",
            body.len()
        );
    }
}

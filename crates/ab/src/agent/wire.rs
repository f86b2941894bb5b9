//! HTTP/1.1 framing of the agent's requests and replies: a request line or status line,
//! headers, and a body of exactly `Content-Length` bytes, the head parsed by httparse (as the
//! server's and the load client's HTTP/1 heads are). Strict, because one end may be an
//! attacker: a head over 16 KiB, a body over `MAX_BODY`, or a body cut short is an error, never
//! a request.

use super::proto::MAX_BODY;
use std::fmt;
use std::io::{BufRead, Write};

const MAX_HEAD: usize = 16 << 10;

/// Most header fields a message may have (ours have three).
const MAX_FIELDS: usize = 32;

/// Why a message could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WireError {
    /// The peer closed the connection between messages.
    #[error("connection closed")]
    Closed,
    /// The peer closed the connection, or went silent, in the middle of a message.
    #[error("truncated message: {0}")]
    Truncated(String),
    #[error("malformed message: {0}")]
    Malformed(String),
    #[error("message too large: {0}")]
    TooLarge(String),
}

/// A message's first line: a request's (what ab sends) or a reply's (what the agent answers).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Start {
    Request { method: String, path: String },
    Reply { status: u16 },
}

impl fmt::Display for Start {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Start::Request { method, path } => write!(f, "{method} {path}"),
            Start::Reply { status } => write!(f, "status {status}"),
        }
    }
}

/// A message's first line, its headers (names in lower case) and its body.
#[derive(Debug)]
pub(crate) struct AgentMessage {
    pub start: Start,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl AgentMessage {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

fn io_error(e: std::io::Error, what: &str) -> WireError {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            WireError::Truncated(format!("{what}: timed out"))
        }
        _ => WireError::Truncated(format!("{what}: {e}")),
    }
}

/// Read one message. Between messages, a closed connection is `Closed`.
pub(crate) fn read_message(r: &mut impl BufRead) -> Result<AgentMessage, WireError> {
    let head = read_head(r)?;
    let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
    let malformed = |e: httparse::Error| WireError::Malformed(format!("the head: {e}"));
    let start = if head.starts_with(b"HTTP/") {
        let mut reply = httparse::Response::new(&mut fields);
        reply.parse(&head).map_err(malformed)?;
        Start::Reply {
            status: reply.code.unwrap_or_default(),
        }
    } else {
        let mut req = httparse::Request::new(&mut fields);
        req.parse(&head).map_err(malformed)?;
        Start::Request {
            method: req.method.unwrap_or_default().to_owned(),
            path: req.path.unwrap_or_default().to_owned(),
        }
    };
    let headers = fields
        .iter()
        .take_while(|h| !h.name.is_empty())
        .map(|h| {
            let value = std::str::from_utf8(h.value)
                .map_err(|_| WireError::Malformed(format!("{} is not UTF-8", h.name)))?;
            Ok((h.name.to_ascii_lowercase(), value.to_owned()))
        })
        .collect::<Result<Vec<_>, WireError>>()?;
    let msg = AgentMessage {
        start,
        headers,
        body: Vec::new(),
    };
    let len: usize = msg
        .header("content-length")
        .ok_or_else(|| WireError::Malformed("no Content-Length".into()))?
        .parse()
        .map_err(|_| WireError::Malformed("Content-Length is not a number".into()))?;
    if len > MAX_BODY {
        return Err(WireError::TooLarge(format!(
            "a body of {len} bytes (at most {MAX_BODY})"
        )));
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body)
        .map_err(|e| io_error(e, &format!("reading a body of {len} bytes")))?;
    Ok(AgentMessage { body, ..msg })
}

/// The head's bytes, through its blank line, read line by line up to `MAX_HEAD` (nothing of
/// the body).
fn read_head(r: &mut impl BufRead) -> Result<Vec<u8>, WireError> {
    let mut head = Vec::new();
    loop {
        let before = head.len();
        let n = std::io::Read::take(&mut *r, (MAX_HEAD - before + 1) as u64)
            .read_until(b'\n', &mut head)
            .map_err(|e| {
                // A TLS peer that closes without close_notify between messages has ended.
                if before == 0 && e.kind() == std::io::ErrorKind::UnexpectedEof {
                    WireError::Closed
                } else {
                    io_error(e, "reading the head")
                }
            })?;
        if n == 0 {
            return Err(if before == 0 {
                WireError::Closed
            } else {
                WireError::Truncated("the head ends before its blank line".into())
            });
        }
        if head.len() > MAX_HEAD {
            return Err(WireError::TooLarge(format!("head over {MAX_HEAD} bytes")));
        }
        if !head.ends_with(b"\n") {
            return Err(WireError::Truncated("the head ends mid-line".into()));
        }
        if matches!(&head[before..], b"\r\n" | b"\n") {
            return Ok(head);
        }
    }
}

/// Write one message: `start` line, `headers`, and `body` with its length.
pub(crate) fn write_message(
    w: &mut impl Write,
    start: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<()> {
    let mut out = format!("{start}\r\ncontent-length: {}\r\n", body.len());
    for (n, v) in headers {
        out.push_str(&format!("{n}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(body);
    w.write_all(&bytes)?;
    w.flush()
}

/// Equality that takes the same time wherever the first difference is (a token check must
/// not tell an attacker how many leading bytes were right).
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let diff = a
        .iter()
        .zip(b)
        .fold(a.len() ^ b.len(), |acc, (x, y)| acc | usize::from(x ^ y));
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(bytes: &[u8]) -> Result<AgentMessage, WireError> {
        read_message(&mut std::io::BufReader::new(bytes))
    }

    #[test]
    fn a_message_round_trips() {
        let mut out = Vec::new();
        write_message(&mut out, "POST /v1/clock HTTP/1.1", &[("x-a", "1")], b"{}").unwrap();
        let m = read(&out).unwrap();
        let start = Start::Request {
            method: "POST".into(),
            path: "/v1/clock".into(),
        };
        assert_eq!(m.start, start);
        assert_eq!(m.header("x-a"), Some("1"));
        assert_eq!(m.body, b"{}");
    }

    #[test]
    fn a_reply_has_its_status() {
        let mut out = Vec::new();
        write_message(&mut out, "HTTP/1.1 409 Conflict", &[], b"{}").unwrap();
        assert_eq!(read(&out).unwrap().start, Start::Reply { status: 409 });
    }

    #[test]
    fn a_cut_body_is_truncated_not_a_request() {
        let e = read(b"POST /v1/launch HTTP/1.1\r\ncontent-length: 10\r\n\r\n{\"op\"").unwrap_err();
        assert!(matches!(e, WireError::Truncated(_)), "{e}");
        let e = read(b"POST /v1/launch HTTP/1.1\r\ncontent-le").unwrap_err();
        assert!(matches!(e, WireError::Truncated(_)), "{e}");
        assert!(matches!(read(b"").unwrap_err(), WireError::Closed));
    }

    #[test]
    fn oversized_and_malformed_heads_are_refused() {
        let big = format!("POST / HTTP/1.1\r\nx: {}\r\n\r\n", "a".repeat(MAX_HEAD));
        assert!(matches!(
            read(big.as_bytes()).unwrap_err(),
            WireError::TooLarge(_)
        ));
        let huge = format!(
            "POST / HTTP/1.1\r\ncontent-length: {}\r\n\r\n",
            MAX_BODY + 1
        );
        assert!(matches!(
            read(huge.as_bytes()).unwrap_err(),
            WireError::TooLarge(_)
        ));
        assert!(matches!(
            read(b"POST / HTTP/1.1\r\nno colon\r\n\r\n").unwrap_err(),
            WireError::Malformed(_)
        ));
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(!constant_time_eq(b"", b"a"));
    }
}

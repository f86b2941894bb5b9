//! HTTP/1.1 response parsing for the client (sans-I/O): feed bytes, get completed responses.
//! Bodies are counted, never copied; chunked ones go through the codec's strict decoder, the one
//! the server reads requests with.

use loadterm_codec::chunked;
use loadterm_codec::syntax::content_length;
use loadterm_plan::{is_interim, response_has_body};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Done {
    pub status: u16,
    pub head_bytes: u64,
    pub body_bytes: u64,
    /// The server will close after this response (or the body was close-delimited).
    pub close: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ParseProgress {
    /// Need more bytes (everything given was consumed or kept).
    More,
    /// An interim (1xx, not 101) response head ended after `consumed` bytes of the input: it
    /// is not the answer, the final response follows.
    Interim { consumed: usize },
    /// A response completed after `consumed` bytes of the input.
    Response { done: Done, consumed: usize },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ParseError;

/// How the response body's end is known.
#[derive(Debug)]
enum ResponseFraming {
    Length(u64),
    Chunked(chunked::ChunkedDecoder),
    /// Until the connection closes.
    Eof,
}

/// Parser for one connection's response stream. Heads are parsed from a small internal buffer;
/// body bytes are only counted.
#[derive(Debug, Default)]
pub(super) struct Parser {
    head: Vec<u8>,
    state: Option<(Done, ResponseFraming)>,
}

impl Parser {
    /// `head_request`: the response to a HEAD has no body.
    pub(super) fn feed(
        &mut self,
        input: &[u8],
        head_request: bool,
    ) -> Result<ParseProgress, ParseError> {
        let mut used = 0;
        if self.state.is_none() {
            let parsed = if self.head.is_empty() {
                // A head that arrives whole, as nearly all do, is parsed where it lies.
                head_end(input, 0).map(|end| {
                    used = end;
                    parse_head(&input[..end], head_request)
                })
            } else {
                None
            };
            let parsed = match parsed {
                Some(p) => p,
                // Accumulate until the end of the head.
                None => {
                    let start = self.head.len().saturating_sub(3);
                    self.head.extend_from_slice(input);
                    let Some(end) = head_end(&self.head, start) else {
                        if self.head.len() > 64 * 1024 {
                            return Err(ParseError);
                        }
                        return Ok(ParseProgress::More);
                    };
                    used = end - (self.head.len() - input.len());
                    let parsed = parse_head(&self.head[..end], head_request);
                    self.head.clear();
                    parsed
                }
            };
            let (done, body) = parsed?;
            // After a 101 the connection speaks another protocol: no final response follows.
            if is_interim(done.status) && done.status != 101 {
                return Ok(ParseProgress::Interim { consumed: used });
            }
            if matches!(body, ResponseFraming::Length(0)) {
                return Ok(ParseProgress::Response {
                    done,
                    consumed: used,
                });
            }
            self.state = Some((done, body));
        }
        let (done, body) = self.state.as_mut().expect("state set above");
        let rest = &input[used..];
        match body {
            ResponseFraming::Length(left) => {
                let n = (*left).min(rest.len() as u64);
                *left -= n;
                done.body_bytes += n;
                used += n as usize;
                if *left == 0 {
                    let done = *done;
                    self.state = None;
                    return Ok(ParseProgress::Response {
                        done,
                        consumed: used,
                    });
                }
                Ok(ParseProgress::More)
            }
            ResponseFraming::Eof => {
                done.body_bytes += rest.len() as u64;
                Ok(ParseProgress::More)
            }
            ResponseFraming::Chunked(body) => {
                let n = body.feed(rest).map_err(|_| ParseError)?;
                if body.is_done() {
                    done.body_bytes = body.data_bytes();
                    return Ok(self.finish(used + n));
                }
                Ok(ParseProgress::More)
            }
        }
    }

    fn finish(&mut self, consumed: usize) -> ParseProgress {
        let (done, _) = self.state.take().expect("in a response");
        ParseProgress::Response { done, consumed }
    }

    /// Between responses: the next byte fed starts a response head (interim or final).
    pub(super) fn idle(&self) -> bool {
        self.state.is_none() && self.head.is_empty()
    }

    /// The connection ended: completes a close-delimited response, if one is in progress. A
    /// response cut short (in its head, or before its length or last chunk) is an error.
    pub(super) fn eof(&mut self) -> Result<Option<Done>, ParseError> {
        let partial = !self.head.is_empty();
        self.head.clear();
        match self.state.take() {
            Some((done, ResponseFraming::Eof)) => Ok(Some(done)),
            Some(_) => Err(ParseError),
            None if partial => Err(ParseError),
            None => Ok(None),
        }
    }
}

/// Where the head that `buf` starts with ends (after its empty line), searching from `from`.
fn head_end(buf: &[u8], from: usize) -> Option<usize> {
    memchr::memmem::find(&buf[from..], b"\r\n\r\n").map(|p| from + p + 4)
}

fn parse_head(head: &[u8], head_request: bool) -> Result<(Done, ResponseFraming), ParseError> {
    // Left uninitialised: filling 64 empty headers cost more than parsing a small head.
    let mut hs = [const { std::mem::MaybeUninit::uninit() }; 64];
    let mut r = httparse::Response::new(&mut []);
    match httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut r, head, &mut hs)
    {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return Err(ParseError),
    }
    // httparse takes a bare LF as a line end; RFC 9112 §2.2 only allows that leniency.
    if memchr::memchr_iter(b'\n', head).any(|i| i == 0 || head[i - 1] != b'\r') {
        return Err(ParseError);
    }
    let status = r.code.ok_or(ParseError)?;
    let mut length = None;
    let mut encoded = false;
    let mut chunked = false;
    let mut close = r.version == Some(0);
    for h in r.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            // Repeated only with the same value (RFC 9110 §8.6).
            let n = content_length(h.value).ok_or(ParseError)?;
            if length.is_some_and(|l| l != n) {
                return Err(ParseError);
            }
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            // Chunked only as the last coding; otherwise the body runs to the close (RFC 9112
            // §6.3).
            encoded = true;
            let last = h.value.rsplit(|&b| b == b',').next().unwrap_or_default();
            chunked = last.trim_ascii().eq_ignore_ascii_case(b"chunked");
        } else if h.name.eq_ignore_ascii_case("connection") {
            let v = h.value.to_ascii_lowercase();
            if v.windows(5).any(|w| w == b"close") {
                close = true;
            } else if v.windows(10).any(|w| w == b"keep-alive") {
                close = false;
            }
        }
    }
    let done = Done {
        status,
        head_bytes: head.len() as u64,
        body_bytes: 0,
        // After a 101 the bytes are no longer HTTP/1.1: nothing more to read on it.
        close: close || status == 101,
    };
    // Both framings at once is how responses get split (RFC 9112 §6.3).
    if encoded && length.is_some() {
        return Err(ParseError);
    }
    let body = if !response_has_body(head_request, status) {
        ResponseFraming::Length(0)
    } else if chunked {
        ResponseFraming::Chunked(chunked::ChunkedDecoder::new())
    } else if encoded {
        ResponseFraming::Eof
    } else if let Some(n) = length {
        ResponseFraming::Length(n)
    } else {
        ResponseFraming::Eof
    };
    if matches!(body, ResponseFraming::Eof) {
        return Ok((
            Done {
                close: true,
                ..done
            },
            body,
        ));
    }
    Ok((done, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `stream` parses into when fed in the given pieces: each response as (status,
    /// body bytes, close), each interim head as `None`.
    fn parse<'a>(pieces: impl IntoIterator<Item = &'a [u8]>) -> Vec<Option<(u16, u64, bool)>> {
        let mut p = Parser::default();
        let mut out = Vec::new();
        for part in pieces {
            let mut rest = part;
            while !rest.is_empty() {
                match p.feed(rest, false).unwrap() {
                    ParseProgress::More => break,
                    ParseProgress::Interim { consumed } => {
                        assert!(p.idle(), "an interim head leaves the parser between heads");
                        out.push(None);
                        rest = &rest[consumed..];
                    }
                    ParseProgress::Response { done, consumed } => {
                        out.push(Some((done.status, done.body_bytes, done.close)));
                        rest = &rest[consumed..];
                    }
                }
            }
        }
        out.extend(
            p.eof()
                .unwrap()
                .map(|d| Some((d.status, d.body_bytes, d.close))),
        );
        out
    }

    /// Split in two at every point, and fed one byte at a time.
    fn every_split(stream: &[u8], want: &[Option<(u16, u64, bool)>]) {
        for split in 0..=stream.len() {
            let (a, b) = stream.split_at(split);
            assert_eq!(parse([a, b]), want, "split {split}");
        }
        assert_eq!(parse(stream.chunks(1)), want, "byte by byte");
    }

    #[test]
    fn every_split_point() {
        let stream = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n.1234HTTP/1.1 404 Not Found\r\ntransfer-encoding: chunked\r\n\r\n3\r\n111\r\n0\r\n\r\nHTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 200 OK\r\nconnection: close\r\n\r\nabc";
        every_split(
            stream,
            &[
                Some((200, 5, false)),
                Some((404, 3, false)),
                Some((204, 0, false)),
                Some((200, 3, true)),
            ],
        );
    }

    #[test]
    fn continue_then_the_final_response() {
        // 100 Continue (as answered to `Expect: 100-continue`) and 103 Early Hints are not
        // the answer: the response that follows is.
        let stream = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nabcHTTP/1.1 103 Early Hints\r\nlink: </s.css>\r\n\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\ncontent-length: 2\r\n\r\nno";
        every_split(
            stream,
            &[
                None,
                Some((200, 3, false)),
                None,
                None,
                Some((404, 2, false)),
            ],
        );
    }

    #[test]
    fn interim_then_close_has_no_final_response() {
        // `?r=103`: the server sends the 1xx as its only answer and closes.
        let stream = b"HTTP/1.1 103 Early Hints\r\nconnection: close\r\n\r\n";
        every_split(stream, &[None]);
    }

    #[test]
    fn switching_protocols_is_final() {
        // After a 101 the connection is no longer HTTP/1.1.
        every_split(
            b"HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\n\r\n",
            &[Some((101, 0, true))],
        );
    }

    #[test]
    fn garbage_is_an_error() {
        assert_eq!(
            Parser::default().feed(b"NOT HTTP\r\n\r\n", false),
            Err(ParseError)
        );
        let mut p = Parser::default();
        assert!(p
            .feed(
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz",
                false
            )
            .is_err());
    }

    /// A stream that must be refused: its verdict at the end of the input (or the close).
    fn refused(stream: &[u8]) -> bool {
        let mut p = Parser::default();
        let mut rest = stream;
        loop {
            match p.feed(rest, false) {
                Err(_) => return true,
                Ok(ParseProgress::More) => return p.eof().is_err(),
                Ok(
                    ParseProgress::Interim { consumed } | ParseProgress::Response { consumed, .. },
                ) => {
                    rest = &rest[consumed..];
                    if rest.is_empty() {
                        return p.eof().is_err();
                    }
                }
            }
        }
    }

    #[test]
    fn malformed_responses_are_errors() {
        for (what, stream) in [
            ("bare LF in the head", &b"HTTP/1.1 200 OK\ncontent-length: 0\r\n\r\n"[..]),
            ("bare LF ending a chunk", b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1\r\na\n0\r\n\r\n"),
            ("bad chunk size", b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n"),
            ("close before the length", b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nabc"),
            ("close before the last chunk", b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n"),
            ("close inside the head", b"HTTP/1.1 200 OK\r\ncontent-len"),
            ("content-length with a sign", b"HTTP/1.1 200 OK\r\ncontent-length: +5\r\n\r\nabcde"),
            ("content-length twice, differing", b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\nabcde"),
            ("content-length and transfer-encoding", b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n"),
        ] {
            assert!(refused(stream), "{what}");
        }
        for (what, stream) in [
            (
                "content-length twice, same",
                &b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 2\r\n\r\nab"[..],
            ),
            ("close-delimited", b"HTTP/1.1 200 OK\r\n\r\nabc"),
            (
                "chunked not last: to the close",
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, gzip\r\n\r\nabc",
            ),
        ] {
            assert!(!refused(stream), "{what}");
        }
    }
}

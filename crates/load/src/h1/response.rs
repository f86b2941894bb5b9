//! HTTP/1.1 response parsing for the client (sans-I/O): feed bytes, get completed responses.
//! Bodies are counted, never copied.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Done {
    pub status: u16,
    pub head_bytes: u64,
    pub body_bytes: u64,
    /// The server will close after this response (or the body was close-delimited).
    pub close: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Need more bytes (everything given was consumed or kept).
    More,
    /// An interim (1xx, not 101) response head ended after `consumed` bytes of the input: it
    /// is not the answer, the final response follows.
    Interim { consumed: usize },
    /// A response completed after `consumed` bytes of the input.
    Response { done: Done, consumed: usize },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseError;

#[derive(Debug)]
enum Body {
    Length(u64),
    Chunked(Chunked),
    /// Until the connection closes.
    Eof,
}

/// Parser for one connection's response stream. Heads are parsed from a small internal buffer;
/// body bytes are only counted.
#[derive(Debug, Default)]
pub struct Parser {
    head: Vec<u8>,
    state: Option<(Done, Body)>,
}

impl Parser {
    /// `head_request`: the response to a HEAD has no body.
    pub fn feed(&mut self, input: &[u8], head_request: bool) -> Result<Event, ParseError> {
        let mut used = 0;
        if self.state.is_none() {
            // Accumulate until the end of the head.
            let start = self.head.len().saturating_sub(3);
            self.head.extend_from_slice(input);
            let Some(end) = self.head[start..]
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .map(|p| start + p + 4)
            else {
                if self.head.len() > 64 * 1024 {
                    return Err(ParseError);
                }
                return Ok(Event::More);
            };
            let before = self.head.len() - input.len();
            used = end - before;
            let (done, body) = parse_head(&self.head[..end], head_request)?;
            self.head.clear();
            if is_interim(done.status) {
                return Ok(Event::Interim { consumed: used });
            }
            if matches!(body, Body::Length(0)) {
                return Ok(Event::Response {
                    done,
                    consumed: used,
                });
            }
            self.state = Some((done, body));
        }
        let (done, body) = self.state.as_mut().expect("state set above");
        let rest = &input[used..];
        match body {
            Body::Length(left) => {
                let n = (*left).min(rest.len() as u64);
                *left -= n;
                done.body_bytes += n;
                used += n as usize;
                if *left == 0 {
                    let done = *done;
                    self.state = None;
                    return Ok(Event::Response {
                        done,
                        consumed: used,
                    });
                }
                Ok(Event::More)
            }
            Body::Eof => {
                done.body_bytes += rest.len() as u64;
                Ok(Event::More)
            }
            Body::Chunked(body) => {
                let n = body.feed(rest).map_err(|_| ParseError)?;
                if body.is_done() {
                    done.body_bytes = body.data_bytes();
                    return Ok(self.finish(used + n));
                }
                Ok(Event::More)
            }
        }
    }

    fn finish(&mut self, consumed: usize) -> Event {
        let (done, _) = self.state.take().expect("in a response");
        Event::Response { done, consumed }
    }

    /// Between responses: the next byte fed starts a response head (interim or final).
    pub fn idle(&self) -> bool {
        self.state.is_none() && self.head.is_empty()
    }

    /// The connection ended: completes a close-delimited response, if one is in progress.
    pub fn eof(&mut self) -> Option<Done> {
        match self.state.take() {
            Some((done, Body::Eof)) => Some(done),
            _ => None,
        }
    }
}

/// 1xx heads precede the final response, except 101, after which the connection speaks
/// another protocol.
fn is_interim(status: u16) -> bool {
    (100..200).contains(&status) && status != 101
}

fn parse_head(head: &[u8], head_request: bool) -> Result<(Done, Body), ParseError> {
    let mut hs = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Response::new(&mut hs);
    match r.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return Err(ParseError),
    }
    let status = r.code.ok_or(ParseError)?;
    let mut length = None;
    let mut chunked = false;
    let mut close = r.version == Some(0);
    for h in r.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            let v = std::str::from_utf8(h.value).map_err(|_| ParseError)?.trim();
            length = Some(v.parse::<u64>().map_err(|_| ParseError)?);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = h
                .value
                .windows(7)
                .any(|w| w.eq_ignore_ascii_case(b"chunked"));
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
    let body = if head_request || status < 200 || status == 204 || status == 304 {
        Body::Length(0)
    } else if chunked {
        Body::Chunked(Chunked::new())
    } else if let Some(n) = length {
        Body::Length(n)
    } else {
        Body::Eof
    };
    if matches!(body, Body::Eof) {
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

/// A chunked body (RFC 9112 §7.1) as it streams by: payload counted, never copied; chunk
/// extensions and trailers skipped. Same interface as `loadterm_codec::chunked::Decoder`, for
/// which it is meant to be swapped.
#[derive(Debug)]
struct Chunked {
    state: Chunk,
    data: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// Size digits so far: value and count.
    Size(u64, u8),
    Ext(u64),
    SizeLf(u64),
    Data(u64),
    DataCr,
    DataLf,
    Trailer,
    TrailerLine,
    TrailerLf(bool),
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ChunkError;

impl Chunked {
    fn new() -> Chunked {
        Chunked {
            state: Chunk::Size(0, 0),
            data: 0,
        }
    }

    /// Consume what `input` holds of the body; returns how many bytes of it belong to the body
    /// (all of them until its end, where it stops).
    fn feed(&mut self, input: &[u8]) -> Result<usize, ChunkError> {
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            self.state = match self.state {
                Chunk::Size(v, d) => match (b as char).to_digit(16) {
                    Some(x) if d < 16 => Chunk::Size(v << 4 | x as u64, d + 1),
                    Some(_) => return Err(ChunkError),
                    None if d == 0 => return Err(ChunkError),
                    None => match b {
                        b';' | b' ' | b'\t' => Chunk::Ext(v),
                        b'\r' => Chunk::SizeLf(v),
                        b'\n' => after_size(v),
                        _ => return Err(ChunkError),
                    },
                },
                Chunk::Ext(v) => match b {
                    b'\r' => Chunk::SizeLf(v),
                    b'\n' => after_size(v),
                    _ => Chunk::Ext(v),
                },
                Chunk::SizeLf(v) if b == b'\n' => after_size(v),
                Chunk::Data(left) => {
                    let n = left.min((input.len() - i) as u64);
                    self.data += n;
                    i += n as usize;
                    self.state = if n == left {
                        Chunk::DataCr
                    } else {
                        Chunk::Data(left - n)
                    };
                    continue;
                }
                Chunk::DataCr if b == b'\r' => Chunk::DataLf,
                Chunk::DataLf if b == b'\n' => Chunk::Size(0, 0),
                Chunk::Trailer => match b {
                    b'\r' => Chunk::TrailerLf(true),
                    b'\n' => Chunk::Done,
                    _ => Chunk::TrailerLine,
                },
                Chunk::TrailerLine => match b {
                    b'\r' => Chunk::TrailerLf(false),
                    b'\n' => Chunk::Trailer,
                    _ => Chunk::TrailerLine,
                },
                Chunk::TrailerLf(true) if b == b'\n' => Chunk::Done,
                Chunk::TrailerLf(false) if b == b'\n' => Chunk::Trailer,
                Chunk::Done => return Ok(i),
                _ => return Err(ChunkError),
            };
            i += 1;
        }
        Ok(i)
    }

    fn is_done(&self) -> bool {
        self.state == Chunk::Done
    }

    /// Payload bytes so far.
    fn data_bytes(&self) -> u64 {
        self.data
    }
}

fn after_size(v: u64) -> Chunk {
    if v == 0 {
        Chunk::Trailer
    } else {
        Chunk::Data(v)
    }
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
                    Event::More => break,
                    Event::Interim { consumed } => {
                        assert!(p.idle(), "an interim head leaves the parser between heads");
                        out.push(None);
                        rest = &rest[consumed..];
                    }
                    Event::Response { done, consumed } => {
                        out.push(Some((done.status, done.body_bytes, done.close)));
                        rest = &rest[consumed..];
                    }
                }
            }
        }
        out.extend(p.eof().map(|d| Some((d.status, d.body_bytes, d.close))));
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
    fn chunked_bodies_stop_exactly_at_their_end() {
        let body = b"3;ext=1\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\nx-t: 1\r\n\r\n";
        let stream = [&body[..], b"HTTP/1.1 200 OK\r\n"].concat();
        for split in 0..=stream.len() {
            let mut c = Chunked::new();
            let (a, b) = stream.split_at(split);
            let mut used = c.feed(a).unwrap();
            if !c.is_done() {
                assert_eq!(used, a.len());
                used += c.feed(b).unwrap();
            }
            assert!(c.is_done(), "split {split}");
            assert_eq!((used, c.data_bytes()), (body.len(), 19), "split {split}");
        }
        assert_eq!(Chunked::new().feed(b"x\r\n"), Err(ChunkError));
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
}

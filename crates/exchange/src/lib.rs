//! How to answer one request, on any protocol: a sans-I/O state machine that every server
//! engine (HTTP/1.x, HTTP/2, HTTP/3) drives. The engine reports what happened (the request head,
//! body bytes, the end of the body or its failure) and carries out the [`Step`]s it is given in
//! its own framing; every response rule is decided here, once:
//!
//! - which answer: a dummy response from the [`Plan`], the help page, or an error page;
//! - the interim `100 Continue`: only to `Expect: 100-continue` with a body still to come, never
//!   to HTTP/1.0, never before an error;
//! - whether the request body is read before the response, after it (`A=1`), or not at all;
//! - the delay, and the real times reported in `x-req`/`x-rsp`;
//! - the head: status, content-length, cache-control, HTTP/1.x connection and framing;
//! - the body: which bytes, chunked or not, whether zero-copy is allowed (`S=0`: not);
//! - how the exchange ends: keep-alive, close, or a 1xx with no final response;
//! - httpterm's misbehaviours: a lying content-length (`b`), a partial read of the request body
//!   before responding (`B`), a pause after the response (`P`), the idle time allowed before the
//!   next request (`w`), a body in random pieces with random pauses (`p`), one-byte chunks
//!   (`k=2`), and an `ETag` (`e`) with the conditional requests it answers (304, 412).
//!
//! The engine never re-derives what this decided; nothing here touches a socket or a clock
//! (times come in as arguments). The engines take the steps through the one [`StepDriver`],
//! as [`Action`]s in their framing, with their waits and clock.

#![forbid(unsafe_code)]

mod drive;
pub mod h1;
pub mod head;
mod request;

pub use drive::{Action, StepDriver};
pub use request::HeadBuilder;

pub use head::{
    http_date, FieldName, FieldSink, HeadKind, HttpDate, Reported, ResponseHead, Timing,
};
use loadterm_plan::pages::{self, ErrorPage};
use loadterm_plan::{BodyKind, ConnForce, Outcome, Plan, Rng};
use std::borrow::Cow;
use std::time::{Duration, Instant};

/// The protocol a request arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
    H2,
    H3,
}

impl Version {
    fn is_h1(self) -> bool {
        matches!(self, Version::Http10 | Version::Http11)
    }
}

/// What the exchange needs to know of a request, in any protocol: the engine's
/// [`HeadBuilder`] distills its head into this.
#[derive(Debug, Clone, Copy)]
pub struct RequestSummary<'a> {
    pub version: Version,
    pub is_head: bool,
    /// Raw request-target (H1) or `:path` (H2/H3); no percent-decoding is done.
    pub target: &'a [u8],
    /// Value of the [`loadterm_plan::CONTROL_HEADER`] header, if any.
    pub control: Option<&'a [u8]>,
    /// The request carries `Expect: 100-continue`.
    pub expect_continue: bool,
    /// HTTP/1.x `Connection: close`.
    pub conn_close: bool,
    /// HTTP/1.x `Connection: keep-alive`.
    pub conn_keep_alive: bool,
    /// A request body follows the head (HTTP/1.x: a length or chunked; HTTP/2 and HTTP/3: the
    /// stream did not end with the head).
    pub has_body: bool,
    /// Size of the request head as reported in `x-req` (see [`head_bytes`] for HTTP/2 and /3).
    pub head_bytes: u64,
    /// Responses carry a `date` field (RFC 9110 §6.6.1: an origin server with a clock sends
    /// one; off for byte-exact parity with haterm, which sends none).
    pub date: bool,
    /// The method is GET (a matching `If-None-Match` gives 304 to GET and HEAD, 412 otherwise).
    pub is_get: bool,
    /// `If-Match` and `If-None-Match` values (repeated fields joined, [`HeadBuilder`]); looked
    /// at only when the plan has an ETag (`e`).
    pub if_match: Option<&'a [u8]>,
    pub if_none_match: Option<&'a [u8]>,
}

/// The size of an HTTP/2 or HTTP/3 request head as `x-req` reports it: what it would take as
/// HTTP/1.1 text, every field as `name: value\r\n` (`fields`: the sum of those lines).
pub fn head_bytes(method: usize, target: usize, fields: usize) -> u64 {
    (method + target + fields + 12) as u64
}

/// Response body bytes to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    Generated(Generated),
    Piece(Piece),
    /// A text/plain page.
    Text(Cow<'static, str>),
}

/// A whole generated body: `size` bytes of `kind`, as slices of `loadterm_plan::body`'s static
/// blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Generated {
    pub kind: BodyKind,
    pub size: u64,
    /// HTTP/1.1 chunked transfer coding (then `size` may be 0: the last chunk alone).
    pub chunked: bool,
    /// With `chunked`: one chunk per byte (`k=2`), httpterm's `1\r\n1\r\n`...
    pub byte_chunks: bool,
    /// Zero-copy paths (splice, tee, vmsplice) are allowed for this response.
    pub zero_copy: bool,
    /// Nothing follows (HTTP/2 and HTTP/3 end the stream with the body's last bytes).
    pub last: bool,
}

/// One piece of a body sent in pieces (`p`, and `k=2` on HTTP/2 and HTTP/3): `len` bytes of
/// `kind` from `offset`, to send as they are (HTTP/1.x: flushed on their own, as one chunk, or
/// as `len` one-byte chunks; HTTP/2 and HTTP/3: one DATA frame). A `len` of 0 with `chunked` is
/// the last chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub kind: BodyKind,
    pub offset: u64,
    pub len: u64,
    pub chunked: bool,
    pub byte_chunks: bool,
    /// Nothing follows (HTTP/2 and HTTP/3 end the stream with it).
    pub last: bool,
}

/// What the engine must do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Send the interim `100 Continue` (HTTP/1.1 `HTTP/1.1 100 Continue`, `:status 100`).
    Continue,
    /// Read the request body and report it with [`StepDriver::body_read`]: its bytes, and
    /// [`BodyRead::Ended`] or [`BodyRead::Failed`]; with a limit (`B`), stop once that many body
    /// bytes were read and report [`BodyRead::LimitReached`] if it is not over.
    ReadBody {
        limit: Option<u64>,
    },
    /// Nothing to do until then (`t`); then ask again.
    WaitUntil(Instant),
    /// Send everything so far, then wait this long (`P` after the response, `p` between
    /// pieces); then ask again.
    Pause(Duration),
    Head(ResponseHead),
    Body(Body),
    /// The exchange is over.
    Done(ExchangeEnd),
}

/// How an exchange ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExchangeEnd {
    /// Complete; HTTP/1.x keeps the connection for the next request (HTTP/2 and HTTP/3: the
    /// stream ends, as for `Close`).
    KeepAlive,
    /// Complete; HTTP/1.x closes the connection.
    Close,
    /// A 1xx was asked for as the final status: it went out as the only head. HTTP/1.x closes,
    /// HTTP/2 resets the stream with NO_ERROR, HTTP/3 ends it with no final response.
    NoFinal,
    /// The request broke (reset, connection gone): drop it without a word.
    Abort,
}

/// What reading the request body ([`Step::ReadBody`]) came to, as every engine reports it with
/// [`StepDriver::body_read`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyRead {
    /// The body ended.
    Ended,
    /// The limit of [`Step::ReadBody`] was reached and the body goes on: answer now, read the
    /// rest afterwards.
    LimitReached,
    /// Reading failed.
    Failed(BodyFailure),
}

/// Why reading the request body stopped early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFailure {
    /// Not received within the client timeout: 408.
    Timeout,
    /// Invalid framing (chunk syntax, early end of a delimited body): 400.
    Malformed,
    /// The stream was reset or the connection broke.
    Broken,
}

/// The answer chosen for the request.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    Dummy(Plan),
    Help,
    /// A text/plain page; the connection closes after it on HTTP/1.x.
    Text {
        status: u16,
        text: Cow<'static, str>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Start,
    /// Reading the body before answering.
    Reading,
    Delay,
    Head,
    Body,
    /// The body in pieces: the next one.
    Pieces,
    /// The body in pieces: the pause before the next one.
    PiecePause,
    /// The response is out: pause (`P`)?
    Pause,
    /// After the response: read what is left of the body (`A=1`, `B`)?
    After,
    /// Reading the body after the response.
    ReadingAfter,
    Done(ExchangeEnd),
}

/// One request/response exchange.
#[derive(Debug)]
pub struct Exchange {
    answer: Answer,
    version: Version,
    is_head: bool,
    expect_continue: bool,
    conn_close: bool,
    conn_keep_alive: bool,
    /// A body is still to be read.
    body_left: bool,
    state: State,
    t_first: Instant,
    /// When the request was complete (or the response began, with `A=1`).
    t_req: Option<Instant>,
    req_bytes: u64,
    /// HTTP/1.x: the connection stays open after this response (decided with the head).
    keep_alive: bool,
    /// HTTP/1.1: the body goes in the chunked coding (decided with the head).
    chunked_te: bool,
    date: bool,
    /// The request body was read up to `B` only: the rest is read after the response.
    limit_reached: bool,
    /// Body in pieces: bytes sent so far, and the generator for their sizes and pauses
    /// (seeded from the thread's generator only when pieces are used).
    piece_off: u64,
    piece_rng: Rng,
}

impl Exchange {
    /// Plan the answer to a request whose first byte arrived at `t_first`. `rng` feeds the
    /// vocabulary's random suffixes.
    pub fn new(req: &RequestSummary<'_>, rng: &mut Rng, t_first: Instant) -> Exchange {
        let vocabulary = loadterm_plan::Query {
            target: req.target,
            control: req.control,
            is_head: req.is_head,
        };
        let mut piece_rng = Rng::new(1);
        let answer = match Plan::from_request(&vocabulary, rng) {
            Outcome::Respond(mut plan) => {
                if plan.etag.is_some() {
                    conditional(&mut plan, req);
                }
                if plan.pieces > 0 {
                    piece_rng = Rng::new(rng.next_u32());
                }
                Answer::Dummy(plan)
            }
            Outcome::Help => Answer::Help,
            Outcome::Reject(e) => Answer::Text {
                status: 400,
                text: Cow::Owned(format!("400 Bad Request: {e}\n")),
            },
        };
        Exchange {
            answer,
            version: req.version,
            is_head: req.is_head,
            expect_continue: req.expect_continue,
            conn_close: req.conn_close,
            conn_keep_alive: req.conn_keep_alive,
            body_left: req.has_body,
            state: State::Start,
            t_first,
            t_req: None,
            req_bytes: req.head_bytes,
            keep_alive: false,
            chunked_te: false,
            date: req.date,
            limit_reached: false,
            piece_off: 0,
            piece_rng,
        }
    }

    /// An error page for a request that could not be parsed or completed (no plan exists);
    /// `date` as in [`RequestSummary::date`].
    pub fn error(page: ErrorPage, version: Version, date: bool, t_first: Instant) -> Exchange {
        Exchange {
            answer: Answer::Text {
                status: page.status(),
                text: Cow::Borrowed(page.body()),
            },
            version,
            is_head: false,
            expect_continue: false,
            conn_close: true,
            conn_keep_alive: false,
            body_left: false,
            state: State::Start,
            t_first,
            t_req: None,
            req_bytes: 0,
            keep_alive: false,
            chunked_te: false,
            date,
            limit_reached: false,
            piece_off: 0,
            piece_rng: Rng::new(1),
        }
    }

    /// Report a [`Step::ReadBody`]: `bytes` of the request body received (and discarded), and
    /// how the reading stopped.
    pub(crate) fn body_read(&mut self, bytes: u64, how: BodyRead) {
        self.req_bytes += bytes;
        match how {
            BodyRead::Ended => self.body_end(),
            BodyRead::LimitReached => self.body_limit_reached(),
            BodyRead::Failed(why) => self.body_failed(why),
        }
    }

    fn body_end(&mut self) {
        self.body_left = false;
        self.state = match self.state {
            State::Reading => State::Delay,
            State::ReadingAfter => State::After,
            other => other,
        };
    }

    fn body_limit_reached(&mut self) {
        self.limit_reached = true;
        if self.state == State::Reading {
            self.state = State::Delay;
        }
    }

    /// How long the connection waits for the next request after this exchange (`w`), if the
    /// request set it (HTTP/1.x; HTTP/2 and HTTP/3 apply it to the connection's idle time).
    pub fn idle(&self) -> Option<Duration> {
        match &self.answer {
            Answer::Dummy(plan) if plan.idle_ms > 0 => {
                Some(Duration::from_millis(plan.idle_ms.into()))
            }
            _ => None,
        }
    }

    fn body_failed(&mut self, why: BodyFailure) {
        self.body_left = false;
        self.state = match (why, self.state) {
            (BodyFailure::Broken, _) => State::Done(ExchangeEnd::Abort),
            // The response is out already: nothing more to say.
            (_, State::ReadingAfter) => State::Done(ExchangeEnd::Close),
            (BodyFailure::Timeout | BodyFailure::Malformed, _) => {
                let page = if why == BodyFailure::Timeout {
                    ErrorPage::Timeout
                } else {
                    ErrorPage::BadRequest
                };
                self.answer = Answer::Text {
                    status: page.status(),
                    text: Cow::Borrowed(page.body()),
                };
                State::Head
            }
        };
    }

    /// The next thing to do, at `now`.
    #[inline]
    pub(crate) fn next(&mut self, now: Instant) -> Step {
        loop {
            match self.state {
                State::Start => {
                    // A text answer (a rejection) goes out at once: its request body is never read.
                    let reads_body = !matches!(self.answer, Answer::Text { .. });
                    let read_first = self.body_left
                        && !matches!(&self.answer, Answer::Dummy(p) if p.drain_after);
                    self.state = if !reads_body {
                        State::Head
                    } else if read_first {
                        State::Reading
                    } else {
                        State::Delay
                    };
                    // RFC 9110 §10.1.1: 100 only when the body is still to come, never to an
                    // HTTP/1.0 client (§15.2), and not before an error, which is final at once.
                    if self.expect_continue
                        && self.body_left
                        && reads_body
                        && self.version != Version::Http10
                    {
                        return Step::Continue;
                    }
                }
                State::Reading => {
                    let limit = match &self.answer {
                        Answer::Dummy(p) => p.body_limit,
                        _ => None,
                    };
                    return Step::ReadBody { limit };
                }
                State::ReadingAfter => return Step::ReadBody { limit: None },
                State::Delay => {
                    let t_req = *self.t_req.get_or_insert(now);
                    self.state = State::Head;
                    if let Answer::Dummy(plan) = &self.answer {
                        if plan.delay_ms > 0 {
                            return Step::WaitUntil(t_req + Duration::from_millis(plan.delay_ms));
                        }
                    }
                }
                State::Head => {
                    self.state = State::Body;
                    return Step::Head(self.head(now));
                }
                State::Body => {
                    self.state = State::Pause;
                    if self.in_pieces() {
                        self.state = State::Pieces;
                        continue;
                    }
                    if let Some(body) = self.body() {
                        return Step::Body(body);
                    }
                }
                State::Pieces => {
                    if let Some(step) = self.piece() {
                        return step;
                    }
                }
                State::PiecePause => {
                    self.state = State::Pieces;
                    let pause = self.piece_rng.next_u32() % 16;
                    if pause > 0 {
                        return Step::Pause(Duration::from_millis(pause.into()));
                    }
                }
                State::Pause => {
                    self.state = State::After;
                    if let Answer::Dummy(plan) = &self.answer {
                        if plan.pause_ms > 0 {
                            return Step::Pause(Duration::from_millis(plan.pause_ms.into()));
                        }
                    }
                }
                State::After => {
                    let drain_after = matches!(&self.answer, Answer::Dummy(p) if p.drain_after)
                        || self.limit_reached;
                    if self.body_left && drain_after {
                        self.state = State::ReadingAfter;
                        continue;
                    }
                    self.state = State::Done(self.ending());
                }
                State::Done(ending) => return Step::Done(ending),
            }
        }
    }

    /// The body goes in pieces: `p`, or `k=2` on HTTP/2 and HTTP/3 (one byte per DATA frame).
    fn in_pieces(&self) -> bool {
        match &self.answer {
            Answer::Dummy(plan) => {
                plan.size > 0 && (plan.pieces > 0 || (plan.byte_chunks && !self.version.is_h1()))
            }
            _ => false,
        }
    }

    /// The next piece of a body in pieces, the last chunk after them, or `None` at their end.
    fn piece(&mut self) -> Option<Step> {
        let Answer::Dummy(plan) = &self.answer else {
            unreachable!("only dummy bodies go in pieces")
        };
        let (size, offset) = (plan.size, self.piece_off);
        let (chunked, byte_chunks) = (self.chunked_te, self.chunked_te && plan.byte_chunks);
        if offset == size {
            self.state = State::Pause;
            return chunked.then_some(Step::Body(Body::Piece(Piece {
                kind: plan.body,
                offset,
                len: 0,
                chunked,
                byte_chunks,
                last: true,
            })));
        }
        let len = if plan.pieces > 0 {
            1 + u64::from(self.piece_rng.next_u32() % plan.pieces)
        } else {
            1
        }
        .min(size - offset);
        self.piece_off += len;
        let end = self.piece_off == size;
        let last = end && !chunked && !self.more_after_body(plan);
        self.state = if plan.pieces > 0 && !end {
            State::PiecePause
        } else {
            State::Pieces
        };
        Some(Step::Body(Body::Piece(Piece {
            kind: plan.body,
            offset,
            len,
            chunked,
            byte_chunks,
            last,
        })))
    }

    /// Something follows the response body on its stream: the rest of the request body
    /// (`A=1`, `B`) or a pause (`P`). HTTP/2 and HTTP/3 end the stream only after it.
    fn more_after_body(&self, plan: &Plan) -> bool {
        (self.body_left && (plan.drain_after || self.limit_reached)) || plan.pause_ms > 0
    }

    fn ending(&self) -> ExchangeEnd {
        match &self.answer {
            Answer::Dummy(plan) if plan.is_informational() => ExchangeEnd::NoFinal,
            Answer::Dummy(_) if self.keep_alive => ExchangeEnd::KeepAlive,
            Answer::Dummy(_) if !self.version.is_h1() => ExchangeEnd::KeepAlive,
            _ => ExchangeEnd::Close,
        }
    }

    fn head(&mut self, now: Instant) -> ResponseHead {
        let h1 = self.version.is_h1();
        match &self.answer {
            Answer::Dummy(plan) => {
                let t_req = *self.t_req.get_or_insert(now);
                let timing = Timing {
                    req_bytes: self.req_bytes,
                    req_ms: ms_between(self.t_first, t_req),
                    real_ms: ms_between(t_req, now),
                };
                let kind = HeadKind::Dummy {
                    plan: plan.into(),
                    timing,
                };
                if h1 {
                    let req = h1::H1Request {
                        is_11: self.version == Version::Http11,
                        conn_close: self.conn_close,
                        conn_keep_alive: self.conn_keep_alive,
                        is_head: self.is_head,
                    };
                    let fr = h1::framing(&req, plan);
                    self.keep_alive = fr.keep_alive;
                    self.chunked_te = fr.chunked_te;
                    return ResponseHead {
                        status: plan.status,
                        h1_11: fr.response_11,
                        content_length: fr.content_length,
                        no_cache: !plan.cacheable,
                        kind,
                        connection: fr.conn_header,
                        chunked: fr.chunked_te,
                        last: plan.size == 0 && !fr.chunked_te,
                        date: self.date,
                        etag: plan.etag,
                    };
                }
                if plan.is_informational() {
                    return ResponseHead::interim(plan.status);
                }
                // No connection or transfer-encoding fields here: C/K/k only drop the length. A
                // lying `b` is sent as asked: the DATA frames still carry the real body and end
                // the stream, so framing and flow control hold; the client finds the response
                // malformed (RFC 9113 §8.1.1, RFC 9114 §4.1.2) and says so.
                let length = plan.has_length_header() && !plan.chunked;
                let content_length = match plan.length {
                    Some(b) if length => Some(b),
                    _ => {
                        (length && plan.conn != ConnForce::Close).then_some(plan.announced_length())
                    }
                };
                ResponseHead {
                    status: plan.status,
                    h1_11: true,
                    content_length,
                    no_cache: !plan.cacheable,
                    kind,
                    connection: None,
                    chunked: false,
                    last: plan.size == 0 && !self.more_after_body(plan),
                    date: self.date,
                    etag: plan.etag,
                }
            }
            Answer::Help => ResponseHead {
                status: 200,
                // HTTP/1.x: an HTTP/1.0 close-delimited page, as haterm's.
                h1_11: false,
                content_length: (!h1).then_some(pages::help().len() as u64),
                no_cache: true,
                kind: HeadKind::Text,
                connection: None,
                chunked: false,
                last: self.is_head,
                date: self.date,
                etag: None,
            },
            Answer::Text { status, text } => ResponseHead {
                status: *status,
                h1_11: true,
                content_length: Some(text.len() as u64),
                no_cache: true,
                kind: HeadKind::Text,
                connection: h1.then_some(h1::ConnHeader::Close),
                chunked: false,
                last: self.is_head,
                date: self.date,
                etag: None,
            },
        }
    }

    fn body(&self) -> Option<Body> {
        match &self.answer {
            Answer::Dummy(plan) => {
                let chunked = self.chunked_te;
                (plan.size > 0 || chunked).then_some(Body::Generated(Generated {
                    kind: plan.body,
                    size: plan.size,
                    chunked,
                    byte_chunks: chunked && plan.byte_chunks,
                    zero_copy: plan.zero_copy,
                    last: !self.more_after_body(plan),
                }))
            }
            _ if self.is_head => None,
            Answer::Help => Some(Body::Text(Cow::Borrowed(pages::help()))),
            Answer::Text { text, .. } => Some(Body::Text(text.clone())),
        }
    }
}

/// RFC 9110 §13.2.2, for a plan with an ETag: a false `If-Match` gives 412; else a true
/// `If-None-Match` gives 304 to GET and HEAD, 412 to other methods. Only a response that would
/// be 2xx is conditional (§13.2.1); the 304 keeps the ETag, the 412 has an empty body.
fn conditional(plan: &mut Plan, req: &RequestSummary<'_>) {
    let Some(tag) = plan.etag else { return };
    if !(200..300).contains(&plan.status) {
        return;
    }
    let status = match (req.if_match, req.if_none_match) {
        (Some(list), _) if !etag_matches(list, tag, false) => 412,
        (_, Some(list)) if etag_matches(list, tag, true) => {
            if req.is_get || req.is_head {
                304
            } else {
                412
            }
        }
        _ => return,
    };
    plan.status = status;
    plan.size = 0;
    plan.get_size = 0;
    plan.length = None;
}

/// Whether a field value (`*` or a list of entity-tags) matches our strong tag `"XXXXXXXX"`.
/// Weak comparison ignores a `W/` prefix; strong comparison never matches a weak tag.
fn etag_matches(list: &[u8], tag: u32, weak: bool) -> bool {
    if list.trim_ascii() == b"*" {
        return true;
    }
    let ours = head::etag_text(tag);
    list.split(|&b| b == b',').any(|item| {
        let item = item.trim_ascii();
        match item.strip_prefix(b"W/") {
            Some(opaque) => weak && opaque == ours,
            None => item == ours,
        }
    })
}

/// Whole milliseconds from `a` to `b`. Most requests are answered at the instant their head was
/// read (`a == b`): that case skips the clock arithmetic, which showed in profiles.
fn ms_between(a: Instant, b: Instant) -> u64 {
    if b <= a {
        return 0;
    }
    b.duration_since(a).as_millis() as u64
}

#[cfg(test)]
mod tests;

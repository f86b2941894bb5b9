//! One HTTP/3 request/response exchange on a bidirectional QUIC stream, as a state machine the
//! connection (`conn`) runs. Response bodies go to quinn-proto as static `Bytes` (zero copy):
//! with the `h3` crate every body byte was copied into a fresh buffer first, and the packet
//! builder then read that cold copy (perf, H3 256k: 13% of server CPU in memcpy).

use super::recv::{Broken, Pulled, Recv};
use crate::config::Config;
use crate::plumbing::stats::{self, CountedError, Protection, Proto};
use bytes::{Buf, Bytes};
use http::{HeaderName, HeaderValue};
use loadterm_exchange::{
    Action, BodyFailure, BodyRead, Exchange, ExchangeEnd, HeadBuilder, ResponseHead, StepDriver,
    Version,
};
use loadterm_h3::fields::{self, BodyLength, FieldError, RequestFacts, RequestFields};
use loadterm_h3::frame::{self, code};
use loadterm_h3::message::{Message, MessageError, MessageEvent};
use loadterm_h3::qpack::{self, QpackError};
use loadterm_plan::body::{self, BodyKind};
use loadterm_plan::pages::ErrorPage;
use quinn_proto::{self as proto, StreamId};
use std::cell::RefCell;
use std::time::{Duration, Instant};

/// What the server takes from a request's field section: what the exchange reads of it, and
/// its validation.
#[derive(Default)]
struct H3RequestHead {
    decoder: qpack::QpackDecoder,
    fields: RequestFields,
    request: HeadBuilder,
}

/// Why a request's field section is refused.
enum HeadError {
    Qpack(QpackError),
    Malformed(FieldError),
}

impl H3RequestHead {
    /// Decode and validate a field section.
    fn decode(&mut self, section: &[u8], max: u64) -> Result<RequestFacts, HeadError> {
        let H3RequestHead {
            decoder,
            fields,
            request,
        } = self;
        request.begin();
        fields.begin();
        let decoded = decoder.decode(section, max, |name, value| {
            fields.field(name, value);
            request.field(name, value);
        });
        decoded.map_err(HeadError::Qpack)?;
        fields.finish().map_err(HeadError::Malformed)
    }

    /// Decode and validate a trailer section (nothing in it is used).
    fn trailers(&mut self, section: &[u8], max: u64) -> Result<(), HeadError> {
        let mut first = Ok(());
        self.decoder
            .decode(section, max, |name, value| {
                if first.is_ok() {
                    first = fields::trailer_field(name, value);
                }
            })
            .map_err(HeadError::Qpack)?;
        first.map_err(HeadError::Malformed)
    }
}

thread_local! {
    /// Decoded request heads, reused: decoding allocates nothing once warm.
    static HEAD: RefCell<H3RequestHead> = RefCell::default();
    /// Rendered x-req/x-rsp values.
    static SCRATCH: RefCell<Vec<u8>> = RefCell::default();
}

/// A HEADERS frame for `head` in one buffer: the section is written after room for the frame
/// head (type and a 2-byte length), then the frame head is put just before it, its start
/// returned.
fn headers_frame(
    out: &mut Vec<u8>,
    head: &ResponseHead,
    extra: &[(HeaderName, HeaderValue)],
) -> usize {
    out.extend_from_slice(&[0; 3]);
    qpack::begin_response(out, head.status);
    SCRATCH.with(|s| {
        head.fields(
            &mut s.borrow_mut(),
            &crate::plumbing::thread_ctx::date(),
            |name, value| qpack::field(out, name, value),
        )
    });
    for (name, value) in extra {
        qpack::field(out, name.as_str(), value.as_bytes());
    }
    let len = out.len() - 3;
    let mut head = Vec::with_capacity(3);
    frame::put_frame_head(&mut head, frame::HEADERS, len as u64);
    if head.len() > 3 {
        // Not with the fields we send (well under 16 KiB), but stay correct regardless.
        out.splice(0..3, head);
        return 0;
    }
    let start = 3 - head.len();
    out[start..3].copy_from_slice(&head);
    start
}

/// Why a request stream is abandoned.
enum Abort {
    /// Reset both directions with this code.
    Reset(u32),
    /// The connection must close with this code.
    Connection(u32),
    /// Answer with this status (431, 408) and end.
    Status(ErrorPage),
}

impl From<MessageError> for Abort {
    fn from(e: MessageError) -> Abort {
        if e.is_connection_error() {
            Abort::Connection(e.code())
        } else {
            Abort::Reset(e.code())
        }
    }
}

/// What a run of a request came to.
pub(super) enum H3Progress {
    /// Waiting: for the stream (quinn-proto reports it readable or writable) or until `wake`.
    Pending,
    /// Over: the idle time the request set for the connection (`w`), and whether the stream
    /// was finished (its answer then goes on until acknowledged) rather than reset.
    Done {
        idle: Option<Duration>,
        finished: bool,
    },
    /// The client broke the protocol: the connection closes with this code.
    Close(u32),
}

/// A request stream being answered: the request's head read, then its exchange carried out
/// action by action (`StepDriver::poll`), each action's frames written before the next.
pub(super) struct H3Request {
    pub(super) id: StreamId,
    /// quinn-proto reported the stream readable, writable or stopped: run it.
    pub(super) dirty: bool,
    /// Run it then, too (a timeout, a delay).
    pub(super) wake: Option<Instant>,
    recv: Recv,
    /// The request's frames.
    msg: Message,
    t_first: Instant,
    phase: Phase,
    /// The request was read to its end.
    read_all: bool,
    /// The request's `content-length`, checked against its DATA.
    content_length: Option<u64>,
    /// DATA received so far (a body may be read in two parts, `B`), against the length.
    length: Option<BodyLength>,
}

enum Phase {
    /// Reading the request's head, until the deadline (then 408).
    Head {
        deadline: Instant,
    },
    Exchange(Box<Answering>),
}

/// An exchange under way.
struct Answering {
    steps: StepDriver,
    /// `w` of the request.
    idle: Option<Duration>,
    /// A write not taken whole by then is given up (the client stopped reading).
    write_deadline: Option<Instant>,
    /// A delay or pause until then.
    wait: Option<Instant>,
    /// A request body being read.
    reading: Option<Reading>,
    /// The exchange is over: once `out` is written, the stream ends.
    ended: bool,
    /// A response head (its buffer, and where the frame starts in it) waiting to go out with
    /// the body's first bytes.
    pending: Option<(Vec<u8>, usize)>,
    /// What is being written.
    out: Out,
    /// The status of the final head (0: none yet).
    status: u16,
}

/// An `Action::ReadBody` under way.
struct Reading {
    limit: Option<u64>,
    /// Body bytes read before it.
    before: u64,
    deadline: Instant,
}

/// Frames and body bytes to write: `frame`, then `body`'s static slices (zero copy).
#[derive(Default)]
struct Out {
    frame: Bytes,
    /// The body's kind and the range still to go.
    body: Option<(BodyKind, u64, u64)>,
}

impl Out {
    fn is_empty(&self) -> bool {
        self.frame.is_empty() && self.body.is_none()
    }

    /// Write as much as the stream takes: true once all is.
    fn write(&mut self, send: &mut proto::SendStream) -> Result<bool, proto::WriteError> {
        loop {
            // Up to 16 slices of the body (1 MiB) at a time.
            let mut chunks: [Bytes; 17] = Default::default();
            let mut n = 0;
            if !self.frame.is_empty() {
                chunks[0] = self.frame.clone();
                n = 1;
            }
            if let Some((kind, mut off, end)) = self.body {
                while off < end && n < chunks.len() {
                    let len = (end - off).min(body::WINDOW as u64) as usize;
                    chunks[n] = Bytes::from_static(body::slice(kind, off, len));
                    off += len as u64;
                    n += 1;
                }
            }
            if n == 0 {
                return Ok(true);
            }
            let written = match send.write_chunks(&mut chunks[..n]) {
                Ok(w) if w.bytes > 0 => w.bytes,
                Ok(_) | Err(proto::WriteError::Blocked) => return Ok(false),
                Err(e) => return Err(e),
            };
            let from_frame = written.min(self.frame.len());
            self.frame.advance(from_frame);
            if let Some((_, off, end)) = &mut self.body {
                *off += (written - from_frame) as u64;
                if off == end {
                    self.body = None;
                }
            }
        }
    }
}

impl H3Request {
    pub(super) fn new(id: StreamId, now: Instant, cfg: &Config) -> H3Request {
        H3Request {
            id,
            dirty: true,
            wake: None,
            recv: Recv::new(id),
            msg: Message::request(cfg.h3.h3_max_header_list),
            t_first: now,
            phase: Phase::Head {
                deadline: now + cfg.timeout,
            },
            read_all: false,
            content_length: None,
            length: None,
        }
    }

    /// Go as far as the stream and the clock allow.
    pub(super) fn run(
        &mut self,
        q: &mut proto::Connection,
        now: Instant,
        cfg: &Config,
        extra: &[(HeaderName, HeaderValue)],
    ) -> H3Progress {
        self.wake = None;
        if let Phase::Head { deadline } = self.phase {
            let x = match self.request_head(q, cfg) {
                Ok(Some(x)) => x,
                Ok(None) if now < deadline => {
                    self.wake = Some(deadline);
                    return H3Progress::Pending;
                }
                // A request whose head does not arrive in time gets 408, as on HTTP/1.1.
                Ok(None) => self.error_page(ErrorPage::Timeout, cfg),
                Err(Abort::Status(page)) => self.error_page(page, cfg),
                Err(Abort::Reset(code)) => {
                    stats::error(CountedError::Protocol);
                    self.reset(q, code);
                    return H3Progress::Done {
                        idle: None,
                        finished: false,
                    };
                }
                Err(Abort::Connection(code)) => {
                    stats::error(CountedError::Protocol);
                    return H3Progress::Close(code);
                }
            };
            self.phase = Phase::Exchange(Box::new(Answering {
                idle: x.idle(),
                steps: StepDriver::new(x, self.t_first),
                write_deadline: None,
                wait: None,
                reading: None,
                ended: false,
                pending: None,
                out: Out::default(),
                status: 0,
            }));
        }
        match self.steps(q, now, cfg, extra) {
            Ok(p) => p,
            Err(Abort::Reset(code)) => {
                stats::aborted(Proto::H3, 1);
                self.reset(q, code);
                H3Progress::Done {
                    idle: None,
                    finished: false,
                }
            }
            Err(Abort::Connection(code)) => {
                stats::error(CountedError::Protocol);
                stats::aborted(Proto::H3, 1);
                H3Progress::Close(code)
            }
            Err(Abort::Status(_)) => unreachable!("body failures go through the exchange"),
        }
    }

    fn error_page(&self, page: ErrorPage, cfg: &Config) -> Exchange {
        stats::error_page(page);
        Exchange::error(page, Version::H3, cfg.date, self.t_first)
    }

    fn reset(&mut self, q: &mut proto::Connection, code: u32) {
        let _ = q.send_stream(self.id).reset(code.into());
        let _ = q.recv_stream(self.id).stop(code.into());
    }

    /// Read up to the request's field section, skipping unknown (grease) frames before its
    /// HEADERS, then decode it and plan the exchange; `None` until the head is in.
    fn request_head(
        &mut self,
        q: &mut proto::Connection,
        cfg: &Config,
    ) -> Result<Option<Exchange>, Abort> {
        match next_event(q, &mut self.recv, &mut self.msg)? {
            None => return Ok(None),
            Some(MessageEvent::Headers) => {}
            Some(MessageEvent::TooLarge) => return Err(Abort::Status(ErrorPage::HeadersTooLarge)),
            // Not produced before a request's HEADERS (`Message` errors instead).
            Some(_) => return Err(Abort::Reset(code::REQUEST_INCOMPLETE)),
        }
        let t_first = self.t_first;
        HEAD.with(|h| {
            let head = &mut *h.borrow_mut();
            let max = cfg.h3.h3_max_header_list;
            let facts = head.decode(self.msg.section(), max).map_err(|e| match e {
                HeadError::Qpack(QpackError::TooLarge) => Abort::Status(ErrorPage::HeadersTooLarge),
                HeadError::Qpack(QpackError::Decompression) => {
                    Abort::Connection(code::QPACK_DECOMPRESSION_FAILED)
                }
                HeadError::Malformed(_) => Abort::Reset(code::MESSAGE_ERROR),
            })?;
            if facts.connect {
                // No tunnels here; the request was not acted on.
                return Err(Abort::Reset(code::REQUEST_REJECTED));
            }
            self.content_length = facts.content_length;
            let h = &head.request;
            // Whether the stream ends after its HEADERS is only known by reading on.
            let req = h.summary(Version::H3, true, h.text_size(), cfg.date);
            Ok(Some(crate::plumbing::thread_ctx::exchange(&req, t_first)))
        })
    }

    /// Carry out the step driver's actions: each one's frames are written whole before the
    /// next is asked for.
    fn steps(
        &mut self,
        q: &mut proto::Connection,
        now: Instant,
        cfg: &Config,
        extra: &[(HeaderName, HeaderValue)],
    ) -> Result<H3Progress, Abort> {
        let Phase::Exchange(run) = &mut self.phase else {
            unreachable!("the head is read first")
        };
        loop {
            if !run.out.is_empty() {
                let deadline = *run.write_deadline.get_or_insert(now + cfg.timeout);
                match run.out.write(&mut q.send_stream(self.id)) {
                    Ok(true) => run.write_deadline = None,
                    Ok(false) if now < deadline => {
                        self.wake = Some(deadline);
                        return Ok(H3Progress::Pending);
                    }
                    // The client stopped reading: dropped.
                    Ok(false) => {
                        stats::protection(Protection::WriteTimeout);
                        return Err(Abort::Reset(code::REQUEST_CANCELLED));
                    }
                    // Stopped by the client, or the connection is gone.
                    Err(_) => {
                        stats::error(CountedError::Reset);
                        return Err(Abort::Reset(code::REQUEST_CANCELLED));
                    }
                }
            }
            if let Some(t) = run.wait {
                if now < t {
                    self.wake = Some(t);
                    return Ok(H3Progress::Pending);
                }
                run.wait = None;
                run.steps.resumed(now);
            }
            if let Some(r) = &run.reading {
                let (limit, before, deadline) = (r.limit, r.before, r.deadline);
                let read = read_body(
                    q,
                    &mut self.recv,
                    &mut self.msg,
                    &mut self.length,
                    self.content_length,
                    (limit, before),
                    cfg.h3.h3_max_header_list,
                );
                let how = match read {
                    Ok(None) if now < deadline => {
                        self.wake = Some(deadline);
                        return Ok(H3Progress::Pending);
                    }
                    Ok(None) => BodyRead::Failed(BodyFailure::Timeout),
                    Ok(Some(true)) => BodyRead::Ended,
                    Ok(Some(false)) => BodyRead::LimitReached,
                    Err(e) => return Err(e),
                };
                let received = self.length.map_or(0, |l| l.received());
                self.read_all = how == BodyRead::Ended;
                run.steps.body_read(received - before, how, now);
                run.reading = None;
            }
            if run.ended {
                // Complete, or a 1xx as the only head: the stream ends with what was sent (a
                // reset could overtake an interim head).
                let _ = q.send_stream(self.id).finish();
                if !self.read_all {
                    let _ = q.recv_stream(self.id).stop(code::NO_ERROR.into());
                }
                if run.status >= 200 {
                    stats::served(Proto::H3, run.status);
                }
                return Ok(H3Progress::Done {
                    idle: run.idle,
                    finished: true,
                });
            }
            match run.steps.poll() {
                // Sent at once: the client may wait for it (`100 Continue`).
                Action::Interim(head) => {
                    stats::interim(Proto::H3);
                    run.head(&head, extra);
                    run.flush();
                }
                // It goes out with the body's first bytes.
                Action::Head(head) => {
                    run.status = head.status;
                    run.head(&head, extra);
                }
                Action::Text(text) => {
                    let mut out = run.take_pending();
                    frame::put_frame(&mut out, frame::DATA, text.as_bytes());
                    run.out.frame = out.into();
                }
                Action::Generated(g) => run.data(g.kind, 0, g.size),
                Action::Piece(p) => run.data(p.kind, p.offset, p.len),
                Action::ReadBody { limit } => {
                    run.reading = Some(Reading {
                        limit,
                        before: self.length.map_or(0, |l| l.received()),
                        deadline: now + cfg.timeout,
                    });
                }
                Action::Flush => run.flush(),
                Action::WaitUntil(t) => run.wait = Some(t),
                Action::Pause(d) => run.wait = Some(now + d),
                Action::Done(ExchangeEnd::Abort) => {
                    return Err(Abort::Reset(code::REQUEST_CANCELLED))
                }
                Action::Done(
                    ExchangeEnd::KeepAlive | ExchangeEnd::Close | ExchangeEnd::NoFinal,
                ) => {
                    run.flush();
                    run.ended = true;
                }
            }
            if !run.out.is_empty() {
                run.write_deadline = Some(now + cfg.timeout);
            }
        }
    }
}

impl Answering {
    /// Encode a response head; it goes out with the body's first bytes, or at the next flush.
    fn head(&mut self, head: &ResponseHead, extra: &[(HeaderName, HeaderValue)]) {
        let mut out = Vec::with_capacity(256);
        let start = headers_frame(&mut out, head, extra);
        self.pending = Some((out, start));
    }

    /// The pending head's frame (or nothing), to append frames to.
    fn take_pending(&mut self) -> Vec<u8> {
        match self.pending.take() {
            Some((mut out, start)) => {
                out.drain(..start);
                out
            }
            None => Vec::new(),
        }
    }

    /// Send the pending head, if any.
    fn flush(&mut self) {
        if self.pending.is_some() {
            self.out.frame = self.take_pending().into();
        }
    }

    /// One DATA frame of `len` body bytes of `kind` from `offset` (with the pending head, if
    /// any), the body by reference.
    fn data(&mut self, kind: BodyKind, offset: u64, len: u64) {
        let mut first = self.take_pending();
        frame::put_frame_head(&mut first, frame::DATA, len);
        self.out.frame = first.into();
        self.out.body = (len > 0).then_some((kind, offset, offset + len));
    }
}

/// The next event of a request's frames; `None` until more comes. DATA is counted in place
/// (one event per chunk), never copied.
fn next_event(
    q: &mut proto::Connection,
    recv: &mut Recv,
    msg: &mut Message,
) -> Result<Option<MessageEvent>, MessageError> {
    loop {
        let fin = match recv.pull(q) {
            Ok(Pulled::Bytes) => false,
            Ok(Pulled::Fin) => true,
            Ok(Pulled::Blocked) => return Ok(None),
            Err(Broken) => return Err(MessageError::Broken),
        };
        let (n, event) = msg.poll(&recv.chunk, fin)?;
        recv.chunk.advance(n);
        // At the end of the stream `poll` always has an event or an error.
        if event.is_some() {
            return Ok(event);
        }
    }
}

/// Read the rest of the request (body DATA, trailers, unknown frames), counting body bytes in
/// `length`: to its end (`Some(true)`), until `limit` more body bytes than `before` were read
/// (`Some(false)`), or `None` until more comes.
fn read_body(
    q: &mut proto::Connection,
    recv: &mut Recv,
    msg: &mut Message,
    length: &mut Option<BodyLength>,
    content_length: Option<u64>,
    (limit, before): (Option<u64>, u64),
    max_section: u64,
) -> Result<Option<bool>, Abort> {
    let length = length.get_or_insert_with(|| BodyLength::new(content_length));
    let malformed = |_: FieldError| Abort::Reset(code::MESSAGE_ERROR);
    loop {
        if limit.is_some_and(|u| length.received() - before >= u) {
            return Ok(Some(false));
        }
        match next_event(q, recv, msg)? {
            None => return Ok(None),
            Some(MessageEvent::Data(n)) => length.data(n).map_err(malformed)?,
            Some(MessageEvent::End) => return length.end().map_err(malformed).map(|()| Some(true)),
            Some(MessageEvent::Trailers) => {
                let section = msg.section();
                HEAD.with(|h| h.borrow_mut().trailers(section, max_section))
                    .map_err(|e| match e {
                        HeadError::Qpack(QpackError::Decompression) => {
                            Abort::Connection(code::QPACK_DECOMPRESSION_FAILED)
                        }
                        // Too late for a 431: the response may be out.
                        HeadError::Qpack(QpackError::TooLarge) => Abort::Reset(code::MESSAGE_ERROR),
                        HeadError::Malformed(e) => malformed(e),
                    })?;
            }
            _ => {}
        }
    }
}

//! One HTTP/3 request/response exchange on a bidirectional QUIC stream. Response bodies go to
//! quinn as static `Bytes` (zero copy): with the `h3` crate every body byte was copied into a
//! fresh buffer first, and quinn's packet builder then read that cold copy (perf, H3 256k:
//! 13% of server CPU in memcpy).

use crate::config::Config;
use crate::plumbing::stats::{self, CountedError, Protection, Proto};
use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use loadterm_exchange::{
    join_field_line, BodyFailure, BodyRead, Engine, Exchange, ExchangeEnd, Generated, Piece,
    ResponseHead, Version,
};
use loadterm_h3::fields::{self, BodyLength, FieldError, RequestFacts, RequestFields};
use loadterm_h3::frame::{self, code};
use loadterm_h3::message::{Message, MessageError, MessageEvent};
use loadterm_h3::qpack::{self, QpackError};
use loadterm_h3::reader::Reader;
use loadterm_plan::body::{self, BodyKind};
use loadterm_plan::pages::ErrorPage;
use std::borrow::Cow;
use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the server takes from a request's field section.
#[derive(Default)]
struct H3RequestHead {
    decoder: qpack::QpackDecoder,
    fields: RequestFields,
    method: Vec<u8>,
    path: Vec<u8>,
    /// The `x-loadterm` control header, if any.
    control: Option<Vec<u8>>,
    /// Regular fields as `name: value\r\n`, for the x-req size.
    field_bytes: u64,
    /// `expect: 100-continue` was sent.
    expect: bool,
    /// `if-match` and `if-none-match` values, repeated fields joined with commas.
    if_match: Option<Vec<u8>>,
    if_none_match: Option<Vec<u8>>,
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
            method,
            path,
            control,
            field_bytes,
            expect,
            if_match,
            if_none_match,
        } = self;
        method.clear();
        path.clear();
        *control = None;
        *if_match = None;
        *if_none_match = None;
        *field_bytes = 0;
        *expect = false;
        fields.begin();
        let decoded = decoder.decode(section, max, |name, value| {
            fields.field(name, value);
            match name {
                b":method" => method.extend_from_slice(value),
                b":path" => path.extend_from_slice(value),
                n if n.starts_with(b":") => {}
                n => {
                    *field_bytes += (n.len() + value.len() + 4) as u64;
                    if n == loadterm_plan::CONTROL_HEADER.as_bytes() {
                        *control = Some(value.to_vec());
                    }
                    *expect |= n == b"expect" && value.eq_ignore_ascii_case(b"100-continue");
                    match n {
                        b"if-match" => join_field_line(if_match, value),
                        b"if-none-match" => join_field_line(if_none_match, value),
                        _ => {}
                    }
                }
            }
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

/// A request stream being answered.
struct H3Stream {
    send: quinn::SendStream,
    recv: Reader,
    timeout: Duration,
    /// The request's frames.
    msg: Message,
    /// The request was read to its end.
    read_all: bool,
    /// The request's `content-length`, checked against its DATA.
    content_length: Option<u64>,
    /// DATA received so far (a body may be read in two parts, `B`), against the length.
    length: Option<BodyLength>,
    /// `--h3-max-header-list`, for the trailers.
    max_section: u64,
    /// A response head (its buffer, and where the frame starts in it) waiting to go out with
    /// the body's first bytes.
    pending: Option<(Vec<u8>, usize)>,
    /// Fields added to every response of the connection (`x-ja4`).
    extra: Arc<[(HeaderName, HeaderValue)]>,
    /// The status of the final head (0: none yet).
    status: u16,
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

impl H3Stream {
    fn reset(&mut self, code: u32) {
        let _ = self.send.reset(code.into());
        self.recv.stop(code);
    }

    /// Write frames (and body slices) whole, bounded by the client timeout: a client that stops
    /// reading is dropped.
    async fn write(&mut self, chunks: &mut [Bytes]) -> bool {
        match tokio::time::timeout(self.timeout, self.send.write_all_chunks(chunks)).await {
            Ok(Ok(())) => true,
            // Stopped by the client, or the connection is gone.
            Ok(Err(_)) => {
                stats::error(CountedError::Reset);
                false
            }
            Err(_) => {
                stats::protection(Protection::WriteTimeout);
                false
            }
        }
    }

    /// Read up to the request's field section (then in `self.msg.section()`), skipping unknown
    /// (grease) frames before its HEADERS.
    async fn request_head(&mut self) -> Result<(), Abort> {
        match self.recv.event(&mut self.msg).await? {
            MessageEvent::Headers => Ok(()),
            MessageEvent::TooLarge => Err(Abort::Status(ErrorPage::HeadersTooLarge)),
            // Not produced before a request's HEADERS (`Message` errors instead).
            _ => Err(Abort::Reset(code::REQUEST_INCOMPLETE)),
        }
    }

    /// Read the rest of the request (body DATA, trailers, unknown frames), counting body bytes
    /// into `bytes`: to its end (true), or until `upto` more body bytes were read (false).
    async fn read_body(&mut self, bytes: &mut u64, upto: Option<u64>) -> Result<bool, Abort> {
        let timeout = self.timeout;
        let mut length = self
            .length
            .unwrap_or_else(|| BodyLength::new(self.content_length));
        let before = length.received();
        let malformed = |_: FieldError| Abort::Reset(code::MESSAGE_ERROR);
        let drain = async {
            loop {
                if upto.is_some_and(|u| length.received() - before >= u) {
                    return Ok(false);
                }
                match self.recv.event(&mut self.msg).await? {
                    MessageEvent::Data(n) => length.data(n).map_err(malformed)?,
                    MessageEvent::End => return length.end().map_err(malformed).map(|()| true),
                    MessageEvent::Trailers => {
                        let section = self.msg.section();
                        HEAD.with(|h| h.borrow_mut().trailers(section, self.max_section))
                            .map_err(|e| match e {
                                HeadError::Qpack(QpackError::Decompression) => {
                                    Abort::Connection(code::QPACK_DECOMPRESSION_FAILED)
                                }
                                // Too late for a 431: the response may be out.
                                HeadError::Qpack(QpackError::TooLarge) => {
                                    Abort::Reset(code::MESSAGE_ERROR)
                                }
                                HeadError::Malformed(e) => malformed(e),
                            })?;
                    }
                    _ => {}
                }
            }
        };
        let r = tokio::time::timeout(timeout, drain)
            .await
            .unwrap_or(Err(Abort::Status(ErrorPage::Timeout)));
        *bytes = length.received() - before;
        self.length = Some(length);
        self.read_all = matches!(r, Ok(true));
        r
    }
}

/// Serve one request stream. Returns its send side (finished or reset; a connection that
/// closes must let finished ones be acknowledged first) and the idle time the request set for
/// the connection (`w`), or the connection error code if the peer broke the protocol.
pub(super) async fn serve(
    send: quinn::SendStream,
    recv: quinn::RecvStream,
    cfg: &Config,
    extra: Arc<[(HeaderName, HeaderValue)]>,
) -> Result<(quinn::SendStream, Option<Duration>), u32> {
    let mut s = H3Stream {
        send,
        recv: Reader::new(recv),
        timeout: cfg.timeout,
        msg: Message::request(cfg.h3.h3_max_header_list),
        read_all: false,
        content_length: None,
        length: None,
        max_section: cfg.h3.h3_max_header_list,
        pending: None,
        extra,
        status: 0,
    };
    let t_first = Instant::now();
    let x = match request(&mut s, cfg, t_first).await {
        Ok(x) => x,
        Err(Abort::Reset(code)) => {
            stats::error(CountedError::Protocol);
            s.reset(code);
            return Ok((s.send, None));
        }
        Err(Abort::Connection(code)) => {
            stats::error(CountedError::Protocol);
            return Err(code);
        }
        Err(Abort::Status(page)) => {
            stats::error_page(page);
            Exchange::error(page, Version::H3, cfg.date, t_first)
        }
    };
    let idle = x.idle();
    match answer(&mut s, x, t_first).await {
        Ok(()) if s.status >= 200 => stats::served(Proto::H3, s.status),
        Ok(()) => {}
        Err(Abort::Reset(code)) => {
            stats::aborted(Proto::H3, 1);
            s.reset(code);
        }
        Err(Abort::Connection(code)) => {
            stats::error(CountedError::Protocol);
            stats::aborted(Proto::H3, 1);
            return Err(code);
        }
        Err(Abort::Status(_)) => unreachable!("body failures go through the exchange"),
    }
    Ok((s.send, idle))
}

/// Read the request's head, decode it and plan the exchange.
async fn request(s: &mut H3Stream, cfg: &Config, t_first: Instant) -> Result<Exchange, Abort> {
    // A request whose head does not arrive in time gets 408, as on HTTP/1.1.
    tokio::time::timeout(cfg.timeout, s.request_head())
        .await
        .unwrap_or(Err(Abort::Status(ErrorPage::Timeout)))?;
    HEAD.with(|h| {
        let head = &mut *h.borrow_mut();
        let max = cfg.h3.h3_max_header_list;
        let facts = head.decode(s.msg.section(), max).map_err(|e| match e {
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
        s.content_length = facts.content_length;
        let req = loadterm_exchange::RequestSummary {
            version: Version::H3,
            is_head: head.method == b"HEAD",
            target: &head.path,
            control: head.control.as_deref(),
            expect_continue: head.expect,
            conn_close: false,
            conn_keep_alive: false,
            // Whether the stream ends after its HEADERS is only known by reading on.
            has_body: true,
            head_bytes: loadterm_exchange::head_bytes(
                head.method.len(),
                head.path.len(),
                head.field_bytes as usize,
            ),
            date: cfg.date,
            is_get: head.method == b"GET",
            if_match: head.if_match.as_deref(),
            if_none_match: head.if_none_match.as_deref(),
        };
        Ok(crate::plumbing::thread_ctx::exchange(&req, t_first))
    })
}

/// Carry out the exchange (`Engine`, below) and its end on the stream.
async fn answer(s: &mut H3Stream, mut x: Exchange, t_first: Instant) -> Result<(), Abort> {
    match x.drive(t_first, s).await? {
        ExchangeEnd::Abort => Err(Abort::Reset(code::REQUEST_CANCELLED)),
        // Complete, or a 1xx as the only head: the stream ends with what was sent (a reset
        // could overtake an interim head).
        ExchangeEnd::KeepAlive | ExchangeEnd::Close | ExchangeEnd::NoFinal => {
            s.flush().await?;
            let _ = s.send.finish();
            if !s.read_all {
                s.recv.stop(code::NO_ERROR);
            }
            Ok(())
        }
    }
}

impl H3Stream {
    /// Encode a response head; it goes out with the body's first bytes, or at the next flush.
    fn response_head(&mut self, head: &ResponseHead) {
        let mut out = Vec::with_capacity(256);
        let start = headers_frame(&mut out, head, &self.extra);
        self.pending = Some((out, start));
    }

    /// The pending head's buffer (and where the frame starts), to append frames to.
    fn take_pending(&mut self) -> (Vec<u8>, usize) {
        self.pending.take().unwrap_or_default()
    }

    async fn write_or_reset(&mut self, chunks: &mut [Bytes]) -> Result<(), Abort> {
        if self.write(chunks).await {
            Ok(())
        } else {
            Err(Abort::Reset(code::REQUEST_CANCELLED))
        }
    }

    async fn put_text(&mut self, text: &str) -> Result<(), Abort> {
        let (mut out, start) = self.take_pending();
        frame::put_frame(&mut out, frame::DATA, text.as_bytes());
        self.write_or_reset(&mut [Bytes::from(out).slice(start..)])
            .await
    }

    /// One DATA frame of `len` body bytes from `offset` (with the pending head, if any).
    async fn put_piece(&mut self, kind: BodyKind, offset: u64, len: u64) -> Result<(), Abort> {
        let (mut first, start) = self.take_pending();
        frame::put_frame_head(&mut first, frame::DATA, len);
        let data = Bytes::from_static(body::slice(kind, offset, len as usize));
        self.write_or_reset(&mut [Bytes::from(first).slice(start..), data])
            .await
    }

    /// The DATA frame head and the body as static slices (zero copy), up to 16 per write
    /// (1 MiB), the first write with the pending head.
    async fn put_generated(&mut self, kind: BodyKind, size: u64) -> Result<(), Abort> {
        let (mut first, start) = self.take_pending();
        frame::put_frame_head(&mut first, frame::DATA, size);
        let mut chunks: [Bytes; 17] = Default::default();
        chunks[0] = Bytes::from(first).slice(start..);
        let (mut n, mut off) = (1, 0u64);
        loop {
            while off < size && n < chunks.len() {
                let len = (size - off).min(body::WINDOW as u64) as usize;
                chunks[n] = Bytes::from_static(body::slice(kind, off, len));
                off += len as u64;
                n += 1;
            }
            self.write_or_reset(&mut chunks[..n]).await?;
            n = 0;
            if off == size {
                return Ok(());
            }
        }
    }
}

/// The HTTP/3 framing of an exchange's steps: a head waits to go out in one write with the
/// body's first bytes; body bytes go to quinn by reference.
impl Engine for H3Stream {
    type Error = Abort;

    fn now(&self) -> Instant {
        Instant::now()
    }

    /// Sent at once: the client may wait for it (`100 Continue`).
    async fn interim(&mut self, head: &ResponseHead) -> Result<(), Abort> {
        stats::interim(Proto::H3);
        self.response_head(head);
        self.flush().await
    }

    async fn head(&mut self, head: &ResponseHead) -> Result<(), Abort> {
        self.status = head.status;
        self.response_head(head);
        Ok(())
    }

    async fn text(&mut self, text: Cow<'static, str>) -> Result<(), Abort> {
        self.put_text(&text).await
    }

    async fn generated(&mut self, body: Generated) -> Result<(), Abort> {
        self.put_generated(body.kind, body.size).await
    }

    /// One DATA frame, written on its own.
    async fn piece(&mut self, p: Piece) -> Result<(), Abort> {
        self.put_piece(p.kind, p.offset, p.len).await
    }

    async fn drain(&mut self, limit: Option<u64>) -> Result<(u64, BodyRead), Abort> {
        let mut n = 0;
        let how = match self.read_body(&mut n, limit).await {
            Ok(true) => BodyRead::Ended,
            Ok(false) => BodyRead::LimitReached,
            Err(Abort::Status(_)) => BodyRead::Failed(BodyFailure::Timeout),
            Err(e) => return Err(e),
        };
        Ok((n, how))
    }

    /// The pending head, if any.
    async fn flush(&mut self) -> Result<(), Abort> {
        match self.pending.take() {
            Some((out, start)) => {
                self.write_or_reset(&mut [Bytes::from(out).slice(start..)])
                    .await
            }
            None => Ok(()),
        }
    }

    async fn sleep_until(&mut self, t: Instant) {
        loadterm_runtime::timer::sleep_until(t).await
    }
}

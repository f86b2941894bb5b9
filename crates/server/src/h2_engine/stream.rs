//! One HTTP/2 request/response exchange: carries out `loadterm_exchange`'s steps on an `h2`
//! stream. Steps that need no waiting run at once, in the connection's task; the first that
//! must wait (a request body, a delay, a large body) is held back (`Engine::hold`) and the
//! exchange goes on from it on a task of its own.

use crate::config::Config;
use crate::plumbing::stats::{self, CountedError, Protection, Proto};
use bytes::Bytes;
use futures::FutureExt;
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use loadterm_exchange::{
    join_field_line, Body, BodyFailure, BodyRead, Engine, Exchange, ExchangeEnd, Generated,
    HttpDate, Piece, ResponseHead, Step, Version,
};
use loadterm_plan::body;
use std::borrow::Cow;
use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bodies up to this size are queued whole by the inline path (h2 holds them until the
/// flow-control window opens).
const INLINE_BODY: u64 = 16 * 1024;

/// A request being answered.
pub(super) struct H2Stream {
    x: Exchange,
    /// The clock when the request came (the exchange reads it again only after a wait).
    now: Instant,
    out: Responder,
}

/// The stream's side of the exchange: its HTTP/2 framing (`Engine`).
struct Responder {
    body: RecvStream,
    respond: SendResponse<Bytes>,
    send: Option<SendStream<Bytes>>,
    /// Our side of the stream has ended.
    ended: bool,
    /// Fields added to every response of the connection.
    extra: Arc<[(HeaderName, HeaderValue)]>,
    /// The client timeout: for the request body, and for flow control to open.
    timeout: Duration,
    /// Steps are carried out in the connection's task: those that wait are held back.
    at_once: bool,
    /// The status of the final head sent (0: none yet).
    status: u16,
    /// Counted as served or aborted; a stream dropped uncounted (its connection died while it
    /// waited, or the stream failed) is counted as aborted then.
    counted: bool,
}

impl Drop for Responder {
    fn drop(&mut self) {
        if !self.counted {
            stats::aborted(Proto::H2, 1);
        }
    }
}

/// Why the steps stopped before the end.
enum Stop {
    /// A step that must wait, held back in the connection's task.
    Held(Step),
    /// The stream is gone (reset, or the client stopped reading); counted as aborted on drop.
    Gone,
}

thread_local! {
    /// The fields of the last head built on this thread. Benchmark traffic repeats the same head
    /// (same plan, timing and date second), and cloning a map (its values are shared) costs a
    /// fraction of building one field by field: measured in docs/PERFORMANCE.md.
    static LAST_FIELDS: RefCell<Option<(ResponseHead, HttpDate, HeaderMap)>> = const { RefCell::new(None) };
}

fn header_map(head: &ResponseHead, date: &HttpDate) -> Result<HeaderMap, http::Error> {
    let mut map = HeaderMap::with_capacity(8);
    let mut bad = None;
    head.fields(
        &mut Vec::with_capacity(96),
        date,
        |name, value| match HeaderValue::from_bytes(value) {
            Ok(v) => {
                map.append(HeaderName::from_static(name), v);
            }
            Err(e) => bad = Some(e),
        },
    );
    match bad {
        Some(e) => Err(e.into()),
        None => Ok(map),
    }
}

/// The values of a field, lines joined with commas (RFC 9110 §5.3); borrowed unless repeated.
fn joined(headers: &http::HeaderMap, name: http::header::HeaderName) -> Option<Cow<'_, [u8]>> {
    let mut values = headers.get_all(name).iter();
    let first = values.next()?.as_bytes();
    // One line (the usual case) is borrowed; more are joined.
    let mut all = None;
    for v in values {
        if all.is_none() {
            all = Some(first.to_vec());
        }
        join_field_line(&mut all, v.as_bytes());
    }
    Some(all.map_or(Cow::Borrowed(first), Cow::Owned))
}

/// The h2 crate leaves whitespace around values to the application.
fn untrimmed(v: &[u8]) -> bool {
    matches!(v.first(), Some(b' ' | b'\t')) || matches!(v.last(), Some(b' ' | b'\t'))
}

/// What the h2 crate lets through of RFC 9113 §8.1.1, §8.2.1, §8.3.1 and §8.5, checked in one
/// pass over the fields: the fields' size (for the x-req size) if the request is well formed,
/// else the reset to answer it with. A well-formed CONNECT is refused unprocessed (no tunnels
/// here).
fn check(req: &Request<RecvStream>) -> Result<usize, Reason> {
    let uri = req.uri();
    // None when absent: h2 refuses an empty one.
    let authority = uri.authority().map(|a| a.as_str().as_bytes());
    if req.method() == http::Method::CONNECT {
        return Err(match authority {
            Some(_) => Reason::REFUSED_STREAM,
            None => Reason::PROTOCOL_ERROR,
        });
    }
    // h2 refuses an empty `:path` (or `:authority`), and a missing `:path` only next to an
    // `:authority`.
    if uri.path().is_empty() {
        return Err(Reason::PROTOCOL_ERROR);
    }
    let (mut size, mut host) = (0, false);
    for (n, v) in req.headers() {
        let v = v.as_bytes();
        size += n.as_str().len() + v.len() + 4;
        if untrimmed(v) {
            return Err(Reason::PROTOCOL_ERROR);
        }
        if n == http::header::HOST {
            // A second host, or one that names another authority than `:authority`.
            if host || authority.is_some_and(|a| !a.eq_ignore_ascii_case(v)) {
                return Err(Reason::PROTOCOL_ERROR);
            }
            host = true;
        }
    }
    Ok(size)
}

impl H2Stream {
    /// A request to answer, or `None` if it was malformed (or a CONNECT) and is reset.
    pub(super) fn new(
        req: Request<RecvStream>,
        mut respond: SendResponse<Bytes>,
        extra: Arc<[(HeaderName, HeaderValue)]>,
        cfg: &Config,
    ) -> Option<H2Stream> {
        let now = Instant::now();
        let fields = match check(&req) {
            Ok(size) => size,
            Err(reason) => {
                stats::error(CountedError::Protocol);
                respond.send_reset(reason);
                return None;
            }
        };
        let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
        let if_match = joined(req.headers(), http::header::IF_MATCH);
        let if_none_match = joined(req.headers(), http::header::IF_NONE_MATCH);
        let x = crate::plumbing::thread_ctx::exchange(
            &loadterm_exchange::RequestSummary {
                version: Version::H2,
                is_head: req.method() == http::Method::HEAD,
                target: target.as_bytes(),
                control: req
                    .headers()
                    .get(loadterm_plan::CONTROL_HEADER)
                    .map(|v| v.as_bytes()),
                expect_continue: req
                    .headers()
                    .get(http::header::EXPECT)
                    .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue")),
                conn_close: false,
                conn_keep_alive: false,
                has_body: !req.body().is_end_stream(),
                head_bytes: loadterm_exchange::head_bytes(
                    req.method().as_str().len(),
                    target.len(),
                    fields,
                ),
                date: cfg.date,
                is_get: req.method() == http::Method::GET,
                if_match: if_match.as_deref(),
                if_none_match: if_none_match.as_deref(),
            },
            now,
        );
        Some(H2Stream {
            x,
            now,
            out: Responder {
                body: req.into_body(),
                respond,
                send: None,
                ended: false,
                extra,
                timeout: cfg.timeout,
                at_once: true,
                status: 0,
                counted: false,
            },
        })
    }

    /// How long the connection may stay idle after this request (`w`), if it set that.
    pub(super) fn idle(&self) -> Option<Duration> {
        self.x.idle()
    }

    /// Carry out every step that needs no waiting. Most requests (no body, no delay, a small
    /// response) end here, so the connection flushes many responses with one write instead of
    /// one per stream (measured: docs/PERFORMANCE.md). Otherwise the exchange is handed back
    /// with the step to go on from, on its own task (`run`).
    pub(super) fn try_now(mut self) -> Option<(H2Stream, Step)> {
        // Ready at the first poll: no step that waits is carried out here (`Responder::hold`).
        let steps = self.x.drive(self.now, &mut self.out).now_or_never();
        match steps.expect("steps carried out at once never wait") {
            Ok(end) => self.out.end(end),
            Err(Stop::Held(step)) => {
                self.out.at_once = false;
                return Some((self, step));
            }
            Err(Stop::Gone) => {}
        }
        None
    }

    pub(super) async fn run(mut self, step: Step) {
        if let Ok(end) = self.x.drive_from(step, self.now, &mut self.out).await {
            if end == ExchangeEnd::NoFinal {
                // The 1xx went out as an interim head and a final one cannot follow: the stream
                // is reset, but only once the connection has written that head (the h2 crate
                // drops a stream's queued frames at a reset). Woken by the head, the
                // connection's task runs before this one resumes.
                tokio::task::yield_now().await;
            }
            self.out.end(end);
        }
    }
}

impl Responder {
    /// Carry out the exchange's end.
    fn end(&mut self, end: ExchangeEnd) {
        match end {
            ExchangeEnd::KeepAlive | ExchangeEnd::Close => {
                if !self.ended {
                    self.data(Bytes::new(), true)
                }
                if self.status >= 200 {
                    stats::served(Proto::H2, self.status);
                    self.counted = true;
                }
            }
            ExchangeEnd::NoFinal => self.reset(Reason::NO_ERROR),
            ExchangeEnd::Abort => {
                self.reset(Reason::CANCEL);
                self.aborted();
            }
        }
    }

    fn response(&self, head: &ResponseHead) -> Result<Response<()>, http::Error> {
        let date = crate::plumbing::thread_ctx::date();
        let mut fields = LAST_FIELDS.with_borrow_mut(|last| match last {
            Some((h, d, fields)) if h == head && *d == date => Ok(fields.clone()),
            _ => {
                let fields = header_map(head, &date)?;
                *last = Some((*head, date, fields.clone()));
                Ok::<_, http::Error>(fields)
            }
        })?;
        for (name, value) in self.extra.iter() {
            fields.insert(name, value.clone());
        }
        let mut response = Response::new(());
        *response.status_mut() = StatusCode::from_u16(head.status)?;
        *response.headers_mut() = fields;
        Ok(response)
    }

    fn data(&mut self, data: Bytes, last: bool) {
        if let Some(send) = &mut self.send {
            let _ = send.send_data(data, last);
        }
        self.ended |= last;
    }

    /// The final response cannot be completed.
    fn aborted(&mut self) {
        stats::aborted(Proto::H2, 1);
        self.counted = true;
    }

    fn reset(&mut self, reason: Reason) {
        match &mut self.send {
            Some(send) => send.send_reset(reason),
            None => self.respond.send_reset(reason),
        }
    }

    /// Body bytes `off..size` sent as flow control allows, in static slices: any size in
    /// constant memory. Fails if the stream is gone (reset by the client, a client that stopped
    /// reading).
    async fn large_body(
        &mut self,
        kind: body::BodyKind,
        mut off: u64,
        size: u64,
        last: bool,
    ) -> Result<(), Stop> {
        let timeout = self.timeout;
        let Some(send) = &mut self.send else {
            return Err(Stop::Gone);
        };
        while off < size {
            send.reserve_capacity((size - off).min(1 << 20) as usize);
            let cap = match tokio::time::timeout(
                timeout,
                futures::future::poll_fn(|cx| send.poll_capacity(cx)),
            )
            .await
            {
                Ok(Some(Ok(cap))) if cap > 0 => cap,
                Ok(Some(Ok(_))) => continue,
                Err(_) => {
                    stats::protection(Protection::WriteTimeout);
                    send.send_reset(Reason::CANCEL);
                    return Err(Stop::Gone);
                }
                _ => {
                    send.send_reset(Reason::CANCEL);
                    return Err(Stop::Gone);
                }
            };
            let mut left = cap as u64;
            while left > 0 && off < size {
                let chunk = body::slice(kind, off, left.min(size - off) as usize);
                off += chunk.len() as u64;
                left -= chunk.len() as u64;
                if send
                    .send_data(Bytes::from_static(chunk), last && off == size)
                    .is_err()
                {
                    return Err(Stop::Gone);
                }
            }
        }
        self.ended = last;
        Ok(())
    }
}

/// The HTTP/2 framing of an exchange's steps, on the `h2` crate (which writes what is queued
/// when the connection's task runs: nothing to flush here).
impl Engine for Responder {
    type Error = Stop;

    fn now(&self) -> Instant {
        Instant::now()
    }

    const HOLDS: bool = true;

    /// In the connection's task, the steps that wait: a request body, a delay or a pause, a
    /// body flow control may hold up, a piece, and the end after a 1xx (`run`).
    fn hold(&mut self, step: Step) -> Result<Step, Stop> {
        let waits = match &step {
            Step::ReadBody { .. } | Step::WaitUntil(_) | Step::Pause(_) => true,
            Step::Body(Body::Generated(g)) => g.size > INLINE_BODY,
            Step::Body(Body::Piece(_)) | Step::Done(ExchangeEnd::NoFinal) => true,
            _ => false,
        };
        if self.at_once && waits {
            Err(Stop::Held(step))
        } else {
            Ok(step)
        }
    }

    async fn interim(&mut self, head: &ResponseHead) -> Result<(), Stop> {
        stats::interim(Proto::H2);
        let interim = Response::builder()
            .status(head.status)
            .body(())
            .expect("1xx");
        let _ = self.respond.send_informational(interim);
        Ok(())
    }

    async fn head(&mut self, head: &ResponseHead) -> Result<(), Stop> {
        let Ok(resp) = self.response(head) else {
            self.respond.send_reset(Reason::INTERNAL_ERROR);
            return Err(Stop::Gone);
        };
        match self.respond.send_response(resp, head.last) {
            Ok(send) => self.send = Some(send),
            Err(_) => return Err(Stop::Gone),
        }
        self.status = head.status;
        self.ended = head.last;
        Ok(())
    }

    async fn text(&mut self, text: Cow<'static, str>) -> Result<(), Stop> {
        self.data(Bytes::from(text.into_owned()), true);
        Ok(())
    }

    /// Up to `INLINE_BODY`, queued whole (h2 holds it until the flow-control window opens).
    async fn generated(&mut self, g: Generated) -> Result<(), Stop> {
        if g.size <= INLINE_BODY {
            let data = body::slice(g.kind, 0, g.size as usize);
            self.data(Bytes::from_static(data), g.last);
            Ok(())
        } else {
            self.large_body(g.kind, 0, g.size, g.last).await
        }
    }

    /// One DATA frame (flow control permitting), on its own.
    async fn piece(&mut self, p: Piece) -> Result<(), Stop> {
        self.large_body(p.kind, p.offset, p.offset + p.len, p.last)
            .await
    }

    async fn drain(&mut self, limit: Option<u64>) -> Result<(u64, BodyRead), Stop> {
        let mut n = 0;
        let how = drain(&mut self.body, &mut n, self.timeout, limit).await;
        Ok((n, how))
    }

    async fn flush(&mut self) -> Result<(), Stop> {
        Ok(())
    }

    async fn sleep_until(&mut self, t: Instant) {
        loadterm_runtime::timer::sleep_until(t).await
    }
}

/// Read and discard the request body, releasing flow-control capacity as it goes: all of it
/// (`Ended`), or DATA frames until `upto` bytes were read (`LimitReached`: the body goes on; the
/// frame that crosses `upto` is read whole).
async fn drain(
    body: &mut RecvStream,
    bytes: &mut u64,
    limit: Duration,
    upto: Option<u64>,
) -> BodyRead {
    loop {
        if upto.is_some_and(|u| *bytes >= u) && !body.is_end_stream() {
            return BodyRead::LimitReached;
        }
        match tokio::time::timeout(limit, body.data()).await {
            Err(_) => return BodyRead::Failed(BodyFailure::Timeout),
            Ok(None) => return BodyRead::Ended,
            Ok(Some(Ok(d))) => {
                *bytes += d.len() as u64;
                let _ = body.flow_control().release_capacity(d.len());
            }
            Ok(Some(Err(_))) => return BodyRead::Failed(BodyFailure::Broken),
        }
    }
}

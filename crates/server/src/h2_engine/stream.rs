//! One HTTP/2 request/response exchange: carries out `loadterm_exchange`'s steps on a stream of
//! the connection (`super::Shared`), encoding HEADERS and DATA straight into the connection's
//! pass. Steps that need no waiting run at once, in the connection's task; the first that must
//! wait (a request body, a delay, the rest of a body larger than the inline size or than the
//! windows allow) is held back (`Engine::hold`, or by the body itself) and the exchange goes on
//! from it on a task of its own.

use super::{Shared, SharedRef};
use crate::plumbing::stats::{self, Protection, Proto};
use loadterm_codec::h2::code;
use loadterm_codec::hpack::put_field;
use loadterm_exchange::{
    Body, BodyFailure, BodyRead, Engine, Exchange, ExchangeEnd, Generated, HttpDate, Piece,
    ResponseHead, Step,
};
use loadterm_plan::body::{self, BodyKind};
use std::borrow::Cow;
use std::cell::RefCell;
use std::future::poll_fn;
use std::task::Poll;
use std::time::{Duration, Instant};

/// Bodies up to this size go whole into the pass in the connection's task when the windows
/// allow it; larger ones begin there, only up to the pass's room (`Responder::body`).
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
    shared: SharedRef,
    stream: u32,
    /// The client timeout: for the request body, and for flow control to open.
    timeout: Duration,
    /// Steps are carried out in the connection's task: those that wait are held back.
    at_once: bool,
    /// Our side of the stream has ended.
    ended: bool,
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
        self.shared.borrow_mut().requests.remove(&self.stream);
    }
}

/// Why the steps stopped before the end.
pub(super) enum Stop {
    /// A step that must wait, held back in the connection's task.
    Held(Step),
    /// The stream is gone (reset, the connection closed, flow control never opened); counted
    /// as aborted on drop.
    Gone,
}

thread_local! {
    /// The HPACK block of the last head encoded on this thread. Benchmark traffic repeats the
    /// same head (same plan, timing and date second): copying it costs a fraction of encoding
    /// it field by field. Literals are never indexed, so one block serves every connection.
    static LAST_BLOCK: RefCell<Option<(ResponseHead, HttpDate, Vec<u8>)>> = const { RefCell::new(None) };
}

/// Append the HPACK block of `head` (and the connection's `extra` block) to `out`.
fn encode_head(out: &mut Vec<u8>, head: &ResponseHead, extra: &[u8]) {
    let date = crate::plumbing::thread_ctx::date();
    LAST_BLOCK.with_borrow_mut(|last| match last {
        Some((h, d, block)) if h == head && *d == date => out.extend_from_slice(block),
        _ => {
            let mut block = Vec::with_capacity(160);
            put_field(
                &mut block,
                b":status",
                itoa::Buffer::new().format(head.status).as_bytes(),
            );
            head.fields(&mut Vec::with_capacity(96), &date, |name, value| {
                put_field(&mut block, name.as_bytes(), value)
            });
            out.extend_from_slice(&block);
            *last = Some((*head, date, block));
        }
    });
    out.extend_from_slice(extra);
}

impl H2Stream {
    pub(super) fn new(
        x: Exchange,
        now: Instant,
        shared: SharedRef,
        stream: u32,
        timeout: Duration,
    ) -> H2Stream {
        H2Stream {
            x,
            now,
            out: Responder {
                shared,
                stream,
                timeout,
                at_once: true,
                ended: false,
                status: 0,
                counted: false,
            },
        }
    }

    /// Carry out every step that needs no waiting. Most requests (no body, no delay, a small
    /// response) end here, so the connection writes many responses in one pass. Otherwise the
    /// exchange is handed back with the step to go on from, on its own task (`run`).
    pub(super) fn try_now(mut self) -> Option<(H2Stream, Step)> {
        let steps = futures::FutureExt::now_or_never(self.x.drive(self.now, &mut self.out));
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
            self.out.end(end);
        }
    }
}

impl Responder {
    /// Carry out the exchange's end.
    fn end(&mut self, end: ExchangeEnd) {
        let mut sh = self.shared.borrow_mut();
        match end {
            ExchangeEnd::KeepAlive | ExchangeEnd::Close => {
                if !self.ended {
                    let Shared { conn, pass, .. } = &mut *sh;
                    conn.data(pass.buf(), self.stream, 0, true);
                    pass.copied();
                }
                if self.status >= 200 {
                    stats::served(Proto::H2, self.status);
                    self.counted = true;
                }
                // The request body is still coming: we are done with it (RFC 9113 §8.1).
                if sh.conn.is_recv_open(self.stream) {
                    sh.conn.reset(self.stream, code::NO_ERROR);
                }
            }
            ExchangeEnd::NoFinal => sh.conn.reset(self.stream, code::NO_ERROR),
            ExchangeEnd::Abort => {
                sh.conn.reset(self.stream, code::CANCEL);
                stats::aborted(Proto::H2, 1);
                self.counted = true;
            }
        }
        sh.wake_task();
    }

    /// A header block (`head`, or an interim one) on the stream.
    fn send_head(&mut self, head: &ResponseHead, last: bool) -> Result<(), Stop> {
        let mut sh = self.shared.borrow_mut();
        let Shared {
            conn, pass, extra, ..
        } = &mut *sh;
        let extra = if head.kind == loadterm_exchange::HeadKind::Bare {
            &[][..]
        } else {
            &extra[..]
        };
        if !conn.headers(pass.buf(), self.stream, last, |out| {
            encode_head(out, head, extra)
        }) {
            return Err(Stop::Gone);
        }
        pass.copied();
        sh.wake_task();
        Ok(())
    }

    /// Body bytes `off..size` of `kind` in DATA frames as the windows allow, waiting for them
    /// (and for the pass to drain) up to the client timeout: any size in constant memory. In the
    /// connection's task a body up to `INLINE_BODY` goes whole (many responses leave in one
    /// pass); a larger one, as any on its own task, fills the pass up to its room (a full pass
    /// is one write and one TCP segment), and in the connection's task the rest is held.
    async fn body(
        &mut self,
        kind: BodyKind,
        mut off: u64,
        size: u64,
        last: bool,
    ) -> Result<(), Stop> {
        loop {
            let sent = {
                let mut sh = self.shared.borrow_mut();
                if sh.closed || !sh.conn.is_send_open(self.stream) {
                    return Err(Stop::Gone);
                }
                let whole = self.at_once && size - off <= INLINE_BODY;
                let before = off;
                loop {
                    let room = if whole { usize::MAX } else { sh.pass.room() };
                    let frame = sh.conn.send_window(self.stream).min(sh.conn.max_frame());
                    let n = (size - off).min(frame.min(room) as u64) as usize;
                    if n == 0 && off < size {
                        break;
                    }
                    let end = last && off + n as u64 == size;
                    let Shared { conn, pass, .. } = &mut *sh;
                    conn.data(pass.buf(), self.stream, n, end);
                    pass.copied();
                    // A DATA frame is cut where the static blocks wrap: at most two pieces.
                    let mut at = off;
                    while at < off + n as u64 {
                        let piece = body::slice(kind, at, (off + n as u64 - at) as usize);
                        pass.body(piece);
                        at += piece.len() as u64;
                    }
                    off += n as u64;
                    if off == size {
                        break;
                    }
                }
                if off > before {
                    sh.wake_task();
                }
                if off == size {
                    self.ended |= last;
                    return Ok(());
                }
                if self.at_once {
                    return Err(Stop::Held(Step::Body(Body::Piece(Piece {
                        kind,
                        offset: off,
                        len: size - off,
                        chunked: false,
                        byte_chunks: false,
                        last,
                    }))));
                }
                off > before
            };
            if !sent {
                // Wait for a window to open or the pass to drain, up to the timeout.
                if self
                    .wait(|sh, stream| {
                        sh.closed
                            || !sh.conn.is_send_open(stream)
                            || (sh.conn.send_window(stream) > 0 && sh.pass.room() > 0)
                    })
                    .await
                    .is_err()
                {
                    stats::protection(Protection::WriteTimeout);
                    let mut sh = self.shared.borrow_mut();
                    sh.conn.reset(self.stream, code::CANCEL);
                    sh.wake_task();
                    return Err(Stop::Gone);
                }
            } else {
                // Let the connection write what was queued before adding more.
                self.wait(|sh, _| sh.closed || sh.pass.room() > 0)
                    .await
                    .ok();
            }
        }
    }

    /// Wait until `ready` says so (checked whenever the connection wakes the stream), up to the
    /// client timeout: `Err` at the timeout.
    async fn wait(&mut self, ready: impl Fn(&Shared, u32) -> bool) -> Result<(), ()> {
        let stream = self.stream;
        let shared = self.shared.clone();
        let waiting = poll_fn(|cx| {
            let mut sh = shared.borrow_mut();
            if ready(&sh, stream) {
                return Poll::Ready(());
            }
            if let Some(r) = sh.requests.get_mut(&stream) {
                r.waker = Some(cx.waker().clone());
            }
            Poll::Pending
        });
        tokio::time::timeout(self.timeout, waiting)
            .await
            .map_err(|_| ())
    }
}

/// The HTTP/2 framing of an exchange's steps, on the connection's pass (written by the
/// connection's task: flushing is waking it).
impl Engine for Responder {
    type Error = Stop;

    fn now(&self) -> Instant {
        Instant::now()
    }

    const HOLDS: bool = true;

    /// In the connection's task, the steps that wait: a request body, a delay or a pause, a
    /// text the windows or the inline size hold up, a piece, and the end after a 1xx (so that
    /// the interim head leaves before the reset). A generated body begins here, in the pass
    /// with its head, and holds its rest itself (`body`).
    fn hold(&mut self, step: Step) -> Result<Step, Stop> {
        if !self.at_once {
            return Ok(step);
        }
        let waits = match &step {
            Step::ReadBody { .. } | Step::WaitUntil(_) | Step::Pause(_) => true,
            Step::Body(Body::Text(t)) => {
                t.len() > INLINE_BODY as usize
                    || t.len() > self.shared.borrow().conn.send_window(self.stream)
            }
            Step::Body(Body::Piece(_)) | Step::Done(ExchangeEnd::NoFinal) => true,
            _ => false,
        };
        if waits {
            Err(Stop::Held(step))
        } else {
            Ok(step)
        }
    }

    async fn interim(&mut self, head: &ResponseHead) -> Result<(), Stop> {
        stats::interim(Proto::H2);
        self.send_head(head, false)
    }

    async fn head(&mut self, head: &ResponseHead) -> Result<(), Stop> {
        self.send_head(head, head.last)?;
        self.status = head.status;
        self.ended = head.last;
        Ok(())
    }

    async fn text(&mut self, text: Cow<'static, str>) -> Result<(), Stop> {
        // Text pages (help, errors) are small; sent as flow control allows.
        let bytes = text.as_bytes();
        let mut off = 0;
        loop {
            {
                let mut sh = self.shared.borrow_mut();
                if sh.closed || !sh.conn.is_send_open(self.stream) {
                    return Err(Stop::Gone);
                }
                let window = sh.conn.send_window(self.stream).min(sh.conn.max_frame());
                let n = (bytes.len() - off).min(window);
                if n > 0 || off == bytes.len() {
                    let end = off + n == bytes.len();
                    let Shared { conn, pass, .. } = &mut *sh;
                    conn.data(pass.buf(), self.stream, n, end);
                    pass.buf().extend_from_slice(&bytes[off..off + n]);
                    pass.copied();
                    off += n;
                    sh.wake_task();
                    if end {
                        self.ended = true;
                        return Ok(());
                    }
                    continue;
                }
            }
            if self
                .wait(|sh, s| sh.closed || !sh.conn.is_send_open(s) || sh.conn.send_window(s) > 0)
                .await
                .is_err()
            {
                stats::protection(Protection::WriteTimeout);
                self.shared
                    .borrow_mut()
                    .conn
                    .reset(self.stream, code::CANCEL);
                return Err(Stop::Gone);
            }
        }
    }

    async fn generated(&mut self, g: Generated) -> Result<(), Stop> {
        self.body(g.kind, 0, g.size, g.last).await
    }

    /// One DATA frame (flow control permitting), on its own.
    async fn piece(&mut self, p: Piece) -> Result<(), Stop> {
        self.body(p.kind, p.offset, p.offset + p.len, p.last).await
    }

    /// The request body's bytes as the connection counts them (it returns them to the client's
    /// window as they come), until it ends or `limit` bytes came.
    async fn drain(&mut self, limit: Option<u64>) -> Result<(u64, BodyRead), Stop> {
        let stream = self.stream;
        let shared = self.shared.clone();
        let reading = poll_fn(|cx| {
            let mut sh = shared.borrow_mut();
            let closed = sh.closed;
            let Some(r) = sh.requests.get_mut(&stream) else {
                return Poll::Ready((0, BodyRead::Failed(BodyFailure::Broken)));
            };
            if r.reset || closed {
                return Poll::Ready((
                    std::mem::take(&mut r.body),
                    BodyRead::Failed(BodyFailure::Broken),
                ));
            }
            if r.ended {
                return Poll::Ready((std::mem::take(&mut r.body), BodyRead::Ended));
            }
            if limit.is_some_and(|l| r.body >= l) {
                return Poll::Ready((std::mem::take(&mut r.body), BodyRead::LimitReached));
            }
            r.waker = Some(cx.waker().clone());
            Poll::Pending
        });
        match tokio::time::timeout(self.timeout, reading).await {
            Ok(read) => Ok(read),
            Err(_) => {
                let n = self
                    .shared
                    .borrow_mut()
                    .requests
                    .get_mut(&stream)
                    .map_or(0, |r| std::mem::take(&mut r.body));
                Ok((n, BodyRead::Failed(BodyFailure::Timeout)))
            }
        }
    }

    async fn flush(&mut self) -> Result<(), Stop> {
        self.shared.borrow_mut().wake_task();
        Ok(())
    }

    async fn sleep_until(&mut self, t: Instant) {
        loadterm_runtime::timer::sleep_until(t).await
    }
}

//! One HTTP/2 request/response exchange: carries out the step driver's actions on a stream of
//! the connection (`super::Shared`), encoding HEADERS and DATA straight into the connection's
//! pass. Actions that need no waiting are carried out at once, in the connection's task; the
//! first that must wait (a request body, a delay, the rest of a body larger than the inline size
//! or than the windows allow) and the ones after it are carried out on a task of its own.

use super::{Shared, SharedRef};
use crate::plumbing::stats::{self, Protection, Proto};
use loadterm_codec::h2::code;
use loadterm_codec::hpack::put_field;
use loadterm_exchange::{
    Action, BodyFailure, BodyRead, ExchangeEnd, HttpDate, Piece, ResponseHead, StepDriver,
};
use loadterm_plan::body::{self, BodyKind};
use std::cell::RefCell;
use std::future::poll_fn;
use std::task::Poll;
use std::time::{Duration, Instant};

/// Bodies up to this size go whole into the pass in the connection's task when the windows
/// allow it; larger ones begin there, only up to the pass's room (`Responder::send_body`).
const INLINE_BODY: u64 = 16 * 1024;

/// A request being answered.
pub(super) struct H2Stream {
    steps: StepDriver,
    out: Responder,
}

/// The stream's side of the exchange: its HTTP/2 framing of the step driver's actions.
struct Responder {
    shared: SharedRef,
    stream: u32,
    /// The client timeout: for the request body, and for flow control to open.
    timeout: Duration,
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

/// The stream is gone (reset, the connection closed, flow control never opened): its exchange
/// stops, counted as aborted on drop.
pub(super) struct Gone;

/// An action tried in the connection's task.
enum AtOnce {
    Carried,
    /// It must wait: it goes on from here on a task of its own.
    Later(Action),
    /// The exchange is over.
    Ended,
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
        steps: StepDriver,
        shared: SharedRef,
        stream: u32,
        timeout: Duration,
    ) -> H2Stream {
        H2Stream {
            steps,
            out: Responder {
                shared,
                stream,
                timeout,
                ended: false,
                status: 0,
                counted: false,
            },
        }
    }

    /// Carry out every action that needs no waiting. Most requests (no body, no delay, a small
    /// response) end here, so the connection writes many responses in one pass. Otherwise the
    /// stream is handed back with the action to go on from, on its own task (`run`).
    pub(super) fn at_once(mut self) -> Option<(H2Stream, Action)> {
        loop {
            let action = self.steps.poll();
            match self.out.at_once(action) {
                Ok(AtOnce::Carried) => {}
                Ok(AtOnce::Later(action)) => return Some((self, action)),
                Ok(AtOnce::Ended) | Err(Gone) => return None,
            }
        }
    }

    /// Carry the exchange out from `action` to its end, waiting as each action needs.
    pub(super) async fn run(mut self, mut action: Action) {
        loop {
            match self.out.carry_out(action, &mut self.steps).await {
                Ok(Some(end)) => return self.out.end(end),
                Ok(None) => action = self.steps.poll(),
                Err(Gone) => return,
            }
        }
    }
}

impl Responder {
    /// `action` if it needs no wait, in the connection's task: heads, a text the windows and
    /// the inline size allow, a generated body's beginning (its rest held, `send_body`), the
    /// flush before a wait, and the end, except after a 1xx (so that the interim head leaves
    /// before the reset). The rest waits: a request body, a delay or a pause, a piece.
    fn at_once(&mut self, action: Action) -> Result<AtOnce, Gone> {
        match action {
            Action::Interim(head) => self.interim(&head)?,
            Action::Head(head) => self.head(&head)?,
            Action::Text(text)
                if text.len() <= INLINE_BODY as usize
                    && text.len() <= self.shared.borrow().conn.send_window(self.stream) =>
            {
                self.send_text(text.as_bytes(), 0)?;
            }
            Action::Generated(g) => {
                let off = self.send_body(g.kind, 0, g.size, g.last, g.size <= INLINE_BODY)?;
                if off < g.size {
                    return Ok(AtOnce::Later(Action::Piece(Piece {
                        kind: g.kind,
                        offset: off,
                        len: g.size - off,
                        chunked: false,
                        byte_chunks: false,
                        last: g.last,
                    })));
                }
            }
            Action::Flush => self.shared.borrow_mut().wake_task(),
            Action::Done(end) if end != ExchangeEnd::NoFinal => {
                self.end(end);
                return Ok(AtOnce::Ended);
            }
            action => return Ok(AtOnce::Later(action)),
        }
        Ok(AtOnce::Carried)
    }

    /// Carry `action` out on the stream's own task: `Some` at the exchange's end.
    async fn carry_out(
        &mut self,
        action: Action,
        steps: &mut StepDriver,
    ) -> Result<Option<ExchangeEnd>, Gone> {
        match action {
            Action::Interim(head) => self.interim(&head)?,
            Action::Head(head) => self.head(&head)?,
            Action::Text(text) => self.text(text.as_bytes()).await?,
            Action::Generated(g) => self.body(g.kind, 0, g.size, g.last).await?,
            // One DATA frame (flow control permitting), on its own.
            Action::Piece(p) => {
                self.body(p.kind, p.offset, p.offset + p.len, p.last)
                    .await?
            }
            Action::ReadBody { limit } => {
                let (bytes, how) = self.drain(limit).await;
                steps.body_read(bytes, how, Instant::now());
            }
            Action::Flush => self.shared.borrow_mut().wake_task(),
            Action::WaitUntil(t) => {
                loadterm_runtime::timer::sleep_until(t).await;
                steps.resumed(Instant::now());
            }
            Action::Pause(pause) => {
                loadterm_runtime::timer::sleep_until(Instant::now() + pause).await;
                steps.resumed(Instant::now());
            }
            Action::Done(end) => return Ok(Some(end)),
        }
        Ok(None)
    }

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

    fn interim(&mut self, head: &ResponseHead) -> Result<(), Gone> {
        stats::interim(Proto::H2);
        self.send_head(head, false)
    }

    fn head(&mut self, head: &ResponseHead) -> Result<(), Gone> {
        self.send_head(head, head.last)?;
        self.status = head.status;
        self.ended = head.last;
        Ok(())
    }

    /// A header block (`head`, or an interim one) on the stream.
    fn send_head(&mut self, head: &ResponseHead, last: bool) -> Result<(), Gone> {
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
            return Err(Gone);
        }
        pass.copied();
        sh.wake_task();
        Ok(())
    }

    /// Body bytes `off..size` of `kind` in DATA frames as the windows allow, and, unless
    /// `whole`, up to the pass's room (a full pass is one write and one TCP segment): the
    /// offset reached. In the connection's task a body up to `INLINE_BODY` goes whole (many
    /// responses leave in one pass).
    fn send_body(
        &mut self,
        kind: BodyKind,
        mut off: u64,
        size: u64,
        last: bool,
        whole: bool,
    ) -> Result<u64, Gone> {
        let mut sh = self.shared.borrow_mut();
        if sh.closed || !sh.conn.is_send_open(self.stream) {
            return Err(Gone);
        }
        let before = off;
        while off < size || size == 0 {
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
        if off > before || size == 0 {
            sh.wake_task();
        }
        if off == size {
            self.ended |= last;
        }
        Ok(off)
    }

    /// [`Responder::send_body`] to the end, waiting for the windows to open (and the pass to
    /// drain) up to the client timeout: any size in constant memory.
    async fn body(
        &mut self,
        kind: BodyKind,
        mut off: u64,
        size: u64,
        last: bool,
    ) -> Result<(), Gone> {
        loop {
            let before = off;
            off = self.send_body(kind, off, size, last, false)?;
            if off == size {
                return Ok(());
            }
            if off == before {
                // Wait for a window to open or the pass to drain, up to the timeout.
                let open = self
                    .wait(|sh, stream| {
                        sh.closed
                            || !sh.conn.is_send_open(stream)
                            || (sh.conn.send_window(stream) > 0 && sh.pass.room() > 0)
                    })
                    .await;
                if open.is_err() {
                    return Err(self.stopped_reading());
                }
            } else {
                // Let the connection write what was queued before adding more.
                self.wait(|sh, _| sh.closed || sh.pass.room() > 0)
                    .await
                    .ok();
            }
        }
    }

    /// The client did not open flow control within the timeout: the stream is reset.
    fn stopped_reading(&mut self) -> Gone {
        stats::protection(Protection::WriteTimeout);
        let mut sh = self.shared.borrow_mut();
        sh.conn.reset(self.stream, code::CANCEL);
        sh.wake_task();
        Gone
    }

    /// Text bytes from `off` in DATA frames as the windows allow: the offset reached.
    fn send_text(&mut self, bytes: &[u8], mut off: usize) -> Result<usize, Gone> {
        let mut sh = self.shared.borrow_mut();
        if sh.closed || !sh.conn.is_send_open(self.stream) {
            return Err(Gone);
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
            self.ended |= end;
        }
        Ok(off)
    }

    /// A text page (help, errors: small) whole, as flow control allows.
    async fn text(&mut self, bytes: &[u8]) -> Result<(), Gone> {
        let mut off = 0;
        loop {
            let before = off;
            off = self.send_text(bytes, off)?;
            if self.ended {
                return Ok(());
            }
            if off > before {
                continue;
            }
            let open = self
                .wait(|sh, s| sh.closed || !sh.conn.is_send_open(s) || sh.conn.send_window(s) > 0)
                .await;
            if open.is_err() {
                return Err(self.stopped_reading());
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

    /// The request body's bytes as the connection counts them (it returns them to the client's
    /// window as they come), until it ends or `limit` bytes came.
    async fn drain(&mut self, limit: Option<u64>) -> (u64, BodyRead) {
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
            Ok(read) => read,
            Err(_) => {
                let n = self
                    .shared
                    .borrow_mut()
                    .requests
                    .get_mut(&stream)
                    .map_or(0, |r| std::mem::take(&mut r.body));
                (n, BodyRead::Failed(BodyFailure::Timeout))
            }
        }
    }
}

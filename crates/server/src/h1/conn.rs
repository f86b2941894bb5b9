//! The HTTP/1.x connection driver. Responses are appended to one reused output buffer and
//! flushed only before the connection would wait (for the client or for a delay), so pipelined
//! small responses leave in one write; large bodies go out as vectored writes of static slices.
//!
//! A connection alternates between busy periods and idle spells, as HAProxy's do. A busy period
//! (one boxed future: the parser state, the buffers, every request's own state) lasts while
//! requests keep coming; once it has waited `IDLE_HOLD` for a next request with nothing
//! buffered, it ends, and the connection's task waits for its socket to become readable holding
//! the socket and little else. On clear TCP, past `PARK_AFTER` the task ends too and the
//! socket is parked (`Handover::Idle`).

use super::body::RequestBody;
use super::encode;
use super::head::{self, Parsed, RequestHead};
use super::Upgrade;
use crate::buffers;
use crate::config::Config;
use crate::park::PARK_AFTER;
use crate::plumbing::shutdown::Shutdown;
use crate::plumbing::stats::{self, Proto};
use crate::stream::ByteStream;
use loadterm_exchange::{
    Action, BodyFailure, BodyRead, Exchange, ExchangeEnd, Generated, Piece, ResponseHead,
    StepDriver, Version,
};
use loadterm_plan::body::BodyKind;
use loadterm_plan::pages::ErrorPage;
use loadterm_runtime::within;
use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::futures::Notified;
use tokio::time::Sleep;

const READ_CHUNK: usize = 16 * 1024;
/// Flush the output buffer once it holds this much, even if more pipelined requests wait.
const OUT_FLUSH: usize = 64 * 1024;
/// Body bytes fill the output buffer up to here, leaving room for a chunk's framing after
/// them, and a head is written only with `HEAD_ROOM` left: the buffer then never grows past
/// `OUT_FLUSH` (a 64 KiB chunk after its head would double it to 128 KiB, which pooled and
/// reused drifted the server's memory up for 20 minutes under a steady load).
const BODY_FILL: usize = OUT_FLUSH - 32;
const HEAD_ROOM: usize = 8 * 1024;
/// Slices per vectored write of a large body.
const IOV: usize = 8;
/// How long a busy period waits for a next request before the connection turns idle (under
/// load the next request comes sooner, and a busy period's box and buffers are then kept).
const IDLE_HOLD: Duration = Duration::from_millis(10);

/// How a busy period ends: what `run` does with the connection next.
#[derive(Debug)]
enum PeriodEnd {
    /// No next request within `IDLE_HOLD`, nothing buffered: turn idle, waiting for the next
    /// request until this instant.
    Idle(Instant),
    /// Close the connection: flush what is buffered, then a lingering close (`crate::stream::linger`).
    Close,
    /// The peer went away, or the request was aborted: drop without further writes.
    Abort,
    /// A read or write failed (a write timeout included): drop without further writes. Counted
    /// once, where the busy period ends.
    Failed(io::Error),
    /// `Upgrade: h2c` accepted (the 101 is buffered): once it is flushed, hand over to HTTP/2
    /// the upgrading request's head and the bytes the client sent after it.
    Upgrade {
        // Boxed: every request's result carries a `PeriodEnd`.
        request: Box<super::Upgrading>,
        buffered: Vec<u8>,
    },
}

/// Per-listener behaviour.
pub(crate) struct ListenerOptions {
    /// Honour `Upgrade: h2c` (clear-text ports only).
    pub h2c_upgrade: bool,
    /// Fields added to every response head (`alt-svc`, `x-ja4`).
    pub extra: crate::config::ExtraHeaders,
    /// Send large bodies with splice() where the transport allows (off: `--no-splice`).
    pub splice: bool,
}

impl From<io::Error> for PeriodEnd {
    fn from(e: io::Error) -> Self {
        PeriodEnd::Failed(e)
    }
}

/// A busy period's state: it lives in the busy period's box, never in the connection's task.
struct Conn<'a, 'n, IO> {
    io: &'a mut IO,
    rbuf: Vec<u8>,
    start: usize,
    out: Vec<u8>,
    timeout: Duration,
    /// Capacity asked for splice pipes (`tune.pipesize`).
    pipe_size: usize,
    head: RequestHead,
    /// The body of the request being answered.
    req_body: RequestBody,
    lenient: bool,
    /// Send `date` fields.
    date: bool,
    h2c_upgrade: bool,
    splice: bool,
    /// Extra response header lines (`alt-svc`), CRLF-terminated; usually empty.
    extra_head: &'a [u8],
    waits: Waits<'a, 'n>,
    /// How long to wait for the next request, when the last one set it (`w`) or an idle spell
    /// used part of the wait.
    idle: Option<Duration>,
    /// The status of the final response being written (0: none begun).
    status: u16,
    /// A request was planned and its final response is not complete yet: aborted if the
    /// connection ends now.
    in_request: bool,
    /// Final responses complete in `out` but not yet handed to the transport, by class:
    /// counted as served once a flush hands them over, as aborted if the connection fails first.
    unsent: [u32; 5],
    /// `unsent` is not all zeros.
    any_unsent: bool,
    /// Reads carry the kernel's arrival stamps (turned on at the connection's first wait for a
    /// delay), and the last read's.
    stamps: &'a mut bool,
    arrived: Option<Instant>,
}

impl<IO> Drop for Conn<'_, '_, IO> {
    fn drop(&mut self) {
        buffers::give(std::mem::take(&mut self.rbuf));
        buffers::give(std::mem::take(&mut self.out));
    }
}

/// What a busy period needs of `ListenerOptions` (the rest is rendered once, into `extra_head`).
#[derive(Clone, Copy)]
struct PeriodOptions {
    h2c_upgrade: bool,
    splice: bool,
}

/// How a connection left the HTTP/1 engine, when not closed.
pub(crate) enum Handover<IO> {
    /// Switched to HTTP/2 (`Upgrade: h2c`).
    Upgrade(Upgrade<IO>),
    /// Idle for `PARK_AFTER` (only when `IO::PARKS`): to be parked until it turns
    /// readable, then served again with `serve(.., until)`, or closed at `until`.
    Idle { io: IO, until: Instant },
}

/// Serve HTTP/1.x on `io` until the connection ends, switches to HTTP/2 after `Upgrade: h2c`, or
/// is handed over idle; the next request is awaited until `until` (else for the client timeout).
pub(crate) fn serve<IO: ByteStream>(
    io: IO,
    cfg: Arc<Config>,
    opts: ListenerOptions,
    until: Option<Instant>,
) -> impl Future<Output = Option<Handover<IO>>> {
    let extra_head = opts.extra.iter().fold(Vec::new(), |mut lines, (n, v)| {
        lines.extend_from_slice(n.as_str().as_bytes());
        lines.extend_from_slice(b": ");
        lines.extend_from_slice(v.as_bytes());
        lines.extend_from_slice(b"\r\n");
        lines
    });
    let period_opts = PeriodOptions {
        h2c_upgrade: opts.h2c_upgrade,
        splice: opts.splice,
    };
    // The connection's task holds this future for its whole life, idle spells included: only
    // what it needs is moved in (`ListenerOptions` is not).
    run(io, cfg, period_opts, extra_head.into_boxed_slice(), until)
}

async fn run<IO: ByteStream>(
    mut io: IO,
    cfg: Arc<Config>,
    period_opts: PeriodOptions,
    extra_head: Box<[u8]>,
    // Until when the next request is awaited, after an idle spell.
    mut until: Option<Instant>,
) -> Option<Handover<IO>> {
    // Reads carry the kernel's arrival stamps (`Conn::stamps`), from one busy period to the next.
    let mut stamps = false;
    loop {
        // Boxed in a statement of its own: a temporary in the `match` below would keep a slot
        // in this future (it lives to the end of the statement, across the await).
        let period = Box::pin(busy(
            &mut io,
            &cfg,
            period_opts,
            &extra_head,
            until,
            &mut stamps,
        ));
        match period.await {
            PeriodEnd::Idle(deadline) => {
                until = Some(deadline);
                io.release();
                let park = IO::PARKS
                    .then(|| Instant::now() + PARK_AFTER)
                    .filter(|&at| at < deadline);
                let wake = match io.idle_socket() {
                    Some(sock) => {
                        // The signal is made before the flag is read: no wake-up falls between.
                        let wait = IdleWait::new(sock, park.unwrap_or(deadline), &cfg.shutdown);
                        if cfg.shutdown.begun() {
                            IdleWake::Shutdown
                        } else {
                            wait.await
                        }
                    }
                    None => IdleWake::Readable,
                };
                match wake {
                    IdleWake::Readable => {}
                    IdleWake::Slept if park.is_some() => {
                        return Some(Handover::Idle {
                            io,
                            until: deadline,
                        })
                    }
                    IdleWake::Slept | IdleWake::Gone => return None,
                    IdleWake::Shutdown => {
                        crate::stream::linger::close(&mut io).await;
                        return None;
                    }
                }
            }
            PeriodEnd::Close => {
                crate::stream::linger::close(&mut io).await;
                return None;
            }
            PeriodEnd::Abort | PeriodEnd::Failed(_) => return None,
            PeriodEnd::Upgrade { request, buffered } => {
                return Some(Handover::Upgrade(Upgrade {
                    io,
                    buffered,
                    request,
                }));
            }
        }
    }
}

/// One busy period: requests answered until the connection ends or turns idle; the first
/// request is awaited until `until` (else for the client timeout).
async fn busy<IO: ByteStream>(
    io: &mut IO,
    cfg: &Config,
    period_opts: PeriodOptions,
    extra_head: &[u8],
    until: Option<Instant>,
    stamps: &mut bool,
) -> PeriodEnd {
    // Armed before its first wait; until then its deadline does not matter.
    let timer = std::pin::pin!(tokio::time::sleep(Duration::ZERO));
    // Made before `begun` is first read (`Waits::wait`): no wake-up falls between.
    let stop = std::pin::pin!(cfg.shutdown.idle_signal());
    let mut c = Conn {
        io,
        rbuf: Vec::new(),
        start: 0,
        out: Vec::new(),
        timeout: cfg.timeout,
        pipe_size: cfg.pipe_size,
        head: RequestHead::default(),
        req_body: RequestBody::new(head::BodyFraming::None),
        lenient: cfg.lenient,
        date: cfg.date,
        h2c_upgrade: period_opts.h2c_upgrade,
        splice: period_opts.splice,
        extra_head,
        waits: Waits {
            timer,
            stop,
            stop_registered: false,
            shutdown: &cfg.shutdown,
        },
        idle: until.map(|t| t.saturating_duration_since(Instant::now())),
        status: 0,
        in_request: false,
        unsent: [0; 5],
        any_unsent: false,
        stamps,
        arrived: None,
    };
    let end = loop {
        let (x, t_first) = match c.request().await {
            Ok(next) => next,
            Err(end) => break end,
        };
        // Driven here, not inside `request`: a future nested in that one costs instructions on
        // every request.
        let mut steps = StepDriver::new(x, t_first);
        let end = c.carry_out(&mut steps).await;
        if let Err(end) = c.ended(steps.exchange(), end) {
            break end;
        }
    };
    // Closing and upgrading first hand what is buffered (the last responses, the 101) over.
    let end = match end {
        PeriodEnd::Close | PeriodEnd::Upgrade { .. } => match c.flush().await {
            Ok(()) => end,
            Err(e) => PeriodEnd::Failed(e),
        },
        PeriodEnd::Idle(_) | PeriodEnd::Abort | PeriodEnd::Failed(_) => end,
    };
    if let PeriodEnd::Failed(e) = &end {
        stats::io_error(e);
    }
    // What the connection left unsent, half sent or unanswered (nothing when it turns idle).
    let unsent: u32 = c.unsent.iter().sum();
    stats::aborted(Proto::H1, u64::from(unsent) + u64::from(c.in_request));
    end
}

/// Why an idle wait ended.
enum IdleWake {
    Readable,
    /// The wait's time is over.
    Slept,
    /// The socket failed.
    Gone,
    Shutdown,
}

/// An idle wait: wait for `sock` to become readable (`poll_read_ready` keeps its waker in the
/// socket's registration: no waiter here), until the sleep ends or the shutdown signal comes.
/// Written by hand: as an async fn it took 56 more bytes of every connection's task.
struct IdleWait<'a> {
    sock: &'a TcpStream,
    stop: Notified<'a>,
    sleep: tokio::time::Sleep,
}

impl IdleWait<'_> {
    fn new<'a>(sock: &'a TcpStream, deadline: Instant, shutdown: &'a Shutdown) -> IdleWait<'a> {
        IdleWait {
            sock,
            stop: shutdown.idle_signal(),
            sleep: tokio::time::sleep_until(deadline.into()),
        }
    }
}

#[allow(unsafe_code)] // pin projection, written by hand to keep the task small
impl Future for IdleWait<'_> {
    type Output = IdleWake;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<IdleWake> {
        // SAFETY: `stop` and `sleep` stay pinned: a `IdleWait` is neither `Unpin` nor moved out of.
        let this = unsafe { self.get_unchecked_mut() };
        // SAFETY: `stop` is pinned with `this` (above).
        if unsafe { Pin::new_unchecked(&mut this.stop) }
            .poll(cx)
            .is_ready()
        {
            return Poll::Ready(IdleWake::Shutdown);
        }
        match this.sock.poll_read_ready(cx) {
            Poll::Ready(Ok(())) => Poll::Ready(IdleWake::Readable),
            Poll::Ready(Err(_)) => Poll::Ready(IdleWake::Gone),
            // SAFETY: `sleep` is pinned with `this` (above).
            Poll::Pending => unsafe { Pin::new_unchecked(&mut this.sleep) }
                .poll(cx)
                .map(|()| IdleWake::Slept),
        }
    }
}

/// The busy period's waits: one timer (`within`) and one shutdown signal for all its reads and
/// writes, where a `watch` waiter per request cost as much as the timers.
struct Waits<'a, 'n> {
    /// Armed only once an operation has to wait.
    timer: Pin<&'a mut Sleep>,
    /// Registered (with the task's waker) at the first wait for a next request; from then on
    /// it wakes the task at shutdown, and each wait reads `Shutdown::begun`.
    stop: Pin<&'a mut Notified<'n>>,
    stop_registered: bool,
    shutdown: &'a Shutdown,
}

/// How a wait ended.
enum Waited<T> {
    Done(T),
    TimedOut,
    /// Shutdown began (only for waits for a next request).
    Shutdown,
}

impl Waits<'_, '_> {
    /// `op`'s output, unless `limit` passes first or, with `until_shutdown`, shutdown begins
    /// (checked first: a client that always has a next request ready still gets closed).
    async fn wait<F: Future>(
        &mut self,
        limit: Duration,
        until_shutdown: bool,
        op: F,
    ) -> Waited<F::Output> {
        let (stop, registered, shutdown) =
            (&mut self.stop, &mut self.stop_registered, self.shutdown);
        let mut op = std::pin::pin!(op);
        let op = std::future::poll_fn(|cx| {
            if until_shutdown {
                if shutdown.begun() {
                    return Poll::Ready(None);
                }
                if !*registered {
                    if stop.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(None);
                    }
                    *registered = true;
                }
            }
            op.as_mut().poll(cx).map(Some)
        });
        match within(self.timer.as_mut(), limit, op).await {
            Some(Some(v)) => Waited::Done(v),
            Some(None) => Waited::Shutdown,
            None => Waited::TimedOut,
        }
    }
}

impl<IO: ByteStream> Conn<'_, '_, IO> {
    fn buffered(&self) -> &[u8] {
        &self.rbuf[self.start..]
    }

    /// The final response being written is complete (in `out` or already sent).
    fn response_done(&mut self) {
        if self.status >= 200 {
            stats::tally(&mut self.unsent, self.status);
            self.any_unsent = true;
        }
        self.status = 0;
        self.in_request = false;
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.rbuf.len() {
            self.rbuf.clear();
            self.start = 0;
        }
    }

    /// An output buffer before a response is written into it.
    fn ready_out(&mut self) {
        if self.out.capacity() == 0 {
            self.out = buffers::take(4096);
        }
    }

    /// Wait up to `limit` for a next request's first bytes, or for shutdown: for `IDLE_HOLD`
    /// here, then, if the stream has a socket to wait on, as an idle wait (`PeriodEnd::Idle`).
    /// Without one (TLS with output pending, rare) the read goes on holding the read buffer only.
    async fn next_bytes(&mut self, limit: Duration) -> Result<(), PeriodEnd> {
        let hold = IDLE_HOLD.min(limit);
        let r = match self.fill(hold, true).await {
            Waited::TimedOut if limit > hold && self.io.idle_socket().is_some() => {
                return Err(PeriodEnd::Idle(Instant::now() + (limit - hold)))
            }
            Waited::TimedOut if limit > hold => {
                buffers::give(std::mem::take(&mut self.out));
                self.fill(limit - hold, true).await
            }
            r => r,
        };
        match r {
            Waited::Done(Ok(0)) | Waited::TimedOut => Err(PeriodEnd::Abort),
            Waited::Done(Err(e)) => Err(e.into()),
            Waited::Done(Ok(_)) => Ok(()),
            Waited::Shutdown => Err(PeriodEnd::Close),
        }
    }

    /// Read more request bytes within the client timeout. `Ok(0)` is end of stream; `None` a
    /// timeout.
    async fn read_more(&mut self) -> Option<io::Result<usize>> {
        self.read_within(self.timeout).await
    }

    /// [`Self::read_more`] with another time limit.
    async fn read_within(&mut self, limit: Duration) -> Option<io::Result<usize>> {
        match self.fill(limit, false).await {
            Waited::Done(r) => Some(r),
            Waited::TimedOut | Waited::Shutdown => None,
        }
    }

    /// Read more request bytes, flushing pending output first (we are about to wait).
    async fn fill(&mut self, limit: Duration, until_shutdown: bool) -> Waited<io::Result<usize>> {
        if let Err(e) = self.flush().await {
            return Waited::Done(Err(e));
        }
        if self.start > 0 {
            self.rbuf.drain(..self.start);
            self.start = 0;
        }
        if self.rbuf.capacity() == 0 {
            self.rbuf = buffers::take(READ_CHUNK);
        }
        self.rbuf.reserve(READ_CHUNK);
        // Cancel-safe: bytes are appended only by a read that completes.
        if !*self.stamps {
            let read = self.io.read_buf(&mut self.rbuf);
            return self.waits.wait(limit, until_shutdown, read).await;
        }
        let read = self.io.read_stamped(&mut self.rbuf);
        match self.waits.wait(limit, until_shutdown, read).await {
            Waited::Done(Ok((n, at))) => {
                self.arrived = at;
                Waited::Done(Ok(n))
            }
            Waited::Done(Err(e)) => Waited::Done(Err(e)),
            Waited::TimedOut => Waited::TimedOut,
            Waited::Shutdown => Waited::Shutdown,
        }
    }

    async fn write_timed(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match within(
            self.waits.timer.as_mut(),
            self.timeout,
            self.io.write_vectored(bufs),
        )
        .await
        {
            Some(Ok(0)) => Err(io::ErrorKind::WriteZero.into()),
            Some(r) => r,
            None => Err(stopped_reading()),
        }
    }

    /// The output buffer could not take a response head without growing past `OUT_FLUSH`: it
    /// is to be flushed first.
    fn no_head_room(&self) -> bool {
        self.out.len() > OUT_FLUSH - HEAD_ROOM
    }

    /// Append body bytes, flushing each time they fill the buffer to `BODY_FILL`.
    async fn put(&mut self, mut data: &[u8]) -> io::Result<()> {
        loop {
            let n = data.len().min(BODY_FILL.saturating_sub(self.out.len()));
            self.out.extend_from_slice(&data[..n]);
            data = &data[n..];
            if data.is_empty() {
                return Ok(());
            }
            self.flush().await?;
        }
    }

    async fn flush(&mut self) -> io::Result<()> {
        while !self.out.is_empty() {
            let out = std::mem::take(&mut self.out);
            let n = self.write_timed(&[IoSlice::new(&out)]).await;
            self.out = out;
            let n = n?;
            self.out.drain(..n);
        }
        within(self.waits.timer.as_mut(), self.timeout, self.io.flush())
            .await
            .unwrap_or_else(|| Err(stopped_reading()))?;
        // Every complete response is now with the transport.
        if self.any_unsent {
            stats::served_by_class(Proto::H1, &self.unsent);
            self.unsent = [0; 5];
            self.any_unsent = false;
        }
        Ok(())
    }

    /// The answer when no request could be planned: an error page, which closes the connection.
    fn error_page(&mut self, page: ErrorPage, t_first: Instant) -> (Exchange, Instant) {
        stats::error_page(page);
        self.ready_out();
        let x = Exchange::error(page, Version::Http11, self.date, t_first);
        (x, t_first)
    }

    /// Wait for a request's head and plan its answer (an error page if the head is malformed or
    /// late): the exchange and the instant its head began.
    async fn request(&mut self) -> Result<(Exchange, Instant), PeriodEnd> {
        // Idle keep-alive: no byte of a next request within the timeout (or the time the last
        // request set with `w`) → silent close; at shutdown, close at once. (Flush outside the
        // select: a cancelled flush loses output.)
        let idle = self.idle.take().unwrap_or(self.timeout);
        // A delay counts from the request's arrival: a head that comes in a read of its own
        // arrived when the kernel stamped it, if it did; a pipelined one, now that it is its turn.
        let t_first = if self.buffered().is_empty() {
            self.next_bytes(idle).await?;
            self.arrived.take().unwrap_or_else(Instant::now)
        } else {
            Instant::now()
        };
        loop {
            // The fields, not `buffered()`: the head is borrowed beside them (taking it out and
            // putting it back copied it twice per request).
            match head::parse(&self.rbuf[self.start..], &mut self.head, self.lenient) {
                Parsed::Complete => break,
                Parsed::Error(page) => return Ok(self.error_page(page, t_first)),
                // The whole head within the timeout from its first byte, as HAProxy's
                // `timeout http-request`: a timer restarted at every read would let a client
                // trickling a byte at a time hold the connection for ever (slowloris).
                Parsed::Partial => match self
                    .read_within(self.timeout.saturating_sub(t_first.elapsed()))
                    .await
                {
                    Some(Ok(0)) => return Err(PeriodEnd::Abort),
                    Some(Ok(_)) => {}
                    None => return Ok(self.error_page(ErrorPage::Timeout, t_first)),
                    Some(Err(e)) => return Err(PeriodEnd::Failed(e)),
                },
            }
        }
        self.ready_out();
        let head_len = self.head.len;
        if self.h2c_upgrade && self.head.upgrade_h2c {
            let settings = self.head.http2_settings.clone().unwrap_or_default();
            let request = Box::new(super::Upgrading {
                head: std::mem::take(&mut self.head.request),
                head_bytes: head_len as u64,
                http2_settings: self.buffered()[settings].trim_ascii().to_vec(),
            });
            self.consume(head_len);
            self.out.extend_from_slice(encode::SWITCHING);
            stats::interim(Proto::H1);
            let buffered = self.buffered().to_vec();
            return Err(PeriodEnd::Upgrade { request, buffered });
        }
        self.consume(head_len);
        let framing = self.head.body.unwrap_or(head::BodyFraming::None);
        let version = if self.head.is_11 {
            Version::Http11
        } else {
            Version::Http10
        };
        let has_body = framing != head::BodyFraming::None;
        let req = (self.head.request).summary(version, has_body, head_len as u64, self.date);
        let x = crate::plumbing::thread_ctx::exchange(&req, t_first);
        self.in_request = true;
        self.req_body = RequestBody::new(framing);
        Ok((x, t_first))
    }

    /// Carry out the end of an exchange (`carry_out`): the next request
    /// (`Ok`), or how the busy period ends.
    fn ended(&mut self, x: &Exchange, end: io::Result<ExchangeEnd>) -> Result<(), PeriodEnd> {
        match end {
            Ok(ExchangeEnd::KeepAlive) => {
                self.response_done();
                self.idle = x.idle();
                Ok(())
            }
            Ok(ExchangeEnd::Close | ExchangeEnd::NoFinal) => {
                self.response_done();
                Err(PeriodEnd::Close)
            }
            Ok(ExchangeEnd::Abort) => Err(PeriodEnd::Abort),
            Err(e) => Err(PeriodEnd::Failed(e)),
        }
    }

    /// Read and discard the request body, or its first `limit` bytes: the bytes it took and
    /// how it stopped.
    async fn read_body(&mut self, limit: Option<u64>) -> (u64, BodyRead) {
        let mut n = 0u64;
        loop {
            let room = limit.map_or(usize::MAX, |l| (l - n).min(usize::MAX as u64) as usize);
            if room == 0 && !self.req_body.is_done() {
                return (n, BodyRead::LimitReached);
            }
            if !self.buffered().is_empty() {
                // The fields, not `buffered()`: the decoder is borrowed beside them.
                let buffered = &self.rbuf[self.start..];
                match self.req_body.feed(&buffered[..buffered.len().min(room)]) {
                    Ok(used) => {
                        self.consume(used);
                        n += used as u64;
                    }
                    Err(_) => return (n, BodyRead::Failed(BodyFailure::Malformed)),
                }
            }
            if self.req_body.is_done() {
                return (n, BodyRead::Ended);
            }
            if limit == Some(n) {
                return (n, BodyRead::LimitReached);
            }
            match self.read_more().await {
                // The connection ended inside the body.
                Some(Ok(0)) => return (n, BodyRead::Failed(BodyFailure::Malformed)),
                Some(Ok(_)) => {}
                None => return (n, BodyRead::Failed(BodyFailure::Timeout)),
                Some(Err(_)) => return (n, BodyRead::Failed(BodyFailure::Broken)),
            }
        }
    }

    async fn body(
        &mut self,
        kind: BodyKind,
        size: u64,
        chunked: bool,
        zero_copy: bool,
    ) -> io::Result<()> {
        if chunked {
            for data in encode::slices(kind, 0, size) {
                encode::chunk_start(&mut self.out, data.len());
                self.put(data).await?;
                encode::chunk_end(&mut self.out);
            }
            self.out.extend_from_slice(encode::LAST_CHUNK);
            Ok(())
        } else if size <= crate::config::H1_COPY_UP_TO {
            for data in encode::slices(kind, 0, size) {
                self.put(data).await?;
            }
            Ok(())
        } else if self.splice
            && zero_copy
            && size >= super::splice::MIN_SIZE
            && self.io.tcp().is_some()
        {
            self.flush().await?;
            let tcp = self.io.tcp().expect("checked above");
            Box::pin(super::splice::send(
                tcp,
                kind,
                size,
                self.timeout,
                self.pipe_size,
            ))
            .await
        } else {
            Box::pin(self.large_body(kind, size)).await
        }
    }

    /// `size` bytes as one-byte chunks (`k=2`), then the last chunk if `end`.
    async fn byte_chunks(&mut self, kind: BodyKind, size: u64, end: bool) -> io::Result<()> {
        debug_assert_eq!(kind, BodyKind::Ones, "chunked bodies are made of ones");
        for block in encode::byte_chunks(size) {
            self.put(block).await?;
        }
        if end {
            self.out.extend_from_slice(encode::LAST_CHUNK);
        }
        Ok(())
    }

    /// Pending output (the head) plus the body, as vectored writes of up to `IOV` static slices.
    async fn large_body(&mut self, kind: BodyKind, size: u64) -> io::Result<()> {
        let mut off = 0u64;
        while off < size || !self.out.is_empty() {
            let out = std::mem::take(&mut self.out);
            let mut iov: [IoSlice<'_>; IOV + 1] = [IoSlice::new(&[]); IOV + 1];
            let mut count = 0;
            if !out.is_empty() {
                iov[0] = IoSlice::new(&out);
                count = 1;
            }
            for s in encode::slices(kind, off, size - off).take(iov.len() - count) {
                iov[count] = IoSlice::new(s);
                count += 1;
            }
            let written = self.write_timed(&iov[..count]).await;
            let head_len = out.len();
            self.out = out;
            let n = written?;
            if n < head_len {
                self.out.drain(..n);
            } else {
                self.out.clear();
                off += (n - head_len) as u64;
            }
        }
        Ok(())
    }
}

/// The HTTP/1 side of the step driver: heads and bodies appended to the output buffer (flushed
/// as it fills), waits preceded by a flush (`Action::Flush`).
impl<IO: ByteStream> Conn<'_, '_, IO> {
    /// Carry an exchange's actions out, to its end.
    async fn carry_out(&mut self, steps: &mut StepDriver) -> io::Result<ExchangeEnd> {
        loop {
            match steps.poll() {
                Action::Interim(head) => self.interim(&head).await?,
                Action::Head(head) => self.head(&head).await?,
                Action::Text(text) => self.out.extend_from_slice(text.as_bytes()),
                Action::Generated(body) => self.generated(body).await?,
                Action::Piece(piece) => self.piece(piece).await?,
                Action::ReadBody { limit } => {
                    // Boxed: few requests have a body, and its reads would otherwise enlarge
                    // every busy period's future.
                    let (bytes, how) = Box::pin(self.read_body(limit)).await;
                    steps.body_read(bytes, how, Instant::now());
                }
                Action::Flush => self.flush().await?,
                Action::WaitUntil(t) => {
                    self.sleep_until(t).await;
                    steps.resumed(Instant::now());
                }
                Action::Pause(pause) => {
                    self.sleep_until(Instant::now() + pause).await;
                    steps.resumed(Instant::now());
                }
                Action::Done(end) => return Ok(end),
            }
        }
    }

    async fn interim(&mut self, head: &ResponseHead) -> io::Result<()> {
        stats::interim(Proto::H1);
        if *head == ResponseHead::interim(100) {
            self.out.extend_from_slice(encode::CONTINUE);
        } else {
            if self.no_head_room() {
                Box::pin(self.flush()).await?;
            }
            encode::head(&mut self.out, head, self.extra_head);
        }
        Ok(())
    }

    async fn head(&mut self, head: &ResponseHead) -> io::Result<()> {
        if self.no_head_room() {
            Box::pin(self.flush()).await?;
        }
        self.status = head.status;
        encode::head(&mut self.out, head, self.extra_head);
        Ok(())
    }

    async fn generated(&mut self, body: Generated) -> io::Result<()> {
        if body.chunked && body.byte_chunks {
            self.byte_chunks(body.kind, body.size, true).await
        } else {
            self.body(body.kind, body.size, body.chunked, body.zero_copy)
                .await
        }
    }

    async fn piece(&mut self, p: Piece) -> io::Result<()> {
        // Each piece leaves on its own (the socket has TCP_NODELAY).
        if p.byte_chunks {
            self.byte_chunks(p.kind, p.len, p.len == 0).await?;
        } else if p.chunked && p.len == 0 {
            self.out.extend_from_slice(encode::LAST_CHUNK);
        } else {
            let data = encode::piece(p.kind, p.offset, p.len);
            if p.chunked {
                encode::chunk_start(&mut self.out, data.len());
            }
            self.put(data).await?;
            if p.chunked {
                encode::chunk_end(&mut self.out);
            }
        }
        self.flush().await
    }

    async fn sleep_until(&mut self, t: Instant) {
        // This connection's requests wait: count their next delays from their arrival.
        if !*self.stamps {
            *self.stamps = self.io.stamp_arrivals();
        }
        loadterm_runtime::timer::sleep_until(t).await
    }
}

fn stopped_reading() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "client stopped reading")
}

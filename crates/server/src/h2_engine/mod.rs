//! HTTP/2 engine (TLS ALPN `h2`; h2c by prior knowledge or `Upgrade: h2c` on the clear port): a
//! thin driver of `loadterm_codec::h2::Connection` (server role). The connection's task reads,
//! feeds the codec, answers every request that needs no wait at once (`stream::H2Stream`,
//! encoded straight into the pass, `emit`), and writes the pass: one write per read batch. A
//! request that waits (a body to read, a delay, a large body under flow control) goes on in a
//! task of its own on the same thread, sharing the connection through `Shared`. A connection
//! idle for `h1`'s `PARK_AFTER` is handed over (`IdleHandover`) to be parked as an HTTP/1 one is:
//! its task ends, and what it must remember (`Resting`: the codec's connection and the HPACK
//! decoder put away, 128 bytes) waits boxed beside the socket.

mod emit;
#[cfg(test)]
mod sim_tests;
mod stream;

use crate::config::{Config, ExtraHeaders};
use crate::h1::Upgrading;
use crate::park::PARK_AFTER;
use crate::plumbing::stats::{self, CountedError, Protection};
use crate::stream::prefixed::Prefixed;
use crate::stream::ByteStream;
use loadterm_codec::fields::{self, RequestFields};
use loadterm_codec::h2::{code, ConnError, Connection, Dormant, Event, LocalSettings, Role};
use loadterm_codec::hpack::{put_literal, DormantDecoder, HpackDecoder, HpackError};
use loadterm_exchange::{Exchange, HeadBuilder, StepDriver, Version};
use std::cell::RefCell;
use std::collections::HashMap;
use std::future::poll_fn;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

/// Why an HTTP/2 connection failed: counted once ([`H2ConnError::count`]) by `serve`
/// as it ends, before its last frames go out (a client that reads our GOAWAY finds it counted).
#[derive(Debug, thiserror::Error)]
pub(crate) enum H2ConnError {
    #[error("HTTP/2 handshake not done within the client timeout")]
    HandshakeTimeout,
    #[error(transparent)]
    Protocol(#[from] ConnError),
    #[error("HTTP/2 connection failed: {0}")]
    Io(#[from] io::Error),
}

impl H2ConnError {
    /// Count the failure: a timeout; a flood cut off (our budget of frames that ask for nothing:
    /// `h2_control_flood`; endless CONTINUATION or malformed streams: `enhance_your_calm`); I/O
    /// errors by kind; any other protocol error.
    fn count(&self) {
        match self {
            H2ConnError::HandshakeTimeout => stats::error(CountedError::Timeout),
            H2ConnError::Protocol(e) if e.is_control_flood() => {
                stats::protection(Protection::H2ControlFlood)
            }
            H2ConnError::Protocol(e) if e.code == code::ENHANCE_YOUR_CALM => {
                stats::protection(Protection::EnhanceYourCalm)
            }
            H2ConnError::Protocol(_) => stats::error(CountedError::Protocol),
            H2ConnError::Io(e) => stats::io_error(e),
        }
    }
}

/// Serve a connection that switched from HTTP/1.1 (`Upgrade: h2c`, the `101` sent): `buffered`
/// is what the client sent after the upgrading request, which is answered on stream 1 as HTTP/1
/// parsed it, its `HTTP2-Settings` the client's first settings. Once the buffered bytes are
/// read, it is handed over idle as any other (then served by `resume`).
pub(crate) fn serve_upgraded<IO>(
    io: IO,
    buffered: Vec<u8>,
    request: Box<Upgrading>,
    cfg: Arc<Config>,
) -> impl Future<Output = Result<Option<IdleHandover<Prefixed<IO>>>, H2ConnError>>
where
    IO: ByteStream + 'static,
{
    serve_new(
        Prefixed::new(buffered, io),
        cfg,
        Box::default(),
        Some(request),
    )
}

/// What an idle connection must remember while parked (128 bytes): the codec's connection put
/// away (the peer's settings, windows, stream ids, flood budget), the HPACK decoder's table, the
/// fields added to every response, and the `w` idle time the last request set.
pub(crate) struct Resting {
    conn: Dormant,
    decoder: DormantDecoder,
    extra: Box<[u8]>,
    idle_ms: u64,
}

/// A connection idle for `PARK_AFTER` (only when `IO::PARKS`): to be parked until readable,
/// then served again (`resume`), or at `until` served once more to close with its GOAWAY.
pub(crate) struct IdleHandover<IO> {
    pub io: IO,
    pub until: Instant,
    pub rest: Resting,
}

/// Our SETTINGS, from the configuration: a connection woken from `Resting` is given them again.
fn local_settings(cfg: &Config) -> LocalSettings {
    let s = &cfg.h2;
    LocalSettings {
        max_concurrent_streams: s.max_streams,
        stream_window: s.stream_window,
        conn_window: s.conn_window,
        max_frame_size: s.max_frame_size,
        max_header_list_size: s.max_header_list,
        header_table_size: 4096,
    }
}

/// A request answered on a task of its own: what the connection tells it.
#[derive(Default)]
struct Request {
    /// Request body bytes received and not yet reported.
    body: u64,
    /// The request body ended (END_STREAM).
    ended: bool,
    /// The stream was reset.
    reset: bool,
    /// Woken when any of the above changes, a window opens or the pass drains.
    waker: Option<Waker>,
}

/// The connection as its requests share it (on one thread).
pub(super) struct Shared {
    conn: Connection,
    pass: emit::Pass,
    /// Requests being answered, by stream.
    requests: HashMap<u32, Request>,
    /// The connection's task, woken when a request queued frames or ended.
    task: Option<Waker>,
    /// The HPACK block of the fields added to every response (`alt-svc`, `x-ja4`).
    extra: Box<[u8]>,
    /// The connection is gone: waiting requests stop.
    closed: bool,
}

type SharedRef = Rc<RefCell<Shared>>;

impl Shared {
    fn wake_task(&mut self) {
        if let Some(w) = &self.task {
            w.wake_by_ref();
        }
    }

    fn wake_requests(&mut self) {
        for r in self.requests.values_mut() {
            if let Some(w) = r.waker.take() {
                w.wake();
            }
        }
    }
}

/// A request head taken from its HPACK block, into buffers reused for every request: what
/// the exchange reads of it, and its validation.
#[derive(Default)]
struct Head {
    request: HeadBuilder,
    check: RequestFields,
}

impl Head {
    fn begin(&mut self) {
        self.request.begin();
        self.check.begin();
    }

    fn field(&mut self, name: &[u8], value: &[u8]) {
        self.check.field(name, value);
        self.request.field(name, value);
    }
}

/// What woke the connection's task.
enum Wake {
    Read(usize),
    Eof,
    Failed(io::Error),
    /// No stream for the idle time, or the shutdown began.
    Idle,
    Stop,
    HandshakeTimeout,
    /// Idle for `PARK_AFTER`, with nothing held: to be handed over.
    Park,
}

/// Serve one HTTP/2 connection from its preface (not consumed yet) until it ends or is handed
/// over idle. `extra`: fields added to every response (`alt-svc`, `x-ja4`).
pub(crate) fn serve_connection<IO>(
    io: IO,
    cfg: Arc<Config>,
    extra: ExtraHeaders,
) -> impl Future<Output = Result<Option<IdleHandover<IO>>, H2ConnError>>
where
    IO: ByteStream + 'static,
{
    let mut block = Vec::new();
    for (name, value) in &extra {
        put_literal(&mut block, name.as_str().as_bytes(), value.as_bytes());
    }
    serve_new(io, cfg, block.into(), None)
}

/// A new connection served: `extra`, the fields' HPACK block added to every response;
/// `upgrading`, the request that asked for `Upgrade: h2c`, to answer on stream 1.
fn serve_new<IO>(
    io: IO,
    cfg: Arc<Config>,
    extra: Box<[u8]>,
    upgrading: Option<Box<Upgrading>>,
) -> impl Future<Output = Result<Option<IdleHandover<IO>>, H2ConnError>>
where
    IO: ByteStream + 'static,
{
    let mut conn = Connection::new(Role::Server, local_settings(&cfg));
    // Bad settings get what a SETTINGS frame with them would ("as it would any other SETTINGS
    // frame", RFC 7540 §3.2.1), not hidden behind HTTP/1.1: the connection keeps the error, its
    // GOAWAY goes out first and the first read ends the connection with it (counted); stream 1
    // is not processed.
    let upgraded = upgrading.filter(|up| conn.upgrade_settings(&up.http2_settings).is_ok());
    let mut driver = Driver::new(cfg, conn, HpackDecoder::default(), extra, 0);
    if let Some(up) = upgraded {
        driver.answer_upgraded(&up);
    }
    driver.serve(io, None)
}

/// Serve a connection parked idle (`rest`) again until it ends or is handed over idle once
/// more; its next request is awaited until `until`.
pub(crate) fn resume<IO>(
    io: IO,
    cfg: Arc<Config>,
    rest: Resting,
    until: Instant,
) -> impl Future<Output = Result<Option<IdleHandover<IO>>, H2ConnError>>
where
    IO: ByteStream + 'static,
{
    let Resting {
        conn,
        decoder,
        extra,
        idle_ms,
    } = rest;
    let conn = conn.wake(local_settings(&cfg));
    let driver = Driver::new(cfg, conn, decoder.wake(), extra, idle_ms);
    driver.serve(io, Some(until))
}

/// The connection's task: what it keeps between reads.
struct Driver {
    shared: SharedRef,
    decoder: HpackDecoder,
    head: Head,
    max_list: usize,
    cfg: Arc<Config>,
    /// `w`: the idle time (ms, 0: none) the last request set for the connection.
    idle_ms: u64,
}

impl Driver {
    fn new(
        cfg: Arc<Config>,
        conn: Connection,
        decoder: HpackDecoder,
        extra: Box<[u8]>,
        idle_ms: u64,
    ) -> Driver {
        let shared = Rc::new(RefCell::new(Shared {
            conn,
            pass: emit::Pass::new(cfg.h2.copy_up_to()),
            requests: HashMap::new(),
            task: None,
            extra,
            closed: false,
        }));
        Driver {
            shared,
            decoder,
            head: Head::default(),
            max_list: cfg.h2.max_header_list as usize,
            cfg,
            idle_ms,
        }
    }

    /// Serve the connection until it ends or is handed over idle; its next request is awaited
    /// until `until` (a new connection's preface: the timeout).
    async fn serve<IO>(
        mut self,
        mut io: IO,
        until: Option<Instant>,
    ) -> Result<Option<IdleHandover<IO>>, H2ConnError>
    where
        IO: ByteStream + 'static,
    {
        let until = until.map_or_else(
            || tokio::time::Instant::now() + self.cfg.timeout,
            tokio::time::Instant::from_std,
        );
        let served = match self.run(&mut io, until).await {
            Ok(Some(until)) => return Ok(Some(self.hand_over(io, until))),
            Ok(None) => Ok(()),
            Err(e) => {
                e.count();
                Err(e)
            }
        };
        let shared = self.shared;
        {
            let mut sh = shared.borrow_mut();
            sh.closed = true;
            sh.wake_requests();
            // The connection's last frames (a GOAWAY) go last.
            let Shared { conn, pass, .. } = &mut *sh;
            conn.take_control(pass.buf());
            pass.copied();
        }
        // The last frames (a GOAWAY) go out, then the lingering close, within the linger's time.
        let _ = tokio::time::timeout(crate::stream::linger::LINGER, async {
            let _ = poll_fn(|cx| shared.borrow_mut().pass.poll_write(&mut io, cx)).await;
            crate::stream::linger::close(&mut io).await;
        })
        .await;
        served.map(|()| None)
    }

    /// Serve until the connection ends (`None`), or has been idle for `PARK_AFTER` and can be
    /// handed over (`Some`: the deadline of its next request). Its next request is awaited
    /// until `until` (its preface, if not received yet).
    async fn run<IO: ByteStream>(
        &mut self,
        io: &mut IO,
        mut until: tokio::time::Instant,
    ) -> Result<Option<Instant>, H2ConnError> {
        let cfg = self.cfg.clone();
        let stop = cfg.shutdown.wait();
        tokio::pin!(stop);
        // One timer: the deadline, or before it the moment to hand an idle connection over.
        let timer_at = |now: tokio::time::Instant, until: tokio::time::Instant| {
            if IO::PARKS {
                until.min(now + PARK_AFTER)
            } else {
                until
            }
        };
        let idle = tokio::time::sleep_until(timer_at(tokio::time::Instant::now(), until));
        tokio::pin!(idle);
        let mut rbuf: Vec<u8> = Vec::new();
        let mut going_away = false;
        loop {
            let wake = poll_fn(|cx| {
                let mut sh = self.shared.borrow_mut();
                sh.task = Some(cx.waker().clone());
                // Write what is pending; a full socket wakes us when it drains.
                if sh.pass.queued() > 0 || sh.conn.has_control() {
                    let Shared { conn, pass, .. } = &mut *sh;
                    conn.take_control(pass.buf());
                    pass.copied();
                    match pass.poll_write(io, cx) {
                        Poll::Ready(Ok(())) => {
                            if let Poll::Ready(Err(e)) = Pin::new(&mut *io).poll_flush(cx) {
                                return Poll::Ready(Wake::Failed(e));
                            }
                            sh.wake_requests();
                        }
                        Poll::Ready(Err(e)) => return Poll::Ready(Wake::Failed(e)),
                        Poll::Pending => {}
                    }
                }
                let preface = sh.conn.preface_received();
                drop(sh);
                let busy = self.busy();
                if !going_away && stop.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Wake::Stop);
                }
                // After our GOAWAY, the connection ends with its last stream.
                if going_away && !busy {
                    return Poll::Ready(Wake::Idle);
                }
                if rbuf.capacity() == 0 {
                    rbuf = crate::buffers::take(16 * 1024);
                }
                rbuf.clear();
                let read = std::pin::pin!(tokio::io::AsyncReadExt::read_buf(&mut *io, &mut rbuf));
                match read.poll(cx) {
                    Poll::Ready(Ok(0)) => return Poll::Ready(Wake::Eof),
                    Poll::Ready(Ok(n)) => return Poll::Ready(Wake::Read(n)),
                    Poll::Ready(Err(e)) => return Poll::Ready(Wake::Failed(e)),
                    Poll::Pending => {
                        // Waiting for the client: an idle connection holds no buffer.
                        crate::buffers::give(std::mem::take(&mut rbuf));
                        self.shared.borrow_mut().pass.release();
                    }
                }
                let timed_out = if preface {
                    Wake::Idle
                } else {
                    Wake::HandshakeTimeout
                };
                if preface && busy {
                    // Not idle while a stream is open: the idle time starts when the last ends.
                    let w = if self.idle_ms > 0 {
                        Duration::from_millis(self.idle_ms)
                    } else {
                        cfg.timeout
                    };
                    let now = tokio::time::Instant::now();
                    until = now + w;
                    idle.as_mut().reset(timer_at(now, until));
                    return Poll::Pending;
                }
                if idle.as_mut().poll(cx).is_ready() {
                    if tokio::time::Instant::now() >= until {
                        return Poll::Ready(timed_out);
                    }
                    if preface && !going_away && self.can_park(io) {
                        return Poll::Ready(Wake::Park);
                    }
                    // Not now: the deadline alone.
                    idle.as_mut().reset(until);
                    if idle.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(timed_out);
                    }
                }
                Poll::Pending
            })
            .await;
            match wake {
                Wake::Read(n) => {
                    let input = &rbuf[..n];
                    let t = Instant::now();
                    let mut batch = Vec::new();
                    let failed = self.feed(input, t, &mut batch);
                    if !batch.is_empty() && !going_away {
                        // A new request: the idle time (`w`'s, or the timeout) starts again.
                        let w = match self.idle_ms {
                            0 => cfg.timeout,
                            ms => Duration::from_millis(ms),
                        };
                        let now = tokio::time::Instant::now();
                        until = now + w;
                        idle.as_mut().reset(timer_at(now, until));
                    }
                    // The connection's own answers (a SETTINGS ACK) go first: the responses may
                    // already be under the new settings (a window a SETTINGS frame opened).
                    {
                        let mut sh = self.shared.borrow_mut();
                        let Shared { conn, pass, .. } = &mut *sh;
                        conn.take_control(pass.buf());
                        pass.copied();
                    }
                    // Every request received is answered before any is written: many streams'
                    // responses leave in one write.
                    for x in batch {
                        self.answer(x);
                    }
                    if let Err(e) = failed {
                        return Err(e.into());
                    }
                    if going_away && !self.busy() {
                        return Ok(None);
                    }
                }
                Wake::Eof => return Ok(None),
                // A client that resets (or drops TLS without close_notify) with nothing in
                // flight has closed, not failed: as at the end of every load run.
                Wake::Failed(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionReset
                            | io::ErrorKind::BrokenPipe
                            | io::ErrorKind::UnexpectedEof
                    ) && !self.busy() =>
                {
                    return Ok(None)
                }
                Wake::Failed(e) => return Err(e.into()),
                Wake::HandshakeTimeout => return Err(H2ConnError::HandshakeTimeout),
                Wake::Park => return Ok(Some(until.into_std())),
                Wake::Idle | Wake::Stop => {
                    // GOAWAY: streams the client opened before it saw it are still served,
                    // within the timeout.
                    if going_away {
                        return Ok(None);
                    }
                    going_away = true;
                    self.shared.borrow_mut().conn.goaway();
                    if !self.busy() {
                        return Ok(None);
                    }
                    until = tokio::time::Instant::now() + cfg.timeout;
                    idle.as_mut().reset(until);
                }
            }
        }
    }

    /// Idle and holding nothing but what `Resting` keeps: no request's task left, nothing
    /// queued or half received in the codec, nothing held in the stream (TLS) and a stream that
    /// parks.
    fn can_park<IO: ByteStream>(&self, io: &IO) -> bool {
        let sh = self.shared.borrow();
        IO::PARKS
            && Rc::strong_count(&self.shared) == 1
            && sh.conn.at_rest()
            && sh.pass.queued() == 0
            && io.idle_socket().is_some()
    }

    /// The connection, idle (`can_park`), handed over: its codec state and HPACK table put
    /// away, everything else freed.
    fn hand_over<IO>(self, io: IO, until: Instant) -> IdleHandover<IO> {
        let Driver {
            shared,
            decoder,
            idle_ms,
            ..
        } = self;
        let Ok(shared) = Rc::try_unwrap(shared) else {
            unreachable!("can_park: no request holds the connection");
        };
        let Shared { conn, extra, .. } = shared.into_inner();
        IdleHandover {
            io,
            until,
            rest: Resting {
                conn: conn.rest(),
                decoder: decoder.rest(),
                extra,
                idle_ms,
            },
        }
    }

    /// A stream is open, or a request still being answered.
    fn busy(&self) -> bool {
        let sh = self.shared.borrow();
        sh.conn.open_streams() > 0 || !sh.requests.is_empty()
    }

    /// Feed what was read to the codec: new requests into `batch`, body bytes and resets to
    /// the requests answered on their own tasks.
    fn feed(
        &mut self,
        mut input: &[u8],
        now: Instant,
        batch: &mut Vec<(u32, Exchange)>,
    ) -> Result<(), ConnError> {
        let shared = self.shared.clone();
        let mut sh = shared.borrow_mut();
        let Shared { conn, requests, .. } = &mut *sh;
        let mut woke = false;
        loop {
            let ev = match conn.recv(&mut input) {
                Ok(Some(ev)) => ev,
                Ok(None) => break,
                Err(e) => {
                    sh.wake_requests();
                    return Err(e);
                }
            };
            match ev {
                Event::Headers {
                    stream,
                    block,
                    end_stream,
                    first,
                    discard,
                    ..
                } => {
                    let head = &mut self.head;
                    head.begin();
                    let mut trailer_fault = None;
                    let decoded = self.decoder.decode(block, self.max_list, |name, value| {
                        if first {
                            head.field(name, value);
                        } else if trailer_fault.is_none() {
                            trailer_fault = fields::trailer_field(name, value).err();
                        }
                    });
                    if decoded == Err(HpackError::Invalid) {
                        conn.fail(code::COMPRESSION_ERROR, "invalid HPACK block");
                        continue;
                    }
                    if discard {
                        continue;
                    }
                    if !first {
                        // Trailers: the body's end.
                        if trailer_fault.is_some() || decoded.is_err() {
                            stats::error(CountedError::Protocol);
                            conn.reset(stream, code::PROTOCOL_ERROR);
                            if let Some(r) = requests.get_mut(&stream) {
                                r.reset = true;
                            }
                        } else if let Some(r) = requests.get_mut(&stream) {
                            r.ended = true;
                        }
                        if let Some(w) = requests.get_mut(&stream).and_then(|r| r.waker.take()) {
                            w.wake();
                        }
                        continue;
                    }
                    if decoded == Err(HpackError::TooLarge) {
                        // Beyond our SETTINGS_MAX_HEADER_LIST_SIZE (the HPACK bomb): refused
                        // without an answer (RFC 9113 §10.5.1), and counted among the streams
                        // reset for errors (a connection of them is cut off).
                        stats::protection(Protection::HeaderListTooLarge);
                        conn.reset(stream, code::PROTOCOL_ERROR);
                        continue;
                    }
                    let x = match self.head.check.finish() {
                        Err(_) => {
                            stats::error(CountedError::Protocol);
                            conn.reset(stream, code::PROTOCOL_ERROR);
                            continue;
                        }
                        // No tunnels here: refused unprocessed.
                        Ok(facts) if facts.connect => {
                            stats::error(CountedError::Protocol);
                            conn.reset(stream, code::REFUSED_STREAM);
                            continue;
                        }
                        Ok(facts) => {
                            if let Some(n) = facts.content_length {
                                conn.set_content_length(stream, n);
                            }
                            self.exchange(end_stream, now)
                        }
                    };
                    requests.insert(
                        stream,
                        Request {
                            ended: end_stream,
                            ..Request::default()
                        },
                    );
                    batch.push((stream, x));
                }
                Event::Data {
                    stream,
                    data,
                    end_stream,
                    ..
                } => {
                    if let Some(r) = requests.get_mut(&stream) {
                        r.body += data.len() as u64;
                        r.ended |= end_stream;
                        if let Some(w) = r.waker.take() {
                            w.wake();
                        }
                    }
                }
                Event::Reset { stream, .. } => {
                    if let Some(r) = requests.get_mut(&stream) {
                        r.reset = true;
                        if let Some(w) = r.waker.take() {
                            w.wake();
                        }
                    }
                }
                Event::Window => woke = true,
                Event::GoAway { .. } => {}
            }
        }
        if woke {
            sh.wake_requests();
        }
        Ok(())
    }

    /// The exchange of the request whose head was just decoded.
    fn exchange(&mut self, end_stream: bool, now: Instant) -> Exchange {
        let h = &self.head.request;
        let req = h.summary(Version::H2, !end_stream, h.text_size(), self.cfg.date);
        let x = crate::plumbing::thread_ctx::exchange(&req, now);
        // `w` holds from this request until the next.
        self.idle_ms = x.idle().map_or(0, |w| w.as_millis() as u64);
        x
    }

    /// The upgrading request, stream 1, answered first: after our SETTINGS, which are the
    /// connection's first frame.
    fn answer_upgraded(&mut self, up: &Upgrading) {
        let req = (up.head).summary(Version::H2, false, up.head_bytes, self.cfg.date);
        let x = crate::plumbing::thread_ctx::exchange(&req, Instant::now());
        self.idle_ms = x.idle().map_or(0, |w| w.as_millis() as u64);
        let stream = {
            let mut sh = self.shared.borrow_mut();
            let Shared {
                conn,
                pass,
                requests,
                ..
            } = &mut *sh;
            conn.take_control(pass.buf());
            pass.copied();
            let stream = conn.upgraded_stream();
            let request = Request {
                ended: true,
                ..Request::default()
            };
            requests.insert(stream, request);
            stream
        };
        self.answer((stream, x));
    }

    /// Answer a request: at once if it needs no wait, else on a task of its own.
    fn answer(&mut self, (stream, x): (u32, Exchange)) {
        let steps = StepDriver::new(x, Instant::now());
        let s = stream::H2Stream::new(steps, self.shared.clone(), stream, self.cfg.timeout);
        if let Some((s, action)) = s.at_once() {
            tokio::task::spawn_local(s.run(action));
        }
    }
}

//! Issue 30's spike: loadterm's HTTP/1.1 answers served by one thread on one epoll loop (mio),
//! with no runtime, no tasks, no wakers and no timers. It measures how much of an unpipelined
//! request's user-space cost is the runtime's machinery and how much is the work itself (parse,
//! plan, encode), against `loadterm serve -t 1` and `bench/epoll-floor.c` (docs/PERFORMANCE.md,
//! "The spike").
//!
//! Per readable connection: one read into the connection's buffer (another only if that one
//! filled it), every complete request head in it answered with the server's own strict parser
//! (`h1::head::parse`), exchange (`loadterm_exchange::Exchange`, built as the server's
//! `thread_ctx` builds it) and encoder (`h1::encode`), then one write of the responses.
//!
//! It answers what a plain GET's exchange gives: a head and a generated or text body (`s`, `r`,
//! `c`, `k=1`, `C`/`K`, the help and error pages), keep-alive or close. Anything that would wait
//! closes the connection instead: a request body to read (and its `100 Continue`), a delay
//! (`t`), a pause (`P`), pieces (`p`), one-byte chunks (`k=2`). Bodies are copied into the output
//! buffer whatever their size (the engine copies up to 16 KiB and writes larger ones by
//! reference or splices them): only small-body rows compare. No timeouts (an idle connection
//! stays open), no statistics, no `Upgrade: h2c` (answered as plain HTTP/1.1), no graceful
//! shutdown (SIGTERM ends it).
//!
//! ```sh
//! cargo build --release --manifest-path bench/spike-epoll/Cargo.toml
//! bench/spike-epoll/target/release/spike-epoll 127.0.0.1:18888
//! ```

use loadterm_exchange::{Action, Exchange, ExchangeEnd, Generated, StepDriver, Version};
use loadterm_plan::Rng;
use loadterm_server::h1::encode;
use loadterm_server::h1::head::{self, BodyFraming, Parsed, RequestHead};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use slab::Slab;
use std::io::{self, ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Instant;

/// A connection's read buffer: the largest request head the parser accepts (a partial head
/// that fills it is refused by the parser, 431, so a read never has zero room).
const READ_BUF: usize = head::MAX_HEAD;
/// Pipelined requests are answered until this much output waits, as the engine's buffer.
const OUT_HIGH: usize = 64 * 1024;
const LISTENER: Token = Token(usize::MAX);

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let addr = match (args.next(), args.next()) {
        (Some(addr), None) => addr,
        _ => {
            eprintln!("usage: spike-epoll ADDR:PORT");
            return ExitCode::from(2);
        }
    };
    let Ok(addr) = addr.parse::<SocketAddr>() else {
        eprintln!("spike-epoll: {addr:?} is not ADDR:PORT (an IP address and a port)");
        return ExitCode::from(2);
    };
    match serve(addr) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("spike-epoll: {e}");
            ExitCode::FAILURE
        }
    }
}

fn context(e: io::Error, what: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// The loop: runs until the process is killed.
fn serve(addr: SocketAddr) -> io::Result<()> {
    let mut listener = TcpListener::bind(addr).map_err(|e| context(e, &format!("bind {addr}")))?;
    let mut poll = Poll::new().map_err(|e| context(e, "epoll_create"))?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)
        .map_err(|e| context(e, "register the listener"))?;
    let mut events = Events::with_capacity(256);
    let mut conns: Slab<Conn> = Slab::new();
    // One generator for the thread, as the server's `thread_ctx` keeps one per worker.
    let mut rng = Rng::from_entropy();
    loop {
        match poll.poll(&mut events, None) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(context(e, "epoll_wait")),
        }
        for ev in &events {
            if ev.token() == LISTENER {
                accept(&listener, &poll, &mut conns);
                continue;
            }
            let key = ev.token().0;
            let Some(conn) = conns.get_mut(key) else {
                continue;
            };
            if conn.drive(ev.is_readable(), &mut rng).is_err() {
                // Dropping the socket closes it, which also takes it out of the epoll set.
                conns.remove(key);
            }
        }
    }
}

/// Accept every pending connection (the listener is edge-triggered).
fn accept(listener: &TcpListener, poll: &Poll, conns: &mut Slab<Conn>) {
    loop {
        match listener.accept() {
            Ok((mut sock, _)) => {
                // As the engine: responses leave at once, not after the client's delayed ACK.
                if let Err(e) = sock.set_nodelay(true) {
                    eprintln!("spike-epoll: TCP_NODELAY: {e}");
                }
                let entry = conns.vacant_entry();
                // Readable and writable, edge-triggered, once: no epoll_ctl per request.
                let interest = Interest::READABLE | Interest::WRITABLE;
                match poll
                    .registry()
                    .register(&mut sock, Token(entry.key()), interest)
                {
                    Ok(()) => {
                        entry.insert(Conn::new(sock));
                    }
                    Err(e) => eprintln!("spike-epoll: register a connection: {e}"),
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => {
                // EMFILE and the like: the connection waits in the backlog for the next edge.
                eprintln!("spike-epoll: accept: {e}");
                return;
            }
        }
    }
}

/// The connection is over (end of stream, an error, a close asked for, or a step the spike
/// does not carry out): drop it.
struct Closed;

struct Conn {
    sock: TcpStream,
    buf: Box<[u8]>,
    /// `buf[start..end]` is read and not yet answered.
    start: usize,
    end: usize,
    /// Reused from request to request, as the engine does.
    head: RequestHead,
    out: Vec<u8>,
    /// Close once `out` is written.
    close: bool,
}

impl Conn {
    fn new(sock: TcpStream) -> Conn {
        Conn {
            sock,
            buf: vec![0; READ_BUF].into_boxed_slice(),
            start: 0,
            end: 0,
            head: RequestHead::default(),
            out: Vec::new(),
            close: false,
        }
    }

    /// Answer, write, read, until the socket has nothing more to read or cannot take more
    /// output. `readable`: the event says there may be bytes to read.
    fn drive(&mut self, readable: bool, rng: &mut Rng) -> Result<(), Closed> {
        let mut drained = !readable;
        loop {
            let more = self.answer(rng)?;
            if !self.flush()? {
                // The rest when the socket is writable again (its edge wakes us).
                return Ok(());
            }
            if self.close {
                return Err(Closed);
            }
            if more {
                continue;
            }
            if drained {
                return Ok(());
            }
            drained = self.read()?;
        }
    }

    /// One read after what is buffered; true once the socket is drained: a short read, after
    /// which edge-triggered epoll reports the next bytes (as bench/epoll-floor.c reads).
    fn read(&mut self) -> Result<bool, Closed> {
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        } else if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
        }
        let room = &mut self.buf[self.end..];
        let want = room.len();
        loop {
            match self.sock.read(room) {
                Ok(0) => return Err(Closed),
                Ok(n) => {
                    self.end += n;
                    return Ok(n < want);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(true),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return Err(Closed),
            }
        }
    }

    /// Answer the complete request heads buffered, until the output reaches `OUT_HIGH`: true
    /// if it stopped there with bytes still to look at.
    fn answer(&mut self, rng: &mut Rng) -> Result<bool, Closed> {
        while !self.close && self.start < self.end {
            if self.out.len() >= OUT_HIGH {
                return Ok(true);
            }
            let t_first = Instant::now();
            let x = match head::parse(&self.buf[self.start..self.end], &mut self.head, false) {
                Parsed::Partial => return Ok(false),
                Parsed::Error(page) => {
                    // The engine answers the error page and closes; so does the spike.
                    self.close = true;
                    Exchange::error(page, Version::Http11, true, t_first)
                }
                Parsed::Complete => {
                    let h = &self.head;
                    let version = if h.is_11 {
                        Version::Http11
                    } else {
                        Version::Http10
                    };
                    let has_body = h.body.is_some_and(|b| b != BodyFraming::None);
                    // `serve`'s default: a `date` field in every response.
                    let req = h.request.summary(version, has_body, h.len as u64, true);
                    self.start += h.len;
                    Exchange::new(&req, rng, t_first)
                }
            };
            self.respond(x, t_first)?;
        }
        Ok(false)
    }

    /// Carry out the exchange's steps into the output: a head and a body, then keep-alive or
    /// close. No clock is read: without a wait, the answer is complete at the instant the
    /// request was (as the engine does).
    fn respond(&mut self, x: Exchange, now: Instant) -> Result<(), Closed> {
        let mut d = StepDriver::new(x, now);
        loop {
            match d.poll() {
                Action::Head(h) => encode::head(&mut self.out, &h, b""),
                Action::Text(text) => self.out.extend_from_slice(text.as_bytes()),
                Action::Generated(Generated {
                    kind,
                    size,
                    chunked,
                    byte_chunks: false,
                    ..
                }) => {
                    for data in encode::slices(kind, 0, size) {
                        if chunked {
                            encode::chunk_start(&mut self.out, data.len());
                        }
                        self.out.extend_from_slice(data);
                        if chunked {
                            encode::chunk_end(&mut self.out);
                        }
                    }
                    if chunked {
                        self.out.extend_from_slice(encode::LAST_CHUNK);
                    }
                }
                // Only a wait follows a flush, and the spike closes at a wait.
                Action::Flush => {}
                Action::Done(ExchangeEnd::KeepAlive) => return Ok(()),
                Action::Done(ExchangeEnd::Close | ExchangeEnd::NoFinal) => {
                    self.close = true;
                    return Ok(());
                }
                // A wait (a body to read, 100 Continue, a delay, a pause, pieces), one-byte
                // chunks, or an abort: out of the spike's scope, the connection closes.
                Action::Interim(_)
                | Action::ReadBody { .. }
                | Action::WaitUntil(_)
                | Action::Pause(_)
                | Action::Piece(_)
                | Action::Generated(_)
                | Action::Done(ExchangeEnd::Abort) => return Err(Closed),
            }
        }
    }

    /// Write the pending output; false if the socket took only part of it.
    fn flush(&mut self) -> Result<bool, Closed> {
        while !self.out.is_empty() {
            match self.sock.write(&self.out) {
                Ok(0) => return Err(Closed),
                Ok(n) if n == self.out.len() => self.out.clear(),
                Ok(n) => {
                    self.out.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return Err(Closed),
            }
        }
        Ok(true)
    }
}

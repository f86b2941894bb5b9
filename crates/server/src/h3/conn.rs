//! One HTTP/3 connection as a state machine over quinn-proto's `Connection`: its handshake, our
//! control stream (SETTINGS, GOAWAY), the client's unidirectional streams, its requests
//! (`stream`), and how it ends (the idle time `w`, the client's GOAWAY, shutdown). The driver
//! runs it when a datagram, a timer or a stream event concerns it; it does no I/O.

use super::recv::{Pulled, Recv};
use super::stream::{H3Progress, H3Request};
use crate::config::Config;
use crate::ja4::{self, QuicFingerprints};
use crate::plumbing::shutdown::ConnSlot;
use crate::plumbing::stats::{self, CountedError, HandshakeFailure, Transport};
use bytes::{Buf, Bytes};
use http::{HeaderName, HeaderValue};
use loadterm_h3::frame::{self, code, Decode, HeadDecoder, VarintDecoder};
use loadterm_h3::qpack;
use quinn_proto::{self as proto, Dir, Event, StreamEvent, StreamId};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// How long a peer may hold back an ACK: max_ack_delay's default (RFC 9000 §18.2), which
/// quinn's and most clients' transport parameters keep.
const MAX_ACK_DELAY: Duration = Duration::from_millis(25);

/// Request streams a client may open at first (`--h3-max-streams` if lower). quinn-proto keeps
/// an entry in two hash maps for every stream a client may open, made when its limit is set:
/// 52 with the 3 unidirectional streams fill maps of 64 buckets, where the default 100 takes
/// 128 (3.1 KB more of every connection, whether it ever has two requests in flight or not).
/// Limits from 26 to 52 take the same maps; fewer cost stream credit: quinn-proto announces
/// more once an eighth of the limit is freed, and at 16 a client pushing requests as fast as it
/// could waited for it (13–16% more CPU per request on 1 KiB responses in closed loop).
const FIRST_STREAM_LIMIT: u32 = 52;

/// The limit announced in the transport parameters; `H3::grow_streams` raises it towards
/// `--h3-max-streams` as a connection's requests near it.
pub(super) fn first_stream_limit(max: u32) -> u32 {
    max.min(FIRST_STREAM_LIMIT)
}

/// What every connection of a driver shares.
pub(super) struct Ctx<'a> {
    pub(super) cfg: &'a Config,
    /// Shutdown has begun.
    pub(super) stopping: bool,
    pub(super) fingerprints: Option<&'a QuicFingerprints>,
}

pub(super) struct H3Conn {
    pub(super) quic: proto::Connection,
    state: State,
    /// Counts the connection as open until it closes.
    slot: Option<ConnSlot>,
    /// The deadline in the driver's timer queue.
    pub(super) timer: Option<Instant>,
    /// In the driver's list of connections to run.
    pub(super) queued: bool,
    /// In the driver's list of connections that may have datagrams to send.
    pub(super) sending: bool,
}

enum State {
    /// The handshake, until `deadline` (the client timeout); the fingerprint's key.
    Handshake {
        deadline: Instant,
        fingerprint: Option<(SocketAddr, proto::ConnectionId)>,
    },
    Open(H3),
    /// Closed by either side: the driver keeps it until quinn-proto has drained it.
    Closed,
}

/// HTTP/3 on an established connection.
struct H3 {
    /// Fields added to every response (`x-ja4`).
    extra: Box<[(HeaderName, HeaderValue)]>,
    /// Our control stream, once quinn-proto lets us open it.
    control: Option<StreamId>,
    /// What is still to go on it (SETTINGS, then GOAWAY).
    control_out: Vec<u8>,
    unis: Vec<Uni>,
    requests: Vec<H3Request>,
    /// The first request stream not accepted: the GOAWAY's.
    next_id: u64,
    /// `w`: once no request is in progress, close (GOAWAY) if none comes by then.
    idle_until: Option<Instant>,
    goaway: Option<GoingAway>,
}

/// After our GOAWAY: the accepted requests finish, then the connection closes.
struct GoingAway {
    /// The requests are not waited for past it.
    until: Instant,
    /// Streams finished while going away whose answer is not yet acknowledged: closing drops
    /// unacknowledged stream data.
    unacked: Vec<StreamId>,
    /// Once the answers are in: the GOAWAY's time to arrive (it cannot be waited for: the
    /// control stream stays open, so it is never acknowledged as a whole).
    grace: Option<Instant>,
}

impl H3Conn {
    pub(super) fn new(
        quic: proto::Connection,
        slot: ConnSlot,
        fingerprint: Option<(SocketAddr, proto::ConnectionId)>,
        deadline: Instant,
    ) -> H3Conn {
        H3Conn {
            quic,
            state: State::Handshake {
                deadline,
                fingerprint,
            },
            slot: Some(slot),
            timer: None,
            queued: false,
            sending: false,
        }
    }

    pub(super) fn is_handshaking(&self) -> bool {
        matches!(self.state, State::Handshake { .. })
    }

    /// The next instant something is due: quinn-proto's timers and ours.
    pub(super) fn deadline(&mut self) -> Option<Instant> {
        let ours = match &self.state {
            State::Handshake { deadline, .. } => Some(*deadline),
            State::Open(h3) => h3.deadline(),
            State::Closed => None,
        };
        match (self.quic.poll_timeout(), ours) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Take in what happened (quinn-proto's events, the time) and do what follows.
    pub(super) fn run(&mut self, now: Instant, ctx: &Ctx) {
        while let Some(event) = self.quic.poll() {
            match event {
                Event::Connected => self.connected(ctx),
                Event::ConnectionLost { reason } => {
                    if self.is_handshaking() {
                        stats::handshake_failed(Transport::Quic, failure(&reason));
                    }
                    self.closed();
                }
                Event::Stream(StreamEvent::Readable { id } | StreamEvent::Writable { id }) => {
                    if let State::Open(h3) = &mut self.state {
                        h3.touch(id);
                    }
                }
                // An answer acknowledged, or stopped by the client: no longer waited for.
                Event::Stream(StreamEvent::Finished { id } | StreamEvent::Stopped { id, .. }) => {
                    if let State::Open(h3) = &mut self.state {
                        h3.touch(id);
                        if let Some(g) = &mut h3.goaway {
                            g.unacked.retain(|&u| u != id);
                        }
                    }
                }
                Event::Stream(StreamEvent::Opened { .. } | StreamEvent::Available { .. })
                | Event::HandshakeDataReady
                | Event::DatagramReceived
                | Event::DatagramsUnblocked => {}
            }
        }
        match &mut self.state {
            State::Handshake { deadline, .. } if now >= *deadline => {
                stats::handshake_failed(Transport::Quic, HandshakeFailure::Timeout);
                self.close(now, 0);
            }
            State::Open(h3) => {
                if let Err(code) = h3.run(&mut self.quic, now, ctx) {
                    self.close(now, code);
                }
            }
            State::Handshake { .. } | State::Closed => {}
        }
    }

    fn connected(&mut self, ctx: &Ctx) {
        let State::Handshake { fingerprint, .. } = &self.state else {
            return;
        };
        stats::handshake_ok(Transport::Quic);
        if self.quic.has_0rtt() {
            stats::early_data_accepted(Transport::Quic);
        }
        // Asked once the handshake is done, not at the first Initial: the rest of a
        // ClientHello spread over several Initials may still be on its way then. Every
        // datagram the ClientHello came in went through the sniffing socket.
        let fp = match (ctx.fingerprints, fingerprint) {
            (Some(f), Some((addr, dcid))) => f.take(*addr, dcid),
            _ => None,
        };
        let extra = ja4::with_header(Vec::new(), fp.as_deref()).into_boxed_slice();
        let mut settings = Vec::new();
        frame::put_varint(&mut settings, frame::SETTINGS_MAX_FIELD_SECTION_SIZE);
        frame::put_varint(&mut settings, ctx.cfg.h3.h3_max_header_list);
        let mut control_out = vec![frame::STREAM_CONTROL as u8];
        frame::put_frame(&mut control_out, frame::SETTINGS, &settings);
        self.state = State::Open(H3 {
            extra,
            control: None,
            control_out,
            unis: Vec::new(),
            requests: Vec::new(),
            next_id: 0,
            idle_until: None,
            goaway: None,
        });
    }

    fn close(&mut self, now: Instant, code: u32) {
        self.quic.close(now, code.into(), Bytes::new());
        self.closed();
    }

    /// The connection is over for HTTP/3: its byte counts go to the statistics and it no
    /// longer counts as open (quinn-proto still sends or awaits its CONNECTION_CLOSE).
    fn closed(&mut self) {
        if let State::Open(_) = self.state {
            let s = self.quic.stats();
            stats::bytes_in(Transport::Quic, s.udp_rx.bytes as usize);
            stats::bytes_out(Transport::Quic, s.udp_tx.bytes as usize);
        }
        self.state = State::Closed;
        self.slot = None;
    }
}

impl H3 {
    fn deadline(&self) -> Option<Instant> {
        let ours = match &self.goaway {
            None if self.requests.is_empty() => self.idle_until,
            None => None,
            Some(g) => Some(g.grace.unwrap_or(g.until)),
        };
        let requests = self.requests.iter().filter_map(|r| r.wake);
        requests.chain(ours).min()
    }

    /// A stream has news.
    fn touch(&mut self, id: StreamId) {
        if let Some(r) = self.requests.iter_mut().find(|r| r.id == id) {
            r.dirty = true;
        } else if let Some(u) = self.unis.iter_mut().find(|u| u.recv.id == id) {
            u.dirty = true;
        }
        // Our control stream is written at every run while it has bytes to go.
    }

    /// Serve: a connection error code if the connection must close.
    fn run(&mut self, q: &mut proto::Connection, now: Instant, ctx: &Ctx) -> Result<(), u32> {
        let cfg = ctx.cfg;
        while let Some(id) = q.streams().accept(Dir::Uni) {
            self.unis.push(Uni::new(id));
        }
        while let Some(id) = q.streams().accept(Dir::Bi) {
            if self.goaway.is_some() {
                // Above our GOAWAY: rejected, so the client may send it again.
                let _ = q
                    .send_stream(id)
                    .reset(frame::code::REQUEST_REJECTED.into());
                let _ = q.recv_stream(id).stop(frame::code::REQUEST_REJECTED.into());
                continue;
            }
            self.next_id = u64::from(id) + 4;
            self.idle_until = None;
            self.requests.push(H3Request::new(id, now, cfg));
        }
        grow_streams(q, cfg.h3.h3_max_streams);
        let mut client_goaway = false;
        let mut i = 0;
        while i < self.unis.len() {
            let u = &mut self.unis[i];
            if !u.dirty {
                i += 1;
                continue;
            }
            u.dirty = false;
            match u.run(q, &mut client_goaway) {
                Ok(true) => i += 1,
                Ok(false) => {
                    self.unis.swap_remove(i);
                }
                Err(code) => {
                    // Every connection error here is the client's protocol violation.
                    stats::error(CountedError::Protocol);
                    return Err(code);
                }
            }
        }
        let mut i = 0;
        while i < self.requests.len() {
            let r = &mut self.requests[i];
            if !r.dirty && r.wake.is_none_or(|t| t > now) {
                i += 1;
                continue;
            }
            r.dirty = false;
            match r.run(q, now, cfg, &self.extra) {
                H3Progress::Pending => i += 1,
                H3Progress::Done { idle, finished } => {
                    let r = self.requests.swap_remove(i);
                    if let Some(w) = idle {
                        self.idle_until = Some(now + w);
                    }
                    if let (true, Some(g)) = (finished, &mut self.goaway) {
                        g.unacked.push(r.id);
                    }
                }
                H3Progress::Close(code) => return Err(code),
            }
        }
        if self.requests.is_empty() && self.requests.capacity() > 0 {
            // An idle connection keeps no room for requests (a few hundred bytes each).
            self.requests = Vec::new();
        }
        let idle = self.requests.is_empty() && self.idle_until.is_some_and(|t| t <= now);
        if self.goaway.is_none() && (ctx.stopping || client_goaway || idle) {
            // Shutdown, the client's GOAWAY (it will send no more requests: clients such as
            // oha's then wait for us to close) or `w`: ours (no request from `next_id` on),
            // the accepted ones finish, then the connection closes.
            let mut id = Vec::new();
            frame::put_varint(&mut id, self.next_id);
            frame::put_frame(&mut self.control_out, frame::GOAWAY, &id);
            self.goaway = Some(GoingAway {
                until: now + cfg.timeout,
                unacked: Vec::new(),
                grace: None,
            });
        }
        self.write_control(q);
        if let Some(g) = &mut self.goaway {
            let answered = self.requests.is_empty() && g.unacked.is_empty();
            if g.grace.is_none() && (answered || now >= g.until) {
                // Two probe timeouts (RFC 9002 §6.2.1 on a fresh path: 3 RTT plus the ACK
                // delay) for the GOAWAY to arrive, or when lost to be sent again, unless the
                // client closes first.
                let grace = 2 * (3 * q.rtt() + MAX_ACK_DELAY);
                g.grace = Some(now + grace.min(cfg.timeout));
            }
            if g.grace.is_some_and(|t| now >= t) {
                return Err(code::NO_ERROR);
            }
        }
        Ok(())
    }

    /// Open our control stream when quinn-proto allows, and write what is due on it.
    fn write_control(&mut self, q: &mut proto::Connection) {
        if self.control_out.is_empty() {
            return;
        }
        let id = match self.control {
            Some(id) => id,
            None => match q.streams().open(Dir::Uni) {
                Some(id) => *self.control.insert(id),
                None => return,
            },
        };
        if let Ok(n) = q.send_stream(id).write(&self.control_out) {
            self.control_out.drain(..n);
        }
        if self.control_out.is_empty() && self.control_out.capacity() > 0 {
            self.control_out = Vec::new();
        }
    }
}

/// A client with three quarters of its request streams open may open twice as many, up to
/// `--h3-max-streams`: the new limit goes out with the next packet (MAX_STREAMS), before the
/// client can have used the last quarter on a path that is not congested.
fn grow_streams(q: &mut proto::Connection, max: u32) {
    let limit = q.max_concurrent_streams(Dir::Bi);
    if limit < u64::from(max) && q.streams().remote_open_streams(Dir::Bi) * 4 >= limit * 3 {
        let next = u32::try_from(limit * 2).map_or(max, |l| l.min(max));
        q.set_max_concurrent_streams(Dir::Bi, next.into());
    }
}

/// A unidirectional stream from the client: its control stream (SETTINGS first, then nothing
/// that belongs on request streams), QPACK instruction streams (checked by
/// `qpack::InstructionStream`: without dynamic tables little is allowed), and streams of
/// unknown type (grease), which are stopped.
struct Uni {
    recv: Recv,
    dirty: bool,
    kind: UniKind,
}

enum UniKind {
    /// The stream type, being read.
    Type(VarintDecoder),
    Control {
        first: bool,
        head: HeadDecoder,
        /// Inside a frame.
        frame: Option<ControlFrame>,
    },
    Qpack(qpack::InstructionStream),
}

/// A control frame's payload being read.
struct ControlFrame {
    ty: u64,
    /// Bytes still to come.
    left: u64,
    /// SETTINGS is kept, to check; other frames are skipped.
    payload: Option<Vec<u8>>,
    /// What to close with if the frame is cut short.
    bad: u32,
}

impl Uni {
    fn new(id: StreamId) -> Uni {
        Uni {
            recv: Recv::new(id),
            dirty: true,
            kind: UniKind::Type(VarintDecoder::default()),
        }
    }

    /// Read what came: `Ok(false)` when the stream is done with, or the connection error.
    fn run(&mut self, q: &mut proto::Connection, goaway: &mut bool) -> Result<bool, u32> {
        loop {
            let fin = match self.recv.pull(q) {
                Ok(Pulled::Bytes) => false,
                Ok(Pulled::Fin) => true,
                Ok(Pulled::Blocked) => {
                    // Not kept while the stream waits (for as long as the connection lasts on
                    // a control or QPACK stream): an empty slice still holds the whole
                    // datagram buffer it was cut from.
                    self.recv.release();
                    return Ok(true);
                }
                // Reset, or the connection is gone.
                Err(_) => return Ok(false),
            };
            let chunk = &mut self.recv.chunk;
            match &mut self.kind {
                UniKind::Type(d) => {
                    if fin {
                        return Ok(false);
                    }
                    let (n, ty) = d.feed(chunk);
                    chunk.advance(n);
                    self.kind = match ty {
                        None => continue,
                        Some(frame::STREAM_CONTROL) => UniKind::Control {
                            first: true,
                            head: HeadDecoder::default(),
                            frame: None,
                        },
                        Some(frame::STREAM_QPACK_ENCODER) => {
                            UniKind::Qpack(qpack::InstructionStream::encoder())
                        }
                        Some(frame::STREAM_QPACK_DECODER) => {
                            UniKind::Qpack(qpack::InstructionStream::decoder())
                        }
                        Some(frame::STREAM_PUSH) => return Err(code::STREAM_CREATION_ERROR),
                        Some(_) => {
                            let _ = q
                                .recv_stream(self.recv.id)
                                .stop(code::STREAM_CREATION_ERROR.into());
                            return Ok(false);
                        }
                    };
                }
                UniKind::Qpack(check) => {
                    // RFC 9204 §4.2: closing either stream is a connection error.
                    if fin {
                        return Err(code::CLOSED_CRITICAL_STREAM);
                    }
                    check.feed(chunk).map_err(|e| e.code())?;
                    chunk.clear();
                }
                UniKind::Control { first, head, frame } => match frame {
                    None => {
                        // The peer closing its control stream is a connection error.
                        if fin {
                            return Err(code::CLOSED_CRITICAL_STREAM);
                        }
                        let (n, h) = head.feed(chunk);
                        chunk.advance(n);
                        let Some((ty, len)) = h else { continue };
                        let f = control_frame(ty, len, *first)?;
                        *first = false;
                        if ty == frame::GOAWAY {
                            *goaway = true;
                        }
                        match f.left {
                            0 => f.end()?,
                            _ => *frame = Some(f),
                        }
                    }
                    Some(f) => {
                        if fin {
                            return Err(f.bad);
                        }
                        let n = f.left.min(chunk.len() as u64) as usize;
                        if let Some(p) = &mut f.payload {
                            p.extend_from_slice(&chunk[..n]);
                        }
                        chunk.advance(n);
                        f.left -= n as u64;
                        if f.left == 0 {
                            f.end()?;
                            *frame = None;
                        }
                    }
                },
            }
        }
    }
}

impl ControlFrame {
    /// The frame is read whole: check it.
    fn end(&self) -> Result<(), u32> {
        match &self.payload {
            Some(p) if self.ty == frame::SETTINGS && !frame::settings_valid(p) => {
                Err(code::SETTINGS_ERROR)
            }
            _ => Ok(()),
        }
    }
}

/// Check a control frame's head (`first`: the stream's first frame), and say how to read it.
fn control_frame(ty: u64, len: u64, first: bool) -> Result<ControlFrame, u32> {
    let unexpected = Err(code::FRAME_UNEXPECTED);
    match ty {
        frame::SETTINGS if first => {
            if len > 4096 {
                return Err(code::SETTINGS_ERROR);
            }
            return Ok(ControlFrame {
                ty,
                left: len,
                payload: Some(Vec::with_capacity(len as usize)),
                bad: code::SETTINGS_ERROR,
            });
        }
        frame::SETTINGS => return unexpected,
        _ if first => return Err(code::MISSING_SETTINGS),
        frame::DATA | frame::HEADERS | frame::PUSH_PROMISE => return unexpected,
        t if frame::is_h2_only(t) => return unexpected,
        _ => {}
    }
    Ok(ControlFrame {
        ty,
        left: len,
        payload: None,
        bad: code::FRAME_UNEXPECTED,
    })
}

/// Why a QUIC handshake failed: the TLS alert in a CRYPTO_ERROR close (sent or received),
/// the idle timeout, or else `io`.
pub(super) fn failure(e: &quinn_proto::ConnectionError) -> HandshakeFailure {
    use quinn_proto::ConnectionError as E;
    let code = match e {
        E::TransportError(t) => u64::from(t.code),
        E::ConnectionClosed(c) => u64::from(c.error_code),
        E::TimedOut => return HandshakeFailure::Timeout,
        _ => return HandshakeFailure::Io,
    };
    // RFC 9001 §4.8: CRYPTO_ERROR is 0x0100 + the alert.
    match code {
        0x100..=0x1ff => HandshakeFailure::Alert(((code - 0x100) as u8).into()),
        _ => HandshakeFailure::Io,
    }
}

//! The QUIC driver of one worker's UDP socket: it owns quinn-proto's endpoint and that
//! endpoint's connections (by connection handle), feeds the endpoint the datagrams read off the
//! socket, runs a connection's HTTP/3 (`conn`) when something happened to it, sends what the
//! connections have to send through one transmit buffer, and keeps one timer queue for all of
//! them. quinn's own driver gave each connection a task, an event channel, a timer and a
//! transmit buffer kept at its largest: about 11 KB a connection (docs/RELIABILITY.md, "HTTP/3
//! memory per connection", round 4). One task per socket; nothing here is shared.

use super::conn::{self, Ctx, H3Conn};
use crate::config::Config;
use crate::ja4::QuicFingerprints;
use crate::plumbing::shutdown::ConnSlot;
use crate::plumbing::stats::{self, Protection, Transport};
use bytes::BytesMut;
use quinn::udp::{RecvMeta, BATCH_SIZE};
use quinn_proto as proto;
use std::collections::{BTreeSet, VecDeque};
use std::future::Future;
use std::io::{self, IoSliceMut};
use std::pin::Pin;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

/// Handshakes in progress on one endpoint past which unvalidated clients get a Retry.
const RETRY_THRESHOLD: usize = 100;

/// Datagrams a connection sends in its turn before the next connection's, at the least
/// (quinn's figure): a turn is a full GSO batch, and this many where the socket has no GSO.
const TURN_DATAGRAMS: usize = 20;

/// The largest UDP payload of one GSO send: the kernel takes a batch as one datagram of at most
/// 64 KiB (IPv4's 65 535 bytes less its 20-byte header and UDP's 8) and refuses larger ones with
/// `EMSGSIZE`, which quinn-udp counts as sent (docs/PERFORMANCE.md, "HTTP/3 send batches").
const MAX_GSO_BYTES: usize = 65_507;

/// Rounds of receiving, timers and sending before the driver lets the worker's other tasks
/// run (quinn's endpoint driver's bound).
const ROUNDS: usize = 160;

/// The clock of the engine: tokio's, which the simulated-pair tests pause and move.
pub(super) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// One worker's HTTP/3 endpoint.
pub(super) struct QuicDriver {
    endpoint: proto::Endpoint,
    socket: Arc<dyn quinn::AsyncUdpSocket>,
    writable: Pin<Box<dyn quinn::UdpPoller>>,
    cfg: Arc<Config>,
    /// Open connections, across engines and workers (`ConnSlot`).
    open: Arc<AtomicUsize>,
    fingerprints: Option<Arc<QuicFingerprints>>,
    /// By connection handle (quinn-proto's slab index); boxed, so that free slots are small.
    conns: Vec<Option<Box<H3Conn>>>,
    live: usize,
    /// Connections whose handshake is under way.
    opening: usize,
    /// Every connection's next deadline (transport and HTTP/3), with its handle.
    timers: BTreeSet<(Instant, usize)>,
    sleep: Pin<Box<tokio::time::Sleep>>,
    /// Connections to run: something happened to them.
    dirty: Vec<usize>,
    /// Connections that may have datagrams to send, in turn.
    sending: VecDeque<usize>,
    /// The one transmit buffer: a connection's datagrams go from it to the socket at once.
    send_buf: Vec<u8>,
    /// A transmit in `send_buf` the socket had no room for.
    held: Option<proto::Transmit>,
    recv_buf: Box<[u8]>,
    stop: Pin<Box<dyn Future<Output = ()> + Send>>,
    /// Shutdown has begun: the endpoint ends once its connections are gone.
    stopping: Option<ConnSlot>,
}

impl QuicDriver {
    pub(super) fn new(
        socket: Arc<dyn quinn::AsyncUdpSocket>,
        server: proto::ServerConfig,
        cfg: Arc<Config>,
        open: Arc<AtomicUsize>,
        fingerprints: Option<Arc<QuicFingerprints>>,
    ) -> QuicDriver {
        let endpoint = proto::Endpoint::new(
            Arc::new(proto::EndpointConfig::default()),
            Some(Arc::new(server)),
            !socket.may_fragment(),
            None,
        );
        let segment = endpoint.config().get_max_udp_payload_size().min(64 * 1024) as usize;
        let recv_buf = vec![0; segment * socket.max_receive_segments() * BATCH_SIZE];
        let shutdown = cfg.shutdown.clone();
        QuicDriver {
            endpoint,
            writable: socket.clone().create_io_poller(),
            socket,
            cfg,
            open,
            fingerprints,
            conns: Vec::new(),
            live: 0,
            opening: 0,
            timers: BTreeSet::new(),
            sleep: Box::pin(tokio::time::sleep(std::time::Duration::ZERO)),
            dirty: Vec::new(),
            sending: VecDeque::new(),
            send_buf: Vec::new(),
            held: None,
            recv_buf: recv_buf.into(),
            stop: Box::pin(async move { shutdown.wait().await }),
            stopping: None,
        }
    }

    /// Serve until shutdown, then until every connection is closed.
    pub(super) async fn run(mut self) -> io::Result<()> {
        std::future::poll_fn(|cx| self.poll(cx)).await
    }

    fn poll(&mut self, cx: &mut Context) -> Poll<io::Result<()>> {
        for _ in 0..ROUNDS {
            if self.stopping.is_none() && self.stop.as_mut().poll(cx).is_ready() {
                // Count as open until every connection's CONNECTION_CLOSE is out, so the
                // process does not exit with clients left to time out.
                self.stopping = Some(ConnSlot::closing(&self.open));
                for ch in 0..self.conns.len() {
                    self.mark(ch);
                }
            }
            let mut busy = self.receive(cx)?;
            // Read after the datagrams: a request's delays count from a time it had arrived
            // by (read before, a preempted driver started `P=400` 0.1 ms before its request).
            let now = now();
            busy |= self.expire(now);
            self.run_dirty(now);
            busy |= self.send(cx, now)?;
            if self.stopping.is_some() && self.live == 0 {
                return Poll::Ready(Ok(()));
            }
            if !busy {
                let Some(&(t, _)) = self.timers.first() else {
                    return Poll::Pending;
                };
                if self.sleep.deadline() != t.into() {
                    self.sleep.as_mut().reset(t.into());
                }
                if self.sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// Read a batch of datagrams; whether any came.
    fn receive(&mut self, cx: &mut Context) -> io::Result<bool> {
        let mut buf = std::mem::take(&mut self.recv_buf);
        let mut metas = [RecvMeta::default(); BATCH_SIZE];
        let step = buf.len() / BATCH_SIZE;
        let mut iovs: [IoSliceMut; BATCH_SIZE] = {
            let mut parts = buf.chunks_mut(step).map(IoSliceMut::new);
            std::array::from_fn(|_| parts.next().expect("BATCH_SIZE parts"))
        };
        let got = match self.socket.poll_recv(cx, &mut iovs, &mut metas) {
            Poll::Ready(Ok(n)) => {
                let now = now();
                for (meta, iov) in metas.iter().zip(iovs.iter()).take(n) {
                    let mut data = BytesMut::from(&iov[..meta.len]);
                    // With GRO one buffer holds several datagrams, `stride` bytes apart.
                    while !data.is_empty() {
                        let datagram = data.split_to(meta.stride.min(data.len()));
                        self.datagram(now, meta, datagram);
                    }
                }
                Ok(true)
            }
            // QUIC ignores it (it may be forged); the socket goes on.
            Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::ConnectionReset => Ok(true),
            Poll::Ready(Err(e)) => Err(e),
            Poll::Pending => Ok(false),
        };
        self.recv_buf = buf;
        got
    }

    fn datagram(&mut self, now: Instant, meta: &RecvMeta, data: BytesMut) {
        let mut response = Vec::new();
        let ecn = meta.ecn.map(|e| match e {
            quinn::udp::EcnCodepoint::Ect0 => proto::EcnCodepoint::Ect0,
            quinn::udp::EcnCodepoint::Ect1 => proto::EcnCodepoint::Ect1,
            quinn::udp::EcnCodepoint::Ce => proto::EcnCodepoint::Ce,
        });
        let event = self
            .endpoint
            .handle(now, meta.addr, meta.dst_ip, ecn, data, &mut response);
        match event {
            Some(proto::DatagramEvent::NewConnection(incoming)) => {
                self.incoming(now, incoming, &mut response)
            }
            Some(proto::DatagramEvent::ConnectionEvent(ch, event)) => {
                if let Some(conn) = self.conns.get_mut(ch.0).and_then(Option::as_mut) {
                    conn.quic.handle_event(event);
                    self.mark(ch.0);
                }
            }
            Some(proto::DatagramEvent::Response(t)) => self.respond(&t, &response),
            None => {}
        }
    }

    fn incoming(&mut self, now: Instant, incoming: proto::Incoming, buf: &mut Vec<u8>) {
        // Shutting down: no answer, so that the client's Initials, sent again, reach the server
        // that takes over the port next (a refusal would end its attempt).
        if self.stopping.is_some() {
            return self.endpoint.ignore(incoming);
        }
        // A flood of Initials (from spoofed addresses, say) would each get handshake state
        // until the timeout; past RETRY_THRESHOLD handshakes in progress, an unvalidated
        // client gets a stateless Retry instead, as HAProxy's tune.quic.retry-threshold does.
        if self.opening >= RETRY_THRESHOLD && incoming.may_retry() {
            stats::protection(Protection::QuicRetry);
            match self.endpoint.retry(incoming, buf) {
                Ok(t) => self.respond(&t, buf),
                Err(e) => self.endpoint.ignore(e.into_incoming()),
            }
            return;
        }
        let slot = ConnSlot::new(&self.open, Transport::Quic);
        // Found by the client's address and original DCID: the two values the Initial packet
        // and `Incoming` share (the address alone would mix up a client's concurrent
        // connections from one port, which QUIC tells apart by connection ID).
        let fingerprint = self
            .fingerprints
            .as_ref()
            .map(|_| (incoming.remote_address(), *incoming.orig_dst_cid()));
        match self.endpoint.accept(incoming, now, buf, None) {
            Ok((ch, quic)) => {
                let deadline = now + self.cfg.timeout;
                let conn = H3Conn::new(quic, slot, fingerprint, deadline);
                if self.conns.len() <= ch.0 {
                    self.conns.resize_with(ch.0 + 1, || None);
                }
                self.conns[ch.0] = Some(Box::new(conn));
                self.live += 1;
                self.opening += 1;
                self.mark(ch.0);
            }
            Err(e) => {
                if let Some(t) = e.response {
                    self.respond(&t, buf);
                }
                stats::handshake_failed(Transport::Quic, conn::failure(&e.cause));
            }
        }
    }

    /// A datagram the endpoint answers itself (a Retry, a refusal, a version negotiation, a
    /// stateless reset): sent if the socket has room, else dropped, as quinn does; the peer
    /// tries again.
    fn respond(&self, t: &proto::Transmit, buf: &[u8]) {
        let _ = self.socket.try_send(&udp_transmit(t, &buf[..t.size]));
    }

    /// Run connection `ch` in this round.
    fn mark(&mut self, ch: usize) {
        if let Some(conn) = self.conns.get_mut(ch).and_then(Option::as_mut) {
            if !conn.queued {
                conn.queued = true;
                self.dirty.push(ch);
            }
        }
    }

    /// The timers due: their connections run.
    fn expire(&mut self, now: Instant) -> bool {
        let mut any = false;
        while let Some(&(t, ch)) = self.timers.first() {
            if t > now {
                break;
            }
            self.timers.pop_first();
            if let Some(conn) = self.conns[ch].as_mut() {
                conn.timer = None;
                conn.quic.handle_timeout(now);
            }
            self.mark(ch);
            any = true;
        }
        any
    }

    fn run_dirty(&mut self, now: Instant) {
        let (cfg, fingerprints) = (self.cfg.clone(), self.fingerprints.clone());
        let ctx = Ctx {
            cfg: &cfg,
            stopping: self.stopping.is_some(),
            fingerprints: fingerprints.as_deref(),
        };
        while let Some(ch) = self.dirty.pop() {
            let Some(conn) = self.conns[ch].as_mut() else {
                continue;
            };
            conn.queued = false;
            let was_opening = conn.is_handshaking();
            conn.run(now, &ctx);
            if was_opening && !conn.is_handshaking() {
                self.opening -= 1;
            }
            let mut drained = false;
            while let Some(event) = conn.quic.poll_endpoint_events() {
                drained |= event.is_drained();
                if let Some(back) = self
                    .endpoint
                    .handle_event(proto::ConnectionHandle(ch), event)
                {
                    conn.quic.handle_event(back);
                }
            }
            if drained {
                self.remove(ch);
                continue;
            }
            if !conn.sending {
                conn.sending = true;
                self.sending.push_back(ch);
            }
            reschedule(&mut self.timers, conn, ch);
        }
    }

    fn remove(&mut self, ch: usize) {
        if let Some(conn) = self.conns[ch].take() {
            if conn.is_handshaking() {
                self.opening -= 1;
            }
            if let Some(t) = conn.timer {
                self.timers.remove(&(t, ch));
            }
            self.live -= 1;
        }
        // The slots of a burst's connections are not kept at its size.
        while self.conns.last().is_some_and(Option::is_none) {
            self.conns.pop();
        }
        if self.live == 0 {
            self.conns.shrink_to_fit();
        }
    }

    /// Send what the connections have, each in turn; whether some are left to send.
    fn send(&mut self, cx: &mut Context, now: Instant) -> io::Result<bool> {
        let max_segments = self.socket.max_transmit_segments();
        for _ in 0..self.sending.len() + 1 {
            if let Some(t) = self.held.take() {
                if self.writable.as_mut().poll_writable(cx)?.is_pending() {
                    self.held = Some(t);
                    return Ok(false);
                }
                match self
                    .socket
                    .try_send(&udp_transmit(&t, &self.send_buf[..t.size]))
                {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        // Ask the poller again: it registers for a wake-up if still full.
                        self.held = Some(t);
                        return Ok(true);
                    }
                    // Sent, or lost as on any path: QUIC sends it again.
                    _ => {}
                }
            }
            let Some(ch) = self.sending.pop_front() else {
                return Ok(false);
            };
            let Some(conn) = self.conns[ch].as_mut() else {
                continue;
            };
            // As many datagrams as one send takes at the connection's datagram size (45 at
            // 1 452 bytes): quinn's 10 took two sends where one does.
            let segments = (MAX_GSO_BYTES / usize::from(conn.quic.current_mtu())).min(max_segments);
            let mut sent = 0;
            loop {
                self.send_buf.clear();
                let Some(t) = conn.quic.poll_transmit(now, segments, &mut self.send_buf) else {
                    conn.sending = false;
                    break;
                };
                sent += t.segment_size.map_or(1, |s| t.size.div_ceil(s));
                match self
                    .socket
                    .try_send(&udp_transmit(&t, &self.send_buf[..t.size]))
                {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        self.held = Some(t);
                        self.sending.push_front(ch);
                        break;
                    }
                    _ => {}
                }
                if sent >= segments.max(TURN_DATAGRAMS) {
                    self.sending.push_back(ch);
                    break;
                }
            }
            // Sending sets loss, pacing and idle timers.
            reschedule(&mut self.timers, conn, ch);
        }
        Ok(!self.sending.is_empty() || self.held.is_some())
    }
}

/// Put connection `ch`'s next deadline in the queue.
fn reschedule(timers: &mut BTreeSet<(Instant, usize)>, conn: &mut H3Conn, ch: usize) {
    let next = conn.deadline();
    if next == conn.timer {
        return;
    }
    if let Some(t) = conn.timer {
        timers.remove(&(t, ch));
    }
    if let Some(t) = next {
        timers.insert((t, ch));
    }
    conn.timer = next;
}

fn udp_transmit<'a>(t: &proto::Transmit, contents: &'a [u8]) -> quinn::udp::Transmit<'a> {
    quinn::udp::Transmit {
        destination: t.destination,
        ecn: t.ecn.map(|e| match e {
            proto::EcnCodepoint::Ect0 => quinn::udp::EcnCodepoint::Ect0,
            proto::EcnCodepoint::Ect1 => quinn::udp::EcnCodepoint::Ect1,
            proto::EcnCodepoint::Ce => quinn::udp::EcnCodepoint::Ce,
        }),
        contents,
        segment_size: t.segment_size,
        src_ip: t.src_ip,
    }
}

//! Worker threads: each owns a current-thread tokio runtime and its own SO_REUSEPORT sockets
//! (bound up front), so nothing on the request path is shared; `cpu-map` pins them.

use crate::config::listen::{self, Listener, ListenerKind};
use crate::config::tls::Identity;
use crate::config::{Config, ExtraHeaders};
use crate::h2_engine::{H2ConnError, IdleHandover, Resting};
use crate::plumbing::shutdown::ConnSlot;
use crate::plumbing::stats::{self, HandshakeFailure, Metered, Protection, Transport};
use crate::stream::prefixed::Prefixed;
use crate::stream::tls_stream;
use crate::stream::{ByteStream, TlsInner};
use crate::{h1, h2_engine, h3, ja4, park};
use anyhow::{Context, Result};
use http::HeaderValue;
use loadterm_runtime::cpus::CpuSet;
use rustls::ServerConfig;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// Sockets of one worker.
#[derive(Default)]
struct WorkerSockets {
    clear: Vec<std::net::TcpListener>,
    tls: Vec<(std::net::TcpListener, Arc<ServerConfig>)>,
    udp: Vec<(std::net::UdpSocket, Arc<Identity>)>,
}

/// A listener and the certificates it presents (TLS and QUIC).
pub(crate) type Bound = (Listener, Option<Arc<Identity>>);

/// Bind everything, start the workers (worker `i` pinned to the CPUs `pins[i]`, if any), and
/// return once they run, with the count of open connections (TCP and QUIC) for the shutdown
/// to wait on.
pub(crate) fn start(
    cfg: Arc<Config>,
    listeners: &[Bound],
    pins: &[Vec<usize>],
) -> Result<Arc<AtomicUsize>> {
    let n = cfg.threads;
    let mut per_worker: Vec<WorkerSockets> = (0..n).map(|_| WorkerSockets::default()).collect();
    for (l, identity) in listeners {
        let identity = || {
            identity
                .clone()
                .with_context(|| format!("{} {} has no certificate", l.proto(), l.addr))
        };
        match l.kind {
            ListenerKind::Clear => {
                for (w, s) in per_worker.iter_mut().zip(listen::tcp_listeners(l.addr, n)?) {
                    w.clear.push(s);
                }
            }
            ListenerKind::Tls => {
                let alpn: Vec<&[u8]> = l.alpn.iter().map(|p| p.as_bytes()).collect();
                let config = tls_stream::server_config(identity()?.rustls_config(&alpn, false)?);
                for (w, s) in per_worker.iter_mut().zip(listen::tcp_listeners(l.addr, n)?) {
                    w.tls.push((s, config.clone()));
                }
            }
            ListenerKind::Quic => {
                let identity = identity()?;
                for (w, s) in per_worker.iter_mut().zip(listen::udp_sockets(l.addr, n)?) {
                    w.udp.push((s, identity.clone()));
                }
            }
        }
    }
    crate::plumbing::trim::start().context("cannot start the memory trimming thread")?;
    let conns = Arc::new(AtomicUsize::new(0));
    for (i, sockets) in per_worker.into_iter().enumerate() {
        let (cfg, conns) = (cfg.clone(), conns.clone());
        let cpus = pins.get(i).cloned().unwrap_or_default();
        loadterm_runtime::spawn(format!("worker-{i}"), move || {
            let pinned = match cpus.is_empty() {
                true => Ok(()),
                false => CpuSet::new(&cpus).and_then(|set| set.pin_current()),
            };
            if let Err(e) = pinned {
                eprintln!("loadterm: warning: worker {i}: cannot pin to CPUs {cpus:?}: {e}");
            }
            worker(sockets, cfg, conns)
        })
        .context("cannot start a worker thread")?;
    }
    Ok(conns)
}

async fn worker(sockets: WorkerSockets, cfg: Arc<Config>, conns: Arc<AtomicUsize>) {
    // Delays (`t=`, `P=`) to the microsecond: tokio's timer made `t=1` 2.2 ms at the p50.
    if let Err(e) = loadterm_runtime::timer::start() {
        eprintln!("loadterm: warning: no precise timer ({e}); delays may run up to 1 ms long");
    }
    tokio::spawn(crate::plumbing::trim::release_thread_caches());
    // Opened before the listeners accept: idle HTTP/1 connections park in it.
    let lot = match sockets.clear.is_empty() && sockets.tls.is_empty() {
        true => None,
        false => park::Lot::open(cfg.shutdown.clone())
            .inspect_err(|e| {
                eprintln!("loadterm: idle connections will wait in their tasks, unparked: {e}")
            })
            .ok(),
    };
    let listeners = sockets
        .clear
        .into_iter()
        .map(|l| (l, None))
        .chain(sockets.tls.into_iter().map(|(l, a)| (l, Some(a))));
    for (l, tls) in listeners {
        match tokio::net::TcpListener::from_std(l) {
            Ok(l) => {
                tokio::task::spawn_local(accept_loop(l, tls, cfg.clone(), conns.clone()));
            }
            Err(e) => eprintln!("loadterm: cannot register a listener: {e}"),
        }
    }
    for (s, identity) in sockets.udp {
        let (cfg, conns) = (cfg.clone(), conns.clone());
        tokio::spawn(async move {
            if let Err(e) = h3::run_endpoint(s, identity, cfg, conns).await {
                eprintln!("loadterm: HTTP/3 endpoint stopped: {e:#}");
            }
        });
    }
    if let Some(mut lot) = lot {
        // Parked connections that turned readable (or all, at shutdown) get tasks again.
        while let Some(idle) = lot.woken().await {
            resume(idle, &cfg);
        }
    }
    std::future::pending::<()>().await;
}

async fn accept_loop(
    l: tokio::net::TcpListener,
    tls: Option<Arc<ServerConfig>>,
    cfg: Arc<Config>,
    conns: Arc<AtomicUsize>,
) {
    // The TLS port's UDP twin serves HTTP/3: advertise it there if asked to.
    let extra: ExtraHeaders = match (&tls, l.local_addr()) {
        (Some(_), Ok(addr)) if cfg.alt_svc => {
            HeaderValue::from_str(&format!("h3=\":{}\"; ma=86400", addr.port()))
                .map(|v| vec![(http::header::ALT_SVC, v)])
                .unwrap_or_default()
        }
        _ => Vec::new(),
    };
    let stop = cfg.shutdown.wait();
    tokio::pin!(stop);
    loop {
        let sock = tokio::select! {
            r = l.accept() => match r {
                Ok((sock, _)) => sock,
                Err(_) => {
                    // Out of file descriptors or similar: back off instead of spinning.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            () = &mut stop => return,
        };
        if conns.load(Ordering::Relaxed) >= cfg.maxconn {
            stats::protection(Protection::MaxConn);
            continue;
        }
        let transport = if tls.is_some() {
            Transport::Tls
        } else {
            Transport::Tcp
        };
        let slot = ConnSlot::new(&conns, transport);
        let _ = sock.set_nodelay(true);
        // One task type per transport: a task is as large as its future, and TLS state would
        // otherwise be paid by every clear connection.
        match &tls {
            None => {
                tokio::task::spawn_local(serve_clear(sock, cfg.clone(), slot));
            }
            Some(config) => {
                let config = config.clone();
                tokio::task::spawn_local(serve_tls(sock, config, cfg.clone(), extra.clone(), slot));
            }
        }
    }
}

// The HTTP/2 futures are boxed: a task's future is as large as its largest state, and HTTP/2's
// (kilobytes of `h2` connection state) would otherwise be paid by every HTTP/1 connection, idle
// ones included.
async fn serve_clear(sock: TcpStream, cfg: Arc<Config>, slot: ConnSlot) {
    // Boxed: its timer and peek would otherwise be part of the task for the connection's life.
    let preface = Box::pin(timeout_opt(cfg.timeout, is_h2_preface(&sock))).await;
    let sock = Metered::new(sock, Transport::Tcp);
    match preface {
        Some(true) => {
            let serving = Box::pin(h2_engine::serve_connection(sock, cfg.clone(), Vec::new()));
            serve_h2(serving, cfg, slot).await;
        }
        Some(false) => serve_h1_clear(sock, cfg, slot, None).await,
        None => {}
    }
}

/// HTTP/1 on clear TCP, from the first request or after the connection was parked; once idle,
/// it is parked (and this task ends), or, if the lot refuses it, served on here.
async fn serve_h1_clear(
    mut sock: Metered<TcpStream>,
    cfg: Arc<Config>,
    mut slot: ConnSlot,
    mut until: Option<Instant>,
) {
    // The upgrade's future is made where `up` is: held across an await, `up` would take a slot
    // in this task's future.
    let upgraded = loop {
        let opts = h1::ListenerOptions {
            h2c_upgrade: true,
            extra: Vec::new(),
            splice: cfg.splice,
        };
        let idle = match h1::serve(sock, cfg.clone(), opts, until).await {
            None => return,
            Some(h1::Handover::Idle { io, until }) => match out_of_tokio(io.into_inner()) {
                Some(sock) => park::Idle {
                    sock,
                    slot,
                    until,
                    session: None,
                },
                None => return,
            },
            Some(h1::Handover::Upgrade(up)) => {
                let serving =
                    h2_engine::serve_upgraded(up.io, up.buffered, up.request, cfg.clone());
                break serve_h2(Box::pin(serving), cfg, slot);
            }
        };
        let refused = match park::park(idle) {
            park::Parking::Parked => return,
            park::Parking::Refused(idle) => idle,
        };
        (sock, slot, until) = match unparked(refused.sock) {
            Some(sock) => (
                Metered::new(sock, Transport::Tcp),
                refused.slot,
                Some(refused.until),
            ),
            None => return,
        };
    };
    upgraded.await;
}

/// Serve a connection given back by the parking lot (or refused by it) again, in a new task.
fn resume(idle: park::Idle, cfg: &Arc<Config>) {
    let Some(sock) = unparked(idle.sock) else {
        return;
    };
    match idle.session {
        // HTTP/1 on clear TCP: nothing but the socket.
        None => {
            let sock = Metered::new(sock, Transport::Tcp);
            tokio::task::spawn_local(serve_h1_clear(
                sock,
                cfg.clone(),
                idle.slot,
                Some(idle.until),
            ));
        }
        Some(session) => session.resume(sock, cfg.clone(), idle.slot, idle.until),
    }
}

/// A parked socket back in tokio's reactor (`None`, and said, if tokio cannot take it: it
/// closes).
fn unparked(sock: std::net::TcpStream) -> Option<TcpStream> {
    TcpStream::from_std(sock)
        .inspect_err(|e| eprintln!("loadterm: cannot resume a parked connection: {e}"))
        .ok()
}

// The TLS task keeps only what an established connection needs: the handshake's state (and
// `--ja4`'s) is boxed and freed once done, and the session (TLS stream and engine) is boxed
// where the stream is, so the stream is not also kept in this task's future.
async fn serve_tls(
    sock: TcpStream,
    config: Arc<ServerConfig>,
    cfg: Arc<Config>,
    extra: ExtraHeaders,
    slot: ConnSlot,
) {
    match &cfg.ja4 {
        None => handshake(sock, config, cfg, extra, slot).await,
        Some(seen) => {
            // --ja4: the ClientHello is read (and fingerprinted) first, then replayed to rustls.
            let sniffed = Box::pin(ja4::sniff_tcp(sock, cfg.timeout, seen));
            let (io, fp) = match sniffed.await {
                Ok(sniffed) => sniffed,
                Err(why) => return stats::handshake_failed(Transport::Tls, why),
            };
            let extra = ja4::with_header(extra, Some(&fp));
            handshake(io, config, cfg, extra, slot).await
        }
    }
}

async fn handshake<IO>(
    io: IO,
    config: Arc<ServerConfig>,
    cfg: Arc<Config>,
    extra: ExtraHeaders,
    slot: ConnSlot,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + TlsInner + 'static,
{
    let handshake = match tls_stream::accept(Metered::new(io, Transport::Tls), config) {
        Ok(handshake) => handshake,
        Err(e) => {
            eprintln!("loadterm: cannot start a TLS connection: {e}");
            return stats::handshake_failed(Transport::Tls, HandshakeFailure::Io);
        }
    };
    let accepting = Box::pin(timeout_opt(
        cfg.timeout,
        // One handshake step per turn of the loop: established connections first.
        crate::stream::handshake_turns::one_step_per_turn(handshake),
    ));
    let stream = match accepting.await {
        Some(Ok(stream)) => {
            stats::handshake_ok(Transport::Tls);
            stream
        }
        Some(Err(e)) => {
            return stats::handshake_failed(Transport::Tls, crate::config::tls::failure(&e))
        }
        None => return stats::handshake_failed(Transport::Tls, HandshakeFailure::Timeout),
    };
    match session(stream, cfg, extra, slot) {
        Session::H2(s) => s.await,
        Session::H1(s) => s.await,
    }
}

/// An established TLS connection's engine, boxed with its stream (and the connection's slot:
/// the task may end while the connection is parked).
enum Session<H2, H1> {
    H2(Pin<Box<H2>>),
    H1(Pin<Box<H1>>),
}

fn session<IO>(
    stream: MeteredTls<IO>,
    cfg: Arc<Config>,
    extra: ExtraHeaders,
    slot: ConnSlot,
) -> Session<impl Future<Output = ()>, impl Future<Output = ()>>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + TlsInner + 'static,
{
    if stream.is_h2() {
        let serving = Box::pin(h2_engine::serve_connection(stream, cfg.clone(), extra));
        Session::H2(Box::pin(serve_h2(serving, cfg, slot)))
    } else {
        Session::H1(Box::pin(serve_h1_tls(stream, cfg, extra, slot, None)))
    }
}

/// HTTP/2 (clear or TLS), as `serving` serves it (a new connection, an upgraded one, or one
/// resumed after parking); once idle it is parked, and this task ends.
async fn serve_h2<IO, F>(serving: Pin<Box<F>>, cfg: Arc<Config>, slot: ConnSlot)
where
    IO: ParksH2,
    F: Future<Output = Result<Option<IdleHandover<IO>>, H2ConnError>>,
{
    // Its failure, if any, is counted by the engine.
    let Ok(Some(idle)) = serving.await else {
        return;
    };
    let Some((sock, session)) = idle.io.put_away(idle.rest) else {
        return;
    };
    let idle = park::Idle {
        sock,
        slot,
        until: idle.until,
        session: Some(session),
    };
    if let park::Parking::Refused(idle) = park::park(idle) {
        // Served on in a task of its own, as a parked connection would be.
        resume(idle, &cfg);
    }
}

/// A stream an idle HTTP/2 connection is parked from: its socket taken out, and what it must
/// remember (`Resting`; over TLS, the session too) boxed to wait beside it.
trait ParksH2: ByteStream + Sized + 'static {
    fn put_away(self, rest: Resting) -> Option<(std::net::TcpStream, Box<dyn park::Resume>)>;
}

impl ParksH2 for Metered<TcpStream> {
    fn put_away(self, rest: Resting) -> Option<(std::net::TcpStream, Box<dyn park::Resume>)> {
        let sock = out_of_tokio(self.into_inner())?;
        Some((sock, Box::new(H2Idle { tls: (), rest })))
    }
}

/// After `Upgrade: h2c`: handed over idle only once the replayed bytes are read (`idle_socket`),
/// so the socket is all there is; resumed as a connection by prior knowledge is.
impl ParksH2 for Prefixed<Metered<TcpStream>> {
    fn put_away(self, rest: Resting) -> Option<(std::net::TcpStream, Box<dyn park::Resume>)> {
        self.io.put_away(rest)
    }
}

impl<IO> ParksH2 for MeteredTls<IO>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + TlsInner + 'static,
{
    fn put_away(self, rest: Resting) -> Option<(std::net::TcpStream, Box<dyn park::Resume>)> {
        // Handed over idle only when quiet and the socket can be taken out.
        let (io, parked) = self.park()?;
        let sock = out_of_tokio(io.detach()?)?;
        Some((sock, Box::new(H2Idle { tls: parked, rest })))
    }
}

/// A parked HTTP/2 connection: its TLS session (`()` on clear TCP) and its HTTP/2 state, in one
/// allocation: over TLS, 760 bytes (`tls_stream::Parked` 632, `Resting` 128), in jemalloc's
/// 768-byte size class with HTTP/1's `TlsIdle`.
struct H2Idle<T> {
    tls: T,
    rest: Resting,
}

impl park::Resume for H2Idle<()> {
    fn resume(self: Box<Self>, sock: TcpStream, cfg: Arc<Config>, slot: ConnSlot, until: Instant) {
        let sock = Metered::new(sock, Transport::Tcp);
        let serving = Box::pin(h2_engine::resume(sock, cfg.clone(), self.rest, until));
        tokio::task::spawn_local(serve_h2(serving, cfg, slot));
    }

    fn says_goodbye(&self) -> bool {
        true
    }
}

impl<IO> park::Resume for H2Idle<tls_stream::Parked<Metered<IO>>>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + TlsInner + 'static,
{
    fn resume(self: Box<Self>, sock: TcpStream, cfg: Arc<Config>, slot: ConnSlot, until: Instant) {
        let H2Idle { tls, rest } = *self;
        let Some(io) = Metered::<IO>::attach(sock) else {
            return;
        };
        let serving = Box::pin(h2_engine::resume(
            tls.resume(io, true),
            cfg.clone(),
            rest,
            until,
        ));
        tokio::task::spawn_local(serve_h2(serving, cfg, slot));
    }

    fn says_goodbye(&self) -> bool {
        true
    }
}

/// A TLS connection's stream: rustls over the metered socket (`IO`: the socket, or the socket
/// behind `--ja4`'s replayed ClientHello).
type MeteredTls<IO> = tls_stream::TlsStream<Metered<IO>>;

/// HTTP/1 over TLS, from the first request or after the connection was parked; once idle, it
/// is parked (`park_tls`) and this task ends.
fn serve_h1_tls<IO>(
    stream: MeteredTls<IO>,
    cfg: Arc<Config>,
    extra: ExtraHeaders,
    slot: ConnSlot,
    until: Option<Instant>,
) -> impl Future<Output = ()>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + TlsInner + 'static,
{
    // RFC 9113 §3.1: h2c is never negotiated over TLS, so `Upgrade: h2c` is ignored here.
    let opts = h1::ListenerOptions {
        h2c_upgrade: false,
        extra: extra.clone(),
        splice: false,
    };
    // Made here, not in the block: the block would hold the stream a second time.
    let serving = h1::serve(stream, cfg.clone(), opts, until);
    async move {
        if let Some(h1::Handover::Idle { io, until }) = serving.await {
            park_tls(io, until, cfg, extra, slot);
        }
    }
}

/// Park an idle TLS connection: its socket in the lot, its session put away beside it
/// (`TlsIdle`).
fn park_tls<IO>(
    stream: MeteredTls<IO>,
    until: Instant,
    cfg: Arc<Config>,
    extra: ExtraHeaders,
    slot: ConnSlot,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + TlsInner + 'static,
{
    // Handed over idle only when quiet and the socket can be taken out.
    let Some((io, parked)) = stream.park() else {
        return;
    };
    let Some(sock) = io.detach().and_then(out_of_tokio) else {
        return;
    };
    let idle = park::Idle {
        sock,
        slot,
        until,
        session: Some(Box::new(TlsIdle { parked, extra })),
    };
    if let park::Parking::Refused(idle) = park::park(idle) {
        // Served on in a task of its own, as a parked connection would be.
        resume(idle, &cfg);
    }
}

/// A parked TLS connection's session: rustls's state (no buffer: `tls_stream::Parked`) and the
/// fields its responses carry (`x-ja4`, `alt-svc`).
struct TlsIdle<IO> {
    parked: tls_stream::Parked<Metered<IO>>,
    extra: ExtraHeaders,
}

impl<IO> park::Resume for TlsIdle<IO>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + TlsInner + 'static,
{
    fn resume(self: Box<Self>, sock: TcpStream, cfg: Arc<Config>, slot: ConnSlot, until: Instant) {
        let TlsIdle { parked, extra } = *self;
        let Some(io) = Metered::<IO>::attach(sock) else {
            return;
        };
        let stream = parked.resume(io, false);
        tokio::task::spawn_local(serve_h1_tls(stream, cfg, extra, slot, Some(until)));
    }
}

/// An idle connection's socket out of tokio, to be parked; `None`, said, if tokio cannot give
/// it back (the connection is then dropped).
fn out_of_tokio(sock: TcpStream) -> Option<std::net::TcpStream> {
    sock.into_std()
        .inspect_err(|e| eprintln!("loadterm: cannot park an idle connection: {e}"))
        .ok()
}

async fn timeout_opt<F: std::future::Future>(d: Duration, f: F) -> Option<F::Output> {
    tokio::time::timeout(d, f).await.ok()
}

/// Peek (without consuming) until the first bytes tell HTTP/2's preface from an HTTP/1 request.
/// `None`-like outcomes (end of stream, errors) count as "not h2": the H1 engine closes.
async fn is_h2_preface(sock: &TcpStream) -> bool {
    let mut buf = [0u8; 24];
    loop {
        let n = match sock.peek(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => n,
        };
        if !loadterm_codec::h2::PREFACE.starts_with(&buf[..n]) {
            return false;
        }
        if n == loadterm_codec::h2::PREFACE.len() {
            return true;
        }
        // A prefix of the preface: wait for the rest (rare: clients send it in one segment).
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[cfg(test)]
#[path = "tls_sim_tests.rs"]
pub(crate) mod tls_sim_tests;

#[cfg(test)]
mod tests {
    use super::*;

    /// A parked TLS connection's session is one allocation in jemalloc's 768-byte size class
    /// whether it serves HTTP/2 or HTTP/1 (the next class is 896): an idle HTTP/2 connection
    /// holds no more than an idle HTTP/1 one, its HPACK table aside (PERFORMANCE, "Memory per
    /// idle connection"). A rustls upgrade that grows its kernel connection shows here.
    #[test]
    fn parked_tls_sessions_fit_768_bytes() {
        let h2 = std::mem::size_of::<H2Idle<tls_stream::Parked<Metered<TcpStream>>>>();
        let h1 = std::mem::size_of::<TlsIdle<TcpStream>>();
        assert!(h2 <= 768 && h1 <= 768, "HTTP/2 {h2} bytes, HTTP/1 {h1}");
    }
}

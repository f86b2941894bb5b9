//! HTTP/3 engine: quinn for QUIC, HTTP/3 itself from `loadterm-h3` (RFC 9114 framing, QPACK
//! without a dynamic table) so that bodies reach quinn without copies. One endpoint per worker
//! on its own SO_REUSEPORT UDP socket, one task per request stream.

mod amplification;
#[cfg(test)]
mod sim_tests;
mod socket;
mod stream;

use crate::ja4;
use crate::plumbing::shutdown::ConnSlot;
use crate::plumbing::stats::{self, CountedError, HandshakeFailure, Protection, Transport};
use anyhow::{Context, Result};
use futures::StreamExt;
use loadterm_h3::reader::{ReadError, Reader};
use loadterm_h3::{frame, qpack};
use quinn::Runtime;
use std::future::IntoFuture;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn server_config(
    identity: &crate::config::tls::Identity,
    cfg: &crate::config::Config,
) -> Result<quinn::ServerConfig> {
    let tls = identity.rustls_config(&[b"h3"], true)?;
    let crypto =
        quinn::crypto::rustls::QuicServerConfig::try_from(tls).context("QUIC TLS config")?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let mut t = quinn::TransportConfig::default();
    t.max_concurrent_bidi_streams(cfg.h3.h3_max_streams.into())
        .max_concurrent_uni_streams(UNI_STREAMS.into())
        // No QUIC DATAGRAM frames (RFC 9221): HTTP/3 without SETTINGS_H3_DATAGRAM has no use
        // for them, and quinn would otherwise hold up to 1.25 MB of unread ones per connection.
        .datagram_receive_buffer_size(None)
        .stream_receive_window(cfg.h3.quic_window.into())
        .receive_window(cfg.h3.quic_window.saturating_mul(4).into())
        .send_window(64 << 20)
        // Idle connections end after the client timeout, plus a grace second: a request head
        // left incomplete gets its 408 at the timeout, counted from the stream's acceptance,
        // which comes a little after the last packet; with no grace the transport (ours or the
        // client's, which takes the minimum) would close the connection first.
        .max_idle_timeout(Some(
            (cfg.timeout + IDLE_GRACE)
                .try_into()
                .context("--timeout too large for QUIC")?,
        ));
    server.transport_config(Arc::new(t));
    Ok(server)
}

/// Unidirectional streams a client may have open at once: its control stream and the two QPACK
/// streams (RFC 9114 §6.2 asks for at least three; HAProxy allows three). quinn-proto keeps an
/// entry for each stream a client may open from the connection's start, so each costs memory
/// for the connection's life; a grease stream waits for the stream we stop.
const UNI_STREAMS: u32 = 3;

/// See `max_idle_timeout` above.
const IDLE_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// How long a peer may hold back an ACK: max_ack_delay's default (RFC 9000 §18.2), which
/// quinn's and most clients' transport parameters keep.
const MAX_ACK_DELAY: std::time::Duration = std::time::Duration::from_millis(25);

/// Handshakes in progress on one endpoint past which unvalidated clients get a Retry.
const RETRY_THRESHOLD: usize = 100;

/// One handshake in progress, counted until dropped.
struct Opening(Arc<AtomicUsize>);

impl Opening {
    fn new(count: &Arc<AtomicUsize>) -> Opening {
        count.fetch_add(1, Ordering::Relaxed);
        Opening(count.clone())
    }
}

impl Drop for Opening {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Serve HTTP/3 on this (already bound, SO_REUSEPORT) UDP socket until shutdown. Called once per
/// worker thread, inside that worker's current-thread runtime; `conns` counts open connections.
pub(crate) async fn run_endpoint(
    socket: std::net::UdpSocket,
    identity: Arc<crate::config::tls::Identity>,
    cfg: Arc<crate::config::Config>,
    conns: Arc<AtomicUsize>,
) -> Result<()> {
    let server = server_config(&identity, &cfg)?;
    let socket = quinn::TokioRuntime.wrap_udp_socket(socket)?;
    serve_endpoint(socket, server, cfg, conns).await
}

/// [`run_endpoint`] on any socket quinn can run over (the simulated-pair tests' is in memory).
async fn serve_endpoint(
    udp: Arc<dyn quinn::AsyncUdpSocket>,
    server: quinn::ServerConfig,
    cfg: Arc<crate::config::Config>,
    conns: Arc<AtomicUsize>,
) -> Result<()> {
    let runtime = Arc::new(quinn::TokioRuntime);
    // --ja4: client Initials are read off the socket as quinn receives them.
    let fingerprints = cfg
        .ja4
        .as_ref()
        .map(|stats| Arc::new(ja4::QuicFingerprints::new(stats.clone())));
    let socket = socket::Socket::new(udp, fingerprints.clone());
    let endpoint = quinn::Endpoint::new_with_abstract_socket(
        Default::default(),
        Some(server),
        Arc::new(socket),
        runtime,
    );
    let endpoint = endpoint.context("QUIC endpoint")?;
    let stop = cfg.shutdown.wait();
    tokio::pin!(stop);
    // Handshakes in progress on this endpoint.
    let opening = Arc::new(AtomicUsize::new(0));
    loop {
        let incoming = tokio::select! {
            i = endpoint.accept() => match i {
                Some(i) => i,
                None => return Ok(()),
            },
            () = &mut stop => break,
        };
        // A flood of Initials (from spoofed addresses, say) would each get handshake state
        // until the timeout; past RETRY_THRESHOLD handshakes in progress, an unvalidated
        // client gets a stateless Retry instead, as HAProxy's tune.quic.retry-threshold does.
        if opening.load(Ordering::Relaxed) >= RETRY_THRESHOLD && incoming.may_retry() {
            stats::protection(Protection::QuicRetry);
            let _ = incoming.retry();
            continue;
        }
        let opened = Opening::new(&opening);
        let (cfg, slot) = (cfg.clone(), ConnSlot::new(&conns, Transport::Quic));
        // Found by the client's address and original DCID: the two values quinn's `Incoming`
        // and the Initial packet share (the address alone would mix up a client's concurrent
        // connections from one port, which QUIC tells apart by connection ID).
        let fingerprint = fingerprints
            .clone()
            .map(|f| (f, incoming.remote_address(), incoming.orig_dst_cid()));
        // Boxed: the handshake's state is freed once it is done, instead of sizing the
        // connection's task (memory for its whole life) for it.
        let handshake = Box::pin(incoming.into_future());
        tokio::spawn(async move {
            let _slot = slot;
            if let Err(e) = connection(handshake, cfg, fingerprint, opened).await {
                e.count();
            }
        });
    }
    // Count as open until every connection's CONNECTION_CLOSE is out, so the process does not
    // exit with clients left to time out.
    let _slot = ConnSlot::closing(&conns);
    endpoint.wait_idle().await;
    Ok(())
}

/// Why an HTTP/3 connection ended before it was served to its end. Converting to it counts
/// nothing: `serve_endpoint` counts it once, with [`H3ConnError::count`].
#[derive(Debug, thiserror::Error)]
enum H3ConnError {
    #[error("QUIC handshake failed: {0}")]
    Handshake(quinn::ConnectionError),
    #[error("QUIC handshake not done within the client timeout")]
    HandshakeTimeout,
    #[error("cannot open the HTTP/3 control stream: {0}")]
    ControlOpen(#[from] quinn::ConnectionError),
    #[error("cannot write on the HTTP/3 control stream: {0}")]
    ControlWrite(#[from] quinn::WriteError),
}

impl H3ConnError {
    fn count(&self) {
        match self {
            H3ConnError::Handshake(e) => stats::handshake_failed(Transport::Quic, failure(e)),
            H3ConnError::HandshakeTimeout => {
                stats::handshake_failed(Transport::Quic, HandshakeFailure::Timeout)
            }
            // The connection closed under us (the client left, or the idle timeout): counted
            // as closed by its `ConnSlot`, as any connection the client closes, not as an error.
            H3ConnError::ControlOpen(_) | H3ConnError::ControlWrite(_) => {}
        }
    }
}

async fn connection(
    handshake: Pin<Box<quinn::IncomingFuture>>,
    cfg: Arc<crate::config::Config>,
    fingerprint: Option<(Arc<ja4::QuicFingerprints>, SocketAddr, quinn::ConnectionId)>,
    opened: Opening,
) -> Result<(), H3ConnError> {
    let conn = match tokio::time::timeout(cfg.timeout, handshake).await {
        Ok(Ok(conn)) => conn,
        Ok(Err(e)) => return Err(H3ConnError::Handshake(e)),
        Err(_) => return Err(H3ConnError::HandshakeTimeout),
    };
    drop(opened);
    stats::handshake_ok(Transport::Quic);
    let _bytes = CountBytes(conn.clone());
    // Asked once the handshake is done, not when quinn yields the `Incoming` (at the first
    // Initial): the rest of a ClientHello spread over several Initials may still be on its way
    // then. Every datagram quinn read the ClientHello from went through the sniffing socket.
    // What only the start needs is scoped to end there (here and the SETTINGS below): a local
    // that lives across the serving loop's waits is memory for the connection's whole life.
    let extra: Arc<[_]> = {
        let fp = fingerprint.and_then(|(f, addr, dcid)| f.take(addr, &dcid));
        ja4::with_header(Vec::new(), fp.as_deref()).into()
    };
    // Our control stream: SETTINGS first, GOAWAY at shutdown; kept open for the connection.
    let mut control = conn.open_uni().await?;
    {
        let mut settings = Vec::new();
        frame::put_varint(&mut settings, frame::SETTINGS_MAX_FIELD_SECTION_SIZE);
        frame::put_varint(&mut settings, cfg.h3.h3_max_header_list);
        let mut out = vec![frame::STREAM_CONTROL as u8];
        frame::put_frame(&mut out, frame::SETTINGS, &settings);
        control.write_all(&out).await?;
    }
    // Made before `begun` is first read (at the top of the loop): no wake-up falls between.
    // Lighter than `Shutdown::wait`, which holds a watch receiver.
    let stop = cfg.shutdown.idle_signal();
    tokio::pin!(stop);
    // The client's GOAWAY: it will send no more requests (clients such as oha's then wait for
    // us to close, until the idle timeout otherwise).
    let client_goaway = tokio::sync::Notify::new();
    let goaway = client_goaway.notified();
    tokio::pin!(goaway);
    // Requests and the client's unidirectional streams run inside this connection's task, not
    // as tasks of their own: cheaper to start and to wake, and smaller. Each boxed: a
    // `FuturesUnordered` keeps a stub as large as its future type for as long as it lasts.
    let mut requests = futures::stream::FuturesUnordered::new();
    let mut unis = futures::stream::FuturesUnordered::new();
    let serve = |send, recv| {
        let (cfg, conn, extra) = (&cfg, &conn, extra.clone());
        Box::pin(async move {
            let done = stream::serve(send, recv, cfg, extra).await;
            if let Err(code) = &done {
                conn.close((*code).into(), b"");
            }
            done.ok()
        })
    };
    let mut next_id = 0u64;
    // `w`: once no request is in progress, close (GOAWAY) if none comes by then.
    let mut idle_until: Option<tokio::time::Instant> = None;
    loop {
        if cfg.shutdown.begun() {
            break;
        }
        let idle = async {
            match idle_until {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        let (send, recv) = tokio::select! {
            s = conn.accept_bi() => match s {
                Ok(s) => s,
                Err(_) => break,
            },
            Ok(u) = conn.accept_uni() => {
                unis.push(Box::pin(uni_stream(&conn, u, &client_goaway)));
                continue;
            }
            Some(()) = unis.next(), if !unis.is_empty() => continue,
            Some(done) = requests.next(), if !requests.is_empty() => {
                if let Some((_, Some(w))) = done {
                    idle_until = Some(tokio::time::Instant::now() + w);
                }
                continue;
            }
            () = idle, if requests.is_empty() => break,
            () = &mut stop => break,
            () = &mut goaway => break,
        };
        next_id = u64::from(send.id()) + 4;
        idle_until = None;
        requests.push(serve(send, recv));
    }
    if conn.close_reason().is_some() {
        return Ok(());
    }
    // Shutdown or the client's GOAWAY: ours (no request from `next_id` on), let the accepted
    // ones finish, then close.
    let mut goaway = Vec::new();
    let mut id = Vec::new();
    frame::put_varint(&mut id, next_id);
    frame::put_frame(&mut goaway, frame::GOAWAY, &id);
    control.write_all(&goaway).await?;
    // Closing drops unsent and unacknowledged stream data: wait for each answer to be
    // acknowledged (or stopped by the client) first.
    let _ = tokio::time::timeout(cfg.timeout, async {
        while let Some(send) = requests.next().await {
            if let Some((send, _)) = send {
                let _ = send.stopped().await;
            }
        }
    })
    .await;
    // Nor can the GOAWAY itself be waited for (the control stream stays open, so it is never
    // acknowledged as a whole), and with no answer left to wait for, closing would drop it
    // unsent. Give it two probe timeouts (RFC 9002 §6.2.1 on a fresh path: 3 RTT plus the ACK
    // delay) to arrive, or when lost to be sent again, unless the client closes first. A
    // request opened meanwhile is above the GOAWAY: rejected, so the client may send it again.
    let grace = 2 * (3 * conn.rtt() + MAX_ACK_DELAY);
    let _ = tokio::time::timeout(grace.min(cfg.timeout), async {
        while let Ok((mut send, mut recv)) = conn.accept_bi().await {
            let _ = send.reset(frame::code::REQUEST_REJECTED.into());
            let _ = recv.stop(frame::code::REQUEST_REJECTED.into());
        }
    })
    .await;
    conn.close(frame::code::NO_ERROR.into(), b"");
    Ok(())
}

/// A unidirectional stream from the client: its control stream (SETTINGS first, then nothing
/// that belongs on request streams), QPACK instruction streams (checked by
/// `qpack::InstructionStream`: without dynamic tables little is allowed), and streams of unknown type (grease), which are stopped.
async fn uni_stream(
    conn: &quinn::Connection,
    recv: quinn::RecvStream,
    goaway: &tokio::sync::Notify,
) {
    use frame::code;
    let mut r = Reader::new(recv);
    // Every connection error here is the client's protocol violation.
    let close = |code: u32| {
        stats::error(CountedError::Protocol);
        conn.close(code.into(), b"");
    };
    match r.varint().await {
        Ok(Some(frame::STREAM_CONTROL)) => {
            let mut first = true;
            loop {
                match r.frame_head().await {
                    Ok(Some((ty, len))) => {
                        let bad = match ty {
                            frame::SETTINGS if first => !settings_ok(&mut r, len).await,
                            frame::SETTINGS => true,
                            _ if first => return close(code::MISSING_SETTINGS),
                            frame::DATA | frame::HEADERS | frame::PUSH_PROMISE => true,
                            frame::GOAWAY => {
                                goaway.notify_one();
                                r.skip(len).await.is_err()
                            }
                            t if frame::is_h2_only(t) => true,
                            _ => r.skip(len).await.is_err(),
                        };
                        if bad {
                            return close(if ty == frame::SETTINGS && first {
                                code::SETTINGS_ERROR
                            } else {
                                code::FRAME_UNEXPECTED
                            });
                        }
                        first = false;
                    }
                    // The peer closing its control stream is a connection error, unless the
                    // connection is going away anyway.
                    Ok(None) | Err(ReadError::Truncated) => {
                        return close(code::CLOSED_CRITICAL_STREAM)
                    }
                    Err(ReadError::Reset(_) | ReadError::Broken) => return,
                }
            }
        }
        Ok(Some(ty @ (frame::STREAM_QPACK_ENCODER | frame::STREAM_QPACK_DECODER))) => {
            let mut check = match ty {
                frame::STREAM_QPACK_ENCODER => qpack::InstructionStream::encoder(),
                _ => qpack::InstructionStream::decoder(),
            };
            loop {
                match r.chunk().await {
                    Ok(Some(bytes)) => {
                        if let Err(e) = check.feed(&bytes) {
                            return close(e.code());
                        }
                    }
                    // RFC 9204 §4.2: closing either stream is a connection error.
                    Ok(None) => return close(code::CLOSED_CRITICAL_STREAM),
                    // Reset, or the connection is gone.
                    Err(_) => return,
                }
            }
        }
        Ok(Some(frame::STREAM_PUSH)) => close(code::STREAM_CREATION_ERROR),
        Ok(Some(_)) => r.stop(code::STREAM_CREATION_ERROR),
        Ok(None) | Err(_) => {}
    }
}

/// Read the client's SETTINGS payload and check it.
async fn settings_ok(r: &mut Reader, len: u64) -> bool {
    if len > 4096 {
        return false;
    }
    match r.payload(len as usize).await {
        Ok(payload) => frame::settings_valid(&payload),
        Err(_) => false,
    }
}

/// Why a QUIC handshake failed: the TLS alert in a CRYPTO_ERROR close (sent or received),
/// the idle timeout, or else `io`.
fn failure(e: &quinn::ConnectionError) -> HandshakeFailure {
    use quinn::ConnectionError as E;
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

/// Counts a connection's UDP payload bytes (quinn's statistics) when it ends.
struct CountBytes(quinn::Connection);

impl Drop for CountBytes {
    fn drop(&mut self) {
        let s = self.0.stats();
        stats::bytes_in(Transport::Quic, s.udp_rx.bytes as usize);
        stats::bytes_out(Transport::Quic, s.udp_tx.bytes as usize);
    }
}

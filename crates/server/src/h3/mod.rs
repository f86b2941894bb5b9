//! HTTP/3 engine: quinn-proto for QUIC, driven by the engine itself (`driver`: one task per
//! worker's SO_REUSEPORT UDP socket, its connections in a slab, one transmit buffer and one
//! timer queue), HTTP/3 from `loadterm-h3`'s sans-I/O pieces (RFC 9114 framing, QPACK without a
//! dynamic table) as a state machine per connection (`conn`) and per request (`stream`), so that
//! bodies reach quinn-proto without copies. quinn provides the socket (`quinn::udp`: GSO, GRO).

mod amplification;
mod conn;
mod driver;
mod recv;
#[cfg(test)]
mod sim_tests;
mod socket;
mod stream;

use crate::ja4;
use anyhow::{Context, Result};
use quinn::Runtime;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

fn server_config(
    identity: &crate::config::tls::Identity,
    cfg: &crate::config::Config,
) -> Result<quinn::ServerConfig> {
    let mut tls = identity.rustls_config(&[b"h3"], true)?;
    if cfg.zero_rtt {
        // --0rtt: early data on resumed connections (quinn takes 0 or u32::MAX).
        tls.max_early_data_size = u32::MAX;
    }
    let crypto =
        quinn::crypto::rustls::QuicServerConfig::try_from(tls).context("QUIC TLS config")?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let mut t = quinn::TransportConfig::default();
    t.max_concurrent_bidi_streams(conn::first_stream_limit(cfg.h3.h3_max_streams).into())
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
    // --ja4: client Initials are read off the socket as they are received.
    let fingerprints = cfg
        .ja4
        .as_ref()
        .map(|stats| Arc::new(ja4::QuicFingerprints::new(stats.clone())));
    let socket = Arc::new(socket::Socket::new(udp, fingerprints.clone()));
    let driver = driver::QuicDriver::new(socket, server, cfg, conns, fingerprints);
    driver.run().await.context("QUIC endpoint socket")
}

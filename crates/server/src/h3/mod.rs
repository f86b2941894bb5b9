//! HTTP/3 engine over QUIC (quinn + h3): one endpoint per worker on its own SO_REUSEPORT UDP
//! socket, one task per request stream.

mod stream;

use crate::workers::ConnSlot;
use anyhow::{Context, Result};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// HTTP/3 and QUIC settings exposed on the command line (flattened into `loadterm serve`).
#[derive(Debug, Clone, clap::Args)]
pub struct H3Args {
    /// Concurrent request streams a client may open per QUIC connection.
    #[arg(long = "h3-max-streams", default_value_t = 256, value_name = "N")]
    pub h3_max_streams: u32,
    /// Receive window per stream and per connection (request bodies), bytes.
    #[arg(long = "quic-window", default_value_t = 8 << 20, value_name = "BYTES")]
    pub quic_window: u32,
    /// Largest request header section, bytes (QPACK-decoded).
    #[arg(long = "h3-max-header-list", default_value_t = 64 << 10, value_name = "BYTES")]
    pub h3_max_header_list: u64,
}

impl Default for H3Args {
    fn default() -> Self {
        H3Args {
            h3_max_streams: 256,
            quic_window: 8 << 20,
            h3_max_header_list: 64 << 10,
        }
    }
}

fn server_config(
    identity: &crate::tls::Identity,
    cfg: &crate::config::Config,
) -> Result<quinn::ServerConfig> {
    let tls = identity.rustls_config(&[b"h3"], true)?;
    let crypto =
        quinn::crypto::rustls::QuicServerConfig::try_from(tls).context("QUIC TLS config")?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let mut t = quinn::TransportConfig::default();
    t.max_concurrent_bidi_streams(cfg.h3.h3_max_streams.into())
        .max_concurrent_uni_streams(16u32.into())
        .stream_receive_window(cfg.h3.quic_window.into())
        .receive_window(cfg.h3.quic_window.saturating_mul(4).into())
        .send_window(64 << 20)
        // Idle connections end after the client timeout.
        .max_idle_timeout(Some(
            cfg.timeout
                .try_into()
                .context("--timeout too large for QUIC")?,
        ));
    server.transport_config(Arc::new(t));
    Ok(server)
}

/// Serve HTTP/3 on this (already bound, SO_REUSEPORT) UDP socket until shutdown. Called once per
/// worker thread, inside that worker's current-thread runtime; `conns` counts open connections.
pub async fn run_endpoint(
    socket: std::net::UdpSocket,
    identity: Arc<crate::tls::Identity>,
    cfg: Arc<crate::config::Config>,
    conns: Arc<AtomicUsize>,
) -> Result<()> {
    let server = server_config(&identity, &cfg)?;
    let endpoint = quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        Some(server),
        socket,
        Arc::new(quinn::TokioRuntime),
    )
    .context("QUIC endpoint")?;
    let stop = cfg.shutdown.wait();
    tokio::pin!(stop);
    loop {
        let incoming = tokio::select! {
            i = endpoint.accept() => match i {
                Some(i) => i,
                None => return Ok(()),
            },
            () = &mut stop => break,
        };
        let (cfg, slot) = (cfg.clone(), ConnSlot::new(&conns));
        tokio::spawn(async move {
            let _slot = slot;
            let _ = connection(incoming, cfg).await;
        });
    }
    // Count as open until every connection's CONNECTION_CLOSE is out, so the process does not
    // exit with clients left to time out.
    let _slot = ConnSlot::new(&conns);
    endpoint.wait_idle().await;
    Ok(())
}

async fn connection(incoming: quinn::Incoming, cfg: Arc<crate::config::Config>) -> Result<()> {
    let conn = tokio::time::timeout(cfg.timeout, incoming).await??;
    let mut h3 = h3::server::builder()
        .max_field_section_size(cfg.h3.h3_max_header_list)
        .build::<_, bytes::Bytes>(h3_quinn::Connection::new(conn))
        .await?;
    let active = Arc::new(AtomicUsize::new(0));
    let stop = cfg.shutdown.wait();
    tokio::pin!(stop);
    // Unknown and grease frames/settings are skipped by h3 itself (RFC 9114 §7.2.8, §9).
    loop {
        let resolver = tokio::select! {
            r = h3.accept() => match r? {
                Some(r) => r,
                None => return Ok(()),
            },
            () = &mut stop => break,
        };
        let (cfg, active) = (cfg.clone(), active.clone());
        active.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            if let Ok((req, stream)) = resolver.resolve_request().await {
                stream::serve(req, stream, &cfg).await;
            }
            active.fetch_sub(1, Ordering::Relaxed);
        });
    }
    // Shutdown: GOAWAY (no new requests), let the accepted ones finish, then close.
    h3.shutdown(0).await?;
    let _ = tokio::time::timeout(cfg.timeout, async {
        while active.load(Ordering::Relaxed) > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
    Ok(())
}

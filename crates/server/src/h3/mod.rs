//! HTTP/3 engine over QUIC (quinn + h3).

use std::sync::Arc;

/// HTTP/3 and QUIC settings exposed on the command line (flattened into `loadterm serve`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct H3Args {}

/// Serve HTTP/3 on this (already bound, SO_REUSEPORT) UDP socket until shutdown. Called once per
/// worker thread, inside that worker's current-thread runtime.
pub async fn run_endpoint(
    _socket: std::net::UdpSocket,
    _identity: Arc<crate::tls::Identity>,
    _cfg: Arc<crate::config::Config>,
) -> anyhow::Result<()> {
    anyhow::bail!("not built yet")
}

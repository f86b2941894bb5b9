//! HTTP/2 engine: TLS (ALPN `h2`) and cleartext h2c connections.

use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};

/// HTTP/2 settings exposed on the command line (flattened into `loadterm serve`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct H2Args {}

/// Serve one HTTP/2 connection until it ends. The connection preface has not been consumed.
pub async fn serve_connection<IO>(_io: IO, _cfg: Arc<crate::config::Config>) -> anyhow::Result<()>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    anyhow::bail!("not built yet")
}

//! TLS identity: generated self-signed certificates (or a user PEM) and rustls configs.

/// Certificates and keys the TLS and QUIC listeners present.
#[derive(Debug)]
pub struct Identity {}

impl Identity {
    /// A rustls server config (aws-lc-rs provider) presenting this identity with the given ALPN
    /// protocols; `tls13_only` for QUIC.
    pub fn rustls_config(
        &self,
        _alpn: &[&[u8]],
        _tls13_only: bool,
    ) -> anyhow::Result<rustls::ServerConfig> {
        anyhow::bail!("not built yet")
    }
}

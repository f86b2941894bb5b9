//! Client TLS: rustls with the aws-lc-rs provider; verification on by default (system CA
//! bundle or --cacert), off with -k.

use anyhow::{bail, Context, Result};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use std::sync::Arc;

const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// Accepts any certificate (`-k`): signatures are still checked so the handshake is real.
#[derive(Debug)]
struct Insecure(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for Insecure {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

pub fn client_config(
    insecure: bool,
    cacert: Option<&std::path::Path>,
    alpn: &[&[u8]],
) -> Result<rustls::ClientConfig> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?;
    let mut cfg = if insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Insecure(provider())))
            .with_no_client_auth()
    } else {
        let path = cacert.unwrap_or(std::path::Path::new(SYSTEM_BUNDLE));
        let pem = std::fs::read(path)
            .with_context(|| format!("cannot read CA file {}", path.display()))?;
        let mut roots = rustls::RootCertStore::empty();
        for c in rustls_pemfile::certs(&mut pem.as_slice()) {
            let c = c.with_context(|| format!("{}: malformed PEM", path.display()))?;
            roots
                .add(c)
                .with_context(|| format!("{}: unusable certificate", path.display()))?;
        }
        if roots.is_empty() {
            bail!("{}: no certificate found", path.display());
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(cfg)
}

pub fn quic_config(tls: rustls::ClientConfig) -> Result<quinn::ClientConfig> {
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls)
        .context("TLS 1.3 config for QUIC")?;
    let mut cfg = quinn::ClientConfig::new(Arc::new(crypto));
    let mut transport = quinn::TransportConfig::default();
    // Large receive windows so 256 KiB+ bodies are not throttled by flow control.
    transport
        .stream_receive_window((8u32 << 20).into())
        .receive_window((32u32 << 20).into())
        .max_idle_timeout(Some(
            std::time::Duration::from_secs(30)
                .try_into()
                .expect("30 s fits"),
        ));
    cfg.transport_config(Arc::new(transport));
    Ok(cfg)
}

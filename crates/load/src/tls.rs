//! Client TLS: rustls with the aws-lc-rs provider; verification on by default, off with -k.
//! Trusted: `--cacert`, else what OpenSSL-based tools (h2load, curl) trust: `SSL_CERT_FILE`
//! (or the system bundle) and `SSL_CERT_DIR`.

use crate::record::{ErrorKind, Failure};
use anyhow::{bail, Context, Result};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Debian's bundle, OpenSSL's default file there (`/usr/lib/ssl/cert.pem` links to it).
const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// Where trusted certificates come from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Trust {
    /// A PEM file that must be readable and hold certificates.
    File { path: PathBuf, from: &'static str },
    /// Every certificate of every readable PEM file in a directory.
    Dir { path: PathBuf, from: &'static str },
    /// The system bundle, used only if present.
    System,
}

/// OpenSSL's rules, decided here only: `--cacert` alone when given (as curl's `--cacert`
/// replaces the CA file and loadterm has no default directory to keep); otherwise
/// `SSL_CERT_FILE` replaces the default file and `SSL_CERT_DIR` (a `:`-separated list) adds
/// directories. Empty variables count as unset.
fn trust_sources(
    cacert: Option<&Path>,
    cert_file: Option<OsString>,
    cert_dir: Option<OsString>,
) -> Vec<Trust> {
    if let Some(p) = cacert {
        return vec![Trust::File {
            path: p.to_owned(),
            from: "--cacert",
        }];
    }
    let mut out = match cert_file.filter(|v| !v.is_empty()) {
        Some(f) => vec![Trust::File {
            path: f.into(),
            from: "SSL_CERT_FILE",
        }],
        None => vec![Trust::System],
    };
    if let Some(dirs) = cert_dir.filter(|v| !v.is_empty()) {
        out.extend(
            std::env::split_paths(&dirs)
                .filter(|p| !p.as_os_str().is_empty())
                .map(|path| Trust::Dir {
                    path,
                    from: "SSL_CERT_DIR",
                }),
        );
    }
    out
}

/// The certificates of one PEM file; `Ok(empty)` for a file with none.
fn pem_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let pem = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    rustls_pemfile::certs(&mut pem.as_slice())
        .collect::<Result<_, _>>()
        .with_context(|| format!("{}: malformed PEM", path.display()))
}

fn add_all(
    roots: &mut rustls::RootCertStore,
    certs: Vec<CertificateDer<'static>>,
    path: &Path,
) -> Result<()> {
    for c in certs {
        roots
            .add(c)
            .with_context(|| format!("{}: unusable certificate", path.display()))?;
    }
    Ok(())
}

fn load_roots(sources: &[Trust]) -> Result<rustls::RootCertStore> {
    let mut roots = rustls::RootCertStore::empty();
    for source in sources {
        match source {
            Trust::File { path, from } => {
                let certs = pem_certs(path).context(*from)?;
                if certs.is_empty() {
                    bail!("{from}: {}: no certificate found", path.display());
                }
                add_all(&mut roots, certs, path).context(*from)?;
            }
            Trust::Dir { path, from } => {
                let entries = std::fs::read_dir(path)
                    .with_context(|| format!("{from}: cannot read {}", path.display()))?;
                // OpenSSL looks certificates up by hashed name (`c_rehash`); reading every
                // file also covers directories nobody rehashed. Files that are not PEM
                // certificates (keys, READMEs) are skipped.
                for entry in entries.flatten() {
                    let file = entry.path();
                    if file.is_file() {
                        if let Ok(certs) = pem_certs(&file) {
                            // A CA that webpki cannot parse would be ignored by OpenSSL too.
                            for c in certs {
                                let _ = roots.add(c);
                            }
                        }
                    }
                }
            }
            Trust::System => {
                if let Ok(certs) = pem_certs(Path::new(SYSTEM_BUNDLE)) {
                    add_all(&mut roots, certs, Path::new(SYSTEM_BUNDLE))?;
                }
            }
        }
    }
    if roots.is_empty() {
        bail!(
            "no trusted CA certificate found (looked in {}): use --cacert, SSL_CERT_FILE, \
             SSL_CERT_DIR or -k",
            sources
                .iter()
                .map(|s| match s {
                    Trust::File { path, from } | Trust::Dir { path, from } =>
                        format!("{from}={}", path.display()),
                    Trust::System => SYSTEM_BUNDLE.to_owned(),
                })
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(roots)
}

/// A failed TLS (or QUIC) handshake with `name`, from rustls's message; a certificate the
/// client does not trust says how to fix it.
pub fn failure(name: &str, rustls_message: &str) -> Failure {
    let reason = match rustls_message.strip_prefix("invalid peer certificate: ") {
        Some(why) => format!(
            "certificate verify failed for {name}: {why} (use --cacert, SSL_CERT_FILE or -k)"
        ),
        None => format!("handshake with {name} failed: {rustls_message}"),
    };
    Failure::new(ErrorKind::Tls, reason)
}

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
    cacert: Option<&Path>,
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
        let sources = trust_sources(
            cacert,
            std::env::var_os("SSL_CERT_FILE"),
            std::env::var_os("SSL_CERT_DIR"),
        );
        builder
            .with_root_certificates(load_roots(&sources)?)
            .with_no_client_auth()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn file(p: &str, from: &'static str) -> Trust {
        Trust::File {
            path: p.into(),
            from,
        }
    }

    #[test]
    fn trust_follows_openssl_and_curl() {
        let os = |s: &str| Some(OsString::from(s));
        assert_eq!(trust_sources(None, None, None), [Trust::System]);
        assert_eq!(
            trust_sources(Some(Path::new("a.pem")), os("b.pem"), os("/d")),
            [file("a.pem", "--cacert")]
        );
        assert_eq!(
            trust_sources(None, os("b.pem"), None),
            [file("b.pem", "SSL_CERT_FILE")]
        );
        // The directory list adds to the file (or to the system bundle).
        assert_eq!(
            trust_sources(None, os(""), os("/d1:/d2")),
            [
                Trust::System,
                Trust::Dir {
                    path: "/d1".into(),
                    from: "SSL_CERT_DIR"
                },
                Trust::Dir {
                    path: "/d2".into(),
                    from: "SSL_CERT_DIR"
                }
            ]
        );
    }

    #[test]
    fn unreadable_or_empty_trust_is_an_error() {
        let e = load_roots(&[file("/nonexistent/ca.pem", "SSL_CERT_FILE")]).unwrap_err();
        assert!(format!("{e:#}").starts_with("SSL_CERT_FILE: cannot read /nonexistent/ca.pem"));
        let e = load_roots(&[file("/dev/null", "--cacert")]).unwrap_err();
        assert!(format!("{e:#}").contains("no certificate found"), "{e:#}");
        let e = load_roots(&[Trust::Dir {
            path: "/nonexistent".into(),
            from: "SSL_CERT_DIR",
        }])
        .unwrap_err();
        assert!(
            format!("{e:#}").contains("SSL_CERT_DIR: cannot read"),
            "{e:#}"
        );
    }

    #[test]
    fn failures_say_why_and_what_to_do() {
        let f = failure("bench.local", "invalid peer certificate: UnknownIssuer");
        assert_eq!(f.kind, ErrorKind::Tls);
        assert_eq!(
            f.reason,
            "tls: certificate verify failed for bench.local: UnknownIssuer \
             (use --cacert, SSL_CERT_FILE or -k)"
        );
        assert_eq!(
            failure("x", "received fatal alert: HandshakeFailure").reason,
            "tls: handshake with x failed: received fatal alert: HandshakeFailure"
        );
    }
}

//! TLS identity: self-signed certificates generated at every start (RSA and ECDSA, valid now, for
//! localhost and the listen addresses) or a user PEM (chain + key, HAProxy's `crt` format), and
//! the rustls server configs built from it (aws-lc-rs provider, chosen explicitly).

use anyhow::{bail, Context, Result};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::net::IpAddr;
use std::sync::Arc;

/// Which certificates to present.
#[derive(Debug, Clone)]
pub enum CertSource {
    Generate {
        rsa_bits: u32,
        curve: Curve,
        names: Vec<String>,
        ips: Vec<IpAddr>,
    },
    File(std::path::PathBuf),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Curve {
    P256,
    P384,
}

impl std::str::FromStr for Curve {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_uppercase().replace('_', "-").as_str() {
            "P-256" | "P256" | "PRIME256V1" | "SECP256R1" => Ok(Curve::P256),
            "P-384" | "P384" | "SECP384R1" => Ok(Curve::P384),
            _ => Err(format!("unsupported curve '{s}': use P-256 or P-384")),
        }
    }
}

/// Certificates and keys the TLS and QUIC listeners present.
#[derive(Debug)]
pub struct Identity {
    keys: Vec<Arc<CertifiedKey>>,
    /// PEM of the generated certificates (for `--cert-out`); empty for a user file.
    pub generated_pem: String,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

impl Identity {
    pub fn load(source: &CertSource) -> Result<Identity> {
        match source {
            CertSource::Generate {
                rsa_bits,
                curve,
                names,
                ips,
            } => generate(*rsa_bits, *curve, names, ips),
            CertSource::File(path) => from_pem_file(path),
        }
    }

    /// A rustls server config presenting this identity with the given ALPN protocols; TLS 1.2
    /// and 1.3, or 1.3 only (QUIC).
    pub fn rustls_config(&self, alpn: &[&[u8]], tls13_only: bool) -> Result<rustls::ServerConfig> {
        let versions: &[&rustls::SupportedProtocolVersion] = if tls13_only {
            &[&rustls::version::TLS13]
        } else {
            &[&rustls::version::TLS13, &rustls::version::TLS12]
        };
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(versions)
            .context("TLS protocol versions")?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(Resolver(self.keys.clone())));
        cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        // No 0-RTT (quinn accepts 0 or u32::MAX).
        cfg.max_early_data_size = 0;
        Ok(cfg)
    }
}

/// Picks ECDSA when the client accepts it, RSA otherwise (as haterm's two `crt` lines do).
#[derive(Debug)]
struct Resolver(Vec<Arc<CertifiedKey>>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let offered = hello.signature_schemes();
        self.0
            .iter()
            .find(|k| k.key.choose_scheme(offered).is_some())
            .or_else(|| self.0.first())
            .cloned()
    }
}

fn certified(
    cert: CertificateDer<'static>,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<Arc<CertifiedKey>> {
    let signing = provider()
        .key_provider
        .load_private_key(key)
        .context("unsupported private key")?;
    let mut certs = vec![cert];
    certs.extend(chain);
    Ok(Arc::new(CertifiedKey::new(certs, signing)))
}

fn generate(rsa_bits: u32, curve: Curve, names: &[String], ips: &[IpAddr]) -> Result<Identity> {
    let rsa_size = match rsa_bits {
        2048 => rcgen::RsaKeySize::_2048,
        3072 => rcgen::RsaKeySize::_3072,
        4096 => rcgen::RsaKeySize::_4096,
        other => bail!("unsupported RSA key size {other}: use 2048, 3072 or 4096"),
    };
    let ec_alg = match curve {
        Curve::P256 => &rcgen::PKCS_ECDSA_P256_SHA256,
        Curve::P384 => &rcgen::PKCS_ECDSA_P384_SHA384,
    };
    let ecdsa = rcgen::KeyPair::generate_for(ec_alg).context("generating the ECDSA key")?;
    let rsa = rcgen::KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, rsa_size)
        .context("generating the RSA key")?;
    let mut keys = Vec::new();
    let mut pem = String::new();
    // ECDSA first: the resolver prefers the first key the client accepts.
    for key in [ecdsa, rsa] {
        let mut params =
            rcgen::CertificateParams::new(names.to_vec()).context("certificate names")?;
        params
            .subject_alt_names
            .extend(ips.iter().map(|ip| rcgen::SanType::IpAddress(*ip)));
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "loadterm self-signed");
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - std::time::Duration::from_secs(3600);
        params.not_after = now + std::time::Duration::from_secs(90 * 86400);
        let cert = params
            .self_signed(&key)
            .context("signing the certificate")?;
        pem.push_str(&cert.pem());
        let der_key =
            PrivateKeyDer::try_from(key.serialize_der()).map_err(|e| anyhow::anyhow!("{e}"))?;
        keys.push(certified(cert.der().clone(), Vec::new(), der_key)?);
    }
    Ok(Identity {
        keys,
        generated_pem: pem,
    })
}

fn from_pem_file(path: &std::path::Path) -> Result<Identity> {
    let data = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut certs = Vec::new();
    let mut key = None;
    for item in rustls_pemfile::read_all(&mut data.as_slice()) {
        match item.with_context(|| format!("{}: malformed PEM", path.display()))? {
            rustls_pemfile::Item::X509Certificate(c) => certs.push(c),
            rustls_pemfile::Item::Pkcs1Key(k) => key = key.or(Some(PrivateKeyDer::Pkcs1(k))),
            rustls_pemfile::Item::Pkcs8Key(k) => key = key.or(Some(PrivateKeyDer::Pkcs8(k))),
            rustls_pemfile::Item::Sec1Key(k) => key = key.or(Some(PrivateKeyDer::Sec1(k))),
            _ => {}
        }
    }
    let key = key.with_context(|| format!("{}: no private key found", path.display()))?;
    if certs.is_empty() {
        bail!("{}: no certificate found", path.display());
    }
    let leaf = certs.remove(0);
    Ok(Identity {
        keys: vec![certified(leaf, certs, key)?],
        generated_pem: String::new(),
    })
}

/// Names and addresses the generated certificate covers: localhost, the loopback addresses and
/// every listen address that is not a wildcard.
pub fn default_sans(listen_ips: &[IpAddr]) -> (Vec<String>, Vec<IpAddr>) {
    let mut ips: Vec<IpAddr> = vec!["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()];
    for ip in listen_ips {
        if !ip.is_unspecified() && !ips.contains(ip) {
            ips.push(*ip);
        }
    }
    (vec!["localhost".to_string()], ips)
}

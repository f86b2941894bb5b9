//! The agent's credentials: a CA made for one lab, a certificate for the agent and one for ab
//! signed by it (mutual TLS), and a token both sides must also present. `loadterm agent --init
//! DIR` makes them; the agent reads its half of DIR, ab (`--agent-auth DIR`) its own.

use anyhow::{bail, Context, Result};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;

const CA: &str = "ca.pem";
const AGENT_CERT: &str = "agent.pem";
const AGENT_KEY: &str = "agent.key";
const AB_CERT: &str = "ab.pem";
const AB_KEY: &str = "ab.key";
const TOKEN: &str = "token";

fn write(dir: &Path, name: &str, text: &str, mode: u32) -> Result<()> {
    use std::io::Write;
    let path = dir.join(name);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    f.write_all(text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Make the credentials in `dir` (which must not hold any yet): the agent's certificate names
/// `names` (host names or addresses ab will use in `--server-host`) besides the loopback ones.
pub(crate) fn init(dir: &Path, names: &[String]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let now = time::OffsetDateTime::now_utc();
    let validity = |p: &mut rcgen::CertificateParams| {
        p.not_before = now - std::time::Duration::from_secs(3600);
        p.not_after = now + std::time::Duration::from_secs(365 * 86400);
    };
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "loadterm agent CA");
    validity(&mut ca_params);
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, rcgen::KeyPair::generate()?)
        .context("signing the CA certificate")?;
    let issue = |cn: &str, sans: Vec<String>, server: bool| -> Result<(String, String)> {
        let key = rcgen::KeyPair::generate()?;
        let (dns, ips): (Vec<String>, Vec<String>) =
            sans.into_iter().partition(|n| n.parse::<IpAddr>().is_err());
        let mut p = rcgen::CertificateParams::new(dns).context("certificate names")?;
        for ip in ips {
            p.subject_alt_names
                .push(rcgen::SanType::IpAddress(ip.parse()?));
        }
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        p.extended_key_usages = vec![if server {
            rcgen::ExtendedKeyUsagePurpose::ServerAuth
        } else {
            rcgen::ExtendedKeyUsagePurpose::ClientAuth
        }];
        validity(&mut p);
        let cert = p.signed_by(&key, &ca).context("signing a certificate")?;
        Ok((cert.pem(), key.serialize_pem()))
    };
    let mut agent_names: Vec<String> = ["localhost", "127.0.0.1", "::1"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    agent_names.extend(names.iter().cloned());
    let (agent_pem, agent_key) = issue("loadterm agent", agent_names, true)?;
    let (ab_pem, ab_key) = issue("loadterm ab", Vec::new(), false)?;
    let token: String = (0..32)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect();
    write(dir, CA, &ca.pem(), 0o644)?;
    write(dir, AGENT_CERT, &agent_pem, 0o644)?;
    write(dir, AGENT_KEY, &agent_key, 0o600)?;
    write(dir, AB_CERT, &ab_pem, 0o644)?;
    write(dir, AB_KEY, &ab_key, 0o600)?;
    write(dir, TOKEN, &format!("{token}\n"), 0o600)?;
    Ok(())
}

fn read(dir: &Path, name: &str) -> Result<Vec<u8>> {
    let path = dir.join(name);
    std::fs::read(&path).with_context(|| {
        format!(
            "cannot read {} (made by `loadterm agent --init DIR`)",
            path.display()
        )
    })
}

fn certs(dir: &Path, name: &str) -> Result<Vec<CertificateDer<'static>>> {
    let pem = read(dir, name)?;
    let certs = rustls_pemfile::certs(&mut pem.as_slice())
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("{name}: not PEM certificates"))?;
    if certs.is_empty() {
        bail!("{name} holds no certificate");
    }
    Ok(certs)
}

fn key(dir: &Path, name: &str) -> Result<PrivateKeyDer<'static>> {
    let pem = read(dir, name)?;
    rustls_pemfile::private_key(&mut pem.as_slice())
        .with_context(|| format!("{name}: not a PEM key"))?
        .with_context(|| format!("{name} holds no key"))
}

fn token(dir: &Path) -> Result<String> {
    let t = String::from_utf8(read(dir, TOKEN)?).context("the token is not text")?;
    let t = t.trim().to_owned();
    if t.len() < 32 {
        bail!("the token in {} is under 32 characters", dir.display());
    }
    Ok(t)
}

fn roots(dir: &Path) -> Result<Arc<rustls::RootCertStore>> {
    let mut roots = rustls::RootCertStore::empty();
    for c in certs(dir, CA)? {
        roots.add(c).context("the CA certificate")?;
    }
    Ok(Arc::new(roots))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// The agent's side: TLS that requires a client certificate from the lab's CA, and the token.
pub(crate) struct AgentCredentials {
    pub tls: Arc<rustls::ServerConfig>,
    pub token: String,
}

pub(crate) fn agent(dir: &Path) -> Result<AgentCredentials> {
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(roots(dir)?, provider())
            .build()
            .context("the client certificate verifier")?;
    let tls = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs(dir, AGENT_CERT)?, key(dir, AGENT_KEY)?)
        .context("the agent's certificate and key")?;
    Ok(AgentCredentials {
        tls: Arc::new(tls),
        token: token(dir)?,
    })
}

/// ab's side: the lab's CA as the only root, ab's certificate, and the token.
pub(crate) struct AbCredentials {
    pub tls: Arc<rustls::ClientConfig>,
    pub token: String,
}

pub(crate) fn ab(dir: &Path) -> Result<AbCredentials> {
    let tls = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots(dir)?)
        .with_client_auth_cert(certs(dir, AB_CERT)?, key(dir, AB_KEY)?)
        .context("ab's certificate and key")?;
    Ok(AbCredentials {
        tls: Arc::new(tls),
        token: token(dir)?,
    })
}

/// The name the agent's certificate must carry for `host` (an address or a DNS name).
pub(crate) fn server_name(host: &str) -> Result<ServerName<'static>> {
    ServerName::try_from(host.trim_matches(['[', ']']).to_owned())
        .with_context(|| format!("{host:?} is not a host name or address"))
}

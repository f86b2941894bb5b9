//! Client TLS: rustls with the aws-lc-rs provider; verification on by default, off with -k.
//! Trusted: `--cacert`, else what OpenSSL-based tools (h2load, curl) trust: `SSL_CERT_FILE`
//! (or the system bundle) and `SSL_CERT_DIR`.

use crate::record::{ConnectFailure, ErrorKind};
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

/// The trusted certificates: as trust anchors, and as they are (see [`Verifier`]).
#[derive(Debug)]
struct Roots {
    store: rustls::RootCertStore,
    certs: Vec<CertificateDer<'static>>,
}

impl Roots {
    fn add(&mut self, c: CertificateDer<'static>) -> Result<(), rustls::Error> {
        self.store.add(c.clone())?;
        self.certs.push(c);
        Ok(())
    }
}

fn add_all(roots: &mut Roots, certs: Vec<CertificateDer<'static>>, path: &Path) -> Result<()> {
    for c in certs {
        roots
            .add(c)
            .map_err(|e| anyhow::anyhow!("{}", readable(&e.to_string())))
            .with_context(|| format!("{}: unusable certificate", path.display()))?;
    }
    Ok(())
}

fn load_roots(sources: &[Trust]) -> Result<Roots> {
    let mut roots = Roots {
        store: rustls::RootCertStore::empty(),
        certs: Vec::new(),
    };
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
    if roots.certs.is_empty() {
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

/// rustls's message in words: rustls and webpki print many of their errors with Debug
/// (`Other(OtherError(CaUsedAsEndEntity))`, `received fatal alert: HandshakeFailure`); the
/// wrappers go and each CamelCase name becomes lower-case words. (QUIC handshake errors reach
/// us as quinn's copy of that text only, so the text is what is rewritten.)
pub(crate) fn readable(rustls_message: &str) -> String {
    let mut m = rustls_message.to_owned();
    while let Some(start) = m.find("Other(OtherError(") {
        let inner = start + "Other(OtherError(".len();
        match m[inner..].find("))") {
            Some(end) => {
                m = format!(
                    "{}{}{}",
                    &m[..start],
                    &m[inner..inner + end],
                    &m[inner + end + 2..]
                )
            }
            None => break,
        }
    }
    let mut out = String::with_capacity(m.len() + 8);
    for (i, word) in m.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let name = word.trim_end_matches([',', ';', ':', '.', ')']);
        let camel = name.len() > 1
            && name.starts_with(|c: char| c.is_ascii_uppercase())
            && name.chars().all(|c| c.is_ascii_alphanumeric())
            && name.chars().any(|c| c.is_ascii_lowercase())
            && name.chars().skip(1).any(|c| c.is_ascii_uppercase());
        if !camel {
            out.push_str(word);
            continue;
        }
        // webpki checks this before the issuer: what it means here is a self-signed
        // certificate (`openssl req -x509` sets CA:TRUE) that is not one of the trusted ones.
        if name == "CaUsedAsEndEntity" {
            out.push_str("self-signed or CA certificate (CA:TRUE) that is not itself trusted");
            out.push_str(&word[name.len()..]);
            continue;
        }
        for (k, c) in name.chars().enumerate() {
            if c.is_ascii_uppercase() && k > 0 {
                out.push(' ');
            }
            out.push(c.to_ascii_lowercase());
        }
        out.push_str(&word[name.len()..]);
    }
    out
}

/// A failed TLS (or QUIC) handshake with `name`, from rustls's message; a certificate the
/// client does not trust says how to fix it.
pub(crate) fn failure(name: &str, rustls_message: &str) -> ConnectFailure {
    let rustls_message = readable(rustls_message);
    let reason = match rustls_message.strip_prefix("invalid peer certificate: ") {
        Some(why) => format!(
            "certificate verify failed for {name}: {why} (use --cacert, SSL_CERT_FILE or -k)"
        ),
        None => format!("handshake with {name} failed: {rustls_message}"),
    };
    ConnectFailure::new(ErrorKind::Tls, reason)
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

/// webpki's verification, and also what OpenSSL (curl, h2load) trusts and webpki does not: a
/// server certificate that is exactly one of the trusted certificates. `openssl req -x509`
/// makes self-signed certificates with CA:TRUE, which webpki refuses as a server's own
/// (`CaUsedAsEndEntity`) even when given with `--cacert`. Such a certificate must still be
/// valid now and for the server name, as OpenSSL and curl require.
#[derive(Debug)]
struct Verifier {
    webpki: Arc<rustls::client::WebPkiServerVerifier>,
    trusted: Vec<CertificateDer<'static>>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if !self.trusted.iter().any(|c| c == end_entity) {
            return self.webpki.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp,
                now,
            );
        }
        use rustls::CertificateError as E;
        let cert = webpki::EndEntityCert::try_from(end_entity).map_err(|_| E::BadEncoding)?;
        cert.verify_is_valid_for_subject_name(server_name)
            .map_err(|_| E::NotValidForNameContext {
                expected: server_name.to_owned(),
                presented: cert.valid_dns_names().map(str::to_owned).collect(),
            })?;
        let (not_before, not_after) = validity(end_entity).ok_or(E::BadEncoding)?;
        if now.as_secs() < not_before {
            return Err(E::NotValidYetContext {
                time: now,
                not_before: UnixTime::since_unix_epoch(std::time::Duration::from_secs(not_before)),
            }
            .into());
        }
        if now.as_secs() > not_after {
            return Err(E::ExpiredContext {
                time: now,
                not_after: UnixTime::since_unix_epoch(std::time::Duration::from_secs(not_after)),
            }
            .into());
        }
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(m, c, d)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(m, c, d)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// A certificate's validity (notBefore, notAfter) in Unix seconds, read from its DER (RFC 5280
/// §4.1: Certificate = SEQUENCE { tbsCertificate SEQUENCE { [0] version OPTIONAL, serial,
/// signature, issuer, validity SEQUENCE { Time, Time }, ... }, ... }); webpki keeps it private.
fn validity(der: &[u8]) -> Option<(u64, u64)> {
    /// One DER element: (tag, contents, rest).
    fn tlv(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
        let (&tag, b) = b.split_first()?;
        let (&first, mut b) = b.split_first()?;
        let len = match first {
            n if n < 0x80 => n as usize,
            0x81..=0x84 => {
                let k = (first & 0x7f) as usize;
                let (bytes, rest) = b.split_at_checked(k)?;
                b = rest;
                bytes.iter().fold(0usize, |a, &x| (a << 8) | x as usize)
            }
            _ => return None,
        };
        let (value, rest) = b.split_at_checked(len)?;
        Some((tag, value, rest))
    }
    /// UTCTime (`YYMMDDHHMMSSZ`, years 1950-2049) or GeneralizedTime (`YYYYMMDDHHMMSSZ`).
    fn time(tag: u8, v: &[u8]) -> Option<u64> {
        let s = std::str::from_utf8(v).ok()?.strip_suffix('Z')?;
        let (year, rest) = match (tag, s.len()) {
            (0x17, 12) => {
                let yy: i32 = s[..2].parse().ok()?;
                (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &s[2..])
            }
            (0x18, 14) => (s[..4].parse().ok()?, &s[4..]),
            _ => return None,
        };
        let n = |r: std::ops::Range<usize>| rest.get(r)?.parse::<u8>().ok();
        let date =
            time::Date::from_calendar_date(year, n(0..2)?.try_into().ok()?, n(2..4)?).ok()?;
        let t = time::Time::from_hms(n(4..6)?, n(6..8)?, n(8..10)?).ok()?;
        u64::try_from(date.with_time(t).assume_utc().unix_timestamp()).ok()
    }
    let (_, cert, _) = tlv(der)?;
    let (_, tbs, _) = tlv(cert)?;
    let mut rest = tbs;
    if rest.first() == Some(&0xa0) {
        rest = tlv(rest)?.2;
    }
    for _ in 0..3 {
        rest = tlv(rest)?.2; // serial, signature algorithm, issuer
    }
    let (_, validity, _) = tlv(rest)?;
    let (t1, v1, rest) = tlv(validity)?;
    let (t2, v2, _) = tlv(rest)?;
    Some((time(t1, v1)?, time(t2, v2)?))
}

/// When a connection resumes a TLS session (`--tls-resume`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum ResumePolicy {
    Never,
    Always,
    /// This share of the connections, spread evenly.
    Fraction(f64),
}

impl std::str::FromStr for ResumePolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<ResumePolicy, String> {
        match s {
            "never" => Ok(ResumePolicy::Never),
            "always" => Ok(ResumePolicy::Always),
            f => match f.parse::<f64>() {
                Ok(v) if (0.0..=1.0).contains(&v) => Ok(ResumePolicy::Fraction(v)),
                _ => Err(format!(
                    "'{s}': never, always, or a fraction of the connections (0.5)"
                )),
            },
        }
    }
}

/// A protocol's client configs: one that resumes sessions (tickets and session IDs kept in
/// one store for every connection of the run), and one that never does.
#[derive(Clone)]
pub(crate) struct Configs<T> {
    pub resuming: T,
    pub fresh: T,
}

impl<T> Configs<T> {
    pub(crate) fn pick(&self, resume: bool) -> &T {
        if resume {
            &self.resuming
        } else {
            &self.fresh
        }
    }
}

/// TLS 1.3 tickets kept per server name: enough for every connection of a run to find one
/// (rustls's in-memory store keeps 8, and a ticket is used once).
const TICKETS_PER_SERVER: usize = 4096;

/// The run's session store: TLS 1.3 tickets (each used once, as RFC 8446 §C.4 advises) and a
/// TLS 1.2 session per server name, shared by every connection.
#[derive(Debug, Default)]
struct Sessions(std::sync::Mutex<SessionMap>);

#[derive(Debug, Default)]
struct SessionMap {
    tls12: std::collections::HashMap<ServerName<'static>, rustls::client::Tls12ClientSessionValue>,
    tls13: std::collections::HashMap<
        ServerName<'static>,
        std::collections::VecDeque<rustls::client::Tls13ClientSessionValue>,
    >,
    kx_hint: std::collections::HashMap<ServerName<'static>, rustls::NamedGroup>,
}

impl Sessions {
    fn map(&self) -> std::sync::MutexGuard<'_, SessionMap> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl rustls::client::ClientSessionStore for Sessions {
    fn set_kx_hint(&self, name: ServerName<'static>, group: rustls::NamedGroup) {
        self.map().kx_hint.insert(name, group);
    }
    fn kx_hint(&self, name: &ServerName<'_>) -> Option<rustls::NamedGroup> {
        self.map().kx_hint.get(name).copied()
    }
    fn set_tls12_session(
        &self,
        name: ServerName<'static>,
        value: rustls::client::Tls12ClientSessionValue,
    ) {
        self.map().tls12.insert(name, value);
    }
    fn tls12_session(
        &self,
        name: &ServerName<'_>,
    ) -> Option<rustls::client::Tls12ClientSessionValue> {
        self.map().tls12.get(name).cloned()
    }
    fn remove_tls12_session(&self, name: &ServerName<'static>) {
        self.map().tls12.remove(name);
    }
    fn insert_tls13_ticket(
        &self,
        name: ServerName<'static>,
        value: rustls::client::Tls13ClientSessionValue,
    ) {
        let mut map = self.map();
        let tickets = map.tls13.entry(name).or_default();
        if tickets.len() == TICKETS_PER_SERVER {
            tickets.pop_front();
        }
        tickets.push_back(value);
    }
    fn take_tls13_ticket(
        &self,
        name: &ServerName<'static>,
    ) -> Option<rustls::client::Tls13ClientSessionValue> {
        self.map().tls13.get_mut(name)?.pop_back()
    }
}

thread_local! {
    /// Server certificates verified on this thread: a handshake that verified none resumed a
    /// session (QUIC's handshakes are counted so: quinn does not say how each went).
    static VERIFIED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Server certificates verified on this thread so far.
pub(crate) fn verified() -> u64 {
    VERIFIED.with(|v| v.get())
}

/// A verifier that counts what it verified (`verified`).
#[derive(Debug)]
struct Counting(Arc<dyn ServerCertVerifier>);

impl ServerCertVerifier for Counting {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let ok = self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)?;
        VERIFIED.with(|v| v.set(v.get() + 1));
        Ok(ok)
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(m, c, d)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(m, c, d)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// The client's configs: resuming through one session store, and not; with early data
/// (0-RTT, for QUIC) when `early_data`.
pub(crate) fn client_configs(
    insecure: bool,
    cacert: Option<&Path>,
    alpn: &[&[u8]],
    early_data: bool,
) -> Result<Configs<rustls::ClientConfig>> {
    let mut resuming = client_config(insecure, cacert, alpn)?;
    let mut fresh = resuming.clone();
    resuming.resumption = rustls::client::Resumption::store(Arc::new(Sessions::default()));
    resuming.enable_early_data = early_data;
    fresh.resumption = rustls::client::Resumption::disabled();
    Ok(Configs { resuming, fresh })
}

fn client_config(
    insecure: bool,
    cacert: Option<&Path>,
    alpn: &[&[u8]],
) -> Result<rustls::ClientConfig> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?;
    let mut cfg = if insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Counting(Arc::new(Insecure(provider())))))
            .with_no_client_auth()
    } else {
        let sources = trust_sources(
            cacert,
            std::env::var_os("SSL_CERT_FILE"),
            std::env::var_os("SSL_CERT_DIR"),
        );
        let roots = load_roots(&sources)?;
        let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots.store),
            provider(),
        )
        .build()
        .context("certificate verifier")?;
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Counting(Arc::new(Verifier {
                webpki,
                trusted: roots.certs,
            }))))
            .with_no_client_auth()
    };
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(cfg)
}

/// QUIC for HTTP/3: the (stream, connection) receive windows when given (h2load's `-w`, `-W`,
/// from `Offer::h3_windows`).
pub(crate) fn quic_config(
    tls: rustls::ClientConfig,
    (stream, conn): (Option<u32>, Option<u32>),
) -> Result<quinn::ClientConfig> {
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls)
        .context("TLS 1.3 config for QUIC")?;
    let mut cfg = quinn::ClientConfig::new(Arc::new(crypto));
    let mut transport = quinn::TransportConfig::default();
    // Large receive windows so 256 KiB+ bodies are not throttled by flow control.
    transport
        .stream_receive_window(stream.unwrap_or(8 << 20).into())
        .receive_window(conn.unwrap_or(32 << 20).into())
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
    fn messages_carry_no_debug_text() {
        assert_eq!(
            readable("invalid peer certificate: Other(OtherError(CaUsedAsEndEntity))"),
            "invalid peer certificate: self-signed or CA certificate (CA:TRUE) that is not \
             itself trusted"
        );
        assert_eq!(
            readable("received fatal alert: HandshakeFailure"),
            "received fatal alert: handshake failure"
        );
        assert_eq!(
            readable("invalid peer certificate: UnknownIssuer"),
            "invalid peer certificate: unknown issuer"
        );
        // Words and names that are not CamelCase stay.
        assert_eq!(
            readable("peer is incompatible: TLS 1.3 with X25519 (QUIC)"),
            "peer is incompatible: TLS 1.3 with X25519 (QUIC)"
        );
    }

    #[test]
    fn validity_of_a_certificate() {
        // `openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1
        // -subj /CN=bench.local`: valid from 2026-11-26 09:07:50 UTC for a day (UTCTime).
        const PEM: &str = "\
-----BEGIN CERTIFICATE-----
MIIBmDCCAT+gAwIBAgIUeR/mEW35E/rLDqGd+7QBCKKaouMwCgYIKoZIzj0EAwIw
FjEUMBIGA1UEAwwLYmVuY2gubG9jYWwwHhcNMjYxMTI2MDkwNzUwWhcNMjYxMTI3
MDkwNzUwWjAWMRQwEgYDVQQDDAtiZW5jaC5sb2NhbDBZMBMGByqGSM49AgEGCCqG
SM49AwEHA0IABEUcG3OPVT0D216JrP0KGWGM12qU5rJcq8fuR8XGIIcW68hNGBts
IrQDyhIxwiRcMeAaqqAPUUTMVcstGXhtc4WjazBpMB0GA1UdDgQWBBQbOiBCKjHz
XobcKt3AUjk/SIoJojAfBgNVHSMEGDAWgBQbOiBCKjHzXobcKt3AUjk/SIoJojAP
BgNVHRMBAf8EBTADAQH/MBYGA1UdEQQPMA2CC2JlbmNoLmxvY2FsMAoGCCqGSM49
BAMCA0cAMEQCIGRHPgFhfExWK7MxTY/Q0oGR/5t0Ad49q4B/VLyXUAxLAiB4LNdO
VNMFiGbTDNReCZd5lUQZS6GqIwZDsaXuT3uHfw==
-----END CERTIFICATE-----";
        let der = rustls_pemfile::certs(&mut PEM.as_bytes())
            .next()
            .unwrap()
            .unwrap();
        let not_before = 1_795_684_070;
        assert_eq!(validity(&der), Some((not_before, not_before + 86_400)));
        assert_eq!(validity(&der[..40]), None);
        assert_eq!(validity(b"\x30\x80"), None);
    }

    #[test]
    fn failures_say_why_and_what_to_do() {
        let f = failure("bench.local", "invalid peer certificate: UnknownIssuer");
        assert_eq!(f.kind, ErrorKind::Tls);
        assert_eq!(
            f.reason,
            "tls: certificate verify failed for bench.local: unknown issuer \
             (use --cacert, SSL_CERT_FILE or -k)"
        );
        assert_eq!(
            failure("x", "received fatal alert: HandshakeFailure").reason,
            "tls: handshake with x failed: received fatal alert: handshake failure"
        );
    }
}

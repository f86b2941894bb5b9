//! TLS identity: self-signed certificates generated at every start (RSA and ECDSA, valid now, for
//! localhost and the listen addresses) or user PEMs (chain + key, HAProxy's `crt` format; a
//! directory of them served by SNI), and the rustls server configs built from it (aws-lc-rs
//! provider, chosen explicitly, restricted by haterm's `ssl-default-bind-*` lines).

use crate::plumbing::stats::{self, Transport};
use anyhow::{bail, Context, Result};
use rustls::crypto::aws_lc_rs;
use rustls::crypto::cipher::{
    AeadKey, InboundOpaqueMessage, InboundPlainMessage, Iv, MessageDecrypter, MessageEncrypter,
    OutboundOpaqueMessage, OutboundPlainMessage, Tls13AeadAlgorithm, UnsupportedOperationError,
};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{
    CipherSuite, CipherSuiteCommon, ConnectionTrafficSecrets, NamedGroup, SupportedCipherSuite,
    Tls13CipherSuite,
};
use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};

/// Which certificates to present.
#[derive(Debug, Clone)]
pub(crate) enum CertSource {
    Generate {
        rsa_bits: u32,
        curve: Curve,
        names: Vec<String>,
        ips: Vec<IpAddr>,
    },
    /// PEM files (chain and key; the key may also be in `<file>.key`) or directories of them.
    Files(Vec<PathBuf>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Curve {
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

/// The `ssl-default-bind-*` settings (OpenSSL names, `:`-separated); `None`: rustls's defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Policy {
    /// TLS 1.3 suites (`ssl-default-bind-ciphersuites`).
    pub ciphersuites: Option<String>,
    /// TLS 1.2 suites (`ssl-default-bind-ciphers`).
    pub ciphers: Option<String>,
    /// Key exchange groups (`ssl-default-bind-curves`).
    pub curves: Option<String>,
}

/// The AES-128-GCM suites, preferred unless the configuration orders the suites.
const AES_128_GCM: [CipherSuite; 3] = [
    CipherSuite::TLS13_AES_128_GCM_SHA256,
    CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
];

/// OpenSSL's names of the suites rustls (aws-lc-rs) implements.
const SUITES: &[(&str, CipherSuite)] = &[
    (
        "TLS_AES_128_GCM_SHA256",
        CipherSuite::TLS13_AES_128_GCM_SHA256,
    ),
    (
        "TLS_AES_256_GCM_SHA384",
        CipherSuite::TLS13_AES_256_GCM_SHA384,
    ),
    (
        "TLS_CHACHA20_POLY1305_SHA256",
        CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
    ),
    (
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
    (
        "ECDHE-RSA-AES128-GCM-SHA256",
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "ECDHE-RSA-AES256-GCM-SHA384",
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "ECDHE-RSA-CHACHA20-POLY1305",
        CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
];

/// OpenSSL's names (and aliases) of the groups rustls (aws-lc-rs) implements.
const GROUPS: &[(&str, NamedGroup)] = &[
    ("X25519", NamedGroup::X25519),
    ("P-256", NamedGroup::secp256r1),
    ("prime256v1", NamedGroup::secp256r1),
    ("secp256r1", NamedGroup::secp256r1),
    ("P-384", NamedGroup::secp384r1),
    ("secp384r1", NamedGroup::secp384r1),
    ("X25519MLKEM768", NamedGroup::X25519MLKEM768),
    ("SecP256r1MLKEM768", NamedGroup::secp256r1MLKEM768),
    ("MLKEM768", NamedGroup::MLKEM768),
    ("MLKEM1024", NamedGroup::MLKEM1024),
];

/// The entries of `list` found in `table` (case-insensitive), in the list's order, and a
/// warning naming the others.
fn pick<T: Copy + PartialEq>(
    what: &str,
    list: &str,
    table: &[(&str, T)],
    available: impl Fn(T) -> bool,
    warnings: &mut Vec<String>,
) -> Vec<T> {
    let mut out = Vec::new();
    let mut unknown = Vec::new();
    for name in list.split(':').filter(|n| !n.is_empty()) {
        match table.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)) {
            Some((_, v)) if available(*v) => {
                if !out.contains(v) {
                    out.push(*v);
                }
            }
            _ => unknown.push(name),
        }
    }
    if !unknown.is_empty() {
        warnings.push(format!(
            "{what}: {} not available in rustls (aws-lc-rs), ignored",
            unknown.join(", ")
        ));
    }
    out
}

/// The crypto a policy leaves. The server's order of suites decides, as HAProxy's does by
/// default (rustls's default follows the client's).
#[derive(Debug, Clone)]
pub(crate) struct Crypto {
    provider: Arc<CryptoProvider>,
}

impl Policy {
    /// The crypto this policy leaves (aws-lc-rs's defaults where it says nothing or names
    /// nothing rustls has), and warnings for what it cannot honour.
    pub(crate) fn crypto(&self) -> (Crypto, Vec<String>) {
        let mut p = aws_lc_rs::default_provider();
        let mut warnings = Vec::new();
        let all = aws_lc_rs::ALL_CIPHER_SUITES;
        let mut keep =
            |line: &str, list: &Option<String>, tls13: bool, warnings: &mut Vec<String>| {
                let Some(list) = list else { return };
                let wanted = pick(
                    line,
                    list,
                    SUITES,
                    |cs| {
                        all.iter()
                            .any(|s| s.suite() == cs && (s.tls13().is_some() == tls13))
                    },
                    warnings,
                );
                if wanted.is_empty() {
                    warnings.push(format!("{line}: nothing usable, rustls's defaults kept"));
                    return;
                }
                // This version's suites in the order asked for, the other version's kept.
                let mut suites: Vec<_> = wanted
                    .iter()
                    .filter_map(|cs| all.iter().find(|s| s.suite() == *cs).copied())
                    .collect();
                suites.extend(
                    p.cipher_suites
                        .iter()
                        .filter(|s| s.tls13().is_some() != tls13)
                        .copied(),
                );
                p.cipher_suites = suites;
            };
        keep(
            "ssl-default-bind-ciphersuites",
            &self.ciphersuites,
            true,
            &mut warnings,
        );
        keep(
            "ssl-default-bind-ciphers",
            &self.ciphers,
            false,
            &mut warnings,
        );
        if let Some(list) = &self.curves {
            let groups = aws_lc_rs::ALL_KX_GROUPS;
            let wanted = pick(
                "ssl-default-bind-curves",
                list,
                GROUPS,
                |g| groups.iter().any(|k| k.name() == g),
                &mut warnings,
            );
            if wanted.is_empty() {
                warnings
                    .push("ssl-default-bind-curves: nothing usable, rustls's defaults kept".into());
            } else {
                p.kx_groups = wanted
                    .iter()
                    .filter_map(|g| groups.iter().find(|k| k.name() == *g).copied())
                    .collect();
            }
        }
        let aes128 = CipherSuite::TLS13_AES_128_GCM_SHA256;
        if self.ciphersuites.is_some() && !p.cipher_suites.iter().any(|s| s.suite() == aes128) {
            warnings.push(
                "ssl-default-bind-ciphersuites: QUIC listeners keep TLS_AES_128_GCM_SHA256 last \
                 (QUIC's Initial packets need it, RFC 9001 §5.2)"
                    .into(),
            );
        }
        // Where no line orders a version's suites, AES-128-GCM comes first: clients (OpenSSL's
        // included) list AES-256-GCM first, and it costs ~10% more per byte (14 AES rounds to
        // 10) for nothing a benchmark needs. The sort is stable: the rest keep rustls's order.
        let unordered = |tls13: bool| {
            if tls13 {
                self.ciphersuites.is_none()
            } else {
                self.ciphers.is_none()
            }
        };
        p.cipher_suites.sort_by_key(|s| {
            let tls13 = s.tls13().is_some();
            !(unordered(tls13) && AES_128_GCM.contains(&s.suite()))
        });
        (
            Crypto {
                provider: Arc::new(p),
            },
            warnings,
        )
    }
}

/// Certificates and keys the TLS and QUIC listeners present, with the crypto provider they
/// use.
#[derive(Debug)]
pub(crate) struct Identity {
    keys: Arc<Keys>,
    crypto: Crypto,
    /// PEM of the generated certificates (for `--cert-out`); empty for user files.
    pub generated_pem: String,
}

impl Identity {
    pub(crate) fn load(source: &CertSource, crypto: Crypto) -> Result<Identity> {
        let provider = &crypto.provider;
        let (keys, generated_pem) = match source {
            CertSource::Generate {
                rsa_bits,
                curve,
                names,
                ips,
            } => generate(*rsa_bits, *curve, names, ips, provider)?,
            CertSource::Files(paths) => (from_paths(paths, provider)?, String::new()),
        };
        Ok(Identity {
            keys: Arc::new(Keys::new(keys)),
            crypto,
            generated_pem,
        })
    }

    /// A rustls server config presenting this identity with the given ALPN protocols; TLS 1.2
    /// and 1.3, or for QUIC 1.3 only, its suites made by [`quic_suites`]. Sessions resume
    /// (TLS 1.3 tickets and TLS 1.2 session IDs, from one store per config); 0-RTT is off.
    pub(crate) fn rustls_config(&self, alpn: &[&[u8]], quic: bool) -> Result<rustls::ServerConfig> {
        let versions: &[&rustls::SupportedProtocolVersion] = if quic {
            &[&rustls::version::TLS13]
        } else {
            &[&rustls::version::TLS13, &rustls::version::TLS12]
        };
        let mut provider = self.crypto.provider.clone();
        if quic {
            let mut p = (*provider).clone();
            p.cipher_suites = quic_suites(&p.cipher_suites);
            provider = Arc::new(p);
        }
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(versions)
            .context("TLS protocol versions (do the ssl-default-bind-* lines leave a suite?)")?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(Resolver(self.keys.clone())));
        cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        cfg.ignore_client_order = true;
        // No 0-RTT unless asked for (`allow_early_data`; quinn accepts 0 or u32::MAX).
        cfg.max_early_data_size = 0;
        // Stateful: rustls offers 0-RTT with stored sessions only (RFC 8446 §8.1).
        let transport = if quic {
            Transport::Quic
        } else {
            Transport::Tls
        };
        cfg.session_storage = Arc::new(Sessions::new(transport));
        Ok(cfg)
    }
}

/// Sessions a listener keeps for resumption: each full TLS 1.3 handshake stores two tickets
/// (rustls's default), each used once; at some 200 bytes each, 64 Ki of them are ~13 MB, room
/// for tens of thousands of clients resuming (rustls's default, 256, is for a few).
const SESSIONS: usize = 65536;

/// The session store: a map, and the keys in the order stored for evicting the oldest.
/// rustls's own `ServerSessionMemoryCache` removes a taken key from its order by a linear
/// search: at 64 Ki sessions that made a resumed handshake cost more server CPU than a full one
/// (172 against 157 µs). Here a taken key stays in the order until it comes up for eviction
/// (skipped then: no longer in the map), and the order is compacted when stale keys make it
/// twice the map's bound. It counts the sessions it gives back: each is a resumed handshake
/// (a TLS 1.3 ticket taken, a TLS 1.2 session ID found), on the handshake's own thread.
#[derive(Debug)]
struct Sessions {
    store: std::sync::Mutex<SessionStore>,
    transport: Transport,
}

#[derive(Debug, Default)]
struct SessionStore {
    map: HashMap<Vec<u8>, Vec<u8>>,
    order: std::collections::VecDeque<Vec<u8>>,
}

impl Sessions {
    fn new(transport: Transport) -> Sessions {
        Sessions {
            store: std::sync::Mutex::new(SessionStore::default()),
            transport,
        }
    }

    fn store(&self) -> std::sync::MutexGuard<'_, SessionStore> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn found(&self, value: Option<Vec<u8>>) -> Option<Vec<u8>> {
        if value.is_some() {
            stats::handshake_resumed(self.transport);
        }
        value
    }
}

impl rustls::server::StoresServerSessions for Sessions {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        let mut s = self.store();
        while s.map.len() >= SESSIONS {
            let Some(oldest) = s.order.pop_front() else {
                break;
            };
            s.map.remove(&oldest);
        }
        if s.order.len() >= 2 * SESSIONS {
            let SessionStore { map, order } = &mut *s;
            order.retain(|k| map.contains_key(k));
        }
        if s.map.insert(key.clone(), value).is_none() {
            s.order.push_back(key);
        }
        true
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        let value = self.store().map.get(key).cloned();
        self.found(value)
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        let value = self.store().map.remove(key);
        self.found(value)
    }

    fn can_cache(&self) -> bool {
        true
    }
}

/// The TLS 1.3 suites of `suites` for QUIC, in their order, with TLS_AES_128_GCM_SHA256 added
/// if missing: QUIC protects its Initial packets with it whatever is negotiated (RFC 9001
/// §5.2). Each suite is aws-lc-rs's with a [`NoRecordLayer`] AEAD: rustls sets record-layer
/// keys at each key change even under QUIC, which protects packets with its own keys
/// (`Tls13CipherSuite::quic`) and never uses them: two AEAD contexts held for a connection's
/// life, 1.8 KB of each HTTP/3 connection's RSS (docs/RELIABILITY.md).
fn quic_suites(suites: &[SupportedCipherSuite]) -> Vec<SupportedCipherSuite> {
    /// aws-lc-rs's TLS 1.3 suites so changed, made once: rustls takes suites as `'static`.
    static QUIC: LazyLock<Vec<SupportedCipherSuite>> = LazyLock::new(|| {
        aws_lc_rs::ALL_CIPHER_SUITES
            .iter()
            .filter_map(|s| s.tls13())
            .map(|s| {
                let aead: &'static NoRecordLayer = Box::leak(Box::new(NoRecordLayer(s.aead_alg)));
                SupportedCipherSuite::Tls13(Box::leak(Box::new(Tls13CipherSuite {
                    common: CipherSuiteCommon {
                        suite: s.common.suite,
                        hash_provider: s.common.hash_provider,
                        confidentiality_limit: s.common.confidentiality_limit,
                    },
                    hkdf_provider: s.hkdf_provider,
                    aead_alg: aead,
                    quic: s.quic,
                })))
            })
            .collect()
    });
    let quic = |cs: CipherSuite| QUIC.iter().find(|s| s.suite() == cs).copied();
    let mut out: Vec<_> = suites
        .iter()
        .filter(|s| s.tls13().is_some())
        .filter_map(|s| quic(s.suite()))
        .collect();
    let aes128 = CipherSuite::TLS13_AES_128_GCM_SHA256;
    if !out.iter().any(|s| s.suite() == aes128) {
        out.extend(quic(aes128));
    }
    out
}

/// A TLS 1.3 AEAD whose record-layer encrypter and decrypter are [`Unused`] (no allocation:
/// zero-sized); everything else is the wrapped algorithm's.
struct NoRecordLayer(&'static dyn Tls13AeadAlgorithm);

impl Tls13AeadAlgorithm for NoRecordLayer {
    fn encrypter(&self, _: AeadKey, _: Iv) -> Box<dyn MessageEncrypter> {
        Box::new(Unused)
    }

    fn decrypter(&self, _: AeadKey, _: Iv) -> Box<dyn MessageDecrypter> {
        Box::new(Unused)
    }

    fn key_len(&self) -> usize {
        self.0.key_len()
    }

    fn extract_keys(
        &self,
        key: AeadKey,
        iv: Iv,
    ) -> Result<ConnectionTrafficSecrets, UnsupportedOperationError> {
        self.0.extract_keys(key, iv)
    }

    fn fips(&self) -> bool {
        self.0.fips()
    }
}

/// The record layer of a QUIC connection's TLS, which carries no record: an error if used.
struct Unused;

impl MessageEncrypter for Unused {
    fn encrypt(
        &mut self,
        _: OutboundPlainMessage<'_>,
        _: u64,
    ) -> Result<OutboundOpaqueMessage, rustls::Error> {
        Err(rustls::Error::EncryptError)
    }

    fn encrypted_payload_len(&self, len: usize) -> usize {
        len
    }
}

impl MessageDecrypter for Unused {
    fn decrypt<'a>(
        &mut self,
        _: InboundOpaqueMessage<'a>,
        _: u64,
    ) -> Result<InboundPlainMessage<'a>, rustls::Error> {
        Err(rustls::Error::DecryptError)
    }
}

/// Keys in load order, and the DNS names of their certificates (subjectAltName, lower case,
/// `*.` wildcards kept as such) for choosing by SNI.
#[derive(Debug)]
struct Keys {
    keys: Vec<Arc<CertifiedKey>>,
    by_name: HashMap<String, Vec<usize>>,
}

impl Keys {
    fn new(keys: Vec<Arc<CertifiedKey>>) -> Keys {
        let mut by_name: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, k) in keys.iter().enumerate() {
            let Some(Ok(cert)) = k.cert.first().map(webpki::EndEntityCert::try_from) else {
                continue;
            };
            for name in cert.valid_dns_names() {
                let slot = by_name.entry(name.to_ascii_lowercase()).or_default();
                if !slot.contains(&i) {
                    slot.push(i);
                }
            }
        }
        Keys { keys, by_name }
    }

    /// The keys whose certificate names `sni` (exactly, else by a `*.` wildcard for its first
    /// label), or `None`.
    fn named(&self, sni: &str) -> Option<&[usize]> {
        let sni = sni.to_ascii_lowercase();
        self.by_name
            .get(&sni)
            .or_else(|| {
                let parent = sni.split_once('.')?.1;
                self.by_name.get(&format!("*.{parent}"))
            })
            .map(Vec::as_slice)
    }

    /// Among `candidates`, the first key the client can verify (by its signature schemes: ECDSA
    /// or RSA, as haterm's two `crt` lines), else the first.
    fn choose<'a>(
        mut candidates: impl Iterator<Item = &'a Arc<CertifiedKey>> + Clone,
        offered: &[rustls::SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        candidates
            .clone()
            .find(|k| k.key.choose_scheme(offered).is_some())
            .or_else(|| candidates.next())
            .cloned()
    }
}

/// Chooses by SNI among the certificates that name it; without SNI, or for a name no
/// certificate has, among all (HAProxy serves its default certificate then).
#[derive(Debug)]
struct Resolver(Arc<Keys>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let keys = &self.0;
        let offered = hello.signature_schemes();
        match hello.server_name().and_then(|n| keys.named(n)) {
            Some(idx) => Keys::choose(idx.iter().map(|&i| &keys.keys[i]), offered),
            None => Keys::choose(keys.keys.iter(), offered),
        }
    }
}

fn certified(
    cert: CertificateDer<'static>,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    provider: &CryptoProvider,
) -> Result<Arc<CertifiedKey>> {
    let signing = provider
        .key_provider
        .load_private_key(key)
        .context("unsupported private key")?;
    let mut certs = vec![cert];
    certs.extend(chain);
    Ok(Arc::new(CertifiedKey::new(certs, signing)))
}

fn generate(
    rsa_bits: u32,
    curve: Curve,
    names: &[String],
    ips: &[IpAddr],
    provider: &CryptoProvider,
) -> Result<(Vec<Arc<CertifiedKey>>, String)> {
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
        keys.push(certified(
            cert.der().clone(),
            Vec::new(),
            der_key,
            provider,
        )?);
    }
    Ok((keys, pem))
}

/// Keys from `crt` paths in order: a file, or every file of a directory (sorted by name;
/// hidden files and the companions HAProxy reads beside a certificate, `.key`, `.ocsp`,
/// `.issuer`, `.sctl`, skipped).
fn from_paths(paths: &[PathBuf], provider: &CryptoProvider) -> Result<Vec<Arc<CertifiedKey>>> {
    let mut keys = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(path)
                .with_context(|| format!("cannot read {}", path.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file() && !companion_or_hidden(p))
                .collect();
            files.sort();
            if files.is_empty() {
                bail!("{}: no certificate file in this directory", path.display());
            }
            for f in files {
                keys.push(from_pem_file(&f, provider)?);
            }
        } else {
            keys.push(from_pem_file(path, provider)?);
        }
    }
    Ok(keys)
}

fn companion_or_hidden(p: &Path) -> bool {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name.starts_with('.')
        || [".key", ".ocsp", ".issuer", ".sctl"]
            .iter()
            .any(|ext| name.ends_with(ext))
}

/// One HAProxy `crt` file: the chain (leaf first) and the key, or the key in `<file>.key`.
fn from_pem_file(path: &Path, provider: &CryptoProvider) -> Result<Arc<CertifiedKey>> {
    let read =
        |p: &Path| -> Result<(Vec<CertificateDer<'static>>, Option<PrivateKeyDer<'static>>)> {
            let data = std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))?;
            let mut certs = Vec::new();
            let mut key = None;
            for item in rustls_pemfile::read_all(&mut data.as_slice()) {
                match item.with_context(|| format!("{}: malformed PEM", p.display()))? {
                    rustls_pemfile::Item::X509Certificate(c) => certs.push(c),
                    rustls_pemfile::Item::Pkcs1Key(k) => {
                        key = key.or(Some(PrivateKeyDer::Pkcs1(k)))
                    }
                    rustls_pemfile::Item::Pkcs8Key(k) => {
                        key = key.or(Some(PrivateKeyDer::Pkcs8(k)))
                    }
                    rustls_pemfile::Item::Sec1Key(k) => key = key.or(Some(PrivateKeyDer::Sec1(k))),
                    _ => {}
                }
            }
            Ok((certs, key))
        };
    let (mut certs, key) = read(path)?;
    let key = match key {
        Some(k) => k,
        None => {
            let mut companion = path.as_os_str().to_owned();
            companion.push(".key");
            let companion = PathBuf::from(companion);
            if !companion.exists() {
                bail!(
                    "{}: no private key found (nor in {})",
                    path.display(),
                    companion.display()
                );
            }
            read(&companion)?
                .1
                .with_context(|| format!("{}: no private key found", companion.display()))?
        }
    };
    if certs.is_empty() {
        bail!("{}: no certificate found", path.display());
    }
    let leaf = certs.remove(0);
    certified(leaf, certs, key, provider).with_context(|| format!("{}", path.display()))
}

/// Names and addresses the generated certificate covers: localhost, the loopback addresses and
/// every listen address that is not a wildcard.
pub(crate) fn default_sans(listen_ips: &[IpAddr]) -> (Vec<String>, Vec<IpAddr>) {
    let mut ips: Vec<IpAddr> = vec!["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()];
    for ip in listen_ips {
        if !ip.is_unspecified() && !ips.contains(ip) {
            ips.push(*ip);
        }
    }
    (vec!["localhost".to_string()], ips)
}

/// Why a TLS handshake failed, as the statistics name it: the alert rustls sent for its
/// error (the variants rustls maps to several alerts are named by the usual one), the alert
/// the client sent, or the way the connection ended.
pub(crate) fn failure(e: &std::io::Error) -> crate::plumbing::stats::HandshakeFailure {
    use crate::plumbing::stats::HandshakeFailure;
    use rustls::{AlertDescription as A, Error as E};
    let Some(tls) = e.get_ref().and_then(|inner| inner.downcast_ref::<E>()) else {
        return match e.kind() {
            std::io::ErrorKind::UnexpectedEof => HandshakeFailure::Eof,
            _ => HandshakeFailure::Io,
        };
    };
    HandshakeFailure::Alert(match tls {
        E::AlertReceived(a) => *a,
        E::InvalidMessage(_) => A::DecodeError,
        E::InappropriateMessage { .. } | E::InappropriateHandshakeMessage { .. } => {
            A::UnexpectedMessage
        }
        E::NoApplicationProtocol => A::NoApplicationProtocol,
        E::PeerMisbehaved(_) => A::IllegalParameter,
        E::DecryptError => A::DecryptError,
        E::InvalidCertificate(c) => c.clone().into(),
        _ => A::HandshakeFailure,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// QUIC's suites: the policy's TLS 1.3 suites in its order, TLS_AES_128_GCM_SHA256 added
    /// last, each with no record-layer AEAD behind it.
    #[test]
    fn quic_suites_keep_the_policy_and_make_no_record_keys() {
        let policy = Policy {
            ciphersuites: Some("TLS_CHACHA20_POLY1305_SHA256:TLS_AES_256_GCM_SHA384".into()),
            ..Policy::default()
        };
        let (crypto, _) = policy.crypto();
        let suites = quic_suites(&crypto.provider.cipher_suites);
        let names: Vec<_> = suites.iter().map(|s| s.suite()).collect();
        assert_eq!(
            names,
            [
                CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
                CipherSuite::TLS13_AES_256_GCM_SHA384,
                CipherSuite::TLS13_AES_128_GCM_SHA256,
            ]
        );
        for s in suites {
            let s = s.tls13().unwrap();
            assert!(s.quic.is_some(), "{:?}: QUIC packet keys", s.common.suite);
            let key = AeadKey::from([0; 32]);
            let mut record = s.aead_alg.encrypter(key, Iv::from([0; 12]));
            let msg = OutboundPlainMessage {
                typ: rustls::ContentType::Handshake,
                version: rustls::ProtocolVersion::TLSv1_3,
                payload: rustls::crypto::cipher::OutboundChunks::Single(b"x"),
            };
            assert!(record.encrypt(msg, 0).is_err(), "{:?}", s.common.suite);
        }
    }
}

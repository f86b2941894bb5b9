//! JA4 TLS client fingerprints (FoxIO's JA4 for the TLS ClientHello, BSD-licensed; none of the
//! other JA4+ methods), sans-I/O.
//!
//! - [`fingerprint`]: a ClientHello handshake message → its JA4 (and the raw/original forms).
//! - [`tcp`]: find the complete ClientHello at the start of a TLS-over-TCP byte stream.
//! - [`quic`]: open a client's QUIC Initial packets (their keys are public) and reassemble the
//!   ClientHello from their CRYPTO frames.
//!
//! The TLS structures are parsed with `tls-parser`; this crate only applies JA4's rules.

#![forbid(unsafe_code)]

pub mod quic;
pub mod tcp;

use std::fmt::Write as _;
use tls_parser::{TlsExtension, TlsMessage, TlsMessageHandshake};

/// Largest ClientHello handshake message accepted (type and length included). Real ones are
/// 0.2–2 KiB (post-quantum key shares included); the bound keeps a peer from making us buffer more.
pub const MAX_CLIENT_HELLO: usize = 16 * 1024;

/// The transport the ClientHello arrived on: JA4's first character.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HelloTransport {
    Tcp,
    Quic,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("not a TLS handshake record")]
    NotHandshake,
    #[error("the first handshake message is not a ClientHello")]
    NotClientHello,
    #[error("ClientHello larger than {MAX_CLIENT_HELLO} bytes")]
    TooLarge,
    #[error("malformed ClientHello: {0}")]
    Malformed(&'static str),
    #[error("malformed QUIC Initial packet: {0}")]
    Quic(&'static str),
}

/// One client's JA4, with the values the raw forms are built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ja4 {
    /// `ja4`: `t13d1516h2_8daaf6152771_e5627efa2ab1`.
    fingerprint: String,
    /// The 10-character first part (`t13d1516h2`).
    prefix_len: usize,
    /// Cipher suites, extensions and signature algorithms in the client's order, GREASE removed.
    ciphers: Vec<u16>,
    extensions: Vec<u16>,
    signature_algorithms: Vec<u16>,
}

const SNI: u16 = 0x0000;
const ALPN: u16 = 0x0010;
const SIGNATURE_ALGORITHMS: u16 = 0x000d;
const SUPPORTED_VERSIONS: u16 = 0x002b;

/// RFC 8701's reserved values (0x0a0a, 0x1a1a, … 0xfafa): JA4 ignores them everywhere.
pub fn is_grease(v: u16) -> bool {
    v & 0x0f0f == 0x0a0a && v >> 8 == v & 0xff
}

/// The JA4 of a ClientHello handshake message (type byte, 24-bit length, body), as it appears in
/// TLS handshake records or QUIC CRYPTO frames.
pub fn fingerprint(client_hello: &[u8], transport: HelloTransport) -> Result<Ja4, Error> {
    if client_hello.len() > MAX_CLIENT_HELLO {
        return Err(Error::TooLarge);
    }
    let hello = match tls_parser::parse_tls_message_handshake(client_hello) {
        Ok((_, TlsMessage::Handshake(TlsMessageHandshake::ClientHello(h)))) => h,
        Ok(_) => return Err(Error::NotClientHello),
        Err(_) => return Err(Error::Malformed("ClientHello structure")),
    };
    let ciphers: Vec<u16> = hello
        .ciphers
        .iter()
        .map(|c| c.0)
        .filter(|&c| !is_grease(c))
        .collect();
    let mut extensions = Vec::new();
    let mut signature_algorithms = Vec::new();
    let mut alpn_first: Option<Vec<u8>> = None;
    let mut supported_max: Option<u16> = None;
    let mut rest = hello.ext.unwrap_or_default();
    while !rest.is_empty() {
        let whole = rest;
        // Every extension's type and length, whatever its content.
        let (next, ext) = tls_parser::parse_tls_extension_unknown(rest)
            .map_err(|_| Error::Malformed("extension list"))?;
        rest = next;
        let TlsExtension::Unknown(ty, _) = ext else {
            return Err(Error::Malformed("extension list"));
        };
        let ty = ty.0;
        if is_grease(ty) {
            continue;
        }
        extensions.push(ty);
        if matches!(ty, ALPN | SIGNATURE_ALGORITHMS | SUPPORTED_VERSIONS) {
            // The three whose contents JA4 reads: parsed by tls-parser from the same bytes.
            let raw = &whole[..whole.len() - rest.len()];
            let parsed = tls_parser::parse_tls_client_hello_extension(raw)
                .map_err(|_| Error::Malformed("extension content"))?
                .1;
            match parsed {
                TlsExtension::ALPN(protocols) => {
                    alpn_first = Some(protocols.first().map(|p| p.to_vec()).unwrap_or_default())
                }
                TlsExtension::SignatureAlgorithms(algs) => {
                    signature_algorithms = algs.into_iter().filter(|&a| !is_grease(a)).collect()
                }
                TlsExtension::SupportedVersions(versions) => {
                    supported_max = versions
                        .iter()
                        .map(|v| v.0)
                        .filter(|&v| !is_grease(v))
                        .max()
                }
                _ => return Err(Error::Malformed("extension content")),
            }
        }
    }
    let version = supported_max.unwrap_or(hello.version.0);
    let mut fp = String::with_capacity(36);
    fp.push(match transport {
        HelloTransport::Tcp => 't',
        HelloTransport::Quic => 'q',
    });
    fp.push_str(version_code(version));
    fp.push(if extensions.contains(&SNI) { 'd' } else { 'i' });
    let _ = write!(
        fp,
        "{:02}{:02}",
        ciphers.len().min(99),
        extensions.len().min(99)
    );
    fp.push_str(&alpn_code(alpn_first.as_deref().unwrap_or_default()));
    let prefix_len = fp.len();
    let mut ja4 = Ja4 {
        fingerprint: fp,
        prefix_len,
        ciphers,
        extensions,
        signature_algorithms,
    };
    ja4.fingerprint = ja4.hashed(true);
    Ok(ja4)
}

impl Ja4 {
    /// `ja4`, e.g. `t13d1516h2_8daaf6152771_e5627efa2ab1`.
    pub fn as_str(&self) -> &str {
        &self.fingerprint
    }

    /// `ja4_r`: the sorted lists themselves instead of their hashes.
    pub fn raw(&self) -> String {
        let (b, c) = self.parts(true);
        format!("{}_{b}_{c}", self.prefix())
    }

    /// `ja4_o`: hashes of the lists in the client's order, SNI and ALPN kept.
    pub fn original(&self) -> String {
        self.hashed(false)
    }

    /// `ja4_ro`: the lists in the client's order.
    pub fn raw_original(&self) -> String {
        let (b, c) = self.parts(false);
        format!("{}_{b}_{c}", self.prefix())
    }

    /// `prefix_hash(ciphers)_hash(extensions)`. The extension part is JA4's "none" marker when
    /// the client sent no extension other than SNI and ALPN, in both orders (as FoxIO's tools do:
    /// a ClientHello with SNI alone has `ja4_o` `…_000000000000`).
    fn hashed(&self, sorted: bool) -> String {
        let (b, c) = self.parts(sorted);
        let only_sni_alpn = self.extensions.iter().all(|&e| e == SNI || e == ALPN);
        let c = if only_sni_alpn {
            "000000000000".to_string()
        } else {
            hash12(&c)
        };
        format!("{}_{}_{c}", self.prefix(), hash12(&b))
    }

    fn prefix(&self) -> &str {
        &self.fingerprint[..self.prefix_len]
    }

    /// The cipher list and the extension list (+ `_` + signature algorithms when there are
    /// any), sorted with SNI and ALPN left out (`ja4`, `ja4_r`) or as sent (`_o` forms).
    fn parts(&self, sorted: bool) -> (String, String) {
        let mut ciphers = self.ciphers.clone();
        let mut exts = self.extensions.clone();
        if sorted {
            ciphers.sort_unstable();
            exts.retain(|&e| e != SNI && e != ALPN);
            exts.sort_unstable();
        }
        let mut c = hex_list(&exts);
        if !exts.is_empty() && !self.signature_algorithms.is_empty() {
            c.push('_');
            c.push_str(&hex_list(&self.signature_algorithms));
        }
        (hex_list(&ciphers), c)
    }
}

impl std::fmt::Display for Ja4 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.fingerprint)
    }
}

fn version_code(v: u16) -> &'static str {
    match v {
        0x0304 => "13",
        0x0303 => "12",
        0x0302 => "11",
        0x0301 => "10",
        0x0300 => "s3",
        0x0002 => "s2",
        0xfeff => "d1",
        0xfefd => "d2",
        0xfefc => "d3",
        _ => "00",
    }
}

/// First and last characters of the first ALPN value; `00` when there is none or it is empty;
/// when either end is not ASCII alphanumeric, the first and last hex digits of the value instead.
fn alpn_code(first: &[u8]) -> String {
    let (Some(&a), Some(&z)) = (first.first(), first.last()) else {
        return "00".to_string();
    };
    if a.is_ascii_alphanumeric() && z.is_ascii_alphanumeric() {
        [a as char, z as char].iter().collect()
    } else {
        let a = format!("{a:02x}");
        let z = format!("{z:02x}");
        format!("{}{}", &a[..1], &z[1..])
    }
}

fn hex_list(values: &[u16]) -> String {
    let mut s = String::with_capacity(values.len() * 5);
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, "{v:04x}");
    }
    s
}

/// First 12 hex digits of SHA-256; `000000000000` for an empty list (JA4's marker for "none").
fn hash12(list: &str) -> String {
    if list.is_empty() {
        return "000000000000".to_string();
    }
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, list.as_bytes());
    let mut s = String::with_capacity(12);
    for b in &digest.as_ref()[..6] {
        let _ = write!(s, "{b:02x}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alpn_rules_from_the_spec() {
        // The examples listed in FoxIO's JA4 specification (technical_details/JA4.md).
        assert_eq!(alpn_code(b"h2"), "h2");
        assert_eq!(alpn_code(b"http/1.1"), "h1");
        assert_eq!(alpn_code(b"x"), "xx");
        assert_eq!(alpn_code(b""), "00");
        assert_eq!(alpn_code(&[0xab]), "ab");
        assert_eq!(alpn_code(&[0x20]), "20");
        assert_eq!(alpn_code(&[0xab, 0xcd]), "ad");
        assert_eq!(alpn_code(&[0x20, 0x61]), "21");
        assert_eq!(alpn_code(&[0x30, 0xab]), "3b");
        assert_eq!(alpn_code(&[0x61, 0x20]), "60");
        assert_eq!(alpn_code(&[0x30, 0x31, 0xab, 0xcd]), "3d");
        assert_eq!(alpn_code(&[0x30, 0xab, 0xcd, 0x31]), "01");
    }

    #[test]
    fn hashes_from_the_spec() {
        assert_eq!(
            hash12("002f,0035,009c,009d,1301,1302,1303,c013,c014,c02b,c02c,c02f,c030,cca8,cca9"),
            "8daaf6152771"
        );
        assert_eq!(
            hash12("0005,000a,000b,000d,0012,0015,0017,001b,0023,002b,002d,0033,4469,ff01_0403,0804,0401,0503,0805,0501,0806,0601"),
            "e5627efa2ab1"
        );
        assert_eq!(
            hash12("0005,000a,000b,000d,0012,0015,0017,001b,0023,002b,002d,0033,4469,ff01"),
            "6d807ffa2a79"
        );
        assert_eq!(hash12(""), "000000000000");
    }

    #[test]
    fn grease_values() {
        assert!(is_grease(0x0a0a) && is_grease(0xfafa) && is_grease(0x3a3a));
        assert!(!is_grease(0x0a1a) && !is_grease(0x1301) && !is_grease(0x0000));
    }
}

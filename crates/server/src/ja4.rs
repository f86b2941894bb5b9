//! `--ja4`: each client's JA4 fingerprint (crate `loadterm-ja4`), returned as `x-ja4` on every
//! response of its connection and counted per process.
//!
//! - TLS over TCP: the ClientHello is read before rustls sees anything, then replayed into it
//!   ([`Prefixed`]).
//! - QUIC: the UDP socket the HTTP/3 engine reads from (`h3::socket`) shows every datagram to
//!   [`QuicFingerprints`] before quinn-proto sees it; client Initial datagrams are opened and
//!   reassembled as they pass, and the fingerprint waits, keyed by the client's address and
//!   original Destination Connection ID (quinn-proto's `Incoming` exposes both), for the HTTP/3
//!   engine to take it once the connection's handshake is done.
//!
//! Without `--ja4` none of this is on the path: the listeners take their usual route.

use crate::stream::prefixed::Prefixed;
use http::{HeaderName, HeaderValue};
use loadterm_ja4::{quic::Reassembler, tcp, HelloTransport};
use std::collections::{HashMap, VecDeque};
use std::fmt::Debug;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The response header.
const HEADER: &str = "x-ja4";
/// Distinct fingerprints counted; later new ones are counted together as "other".
const MAX_DISTINCT: usize = 4096;
/// Fingerprints printed at shutdown.
const TOP: usize = 10;
/// QUIC connections whose ClientHello is being reassembled, and fingerprints waiting for their
/// connection, per endpoint (a flood of Initials evicts the oldest: memory stays bounded).
const QUIC_PENDING: usize = 1024;

/// Fingerprint → connections seen, for the whole process.
#[derive(Debug, Default)]
pub(crate) struct FingerprintCounts {
    counts: Mutex<(HashMap<String, u64>, u64)>,
}

impl FingerprintCounts {
    pub(crate) fn count(&self, fingerprint: &str) {
        let mut guard = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let (map, other) = &mut *guard;
        if let Some(n) = map.get_mut(fingerprint) {
            *n += 1;
        } else if map.len() < MAX_DISTINCT {
            map.insert(fingerprint.to_string(), 1);
        } else {
            *other += 1;
        }
    }

    /// The most frequent fingerprints, one per line, for stderr at shutdown.
    pub(crate) fn report(&self) -> String {
        let guard = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let (map, other) = &*guard;
        let mut all: Vec<(&String, &u64)> = map.iter().collect();
        all.sort_unstable_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let total: u64 = map.values().sum::<u64>() + other;
        let mut s = format!(
            "loadterm: JA4 fingerprints: {total} connection(s), {} distinct\n",
            map.len()
        );
        for (fp, n) in all.iter().take(TOP) {
            s.push_str(&format!("  {n:>10}  {fp}\n"));
        }
        if all.len() > TOP || *other > 0 {
            let rest: u64 = all.iter().skip(TOP).map(|(_, n)| **n).sum::<u64>() + other;
            s.push_str(&format!("  {rest:>10}  (others)\n"));
        }
        s
    }
}

/// The `x-ja4` field for a fingerprint (always a valid value: JA4 is `[0-9a-z_]`).
fn header(fingerprint: &str) -> Option<(HeaderName, HeaderValue)> {
    Some((
        HeaderName::from_static(HEADER),
        HeaderValue::from_str(fingerprint).ok()?,
    ))
}

/// TLS alert descriptions (RFC 8446 §6.2) sent when there is no usable ClientHello.
const UNEXPECTED_MESSAGE: u8 = 10;
const DECODE_ERROR: u8 = 50;

/// Read the client's ClientHello (within `timeout`), fingerprint and count it, and return the
/// stream to give rustls (the bytes read replayed first) with the fingerprint. A stream that does
/// not start with a well-formed ClientHello gets a fatal TLS alert and is closed: the error
/// says why, as a failed handshake.
pub(crate) async fn sniff_tcp(
    mut sock: TcpStream,
    timeout: Duration,
    stats: &FingerprintCounts,
) -> Result<(Prefixed<TcpStream>, String), crate::plumbing::stats::HandshakeFailure> {
    use crate::plumbing::stats::HandshakeFailure;
    let mut buf = Vec::with_capacity(2048);
    let read = tokio::time::timeout(timeout, async {
        loop {
            match tcp::client_hello(&buf) {
                Ok(tcp::Hello::Complete(hello)) => {
                    return loadterm_ja4::fingerprint(&hello, HelloTransport::Tcp)
                        .map_err(|_| Some(DECODE_ERROR));
                }
                Ok(tcp::Hello::Incomplete) => {}
                Err(loadterm_ja4::Error::NotHandshake | loadterm_ja4::Error::NotClientHello) => {
                    return Err(Some(UNEXPECTED_MESSAGE))
                }
                Err(_) => return Err(Some(DECODE_ERROR)),
            }
            // Records add 5 bytes per fragment: twice the largest ClientHello is ample.
            if buf.len() > 2 * loadterm_ja4::MAX_CLIENT_HELLO {
                return Err(Some(DECODE_ERROR));
            }
            match sock.read_buf(&mut buf).await {
                // Closed without a byte: nothing to answer.
                Ok(0) if buf.is_empty() => return Err(None),
                // The client stopped sending before its ClientHello was complete.
                Ok(0) => return Err(Some(DECODE_ERROR)),
                Ok(_) => {}
                // The connection is gone: nothing to say.
                Err(_) => return Err(None),
            }
        }
    })
    .await;
    match read {
        Ok(Ok(ja4)) => {
            let fp = ja4.as_str().to_string();
            stats.count(&fp);
            Ok((Prefixed::new(buf, sock), fp))
        }
        Ok(Err(None)) => Err(HandshakeFailure::Eof),
        Ok(Err(Some(description))) => {
            // A fatal alert in a TLS 1.2-versioned plaintext record, as rustls sends before
            // a version is agreed; then close.
            let alert = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, description];
            let _ = tokio::time::timeout(timeout, async {
                let _ = sock.write_all(&alert).await;
                let _ = sock.shutdown().await;
            })
            .await;
            Err(HandshakeFailure::Alert(description.into()))
        }
        // Timed out: close, as the handshake timeout does without --ja4.
        Err(_) => Err(HandshakeFailure::Timeout),
    }
}

/// Per endpoint: the reassembly state and the fingerprints waiting for their connection.
#[derive(Debug)]
pub(crate) struct QuicFingerprints {
    inner: Mutex<QuicState>,
    stats: Arc<FingerprintCounts>,
}

struct QuicState {
    reassembler: Reassembler,
    found: HashMap<(SocketAddr, Vec<u8>), String>,
    order: VecDeque<(SocketAddr, Vec<u8>)>,
}

impl Debug for QuicState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuicState")
            .field("pending", &self.reassembler.pending())
            .field("found", &self.found.len())
            .finish()
    }
}

impl QuicFingerprints {
    pub(crate) fn new(stats: Arc<FingerprintCounts>) -> QuicFingerprints {
        QuicFingerprints {
            inner: Mutex::new(QuicState {
                reassembler: Reassembler::new(QUIC_PENDING),
                found: HashMap::new(),
                order: VecDeque::new(),
            }),
            stats,
        }
    }

    /// A datagram from `from`, before quinn-proto sees it (`h3::socket`).
    pub(crate) fn observe(&self, from: SocketAddr, datagram: &[u8]) {
        if !loadterm_ja4::quic::starts_with_initial(datagram) {
            return;
        }
        let mut st = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        // Errors (a later Initial under another DCID, damage) are quinn's business: it drops
        // what it cannot open too. The connection then simply has no fingerprint.
        let Ok(Some(hello)) = st.reassembler.push(datagram) else {
            return;
        };
        let Ok(ja4) = loadterm_ja4::fingerprint(&hello.message, HelloTransport::Quic) else {
            return;
        };
        let fp = ja4.as_str().to_string();
        self.stats.count(&fp);
        let key = (from, hello.dcid);
        while st.found.len() >= QUIC_PENDING {
            let Some(old) = st.order.pop_front() else {
                break;
            };
            st.found.remove(&old);
        }
        if st.found.insert(key.clone(), fp).is_none() {
            st.order.push_back(key);
        }
    }

    /// The fingerprint of a connection whose handshake is done (taken: asked once).
    pub(crate) fn take(&self, from: SocketAddr, original_dcid: &[u8]) -> Option<String> {
        let mut st = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let key = (from, original_dcid.to_vec());
        let fp = st.found.remove(&key)?;
        st.order.retain(|k| k != &key);
        Some(fp)
    }
}

/// The per-connection extra headers plus `x-ja4`.
pub(crate) fn with_header(
    mut extra: Vec<(http::HeaderName, http::HeaderValue)>,
    fingerprint: Option<&str>,
) -> Vec<(http::HeaderName, http::HeaderValue)> {
    if let Some(h) = fingerprint.and_then(header) {
        extra.push(h);
    }
    extra
}

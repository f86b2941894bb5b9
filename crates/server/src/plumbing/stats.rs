//! Server statistics, decided here: what is counted, under which label, and how the counts are
//! kept. Each thread that counts owns a block of counters (registered once in a global list);
//! only the owner writes it, with a plain load and store (no atomic read-modify-write, no lock),
//! and a scrape or a summary sums every block. Counting is always on.

use crate::stream::layer::{Layer, Layered};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use tokio::io::ReadBuf;

/// How a connection reached us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    Tcp,
    Tls,
    Quic,
}

impl Transport {
    pub(crate) const ALL: [Transport; 3] = [Transport::Tcp, Transport::Tls, Transport::Quic];

    pub(crate) fn label(self) -> &'static str {
        ["tcp", "tls", "quic"][self as usize]
    }
}

/// The protocol a request was served over: the `proto` label of the request counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Proto {
    H1,
    H2,
    H3,
}

impl Proto {
    pub(crate) const ALL: [Proto; 3] = [Proto::H1, Proto::H2, Proto::H3];

    pub(crate) fn label(self) -> &'static str {
        ["h1", "h2", "h3"][self as usize]
    }
}

/// The status classes of final responses, `1xx` (never final here, but exposed) to `5xx`.
pub(crate) const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

fn class(status: u16) -> usize {
    (usize::from(status / 100).clamp(1, 5)) - 1
}

/// An error the server counts, by its `kind` label in `loadterm_errors_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CountedError {
    Timeout,
    Reset,
    Protocol,
    Limit,
}

impl CountedError {
    pub(crate) const ALL: [CountedError; 4] = [
        CountedError::Timeout,
        CountedError::Reset,
        CountedError::Protocol,
        CountedError::Limit,
    ];

    pub(crate) fn label(self) -> &'static str {
        ["timeout", "reset", "protocol", "limit"][self as usize]
    }
}

/// A protection that triggered; each is also counted as an error of its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protection {
    /// HTTP/2: the h2 crate ended a connection with GOAWAY ENHANCE_YOUR_CALM: a rapid reset
    /// (CVE-2023-44487), CONTINUATION or small-DATA flood, too many streams reset for the
    /// client's errors, or a header list far over the limit. The h2 crate (0.4) drops the
    /// GOAWAY's debug data, which names the cause, from the error it returns, so they are one.
    EnhanceYourCalm,
    /// HTTP/2: a client sent more WINDOW_UPDATE, SETTINGS, PING, PRIORITY (or extension) frames
    /// than the server's output allows (`h2_engine::guard`); the connection ended with GOAWAY
    /// ENHANCE_YOUR_CALM.
    H2ControlFlood,
    /// A request head over the size limits (431, or the connection ended).
    HeaderListTooLarge,
    /// A request head not complete within the client timeout (408).
    SlowHead,
    /// A client that stopped reading: a write made no progress within the client timeout.
    WriteTimeout,
    /// A connection closed on accept: `maxconn` were open.
    MaxConn,
    /// A QUIC client sent a stateless Retry: too many handshakes were in progress.
    QuicRetry,
    /// A datagram to a QUIC client whose address is not validated held back: it would have
    /// taken what the server sent it over three times what it received (RFC 9000 §8.1).
    QuicAmplification,
}

impl Protection {
    pub(crate) const ALL: [Protection; 8] = [
        Protection::EnhanceYourCalm,
        Protection::H2ControlFlood,
        Protection::HeaderListTooLarge,
        Protection::SlowHead,
        Protection::WriteTimeout,
        Protection::MaxConn,
        Protection::QuicRetry,
        Protection::QuicAmplification,
    ];

    pub(crate) fn label(self) -> &'static str {
        [
            "enhance_your_calm",
            "h2_control_flood",
            "header_list_too_large",
            "slow_head",
            "write_timeout",
            "maxconn",
            "quic_retry",
            "quic_amplification",
        ][self as usize]
    }

    fn kind(self) -> CountedError {
        match self {
            Protection::SlowHead | Protection::WriteTimeout => CountedError::Timeout,
            _ => CountedError::Limit,
        }
    }
}

/// Why a TLS (or QUIC) handshake failed: the TLS alert sent or received, or how the
/// connection ended before the handshake did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandshakeFailure {
    Alert(rustls::AlertDescription),
    Timeout,
    Eof,
    Io,
}

const FAILURES: usize = 256 + 3;

impl HandshakeFailure {
    fn index(self) -> usize {
        match self {
            HandshakeFailure::Alert(a) => usize::from(u8::from(a)),
            HandshakeFailure::Timeout => 256,
            HandshakeFailure::Eof => 257,
            HandshakeFailure::Io => 258,
        }
    }

    fn from_index(i: usize) -> HandshakeFailure {
        match i {
            0..=255 => HandshakeFailure::Alert(rustls::AlertDescription::from(i as u8)),
            256 => HandshakeFailure::Timeout,
            257 => HandshakeFailure::Eof,
            _ => HandshakeFailure::Io,
        }
    }

    /// The `reason` label: the alert's name in snake case (`no_application_protocol`), or
    /// `timeout`, `eof`, `io`.
    pub(crate) fn label(self) -> String {
        match self {
            HandshakeFailure::Alert(rustls::AlertDescription::Unknown(n)) => format!("alert_{n}"),
            HandshakeFailure::Alert(a) => {
                // A word starts at a capital after a small letter, or at the last capital of
                // an acronym (`UnknownCA` is `unknown_ca`, `UnknownPSKIdentity`
                // `unknown_psk_identity`), as the RFC 8446 names have them.
                let name: Vec<char> = format!("{a:?}").chars().collect();
                let mut out = String::new();
                for (i, &c) in name.iter().enumerate() {
                    let starts = c.is_ascii_uppercase()
                        && i > 0
                        && (name[i - 1].is_ascii_lowercase()
                            || name.get(i + 1).is_some_and(char::is_ascii_lowercase));
                    if starts {
                        out.push('_');
                    }
                    out.push(c.to_ascii_lowercase());
                }
                out
            }
            HandshakeFailure::Timeout => "timeout".into(),
            HandshakeFailure::Eof => "eof".into(),
            HandshakeFailure::Io => "io".into(),
        }
    }
}

/// A counter written by one thread only.
#[derive(Default)]
struct C(AtomicU64);

impl C {
    #[inline]
    fn add(&self, n: u64) {
        // Only the owning thread writes: a load and a store, no read-modify-write.
        self.0.store(self.0.load(Relaxed).wrapping_add(n), Relaxed);
    }

    fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

fn zeros<const N: usize>() -> [C; N] {
    std::array::from_fn(|_| C::default())
}

/// One thread's counters.
struct Block {
    accepted: [C; 3],
    closed: [C; 3],
    handshakes_ok: [C; 3],
    handshakes_failed: [C; 3],
    /// Handshakes that resumed a session, and those whose 0-RTT data was accepted.
    resumed: [C; 3],
    early_data: [C; 3],
    failures: [C; FAILURES],
    requests: [[C; 5]; 3],
    interim: [C; 3],
    aborted: [C; 3],
    bytes_in: [C; 3],
    bytes_out: [C; 3],
    errors: [C; 4],
    protections: [C; Protection::ALL.len()],
    /// Idle connections parked, and taken out again (resumed or closed).
    parked: C,
    unparked: C,
}

impl Block {
    fn new() -> Block {
        Block {
            accepted: zeros(),
            closed: zeros(),
            handshakes_ok: zeros(),
            handshakes_failed: zeros(),
            resumed: zeros(),
            early_data: zeros(),
            failures: zeros(),
            requests: std::array::from_fn(|_| zeros()),
            interim: zeros(),
            aborted: zeros(),
            bytes_in: zeros(),
            bytes_out: zeros(),
            errors: zeros(),
            protections: zeros(),
            parked: C::default(),
            unparked: C::default(),
        }
    }
}

/// Every thread's block; blocks live as long as the process (threads that end keep their counts).
static BLOCKS: Mutex<Vec<&'static Block>> = Mutex::new(Vec::new());

thread_local! {
    static MINE: &'static Block = {
        let block: &'static Block = Box::leak(Box::new(Block::new()));
        BLOCKS.lock().unwrap_or_else(|e| e.into_inner()).push(block);
        block
    };
}

#[inline]
fn mine(f: impl FnOnce(&Block)) {
    MINE.with(|b| f(b));
}

pub(crate) fn accepted(t: Transport) {
    mine(|b| b.accepted[t as usize].add(1));
}

pub(crate) fn closed(t: Transport) {
    mine(|b| b.closed[t as usize].add(1));
}

pub(crate) fn handshake_ok(t: Transport) {
    mine(|b| b.handshakes_ok[t as usize].add(1));
}

/// A handshake resumed a session: its ticket or session ID was found in the session store.
pub(crate) fn handshake_resumed(t: Transport) {
    mine(|b| b.resumed[t as usize].add(1));
}

/// A handshake's 0-RTT data was accepted (QUIC, `--0rtt`).
pub(crate) fn early_data_accepted(t: Transport) {
    mine(|b| b.early_data[t as usize].add(1));
}

pub(crate) fn handshake_failed(t: Transport, why: HandshakeFailure) {
    mine(|b| {
        b.handshakes_failed[t as usize].add(1);
        b.failures[why.index()].add(1);
    });
}

/// A final response served: its last byte handed to the transport (HTTP/2: to the h2 crate).
#[inline]
pub(crate) fn served(p: Proto, status: u16) {
    mine(|b| b.requests[p as usize][class(status)].add(1));
}

/// Final responses served, counted by class (`counts[i]`: class `CLASSES[i]`).
pub(crate) fn served_by_class(p: Proto, counts: &[u32; 5]) {
    mine(|b| {
        for (c, &n) in b.requests[p as usize].iter().zip(counts) {
            if n > 0 {
                c.add(u64::from(n));
            }
        }
    });
}

/// `counts[class(status)] += 1`: a response waiting to be counted by [`served_by_class`].
#[inline]
pub(crate) fn tally(counts: &mut [u32; 5], status: u16) {
    counts[class(status)] += 1;
}

/// An interim (1xx) response: not a served request.
pub(crate) fn interim(p: Proto) {
    mine(|b| b.interim[p as usize].add(1));
}

/// Requests planned whose final response was not completed (the peer went away, a write timed
/// out, an abort, the shutdown's grace ran out): with `served`, every request the server took.
pub(crate) fn aborted(p: Proto, n: u64) {
    if n > 0 {
        mine(|b| b.aborted[p as usize].add(n));
    }
}

#[inline]
pub(crate) fn bytes_in(t: Transport, n: usize) {
    mine(|b| b.bytes_in[t as usize].add(n as u64));
}

#[inline]
pub(crate) fn bytes_out(t: Transport, n: usize) {
    mine(|b| b.bytes_out[t as usize].add(n as u64));
}

/// An idle connection was parked (`true`), or left the parking lot (`false`).
pub(crate) fn parked(into: bool) {
    mine(|b| if into { &b.parked } else { &b.unparked }.add(1));
}

pub(crate) fn error(kind: CountedError) {
    mine(|b| b.errors[kind as usize].add(1));
}

pub(crate) fn protection(p: Protection) {
    mine(|b| {
        b.protections[p as usize].add(1);
        b.errors[p.kind() as usize].add(1);
    });
}

/// An I/O error that ended a connection or a response: the peer reset or went away, or our
/// write timeout (the engines' only source of `TimedOut`). Others are not counted.
pub(crate) fn io_error(e: &io::Error) {
    match e.kind() {
        io::ErrorKind::TimedOut => protection(Protection::WriteTimeout),
        io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::BrokenPipe
        | io::ErrorKind::UnexpectedEof => error(CountedError::Reset),
        _ => {}
    }
}

/// What an error page (an answer without a plan) says about the request.
pub(crate) fn error_page(page: loadterm_plan::pages::ErrorPage) {
    use loadterm_plan::pages::ErrorPage;
    match page {
        ErrorPage::Timeout => protection(Protection::SlowHead),
        ErrorPage::HeadersTooLarge | ErrorPage::FieldTooLarge => {
            protection(Protection::HeaderListTooLarge)
        }
        ErrorPage::UriTooLong | ErrorPage::MethodTooLong => error(CountedError::Limit),
        _ => error(CountedError::Protocol),
    }
}

/// The counters of every thread, summed.
#[derive(Debug, Clone, Default)]
pub(crate) struct Totals {
    pub accepted: [u64; 3],
    pub closed: [u64; 3],
    pub handshakes_ok: [u64; 3],
    pub handshakes_failed: [u64; 3],
    pub resumed: [u64; 3],
    pub early_data: [u64; 3],
    /// Handshake failures by reason, those that occurred.
    pub failures: Vec<(HandshakeFailure, u64)>,
    pub requests: [[u64; 5]; 3],
    pub interim: [u64; 3],
    pub aborted: [u64; 3],
    pub bytes_in: [u64; 3],
    pub bytes_out: [u64; 3],
    pub errors: [u64; 4],
    pub protections: [u64; Protection::ALL.len()],
    pub parked: u64,
    pub unparked: u64,
}

fn sum<const N: usize>(into: &mut [u64; N], from: &[C; N]) {
    for (t, c) in into.iter_mut().zip(from) {
        *t += c.get();
    }
}

impl Totals {
    pub(crate) fn now() -> Totals {
        let blocks = BLOCKS.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut t = Totals::default();
        let mut failures = [0u64; FAILURES];
        for b in blocks {
            sum(&mut t.accepted, &b.accepted);
            sum(&mut t.closed, &b.closed);
            sum(&mut t.handshakes_ok, &b.handshakes_ok);
            sum(&mut t.handshakes_failed, &b.handshakes_failed);
            sum(&mut t.resumed, &b.resumed);
            sum(&mut t.early_data, &b.early_data);
            sum(&mut failures, &b.failures);
            for (into, from) in t.requests.iter_mut().zip(&b.requests) {
                sum(into, from);
            }
            sum(&mut t.interim, &b.interim);
            sum(&mut t.aborted, &b.aborted);
            sum(&mut t.bytes_in, &b.bytes_in);
            sum(&mut t.bytes_out, &b.bytes_out);
            sum(&mut t.errors, &b.errors);
            sum(&mut t.protections, &b.protections);
            t.parked += b.parked.get();
            t.unparked += b.unparked.get();
        }
        t.failures = (0..FAILURES)
            .filter(|&i| failures[i] > 0)
            .map(|i| (HandshakeFailure::from_index(i), failures[i]))
            .collect();
        t
    }

    /// Connections open: accepted and not yet closed.
    pub(crate) fn open(&self, t: Transport) -> u64 {
        let i = t as usize;
        self.accepted[i].saturating_sub(self.closed[i])
    }

    /// Idle connections parked out of their tasks now (`park.rs`).
    pub(crate) fn parked_now(&self) -> u64 {
        self.parked.saturating_sub(self.unparked)
    }

    /// The summary printed on SIGUSR1 and at shutdown (non-zero counts only).
    pub(crate) fn summary(&self) -> String {
        let mut s = String::from("loadterm statistics:\n");
        let line = |s: &mut String, what: &str, items: Vec<(String, u64)>| {
            let items: Vec<String> = items
                .into_iter()
                .filter(|(_, n)| *n > 0)
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            if !items.is_empty() {
                s.push_str(&format!("  {what:<12} {}\n", items.join(", ")));
            }
        };
        let per_transport = |v: &[u64; 3]| -> Vec<(String, u64)> {
            Transport::ALL
                .iter()
                .map(|t| (t.label().to_string(), v[*t as usize]))
                .collect()
        };
        line(&mut s, "accepted", per_transport(&self.accepted));
        let open = Transport::ALL
            .iter()
            .map(|&t| (t.label().to_string(), self.open(t)))
            .collect();
        line(&mut s, "open", open);
        line(
            &mut s,
            "parked",
            vec![("tcp idle".into(), self.parked_now())],
        );
        let hs = [Transport::Tls, Transport::Quic]
            .iter()
            .flat_map(|&t| {
                let i = t as usize;
                [
                    (format!("{} ok", t.label()), self.handshakes_ok[i]),
                    (format!("{} resumed", t.label()), self.resumed[i]),
                    (format!("{} 0-rtt", t.label()), self.early_data[i]),
                    (format!("{} failed", t.label()), self.handshakes_failed[i]),
                ]
            })
            .collect();
        line(&mut s, "handshakes", hs);
        let fails = self.failures.iter().map(|(f, n)| (f.label(), *n)).collect();
        line(&mut s, "tls failures", fails);
        for p in Proto::ALL {
            let v = &self.requests[p as usize];
            let classes = CLASSES
                .iter()
                .zip(v)
                .map(|(c, n)| (c.to_string(), *n))
                .collect();
            line(&mut s, &format!("{} requests", p.label()), classes);
        }
        let per_proto = |v: &[u64; 3]| -> Vec<(String, u64)> {
            Proto::ALL
                .iter()
                .map(|p| (p.label().to_string(), v[*p as usize]))
                .collect()
        };
        line(&mut s, "interim", per_proto(&self.interim));
        line(&mut s, "aborted", per_proto(&self.aborted));
        line(&mut s, "bytes in", per_transport(&self.bytes_in));
        line(&mut s, "bytes out", per_transport(&self.bytes_out));
        let errors = CountedError::ALL
            .iter()
            .map(|k| (k.label().to_string(), self.errors[*k as usize]))
            .collect();
        line(&mut s, "errors", errors);
        let prot = Protection::ALL
            .iter()
            .map(|p| (p.label().to_string(), self.protections[*p as usize]))
            .collect();
        line(&mut s, "protections", prot);
        if s.lines().count() == 1 {
            s.push_str("  nothing yet\n");
        }
        s
    }
}

/// Counts a stream's bytes as `transport`'s (on the wire: under TLS, the ciphertext).
pub(crate) struct Meter(Transport);

/// A byte stream whose bytes are counted (`Meter`).
pub(crate) type Metered<IO> = Layered<IO, Meter>;

impl<IO> Metered<IO> {
    pub(crate) fn new(io: IO, transport: Transport) -> Metered<IO> {
        Layered {
            io,
            layer: Meter(transport),
        }
    }
}

impl Meter {
    /// `n` bytes read past the layer (`arrival::read`).
    pub(crate) fn count_in(&self, n: usize) {
        bytes_in(self.0, n);
    }
}

impl Layer for Meter {
    fn have_read(&mut self, buf: &mut ReadBuf<'_>, start: usize) -> bool {
        self.count_in(buf.filled().len() - start);
        true
    }

    fn wrote(&mut self, n: usize) {
        bytes_out(self.0, n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        assert_eq!(
            HandshakeFailure::Alert(rustls::AlertDescription::NoApplicationProtocol).label(),
            "no_application_protocol"
        );
        for (alert, label) in [
            (rustls::AlertDescription::UnknownCA, "unknown_ca"),
            (
                rustls::AlertDescription::UnknownPSKIdentity,
                "unknown_psk_identity",
            ),
            (rustls::AlertDescription::BadCertificate, "bad_certificate"),
        ] {
            assert_eq!(HandshakeFailure::Alert(alert).label(), label);
        }
        assert_eq!(
            HandshakeFailure::from_index(HandshakeFailure::Eof.index()),
            HandshakeFailure::Eof
        );
        assert_eq!(
            (class(100), class(204), class(599), class(999)),
            (0, 1, 4, 4)
        );
    }
}

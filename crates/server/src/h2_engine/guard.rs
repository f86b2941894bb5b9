//! Control-frame flood guard: the `h2` crate bounds rapid resets, CONTINUATION, empty DATA and
//! header lists, but answers every WINDOW_UPDATE, SETTINGS, PING and PRIORITY however many come
//! (measured: one connection's WINDOW_UPDATE loop kept a core 70% busy, never cut off). Between
//! the transport and `h2`, [`FloodGuard`] reads the frame headers of what the client sends and lets
//! [`Ledger`] (sans-I/O) weigh the frames that make the server work without asking for anything
//! against what the server has written. Past the budget it stops feeding `h2` and notifies the
//! connection's driver, which ends the connection with GOAWAY ENHANCE_YOUR_CALM.
//!
//! The guard is also where every HTTP/2 connection's close is decided: whoever ends it (the `h2`
//! crate after its own GOAWAY, the driver after a flood, an idle timeout or shutdown), the
//! transport's shutdown lingers (`crate::stream::linger`) so that the client gets to read the last
//! frames.

use crate::stream::layer::{Layer, Layered};
use crate::stream::linger::Linger;
use loadterm_codec::h2::{flag, CONTINUATION, PING, PREFACE, PRIORITY, SETTINGS, WINDOW_UPDATE};
use std::io;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

/// Unsolicited frames allowed whatever the server wrote: far more than any client's setup
/// (SETTINGS, a few PRIORITY, a connection WINDOW_UPDATE) and keep-alive PINGs need.
const FREE: u64 = 1024;
/// Bytes the server must have written for each unsolicited frame past `FREE`. Time-free, so
/// the verdict does not depend on machine speed: a client downloading sends one WINDOW_UPDATE
/// per half window (KiB) received, while a flood gets nothing (WINDOW_UPDATE) or a 9-17 byte
/// ACK (SETTINGS, PING) per frame and crosses the budget after ~1 000-1 200 frames.
const BYTES_PER_FRAME: u64 = 128;

/// Whether a frame makes the server work without asking for anything: the rule, in one place.
/// ACKs answer the server's own SETTINGS and PINGs; extension frame types (above CONTINUATION)
/// are read and ignored by `h2` (RFC 9113 §5.5), the same free work as a WINDOW_UPDATE, so a
/// flood of them is counted too rather than left as the way around the guard.
fn unsolicited(ty: u8, flags: u8) -> bool {
    match ty {
        WINDOW_UPDATE | PRIORITY => true,
        SETTINGS | PING => flags & flag::ACK == 0,
        _ => ty > CONTINUATION,
    }
}

/// Frame accounting of one connection, fed the client's bytes as they arrive (split anywhere)
/// and the count of the server's bytes written. Only frame headers are looked at: payloads are
/// skipped by length.
#[derive(Debug, Clone)]
pub(super) struct Ledger {
    /// Connection preface bytes still to skip.
    preface: usize,
    /// A frame header straddling reads: its first `have` bytes.
    head: [u8; 9],
    have: usize,
    /// Payload bytes of the current frame still to skip.
    skip: usize,
    unsolicited: u64,
    written: u64,
}

impl Default for Ledger {
    fn default() -> Self {
        Ledger {
            preface: PREFACE.len(),
            head: [0; 9],
            have: 0,
            skip: 0,
            unsolicited: 0,
            written: 0,
        }
    }
}

impl Ledger {
    /// The client sent `bytes` (next in order).
    pub(super) fn read(&mut self, mut bytes: &[u8]) {
        let n = self.preface.min(bytes.len());
        self.preface -= n;
        bytes = &bytes[n..];
        loop {
            let n = self.skip.min(bytes.len());
            self.skip -= n;
            bytes = &bytes[n..];
            if bytes.is_empty() {
                return;
            }
            if self.have == 0 && bytes.len() >= 9 {
                // The usual case: the whole header is in this read.
                self.frame(bytes[..9].try_into().expect("9 bytes"));
                bytes = &bytes[9..];
            } else {
                let n = (9 - self.have).min(bytes.len());
                self.head[self.have..self.have + n].copy_from_slice(&bytes[..n]);
                self.have += n;
                bytes = &bytes[n..];
                if self.have == 9 {
                    self.have = 0;
                    self.frame(self.head);
                }
            }
        }
    }

    fn frame(&mut self, head: [u8; 9]) {
        self.skip = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        if unsolicited(head[3], head[4]) {
            self.unsolicited += 1;
        }
    }

    /// The server wrote `n` bytes on the connection.
    pub(super) fn wrote(&mut self, n: usize) {
        self.written += n as u64;
    }

    /// The client sent more unsolicited frames than the server's output allows.
    pub(super) fn flooded(&self) -> bool {
        self.unsolicited > FREE + self.written / BYTES_PER_FRAME
    }
}

/// Where a [`FloodGuard`]ed connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    /// Over the budget: `h2` reads nothing more.
    Flooded,
    /// Shutting down: the write side, then discarding what the client still sends until it
    /// closes or the deadline passes.
    Lingering,
}

/// The transport as `h2` sees it, with the [`Ledger`] kept up to date. Once flooded, reads stay
/// pending (the read that crossed the budget is withheld from `h2`) and `flood` is notified;
/// writes go on, so the driver can still send GOAWAY.
pub(super) type FloodGuard<IO> = Layered<IO, FloodBudget>;

/// What [`FloodGuard`] adds to the transport: the ledger, whom to tell, and where it is.
pub(super) struct FloodBudget {
    ledger: Ledger,
    flood: Arc<Notify>,
    state: State,
    /// The lingering close, once shutting down.
    linger: Option<Linger>,
}

impl<IO> FloodGuard<IO> {
    pub(super) fn new(io: IO, flood: Arc<Notify>) -> Self {
        Layered {
            io,
            layer: FloodBudget {
                ledger: Ledger::default(),
                flood,
                state: State::Open,
                linger: None,
            },
        }
    }
}

impl Layer for FloodBudget {
    fn before_read(&mut self, _: &mut ReadBuf<'_>) -> Option<Poll<io::Result<()>>> {
        // Not woken again: the driver ends the connection.
        (self.state != State::Open).then_some(Poll::Pending)
    }

    fn have_read(&mut self, buf: &mut ReadBuf<'_>, start: usize) -> bool {
        self.ledger.read(&buf.filled()[start..]);
        if !self.ledger.flooded() {
            return true;
        }
        buf.set_filled(start);
        self.state = State::Flooded;
        self.flood.notify_one();
        false
    }

    fn wrote(&mut self, n: usize) {
        self.ledger.wrote(n);
    }

    /// Every connection's close lingers (`crate::stream::linger`), whoever ends it; meanwhile `h2`
    /// reads nothing more.
    fn poll_shutdown<IO: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        io: &mut IO,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        self.state = State::Lingering;
        self.linger
            .get_or_insert_with(Linger::new)
            .poll(io, cx)
            .map(Ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadterm_codec::h2::{DATA, HEADERS, RST_STREAM};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn frame(ty: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        f.extend_from_slice(&[ty, flags]);
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    fn window_update() -> Vec<u8> {
        frame(WINDOW_UPDATE, 0, 0, &1u32.to_be_bytes())
    }

    /// A client's bytes holding 6 unsolicited frames among others whose payloads look like
    /// frame headers (they must be skipped, not parsed).
    fn mixed() -> Vec<u8> {
        let fake = [window_update(), window_update()].concat();
        [
            PREFACE.to_vec(),
            frame(SETTINGS, 0, 0, &[0, 3, 0, 0, 0, 100]), // 1
            frame(SETTINGS, flag::ACK, 0, &[]),
            frame(HEADERS, flag::END_HEADERS, 1, &fake),
            window_update(),            // 2
            frame(PING, 0, 0, &[7; 8]), // 3
            frame(PING, flag::ACK, 0, &[7; 8]),
            frame(PRIORITY, 0, 3, &[0, 0, 0, 1, 16]), // 4
            frame(DATA, 0, 1, &[fake.clone(), vec![0; 70_000]].concat()),
            frame(RST_STREAM, 0, 1, &[0, 0, 0, 8]),
            frame(0x10, 0, 0, &fake), // 5: an extension frame (PRIORITY_UPDATE)
            frame(WINDOW_UPDATE, 0, 1, &1u32.to_be_bytes()), // 6
        ]
        .concat()
    }

    fn count(chunks: &[&[u8]]) -> u64 {
        let mut l = Ledger::default();
        for c in chunks {
            l.read(c);
        }
        l.unsolicited
    }

    #[test]
    fn counts_unsolicited_frames_wherever_the_reads_split() {
        let all = mixed();
        assert_eq!(count(&[&all]), 6);
        // Every cut in two, around the headers (every cut in a 70 kB payload adds nothing).
        for cut in (0..=all.len()).filter(|&c| c < 400 || c > all.len() - 200) {
            assert_eq!(count(&[&all[..cut], &all[cut..]]), 6, "cut at {cut}");
        }
        let bytes: Vec<&[u8]> = all.chunks(1).collect();
        assert_eq!(count(&bytes), 6, "a byte at a time");
        for size in [2, 7, 9, 10, 17, 4096] {
            let chunks: Vec<&[u8]> = all.chunks(size).collect();
            assert_eq!(count(&chunks), 6, "chunks of {size}");
        }
    }

    #[test]
    fn budget_is_1024_frames_plus_one_per_128_bytes_written() {
        let mut l = Ledger::default();
        l.read(PREFACE);
        let wu = window_update();
        for _ in 0..1024 {
            l.read(&wu);
        }
        assert!(!l.flooded());
        l.read(&wu);
        assert!(l.flooded(), "the 1025th with nothing written");
        l.wrote(127);
        assert!(l.flooded());
        l.wrote(1);
        assert!(!l.flooded(), "128 bytes written pay for one frame");
    }

    /// Small windows: one WINDOW_UPDATE per 8 KiB received on the stream, one per 32 KiB on the
    /// connection, for 100 MB, never crosses the budget.
    #[test]
    fn a_download_with_small_windows_stays_within_budget() {
        let mut l = Ledger::default();
        l.read(PREFACE);
        let stream_wu = frame(WINDOW_UPDATE, 0, 1, &8192u32.to_be_bytes());
        let conn_wu = frame(WINDOW_UPDATE, 0, 0, &32768u32.to_be_bytes());
        for i in 1..=100_000_000 / 8192 {
            l.wrote(8192 + 9);
            l.read(&stream_wu);
            if i % 4 == 0 {
                l.read(&conn_wu);
            }
            assert!(!l.flooded(), "cut off after {i} windows");
        }
    }

    #[tokio::test]
    async fn a_flood_is_withheld_from_h2_and_notified() {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let flood = Arc::new(Notify::new());
        let mut g = FloodGuard::new(server, flood.clone());
        let setup = [PREFACE, &frame(SETTINGS, 0, 0, &[])].concat();
        client.write_all(&setup).await.unwrap();
        let mut buf = vec![0u8; 1 << 20];
        let n = g.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], &setup[..]);
        // Well over the budget, in one write: the read that crosses it returns nothing.
        client
            .write_all(&window_update().repeat(2000))
            .await
            .unwrap();
        let read = tokio::time::timeout(std::time::Duration::from_millis(50), g.read(&mut buf));
        assert!(read.await.is_err(), "the flood reached h2");
        flood.notified().await;
        // Writes still go through (the GOAWAY).
        g.write_all(b"goaway").await.unwrap();
        let mut out = [0u8; 6];
        client.read_exact(&mut out).await.unwrap();
        assert_eq!(&out, b"goaway");
        // Shutting down lingers: the client reads the end, and what it still sends is dropped
        // until it closes.
        let mut shut = tokio::spawn(async move { g.shutdown().await });
        assert_eq!(client.read(&mut out).await.unwrap(), 0, "no FIN");
        client
            .write_all(&window_update().repeat(100))
            .await
            .unwrap();
        let early = tokio::time::timeout(std::time::Duration::from_millis(50), &mut shut);
        assert!(early.await.is_err(), "closed before the client did");
        drop(client);
        shut.await.unwrap().unwrap();
    }

    /// A connection ended by `h2` itself (no flood) lingers too: what the client still sends
    /// after the FIN is dropped until it closes.
    #[tokio::test]
    async fn every_shutdown_lingers_until_the_client_closes() {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let mut g = FloodGuard::new(server, Arc::new(Notify::new()));
        g.write_all(b"goaway").await.unwrap();
        let mut shut = tokio::spawn(async move { g.shutdown().await });
        let mut out = Vec::new();
        client.read_to_end(&mut out).await.unwrap();
        assert_eq!(out, b"goaway", "the last frame, then FIN");
        client.write_all(&[0; 9000]).await.unwrap();
        let early = tokio::time::timeout(std::time::Duration::from_millis(50), &mut shut);
        assert!(early.await.is_err(), "closed before the client did");
        drop(client);
        shut.await.unwrap().unwrap();
    }
}

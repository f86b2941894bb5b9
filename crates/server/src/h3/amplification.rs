//! RFC 9000 §8.1 on the socket: until a client's address is validated, the server sends it at
//! most three times the bytes it received from it.
//!
//! quinn-proto 0.11 keeps its own count but starts a datagram while any budget is left and then
//! pads it to 1 200 bytes, so an Initial that is never answered gets up to one datagram more than
//! the limit (docs/RELIABILITY.md, defect 5). Here every datagram is checked against the same
//! limit before it leaves ([`AmplificationGuard`]): one that does not fit whole is held back, which
//! quinn takes for a loss and sends again once the client has sent more.
//!
//! A connection is known by the client's connection ID (the Source Connection ID of its long
//! headers, the Destination Connection ID of what the server sends it), so that a new
//! connection from an address does not hold back the established ones sharing its socket. Its
//! address counts as validated when a Handshake packet comes from it, as quinn has it. A client
//! could send a forged Handshake header, which this check cannot open; that only gives it
//! quinn's own, looser limit back.

use crate::plumbing::stats::{self, Protection};
use loadterm_ja4::quic::{self, PacketKind};
use quinn::udp::Transmit;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// RFC 9000 §8.1.
const FACTOR: u64 = 3;
/// Connections tracked at once; past it the oldest is forgotten (and falls back on quinn's
/// limit). An Initial flood fills it, one entry per Initial.
const MAX_TRACKED: usize = 4096;
/// A handshake not done in this time is forgotten.
const LIFETIME: Duration = Duration::from_secs(10);

/// Bytes exchanged with one connection whose address is not yet validated.
#[derive(Debug)]
struct Budget {
    /// The client's connection ID.
    cid: Vec<u8>,
    received: u64,
    sent: u64,
    /// Which entry of `Budgets::order` is this one's.
    serial: u64,
}

/// The budgets of the connections not yet validated, by client address. Sans-I/O: [`AmplificationGuard`]
/// shows it every datagram.
#[derive(Debug, Default)]
pub(super) struct Budgets {
    by_addr: HashMap<SocketAddr, Vec<Budget>>,
    /// In the order they were opened, for expiry; validated ones are dropped from the front.
    order: VecDeque<(SocketAddr, u64, Instant)>,
    tracked: usize,
    serial: u64,
}

impl Budgets {
    /// Connections tracked now: when 0, nothing sent needs a look.
    pub(super) fn tracked(&self) -> usize {
        self.tracked
    }

    /// A datagram came from `from`.
    pub(super) fn received(&mut self, from: SocketAddr, datagram: &[u8], now: Instant) {
        let mut rest = datagram;
        // Coalesced packets (RFC 9000 §12.2) all belong to one connection; a Handshake packet
        // may follow the Initial.
        let mut budget = None;
        while let Ok(Some(h)) = quic::long_header(rest) {
            match h.kind {
                PacketKind::Handshake => {
                    self.forget(from, |b| b.cid == h.scid);
                    return;
                }
                PacketKind::Initial if budget.is_none() => {
                    budget = Some(h.scid.to_vec());
                }
                _ => {}
            }
            rest = &rest[h.end..];
        }
        let Some(cid) = budget else { return };
        self.expire(now);
        let len = datagram.len() as u64;
        let list = self.by_addr.entry(from).or_default();
        match list.iter_mut().find(|b| b.cid == cid) {
            Some(b) => b.received += len,
            None => {
                self.serial += 1;
                list.push(Budget {
                    cid,
                    received: len,
                    sent: 0,
                    serial: self.serial,
                });
                self.order.push_back((from, self.serial, now));
                self.tracked += 1;
            }
        }
    }

    /// How many bytes of `len` (datagrams of `segment` bytes, the last one maybe shorter, all to
    /// one connection, the first one starting at `first`) may go to `to` now: a multiple of
    /// `segment`, or `len`. They are counted as sent.
    pub(super) fn admit(
        &mut self,
        to: SocketAddr,
        first: &[u8],
        len: usize,
        segment: usize,
    ) -> usize {
        let Some(b) = self.find(to, first) else {
            return len;
        };
        let limit = FACTOR * b.received;
        let mut admitted = 0;
        while admitted < len {
            let next = segment.min(len - admitted);
            if b.sent + (admitted + next) as u64 > limit {
                break;
            }
            admitted += next;
        }
        b.sent += admitted as u64;
        admitted
    }

    /// `bytes` admitted did not leave after all (the socket was full).
    pub(super) fn unsent(&mut self, to: SocketAddr, first: &[u8], bytes: usize) {
        if let Some(b) = self.find(to, first) {
            b.sent -= (bytes as u64).min(b.sent);
        }
    }

    /// The budget of the connection a datagram starting with `first` goes to.
    fn find(&mut self, to: SocketAddr, first: &[u8]) -> Option<&mut Budget> {
        let list = self.by_addr.get_mut(&to)?;
        // A long header names the client's ID; a short one starts with it, length unknown.
        match quic::long_header(first).ok().flatten() {
            Some(h) => list.iter_mut().find(|b| h.dcid == b.cid),
            None => list
                .iter_mut()
                .find(|b| first.get(1..1 + b.cid.len()) == Some(&b.cid[..])),
        }
    }

    fn forget(&mut self, addr: SocketAddr, which: impl Fn(&Budget) -> bool) {
        let Some(list) = self.by_addr.get_mut(&addr) else {
            return;
        };
        let before = list.len();
        list.retain(|b| !which(b));
        self.tracked -= before - list.len();
        if list.is_empty() {
            self.by_addr.remove(&addr);
        }
        if self.tracked == 0 {
            self.order.clear();
            // After a flood, give the tables' memory back.
            if self.by_addr.capacity() > 64 {
                self.by_addr.shrink_to_fit();
                self.order.shrink_to_fit();
            }
        }
    }

    /// Drop from the front what was validated, has lived too long, or is over the cap.
    fn expire(&mut self, now: Instant) {
        while let Some(&(addr, serial, born)) = self.order.front() {
            let open = self
                .by_addr
                .get(&addr)
                .is_some_and(|l| l.iter().any(|b| b.serial == serial));
            if open && self.tracked < MAX_TRACKED && now.duration_since(born) < LIFETIME {
                break;
            }
            self.order.pop_front();
            if open {
                self.forget(addr, |b| b.serial == serial);
            }
        }
    }
}

/// [`Budgets`] shared by the socket's receive and send paths (`h3::socket`).
#[derive(Debug, Default)]
pub(super) struct AmplificationGuard {
    budgets: Mutex<Budgets>,
    /// `Budgets::tracked`, read without the lock: when 0, sends go straight through.
    tracked: AtomicUsize,
}

impl AmplificationGuard {
    fn budgets(&self) -> MutexGuard<'_, Budgets> {
        self.budgets.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A datagram came from `from`. `now` is read once per batch, and only when needed.
    pub(super) fn received(&self, from: SocketAddr, datagram: &[u8], now: &mut Option<Instant>) {
        // Only long headers open or validate a budget; 1-RTT packets are most of them.
        if datagram.first().is_some_and(|b| b & 0x80 != 0) {
            let now = *now.get_or_insert_with(Instant::now);
            let mut b = self.budgets();
            b.received(from, datagram, now);
            self.tracked.store(b.tracked(), Ordering::Relaxed);
        }
    }

    /// Send what of `transmit` may go, through `send`.
    pub(super) fn send(
        &self,
        transmit: &Transmit,
        send: impl FnOnce(&Transmit) -> io::Result<()>,
    ) -> io::Result<()> {
        if self.tracked.load(Ordering::Relaxed) == 0 {
            return send(transmit);
        }
        let (to, len) = (transmit.destination, transmit.contents.len());
        let segment = transmit.segment_size.unwrap_or(len);
        let first = &transmit.contents[..segment.min(len)];
        let admitted = self.budgets().admit(to, first, len, segment);
        if admitted == len {
            return send(transmit);
        }
        stats::protection(Protection::QuicAmplification);
        if admitted == 0 {
            // Held back: quinn will find it lost, and send it again when the client has sent more.
            return Ok(());
        }
        let sent = send(&Transmit {
            contents: &transmit.contents[..admitted],
            segment_size: transmit.segment_size.filter(|&s| s < admitted),
            ..*transmit
        });
        if sent.is_err() {
            self.budgets().unsent(to, first, admitted);
        }
        sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    /// A v1 long-header packet of `kind` (0 Initial, 2 Handshake) with a body of `body` bytes,
    /// padded to `pad`.
    fn long(ty: u8, dcid: &[u8], scid: &[u8], body: usize, pad: usize) -> Vec<u8> {
        let mut p = vec![0xc0 | ty << 4, 0, 0, 0, 1, dcid.len() as u8];
        p.extend_from_slice(dcid);
        p.push(scid.len() as u8);
        p.extend_from_slice(scid);
        if ty == 0 {
            p.push(0); // no token
        }
        p.extend_from_slice(&[0x40 | (body >> 8) as u8, body as u8]);
        p.resize(p.len() + body, 0);
        p.resize(p.len().max(pad), 0);
        p
    }

    fn initial(scid: &[u8]) -> Vec<u8> {
        long(0, b"server-chosen", scid, 1100, 1200)
    }

    /// A short-header (1-RTT) packet to the client `cid`.
    fn short(cid: &[u8], len: usize) -> Vec<u8> {
        let mut p = vec![0x40];
        p.extend_from_slice(cid);
        p.resize(len, 0);
        p
    }

    #[test]
    fn an_unanswered_initial_gets_three_times_its_size_in_whole_datagrams() {
        let mut b = Budgets::default();
        let now = Instant::now();
        b.received(addr(1), &initial(b"client"), now);
        let to_client = long(0, b"client", b"srv", 1100, 1200);
        // The first flight and the seven NEW_CONNECTION_IDs quinn sends: 1 422 bytes.
        assert_eq!(b.admit(addr(1), &to_client, 1200, 1200), 1200);
        assert_eq!(b.admit(addr(1), &short(b"client", 222), 222, 222), 222);
        // Two probes of 1 200: only the first fits in 3 600.
        assert_eq!(b.admit(addr(1), &to_client, 1200, 1200), 1200);
        assert_eq!(b.admit(addr(1), &to_client, 1200, 1200), 0);
    }

    #[test]
    fn a_batch_is_cut_to_the_datagrams_that_fit() {
        let mut b = Budgets::default();
        b.received(addr(1), &initial(b"client"), Instant::now());
        let to_client = long(2, b"client", b"srv", 1100, 1200);
        assert_eq!(b.admit(addr(1), &to_client, 4 * 1200, 1200), 3 * 1200);
    }

    #[test]
    fn a_handshake_packet_validates_the_address() {
        let mut b = Budgets::default();
        b.received(addr(1), &initial(b"client"), Instant::now());
        let mut answer = long(0, b"srv", b"client", 30, 0);
        answer.extend(long(2, b"srv", b"client", 60, 0));
        b.received(addr(1), &answer, Instant::now());
        assert_eq!(b.tracked(), 0);
        assert_eq!(b.admit(addr(1), &short(b"client", 1200), 9000, 1200), 9000);
    }

    #[test]
    fn a_new_connection_does_not_hold_back_another_on_the_same_address() {
        let mut b = Budgets::default();
        b.received(addr(1), &initial(b"new"), Instant::now());
        assert_eq!(b.admit(addr(1), &short(b"old", 1200), 9000, 1200), 9000);
        assert_eq!(b.admit(addr(1), &short(b"new", 1200), 9000, 1200), 3600);
    }

    #[test]
    fn what_the_client_sends_again_adds_to_its_budget() {
        let mut b = Budgets::default();
        let now = Instant::now();
        b.received(addr(1), &initial(b"client"), now);
        let to_client = long(0, b"client", b"srv", 1100, 1200);
        assert_eq!(b.admit(addr(1), &to_client, 4800, 1200), 3600);
        b.received(addr(1), &initial(b"client"), now);
        assert_eq!(b.admit(addr(1), &to_client, 4800, 1200), 3600);
    }

    #[test]
    fn a_flood_is_bounded_and_forgotten() {
        let mut b = Budgets::default();
        let t0 = Instant::now();
        for i in 0..(2 * MAX_TRACKED) {
            let cid = (i as u32).to_be_bytes();
            b.received(addr(1000 + (i % 64) as u16), &initial(&cid), t0);
        }
        assert_eq!(b.tracked(), MAX_TRACKED);
        b.received(addr(9), &initial(b"late"), t0 + LIFETIME);
        assert_eq!(b.tracked(), 1);
    }

    #[test]
    fn short_packets_and_other_versions_open_nothing() {
        let mut b = Budgets::default();
        b.received(addr(1), &short(b"x", 1200), Instant::now());
        let mut other = initial(b"client");
        other[4] = 2;
        b.received(addr(1), &other, Instant::now());
        assert_eq!(b.tracked(), 0);
    }
}

//! The ClientHello of a QUIC connection, taken from the client's Initial packets.
//!
//! Initial packets are encrypted with keys derived from the client's Destination Connection ID
//! alone (RFC 9001 §5.2, RFC 9369 §3.3.1 for QUIC v2), so anyone on the path can open them:
//! remove the header protection, decrypt, and collect the CRYPTO frames. A ClientHello with
//! post-quantum key shares does not fit in one 1200-byte Initial, so the CRYPTO stream is
//! reassembled across packets and datagrams, per DCID, within fixed bounds.

use crate::{Error, MAX_CLIENT_HELLO};
use rustls::quic::{DirectionalKeys, Keys, Version};
use std::collections::{HashMap, VecDeque};

const V1: u32 = 0x0000_0001;
const V2: u32 = 0x6b33_43cf;
/// Connection IDs are at most 20 bytes in QUIC v1 and v2 (RFC 9000 §17.2).
const MAX_CID: usize = 20;
/// Disjoint CRYPTO ranges tracked per connection (clients that scatter their ClientHello in
/// many small frames, as Chrome does, stay far below it).
const MAX_RANGES: usize = 64;

/// The type of a long-header packet (RFC 9000 §17.2; RFC 9369 §3.2 numbers them differently).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PacketKind {
    Initial,
    ZeroRtt,
    Handshake,
    Retry,
}

/// A long-header packet's header, as sent in clear: what the JA4 reader needs to open a client's
/// Initial, and what the server's anti-amplification guard needs to tell connections apart.
#[derive(Debug)]
pub struct LongHeader<'a> {
    /// V1 or V2.
    pub version: u32,
    pub kind: PacketKind,
    pub dcid: &'a [u8],
    pub scid: &'a [u8],
    /// Offset of the (protected) packet number.
    pn_offset: usize,
    /// Offset just past the packet (where a coalesced packet may follow).
    pub end: usize,
}

/// Whether the datagram starts with a long-header Initial packet of QUIC v1 or v2: the cheap test
/// to run on every received datagram before anything else.
pub fn starts_with_initial(datagram: &[u8]) -> bool {
    matches!(kind(datagram), Some((_, PacketKind::Initial)))
}

/// The version and type of a long-header packet of QUIC v1 or v2; `None` for a short header
/// (1-RTT), another version, or too few bytes.
fn kind(packet: &[u8]) -> Option<(u32, PacketKind)> {
    let first = *packet.first()?;
    if first & 0x80 == 0 {
        return None;
    }
    let version = u32::from_be_bytes(packet.get(1..5)?.try_into().ok()?);
    let ty = (first >> 4) & 0x03;
    let kind = match (version, ty) {
        (V1, 0b00) | (V2, 0b01) => PacketKind::Initial,
        (V1, 0b01) | (V2, 0b10) => PacketKind::ZeroRtt,
        (V1, 0b10) | (V2, 0b11) => PacketKind::Handshake,
        (V1, 0b11) | (V2, 0b00) => PacketKind::Retry,
        _ => return None,
    };
    Some((version, kind))
}

fn varint(buf: &[u8], pos: &mut usize) -> Result<u64, Error> {
    let first = *buf.get(*pos).ok_or(Error::Quic("truncated varint"))?;
    let len = 1usize << (first >> 6);
    let bytes = buf
        .get(*pos..*pos + len)
        .ok_or(Error::Quic("truncated varint"))?;
    let mut v = u64::from(first & 0x3f);
    for b in &bytes[1..] {
        v = v << 8 | u64::from(*b);
    }
    *pos += len;
    Ok(v)
}

fn take<'a>(buf: &'a [u8], pos: &mut usize, len: u64) -> Result<&'a [u8], Error> {
    let len = usize::try_from(len).map_err(|_| Error::Quic("length out of range"))?;
    let end = pos
        .checked_add(len)
        .filter(|&e| e <= buf.len())
        .ok_or(Error::Quic("length beyond the packet"))?;
    let s = &buf[*pos..end];
    *pos = end;
    Ok(s)
}

fn cid<'a>(packet: &'a [u8], pos: &mut usize) -> Result<&'a [u8], Error> {
    let len = *packet.get(*pos).ok_or(Error::Quic("truncated header"))?;
    *pos += 1;
    if usize::from(len) > MAX_CID {
        return Err(Error::Quic("connection ID too long"));
    }
    take(packet, pos, len.into())
}

/// The long header at the start of `packet`: `Ok(None)` when it starts with a short header or
/// with a version other than 1 and 2.
pub fn long_header(packet: &[u8]) -> Result<Option<LongHeader<'_>>, Error> {
    let Some((version, kind)) = kind(packet) else {
        return Ok(None);
    };
    let mut pos = 5;
    let dcid = cid(packet, &mut pos)?;
    let scid = cid(packet, &mut pos)?;
    if kind == PacketKind::Retry {
        // A Retry has no length: it fills the rest of the datagram.
        return Ok(Some(LongHeader {
            version,
            kind,
            dcid,
            scid,
            pn_offset: pos,
            end: packet.len(),
        }));
    }
    if kind == PacketKind::Initial {
        let token_len = varint(packet, &mut pos)?;
        take(packet, &mut pos, token_len)?;
    }
    let length = varint(packet, &mut pos)?;
    let pn_offset = pos;
    take(packet, &mut pos, length)?;
    Ok(Some(LongHeader {
        version,
        kind,
        dcid,
        scid,
        pn_offset,
        end: pos,
    }))
}

/// The Initial packet at the start of `packet`, if that is what it holds.
fn initial_header(packet: &[u8]) -> Result<Option<LongHeader<'_>>, Error> {
    if !starts_with_initial(packet) {
        return Ok(None);
    }
    long_header(packet)
}

fn initial_keys(version: u32, dcid: &[u8]) -> DirectionalKeys {
    let version = if version == V2 {
        Version::V2
    } else {
        Version::V1
    };
    let suite = rustls::crypto::aws_lc_rs::cipher_suite::TLS13_AES_128_GCM_SHA256
        .tls13()
        .expect("TLS13_AES_128_GCM_SHA256 is a TLS 1.3 suite");
    let quic = suite
        .quic
        .expect("aws-lc-rs's TLS13_AES_128_GCM_SHA256 supports QUIC");
    // The server side's `remote` keys are the client's.
    Keys::initial(version, suite, quic, dcid, rustls::Side::Server).remote
}

/// Remove the header protection and decrypt one Initial packet (`packet` is exactly the
/// packet); return its plaintext payload (the frames).
fn open(keys: &DirectionalKeys, header: &LongHeader<'_>, packet: &[u8]) -> Result<Vec<u8>, Error> {
    let sample_len = keys.header.sample_len();
    let pn_offset = header.pn_offset;
    // The sample starts 4 bytes after the packet number's start, whatever its real length.
    let sample = packet
        .get(pn_offset + 4..pn_offset + 4 + sample_len)
        .ok_or(Error::Quic(
            "packet too short for its header protection sample",
        ))?;
    let mut buf = packet.to_vec();
    let mut first = buf[0];
    keys.header
        .decrypt_in_place(sample, &mut first, &mut buf[pn_offset..pn_offset + 4])
        .map_err(|_| Error::Quic("header protection"))?;
    buf[0] = first;
    let pn_len = usize::from(first & 0x03) + 1;
    // The first packets of a connection: the truncated packet number is the full one
    // (RFC 9000 §A.3 with no packet received yet).
    let pn = buf[pn_offset..pn_offset + pn_len]
        .iter()
        .fold(0u64, |n, b| n << 8 | u64::from(*b));
    let (aad, payload) = buf.split_at_mut(pn_offset + pn_len);
    let plain_len = keys
        .packet
        .decrypt_in_place(pn, aad, payload)
        .map_err(|_| Error::Quic("decryption failed (not a client's first Initial?)"))?
        .len();
    buf.drain(..pn_offset + pn_len);
    buf.truncate(plain_len);
    Ok(buf)
}

/// The CRYPTO frames of an Initial packet's plaintext, as (offset, data). The other frames an
/// Initial may carry (RFC 9000 §12.4) are skipped; any other frame makes the packet invalid.
fn crypto_frames(payload: &[u8]) -> Result<Vec<(u64, &[u8])>, Error> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < payload.len() {
        match varint(payload, &mut pos)? {
            0x00 | 0x01 => {} // PADDING, PING
            ty @ (0x02 | 0x03) => {
                // ACK: largest, delay, range count, first range, then (gap, length) pairs.
                varint(payload, &mut pos)?;
                varint(payload, &mut pos)?;
                let ranges = varint(payload, &mut pos)?;
                varint(payload, &mut pos)?;
                for _ in 0..ranges {
                    varint(payload, &mut pos)?;
                    varint(payload, &mut pos)?;
                }
                if ty == 0x03 {
                    for _ in 0..3 {
                        varint(payload, &mut pos)?;
                    }
                }
            }
            0x06 => {
                let offset = varint(payload, &mut pos)?;
                let len = varint(payload, &mut pos)?;
                out.push((offset, take(payload, &mut pos, len)?));
            }
            0x1c => {
                // CONNECTION_CLOSE: error code, frame type, reason phrase.
                varint(payload, &mut pos)?;
                varint(payload, &mut pos)?;
                let len = varint(payload, &mut pos)?;
                take(payload, &mut pos, len)?;
            }
            _ => return Err(Error::Quic("frame not allowed in an Initial packet")),
        }
    }
    Ok(out)
}

/// The CRYPTO stream of one connection so far.
struct Pending {
    keys: DirectionalKeys,
    version: u32,
    data: Vec<u8>,
    /// Received byte ranges, sorted and disjoint.
    ranges: Vec<(usize, usize)>,
}

impl Pending {
    fn add(&mut self, offset: u64, chunk: &[u8]) -> Result<(), Error> {
        let start = usize::try_from(offset).map_err(|_| Error::TooLarge)?;
        let end = start
            .checked_add(chunk.len())
            .filter(|&end| end <= MAX_CLIENT_HELLO)
            .ok_or(Error::TooLarge)?;
        if chunk.is_empty() {
            return Ok(());
        }
        if self.data.len() < end {
            self.data.resize(end, 0);
        }
        self.data[start..end].copy_from_slice(chunk);
        self.ranges.push((start, end));
        self.ranges.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::with_capacity(self.ranges.len());
        for &(s, e) in &self.ranges {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        if merged.len() > MAX_RANGES {
            return Err(Error::Quic("CRYPTO stream too fragmented"));
        }
        self.ranges = merged;
        Ok(())
    }

    /// The ClientHello, once its bytes from offset 0 are all here.
    fn complete(&self) -> Result<Option<usize>, Error> {
        let contiguous = match self.ranges.first() {
            Some(&(0, end)) => end,
            _ => return Ok(None),
        };
        if contiguous == 0 {
            return Ok(None);
        }
        if self.data[0] != 1 {
            return Err(Error::NotClientHello);
        }
        if contiguous < 4 {
            return Ok(None);
        }
        let d = &self.data;
        let total = 4 + (usize::from(d[1]) << 16 | usize::from(d[2]) << 8 | usize::from(d[3]));
        if total > MAX_CLIENT_HELLO {
            return Err(Error::TooLarge);
        }
        Ok((contiguous >= total).then_some(total))
    }
}

/// A complete ClientHello and the connection it opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientHello {
    /// The client's original Destination Connection ID (the key of its Initial keys).
    pub dcid: Vec<u8>,
    /// The ClientHello handshake message, for [`crate::fingerprint`].
    pub message: Vec<u8>,
}

/// Reassembles ClientHellos from client Initial datagrams, per DCID. Memory is bounded: at most
/// `max_pending` connections in progress (the oldest is dropped to make room), each at most
/// [`MAX_CLIENT_HELLO`] bytes.
pub struct Reassembler {
    pending: HashMap<Vec<u8>, Pending>,
    /// DCIDs in arrival order, for eviction (may name entries already completed).
    order: VecDeque<Vec<u8>>,
    max_pending: usize,
}

impl Reassembler {
    pub fn new(max_pending: usize) -> Reassembler {
        Reassembler {
            pending: HashMap::new(),
            order: VecDeque::new(),
            max_pending: max_pending.max(1),
        }
    }

    /// Connections whose ClientHello is still incomplete.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Take one datagram a client sent. `Ok(Some)` when it completes a ClientHello; `Ok(None)`
    /// when it holds no client Initial or the ClientHello still misses parts. An error leaves the
    /// other connections' state untouched (and drops this connection's, when it is the cause).
    pub fn push(&mut self, datagram: &[u8]) -> Result<Option<ClientHello>, Error> {
        let mut rest = datagram;
        let mut done = None;
        // Coalesced packets (RFC 9000 §12.2): the Initial comes first; stop at anything else.
        while let Some(header) = initial_header(rest)? {
            let packet = &rest[..header.end];
            let key = header.dcid;
            let result = self.take_packet(&header, packet);
            if result.is_err() {
                self.pending.remove(key);
            }
            if let Some(hello) = result? {
                done = Some(hello);
            }
            rest = &rest[header.end..];
        }
        Ok(done)
    }

    fn take_packet(
        &mut self,
        header: &LongHeader<'_>,
        packet: &[u8],
    ) -> Result<Option<ClientHello>, Error> {
        let dcid = header.dcid;
        let frames_plain = match self.pending.get(dcid) {
            Some(p) if p.version == header.version => open(&p.keys, header, packet)?,
            _ => {
                let keys = initial_keys(header.version, dcid);
                let plain = open(&keys, header, packet)?;
                if crypto_frames(&plain)?.is_empty() {
                    // ACK-only Initials (after the handshake started) open no new state.
                    return Ok(None);
                }
                self.make_room();
                self.order.push_back(dcid.to_vec());
                self.pending.insert(
                    dcid.to_vec(),
                    Pending {
                        keys,
                        version: header.version,
                        data: Vec::new(),
                        ranges: Vec::new(),
                    },
                );
                plain
            }
        };
        let frames = crypto_frames(&frames_plain)?;
        let pending = self
            .pending
            .get_mut(dcid)
            .ok_or(Error::Quic("connection state lost"))?;
        for (offset, chunk) in frames {
            pending.add(offset, chunk)?;
        }
        let Some(total) = pending.complete()? else {
            return Ok(None);
        };
        let mut p = self
            .pending
            .remove(dcid)
            .ok_or(Error::Quic("connection state lost"))?;
        p.data.truncate(total);
        Ok(Some(ClientHello {
            dcid: dcid.to_vec(),
            message: p.data,
        }))
    }

    fn make_room(&mut self) {
        while self.pending.len() >= self.max_pending {
            match self.order.pop_front() {
                Some(old) => {
                    self.pending.remove(&old);
                }
                None => break,
            }
        }
        // Entries completed or dropped leave stale names behind: keep the queue bounded too.
        if self.order.len() > 2 * self.max_pending {
            let pending = &self.pending;
            self.order.retain(|d| pending.contains_key(d));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_from_rfc9000_a1() {
        for (hex, want) in [
            ("c2197c5eff14e88c", 151_288_809_941_952_652u64),
            ("9d7f3e7d", 494_878_333),
            ("7bbd", 15_293),
            ("25", 37),
            ("4025", 37),
        ] {
            let bytes: Vec<u8> = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            let mut pos = 0;
            assert_eq!(varint(&bytes, &mut pos), Ok(want));
            assert_eq!(pos, bytes.len());
        }
        assert!(varint(&[0x40], &mut 0).is_err());
    }

    #[test]
    fn frames_skip_padding_ping_ack() {
        let payload = [
            0x01, 0x00, 0x02, 0x05, 0x00, 0x01, 0x00, 0x01, 0x00, 0x06, 0x03, 0x02, 0xaa, 0xbb,
            0x00,
        ];
        assert_eq!(crypto_frames(&payload), Ok(vec![(3, &[0xaa, 0xbb][..])]));
        assert!(crypto_frames(&[0x08, 0x00]).is_err());
        assert!(crypto_frames(&[0x06, 0x00, 0x05, 0xaa]).is_err());
    }
}

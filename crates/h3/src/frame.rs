//! HTTP/3 framing (RFC 9114 §7) over QUIC streams: variable-length integers, frame and stream
//! types, error codes, and a reader that walks a stream's frames over quinn's chunks, skipping
//! DATA without copying it.

use bytes::{Buf, Bytes};

pub const DATA: u64 = 0x00;
pub const HEADERS: u64 = 0x01;
pub const CANCEL_PUSH: u64 = 0x03;
pub const SETTINGS: u64 = 0x04;
pub const PUSH_PROMISE: u64 = 0x05;
pub const GOAWAY: u64 = 0x07;
pub const MAX_PUSH_ID: u64 = 0x0d;

/// HTTP/2 frame types with no HTTP/3 meaning: receiving one is an error (§7.2.8).
pub fn is_h2_only(ty: u64) -> bool {
    matches!(ty, 0x02 | 0x06 | 0x08 | 0x09)
}

pub const STREAM_CONTROL: u64 = 0x00;
pub const STREAM_PUSH: u64 = 0x01;
pub const STREAM_QPACK_ENCODER: u64 = 0x02;
pub const STREAM_QPACK_DECODER: u64 = 0x03;

pub const SETTINGS_MAX_FIELD_SECTION_SIZE: u64 = 0x06;

/// Error codes (RFC 9114 §8.1, RFC 9204 §6).
pub mod code {
    pub const NO_ERROR: u32 = 0x100;
    pub const GENERAL_PROTOCOL_ERROR: u32 = 0x101;
    pub const STREAM_CREATION_ERROR: u32 = 0x103;
    pub const CLOSED_CRITICAL_STREAM: u32 = 0x104;
    pub const FRAME_UNEXPECTED: u32 = 0x105;
    pub const SETTINGS_ERROR: u32 = 0x109;
    pub const MISSING_SETTINGS: u32 = 0x10a;
    pub const REQUEST_CANCELLED: u32 = 0x10c;
    pub const REQUEST_INCOMPLETE: u32 = 0x10d;
    pub const MESSAGE_ERROR: u32 = 0x10e;
    pub const QPACK_DECOMPRESSION_FAILED: u32 = 0x200;
}

/// Append a QUIC variable-length integer (RFC 9000 §16); `v` < 2^62.
pub fn put_varint(out: &mut Vec<u8>, v: u64) {
    match v {
        0..=63 => out.push(v as u8),
        64..=16_383 => out.extend_from_slice(&(v as u16 | 0x4000).to_be_bytes()),
        16_384..=1_073_741_823 => out.extend_from_slice(&(v as u32 | 0x8000_0000).to_be_bytes()),
        _ => out.extend_from_slice(&(v | 0xc000_0000_0000_0000).to_be_bytes()),
    }
}

/// A variable-length integer at the start of `b`: its value and length.
pub fn get_varint(b: &[u8]) -> Option<(u64, usize)> {
    let first = *b.first()?;
    let n = 1usize << (first >> 6);
    let rest = b.get(1..n)?;
    let v = rest
        .iter()
        .fold((first & 0x3f) as u64, |v, &x| v << 8 | x as u64);
    Some((v, n))
}

/// A SETTINGS payload is a list of (id, value) varint pairs; HTTP/2's setting ids (0x02 to
/// 0x05) are errors (RFC 9114 §7.2.4.1). The others need nothing from a server that neither
/// pushes nor uses the QPACK dynamic table.
pub fn settings_valid(mut p: &[u8]) -> bool {
    while !p.is_empty() {
        let Some((id, n)) = get_varint(p) else {
            return false;
        };
        let Some((_, m)) = get_varint(&p[n..]) else {
            return false;
        };
        if (0x02..=0x05).contains(&id) {
            return false;
        }
        p = &p[n + m..];
    }
    true
}

/// Append a frame header.
pub fn put_frame_head(out: &mut Vec<u8>, ty: u64, len: u64) {
    put_varint(out, ty);
    put_varint(out, len);
}

/// Append a whole frame.
pub fn put_frame(out: &mut Vec<u8>, ty: u64, payload: &[u8]) {
    put_frame_head(out, ty, payload.len() as u64);
    out.extend_from_slice(payload);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadError {
    /// The stream ended inside a frame.
    Truncated,
    /// The stream was reset or the connection lost.
    Broken,
}

/// Reads frames off a receive stream.
pub struct Reader {
    recv: quinn::RecvStream,
    chunk: Bytes,
}

impl Reader {
    pub fn new(recv: quinn::RecvStream) -> Reader {
        Reader {
            recv,
            chunk: Bytes::new(),
        }
    }

    /// Stop the peer sending (an error `code`, or NO_ERROR once we no longer need the rest).
    pub fn stop(&mut self, code: u32) {
        let _ = self.recv.stop(code.into());
    }

    /// Get more bytes; false at the end of the stream.
    async fn fill(&mut self) -> Result<bool, ReadError> {
        while self.chunk.is_empty() {
            match self.recv.read_chunk(usize::MAX, true).await {
                Ok(Some(c)) => self.chunk = c.bytes,
                Ok(None) => return Ok(false),
                Err(_) => return Err(ReadError::Broken),
            }
        }
        Ok(true)
    }

    async fn byte(&mut self) -> Result<u8, ReadError> {
        if !self.fill().await? {
            return Err(ReadError::Truncated);
        }
        Ok(self.chunk.get_u8())
    }

    /// A variable-length integer; `None` if the stream ends cleanly before it.
    pub async fn varint(&mut self) -> Result<Option<u64>, ReadError> {
        if !self.fill().await? {
            return Ok(None);
        }
        let first = self.chunk.get_u8();
        let mut v = (first & 0x3f) as u64;
        for _ in 1..(1usize << (first >> 6)) {
            v = v << 8 | self.byte().await? as u64;
        }
        Ok(Some(v))
    }

    /// A frame header (type, length); `None` at a clean end of the stream.
    pub async fn frame_head(&mut self) -> Result<Option<(u64, u64)>, ReadError> {
        let Some(ty) = self.varint().await? else {
            return Ok(None);
        };
        let len = self.varint().await?.ok_or(ReadError::Truncated)?;
        Ok(Some((ty, len)))
    }

    /// A frame payload, read whole (callers bound `len`); without a copy when it is all in
    /// the chunk at hand, as it usually is.
    pub async fn payload(&mut self, len: usize) -> Result<Bytes, ReadError> {
        if self.fill().await? && self.chunk.len() >= len {
            return Ok(self.chunk.split_to(len));
        }
        // Grown as bytes arrive, not reserved up front: `len` is the peer's claim.
        let mut out = Vec::with_capacity(len.min(16 << 10));
        while out.len() < len {
            if !self.fill().await? {
                return Err(ReadError::Truncated);
            }
            let n = (len - out.len()).min(self.chunk.len());
            out.extend_from_slice(&self.chunk.split_to(n));
        }
        Ok(out.into())
    }

    /// Skip a frame payload.
    pub async fn skip(&mut self, mut len: u64) -> Result<(), ReadError> {
        while len > 0 {
            if !self.fill().await? {
                return Err(ReadError::Truncated);
            }
            let n = len.min(self.chunk.len() as u64) as usize;
            self.chunk.advance(n);
            len -= n as u64;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_match_rfc9000_examples() {
        // RFC 9000 §A.1.
        for (v, bytes) in [
            (
                151_288_809_941_952_652u64,
                &[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c][..],
            ),
            (494_878_333, &[0x9d, 0x7f, 0x3e, 0x7d]),
            (15_293, &[0x7b, 0xbd]),
            (37, &[0x25]),
        ] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out, bytes, "{v}");
            assert_eq!(get_varint(bytes), Some((v, bytes.len())));
        }
        assert_eq!(get_varint(&[0x7b]), None);
    }

    #[test]
    fn settings() {
        assert!(settings_valid(&[]));
        // QPACK_MAX_TABLE_CAPACITY 0, MAX_FIELD_SECTION_SIZE 16384, a grease id.
        assert!(settings_valid(&[
            0x01, 0x00, 0x06, 0x80, 0, 0x40, 0, 0x40, 0x21, 0x05
        ]));
        assert!(!settings_valid(&[0x04, 0x00]), "HTTP/2 INITIAL_WINDOW_SIZE");
        assert!(!settings_valid(&[0x01]), "id without value");
    }
}

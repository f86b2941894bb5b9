//! HTTP/3 framing (RFC 9114 §7) over QUIC streams: variable-length integers, frame and stream
//! types, error codes; sans-I/O decoders of integers and frame headers fed in any pieces (driven
//! with quinn's chunks by [`crate::reader::Reader`]).

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
    pub const REQUEST_REJECTED: u32 = 0x10b;
    pub const REQUEST_CANCELLED: u32 = 0x10c;
    pub const REQUEST_INCOMPLETE: u32 = 0x10d;
    pub const MESSAGE_ERROR: u32 = 0x10e;
    pub const QPACK_DECOMPRESSION_FAILED: u32 = 0x200;
    pub const QPACK_ENCODER_STREAM_ERROR: u32 = 0x201;
    pub const QPACK_DECODER_STREAM_ERROR: u32 = 0x202;
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

/// A value read incrementally, across chunk boundaries (sans-I/O): what a stream's reader
/// drives, and what tells a stream ending cleanly from one ending inside a value.
pub trait Decode {
    type Value;
    /// Consume `input` up to the end of the value: the bytes taken, and the value once whole.
    fn feed(&mut self, input: &[u8]) -> (usize, Option<Self::Value>);
    /// Part of a value has been read.
    fn is_partial(&self) -> bool;
}

/// A variable-length integer read incrementally, across chunk boundaries (sans-I/O).
#[derive(Debug, Clone, Copy, Default)]
pub struct VarintDecoder {
    value: u64,
    /// Bytes still to come; 0 when no integer is under way.
    left: u8,
}

impl Decode for VarintDecoder {
    type Value = u64;

    fn feed(&mut self, input: &[u8]) -> (usize, Option<u64>) {
        let mut i = 0;
        if self.left == 0 {
            let Some(&first) = input.first() else {
                return (0, None);
            };
            // Whole in `input`, as it nearly always is.
            if let Some((v, n)) = get_varint(input) {
                return (n, Some(v));
            }
            self.value = (first & 0x3f) as u64;
            self.left = (1u8 << (first >> 6)) - 1;
            i = 1;
        }
        for &b in &input[i..] {
            self.value = self.value << 8 | b as u64;
            self.left -= 1;
            i += 1;
            if self.left == 0 {
                return (i, Some(self.value));
            }
        }
        (i, None)
    }

    fn is_partial(&self) -> bool {
        self.left > 0
    }
}

/// A frame header (type, length) read incrementally (sans-I/O).
#[derive(Debug, Clone, Copy, Default)]
pub struct HeadDecoder {
    ty: Option<u64>,
    int: VarintDecoder,
}

impl Decode for HeadDecoder {
    /// A frame's (type, length).
    type Value = (u64, u64);

    fn feed(&mut self, input: &[u8]) -> (usize, Option<(u64, u64)>) {
        let mut used = 0;
        let ty = match self.ty {
            Some(ty) => ty,
            None => {
                let (n, ty) = self.int.feed(input);
                used = n;
                match ty {
                    Some(ty) => ty,
                    None => return (used, None),
                }
            }
        };
        let (n, len) = self.int.feed(&input[used..]);
        used += n;
        match len {
            Some(len) => {
                self.ty = None;
                (used, Some((ty, len)))
            }
            None => {
                self.ty = Some(ty);
                (used, None)
            }
        }
    }

    fn is_partial(&self) -> bool {
        self.ty.is_some() || self.int.is_partial()
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
    fn incremental_varints_and_heads_at_every_split() {
        let mut stream = Vec::new();
        let values = [0, 37, 63, 64, 15_293, 16_384, 494_878_333, (1 << 62) - 1];
        for v in values {
            put_varint(&mut stream, v);
        }
        for split in 0..=stream.len() {
            let (mut d, mut got, mut at) = (VarintDecoder::default(), Vec::new(), 0);
            for piece in [&stream[..split], &stream[split..]] {
                let mut i = 0;
                while i < piece.len() {
                    let (n, v) = d.feed(&piece[i..]);
                    assert!(n > 0);
                    i += n;
                    got.extend(v);
                }
                at += piece.len();
                let decoded: usize = got
                    .iter()
                    .map(|&v| {
                        let mut b = Vec::new();
                        put_varint(&mut b, v);
                        b.len()
                    })
                    .sum();
                assert_eq!(d.is_partial(), decoded < at, "split at {split}");
            }
            assert_eq!(got, values, "split at {split}");
        }
        let mut heads = Vec::new();
        put_frame_head(&mut heads, 0x1f * 1000 + 0x21, 70_000);
        put_frame_head(&mut heads, HEADERS, 5);
        for split in 0..=heads.len() {
            let mut d = HeadDecoder::default();
            let (n, a) = d.feed(&heads[..split]);
            assert_eq!(n, split.min(8));
            let mut got: Vec<_> = a.into_iter().collect();
            let mut rest = &heads[n..];
            while !rest.is_empty() {
                let (n, h) = d.feed(rest);
                got.extend(h);
                rest = &rest[n..];
            }
            assert!(!d.is_partial());
            assert_eq!(got, [(0x1f * 1000 + 0x21, 70_000), (HEADERS, 5)], "{split}");
        }
        let mut d = HeadDecoder::default();
        assert_eq!(d.feed(&[0x01]), (1, None));
        assert!(d.is_partial(), "a type without its length");
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

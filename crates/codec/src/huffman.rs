//! HPACK Huffman decoding (RFC 7541 §5.2, code in Appendix B).
//!
//! The code is canonical (codes of one length are consecutive, in symbol order), so the code
//! lengths alone define it: a left-aligned 32-bit window is below `limit[L]` exactly when it
//! starts with a code of length at most `L`, which makes decoding one comparison per length.

use std::sync::OnceLock;

/// Code length of each symbol, 0..=255 and EOS (256), from RFC 7541 Appendix B.
const LENGTHS: [u8; 257] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28,
    28, 28, 28, 28, 28, 28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, 5, 5,
    5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, 13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, 15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6,
    6, 5, 6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22, 22, 23, 22,
    23, 23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22,
    21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20,
    22, 22, 22, 23, 22, 22, 23, 26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19,
    21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, 20, 24, 20, 21, 22, 21, 21, 23, 22,
    22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, 30,
];

const EOS: u16 = 256;

struct Table {
    /// By the next 8 bits: the symbol and code length when a code of at most 8 bits starts
    /// there (most bytes of URLs and header values), else length 0.
    short: [(u8, u8); 256],
    /// Distinct code lengths, shortest first, with for each: the exclusive upper bound of its
    /// codes left-aligned to 32 bits, its first code, and where its symbols start in `symbols`.
    lengths: Vec<(u32, u64, u32, usize)>,
    /// Symbols sorted by (code length, symbol).
    symbols: Vec<u16>,
}

fn table() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(|| {
        let mut symbols: Vec<u16> = (0..=EOS).collect();
        symbols.sort_by_key(|&s| (LENGTHS[s as usize], s));
        let mut lengths = Vec::new();
        let (mut code, mut prev_len, mut start) = (0u32, 0u32, 0usize);
        while start < symbols.len() {
            let len = LENGTHS[symbols[start] as usize] as u32;
            code <<= len - prev_len;
            let count = symbols[start..]
                .iter()
                .take_while(|&&s| LENGTHS[s as usize] as u32 == len)
                .count();
            let end = (code as u64 + count as u64) << (32 - len);
            lengths.push((len, end, code, start));
            code += count as u32;
            prev_len = len;
            start += count;
        }
        let mut short = [(0u8, 0u8); 256];
        for (b, slot) in short.iter_mut().enumerate() {
            let window = (b as u64) << 24;
            if let Some(&(len, _, first, start)) = lengths.iter().find(|l| window < l.1) {
                if len <= 8 {
                    let sym = symbols[start + ((window >> (32 - len)) as u32 - first) as usize];
                    *slot = (sym as u8, len as u8);
                }
            }
        }
        Table {
            short,
            lengths,
            symbols,
        }
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidHuffman;

/// Decode `src` into `out` (cleared first).
pub fn decode(src: &[u8], out: &mut Vec<u8>) -> Result<(), InvalidHuffman> {
    let t = table();
    out.clear();
    // Bits not yet decoded, left-aligned in `acc`; `have` of them are valid.
    let (mut acc, mut have, mut next) = (0u64, 0u32, 0usize);
    loop {
        while have <= 56 && next < src.len() {
            acc |= (src[next] as u64) << (56 - have);
            have += 8;
            next += 1;
        }
        if have == 0 {
            return Ok(());
        }
        let window = acc >> 32;
        let (sym, len) = t.short[(window >> 24) as usize];
        if len > 0 && len as u32 <= have {
            out.push(sym);
            acc <<= len;
            have -= len as u32;
            continue;
        }
        let Some(&(len, _, first, start)) = t.lengths.iter().find(|l| window < l.1) else {
            return Err(InvalidHuffman);
        };
        if len > have {
            // The rest is padding: under 8 bits, all ones (the start of EOS).
            let mask = (1u64 << have) - 1;
            return if have < 8 && (acc >> (64 - have)) & mask == mask {
                Ok(())
            } else {
                Err(InvalidHuffman)
            };
        }
        let sym = t.symbols[start + ((window >> (32 - len)) as u32 - first) as usize];
        if sym == EOS {
            return Err(InvalidHuffman);
        }
        out.push(sym as u8);
        acc <<= len;
        have -= len;
    }
}

/// Huffman-encode `src` (for tests: what is sent here is sent raw).
pub fn encode(src: &[u8]) -> Vec<u8> {
    // Codes by symbol, derived from the canonical table.
    let t = table();
    let mut codes = [0u32; 257];
    for &(len, _, first, start) in &t.lengths {
        let same_length = t.symbols[start..]
            .iter()
            .take_while(|&&s| LENGTHS[s as usize] as u32 == len);
        for (&s, code) in same_length.zip(first..) {
            codes[s as usize] = code;
        }
    }
    let (mut acc, mut bits, mut out) = (0u64, 0u32, Vec::new());
    for &b in src {
        let len = LENGTHS[b as usize] as u32;
        acc = (acc << len) | codes[b as usize] as u64;
        bits += len;
        while bits >= 8 {
            out.push((acc >> (bits - 8)) as u8);
            bits -= 8;
        }
    }
    if bits > 0 {
        out.push(((acc << (8 - bits)) as u8) | (0xff >> bits));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(src: &[u8]) -> Result<Vec<u8>, InvalidHuffman> {
        let mut out = Vec::new();
        decode(src, &mut out).map(|()| out)
    }

    #[test]
    fn rfc7541_examples() {
        // Appendix C.4.1 and C.6.1.
        let www = [
            0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
        ];
        assert_eq!(dec(&www).unwrap(), b"www.example.com");
        assert_eq!(dec(&[0x64, 0x02]).unwrap(), b"302");
        let date = [
            0xd0, 0x7a, 0xbe, 0x94, 0x10, 0x54, 0xd4, 0x44, 0xa8, 0x20, 0x05, 0x95, 0x04, 0x0b,
            0x81, 0x66, 0xe0, 0x82, 0xa6, 0x2d, 0x1b, 0xff,
        ];
        assert_eq!(dec(&date).unwrap(), b"Mon, 21 Oct 2013 20:13:21 GMT");
        assert_eq!(encode(b"www.example.com"), www);
    }

    #[test]
    fn every_byte_round_trips() {
        let all: Vec<u8> = (0..=255).chain((0..=255).rev()).collect();
        assert_eq!(dec(&encode(&all)).unwrap(), all);
        assert_eq!(dec(&[]).unwrap(), b"");
    }

    #[test]
    fn bad_padding_and_eos_are_errors() {
        // 'a' is 00011 (5 bits): padding with zeros is invalid, with ones valid.
        assert_eq!(dec(&[0b0001_1111]).unwrap(), b"a");
        assert!(dec(&[0b0001_1000]).is_err());
        // A whole byte of padding is too much.
        assert!(dec(&[0b0001_1111, 0xff]).is_err());
        // EOS itself (30 ones) is an error.
        assert!(dec(&[0xff, 0xff, 0xff, 0xff]).is_err());
    }
}

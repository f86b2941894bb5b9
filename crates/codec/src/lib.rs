//! Wire codecs the server and the load generator share (sans-I/O): the strict chunked coding,
//! HPACK (RFC 7541) and HTTP/2 frame constants, and the header-compression primitives HPACK and
//! QPACK (RFC 9204) have in common: the Huffman code and prefixed integers.

#![forbid(unsafe_code)]

pub mod chunked;
pub mod fields;
pub mod h2;
pub mod hpack;
pub mod huffman;
pub mod syntax;

/// Append `v` as a prefixed integer (RFC 7541 §5.1) whose first byte carries `flags` above a
/// `prefix`-bit field.
pub fn put_int(out: &mut Vec<u8>, flags: u8, prefix: u32, mut v: usize) {
    let max = (1usize << prefix) - 1;
    if v < max {
        out.push(flags | v as u8);
        return;
    }
    out.push(flags | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

/// A prefixed integer at the start of `buf`: its value and the bytes it took. `None` if `buf`
/// ends inside it or it does not fit 32 bits worth of continuation bytes.
pub fn get_int(buf: &[u8], prefix: u32) -> Option<(usize, usize)> {
    let max = (1usize << prefix) - 1;
    let v = (*buf.first()? as usize) & max;
    if v < max {
        return Some((v, 1));
    }
    let mut v = v;
    for (k, &b) in buf[1..].iter().enumerate().take(4) {
        v += ((b & 0x7f) as usize) << (7 * k);
        if b & 0x80 == 0 {
            return Some((v, k + 2));
        }
    }
    None
}

/// A string literal (RFC 7541 §5.2) whose length has a `prefix`-bit field, Huffman flag just
/// above it: decoded into `out` (cleared first); returns the bytes it took from `buf`.
pub fn get_string(buf: &[u8], prefix: u32, out: &mut Vec<u8>) -> Option<usize> {
    let huffman = buf.first()? & (1 << prefix) != 0;
    let (len, n) = get_int(buf, prefix)?;
    let raw = buf.get(n..n.checked_add(len)?)?;
    out.clear();
    if huffman {
        huffman::decode(raw, out).ok()?;
    } else {
        out.extend_from_slice(raw);
    }
    Some(n + len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_round_trip() {
        for v in [0, 1, 14, 15, 16, 127, 128, 1337, 1 << 20] {
            let mut out = Vec::new();
            put_int(&mut out, 0, 4, v);
            assert_eq!(get_int(&out, 4), Some((v, out.len())), "{v}");
        }
        // RFC 7541 C.1.2: 1337 with a 5-bit prefix.
        let mut out = Vec::new();
        put_int(&mut out, 0, 5, 1337);
        assert_eq!(out, [31, 154, 10]);
        assert_eq!(get_int(&[0x1f, 0xff, 0xff, 0xff, 0xff, 0xff], 5), None);
        assert_eq!(get_int(&[0x1f, 0xff], 5), None);
    }

    #[test]
    fn strings_raw_and_huffman() {
        let mut out = Vec::new();
        assert_eq!(get_string(b"\x03abcX", 7, &mut out), Some(4));
        assert_eq!(out, b"abc");
        // QPACK literal names: 3-bit length prefix, Huffman flag at 0x08.
        let enc = huffman::encode(b"abc");
        let mut buf = vec![0x08 | enc.len() as u8];
        buf.extend(&enc);
        assert_eq!(get_string(&buf, 3, &mut out), Some(buf.len()));
        assert_eq!(out, b"abc");
        assert_eq!(get_string(&[0x05, b'a'], 7, &mut out), None);
    }
}

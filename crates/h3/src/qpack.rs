//! QPACK (RFC 9204) with no dynamic table (we advertise QPACK_MAX_TABLE_CAPACITY 0, so peers
//! may only use the static table and literals): field sections decoded line by line into reused
//! buffers, and encoded statelessly. The peer's encoder and decoder streams are checked against
//! that: [`InstructionStream`].

use loadterm_codec::{get_int, get_string, put_int};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::OnceLock;

/// RFC 9204 Appendix A (indexed from 0).
const STATIC: [(&str, &str); 99] = [
    (":authority", ""),
    (":path", "/"),
    ("age", "0"),
    ("content-disposition", ""),
    ("content-length", "0"),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("referer", ""),
    ("set-cookie", ""),
    (":method", "CONNECT"),
    (":method", "DELETE"),
    (":method", "GET"),
    (":method", "HEAD"),
    (":method", "OPTIONS"),
    (":method", "POST"),
    (":method", "PUT"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "103"),
    (":status", "200"),
    (":status", "304"),
    (":status", "404"),
    (":status", "503"),
    ("accept", "*/*"),
    ("accept", "application/dns-message"),
    ("accept-encoding", "gzip, deflate, br"),
    ("accept-ranges", "bytes"),
    ("access-control-allow-headers", "cache-control"),
    ("access-control-allow-headers", "content-type"),
    ("access-control-allow-origin", "*"),
    ("cache-control", "max-age=0"),
    ("cache-control", "max-age=2592000"),
    ("cache-control", "max-age=604800"),
    ("cache-control", "no-cache"),
    ("cache-control", "no-store"),
    ("cache-control", "public, max-age=31536000"),
    ("content-encoding", "br"),
    ("content-encoding", "gzip"),
    ("content-type", "application/dns-message"),
    ("content-type", "application/javascript"),
    ("content-type", "application/json"),
    ("content-type", "application/x-www-form-urlencoded"),
    ("content-type", "image/gif"),
    ("content-type", "image/jpeg"),
    ("content-type", "image/png"),
    ("content-type", "text/css"),
    ("content-type", "text/html; charset=utf-8"),
    ("content-type", "text/plain"),
    ("content-type", "text/plain;charset=utf-8"),
    ("range", "bytes=0-"),
    ("strict-transport-security", "max-age=31536000"),
    (
        "strict-transport-security",
        "max-age=31536000; includesubdomains",
    ),
    (
        "strict-transport-security",
        "max-age=31536000; includesubdomains; preload",
    ),
    ("vary", "accept-encoding"),
    ("vary", "origin"),
    ("x-content-type-options", "nosniff"),
    ("x-xss-protection", "1; mode=block"),
    (":status", "100"),
    (":status", "204"),
    (":status", "206"),
    (":status", "302"),
    (":status", "400"),
    (":status", "403"),
    (":status", "421"),
    (":status", "425"),
    (":status", "500"),
    ("accept-language", ""),
    ("access-control-allow-credentials", "FALSE"),
    ("access-control-allow-credentials", "TRUE"),
    ("access-control-allow-headers", "*"),
    ("access-control-allow-methods", "get"),
    ("access-control-allow-methods", "get, post, options"),
    ("access-control-allow-methods", "options"),
    ("access-control-expose-headers", "content-length"),
    ("access-control-request-headers", "content-type"),
    ("access-control-request-method", "get"),
    ("access-control-request-method", "post"),
    ("alt-svc", "clear"),
    ("authorization", ""),
    (
        "content-security-policy",
        "script-src 'none'; object-src 'none'; base-uri 'none'",
    ),
    ("early-data", "1"),
    ("expect-ct", ""),
    ("forwarded", ""),
    ("if-range", ""),
    ("origin", ""),
    ("purpose", "prefetch"),
    ("server", ""),
    ("timing-allow-origin", "*"),
    ("upgrade-insecure-requests", "1"),
    ("user-agent", ""),
    ("x-forwarded-for", ""),
    ("x-frame-options", "deny"),
    ("x-frame-options", "sameorigin"),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum QpackError {
    /// Malformed, or refers to a dynamic table we do not have: QPACK_DECOMPRESSION_FAILED.
    #[error("QPACK decompression failed")]
    Decompression,
    /// Decoded section larger than the limit we advertised: answered with 431.
    #[error("field section too large")]
    TooLarge,
}

/// Decodes field sections; its buffers are reused from section to section.
#[derive(Debug, Default)]
pub struct QpackDecoder {
    name: Vec<u8>,
    value: Vec<u8>,
}

impl QpackDecoder {
    /// Decode a field section, calling `f(name, value)` per field line; its decoded size
    /// (RFC 9114 §4.2.2: name + value + 32 per field) may not exceed `max_size`.
    pub fn decode(
        &mut self,
        mut section: &[u8],
        max_size: u64,
        mut f: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), QpackError> {
        use QpackError::Decompression as Bad;
        // Prefix: Required Insert Count 0 (no dynamic table), then sign bit + Delta Base.
        let (ric, n) = get_int(section, 8).ok_or(Bad)?;
        if ric != 0 {
            return Err(Bad);
        }
        section = &section[n..];
        let (_, n) = get_int(section, 7).ok_or(Bad)?;
        section = &section[n..];
        let mut size = 0u64;
        let (name, value) = (&mut self.name, &mut self.value);
        while let Some(&b) = section.first() {
            if b & 0x80 != 0 {
                // Indexed field line: static only (T bit).
                if b & 0x40 == 0 {
                    return Err(Bad);
                }
                let (i, n) = get_int(section, 6).ok_or(Bad)?;
                section = &section[n..];
                let (nm, v) = *STATIC.get(i).ok_or(Bad)?;
                name.clear();
                name.extend_from_slice(nm.as_bytes());
                value.clear();
                value.extend_from_slice(v.as_bytes());
            } else if b & 0x40 != 0 {
                // Literal with name reference: static only (T bit).
                if b & 0x10 == 0 {
                    return Err(Bad);
                }
                let (i, n) = get_int(section, 4).ok_or(Bad)?;
                section = &section[n..];
                name.clear();
                name.extend_from_slice(STATIC.get(i).ok_or(Bad)?.0.as_bytes());
                let n = get_string(section, 7, value).ok_or(Bad)?;
                section = &section[n..];
            } else if b & 0x20 != 0 {
                // Literal with literal name.
                let n = get_string(section, 3, name).ok_or(Bad)?;
                section = &section[n..];
                let n = get_string(section, 7, value).ok_or(Bad)?;
                section = &section[n..];
            } else {
                // Post-base forms need a dynamic table.
                return Err(Bad);
            }
            size += (name.len() + value.len() + 32) as u64;
            if size > max_size {
                return Err(QpackError::TooLarge);
            }
            f(name, value);
        }
        Ok(())
    }
}

/// The `:status` of a response field section, read from its first field line alone (a
/// response's only pseudo-header, and pseudo-headers come first): `None` if that line is not a
/// three-digit `:status`. `scratch` holds literal strings while they are read.
pub fn status(section: &[u8], scratch: &mut Vec<u8>) -> Option<u16> {
    let (ric, n) = get_int(section, 8)?;
    let (_, m) = get_int(section.get(n..)?, 7)?;
    let line = &section[n + m..];
    let b = *line.first()?;
    let value: &[u8] = if ric != 0 {
        return None;
    } else if b & 0xc0 == 0xc0 {
        let (name, value) = STATIC.get(get_int(line, 6)?.0)?;
        if *name != ":status" {
            return None;
        }
        value.as_bytes()
    } else if b & 0xd0 == 0x50 {
        let (i, n) = get_int(line, 4)?;
        if STATIC.get(i)?.0 != ":status" {
            return None;
        }
        get_string(&line[n..], 7, scratch)?;
        scratch
    } else if b & 0xe0 == 0x20 {
        let n = get_string(line, 3, scratch)?;
        if scratch != b":status" {
            return None;
        }
        get_string(&line[n..], 7, scratch)?;
        scratch
    } else {
        return None;
    };
    match *value {
        [a, b, c] if value.iter().all(u8::is_ascii_digit) => {
            Some((a - b'0') as u16 * 100 + (b - b'0') as u16 * 10 + (c - b'0') as u16)
        }
        _ => None,
    }
}

/// A connection error on one of the peer's QPACK instruction streams (RFC 9204 §4.1.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InstructionError {
    /// QPACK_ENCODER_STREAM_ERROR.
    #[error("QPACK encoder stream error")]
    Encoder,
    /// QPACK_DECODER_STREAM_ERROR.
    #[error("QPACK decoder stream error")]
    Decoder,
}

impl InstructionError {
    /// The HTTP/3 error code that closes the connection.
    pub fn code(self) -> u32 {
        match self {
            InstructionError::Encoder => crate::frame::code::QPACK_ENCODER_STREAM_ERROR,
            InstructionError::Decoder => crate::frame::code::QPACK_DECODER_STREAM_ERROR,
        }
    }
}

/// The peer's QPACK encoder stream (RFC 9204 §4.3) or decoder stream (§4.4), checked byte by byte
/// as it arrives: neither direction has a dynamic table, ours at capacity 0 and our encoder
/// never inserting, so almost every instruction is an error, found at its first byte.
#[derive(Debug)]
pub struct InstructionStream {
    decoder: bool,
    /// Inside a Stream Cancellation's stream ID: the continuation bytes read so far.
    cancel: Option<u8>,
}

impl InstructionStream {
    /// The peer's encoder stream (instructions for our decoder's table).
    pub fn encoder() -> InstructionStream {
        InstructionStream {
            decoder: false,
            cancel: None,
        }
    }

    /// The peer's decoder stream (acknowledgments of what our encoder sent).
    pub fn decoder() -> InstructionStream {
        InstructionStream {
            decoder: true,
            cancel: None,
        }
    }

    /// Check the next bytes of the stream.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<(), InstructionError> {
        if !self.decoder {
            // Set Dynamic Table Capacity 0 (001 and a 5-bit prefix integer) is the byte 0x20
            // and nothing else; any other byte starts a capacity above our maximum of 0
            // (§3.2.3, §4.3.1), an Insert that cannot fit in 0 bytes (§3.2.2), or a Duplicate of
            // an entry that cannot exist (§4.3.4).
            return match bytes.iter().all(|&b| b == 0x20) {
                true => Ok(()),
                false => Err(InstructionError::Encoder),
            };
        }
        for &b in bytes {
            self.cancel = match self.cancel {
                // Stream Cancellation (01 and a 6-bit prefix stream ID) is always allowed
                // (§4.4.2). Section Acknowledgment (1) is an error: we never send a section
                // with a non-zero Required Insert Count (§4.4.1). So is Insert Count Increment
                // (00): an increment of 0, or past the 0 entries we inserted (§4.4.3).
                None if b & 0xc0 != 0x40 => return Err(InstructionError::Decoder),
                None => (b == 0x7f).then_some(0),
                // A stream ID (below 2^62) needs at most 9 continuation bytes.
                Some(9..) => return Err(InstructionError::Decoder),
                Some(n) => (b & 0x80 != 0).then_some(n + 1),
            };
        }
        Ok(())
    }
}

/// Static entries of one name: the first index with it, and every (value, index).
type Named = (usize, Vec<(&'static str, usize)>);

/// FNV-1a: a few short names per response, where SipHash showed in profiles.
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
}

type ByName = HashMap<&'static str, Named, BuildHasherDefault<Fnv>>;

/// Static entries by name.
fn by_name() -> &'static ByName {
    static MAP: OnceLock<ByName> = OnceLock::new();
    MAP.get_or_init(|| {
        let mut m = ByName::default();
        for (i, &(n, v)) in STATIC.iter().enumerate() {
            m.entry(n).or_insert((i, Vec::new())).1.push((v, i));
        }
        m
    })
}

/// Start a field section: the prefix (Required Insert Count 0, Delta Base 0).
pub fn begin(out: &mut Vec<u8>) {
    out.extend_from_slice(&[0, 0]);
}

/// Start a response field section with its `:status`.
pub fn begin_response(out: &mut Vec<u8>, status: u16) {
    begin(out);
    field(
        out,
        ":status",
        itoa::Buffer::new().format(status).as_bytes(),
    );
}

/// Append a field line: the static entry if one matches exactly, else a literal with a static
/// name reference or a literal name, never Huffman-coded (cheaper to make; values are short).
pub fn field(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    match by_name().get(name) {
        Some((first, entries)) => {
            if let Some(&(_, i)) = entries.iter().find(|(v, _)| v.as_bytes() == value) {
                put_int(out, 0xc0, 6, i);
                return;
            }
            put_int(out, 0x50, 4, *first);
        }
        None => {
            put_int(out, 0x20, 3, name.len());
            out.extend_from_slice(name.as_bytes());
        }
    }
    put_int(out, 0, 7, value.len());
    out.extend_from_slice(value);
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadterm_codec::huffman;

    fn fields(section: &[u8], max: u64) -> Result<Vec<(String, String)>, QpackError> {
        let mut out = Vec::new();
        QpackDecoder::default().decode(section, max, |n, v| {
            out.push((
                String::from_utf8_lossy(n).into_owned(),
                String::from_utf8_lossy(v).into_owned(),
            ))
        })?;
        Ok(out)
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn responses_decode_back() {
        let mut s = Vec::new();
        begin_response(&mut s, 200);
        field(&mut s, "content-length", b"1024");
        field(&mut s, "cache-control", b"no-cache");
        field(&mut s, "x-rsp", b"id=dummy");
        // :status 200 is static entry 25, cache-control: no-cache 39, both indexed.
        assert_eq!(&s[..3], &[0, 0, 0xc0 | 25]);
        assert!(s.contains(&(0xc0 | 39)));
        assert_eq!(
            fields(&s, 1 << 20).unwrap(),
            pairs(&[
                (":status", "200"),
                ("content-length", "1024"),
                ("cache-control", "no-cache"),
                ("x-rsp", "id=dummy")
            ])
        );
        let mut s = Vec::new();
        begin_response(&mut s, 599);
        assert_eq!(s, [0, 0, 0x5f, 24 - 15, 3, b'5', b'9', b'9']);
    }

    /// A request as an independent encoder would send it: indexed static fields, a literal
    /// with a static name and a Huffman value, and a literal name.
    #[test]
    fn requests_with_every_static_line_form() {
        let path = huffman::encode(b"/?s=1k");
        let mut s = vec![0x00, 0x00, 0xc0 | 17, 0x50 | 1]; // :method GET; :path literal
        put_int(&mut s, 0x80, 7, path.len());
        s.extend(&path);
        put_int(&mut s, 0x20, 3, 10);
        s.extend(b"x-loadterm");
        put_int(&mut s, 0, 7, 3);
        s.extend(b"r=1");
        let want = pairs(&[
            (":method", "GET"),
            (":path", "/?s=1k"),
            ("x-loadterm", "r=1"),
        ]);
        assert_eq!(fields(&s, 1 << 20).unwrap(), want);
        // 3 fields of 32 + their bytes.
        assert_eq!(fields(&s, 100), Err(QpackError::TooLarge));
    }

    #[test]
    fn dynamic_references_and_garbage_are_refused() {
        for bad in [
            &[0x01, 0x00][..],                                 // required insert count 1
            &[0x00, 0x00, 0x80],                               // indexed, dynamic
            &[0x00, 0x00, 0x40],                               // name reference, dynamic
            &[0x00, 0x00, 0x10],                               // post-base indexed
            &[0x00, 0x00, 0xff, 0x80, 0x80, 0x80, 0x80, 0x80], // index overflow
            &[0x00, 0x00, 0xc0 | 63, 100],                     // static index out of range
            &[0x00, 0x00, 0x51, 0x05, b'a'],                   // value shorter than its length
            &[0x00],                                           // no delta base
        ] {
            assert_eq!(
                fields(bad, 1 << 20),
                Err(QpackError::Decompression),
                "{bad:02x?}"
            );
        }
    }

    #[test]
    fn status_from_the_first_line() {
        let mut scratch = Vec::new();
        for st in [100, 103, 200, 404, 599] {
            let mut s = Vec::new();
            begin_response(&mut s, st);
            field(&mut s, "x-rsp", b"1");
            assert_eq!(status(&s, &mut scratch), Some(st), "{st}");
        }
        // A literal name, Huffman-coded value.
        let mut s = vec![0, 0, 0x27, 0];
        s.extend(b":status");
        let v = huffman::encode(b"101");
        put_int(&mut s, 0x80, 7, v.len());
        s.extend(&v);
        assert_eq!(status(&s, &mut scratch), Some(101));
        let mut s = Vec::new();
        begin(&mut s);
        field(&mut s, "x-rsp", b"200");
        assert_eq!(status(&s, &mut scratch), None, "first line not :status");
        let mut s = Vec::new();
        begin(&mut s);
        field(&mut s, ":status", b"2000");
        assert_eq!(status(&s, &mut scratch), None, "four digits");
        assert_eq!(status(&[0, 0], &mut scratch), None, "empty section");
        assert_eq!(status(&[1, 0, 0xd9], &mut scratch), None, "dynamic table");
    }

    #[test]
    fn encoder_stream_allows_only_a_zero_capacity() {
        let mut e = InstructionStream::encoder();
        assert_eq!(e.feed(&[]), Ok(()));
        assert_eq!(e.feed(&[0x20, 0x20]), Ok(()), "capacity 0, twice");
        let mut cap = Vec::new();
        put_int(&mut cap, 0x20, 5, 4096);
        let mut insert = Vec::new();
        put_int(&mut insert, 0x40, 5, 1);
        insert.extend(b"x\x01y");
        for bad in [
            &cap[..],
            &cap[..1],     // the rest of the capacity still to come
            &[0x21],       // capacity 1
            &[0x3f, 0x00], // capacity 31
            &[0xc0 | 17],  // Insert with a static name reference
            &insert,       // Insert with a literal name
            &[0x00],       // Duplicate
        ] {
            let mut e = InstructionStream::encoder();
            assert_eq!(e.feed(bad), Err(InstructionError::Encoder), "{bad:02x?}");
            let mut e = InstructionStream::encoder();
            assert_eq!(e.feed(&[0x20]), Ok(()));
            assert_eq!(
                e.feed(bad),
                Err(InstructionError::Encoder),
                "after 0: {bad:02x?}"
            );
        }
        assert_eq!(InstructionError::Encoder.code(), 0x201);
    }

    #[test]
    fn decoder_stream_allows_only_stream_cancellations() {
        let mut d = InstructionStream::decoder();
        let mut ok = Vec::new();
        for id in [0, 4, 62, 63, 64, 1 << 20, (1 << 62) - 1] {
            put_int(&mut ok, 0x40, 6, id);
        }
        assert_eq!(d.feed(&ok), Ok(()));
        // Split anywhere, inside a stream ID too.
        let mut d = InstructionStream::decoder();
        for b in &ok {
            assert_eq!(d.feed(std::slice::from_ref(b)), Ok(()));
        }
        let mut overlong = vec![0x7f];
        overlong.extend([0x80; 9]);
        overlong.push(0);
        for bad in [
            &[0x80 | 4][..], // Section Acknowledgment, stream 4
            &[0x01],         // Insert Count Increment 1
            &[0x00],         // Insert Count Increment 0
            &overlong,
        ] {
            let mut d = InstructionStream::decoder();
            assert_eq!(d.feed(&ok), Ok(()));
            assert_eq!(d.feed(bad), Err(InstructionError::Decoder), "{bad:02x?}");
        }
        assert_eq!(InstructionError::Decoder.code(), 0x202);
    }

    /// Random sections and mutated valid ones: errors are fine, panics are not.
    #[test]
    fn random_and_mutated_sections_never_panic() {
        let mut valid = Vec::new();
        begin_response(&mut valid, 200);
        field(&mut valid, "content-type", b"text/plain");
        field(&mut valid, "x-some-name", b"value");
        let huff = huffman::encode(b"/a/path?q=1");
        put_int(&mut valid, 0x50 | 0x20, 4, 1);
        put_int(&mut valid, 0x80, 7, huff.len());
        valid.extend(&huff);
        let mut d = QpackDecoder::default();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..50_000 {
            let input: Vec<u8> = if round % 2 == 0 {
                (0..next() % 64).map(|_| next() as u8).collect()
            } else {
                let mut v = valid.clone();
                let i = next() as usize % v.len();
                v[i] = next() as u8;
                v.truncate(next() as usize % (v.len() + 1));
                v
            };
            let _ = d.decode(&input, 4096, |_, _| {});
            let _ = status(&input, &mut d.value);
        }
    }
}

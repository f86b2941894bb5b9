//! HPACK (RFC 7541) without encoder state: header blocks encoded as literals that are never
//! indexed (so one block serves every connection and stream), and a decoder that keeps only
//! what a load generator needs of a response (status and sizes), with the dynamic table kept
//! in step by entry size, so that no header string is stored.

use crate::syntax::content_length;
use crate::{get_int, get_string, put_int};
use std::collections::VecDeque;

/// RFC 7541 Appendix A.
const STATIC: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// The dynamic table size we allow the server (SETTINGS_HEADER_TABLE_SIZE default).
pub const TABLE_SIZE: usize = 4096;

/// Append a field: fully indexed when the static table has it, else a literal without
/// indexing, with the static table's name when it has the name (no Huffman coding).
pub fn put_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    if let Some(i) = STATIC
        .iter()
        .position(|&(n, v)| n.as_bytes() == name && v.as_bytes() == value)
    {
        put_int(out, 0x80, 7, i + 1);
        return;
    }
    match STATIC.iter().position(|&(n, _)| n.as_bytes() == name) {
        Some(i) => {
            put_int(out, 0x00, 4, i + 1);
            put_raw_string(out, value);
        }
        None => put_literal(out, name, value),
    }
}

/// Append a literal header field without indexing, new name (RFC 7541 §6.2.2), both strings
/// raw (no Huffman coding).
pub fn put_literal(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(0x00);
    put_raw_string(out, name);
    put_raw_string(out, value);
}

/// A string literal, not Huffman coded (RFC 7541 §5.2).
fn put_raw_string(out: &mut Vec<u8>, s: &[u8]) {
    put_int(out, 0x00, 7, s.len());
    out.extend_from_slice(s);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Invalid;

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("invalid HPACK header block")
    }
}

impl std::error::Error for Invalid {}

/// What is kept of a header field: enough to answer later references to it.
#[derive(Debug, Clone, Copy)]
struct Entry {
    name_len: usize,
    value_len: usize,
    /// Name starts with ':'.
    pseudo: bool,
    /// Name is `:status`; `status` is its value if that is three digits.
    is_status: bool,
    status: Option<u16>,
    /// Name is `content-length`; `length` is its value if that is decimal digits.
    is_length: bool,
    length: Option<u64>,
}

impl Entry {
    fn size(&self) -> usize {
        self.name_len + self.value_len + 32
    }
}

/// A decoded response header block, as far as it matters here.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResponseBlock {
    pub status: Option<u16>,
    /// Regular (non-pseudo) fields, counted as `name: value\r\n`.
    pub field_bytes: u64,
    pub content_length: Option<u64>,
    /// A pseudo-header was present (trailers may have none).
    pub pseudo: bool,
    /// Malformed as a response (RFC 9113 §8.1.1, §8.3): a pseudo-header other than one
    /// `:status`, or after a regular field; a `content-length` not decimal, or repeated with
    /// another value. The block is still decoded in full, to keep the table in step.
    pub malformed: bool,
}

#[derive(Debug)]
pub struct HpackDecoder {
    table: VecDeque<Entry>,
    size: usize,
    max: usize,
    /// The largest table size update accepted: our SETTINGS_HEADER_TABLE_SIZE.
    limit: usize,
    scratch: Vec<u8>,
}

impl Default for HpackDecoder {
    fn default() -> Self {
        HpackDecoder::with_limit(TABLE_SIZE)
    }
}

impl HpackDecoder {
    /// A decoder for a connection whose SETTINGS_HEADER_TABLE_SIZE is `limit`: the encoder may
    /// size its table up to it with a size update (RFC 7541 §4.2, §6.3). The table starts at the
    /// protocol's 4096 until the encoder says otherwise.
    pub fn with_limit(limit: usize) -> HpackDecoder {
        HpackDecoder {
            table: VecDeque::new(),
            size: 0,
            max: TABLE_SIZE,
            limit,
            scratch: Vec::new(),
        }
    }

    pub fn decode(&mut self, mut block: &[u8]) -> Result<ResponseBlock, Invalid> {
        let mut head = ResponseBlock::default();
        let mut fields = 0;
        let (mut seen_status, mut regular) = (false, false);
        while let Some(&first) = block.first() {
            let entry = if first & 0x80 != 0 {
                let (i, n) = int(block, 7)?;
                block = &block[n..];
                self.get(i)?
            } else if first & 0xe0 == 0x20 {
                // Dynamic table size update: only before the first field.
                let (max, n) = int(block, 5)?;
                block = &block[n..];
                if fields > 0 || max > self.limit {
                    return Err(Invalid);
                }
                self.max = max;
                self.evict(0);
                continue;
            } else {
                let (index, prefix) = match first & 0xc0 {
                    0x40 => (true, 6),
                    _ => (false, 4),
                };
                let (i, n) = int(block, prefix)?;
                block = &block[n..];
                let mut e = if i == 0 {
                    let n = self.string(&mut block)?;
                    let name = &self.scratch[..n];
                    Entry {
                        name_len: n,
                        value_len: 0,
                        pseudo: name.first() == Some(&b':'),
                        is_status: name == b":status",
                        status: None,
                        is_length: name == b"content-length",
                        length: None,
                    }
                } else {
                    self.get(i)?
                };
                e.value_len = self.string(&mut block)?;
                e.status = e.is_status.then(|| status(&self.scratch)).flatten();
                e.length = e.is_length.then(|| content_length(&self.scratch)).flatten();
                if index {
                    self.insert(e);
                }
                e
            };
            fields += 1;
            if entry.pseudo {
                head.malformed |= !entry.is_status || seen_status || regular;
                seen_status |= entry.is_status;
                head.pseudo = true;
                head.status = entry.status;
            } else {
                regular = true;
                head.field_bytes += (entry.name_len + entry.value_len + 4) as u64;
            }
            if entry.is_length {
                let first = head.content_length;
                head.content_length = entry.length;
                head.malformed |=
                    entry.length.is_none() || first.is_some_and(|n| Some(n) != entry.length);
            }
        }
        Ok(head)
    }

    fn get(&self, i: usize) -> Result<Entry, Invalid> {
        if i == 0 {
            return Err(Invalid);
        }
        if let Some(&(name, value)) = STATIC.get(i - 1) {
            return Ok(Entry {
                name_len: name.len(),
                value_len: value.len(),
                pseudo: name.starts_with(':'),
                is_status: name == ":status",
                status: status(value.as_bytes()),
                is_length: name == "content-length",
                length: (name == "content-length")
                    .then(|| content_length(value.as_bytes()))
                    .flatten(),
            });
        }
        self.table.get(i - 1 - STATIC.len()).copied().ok_or(Invalid)
    }

    fn insert(&mut self, e: Entry) {
        // An entry larger than the table empties it and is not added (RFC 7541 §4.4).
        self.evict(e.size());
        if e.size() <= self.max {
            self.size += e.size();
            self.table.push_front(e);
        }
    }

    /// Evict until `room` more bytes fit.
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max {
            match self.table.pop_back() {
                Some(e) => self.size -= e.size(),
                None => break,
            }
        }
    }

    /// Decode a string literal into `scratch`; returns its decoded length.
    fn string(&mut self, block: &mut &[u8]) -> Result<usize, Invalid> {
        let n = get_string(block, 7, &mut self.scratch).ok_or(Invalid)?;
        *block = &block[n..];
        Ok(self.scratch.len())
    }
}

fn status(v: &[u8]) -> Option<u16> {
    match v {
        [a, b, c] if v.iter().all(u8::is_ascii_digit) => {
            Some((*a - b'0') as u16 * 100 + (*b - b'0') as u16 * 10 + (*c - b'0') as u16)
        }
        _ => None,
    }
}

fn int(buf: &[u8], prefix: u32) -> Result<(usize, usize), Invalid> {
    get_int(buf, prefix).ok_or(Invalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn rfc7541_response_examples_keep_the_table_in_step() {
        // Appendix C.6: three responses with Huffman coding and a 256-byte table, where the
        // third refers back to fields the first two inserted and evicted.
        let mut d = HpackDecoder::default();
        d.decode(&hex("3fe1 01")).unwrap(); // size update to 256 (C.5 uses a 256-byte table)
        let r1 = d
            .decode(&hex(
                "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
                 2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
            ))
            .unwrap();
        assert_eq!(r1.status, Some(302));
        // cache-control: private, date: Mon, 21 Oct 2013 20:13:21 GMT,
        // location: https://www.example.com
        assert_eq!(r1.field_bytes, (13 + 7 + 4) + (4 + 29 + 4) + (8 + 23 + 4));
        assert_eq!(d.size, 222);
        let r2 = d.decode(&hex("4883 640e ff c1 c0 bf")).unwrap();
        assert_eq!(r2.status, Some(307));
        assert_eq!(d.size, 222);
        let r3 = d
            .decode(&hex(
                "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
                 77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
                 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
            ))
            .unwrap();
        assert_eq!(r3.status, Some(200));
        assert_eq!(d.size, 215);
        assert_eq!(d.table.len(), 3);
    }

    #[test]
    fn request_blocks_decode_back() {
        let mut block = Vec::new();
        for (n, v) in [
            (":method", &b"GET"[..]),
            (":path", b"/?s=1k"),
            ("user-agent", b"loadterm"),
            ("x-custom", b"v"),
        ] {
            put_field(&mut block, n.as_bytes(), v);
        }
        assert_eq!(block[0], 0x82); // :method GET, fully indexed
                                    // :path with the static name (index 4), 6 raw bytes.
        assert_eq!(block[1..3], [0x04, 0x06]);
        let head = HpackDecoder::default().decode(&block).unwrap();
        assert_eq!(head.field_bytes, (10 + 8 + 4) + (8 + 1 + 4));
        assert_eq!(head.status, None);
    }

    #[test]
    fn literals_without_indexing_new_name() {
        // RFC 7541 C.2.2, "password: secret", then a long value whose length takes two bytes.
        let mut out = Vec::new();
        put_literal(&mut out, b"password", b"secret");
        assert_eq!(out, hex("0008 7061 7373 776f 7264 0673 6563 7265 74"));
        out.clear();
        put_literal(&mut out, b"x", &[b'v'; 200]);
        assert_eq!(out[..5], [0x00, 0x01, b'x', 0x7f, 200 - 127]);
        assert_eq!(out.len(), 5 + 200);
        // Decoded as a field of these sizes, not entered in the table.
        let mut d = HpackDecoder::default();
        assert_eq!(d.decode(&out).unwrap().field_bytes, 1 + 200 + 4);
        assert_eq!(d.size, 0);
    }

    /// A larger SETTINGS_HEADER_TABLE_SIZE (h2load's --header-table-size) lets the encoder grow
    /// its table up to it, and no further; a smaller one bounds the updates to it.
    #[test]
    fn table_size_updates_up_to_the_limit() {
        let update = |n: usize| {
            let mut b = vec![0x20];
            // 5-bit prefix integer (RFC 7541 §5.1).
            if n < 31 {
                b[0] |= n as u8;
            } else {
                b[0] |= 31;
                let mut rest = n - 31;
                while rest >= 128 {
                    b.push((rest % 128) as u8 | 0x80);
                    rest /= 128;
                }
                b.push(rest as u8);
            }
            b.push(0x88); // :status 200
            b
        };
        let mut d = HpackDecoder::with_limit(65_536);
        assert_eq!(d.decode(&update(65_536)).unwrap().status, Some(200));
        assert_eq!(d.max, 65_536);
        assert_eq!(d.decode(&update(65_537)), Err(Invalid));
        let mut d = HpackDecoder::with_limit(0);
        assert_eq!(d.decode(&update(0)).unwrap().status, Some(200));
        assert_eq!(d.decode(&update(1)), Err(Invalid));
        assert_eq!(HpackDecoder::default().decode(&update(4097)), Err(Invalid));
    }

    #[test]
    fn malformed_blocks_are_errors_not_panics() {
        let mut d = HpackDecoder::default();
        for bad in [
            &[0x80][..],               // index 0
            &[0xbf, 0x10],             // index beyond both tables
            &[0x00, 0x05, b'a'],       // name shorter than its length
            &[0x40, 0x81],             // Huffman name, no bytes
            &[0x82, 0x20],             // size update after a field
            &[0x3f, 0xe2, 0x1f],       // size update above what we allow
            &[0x00, 0x81, 0x00, 0x00], // Huffman with zero padding
        ] {
            assert_eq!(d.decode(bad), Err(Invalid), "{bad:02x?}");
        }
    }
}

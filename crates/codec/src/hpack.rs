//! HPACK (RFC 7541) without encoder state: header blocks encoded with the static table and
//! literals that are never indexed (so one block serves every connection and stream), and the
//! decoder both ends use, which hands each field to a callback.

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

/// Why a header block could not be taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HpackError {
    /// Not valid HPACK (RFC 7541): the connection's table can no longer be trusted
    /// (HTTP/2 COMPRESSION_ERROR).
    #[error("invalid HPACK header block")]
    Invalid,
    /// Decoded in full (the table is in step) but its field list is larger than the limit:
    /// the fields past the limit were not passed on.
    #[error("header list larger than the limit")]
    TooLarge,
}

/// One dynamic table entry: `name` then `value` in one buffer.
#[derive(Debug)]
struct Entry {
    bytes: Box<[u8]>,
    name_len: usize,
}

impl Entry {
    fn name(&self) -> &[u8] {
        &self.bytes[..self.name_len]
    }
    fn value(&self) -> &[u8] {
        &self.bytes[self.name_len..]
    }
    /// RFC 7541 §4.1.
    fn size(&self) -> usize {
        self.bytes.len() + 32
    }
}

/// The HPACK decoder of one connection's header blocks (either end): its dynamic table, and
/// scratch buffers for literals, reused from block to block. Fields are handed to a callback as
/// they are decoded; nothing is collected.
#[derive(Debug)]
pub struct HpackDecoder {
    table: VecDeque<Entry>,
    size: usize,
    max: usize,
    /// The largest table size update accepted: our SETTINGS_HEADER_TABLE_SIZE.
    limit: usize,
    name: Vec<u8>,
    value: Vec<u8>,
}

impl Default for HpackDecoder {
    fn default() -> Self {
        HpackDecoder::with_limit(TABLE_SIZE)
    }
}

/// Where a field's name comes from while its value is decoded.
enum Name {
    Static(&'static [u8]),
    Dynamic(usize),
    Literal,
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
            name: Vec::new(),
            value: Vec::new(),
        }
    }

    /// Decode `block`, handing each field to `field` in order while the list's size (RFC 9113
    /// §6.5.2: name, value and 32 bytes per field) stays within `max_list`. The whole block is
    /// always decoded, so that the table stays in step: past the limit, fields are skipped
    /// (an indexed one costs nothing, however large: the HPACK bomb) and the answer is
    /// [`HpackError::TooLarge`].
    pub fn decode(
        &mut self,
        mut block: &[u8],
        max_list: usize,
        mut field: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), HpackError> {
        let mut list = 0usize;
        let mut fields = 0;
        while let Some(&first) = block.first() {
            if first & 0xe0 == 0x20 {
                // Dynamic table size update: only before the first field (RFC 7541 §4.2).
                let (max, n) = int(block, 5)?;
                block = &block[n..];
                if fields > 0 || max > self.limit {
                    return Err(HpackError::Invalid);
                }
                self.max = max;
                self.evict(0);
                continue;
            }
            fields += 1;
            if first & 0x80 != 0 {
                let (i, n) = int(block, 7)?;
                block = &block[n..];
                let (name, value) = self.get(i)?;
                list += name.len() + value.len() + 32;
                if list <= max_list {
                    field(name, value);
                }
                continue;
            }
            let (index, prefix) = match first & 0xc0 {
                0x40 => (true, 6),
                _ => (false, 4),
            };
            let (i, n) = int(block, prefix)?;
            block = &block[n..];
            let name = match i {
                0 => {
                    let n = get_string(block, 7, &mut self.name).ok_or(HpackError::Invalid)?;
                    block = &block[n..];
                    Name::Literal
                }
                i if i <= STATIC.len() => Name::Static(STATIC[i - 1].0.as_bytes()),
                i => {
                    let d = i - 1 - STATIC.len();
                    if d >= self.table.len() {
                        return Err(HpackError::Invalid);
                    }
                    Name::Dynamic(d)
                }
            };
            let n = get_string(block, 7, &mut self.value).ok_or(HpackError::Invalid)?;
            block = &block[n..];
            let name: &[u8] = match name {
                Name::Static(s) => s,
                Name::Dynamic(d) => self.table[d].name(),
                Name::Literal => &self.name,
            };
            list += name.len() + self.value.len() + 32;
            if list <= max_list {
                field(name, &self.value);
            }
            if index {
                let mut bytes = Vec::with_capacity(name.len() + self.value.len());
                bytes.extend_from_slice(name);
                bytes.extend_from_slice(&self.value);
                let name_len = name.len();
                self.insert(Entry {
                    bytes: bytes.into_boxed_slice(),
                    name_len,
                });
            }
        }
        if list > max_list {
            return Err(HpackError::TooLarge);
        }
        Ok(())
    }

    fn get(&self, i: usize) -> Result<(&[u8], &[u8]), HpackError> {
        if i == 0 {
            return Err(HpackError::Invalid);
        }
        if let Some(&(name, value)) = STATIC.get(i - 1) {
            return Ok((name.as_bytes(), value.as_bytes()));
        }
        let e = self
            .table
            .get(i - 1 - STATIC.len())
            .ok_or(HpackError::Invalid)?;
        Ok((e.name(), e.value()))
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

    /// Give back the scratch space decoding grew (a connection turning idle); the table stays.
    pub fn rest(&mut self) {
        self.name = Vec::new();
        self.value = Vec::new();
        self.table.shrink_to_fit();
    }

    /// The bytes the table holds (its entries' strings), for memory accounting.
    pub fn table_bytes(&self) -> usize {
        self.table.iter().map(|e| e.bytes.len()).sum()
    }
}

fn int(buf: &[u8], prefix: u32) -> Result<(usize, usize), HpackError> {
    get_int(buf, prefix).ok_or(HpackError::Invalid)
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

    fn fields(d: &mut HpackDecoder, block: &[u8]) -> Result<Vec<(String, String)>, HpackError> {
        let mut out = Vec::new();
        d.decode(block, usize::MAX, |n, v| {
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
    fn rfc7541_response_examples_keep_the_table_in_step() {
        // Appendix C.6: three responses with Huffman coding and a 256-byte table, where the
        // third refers back to fields the first two inserted and evicted.
        let mut d = HpackDecoder::default();
        fields(&mut d, &hex("3fe1 01")).unwrap(); // size update to 256
        let r1 = fields(
            &mut d,
            &hex(
                "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
                 2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
            ),
        )
        .unwrap();
        assert_eq!(
            r1,
            pairs(&[
                (":status", "302"),
                ("cache-control", "private"),
                ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
                ("location", "https://www.example.com"),
            ])
        );
        assert_eq!(d.size, 222);
        let r2 = fields(&mut d, &hex("4883 640e ff c1 c0 bf")).unwrap();
        assert_eq!(r2[0], (":status".into(), "307".into()));
        assert_eq!(r2[3], ("location".into(), "https://www.example.com".into()));
        assert_eq!(d.size, 222);
        let r3 = fields(
            &mut d,
            &hex(
                "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
                 77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
                 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
            ),
        )
        .unwrap();
        assert_eq!(r3[0], (":status".into(), "200".into()));
        assert_eq!(r3[1], ("cache-control".into(), "private".into()));
        assert_eq!(
            r3[5],
            (
                "set-cookie".into(),
                "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1".into()
            )
        );
        assert_eq!(d.size, 215);
        assert_eq!(d.table.len(), 3);
    }

    #[test]
    fn rfc7541_request_examples_with_indexing() {
        // Appendix C.3: three requests without Huffman coding, each indexing new fields.
        let mut d = HpackDecoder::default();
        let r1 = fields(
            &mut d,
            &hex("8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d"),
        )
        .unwrap();
        assert_eq!(r1[3], (":authority".into(), "www.example.com".into()));
        let r2 = fields(&mut d, &hex("8286 84be 5808 6e6f 2d63 6163 6865")).unwrap();
        assert_eq!(r2[3], (":authority".into(), "www.example.com".into()));
        assert_eq!(r2[4], ("cache-control".into(), "no-cache".into()));
        let r3 = fields(
            &mut d,
            &hex("8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65"),
        )
        .unwrap();
        assert_eq!(r3[3], (":authority".into(), "www.example.com".into()));
        assert_eq!(r3[4], ("custom-key".into(), "custom-value".into()));
        assert_eq!(d.size, 164);
    }

    #[test]
    fn request_blocks_decode_back() {
        let mut block = Vec::new();
        let want = [
            (":method", "GET"),
            (":path", "/?s=1k"),
            ("user-agent", "loadterm"),
            ("x-custom", "v"),
        ];
        for (n, v) in want {
            put_field(&mut block, n.as_bytes(), v.as_bytes());
        }
        assert_eq!(block[0], 0x82); // :method GET, fully indexed
                                    // :path with the static name (index 4), 6 raw bytes.
        assert_eq!(block[1..3], [0x04, 0x06]);
        assert_eq!(
            fields(&mut HpackDecoder::default(), &block),
            Ok(pairs(&want))
        );
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
        // Decoded, not entered in the table.
        let mut d = HpackDecoder::default();
        assert_eq!(fields(&mut d, &out).unwrap()[0].1.len(), 200);
        assert_eq!(d.size, 0);
    }

    /// A larger SETTINGS_HEADER_TABLE_SIZE (h2load's --header-table-size) lets the encoder grow
    /// its table up to it, and no further; a smaller one bounds the updates to it.
    #[test]
    fn table_size_updates_up_to_the_limit() {
        let update = |n: usize| {
            let mut b = Vec::new();
            put_int(&mut b, 0x20, 5, n);
            b.push(0x88); // :status 200
            b
        };
        let mut d = HpackDecoder::with_limit(65_536);
        assert!(fields(&mut d, &update(65_536)).is_ok());
        assert_eq!(d.max, 65_536);
        assert_eq!(fields(&mut d, &update(65_537)), Err(HpackError::Invalid));
        let mut d = HpackDecoder::with_limit(0);
        assert!(fields(&mut d, &update(0)).is_ok());
        assert_eq!(fields(&mut d, &update(1)), Err(HpackError::Invalid));
        assert_eq!(
            fields(&mut HpackDecoder::default(), &update(4097)),
            Err(HpackError::Invalid)
        );
    }

    /// Past the list limit fields are skipped, but the block is decoded in full: a field it
    /// indexes is there for the next block (an HPACK bomb's references cost nothing).
    #[test]
    fn a_list_over_the_limit_is_skipped_and_the_table_kept_in_step() {
        let mut d = HpackDecoder::default();
        let mut block = hex("400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65");
        block.extend(std::iter::repeat_n(0xbe, 10_000));
        let mut seen = 0;
        assert_eq!(
            d.decode(&block, 1000, |_, _| seen += 1),
            Err(HpackError::TooLarge)
        );
        assert_eq!(seen, 1000 / (10 + 12 + 32));
        assert_eq!(
            fields(&mut d, &[0xbe]).unwrap(),
            pairs(&[("custom-key", "custom-value")])
        );
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
            &[0x7f, 0x10, 0x00],       // literal name index beyond both tables
        ] {
            assert_eq!(fields(&mut d, bad), Err(HpackError::Invalid), "{bad:02x?}");
        }
    }
}

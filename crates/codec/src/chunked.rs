//! HTTP/1.1 chunked transfer coding (RFC 9112 §7.1), sans-I/O, for request bodies on the server
//! and response bodies on the load client.
//!
//! Strict on purpose: this backend sits behind proxies, and every leniency a proxy does not
//! share (bare LF, junk after the size, odd extensions, folded trailers) lets one party see a
//! body end where the other does not — request smuggling. The grammar accepted is exactly
//!
//! ```text
//! chunked-body = *chunk last-chunk trailer-section CRLF
//! chunk        = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
//! chunk-size   = 1*16HEXDIG
//! last-chunk   = 1*16("0") [ chunk-ext ] CRLF
//! chunk-ext    = *( BWS ";" BWS token [ BWS "=" BWS ( token / quoted-string ) ] )
//! trailer-section = *( token ":" field-value CRLF )
//! ```
//!
//! with no bare LF anywhere (RFC 9112 tolerates it in the message head only), no CTL but HTAB
//! in extension and trailer values, and bounds on extension and trailer bytes.

use std::fmt;

/// Most extension bytes (everything between the size and its CRLF) one chunk line may carry.
pub const MAX_EXTENSIONS: usize = 4096;
/// Most bytes the trailer section may take, its final CRLF included.
pub const MAX_TRAILERS: usize = 16 << 10;

/// What was wrong with a chunked body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkError {
    /// A chunk line that does not start with a hex digit, or a size followed by neither an
    /// extension nor CRLF.
    BadSize,
    /// A chunk size of more than 16 hex digits.
    SizeTooLong,
    /// A chunk extension that breaks the grammar (bare `;`, not a token, CTL, stray whitespace).
    BadExtension,
    /// More than [`MAX_EXTENSIONS`] extension bytes on one chunk line.
    ExtensionTooLong,
    /// A line ended by LF alone.
    BareLf,
    /// A CR not followed by LF, or chunk data not followed by CRLF.
    MissingCrlf,
    /// A trailer line that is not `token ":" field-value` (obs-fold, CTL, empty name).
    BadTrailer,
    /// A trailer section of more than [`MAX_TRAILERS`] bytes.
    TrailersTooLarge,
}

impl fmt::Display for ChunkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ChunkError::BadSize => "chunk size is not hex digits followed by CRLF or ';'",
            ChunkError::SizeTooLong => "chunk size has more than 16 hex digits",
            ChunkError::BadExtension => "malformed chunk extension",
            ChunkError::ExtensionTooLong => "chunk extensions longer than MAX_EXTENSIONS",
            ChunkError::BareLf => "line ended by a bare LF instead of CRLF",
            ChunkError::MissingCrlf => "CR not followed by LF, or chunk data not followed by CRLF",
            ChunkError::BadTrailer => "malformed trailer field line",
            ChunkError::TrailersTooLarge => "trailer section larger than MAX_TRAILERS",
        })
    }
}

impl std::error::Error for ChunkError {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Hex digits of a chunk size (`digits` so far, 0 at the start of the line).
    Size,
    /// Whitespace after the size: only `;` may follow.
    SizeWs,
    /// After `;`, before the extension name.
    ExtName0,
    ExtName,
    /// Whitespace after a name: `=` or `;` must follow.
    ExtNameWs,
    /// After `=`, before the value.
    ExtValue0,
    ExtToken,
    ExtQuoted,
    ExtQuotedPair,
    /// After a complete value: `;`, whitespace before `;`, or CR.
    ExtValueEnd,
    /// Whitespace after a value: only `;` may follow.
    ExtValueWs,
    /// CR seen on the size line.
    SizeLf,
    /// Inside chunk data (`left` bytes to go).
    Data,
    DataCr,
    DataLf,
    /// At the start of a trailer line or the final empty line.
    TrailerStart,
    TrailerName,
    TrailerValue,
    TrailerLf,
    FinalLf,
    Done,
    Failed(ChunkError),
}

/// Decodes (validates and discards) one chunked body fed in arbitrary pieces.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: State,
    /// The chunk size being read, then the chunk data left.
    left: u64,
    digits: u8,
    /// Extension bytes of the current chunk line, or bytes of the trailer section.
    line: usize,
    data: u64,
}

impl Default for ChunkedDecoder {
    fn default() -> ChunkedDecoder {
        ChunkedDecoder::new()
    }
}

/// [`is_tchar`](crate::syntax::is_tchar) as a table: one load a byte on the extension path.
const TCHAR: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = crate::syntax::is_tchar(i as u8);
        i += 1;
    }
    t
};

fn is_tchar(b: u8) -> bool {
    TCHAR[b as usize]
}

/// HTAB, SP, VCHAR or obs-text: what a field value and a quoted-pair may hold.
fn is_field_byte(b: u8) -> bool {
    b == b'\t' || (b >= b' ' && b != 0x7f)
}

fn hex(b: u8) -> Option<u64> {
    match b {
        b'0'..=b'9' => Some((b - b'0') as u64),
        b'a'..=b'f' => Some((b - b'a' + 10) as u64),
        b'A'..=b'F' => Some((b - b'A' + 10) as u64),
        _ => None,
    }
}

impl ChunkedDecoder {
    pub fn new() -> ChunkedDecoder {
        ChunkedDecoder {
            state: State::Size,
            left: 0,
            digits: 0,
            line: 0,
            data: 0,
        }
    }

    /// The last chunk and the trailer section have been read.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Chunk-data bytes seen so far.
    pub fn data_bytes(&self) -> u64 {
        self.data
    }

    /// Consume body bytes from `input`; returns how many belong to the body, stopping exactly at
    /// its end (bytes after it, a pipelined request for instance, are left alone). After an
    /// error every call returns that error again.
    pub fn feed(&mut self, input: &[u8]) -> Result<usize, ChunkError> {
        let r = self.run(input);
        if let Err(e) = r {
            self.state = State::Failed(e);
        }
        r
    }

    // A state machine: kept whole so that every transition of `State` reads in one match.
    fn run(&mut self, input: &[u8]) -> Result<usize, ChunkError> {
        use ChunkError::*;
        use State::*;
        let mut i = 0;
        while i < input.len() {
            // Chunk data in one step: the only part of a body that is large.
            if self.state == Data {
                let n = self.left.min((input.len() - i) as u64);
                i += n as usize;
                self.left -= n;
                self.data += n;
                if self.left == 0 {
                    self.state = DataCr;
                }
                continue;
            }
            let b = input[i];
            i += 1;
            self.state = match self.state {
                Size => match hex(b) {
                    Some(_) if self.digits == 16 => return Err(SizeTooLong),
                    Some(d) => {
                        self.left = self.left << 4 | d;
                        self.digits += 1;
                        Size
                    }
                    None if self.digits == 0 => return Err(BadSize),
                    None => {
                        self.line = 0;
                        match b {
                            b'\r' => SizeLf,
                            b'\n' => return Err(BareLf),
                            b';' => self.ext(ExtName0)?,
                            b' ' | b'\t' => self.ext(SizeWs)?,
                            _ => return Err(BadSize),
                        }
                    }
                },
                SizeWs => match b {
                    b' ' | b'\t' => self.ext(SizeWs)?,
                    b';' => self.ext(ExtName0)?,
                    _ => return Err(BadSize),
                },
                ExtName0 => match b {
                    b' ' | b'\t' => self.ext(ExtName0)?,
                    b if is_tchar(b) => self.ext(ExtName)?,
                    _ => return Err(BadExtension),
                },
                ExtName => match b {
                    b if is_tchar(b) => self.ext(ExtName)?,
                    b'=' => self.ext(ExtValue0)?,
                    b';' => self.ext(ExtName0)?,
                    b' ' | b'\t' => self.ext(ExtNameWs)?,
                    b'\r' => SizeLf,
                    b'\n' => return Err(BareLf),
                    _ => return Err(BadExtension),
                },
                ExtNameWs => match b {
                    b' ' | b'\t' => self.ext(ExtNameWs)?,
                    b'=' => self.ext(ExtValue0)?,
                    b';' => self.ext(ExtName0)?,
                    _ => return Err(BadExtension),
                },
                ExtValue0 => match b {
                    b' ' | b'\t' => self.ext(ExtValue0)?,
                    b'"' => self.ext(ExtQuoted)?,
                    b if is_tchar(b) => self.ext(ExtToken)?,
                    _ => return Err(BadExtension),
                },
                ExtToken => match b {
                    b if is_tchar(b) => self.ext(ExtToken)?,
                    b';' => self.ext(ExtName0)?,
                    b' ' | b'\t' => self.ext(ExtValueWs)?,
                    b'\r' => SizeLf,
                    b'\n' => return Err(BareLf),
                    _ => return Err(BadExtension),
                },
                ExtQuoted => match b {
                    b'"' => self.ext(ExtValueEnd)?,
                    b'\\' => self.ext(ExtQuotedPair)?,
                    b if is_field_byte(b) => self.ext(ExtQuoted)?,
                    _ => return Err(BadExtension),
                },
                ExtQuotedPair => match b {
                    b if is_field_byte(b) => self.ext(ExtQuoted)?,
                    _ => return Err(BadExtension),
                },
                ExtValueEnd => match b {
                    b';' => self.ext(ExtName0)?,
                    b' ' | b'\t' => self.ext(ExtValueWs)?,
                    b'\r' => SizeLf,
                    b'\n' => return Err(BareLf),
                    _ => return Err(BadExtension),
                },
                ExtValueWs => match b {
                    b' ' | b'\t' => self.ext(ExtValueWs)?,
                    b';' => self.ext(ExtName0)?,
                    _ => return Err(BadExtension),
                },
                SizeLf => match b {
                    b'\n' if self.left == 0 => {
                        self.line = 0;
                        TrailerStart
                    }
                    b'\n' => Data,
                    _ => return Err(MissingCrlf),
                },
                Data => unreachable!("chunk data is consumed above"),
                DataCr => match b {
                    b'\r' => DataLf,
                    b'\n' => return Err(BareLf),
                    _ => return Err(MissingCrlf),
                },
                DataLf => match b {
                    b'\n' => {
                        self.digits = 0;
                        Size
                    }
                    _ => return Err(MissingCrlf),
                },
                TrailerStart => match b {
                    b'\r' => self.trailer(FinalLf)?,
                    b'\n' => return Err(BareLf),
                    b if is_tchar(b) => self.trailer(TrailerName)?,
                    // A leading SP/HTAB is obs-fold; an empty name is no field line.
                    _ => return Err(BadTrailer),
                },
                TrailerName => match b {
                    b':' => self.trailer(TrailerValue)?,
                    b if is_tchar(b) => self.trailer(TrailerName)?,
                    // Including whitespace before the colon (RFC 9112 §5.1).
                    _ => return Err(BadTrailer),
                },
                TrailerValue => match b {
                    b'\r' => self.trailer(TrailerLf)?,
                    b'\n' => return Err(BareLf),
                    b if is_field_byte(b) => self.trailer(TrailerValue)?,
                    _ => return Err(BadTrailer),
                },
                TrailerLf => match b {
                    b'\n' => self.trailer(TrailerStart)?,
                    _ => return Err(MissingCrlf),
                },
                FinalLf => match b {
                    b'\n' => {
                        self.state = Done;
                        return Ok(i);
                    }
                    _ => return Err(MissingCrlf),
                },
                Done => return Ok(i - 1),
                Failed(e) => return Err(e),
            };
        }
        match self.state {
            Failed(e) => Err(e),
            _ => Ok(i),
        }
    }

    /// Count one extension byte and move to `next`.
    fn ext(&mut self, next: State) -> Result<State, ChunkError> {
        self.line += 1;
        if self.line > MAX_EXTENSIONS {
            return Err(ChunkError::ExtensionTooLong);
        }
        Ok(next)
    }

    /// Count one trailer-section byte and move to `next`.
    fn trailer(&mut self, next: State) -> Result<State, ChunkError> {
        self.line += 1;
        if self.line > MAX_TRAILERS {
            return Err(ChunkError::TrailersTooLarge);
        }
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NEXT: &[u8] = b"GET / HTTP/1.1\r\n\r\n";

    /// Feed `body` then a pipelined request, split at every position: the decoder must end
    /// exactly at the body's end with `data` payload bytes, whatever the split.
    fn accepts(body: &[u8], data: u64) {
        let all = [body, NEXT].concat();
        for split in splits(all.len()) {
            let mut d = ChunkedDecoder::new();
            let (a, b) = all.split_at(split);
            let used_a = d
                .feed(a)
                .unwrap_or_else(|e| panic!("{:?} split {split}: {e}", show(body)));
            let used_b = d.feed(b).unwrap();
            assert!(d.is_done(), "{:?} split {split}: not done", show(body));
            assert_eq!(
                used_a + used_b,
                body.len(),
                "{:?} split {split}",
                show(body)
            );
            assert_eq!(d.data_bytes(), data, "{:?} split {split}", show(body));
            assert_eq!(d.feed(NEXT), Ok(0), "done decoders take nothing more");
        }
        // Byte by byte.
        let mut d = ChunkedDecoder::new();
        let used: usize = all.iter().map(|b| d.feed(&[*b]).unwrap()).sum();
        assert_eq!(used, body.len(), "{:?} byte by byte", show(body));
    }

    /// `input` must fail with `want` however it is split (the error may wait for the bytes
    /// that reveal it).
    fn rejects(input: &[u8], want: ChunkError, why: &str) {
        for split in splits(input.len()) {
            let mut d = ChunkedDecoder::new();
            let (a, b) = input.split_at(split);
            let got = d.feed(a).and_then(|_| d.feed(b));
            assert_eq!(got, Err(want), "{why}: {:?} split {split}", show(input));
            assert_eq!(d.feed(b"0\r\n\r\n"), Err(want), "{why}: errors stick");
            assert!(!d.is_done());
        }
    }

    /// Every split position of short inputs; a few hundred spread over long ones.
    fn splits(len: usize) -> impl Iterator<Item = usize> {
        (0..=len).step_by((len / 256).max(1)).chain([len])
    }

    fn show(b: &[u8]) -> String {
        String::from_utf8_lossy(b).into_owned()
    }

    #[test]
    fn valid_bodies_at_every_split() {
        accepts(b"0\r\n\r\n", 0);
        accepts(b"5\r\nhello\r\n0\r\n\r\n", 5);
        accepts(b"5\r\nhello\r\na\r\n0123456789\r\n0\r\n\r\n", 15);
        accepts(b"0000000000000005\r\nhello\r\n0\r\n\r\n", 5);
        accepts(b"0000000000000000\r\n\r\n", 0);
        accepts(b"5;a\r\nhello\r\n0;b=c\r\n\r\n", 5);
        accepts(
            b"5 ;a = b ; c=\"q \\\" \t\x80\"\t;d\r\nhello\r\n0\r\n\r\n",
            5,
        );
        accepts(b"5;name=\"\"\r\nhello\r\n0\r\n\r\n", 5);
        accepts(b"3\r\nabc\r\n0\r\nT: x\r\nEmpty:\r\nU:  a b\t\r\n\r\n", 3);
        accepts(b"1\r\n\n\r\n0\r\n\r\n", 1);
    }

    #[test]
    fn sizes_at_the_bound() {
        // 16 digits is the most; the value is whatever fits.
        let mut d = ChunkedDecoder::new();
        assert_eq!(d.feed(b"FFFFFFFFFFFFFFFF\r\nab"), Ok(20));
        assert!(!d.is_done());
        assert_eq!(d.data_bytes(), 2);
    }

    #[test]
    fn rejects_bad_sizes() {
        use ChunkError::*;
        rejects(b"x\r\n", BadSize, "not hex");
        rejects(b"\r\n", BadSize, "empty size");
        rejects(b";a\r\n", BadSize, "extension without size");
        rejects(b"0x5\r\n", BadSize, "0x prefix");
        rejects(b"+5\r\n", BadSize, "sign");
        rejects(b"5 \r\n", BadSize, "whitespace after the size, no ';'");
        rejects(b"5\t\r\n", BadSize, "tab after the size, no ';'");
        rejects(b"5 5\r\n", BadSize, "whitespace inside the size");
        rejects(b"11111111111111111\r\n", SizeTooLong, "17 digits");
        rejects(b"00000000000000000\r\n", SizeTooLong, "17 zero digits");
        rejects(b"5\r\nhello\r\nG\r\n", BadSize, "second size not hex");
    }

    #[test]
    fn rejects_bad_extensions() {
        use ChunkError::*;
        rejects(b"5;\r\n", BadExtension, "bare ';'");
        rejects(b"5; \r\n", BadExtension, "';' and whitespace only");
        rejects(b"5;;a\r\n", BadExtension, "empty name");
        rejects(b"5;bad[=x\r\n", BadExtension, "'[' in the name");
        rejects(b"5;a=\r\n", BadExtension, "empty value");
        rejects(b"5;a=b[\r\n", BadExtension, "'[' in a token value");
        rejects(
            b"5;a \r\n",
            BadExtension,
            "whitespace after a name, then CRLF",
        );
        rejects(
            b"5;a=b \r\n",
            BadExtension,
            "whitespace after a value, then CRLF",
        );
        rejects(
            b"5;a=\"b\" \r\n",
            BadExtension,
            "whitespace after a quoted value, then CRLF",
        );
        rejects(b"5;a=\"b\"c\r\n", BadExtension, "junk after a quoted value");
        rejects(b"5;a=\"b\x00\"\r\n", BadExtension, "NUL in a quoted value");
        rejects(b"5;a=\"b\x01\"\r\n", BadExtension, "CTL in a quoted value");
        rejects(b"5;a=\"b\x7f\"\r\n", BadExtension, "DEL in a quoted value");
        rejects(b"5;a=\"b\\\x00\"\r\n", BadExtension, "NUL in a quoted-pair");
        rejects(
            b"5;a=\"b\r\n",
            BadExtension,
            "CR in an unterminated quoted value",
        );
        rejects(b"5;a\x00\r\n", BadExtension, "NUL after a name");
        rejects(b"5;a=b\x00\r\n", BadExtension, "NUL after a token value");
        rejects(b"5;\x01a\r\n", BadExtension, "CTL before a name");
        rejects(b"5;a\x0bb\r\n", BadExtension, "VT in a name");
        let mut long = b"5;a=".to_vec();
        long.resize(MAX_EXTENSIONS + 1, b'b');
        long.extend_from_slice(b"\r\nhello\r\n0\r\n\r\n");
        let mut d = ChunkedDecoder::new();
        assert_eq!(
            d.feed(&long[..MAX_EXTENSIONS + 1]),
            Ok(MAX_EXTENSIONS + 1),
            "exactly MAX_EXTENSIONS extension bytes pass"
        );
        rejects(
            &[&long[..MAX_EXTENSIONS + 1], b"b\r\n"].concat(),
            ExtensionTooLong,
            "one byte beyond MAX_EXTENSIONS",
        );
        rejects(
            &[b"5".as_ref(), &[b' '; MAX_EXTENSIONS + 1]].concat(),
            ExtensionTooLong,
            "whitespace counts as extension bytes",
        );
    }

    #[test]
    fn rejects_bare_lf_and_lone_cr() {
        use ChunkError::*;
        rejects(b"5\nhello\r\n0\r\n\r\n", BareLf, "bare LF after the size");
        rejects(b"5;a=b\nhello", BareLf, "bare LF after an extension");
        rejects(b"5;a\n", BareLf, "bare LF after an extension name");
        rejects(b"5;a=\"b\"\n", BareLf, "bare LF after a quoted value");
        rejects(
            b"5\r\nhello\n0\r\n\r\n",
            BareLf,
            "bare LF after the chunk data",
        );
        rejects(b"0\r\nT: x\n\r\n", BareLf, "bare LF after a trailer line");
        rejects(b"0\r\n\n", BareLf, "bare LF as the final empty line");
        rejects(b"0\n\n", BareLf, "bare LF after the last chunk");
        rejects(
            b"5\rhello",
            MissingCrlf,
            "CR not followed by LF on the size line",
        );
        rejects(b"5\r\nhelloX\r\n", MissingCrlf, "data longer than its size");
        rejects(
            b"5\r\nhello\rX",
            MissingCrlf,
            "CR not followed by LF after data",
        );
        rejects(
            b"0\r\nT: x\rX",
            MissingCrlf,
            "CR not followed by LF in the trailers",
        );
        rejects(b"0\r\n\rX", MissingCrlf, "CR not followed by LF at the end");
    }

    #[test]
    fn rejects_bad_trailers() {
        use ChunkError::*;
        rejects(b"0\r\nT: x\r\n folded\r\n\r\n", BadTrailer, "obs-fold (SP)");
        rejects(
            b"0\r\nT: x\r\n\tfolded\r\n\r\n",
            BadTrailer,
            "obs-fold (HTAB)",
        );
        rejects(
            b"0\r\n T: x\r\n\r\n",
            BadTrailer,
            "first line starts with SP",
        );
        rejects(
            b"0\r\nT : x\r\n\r\n",
            BadTrailer,
            "whitespace before the colon",
        );
        rejects(b"0\r\n: x\r\n\r\n", BadTrailer, "empty name");
        rejects(b"0\r\nT\r\n\r\n", BadTrailer, "no colon");
        rejects(b"0\r\nT[: x\r\n\r\n", BadTrailer, "name not a token");
        rejects(b"0\r\nT: a\x00b\r\n\r\n", BadTrailer, "NUL in a value");
        rejects(b"0\r\nT: a\x1bb\r\n\r\n", BadTrailer, "CTL in a value");
        rejects(b"0\r\nT: a\x7f\r\n\r\n", BadTrailer, "DEL in a value");
        let mut big = b"0\r\nT: ".to_vec();
        big.resize(3 + MAX_TRAILERS - 2, b'v');
        let ok = [big.as_slice(), b"\r\n"].concat();
        let mut d = ChunkedDecoder::new();
        assert_eq!(
            d.feed(&ok),
            Ok(ok.len()),
            "trailers of MAX_TRAILERS - 2 bytes"
        );
        rejects(
            &[ok.as_slice(), b"\r\n"].concat(),
            TrailersTooLarge,
            "final CRLF beyond MAX_TRAILERS",
        );
        let mut ok = big.clone();
        ok.truncate(ok.len() - 2);
        ok.extend_from_slice(b"\r\n\r\n");
        accepts(&ok, 0);
    }

    #[test]
    fn errors_say_what_was_wrong() {
        assert_eq!(
            ChunkError::BareLf.to_string(),
            "line ended by a bare LF instead of CRLF"
        );
        let e: &dyn std::error::Error = &ChunkError::BadTrailer;
        assert_eq!(e.to_string(), "malformed trailer field line");
    }

    /// xorshift64: enough randomness for splits and mutations without a dependency.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Feed `input` in random pieces; the outcome must not depend on the pieces.
    fn feed_pieces(input: &[u8], rng: &mut Rng) -> Result<(usize, bool, u64), ChunkError> {
        let mut d = ChunkedDecoder::new();
        let (mut at, mut used) = (0, 0);
        while at < input.len() {
            let n = 1 + rng.below(input.len() - at);
            let u = d.feed(&input[at..at + n])?;
            assert!(u <= n);
            used += u;
            if u < n {
                assert!(d.is_done(), "only the end of the body stops short");
                break;
            }
            at += n;
        }
        Ok((used, d.is_done(), d.data_bytes()))
    }

    #[test]
    fn random_bodies_splits_and_mutations() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let pieces: [&[u8]; 12] = [
            b"0", b"a", b"F", b"\r", b"\n", b";", b"=", b" ", b"\"", b"x:", b"\x00", b"\\",
        ];
        for round in 0..20_000 {
            // A valid body: random chunks, extensions and trailers.
            let mut body = Vec::new();
            let mut data = 0u64;
            for _ in 0..rng.below(4) {
                let len = 1 + rng.below(40);
                body.extend_from_slice(format!("{len:X}\r\n").as_bytes());
                if rng.below(3) == 0 {
                    body.truncate(body.len() - 2);
                    body.extend_from_slice(b" ; n=\"v\\\"\" ;m\r\n");
                }
                body.resize(body.len() + len, b'\r');
                body.extend_from_slice(b"\r\n");
                data += len as u64;
            }
            body.extend_from_slice(b"0\r\n");
            if rng.below(2) == 0 {
                body.extend_from_slice(b"X-T: a\tb \r\n");
            }
            body.extend_from_slice(b"\r\n");
            let whole = [body.as_slice(), NEXT].concat();
            assert_eq!(
                feed_pieces(&whole, &mut rng),
                Ok((body.len(), true, data)),
                "round {round}: {:?}",
                show(&body)
            );
            // Mutated: whatever comes out, it is the same for any split, and never a panic.
            let mut m = whole.clone();
            for _ in 0..1 + rng.below(3) {
                let i = rng.below(m.len());
                match rng.below(3) {
                    0 => m[i] = rng.next() as u8,
                    1 => {
                        m.remove(i);
                    }
                    _ => {
                        let p = pieces[rng.below(pieces.len())];
                        m.splice(i..i, p.iter().copied());
                    }
                }
            }
            let mut d = ChunkedDecoder::new();
            let once = d.feed(&m).map(|u| (u, d.is_done(), d.data_bytes()));
            assert_eq!(
                once,
                feed_pieces(&m, &mut rng),
                "round {round}: {:?}",
                show(&m)
            );
        }
    }
}

//! The query-string grammar (haterm's: docs/COMPATIBILITY.md), with the upstream quirks fixed:
//! the query starts at the *first* `?`, parsing never reads past the given bytes, arithmetic is
//! 128-bit and saturating (see [`scale`]).

use crate::dist::{self, DistError};
use crate::Rng;
use std::fmt;

/// Connection mode forced by `C`/`K` (last one wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConnForce {
    #[default]
    None,
    Close,
    KeepAlive,
}

/// Raw parameter values before validation (signed, as the grammar allows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Params {
    pub size: i64,
    pub status: i64,
    pub delay_ms: i64,
    pub cacheable: bool,
    pub drain_after: bool,
    pub conn: ConnForce,
    pub chunked: bool,
    pub zero_copy: bool,
    pub random: bool,
    /// `k>=2`: httpterm's one-byte chunks.
    pub byte_chunks: bool,
    /// `b`: content-length to advertise; -1 (the default) for the real one.
    pub length: i64,
    /// `B`: body bytes to read before responding; negative (the default) for all of them.
    pub body_limit: i64,
    /// `P`: milliseconds to pause after the response.
    pub pause_ms: i64,
    /// `w`: milliseconds to wait for the next request on the connection (0: the default).
    pub idle_ms: i64,
    /// `e`: send an ETag, with this value mixed in.
    pub etag: Option<i64>,
    /// `p`: send the body in pieces of at most this many bytes.
    pub pieces: Option<i64>,
    /// One of `b B P w e p` was given (else their validation is skipped).
    pub httpterm: bool,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            size: 0,
            status: 200,
            delay_ms: 0,
            cacheable: true,
            drain_after: false,
            conn: ConnForce::None,
            chunked: false,
            zero_copy: true,
            random: false,
            byte_chunks: false,
            length: -1,
            body_limit: -1,
            pause_ms: 0,
            idle_ms: 0,
            etag: None,
            pieces: None,
            httpterm: false,
        }
    }
}

/// Why a request's parameters were refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanError {
    Status(i64),
    Size(i64),
    Delay(i64),
    /// `b` below -1.
    Length(i64),
    /// `P` or `w` (the key) above [`crate::MAX_DELAY_MS`].
    Wait(u8, i64),
    /// `p` below 1.
    Pieces(i64),
    /// A distribution of `t`, `s` or `r` (the key) that does not parse.
    Distribution(u8, DistError),
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanError::Status(v) => write!(f, "r={v}: the status must be within 100..=999"),
            PlanError::Size(v) => write!(f, "s={v}: the size must not be negative"),
            PlanError::Delay(v) => write!(
                f,
                "t={v}: the delay must not exceed {} ms",
                crate::MAX_DELAY_MS
            ),
            PlanError::Length(v) => write!(
                f,
                "b={v}: the advertised length must be -1 (the real one) or a length >= 0"
            ),
            PlanError::Wait(key, v) => write!(
                f,
                "{}={v}: the time must be within 0..={} ms",
                *key as char,
                crate::MAX_DELAY_MS
            ),
            PlanError::Pieces(v) => write!(f, "p={v}: the largest piece must be >= 1 byte"),
            PlanError::Distribution(key, e) => write!(
                f,
                "{}: {e}; accepted form: {}, at most {} entries",
                *key as char,
                dist::form(*key),
                dist::MAX_ENTRIES
            ),
        }
    }
}

impl std::error::Error for PlanError {}

/// The bytes after the first `?` of the target, or `None` without a `?`.
pub fn locate(target: &[u8]) -> Option<&[u8]> {
    let q = target.iter().position(|&b| b == b'?')?;
    Some(&target[q + 1..])
}

/// An empty query (`/?`) or one starting with `h` not followed by `=` (httpterm's `/?h`).
pub fn is_help(query: &[u8]) -> bool {
    match query {
        [] => true,
        [b'h'] => true,
        [b'h', next, ..] => *next != b'=',
        _ => false,
    }
}

fn is_delimiter(b: u8) -> bool {
    matches!(b, b'&' | b';' | b'/' | b'?' | b',')
}

/// Apply every `X=<num>[kmgr]*` found in `query` to `params`. Parsing stops silently at the
/// first thing that is not of that form, as in haterm; values are validated later. A `t`, `s`
/// or `r` written as a distribution (`t=1ms:90,1s:10`, see [`dist`]) gets one value drawn from
/// it; a distribution that does not parse is the only error.
pub fn parse_into(query: &[u8], params: &mut Params, rng: &mut Rng) -> Result<(), PlanError> {
    let mut rest = query;
    while rest.len() >= 2 && rest[1] == b'=' {
        let key = rest[0];
        let Some((raw, used)) = strtol(&rest[2..]) else {
            break;
        };
        let mut pos = 2 + used;
        let mut shift = 0u32;
        let mut random = false;
        while let Some(&c) = rest.get(pos) {
            match c {
                b'k' | b'K' => shift += 10,
                b'm' | b'M' => shift += 20,
                b'g' | b'G' => shift += 30,
                b'r' | b'R' => random = true,
                _ => break,
            }
            pos += 1;
        }
        // Only a value the number grammar cannot finish is looked at again: plain values cost
        // nothing more.
        if dist::starts_here(key, rest.get(pos).copied()) {
            let (v, used) =
                dist::draw(key, &rest[2..], rng).map_err(|e| PlanError::Distribution(key, e))?;
            pos = 2 + used;
            apply(key, v, 0, params);
        } else {
            let v = if random { randomize(raw, rng) } else { raw };
            apply(key, v, shift, params);
        }
        match rest.get(pos) {
            // Spaces after a delimiter: a repeated `x-loadterm` field's values are joined
            // with ", " (`loadterm_exchange::HeadBuilder`). A target holds none.
            Some(&d) if is_delimiter(d) => {
                rest = &rest[pos + 1..];
                while let [b' ' | b'\t', tail @ ..] = rest {
                    rest = tail;
                }
            }
            _ => break,
        }
    }
    Ok(())
}

fn apply(key: u8, v: i64, shift: u32, p: &mut Params) {
    match key {
        b's' => p.size = scale(v, shift),
        b'r' => p.status = scale(v, shift),
        b't' => p.delay_ms = scale(v, shift),
        b'c' => p.cacheable = v >= 1,
        b'A' => p.drain_after = v > 0,
        b'C' => {
            p.conn = if v != 0 {
                ConnForce::Close
            } else {
                ConnForce::KeepAlive
            }
        }
        b'K' => {
            p.conn = if v != 0 {
                ConnForce::KeepAlive
            } else {
                ConnForce::Close
            }
        }
        b'k' => {
            p.chunked = v > 0;
            p.byte_chunks = v >= 2;
        }
        b'S' => p.zero_copy = v >= 1,
        b'R' => p.random = v > 0,
        b'b' | b'B' | b'P' | b'w' | b'e' | b'p' => {
            p.httpterm = true;
            match key {
                b'b' => p.length = v,
                b'B' => p.body_limit = v,
                b'P' => p.pause_ms = v,
                b'w' => p.idle_ms = v,
                b'e' => p.etag = Some(v),
                _ => p.pieces = Some(v),
            }
        }
        _ => {}
    }
}

/// `v << shift` without overflow: the result saturates to the i64 range (haterm's shift
/// overflows; `1kkkkkkk`, a shift of 70, gives `i64::MAX` here instead of 64).
pub fn scale(v: i64, shift: u32) -> i64 {
    if v == 0 {
        return 0;
    }
    if shift >= 64 {
        return if v > 0 { i64::MAX } else { i64::MIN };
    }
    let wide = (v as i128) << shift;
    wide.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

/// `floor(v * U / (2^32 - 1))` with U uniform on [1, 2^32-1], in 128-bit arithmetic: uniform
/// on [0, v] (or [v, 0]), applied before the shift as in haterm.
fn randomize(v: i64, rng: &mut Rng) -> i64 {
    let u = rng.next_u32() as i128;
    ((v as i128 * u) / u32::MAX as i128) as i64
}

/// C `strtol(s, &end, 0)` on a bounded slice: optional whitespace and sign, `0x` hex,
/// leading-`0` octal, decimal otherwise; saturates on overflow. Returns the value and the
/// bytes consumed, or `None` when no digit was found.
pub fn strtol(s: &[u8]) -> Option<(i64, usize)> {
    let mut i = 0;
    while i < s.len() && matches!(s[i], b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r') {
        i += 1;
    }
    let mut negative = false;
    if i < s.len() && (s[i] == b'+' || s[i] == b'-') {
        negative = s[i] == b'-';
        i += 1;
    }
    let (radix, start) = if s.get(i) == Some(&b'0')
        && matches!(s.get(i + 1), Some(b'x' | b'X'))
        && s.get(i + 2).is_some_and(|c| c.is_ascii_hexdigit())
    {
        (16, i + 2)
    } else if s.get(i) == Some(&b'0') {
        (8, i)
    } else {
        (10, i)
    };
    let mut acc: i128 = 0;
    let mut j = start;
    while let Some(d) = s.get(j).and_then(|&c| (c as char).to_digit(radix)) {
        // Stop growing once saturated; keep consuming digits like strtol does.
        if acc <= i64::MAX as i128 + 1 {
            acc = acc * radix as i128 + d as i128;
        }
        j += 1;
    }
    if j == start {
        return None;
    }
    let v = if negative { -acc } else { acc };
    Some((v.clamp(i64::MIN as i128, i64::MAX as i128) as i64, j))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(q: &str) -> Params {
        let mut p = Params::default();
        parse_into(q.as_bytes(), &mut p, &mut Rng::new(7)).unwrap();
        p
    }

    #[test]
    fn strtol_forms() {
        assert_eq!(strtol(b"0x10"), Some((16, 4)));
        assert_eq!(strtol(b"010"), Some((8, 3)));
        assert_eq!(strtol(b"0"), Some((0, 1)));
        assert_eq!(strtol(b"0x"), Some((0, 1)));
        assert_eq!(strtol(b"08"), Some((0, 1)));
        assert_eq!(strtol(b" -12k"), Some((-12, 4)));
        assert_eq!(strtol(b"+7"), Some((7, 2)));
        assert_eq!(strtol(b"abc"), None);
        assert_eq!(strtol(b""), None);
        assert_eq!(strtol(b"-"), None);
        assert_eq!(strtol(b"99999999999999999999"), Some((i64::MAX, 20)));
        assert_eq!(strtol(b"-99999999999999999999"), Some((i64::MIN, 21)));
    }

    #[test]
    fn haterm_vectors() {
        assert_eq!(parse("s=0x10").size, 16);
        assert_eq!(parse("s=010").size, 8);
        assert_eq!(parse("s=1kk").size, 1 << 20);
        assert_eq!(parse("s=1km").size, 1 << 30);
        assert_eq!(parse("s=1kkkkkk").size, 1 << 60);
        assert_eq!(parse("s=1kkkkkkk").size, i64::MAX);
        assert_eq!(parse("s=99999999999999999999").size, i64::MAX);
        assert_eq!(parse("x=abc&s=10").size, 0);
        assert_eq!(parse("z=5&s=10").size, 10);
        assert!(parse("s=10x&c=0").cacheable);
        assert!(parse("s=10&&c=0").cacheable);
        assert_eq!(parse("&s=10").size, 0);
        assert_eq!(parse("foo=1&s=10").size, 0);
        assert_eq!(parse("s=10&s=20").size, 20);
        assert_eq!(parse("t=10k").delay_ms, 10240);
    }

    #[test]
    fn every_delimiter() {
        // ", " joins a repeated `x-loadterm` field's values.
        for d in ["&", ";", "/", "?", ",", ", ", ",\t "] {
            let p = parse(&format!("s=5{d}r=404{d}c=0"));
            assert_eq!(
                (p.size, p.status, p.cacheable),
                (5, 404, false),
                "delimiter {d}"
            );
        }
    }

    #[test]
    fn booleans() {
        assert_eq!(parse("C=1").conn, ConnForce::Close);
        assert_eq!(parse("C=0").conn, ConnForce::KeepAlive);
        assert_eq!(parse("K=1").conn, ConnForce::KeepAlive);
        assert_eq!(parse("K=0").conn, ConnForce::Close);
        assert_eq!(parse("K=1&C=1").conn, ConnForce::Close);
        assert!(!parse("c=0").cacheable && parse("c=1").cacheable && !parse("c=-3").cacheable);
        assert!(parse("A=1").drain_after && !parse("A=0").drain_after);
        assert!(parse("k=1").chunked && !parse("k=0").chunked);
        assert!(!parse("S=0").zero_copy && parse("S=1").zero_copy);
        assert!(parse("R=1").random);
        // Multipliers do not apply to booleans.
        assert!(parse("k=1k").chunked);
    }

    #[test]
    fn random_suffix_is_bounded_and_varies() {
        let mut rng = Rng::new(12345);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..2000 {
            let mut p = Params::default();
            parse_into(b"s=10kr", &mut p, &mut rng).unwrap();
            assert!((0..=10 * 1024).contains(&p.size));
            assert_eq!(p.size % 1024, 0, "random happens before the shift");
            seen.insert(p.size);
            let mut p = Params::default();
            parse_into(b"s=-100r", &mut p, &mut rng).unwrap();
            assert!((-100..=0).contains(&p.size));
            let mut p = Params::default();
            parse_into(b"s=9000000000000r", &mut p, &mut rng).unwrap();
            assert!(
                (0..=9_000_000_000_000).contains(&p.size),
                "no 64-bit overflow"
            );
        }
        assert!(seen.len() >= 10, "r must actually randomize: {seen:?}");
    }

    #[test]
    fn httpterm_parameters() {
        let p = parse("b=5&B=100&P=20&w=300&e=7&p=3&k=2");
        assert_eq!(
            (p.length, p.body_limit, p.pause_ms, p.idle_ms),
            (5, 100, 20, 300)
        );
        assert_eq!((p.etag, p.pieces), (Some(7), Some(3)));
        assert!(p.chunked && p.byte_chunks);
        assert!(!parse("k=1").byte_chunks);
        assert_eq!(parse("b=1k").length, 1, "multipliers only apply to s, r, t");
    }

    #[test]
    fn distributions_sit_among_parameters() {
        let p = parse("t=5ms:99,500ms:1,s=3&r=200-204,c=0");
        assert!([5, 500].contains(&p.delay_ms), "{}", p.delay_ms);
        assert_eq!(p.size, 3);
        assert!((200..=204).contains(&p.status));
        assert!(!p.cacheable);
        assert_eq!(parse("t=2s&s=1").delay_ms, 2000);
        assert_eq!(parse("t=5ms").delay_ms, 5);
        let mut p = Params::default();
        assert_eq!(
            parse_into(b"t=1ms:x", &mut p, &mut Rng::new(1)),
            Err(PlanError::Distribution(b't', DistError::Weight))
        );
    }

    #[test]
    fn never_reads_past_the_slice() {
        // "s=10" followed by what would be the HTTP version in haterm: nothing leaks in.
        assert_eq!(parse("s=10").size, 10);
        assert_eq!(parse("s=").size, 0);
        assert_eq!(parse("s").size, 0);
    }
}

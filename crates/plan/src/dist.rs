//! Weighted distributions for `t`, `s` and `r`: `t=1ms:90,50ms:9,1s:1`, with ranges
//! (`t=1-10ms:99,200ms:1`). One value is drawn per request, so a plan stays a plain value;
//! parsing walks the text twice (sum the weights, then find the drawn entry) and allocates
//! nothing.

use crate::Rng;
use std::fmt;

/// Most entries a distribution may have (a bound on the work one request can ask for).
pub const MAX_ENTRIES: usize = 64;
/// Largest weight of one entry.
pub const MAX_WEIGHT: u64 = 1_000_000;

/// Why a distribution was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DistError {
    /// A value is not a decimal number with an accepted unit.
    Value,
    /// A weight is not a decimal number within 0..=MAX_WEIGHT.
    Weight,
    /// More than MAX_ENTRIES entries.
    TooMany,
    /// A range whose low end is above its high end.
    UpsideDown,
    /// Every weight is 0.
    NoWeight,
}

impl fmt::Display for DistError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DistError::Value => "a value is not a decimal number with an accepted unit",
            DistError::Weight => "a weight is not a whole number within 0..=1000000",
            DistError::TooMany => "more than 64 entries",
            DistError::UpsideDown => "a range has its low end above its high end",
            DistError::NoWeight => "every weight is 0",
        })
    }
}

/// The accepted form for `key`, for error messages.
pub fn form(key: u8) -> &'static str {
    match key {
        b't' => "t=<ms>[:<weight>],... with units ms (default) or s and ranges lo-hi, e.g. t=1-10ms:99,1s:1",
        b's' => "s=<bytes>[:<weight>],... with suffixes k, m, g and ranges lo-hi, e.g. s=1k:90,1-4m:10",
        _ => "r=<code>[:<weight>],... with ranges lo-hi, e.g. r=200:99,500-503:1",
    }
}

/// Whether the value of `key` that the number grammar stopped at `next` is a distribution (or
/// a single value with a time unit): `:` (a weight), `-` (a range), or `t`'s `s` of `ms`/`s`.
pub fn starts_here(key: u8, next: Option<u8>) -> bool {
    matches!(
        (key, next),
        (b't' | b's' | b'r', Some(b':' | b'-')) | (b't', Some(b's'))
    )
}

/// One entry: a value or a range, and its weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    lo: i64,
    hi: i64,
    weight: u64,
}

/// Draw one value of the distribution at the start of `s` (the text after `key=`). Returns the
/// value and the bytes the distribution took (it ends at `& ; / ?`, at the end, or at a `,`
/// that starts the next `X=` parameter).
pub fn draw(key: u8, s: &[u8], rng: &mut Rng) -> Result<(i64, usize), DistError> {
    let mut total = 0u64;
    let mut count = 0usize;
    let used = walk(key, s, |e| {
        count += 1;
        if count > MAX_ENTRIES {
            return Err(DistError::TooMany);
        }
        total += e.weight;
        Ok(true)
    })?;
    if total == 0 {
        return Err(DistError::NoWeight);
    }
    // next_u32 is uniform on [1, 2^32-1]: the target is uniform on [0, total) up to 2^-32.
    let target = (u64::from(rng.next_u32()) * total) >> 32;
    let mut seen = 0u64;
    let mut chosen = None;
    walk(key, s, |e| {
        seen += e.weight;
        if seen > target {
            chosen = Some(e);
            return Ok(false);
        }
        Ok(true)
    })?;
    let e = chosen.expect("the target is below the total weight");
    let span = (e.hi as i128 - e.lo as i128 + 1) as u128;
    let offset = (u128::from(rng.next_u32()) * span) >> 32;
    Ok(((e.lo as i128 + offset as i128) as i64, used))
}

/// Parse the entries, calling `f` for each until it returns false; the bytes taken.
fn walk(
    key: u8,
    s: &[u8],
    mut f: impl FnMut(Entry) -> Result<bool, DistError>,
) -> Result<usize, DistError> {
    let mut pos = 0;
    loop {
        let (mut lo, lo_unit, n) = value(key, &s[pos..])?;
        pos += n;
        let mut hi = lo;
        if s.get(pos) == Some(&b'-') {
            let (h, hi_unit, n) = value(key, &s[pos + 1..])?;
            pos += 1 + n;
            // `1-10ms`: a low end without a unit takes the high end's.
            if lo_unit.is_none() {
                lo = lo.saturating_mul(hi_unit.unwrap_or(1));
            }
            hi = h;
            if lo > hi {
                return Err(DistError::UpsideDown);
            }
        }
        let mut weight = 1;
        if s.get(pos) == Some(&b':') {
            let digits = s[pos + 1..]
                .iter()
                .take_while(|c| c.is_ascii_digit())
                .count();
            if digits == 0 || digits > 7 {
                return Err(DistError::Weight);
            }
            weight = std::str::from_utf8(&s[pos + 1..pos + 1 + digits])
                .ok()
                .and_then(|d| d.parse::<u64>().ok())
                .filter(|w| *w <= MAX_WEIGHT)
                .ok_or(DistError::Weight)?;
            pos += 1 + digits;
        }
        if !f(Entry { lo, hi, weight })? {
            return Ok(pos);
        }
        match s.get(pos) {
            None | Some(b'&' | b';' | b'/' | b'?') => return Ok(pos),
            // `,X=`: the next parameter starts; the `,` is its delimiter.
            Some(b',') if s.get(pos + 2) == Some(&b'=') && s[pos + 1].is_ascii_alphabetic() => {
                return Ok(pos)
            }
            Some(b',') => pos += 1,
            Some(_) => {
                return Err(if s[pos].is_ascii_digit() {
                    DistError::Weight
                } else {
                    DistError::Value
                })
            }
        }
    }
}

/// A decimal value and its unit multiplier (`None`: no unit written), already multiplied; the
/// bytes taken.
fn value(key: u8, s: &[u8]) -> Result<(i64, Option<i64>, usize), DistError> {
    let digits = s.iter().take_while(|c| c.is_ascii_digit()).count();
    if digits == 0 || digits > 18 {
        return Err(DistError::Value);
    }
    let v: i64 = std::str::from_utf8(&s[..digits])
        .ok()
        .and_then(|d| d.parse().ok())
        .ok_or(DistError::Value)?;
    let rest = &s[digits..];
    let (unit, n) = match key {
        b't' if rest.starts_with(b"ms") => (Some(1), 2),
        b't' if rest.starts_with(b"s") => (Some(1000), 1),
        b's' => match rest.first() {
            Some(b'k' | b'K') => (Some(1 << 10), 1),
            Some(b'm' | b'M') => (Some(1 << 20), 1),
            Some(b'g' | b'G') => (Some(1 << 30), 1),
            _ => (None, 0),
        },
        _ => (None, 0),
    };
    Ok((v.saturating_mul(unit.unwrap_or(1)), unit, digits + n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(key: u8, s: &str) -> Result<(i64, usize), DistError> {
        draw(key, s.as_bytes(), &mut Rng::new(3))
    }

    #[test]
    fn single_values_and_units() {
        assert_eq!(one(b't', "5ms"), Ok((5, 3)));
        assert_eq!(one(b't', "2s"), Ok((2000, 2)));
        assert_eq!(one(b't', "7:1"), Ok((7, 3)));
        assert_eq!(one(b's', "1k:1"), Ok((1024, 4)));
        assert_eq!(one(b's', "3m:2&r=5"), Ok((3 << 20, 4)));
        assert_eq!(one(b'r', "503:1,s=4"), Ok((503, 5)));
    }

    #[test]
    fn ranges_take_the_high_ends_unit() {
        let mut rng = Rng::new(9);
        let mut seen = [false; 10];
        for _ in 0..2000 {
            let (v, used) = draw(b't', b"1-10ms", &mut rng).unwrap();
            assert_eq!(used, 6);
            assert!((1..=10).contains(&v), "{v}");
            seen[(v - 1) as usize] = true;
        }
        assert!(seen.iter().all(|s| *s), "every value of the range is drawn");
        let (v, _) = draw(b't', b"1-2s", &mut rng).unwrap();
        assert!((1000..=2000).contains(&v));
    }

    #[test]
    fn rejections() {
        assert_eq!(one(b't', "5ms:x"), Err(DistError::Weight));
        assert_eq!(one(b't', "5ms:"), Err(DistError::Weight));
        assert_eq!(one(b't', "5ms:1.5"), Err(DistError::Value));
        assert_eq!(one(b't', "5ms:99999999"), Err(DistError::Weight));
        assert_eq!(one(b't', "10-1ms"), Err(DistError::UpsideDown));
        assert_eq!(one(b't', "5ms:0,6ms:0"), Err(DistError::NoWeight));
        assert_eq!(one(b't', "5us:1"), Err(DistError::Value));
        assert_eq!(one(b't', "5ms:1,"), Err(DistError::Value));
        let many = vec!["1:1"; 65].join(",");
        assert_eq!(one(b'r', &many), Err(DistError::TooMany));
        let max = vec!["1:1"; 64].join(",");
        assert!(one(b'r', &max).is_ok());
    }

    /// 20000 draws of 90/9/1: each count within 5 standard deviations of its expectation.
    #[test]
    fn weights_hold_statistically() {
        let mut rng = Rng::new(42);
        let mut counts = [0u32; 3];
        let n = 20_000;
        for _ in 0..n {
            let (v, _) = draw(b't', b"1ms:90,50ms:9,1s:1", &mut rng).unwrap();
            counts[match v {
                1 => 0,
                50 => 1,
                1000 => 2,
                other => panic!("{other}"),
            }] += 1;
        }
        for (count, p) in counts.iter().zip([0.90, 0.09, 0.01]) {
            let mean = n as f64 * p;
            let sd = (n as f64 * p * (1.0 - p)).sqrt();
            assert!(
                (*count as f64 - mean).abs() < 5.0 * sd,
                "{counts:?} vs p={p}"
            );
        }
    }
}

//! Command-line durations shared by every subcommand: `25s`, `500ms`, `2m`, `1h`, or plain seconds;
//! and sizes: `2048`, `2k`, `1m`, `1g` (binary multiples, as `s=` in the vocabulary).

use std::time::Duration;

pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s.split_at(
        s.find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(s.len()),
    );
    let v: f64 = num
        .parse()
        .map_err(|_| format!("invalid duration '{s}' (examples: 25s, 500ms, 2m)"))?;
    let secs = match unit {
        "" | "s" => v,
        "ms" => v / 1e3,
        "us" => v / 1e6,
        "m" => v * 60.0,
        "h" => v * 3600.0,
        _ => {
            return Err(format!(
                "invalid duration unit in '{s}' (use ms, s, m or h)"
            ))
        }
    };
    if !(secs.is_finite() && (0.0..1e9).contains(&secs)) {
        return Err(format!("duration '{s}' out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, shift) = match t.as_bytes().last() {
        Some(b'k' | b'K') => (&t[..t.len() - 1], 10),
        Some(b'm' | b'M') => (&t[..t.len() - 1], 20),
        Some(b'g' | b'G') => (&t[..t.len() - 1], 30),
        _ => (t, 0),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|v| v.checked_mul(1 << shift))
        .ok_or_else(|| format!("invalid size '{s}' (examples: 100, 2k, 1m)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("2048"), Ok(2048));
        assert_eq!(parse_size("2k"), Ok(2048));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert!(parse_size("k").is_err());
        assert!(parse_size("-1k").is_err());
        assert!(parse_size("99999999999999999g").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("25s"), Ok(Duration::from_secs(25)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        for bad in ["", "x", "-1s", "5parsecs", "1e99"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}

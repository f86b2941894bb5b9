//! Command-line durations shared by every subcommand: `25s`, `500ms`, `2m`, `1h`, or plain seconds.

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

#[cfg(test)]
mod tests {
    use super::*;

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

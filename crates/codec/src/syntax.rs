//! Grammar every HTTP version shares (RFC 9110), for the parsers on both ends.

/// `tchar` (RFC 9110 §5.6.2): the bytes of a token (field names, methods, extension names).
/// A `const fn`, so that parsers can build their byte tables from it.
pub const fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'!' | b'#'
                | b'$'
                | b'%'
                | b'&'
                | b'\''
                | b'*'
                | b'+'
                | b'-'
                | b'.'
                | b'^'
                | b'_'
                | b'`'
                | b'|'
                | b'~'
        )
}

/// A `content-length` value (RFC 9110 §8.6): decimal digits only, at least one, within u64.
pub fn content_length(v: &[u8]) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    v.iter().try_fold(0u64, |n, &b| {
        if b.is_ascii_digit() {
            n.checked_mul(10)?.checked_add((b - b'0') as u64)
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens() {
        let all: Vec<u8> = (0..=255u8).filter(|&b| is_tchar(b)).collect();
        assert_eq!(
            all,
            b"!#$%&'*+-.0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ^_`abcdefghijklmnopqrstuvwxyz|~"
        );
    }

    #[test]
    fn content_lengths() {
        assert_eq!(content_length(b"0"), Some(0));
        assert_eq!(content_length(b"18446744073709551615"), Some(u64::MAX));
        for bad in [
            &b""[..],
            b"18446744073709551616",
            b"+1",
            b"-1",
            b" 1",
            b"1 ",
            b"0x1",
            b"1,1",
        ] {
            assert_eq!(content_length(bad), None, "{bad:?}");
        }
    }
}

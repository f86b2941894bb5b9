//! Body bytes. Every body is a sequence of slices of three static blocks, so nothing is
//! generated per request and any offset is served without copying:
//! byte n of a pattern body is `LINE[n % 50]`, of a random body `random[n % 64 KiB]`.

use std::sync::OnceLock;

/// One 50-byte line of the pattern body (httpterm/haterm's).
pub const LINE: &[u8; 50] = b".123456789.123456789.123456789.123456789.12345678\n";

/// The longest slice [`slice`] returns.
pub const WINDOW: usize = 64 * 1024;

const PATTERN_LEN: usize = WINDOW + LINE.len();

static PATTERN: [u8; PATTERN_LEN] = {
    let mut b = [0u8; PATTERN_LEN];
    let mut i = 0;
    while i < PATTERN_LEN {
        b[i] = LINE[i % 50];
        i += 1;
    }
    b
};

static ONES: [u8; WINDOW] = [b'1'; WINDOW];

/// Random block, twice the window so any window-sized slice starting in the first half is
/// contiguous; the second half repeats the first.
static RANDOM: OnceLock<Box<[u8]>> = OnceLock::new();

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// The 50-byte line pattern.
    Pattern,
    /// Random bytes, fixed per process, period 64 KiB.
    Random,
    /// ASCII `1` (chunked mode, `k=1`).
    Ones,
}

fn random_block() -> &'static [u8] {
    RANDOM.get_or_init(|| {
        let mut rng = crate::Rng::from_entropy();
        let mut b = vec![0u8; 2 * WINDOW];
        for byte in &mut b[..WINDOW] {
            *byte = (rng.next_u32() >> 16) as u8;
        }
        let (first, second) = b.split_at_mut(WINDOW);
        second.copy_from_slice(first);
        b.into_boxed_slice()
    })
}

/// Build the process-wide random block now (so the first `R=1` request pays nothing).
pub fn init() {
    random_block();
}

/// The body bytes starting at absolute offset `offset`, at most `max` (and at most
/// [`WINDOW`]) long.
pub fn slice(kind: BodyKind, offset: u64, max: usize) -> &'static [u8] {
    let len = max.min(WINDOW);
    match kind {
        BodyKind::Pattern => {
            let start = (offset % LINE.len() as u64) as usize;
            &PATTERN[start..start + len]
        }
        BodyKind::Random => {
            let start = (offset % WINDOW as u64) as usize;
            &random_block()[start..start + len]
        }
        BodyKind::Ones => &ONES[..len],
    }
}

/// Expected byte at offset `n` of a body, for checkers (tests, the load generator).
pub fn byte_at(kind: BodyKind, n: u64) -> u8 {
    slice(kind, n, 1)[0]
}

/// `s` with a `'static` lifetime if it lies inside one of the static blocks (so a writer may keep
/// it past the call that lent it, instead of copying it).
pub fn as_static(s: &[u8]) -> Option<&'static [u8]> {
    let blocks: [&'static [u8]; 3] = [&PATTERN, &ONES, RANDOM.get().map_or(&[][..], |b| &b[..])];
    let start = s.as_ptr() as usize;
    blocks.into_iter().find_map(|block| {
        let offset = start.checked_sub(block.as_ptr() as usize)?;
        block.get(offset..offset.checked_add(s.len())?)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_is_periodic_from_any_offset() {
        for off in [0u64, 1, 49, 50, 16163, 16384, 65535, 1 << 33] {
            let s = slice(BodyKind::Pattern, off, WINDOW);
            assert_eq!(s.len(), WINDOW);
            for (i, &b) in s.iter().enumerate().step_by(97) {
                assert_eq!(b, LINE[((off + i as u64) % 50) as usize]);
            }
        }
        assert_eq!(slice(BodyKind::Pattern, 0, 10), b".123456789");
    }

    #[test]
    fn random_is_periodic_and_not_constant() {
        let a = slice(BodyKind::Random, 10, 100);
        let b = slice(BodyKind::Random, 10 + WINDOW as u64, 100);
        assert_eq!(a, b);
        let distinct: std::collections::HashSet<_> =
            slice(BodyKind::Random, 0, 4096).iter().collect();
        assert!(distinct.len() > 200);
        assert_eq!(
            byte_at(BodyKind::Random, (WINDOW - 1) as u64),
            byte_at(BodyKind::Random, (2 * WINDOW - 1) as u64)
        );
    }

    #[test]
    fn lengths_are_capped() {
        assert_eq!(slice(BodyKind::Ones, 5, 3), b"111");
        assert_eq!(slice(BodyKind::Ones, 5, usize::MAX).len(), WINDOW);
    }

    #[test]
    fn static_slices_are_recognised_and_copies_are_not() {
        init();
        for kind in [BodyKind::Pattern, BodyKind::Random, BodyKind::Ones] {
            let s = slice(kind, 7, 1000);
            let back = as_static(s).expect("a slice of a static block");
            assert_eq!((back.as_ptr(), back.len()), (s.as_ptr(), s.len()));
            let copy = s.to_vec();
            assert_eq!(as_static(&copy), None);
        }
    }
}

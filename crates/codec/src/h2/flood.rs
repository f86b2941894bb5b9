//! The flood budget of one connection (the peer's frames that make us work without asking for
//! anything), kept by [`super::Connection`] as it reads frame headers. Its limits are those the
//! server's guard had over the `h2` crate, with the frames that crate bounded itself (rapid
//! resets, empty DATA) now counted here too.

use super::{flag, CONTINUATION, DATA, PING, PRIORITY, RST_STREAM, SETTINGS, WINDOW_UPDATE};

/// Unsolicited frames allowed whatever we wrote: far more than any peer's setup (SETTINGS, a few
/// PRIORITY, a connection WINDOW_UPDATE) and keep-alive PINGs need.
const FREE: u64 = 1024;
/// Bytes we must have written for each unsolicited frame past `FREE`. Time-free, so the verdict
/// does not depend on machine speed: a client downloading sends one WINDOW_UPDATE per half
/// window (KiB) received, while a flood gets nothing (WINDOW_UPDATE, RST_STREAM, empty DATA)
/// or a 9-17 byte answer (SETTINGS, PING ACK; a response to a reset request) per frame and
/// crosses the budget after ~1 000-1 200 frames.
const BYTES_PER_FRAME: u64 = 128;

/// Whether a frame makes us work without asking for anything: the rule, in one place. ACKs
/// answer our own SETTINGS and PINGs; extension frame types (above CONTINUATION) are read and
/// ignored (RFC 9113 §5.5), the same free work as a WINDOW_UPDATE; a RST_STREAM cancels work
/// it asked for (CVE-2023-44487, rapid reset); an empty DATA frame that does not end its stream
/// carries nothing.
pub(super) fn unsolicited(ty: u8, flags: u8, len: usize) -> bool {
    match ty {
        WINDOW_UPDATE | PRIORITY | RST_STREAM => true,
        SETTINGS | PING => flags & flag::ACK == 0,
        DATA => len == 0 && flags & flag::END_STREAM == 0,
        _ => ty > CONTINUATION,
    }
}

/// Unsolicited frames received against the bytes written.
#[derive(Debug, Clone, Default)]
pub(super) struct FrameLedger {
    unsolicited: u64,
    written: u64,
}

impl FrameLedger {
    /// A frame header read: whether the peer is now over its budget.
    pub(super) fn frame(&mut self, ty: u8, flags: u8, len: usize) -> bool {
        if unsolicited(ty, flags, len) {
            self.unsolicited += 1;
            return self.flooded();
        }
        false
    }

    /// One more unsolicited action that is not a frame of its own kind (a stream refused).
    pub(super) fn charge(&mut self) -> bool {
        self.unsolicited += 1;
        self.flooded()
    }

    /// We wrote `n` bytes on the connection.
    pub(super) fn wrote(&mut self, n: usize) {
        self.written += n as u64;
    }

    fn flooded(&self) -> bool {
        self.unsolicited > FREE + self.written / BYTES_PER_FRAME
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_is_1024_frames_plus_one_per_128_bytes_written() {
        let mut l = FrameLedger::default();
        for _ in 0..1024 {
            assert!(!l.frame(WINDOW_UPDATE, 0, 4));
        }
        assert!(
            l.frame(WINDOW_UPDATE, 0, 4),
            "the 1025th with nothing written"
        );
        l.wrote(127);
        assert!(l.flooded());
        l.wrote(1);
        assert!(!l.flooded(), "128 bytes written pay for one frame");
    }

    #[test]
    fn only_frames_that_ask_for_nothing_count() {
        for (ty, flags, len, counts) in [
            (WINDOW_UPDATE, 0, 4, true),
            (PRIORITY, 0, 5, true),
            (RST_STREAM, 0, 4, true),
            (SETTINGS, 0, 6, true),
            (SETTINGS, flag::ACK, 0, false),
            (PING, 0, 8, true),
            (PING, flag::ACK, 8, false),
            (DATA, 0, 0, true),
            (DATA, flag::END_STREAM, 0, false),
            (DATA, 0, 1, false),
            (super::super::HEADERS, 0, 10, false),
            (CONTINUATION, 0, 10, false),
            (0x10, 0, 3, true),
        ] {
            assert_eq!(
                unsolicited(ty, flags, len),
                counts,
                "type {ty} flags {flags}"
            );
        }
    }

    /// Small windows: one WINDOW_UPDATE per 8 KiB received on the stream, one per 32 KiB on the
    /// connection, for 100 MB, never crosses the budget.
    #[test]
    fn a_download_with_small_windows_stays_within_budget() {
        let mut l = FrameLedger::default();
        for i in 1..=100_000_000 / 8192 {
            l.wrote(8192 + 9);
            assert!(!l.frame(WINDOW_UPDATE, 0, 4), "cut off after {i} windows");
            if i % 4 == 0 {
                assert!(!l.frame(WINDOW_UPDATE, 0, 4));
            }
        }
    }
}

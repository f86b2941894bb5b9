//! Per-thread state the exchanges need: the random generator (for the `r` suffix), the HTTP
//! date, rendered once a second, and the last HTTP/1.x head rendered.

use loadterm_exchange::{http_date, Exchange, H1Heads, Head, HttpDate, Request};
use loadterm_plan::Rng;
use std::cell::{Cell, RefCell};
use std::time::Instant;

thread_local! {
    static RNG: RefCell<Rng> = RefCell::new(Rng::from_entropy());
    static DATE: Cell<(u64, HttpDate)> = const { Cell::new((u64::MAX, [0; 29])) };
    static H1_HEADS: RefCell<H1Heads> = RefCell::new(H1Heads::default());
}

/// Append `head` in HTTP/1.x, dated now, with `extra` header lines (CRLF-terminated).
pub fn write_h1(head: &Head, extra: &[u8], out: &mut Vec<u8>) {
    let date = date();
    H1_HEADS.with_borrow_mut(|heads| heads.write(head, &date, extra, out));
}

pub fn exchange(req: &Request<'_>, t_first: Instant) -> Exchange {
    RNG.with(|r| Exchange::new(req, &mut r.borrow_mut(), t_first))
}

/// The current HTTP date. The coarse clock costs a few nanoseconds (no system call, no
/// hardware counter read); the text is redone only when the second changes.
pub fn date() -> HttpDate {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to; CLOCK_REALTIME_COARSE exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
    let now = ts.tv_sec.max(0) as u64;
    DATE.with(|d| {
        let (secs, text) = d.get();
        if secs == now {
            return text;
        }
        let text = http_date(now);
        d.set((now, text));
        text
    })
}

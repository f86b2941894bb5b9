//! When requests may be sent: closed loop, or open loop with a schedule of intended send times
//! per slot (a connection on HTTP/1.1, a stream slot on HTTP/2 and 3).

use std::time::{Duration, Instant};

/// When requests may be sent.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Pace {
    /// As fast as responses come back.
    Closed,
    /// Each connection sends one request every `interval` (a connection is one slot on
    /// HTTP/1.1; on HTTP/2 and 3 each of its streams is a slot with an equal share of its rate).
    /// `connections` is the run's total, for phasing the slots evenly.
    Open {
        interval: Duration,
        connections: u64,
    },
}

/// Open-loop schedule of one slot: intended send times `start + phase + k * interval`. A sender
/// that falls behind still gets every past time, in order, so each late send is measured from
/// when it was due.
#[derive(Debug)]
pub(crate) struct Schedule {
    next: Option<Instant>,
    interval: Duration,
}

impl Schedule {
    /// Slot `stream` of `streams` on connection `conn` (HTTP/1.1: stream 0 of 1).
    pub(crate) fn new(
        pace: Pace,
        start: Instant,
        conn: u64,
        stream: u64,
        streams: u64,
    ) -> Schedule {
        match pace {
            Pace::Closed => Schedule {
                next: None,
                interval: Duration::ZERO,
            },
            Pace::Open {
                interval,
                connections,
            } => {
                // The run's connections × streams slots are phased evenly over one slot interval,
                // so that together they send exactly every `interval / connections` instead of
                // in bursts.
                let k = stream * connections + conn;
                Schedule {
                    next: Some(start + interval.mul_f64(k as f64 / connections as f64)),
                    interval: interval.mul_f64(streams as f64),
                }
            }
        }
    }

    /// The next intended time, if open loop.
    pub(crate) fn peek(&self) -> Option<Instant> {
        self.next
    }

    pub(crate) fn advance(&mut self) -> Option<Instant> {
        let n = self.next?;
        self.next = Some(n + self.interval);
        Some(n)
    }
}

/// The schedules of one connection slot, for whichever protocol it ends up speaking (with ALPN
/// that is known only after the handshake). They outlive connections: a reopened connection
/// carries on where the last one stopped instead of replaying the schedule from the start.
pub(crate) struct Schedules {
    pub h1: Schedule,
    pub streams: Vec<Schedule>,
}

impl Schedules {
    /// Connection `conn`'s schedules, with `streams` slots for HTTP/2 and 3.
    pub(crate) fn new(pace: Pace, start: Instant, conn: u64, streams: u64) -> Schedules {
        Schedules {
            h1: Schedule::new(pace, start, conn, 0, 1),
            streams: (0..streams)
                .map(|s| Schedule::new(pace, start, conn, s, streams))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(rate_per_conn: f64, connections: u64) -> Pace {
        Pace::Open {
            interval: Duration::from_secs_f64(1.0 / rate_per_conn),
            connections,
        }
    }

    /// The first `n` intended times of every slot of a run, merged and sorted, as offsets
    /// from `start` in nanoseconds.
    fn merged(pace: Pace, connections: u64, streams: u64, n: usize) -> Vec<u128> {
        let start = Instant::now();
        let mut all = Vec::new();
        for c in 0..connections {
            for s in 0..streams {
                let mut sched = Schedule::new(pace, start, c, s, streams);
                all.extend((0..n).map(|_| (sched.advance().unwrap() - start).as_nanos()));
            }
        }
        all.sort_unstable();
        all
    }

    /// Durations are whole nanoseconds: 1 µs allows for their rounding, far below any spacing
    /// tested here.
    fn close(got: Duration, want_s: f64) -> bool {
        (got.as_secs_f64() - want_s).abs() < 1e-6
    }

    fn assert_spacing(times: &[u128], period_s: f64) {
        assert_eq!(times[0], 0);
        for (k, t) in times.iter().enumerate() {
            let want = k as f64 * period_s;
            let got = Duration::from_nanos(*t as u64);
            assert!(close(got, want), "send {k} at {got:?}, want {want} s");
        }
    }

    #[test]
    fn rate_across_connections_is_evenly_spaced() {
        // --rate 1000 -c 4: 250/s per connection, each every 4 ms, phased 1 ms apart.
        let pace = open(1000.0 / 4.0, 4);
        assert_spacing(&merged(pace, 4, 1, 50), 0.001);
        let start = Instant::now();
        let mut third = Schedule::new(pace, start, 2, 0, 1);
        let times: Vec<_> = (0..3).map(|_| third.advance().unwrap() - start).collect();
        assert_eq!(times, [2, 6, 10].map(Duration::from_millis));
    }

    #[test]
    fn streams_share_their_connection_rate() {
        // --rate 600 -c 2 -m 3 on HTTP/2: 300/s per connection, so each of its 3 stream slots
        // sends every 10 ms, and the 6 slots together every 1/600 s.
        let pace = open(300.0, 2);
        let start = Instant::now();
        let mut slot = Schedule::new(pace, start, 1, 2, 3);
        let first = slot.advance().unwrap() - start;
        let second = slot.advance().unwrap() - start;
        assert!(close(second - first, 0.010), "{:?}", second - first);
        assert_spacing(&merged(pace, 2, 3, 40), 1.0 / 600.0);
    }

    #[test]
    fn rate_per_conn_is_per_connection() {
        // --rate-per-conn 100 -c 3: each connection every 10 ms, all three every 3.33 ms.
        let pace = open(100.0, 3);
        assert_spacing(&merged(pace, 3, 1, 30), 1.0 / 300.0);
    }

    #[test]
    fn late_sends_are_kept_not_skipped() {
        // A sender that fell behind gets every missed time in order (each is then recorded
        // as late, its latency corrected from that time); peeking does not consume one.
        let start = Instant::now() - Duration::from_secs(10);
        let mut s = Schedule::new(open(100.0, 1), start, 0, 0, 1);
        assert_eq!(s.peek(), Some(start));
        assert_eq!(s.peek(), Some(start));
        let times: Vec<_> = (0..4).map(|_| s.advance().unwrap() - start).collect();
        assert_eq!(times, [0, 10, 20, 30].map(Duration::from_millis));
        assert_eq!(s.peek(), Some(start + Duration::from_millis(40)));
    }

    #[test]
    fn closed_loop_has_no_schedule() {
        let mut s = Schedule::new(Pace::Closed, Instant::now(), 3, 1, 2);
        assert_eq!((s.peek(), s.advance()), (None, None));
    }

    #[test]
    fn a_connection_that_speaks_http1_gets_the_whole_connection_rate() {
        // With ALPN the protocol is known only after the handshake: -m 4 must not divide the
        // rate of a connection that ends up on HTTP/1.1.
        let start = Instant::now();
        let mut s = Schedules::new(open(100.0, 1), start, 0, 4);
        let h1: Vec<_> = (0..2).map(|_| s.h1.advance().unwrap()).collect();
        assert_eq!(h1[1] - h1[0], Duration::from_millis(10));
        assert_eq!(s.streams.len(), 4);
        let h2: Vec<_> = (0..2).map(|_| s.streams[3].advance().unwrap()).collect();
        assert_eq!(h2[1] - h2[0], Duration::from_millis(40));
        assert_eq!(h2[0] - start, Duration::from_millis(30));
    }
}

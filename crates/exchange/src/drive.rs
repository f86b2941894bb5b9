//! The one step driver, poll-style and without I/O: a [`StepDriver`] turns an exchange's
//! [`Step`]s into what an engine does next ([`Action`]). The engine asks ([`StepDriver::poll`]),
//! carries the action out in its own framing, with its own waits (an async task for HTTP/1.x
//! and HTTP/2, quinn-proto's events for HTTP/3), and reports what the exchange must know
//! ([`StepDriver::body_read`], [`StepDriver::resumed`]). It decides, for every engine: the
//! order of the actions, what is pending sent before any wait ([`Action::Flush`]), which head
//! is interim, the request body's bytes and how its reading stopped given to the exchange, and
//! the clock: read by the engine only after a wait or a body read (a request with no body and
//! no delay is answered at the instant its head was read).

use crate::{Body, BodyRead, Exchange, ExchangeEnd, Generated, Piece, ResponseHead, Step};
use loadterm_plan::is_interim;
use std::borrow::Cow;
use std::time::{Duration, Instant};

/// What the engine does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send an interim (1xx) head at once: the `100 Continue` before the request body is read,
    /// or a 1xx asked for as the final status (the exchange then ends with
    /// [`ExchangeEnd::NoFinal`]).
    Interim(ResponseHead),
    /// Send the final response head (or queue it to go with the body's first bytes).
    Head(ResponseHead),
    /// Send a text/plain body whole.
    Text(Cow<'static, str>),
    /// Send a whole generated body.
    Generated(Generated),
    /// Send one piece of a body in pieces, on its own.
    Piece(Piece),
    /// Read and discard the request body, or its first `limit` bytes, then report the bytes
    /// read and how the reading stopped with [`StepDriver::body_read`].
    ReadBody { limit: Option<u64> },
    /// Send everything so far: a wait follows.
    Flush,
    /// Wait until then (`t`), then [`StepDriver::resumed`].
    WaitUntil(Instant),
    /// Wait this long from now (`P` after the response, `p` between pieces), then
    /// [`StepDriver::resumed`].
    Pause(Duration),
    /// The exchange is over: the engine carries its end out.
    Done(ExchangeEnd),
}

/// An exchange being carried out: the exchange, its clock, and the wait that follows a flush.
#[derive(Debug)]
pub struct StepDriver {
    x: Exchange,
    /// The clock as the exchange reads it: when the request head was read, then after the last
    /// wait or body read.
    now: Instant,
    /// The wait to ask for once the flush before it is done.
    wait: Option<Action>,
}

impl StepDriver {
    /// Drive `x`, whose request head was read at `now`.
    pub fn new(x: Exchange, now: Instant) -> StepDriver {
        StepDriver { x, now, wait: None }
    }

    /// The exchange driven (its `idle` time, once done).
    pub fn exchange(&self) -> &Exchange {
        &self.x
    }

    /// What to do next. Every action but [`Action::Done`] is to be followed by another poll,
    /// [`Action::ReadBody`] and the waits after their report.
    #[inline]
    pub fn poll(&mut self) -> Action {
        if let Some(wait) = self.wait.take() {
            return wait;
        }
        match self.x.next(self.now) {
            Step::Continue => Action::Interim(ResponseHead::interim(100)),
            Step::ReadBody { limit } => Action::ReadBody { limit },
            Step::WaitUntil(t) => {
                self.wait = Some(Action::WaitUntil(t));
                Action::Flush
            }
            Step::Pause(d) => {
                self.wait = Some(Action::Pause(d));
                Action::Flush
            }
            Step::Head(head) if is_interim(head.status) => Action::Interim(head),
            Step::Head(head) => Action::Head(head),
            Step::Body(Body::Text(text)) => Action::Text(text),
            Step::Body(Body::Generated(body)) => Action::Generated(body),
            Step::Body(Body::Piece(piece)) => Action::Piece(piece),
            Step::Done(end) => Action::Done(end),
        }
    }

    /// An [`Action::ReadBody`] done at `now`: `bytes` of the request body read (and discarded),
    /// and how the reading stopped.
    pub fn body_read(&mut self, bytes: u64, how: BodyRead, now: Instant) {
        self.x.body_read(bytes, how);
        self.now = now;
    }

    /// An [`Action::WaitUntil`] or [`Action::Pause`] over, at `now`.
    pub fn resumed(&mut self, now: Instant) {
        self.now = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{RequestSummary, Version};
    use loadterm_plan::Rng;
    use std::fmt::Write;

    /// An engine that writes down what it is asked, on a clock of its own that moves only when
    /// it sleeps or reads a body (3 ms per read); `reads` counts the clock reads, which come
    /// only after a wait or a read.
    struct Log {
        clock: Instant,
        log: String,
        /// The request body's size.
        upload: u64,
        reads: u32,
    }

    impl Log {
        fn now(&mut self) -> Instant {
            self.reads += 1;
            self.clock
        }

        fn run(&mut self, d: &mut StepDriver) -> ExchangeEnd {
            loop {
                match d.poll() {
                    Action::Interim(head) => write!(self.log, "interim {}; ", head.status).unwrap(),
                    Action::Head(head) => {
                        let mut x_rsp = String::new();
                        head.fields(&mut Vec::new(), &crate::http_date(0), |n, v| {
                            if n == "x-rsp" {
                                x_rsp = String::from_utf8_lossy(v).into_owned();
                            }
                        });
                        write!(self.log, "head {} ({x_rsp}); ", head.status).unwrap();
                    }
                    Action::Text(text) => write!(self.log, "text {}; ", text.len()).unwrap(),
                    Action::Generated(body) => write!(self.log, "body {}; ", body.size).unwrap(),
                    Action::Piece(piece) => write!(self.log, "piece {}; ", piece.len).unwrap(),
                    Action::ReadBody { .. } => {
                        self.clock += Duration::from_millis(3);
                        write!(self.log, "read {}; ", self.upload).unwrap();
                        let now = self.now();
                        d.body_read(self.upload, BodyRead::Ended, now);
                    }
                    Action::Flush => self.log.push_str("flush; "),
                    Action::WaitUntil(t) => {
                        write!(self.log, "sleep {}ms; ", (t - self.clock).as_millis()).unwrap();
                        self.clock = t;
                        let now = self.now();
                        d.resumed(now);
                    }
                    Action::Pause(p) => {
                        let now = self.now();
                        write!(self.log, "pause {}ms; ", p.as_millis()).unwrap();
                        self.clock = now + p;
                        let now = self.now();
                        d.resumed(now);
                    }
                    Action::Done(end) => return end,
                }
            }
        }
    }

    fn driver(target: &str, upload: Option<u64>, t0: Instant) -> StepDriver {
        let req = RequestSummary {
            version: Version::H2,
            is_head: false,
            target: target.as_bytes(),
            control: None,
            expect_continue: upload.is_some(),
            conn_close: false,
            conn_keep_alive: false,
            has_body: upload.is_some(),
            head_bytes: 50,
            date: false,
            is_get: upload.is_none(),
            if_match: None,
            if_none_match: None,
        };
        StepDriver::new(Exchange::new(&req, &mut Rng::new(1), t0), t0)
    }

    fn engine(t0: Instant, upload: u64) -> Log {
        Log {
            clock: t0,
            log: String::new(),
            upload,
            reads: 0,
        }
    }

    #[test]
    fn an_answer_without_a_wait_reads_no_clock() {
        let t0 = Instant::now();
        let (mut d, mut e) = (driver("/?s=10", None, t0), engine(t0, 0));
        assert_eq!(e.run(&mut d), ExchangeEnd::KeepAlive);
        assert_eq!(
            e.log,
            "head 200 (id=dummy, code=200, cache=1, size=10, time=0 ms (0 real)); body 10; "
        );
        assert_eq!(e.reads, 0);
    }

    #[test]
    fn waits_send_what_is_pending_first_and_read_the_clock_after() {
        let t0 = Instant::now();
        let (mut d, mut e) = (driver("/?t=10&s=5&P=20", Some(7), t0), engine(t0, 7));
        assert_eq!(e.run(&mut d), ExchangeEnd::KeepAlive);
        assert_eq!(
            e.log,
            "interim 100; read 7; flush; sleep 10ms; \
             head 200 (id=dummy, code=200, cache=1, size=5, time=10 ms (10 real)); body 5; \
             flush; pause 20ms; "
        );
        // After the read, after the delay, and before and after the pause.
        assert_eq!(e.reads, 4);
    }

    #[test]
    fn the_delay_counts_from_the_body_read() {
        let t0 = Instant::now();
        let (mut d, mut e) = (driver("/?t=10&s=1", Some(4), t0), engine(t0, 4));
        assert_eq!(e.run(&mut d), ExchangeEnd::KeepAlive);
        // The read took 3 ms: x-req's time, and the delay after it.
        assert_eq!(
            e.log,
            "interim 100; read 4; flush; sleep 10ms; \
             head 200 (id=dummy, code=200, cache=1, size=1, time=10 ms (10 real)); body 1; "
        );
    }
}

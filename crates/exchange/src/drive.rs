//! The one step driver: [`Exchange::drive`] carries an exchange's [`Step`]s out with an
//! [`Engine`], the engine's side (its framing, its waits and its clock), and decides in one place
//! what every engine used to repeat: the order of the steps, the request body's bytes and how its
//! reading stopped reported back to the exchange, what is pending sent before any wait, and the
//! clock read again only after a wait (a request with no body and no delay is answered at the
//! instant its head was read).
//!
//! Nothing here does I/O or knows a runtime: the engine's methods are futures, which the engine's
//! runtime polls. Most of them complete at once (a head or a small body appended to a buffer).

use crate::{Body, BodyRead, Exchange, ExchangeEnd, Generated, Piece, ResponseHead, Step};
use loadterm_plan::is_interim;
use std::borrow::Cow;
use std::future::Future;
use std::time::Instant;

/// What an engine supplies to [`Exchange::drive`]: how each step goes on its wire, how a request
/// body is read, how it sends what is pending and waits, and its clock. The exchange's end
/// ([`ExchangeEnd`]) is returned to the engine, which carries it out.
pub trait Engine {
    /// Why the exchange cannot go on (the stream or the connection failed, or, with
    /// [`Engine::hold`], a step held back).
    type Error;

    /// The engine's clock (the exchange reads none).
    fn now(&self) -> Instant;

    /// Whether [`Engine::hold`] is asked before each step: an engine that never holds one back
    /// pays nothing for it (moving each step through `hold` cost HTTP/1 about 1% of its
    /// instructions per request).
    const HOLDS: bool = false;

    /// A step about to be carried out, or held back: an engine that carries out steps in two
    /// places (HTTP/2: those that need no wait in the connection's task, the rest on a task of
    /// its own) returns the first step it cannot carry out here in its error, and carries it out
    /// later with [`Exchange::drive_from`]. Asked only if [`Engine::HOLDS`].
    fn hold(&mut self, step: Step) -> Result<Step, Self::Error> {
        Ok(step)
    }

    /// Send an interim (1xx) head: the `100 Continue` before the request body is read, or a
    /// 1xx asked for as the final status (the exchange then ends with [`ExchangeEnd::NoFinal`]).
    fn interim(&mut self, head: &ResponseHead) -> impl Future<Output = Result<(), Self::Error>>;

    /// Send the final response head (or queue it to go with the body's first bytes).
    fn head(&mut self, head: &ResponseHead) -> impl Future<Output = Result<(), Self::Error>>;

    /// Send a text/plain body whole.
    fn text(&mut self, text: Cow<'static, str>) -> impl Future<Output = Result<(), Self::Error>>;

    /// Send a whole generated body.
    fn generated(&mut self, body: Generated) -> impl Future<Output = Result<(), Self::Error>>;

    /// Send one piece of a body in pieces, on its own.
    fn piece(&mut self, piece: Piece) -> impl Future<Output = Result<(), Self::Error>>;

    /// Read and discard the request body, or its first `limit` bytes: the bytes read and how
    /// the reading stopped ([`BodyRead`]). An error ends the exchange at once.
    fn drain(
        &mut self,
        limit: Option<u64>,
    ) -> impl Future<Output = Result<(u64, BodyRead), Self::Error>>;

    /// Send everything so far: the exchange is about to wait.
    fn flush(&mut self) -> impl Future<Output = Result<(), Self::Error>>;

    /// Wait until `t` (the engine's clock).
    fn sleep_until(&mut self, t: Instant) -> impl Future<Output = ()>;
}

impl Exchange {
    /// Carry the exchange out with `engine`, from `now` (the instant the request head was
    /// read), to its end, which the engine then carries out.
    pub fn drive<'a, E: Engine>(
        &'a mut self,
        now: Instant,
        engine: &'a mut E,
    ) -> impl Future<Output = Result<ExchangeEnd, E::Error>> + 'a {
        self.steps(None, now, engine)
    }

    /// [`Exchange::drive`] from a step an engine held back ([`Engine::hold`]) at `now`, the
    /// clock as it was then.
    pub fn drive_from<'a, E: Engine>(
        &'a mut self,
        step: Step,
        now: Instant,
        engine: &'a mut E,
    ) -> impl Future<Output = Result<ExchangeEnd, E::Error>> + 'a {
        self.steps(Some(step), now, engine)
    }

    async fn steps<E: Engine>(
        &mut self,
        first: Option<Step>,
        mut now: Instant,
        e: &mut E,
    ) -> Result<ExchangeEnd, E::Error> {
        let mut step = match first {
            Some(step) => step,
            None => self.next(now),
        };
        loop {
            if E::HOLDS {
                step = e.hold(step)?;
            }
            match step {
                Step::Continue => e.interim(&ResponseHead::interim(100)).await?,
                Step::ReadBody { limit } => {
                    let (bytes, how) = e.drain(limit).await?;
                    self.body_read(bytes, how);
                    now = e.now();
                }
                Step::WaitUntil(t) => {
                    e.flush().await?;
                    e.sleep_until(t).await;
                    now = e.now();
                }
                Step::Pause(d) => {
                    e.flush().await?;
                    let t = e.now() + d;
                    e.sleep_until(t).await;
                    now = e.now();
                }
                Step::Head(head) if is_interim(head.status) => e.interim(&head).await?,
                Step::Head(head) => e.head(&head).await?,
                Step::Body(Body::Text(text)) => e.text(text).await?,
                Step::Body(Body::Generated(body)) => e.generated(body).await?,
                Step::Body(Body::Piece(piece)) => e.piece(piece).await?,
                Step::Done(end) => return Ok(end),
            }
            step = self.next(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{RequestSummary, Version};
    use loadterm_plan::Rng;
    use std::fmt::Write;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};
    use std::time::Duration;

    /// An engine that writes down what it is asked, on a clock of its own that moves only when
    /// it sleeps or reads a body (3 ms per read). Every future it returns is ready at once.
    struct Log {
        clock: Instant,
        log: String,
        /// The request body's size.
        upload: u64,
        /// Steps held back (`hold`) while set.
        hold_reads: bool,
        /// Clock reads, which the driver makes only after a wait.
        reads: std::cell::Cell<u32>,
    }

    #[derive(Debug, PartialEq)]
    enum Stop {
        Held(Step),
    }

    impl Engine for Log {
        type Error = Stop;
        const HOLDS: bool = true;

        fn now(&self) -> Instant {
            self.reads.set(self.reads.get() + 1);
            self.clock
        }

        fn hold(&mut self, step: Step) -> Result<Step, Stop> {
            match step {
                Step::ReadBody { .. } if self.hold_reads => Err(Stop::Held(step)),
                step => Ok(step),
            }
        }

        async fn interim(&mut self, head: &ResponseHead) -> Result<(), Stop> {
            write!(self.log, "interim {}; ", head.status).unwrap();
            Ok(())
        }

        async fn head(&mut self, head: &ResponseHead) -> Result<(), Stop> {
            let mut x_rsp = String::new();
            head.fields(&mut Vec::new(), &crate::http_date(0), |n, v| {
                if n == "x-rsp" {
                    x_rsp = String::from_utf8_lossy(v).into_owned();
                }
            });
            write!(self.log, "head {} ({x_rsp}); ", head.status).unwrap();
            Ok(())
        }

        async fn text(&mut self, text: Cow<'static, str>) -> Result<(), Stop> {
            write!(self.log, "text {}; ", text.len()).unwrap();
            Ok(())
        }

        async fn generated(&mut self, body: Generated) -> Result<(), Stop> {
            write!(self.log, "body {}; ", body.size).unwrap();
            Ok(())
        }

        async fn piece(&mut self, piece: Piece) -> Result<(), Stop> {
            write!(self.log, "piece {}; ", piece.len).unwrap();
            Ok(())
        }

        async fn drain(&mut self, _limit: Option<u64>) -> Result<(u64, BodyRead), Stop> {
            self.clock += Duration::from_millis(3);
            write!(self.log, "read {}; ", self.upload).unwrap();
            Ok((self.upload, BodyRead::Ended))
        }

        async fn flush(&mut self) -> Result<(), Stop> {
            self.log.push_str("flush; ");
            Ok(())
        }

        async fn sleep_until(&mut self, t: Instant) {
            write!(self.log, "sleep {}ms; ", (t - self.clock).as_millis()).unwrap();
            self.clock = t;
        }
    }

    fn exchange(target: &str, upload: Option<u64>, t0: Instant) -> Exchange {
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
        Exchange::new(&req, &mut Rng::new(1), t0)
    }

    fn engine(t0: Instant, upload: u64) -> Log {
        Log {
            clock: t0,
            log: String::new(),
            upload,
            hold_reads: false,
            reads: Default::default(),
        }
    }

    /// The engine's futures are all ready at once: one poll drives the exchange to its end.
    fn at_once<T>(f: impl Future<Output = T>) -> T {
        match pin!(f).poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(v) => v,
            Poll::Pending => panic!("the log engine never waits"),
        }
    }

    #[test]
    fn an_answer_without_a_wait_reads_no_clock() {
        let t0 = Instant::now();
        let (mut x, mut e) = (exchange("/?s=10", None, t0), engine(t0, 0));
        let end = at_once(x.drive(t0, &mut e));
        assert_eq!(end, Ok(ExchangeEnd::KeepAlive));
        assert_eq!(
            e.log,
            "head 200 (id=dummy, code=200, cache=1, size=10, time=0 ms (0 real)); body 10; "
        );
        assert_eq!(e.reads.get(), 0);
    }

    #[test]
    fn waits_send_what_is_pending_first_and_read_the_clock_after() {
        let t0 = Instant::now();
        let (mut x, mut e) = (exchange("/?t=10&s=5&P=20", Some(7), t0), engine(t0, 7));
        let end = at_once(x.drive(t0, &mut e));
        assert_eq!(end, Ok(ExchangeEnd::KeepAlive));
        assert_eq!(
            e.log,
            "interim 100; read 7; flush; sleep 10ms; \
             head 200 (id=dummy, code=200, cache=1, size=5, time=10 ms (10 real)); body 5; \
             flush; sleep 20ms; "
        );
        // After the read, after the delay, and before and after the pause.
        assert_eq!(e.reads.get(), 4);
    }

    #[test]
    fn a_held_step_is_carried_out_from_where_it_was_held() {
        let t0 = Instant::now();
        let (mut x, mut e) = (exchange("/?s=1", Some(4), t0), engine(t0, 4));
        e.hold_reads = true;
        let held = at_once(x.drive(t0, &mut e));
        assert_eq!(held, Err(Stop::Held(Step::ReadBody { limit: None })));
        assert_eq!(e.log, "interim 100; ");
        let Err(Stop::Held(step)) = held else {
            unreachable!()
        };
        e.hold_reads = false;
        let end = at_once(x.drive_from(step, t0, &mut e));
        assert_eq!(end, Ok(ExchangeEnd::KeepAlive));
        assert_eq!(
            e.log,
            "interim 100; read 4; head 200 (id=dummy, code=200, cache=1, size=1, time=0 ms (0 real)); body 1; "
        );
    }
}

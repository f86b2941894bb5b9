//! HTTP/2 load (TLS and h2c): one task per connection driving a sans-I/O [`client::Client`]
//! (the codec's `loadterm_codec::h2::Connection` in its client role, the server's HTTP/2 codec),
//! with reads and writes in a single poll so neither waits on the other.
//!
//! Not the `h2` crate, which cost 1.55× h2load's client CPU per request on small responses
//! (`bench/compare-clients.sh`, see docs/PERFORMANCE.md): it runs a task per request plus a
//! connection task, with wakeups and locking between them.

mod client;

use crate::inflight::{finish, lose, unprocessed, End, InFlight};
use crate::record::ErrorKind;
use crate::sched::Schedule;
use crate::shared::{Budget, WorkerRef};
use crate::timer;
use client::{Client, RequestEvent};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// What woke the connection's driver.
enum Wakeup {
    Read(usize),
    Closed,
    /// An open-loop send is due.
    Wake,
    /// Time to check the oldest request against the timeout.
    Check,
}

/// Run one HTTP/2 connection; `scheds` holds one schedule per concurrent stream slot.
pub(crate) async fn connection<IO>(
    w: &WorkerRef,
    mut io: IO,
    scheds: &mut [Schedule],
    budget: &Budget,
) -> End
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let setup = w.setup.clone();
    let mut c = Client::new(&setup.offer);
    if setup.is_head {
        c.head_requests();
    }
    let mut slots = Slots::new(scheds.len());
    let mut wire = Wire::default();
    // Re-armed only when it fires, not per request.
    let mut check: Pin<Box<Sleep>> = Box::pin(tokio::time::sleep(setup.timeout));
    let mut check_armed = false;
    let mut wake: Option<timer::Sleep> = None;
    // A response completed on this connection: requests it left unprocessed may be sent again.
    let mut progressed = false;
    loop {
        let now = Instant::now();
        let due = slots.start(w, &mut c, scheds, budget, now);
        if slots.in_flight() && !check_armed {
            check.as_mut().reset((now + setup.timeout).into());
            check_armed = true;
        }
        if c.in_flight() == 0 && (!w.more_on(budget) || c.going_away()) {
            return if w.more() {
                End::Reconnect
            } else {
                End::Finished
            };
        }
        let due = due.filter(|_| w.more_on(budget));
        if due != wake.as_ref().map(timer::Sleep::deadline) {
            wake = due.map(timer::sleep_until);
        }
        let step = std::future::poll_fn(|cx| {
            if let Poll::Ready(step) = wire.poll(cx, &mut io, &mut c) {
                return Poll::Ready(step);
            }
            if wake
                .as_mut()
                .is_some_and(|s| Pin::new(s).poll(cx).is_ready())
            {
                return Poll::Ready(Wakeup::Wake);
            }
            if check_armed && check.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Wakeup::Check);
            }
            Poll::Pending
        })
        .await;
        match step {
            Wakeup::Read(n) => {
                let fed = c.feed(&wire.rbuf[..n]);
                slots.answered(w, &mut c, Instant::now(), &mut progressed);
                if fed.is_err() {
                    slots.lose_all(w, ErrorKind::Protocol);
                    return End::Reconnect;
                }
            }
            Wakeup::Closed => {
                slots.lose_all(w, ErrorKind::Reset);
                return End::Reconnect;
            }
            Wakeup::Wake => wake = None,
            Wakeup::Check => match slots.oldest_sent() {
                None => check_armed = false,
                Some(oldest) if oldest + setup.timeout <= Instant::now() => {
                    slots.lose_all(w, ErrorKind::Timeout);
                    return End::Reconnect;
                }
                Some(oldest) => check.as_mut().reset((oldest + setup.timeout).into()),
            },
        }
    }
}

/// The connection's stream slots: the request in flight in each, and those free.
struct Slots {
    slots: Vec<Option<InFlight>>,
    free: Vec<usize>,
}

impl Slots {
    fn new(n: usize) -> Slots {
        Slots {
            slots: (0..n).map(|_| None).collect(),
            free: (0..n).rev().collect(),
        }
    }

    fn in_flight(&self) -> bool {
        self.free.len() < self.slots.len()
    }

    /// Start every request that is due on a free slot the server allows: requests given back
    /// first, with their intended time. Returns when the next one not yet due is.
    fn start(
        &mut self,
        w: &WorkerRef,
        c: &mut Client,
        scheds: &mut [Schedule],
        budget: &Budget,
        now: Instant,
    ) -> Option<Instant> {
        let mut due: Option<Instant> = None;
        let mut k = 0;
        while k < self.free.len() && c.can_start() {
            let slot = self.free[k];
            let (i, intended) = match w.take_retry() {
                Some(again) => again,
                None => {
                    let intended = match scheds[slot].peek() {
                        Some(t) if t > now => {
                            due = Some(due.map_or(t, |d| d.min(t)));
                            k += 1;
                            continue;
                        }
                        Some(_) => scheds[slot].advance(),
                        None => None,
                    };
                    let Some(i) = w.take_on(budget) else { break };
                    w.rec.borrow_mut().sent(intended, now);
                    (i, intended)
                }
            };
            self.free.swap_remove(k);
            c.start(&w.setup.target(i).h2_block, &w.setup.data, slot);
            self.slots[slot] = Some(InFlight {
                index: i,
                intended,
                sent: now,
                first_byte: None,
            });
        }
        due
    }

    /// Record what the client's events say of the requests in flight (`now`: when their bytes
    /// were read).
    fn answered(&mut self, w: &WorkerRef, c: &mut Client, now: Instant, progressed: &mut bool) {
        for ev in c.events() {
            match ev {
                RequestEvent::Head { slot } => {
                    if let Some(f) = &mut self.slots[slot] {
                        f.first_byte.get_or_insert(now);
                    }
                }
                RequestEvent::Done {
                    slot,
                    status,
                    head_bytes,
                    body_bytes,
                } => {
                    let f = self.slots[slot].take().expect("in flight");
                    self.free.push(slot);
                    finish(w, f, status, head_bytes, body_bytes, now);
                    *progressed = true;
                }
                RequestEvent::Interim { .. } => w.interim(),
                RequestEvent::Reset { slot } => {
                    self.slots[slot] = None;
                    self.free.push(slot);
                    w.error(ErrorKind::Reset);
                }
                RequestEvent::Unprocessed { slot } => {
                    self.free.push(slot);
                    unprocessed(w, self.slots[slot].take().into_iter(), *progressed);
                }
                RequestEvent::Malformed { slot } => {
                    self.slots[slot] = None;
                    self.free.push(slot);
                    w.error(ErrorKind::Protocol);
                }
            }
        }
    }

    /// Every request in flight is lost, as `kind`.
    fn lose_all(&mut self, w: &WorkerRef, kind: ErrorKind) {
        lose(w, self.slots.iter_mut().filter_map(Option::take), kind);
    }

    /// When the oldest request in flight was sent.
    fn oldest_sent(&self) -> Option<Instant> {
        self.slots.iter().flatten().map(|f| f.sent).min()
    }
}

/// The connection's bytes: what the client has to send (written as the socket takes it), and
/// the read buffer.
struct Wire {
    wbuf: Vec<u8>,
    wpos: usize,
    /// Bytes were written since the last flush.
    flush: bool,
    rbuf: Vec<u8>,
}

impl Default for Wire {
    fn default() -> Wire {
        Wire {
            wbuf: Vec::new(),
            wpos: 0,
            flush: false,
            rbuf: vec![0u8; 64 * 1024],
        }
    }
}

impl Wire {
    /// Write what the client has to send, then read: reads and writes in one poll, so neither
    /// waits on the other.
    fn poll<IO: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        cx: &mut Context<'_>,
        io: &mut IO,
        c: &mut Client,
    ) -> Poll<Wakeup> {
        loop {
            if self.wpos == self.wbuf.len() {
                if !self.wbuf.is_empty() {
                    self.wbuf.clear();
                    self.wpos = 0;
                    self.flush = true;
                }
                if !c.has_output() {
                    break;
                }
                c.take_output(&mut self.wbuf);
            }
            match Pin::new(&mut *io).poll_write(cx, &self.wbuf[self.wpos..]) {
                Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Poll::Ready(Wakeup::Closed),
                Poll::Ready(Ok(n)) => self.wpos += n,
                Poll::Pending => break,
            }
        }
        if self.flush {
            match Pin::new(&mut *io).poll_flush(cx) {
                Poll::Ready(Ok(())) => self.flush = false,
                Poll::Ready(Err(_)) => return Poll::Ready(Wakeup::Closed),
                Poll::Pending => {}
            }
        }
        let mut rb = ReadBuf::new(&mut self.rbuf);
        match Pin::new(&mut *io).poll_read(cx, &mut rb) {
            Poll::Ready(Ok(())) if rb.filled().is_empty() => Poll::Ready(Wakeup::Closed),
            Poll::Ready(Ok(())) => Poll::Ready(Wakeup::Read(rb.filled().len())),
            Poll::Ready(Err(_)) => Poll::Ready(Wakeup::Closed),
            Poll::Pending => Poll::Pending,
        }
    }
}

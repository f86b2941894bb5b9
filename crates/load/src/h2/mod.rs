//! HTTP/2 load (TLS and h2c): one task per connection driving a sans-I/O [`client::Client`],
//! with reads and writes in a single poll so neither waits on the other.
//!
//! Purpose-built rather than the `h2` crate, which cost 1.55× h2load's client CPU per request
//! on small responses (`bench/compare-clients.sh`, see docs/PERFORMANCE.md): it runs a task per
//! request plus a connection task, with wakeups and locking between them.

mod client;

use crate::inflight::{finish, lose, unprocessed, End, InFlight};
use crate::record::ErrorKind;
use crate::sched::Schedule;
use crate::shared::WorkerRef;
use crate::timer;
use client::{Client, Event};
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

enum Step {
    Read(usize),
    Closed,
    /// An open-loop send is due.
    Wake,
    /// Time to check the oldest request against the timeout.
    Check,
}

/// Run one HTTP/2 connection; `scheds` holds one schedule per concurrent stream slot.
pub(crate) async fn connection<IO>(w: &WorkerRef, mut io: IO, scheds: &mut [Schedule]) -> End
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let setup = w.setup.clone();
    let mut c = Client::new(&setup.offer);
    if setup.is_head {
        c.head_requests();
    }
    let mut slots: Vec<Option<InFlight>> = scheds.iter().map(|_| None).collect();
    let mut free: Vec<usize> = (0..scheds.len()).rev().collect();
    let (mut wbuf, mut wpos, mut flush) = (Vec::new(), 0, false);
    let mut rbuf = vec![0u8; 64 * 1024];
    // Re-armed only when it fires, not per request.
    let mut check: Pin<Box<Sleep>> = Box::pin(tokio::time::sleep(setup.timeout));
    let mut check_armed = false;
    let mut wake: Option<timer::Sleep> = None;
    // A response completed on this connection: requests it left unprocessed may be sent again.
    let mut progressed = false;
    loop {
        let now = Instant::now();
        let mut due: Option<Instant> = None;
        let mut k = 0;
        while k < free.len() && c.can_start() {
            let slot = free[k];
            // Requests given back go first, with their intended time.
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
                    let Some(i) = w.take() else { break };
                    w.rec.borrow_mut().sent(intended, now);
                    (i, intended)
                }
            };
            free.swap_remove(k);
            c.start(&setup.target(i).h2_block, &setup.data, slot);
            slots[slot] = Some(InFlight {
                index: i,
                intended,
                sent: now,
                first_byte: None,
            });
            if !check_armed {
                check.as_mut().reset((now + setup.timeout).into());
                check_armed = true;
            }
        }
        if c.in_flight() == 0 && (!w.more() || c.going_away()) {
            return if w.more() {
                End::Reconnect
            } else {
                End::Finished
            };
        }
        let due = due.filter(|_| w.more());
        if due != wake.as_ref().map(timer::Sleep::deadline) {
            wake = due.map(timer::sleep_until);
        }
        let step = std::future::poll_fn(|cx| {
            loop {
                if wpos == wbuf.len() {
                    if !wbuf.is_empty() {
                        wbuf.clear();
                        wpos = 0;
                        flush = true;
                    }
                    if !c.has_output() {
                        break;
                    }
                    c.take_output(&mut wbuf);
                }
                match Pin::new(&mut io).poll_write(cx, &wbuf[wpos..]) {
                    Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Poll::Ready(Step::Closed),
                    Poll::Ready(Ok(n)) => wpos += n,
                    Poll::Pending => break,
                }
            }
            if flush {
                match Pin::new(&mut io).poll_flush(cx) {
                    Poll::Ready(Ok(())) => flush = false,
                    Poll::Ready(Err(_)) => return Poll::Ready(Step::Closed),
                    Poll::Pending => {}
                }
            }
            let mut rb = ReadBuf::new(&mut rbuf);
            match Pin::new(&mut io).poll_read(cx, &mut rb) {
                Poll::Ready(Ok(())) if rb.filled().is_empty() => return Poll::Ready(Step::Closed),
                Poll::Ready(Ok(())) => return Poll::Ready(Step::Read(rb.filled().len())),
                Poll::Ready(Err(_)) => return Poll::Ready(Step::Closed),
                Poll::Pending => {}
            }
            if wake
                .as_mut()
                .is_some_and(|s| Pin::new(s).poll(cx).is_ready())
            {
                return Poll::Ready(Step::Wake);
            }
            if check_armed && check.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Step::Check);
            }
            Poll::Pending
        })
        .await;
        match step {
            Step::Read(n) => {
                let fed = c.feed(&rbuf[..n]);
                let now = Instant::now();
                for ev in c.events() {
                    match ev {
                        Event::Head { slot } => {
                            if let Some(f) = &mut slots[slot] {
                                f.first_byte.get_or_insert(now);
                            }
                        }
                        Event::Done {
                            slot,
                            status,
                            head_bytes,
                            body_bytes,
                        } => {
                            let f = slots[slot].take().expect("in flight");
                            free.push(slot);
                            finish(w, f, status, head_bytes, body_bytes, now);
                            progressed = true;
                        }
                        Event::Interim { .. } => w.interim(),
                        Event::Reset { slot } => {
                            slots[slot] = None;
                            free.push(slot);
                            w.error(ErrorKind::Reset);
                        }
                        Event::Unprocessed { slot } => {
                            free.push(slot);
                            unprocessed(w, slots[slot].take().into_iter(), progressed);
                        }
                        Event::Malformed { slot } => {
                            slots[slot] = None;
                            free.push(slot);
                            w.error(ErrorKind::Protocol);
                        }
                    }
                }
                if fed.is_err() {
                    lose(
                        w,
                        slots.iter_mut().filter_map(Option::take),
                        ErrorKind::Protocol,
                    );
                    return End::Reconnect;
                }
            }
            Step::Closed => {
                lose(
                    w,
                    slots.iter_mut().filter_map(Option::take),
                    ErrorKind::Reset,
                );
                return End::Reconnect;
            }
            Step::Wake => wake = None,
            Step::Check => match slots.iter().flatten().map(|f| f.sent).min() {
                None => check_armed = false,
                Some(oldest) if oldest + setup.timeout <= Instant::now() => {
                    lose(
                        w,
                        slots.iter_mut().filter_map(Option::take),
                        ErrorKind::Timeout,
                    );
                    return End::Reconnect;
                }
                Some(oldest) => check.as_mut().reset((oldest + setup.timeout).into()),
            },
        }
    }
}

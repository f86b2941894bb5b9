//! HTTP/1.1 client: prebuilt requests pipelined up to `-m` deep, responses matched in order and
//! parsed by the sans-I/O [`response::Parser`], bodies counted, never copied.

mod response;

use crate::inflight::{finish, lose, unprocessed, End, InFlight};
use crate::record::ErrorKind;
use crate::sched::Schedule;
use crate::shared::{Budget, WorkerRef};
use loadterm_runtime::within;
use response::{ParseProgress, Parser};
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Request bodies up to this size are copied behind their head, all pipelined requests in one
/// write; larger ones go from the shared upload buffer, head and body in one vectored write:
/// copying a 20 MB body for every request cost the client about 2 ms of a 25 ms upload.
const COPY_BODY_UP_TO: usize = 64 * 1024;

/// Write `head` and then `body`, not copied: vectored writes until both are out.
async fn write_head_and_body<IO: AsyncWrite + Unpin>(
    io: &mut IO,
    mut head: &[u8],
    mut body: &[u8],
) -> std::io::Result<()> {
    while !head.is_empty() || !body.is_empty() {
        let n = if head.is_empty() {
            io.write(body).await?
        } else {
            let parts = [std::io::IoSlice::new(head), std::io::IoSlice::new(body)];
            io.write_vectored(&parts).await?
        };
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        let from_head = n.min(head.len());
        head = &head[from_head..];
        body = &body[n - from_head..];
    }
    Ok(())
}

/// HTTP/1.1 with up to `streams` pipelined requests; responses matched in order.
pub(crate) async fn connection<IO: AsyncRead + AsyncWrite + Unpin>(
    w: &WorkerRef,
    mut io: IO,
    sched: &mut Schedule,
    budget: &Budget,
) -> End {
    let setup = w.setup.clone();
    let mut parser = Parser::default();
    let mut p = Pipeline {
        inflight: VecDeque::with_capacity(setup.streams),
        queued: Vec::with_capacity(setup.streams),
        out: Vec::with_capacity(4096),
        copy_body: setup.data.len() <= COPY_BODY_UP_TO,
    };
    let mut buf = vec![0u8; 64 * 1024];
    // The next open-loop send while reading; kept across reads (a new one per read would leave
    // a stale entry in the timer's heap each time), replaced when the due time changes.
    let mut wake: Option<crate::timer::Sleep> = None;
    // The connection's one timeout timer (`within`).
    let mut timer = std::pin::pin!(tokio::time::sleep(Duration::ZERO));
    loop {
        let now = Instant::now();
        p.top_up(w, sched, budget, now);
        if !p.queued.is_empty() {
            let write = async {
                if p.copy_body {
                    return io.write_all(&p.out).await;
                }
                for &(i, ..) in &p.queued {
                    write_head_and_body(&mut io, &setup.target(i).h1_request, &setup.data).await?;
                }
                Ok(())
            };
            if within(timer.as_mut(), setup.timeout, write)
                .await
                .map(|r| r.is_ok())
                != Some(true)
            {
                p.lose_all(w, ErrorKind::Reset);
                return End::Reconnect;
            }
            let _ = io.flush().await;
            // A request's time starts when its first byte is written, as on HTTP/2 and 3: an
            // upload's transfer is part of it (taken after the write, a 20 MB upload measured
            // 0.88 ms instead of 12).
            p.sent(w, now);
        }
        if p.inflight.is_empty() {
            match sched.peek() {
                Some(next) if w.more_on(budget) => {
                    crate::timer::sleep_until(next).await;
                    continue;
                }
                _ => return End::Finished,
            }
        }
        // Read, but wake up for the next open-loop send if the pipeline has room.
        let room = p.inflight.len() < setup.streams;
        let due = sched.peek().filter(|_| room && w.more_on(budget));
        if due != wake.as_ref().map(crate::timer::Sleep::deadline) {
            wake = due.map(crate::timer::sleep_until);
        }
        let read = tokio::select! {
            // Read first: no random draw per read, and a response that is there is taken
            // before the next send.
            biased;
            r = within(timer.as_mut(), setup.timeout, io.read(&mut buf)) => r,
            _ = sleep_opt(&mut wake) => continue,
        };
        let ended = match read {
            None => {
                p.lose_all(w, ErrorKind::Timeout);
                Some(End::Reconnect)
            }
            Some(Err(_)) | Some(Ok(0)) => Some(p.closed(w, &mut parser)),
            Some(Ok(n)) => p.responses(w, &mut parser, &buf[..n], setup.is_head),
        };
        if let Some(end) = ended {
            return end;
        }
    }
}

/// A connection's requests: those queued to be written (with their bytes in `out` when bodies
/// are copied), and those in flight, in the order their responses come.
struct Pipeline {
    inflight: VecDeque<InFlight>,
    /// (request, intended time, given back).
    queued: Vec<(u64, Option<Instant>, bool)>,
    out: Vec<u8>,
    copy_body: bool,
}

impl Pipeline {
    /// Top up the pipeline: closed loop to `-m`, open loop with what is due; requests given
    /// back go first, with their intended time.
    fn top_up(&mut self, w: &WorkerRef, sched: &mut Schedule, budget: &Budget, now: Instant) {
        while self.inflight.len() + self.queued.len() < w.setup.streams {
            let (i, intended, again) = match w.take_retry() {
                Some((i, intended)) => (i, intended, true),
                None => {
                    let intended = match sched.peek() {
                        Some(t) if t > now => break,
                        Some(_) => sched.advance(),
                        None => None,
                    };
                    let Some(i) = w.take_on(budget) else { break };
                    (i, intended, false)
                }
            };
            if self.copy_body {
                self.out.extend_from_slice(&w.setup.target(i).h1_request);
                self.out.extend_from_slice(&w.setup.data);
            }
            self.queued.push((i, intended, again));
        }
    }

    /// The queued requests were written, starting at `sent`: now in flight.
    fn sent(&mut self, w: &WorkerRef, sent: Instant) {
        self.out.clear();
        let mut rec = w.rec.borrow_mut();
        for (index, intended, again) in self.queued.drain(..) {
            if !again {
                rec.sent(intended, sent);
            }
            self.inflight.push_back(InFlight {
                index,
                intended,
                sent,
                first_byte: None,
            });
        }
    }

    /// Every request in flight or queued is lost, as `kind`.
    fn lose_all(&mut self, w: &WorkerRef, kind: ErrorKind) {
        lose(w, self.inflight.drain(..), kind);
        for _ in self.queued.drain(..) {
            w.error(kind);
        }
    }

    /// The server closed the connection (or it broke). A close-delimited body ends here (the
    /// requests behind it were not processed: sent again, as after an announced close), a
    /// response cut short is a protocol error; otherwise the requests in flight are lost (the
    /// front one too: it must not be popped unless it completes).
    fn closed(&mut self, w: &WorkerRef, parser: &mut Parser) -> End {
        match parser.eof() {
            Ok(Some(done)) => {
                let f = self
                    .inflight
                    .pop_front()
                    .expect("a response in progress has a request");
                finish(
                    w,
                    f,
                    done.status,
                    done.head_bytes,
                    done.body_bytes,
                    Instant::now(),
                );
                // This connection answered a request: progress.
                unprocessed(w, self.inflight.drain(..), true);
            }
            Ok(None) => lose(w, self.inflight.drain(..), ErrorKind::Reset),
            Err(_) => {
                lose(
                    w,
                    self.inflight.pop_front().into_iter(),
                    ErrorKind::Protocol,
                );
                lose(w, self.inflight.drain(..), ErrorKind::Reset);
            }
        }
        End::Reconnect
    }

    /// Match the responses in `bytes` (read now) to the requests in flight; how the connection
    /// ends, if it does.
    fn responses(
        &mut self,
        w: &WorkerRef,
        parser: &mut Parser,
        mut bytes: &[u8],
        is_head: bool,
    ) -> Option<End> {
        let now = Instant::now();
        while !bytes.is_empty() {
            let Some(front) = self.inflight.front_mut() else {
                // Bytes nobody asked for.
                w.error(ErrorKind::Protocol);
                return Some(End::Reconnect);
            };
            // The first byte of the final head, not of an interim one before it.
            if parser.idle() {
                front.first_byte = Some(now);
            }
            match parser.feed(bytes, is_head) {
                Err(_) => {
                    lose(w, self.inflight.drain(..), ErrorKind::Protocol);
                    return Some(End::Reconnect);
                }
                Ok(ParseProgress::More) => break,
                Ok(ParseProgress::Interim { consumed }) => {
                    bytes = &bytes[consumed..];
                    w.interim();
                }
                Ok(ParseProgress::Response { done, consumed }) => {
                    bytes = &bytes[consumed..];
                    let f = self.inflight.pop_front().expect("front exists");
                    finish(w, f, done.status, done.head_bytes, done.body_bytes, now);
                    if done.close {
                        // The server processes no request after the one it announced the
                        // close with (RFC 9112 §9.6): the ones pipelined behind it are sent
                        // again on another connection, not lost (this one answered: progress).
                        unprocessed(w, self.inflight.drain(..), true);
                        return Some(End::Reconnect);
                    }
                }
            }
        }
        None
    }
}

async fn sleep_opt(s: &mut Option<crate::timer::Sleep>) {
    match s {
        Some(s) => s.await,
        None => std::future::pending().await,
    }
}

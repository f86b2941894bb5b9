//! One HTTP/3 stream slot: requests one after another, each on a new bidirectional stream;
//! the response's frames read as they come, bodies counted, never copied.

use crate::inflight::{unprocessed, End, InFlight};
use crate::record::{ErrorKind, Sample};
use crate::sched::Schedule;
use crate::shared::{Budget, WorkerRef};
use loadterm_h3::fields::{BodyLength, ResponseFields};
use loadterm_h3::frame::{self, code};
use loadterm_h3::qpack;
use loadterm_h3::reader::{ReadError, Reader};
use loadterm_plan::{is_interim, response_has_body};
use std::cell::Cell;
use std::time::Instant;

/// Largest response field section we take.
const MAX_FIELD_SECTION: u64 = 1 << 20;

/// Why an exchange failed.
enum Fail {
    /// The stream was reset (with the server's error code) or broken: the connection may still
    /// serve others.
    Stream(Option<u64>),
    /// The server did not process the request (`unprocessed_stream`): it may be sent again.
    Unprocessed,
    /// The server broke the protocol.
    Protocol,
    /// The response is malformed (RFC 9114 §4.1.2): a protocol error, on this stream only.
    Malformed,
    /// The server ended the stream after interim (1xx) heads only: no answer, but no reason
    /// to drop the connection.
    NoFinal,
}

impl From<ReadError> for Fail {
    fn from(e: ReadError) -> Fail {
        match e {
            ReadError::Truncated => Fail::Protocol,
            ReadError::Reset(code) => Fail::Stream(Some(code)),
            ReadError::Broken => Fail::Stream(None),
        }
    }
}

struct Response {
    first_byte: Instant,
    status: u16,
    head_bytes: u64,
    body_bytes: u64,
}

pub(super) async fn stream_loop(
    w: &WorkerRef,
    conn: &quinn::Connection,
    sched: &mut Schedule,
    goaway: &Cell<Option<u64>>,
    progressed: &Cell<bool>,
    budget: &Budget,
) -> End {
    let setup = w.setup.clone();
    let mut decoder = qpack::QpackDecoder::default();
    let mut fields = ResponseFields::default();
    loop {
        if goaway.get().is_some() {
            return End::Reconnect;
        }
        // Requests given back go first, with their intended time.
        let (i, intended, again) = match w.take_retry() {
            Some((i, intended)) => (i, intended, true),
            None => {
                // Open loop: the connection may have received GOAWAY or closed meanwhile (no
                // new request then, RFC 9114 §5.2); the schedule carries on on the next one.
                if let Some(t) = sched.peek() {
                    crate::timer::sleep_until(t).await;
                    if goaway.get().is_some() || conn.close_reason().is_some() {
                        return End::Reconnect;
                    }
                }
                let intended = sched.advance();
                let Some(i) = w.take_on(budget) else {
                    return End::Finished;
                };
                (i, intended, false)
            }
        };
        let sent = Instant::now();
        if !again {
            w.rec.borrow_mut().sent(intended, sent);
        }
        let request = setup.target(i).h3_request.clone();
        let exchange = exchange(w, conn, request, goaway, &mut decoder, &mut fields);
        match tokio::time::timeout(setup.timeout, exchange).await {
            Ok(Ok(r)) => {
                progressed.set(true);
                w.done(&Sample {
                    intended,
                    sent,
                    first_byte: r.first_byte,
                    done: Instant::now(),
                    status: r.status,
                    head_bytes: r.head_bytes,
                    body_bytes: r.body_bytes,
                })
            }
            Ok(Err(Fail::NoFinal)) => w.error(ErrorKind::Reset),
            Ok(Err(Fail::Malformed)) => w.error(ErrorKind::Protocol),
            Ok(Err(Fail::Unprocessed)) => {
                let f = InFlight {
                    index: i,
                    intended,
                    sent,
                    first_byte: None,
                };
                unprocessed(w, std::iter::once(f), progressed.get());
                if conn.close_reason().is_some() {
                    return End::Reconnect;
                }
            }
            Ok(Err(Fail::Stream(_))) => {
                w.error(ErrorKind::Reset);
                if conn.close_reason().is_some() {
                    return End::Reconnect;
                }
            }
            Ok(Err(Fail::Protocol)) => {
                w.error(ErrorKind::Protocol);
                conn.close(code::GENERAL_PROTOCOL_ERROR.into(), b"");
                return End::Reconnect;
            }
            Err(_) => {
                w.error(ErrorKind::Timeout);
                return End::Reconnect;
            }
        }
    }
}

/// One request on a new stream. A failure is `Fail::Unprocessed` when the server did not
/// process the request (`unprocessed_stream`).
async fn exchange(
    w: &WorkerRef,
    conn: &quinn::Connection,
    request: bytes::Bytes,
    goaway: &Cell<Option<u64>>,
    decoder: &mut qpack::QpackDecoder,
    fields: &mut ResponseFields,
) -> Result<Response, Fail> {
    let (id, result) = match conn.open_bi().await {
        Ok((send, recv)) => {
            let id = u64::from(send.id());
            (
                id,
                send_and_read(w, send, recv, request, decoder, fields).await,
            )
        }
        // Nothing was sent: the stream would have come after every one opened so far.
        Err(_) => (u64::MAX, Err(Fail::Stream(None))),
    };
    match result {
        Err(Fail::Stream(code)) if unprocessed_stream(id, code, goaway.get()) => {
            Err(Fail::Unprocessed)
        }
        r => r,
    }
}

async fn send_and_read(
    w: &WorkerRef,
    mut send: quinn::SendStream,
    recv: quinn::RecvStream,
    request: bytes::Bytes,
    decoder: &mut qpack::QpackDecoder,
    fields: &mut ResponseFields,
) -> Result<Response, Fail> {
    let data = &w.setup.data;
    let mut chunks = [request, data.clone()];
    let n = if data.is_empty() { 1 } else { 2 };
    match send.write_all_chunks(&mut chunks[..n]).await {
        Ok(()) => {}
        // Stopped by the server: its code may say the request was rejected.
        Err(quinn::WriteError::Stopped(code)) => return Err(Fail::Stream(Some(code.into()))),
        Err(_) => return Err(Fail::Stream(None)),
    }
    let _ = send.finish();
    let mut r = Reader::new(recv);
    let result = read_response(w, &mut r, decoder, fields).await;
    if matches!(result, Err(Fail::Malformed)) {
        r.stop(code::MESSAGE_ERROR);
    }
    result
}

/// Whether the server did not process the request on stream `id`, which failed (reset with
/// `code`, or broken): it refused it (H3_REQUEST_REJECTED, RFC 9114 §4.1.1), or the stream is
/// at or above its GOAWAY's stream ID (§5.2). Any other failure may come after processing.
fn unprocessed_stream(id: u64, code: Option<u64>, goaway: Option<u64>) -> bool {
    code == Some(code::REQUEST_REJECTED.into()) || goaway.is_some_and(|g| id >= g)
}

/// Read a response's frames, validating its fields and its length.
async fn read_response(
    w: &WorkerRef,
    r: &mut Reader,
    decoder: &mut qpack::QpackDecoder,
    fields: &mut ResponseFields,
) -> Result<Response, Fail> {
    // When the final head began to arrive (an interim one's arrival is not the answer's).
    let mut first_byte = None;
    let mut status = None;
    // DATA against the final head's content-length.
    let mut body = BodyLength::new(None);
    let (mut head_bytes, mut interim) = (0u64, false);
    while let Some((ty, len)) = r.frame_head().await? {
        match ty {
            frame::HEADERS => {
                let at = status.is_none().then(Instant::now);
                if len > MAX_FIELD_SECTION {
                    return Err(Fail::Protocol);
                }
                let section = r.payload(len as usize).await?;
                fields.begin(status.is_some());
                decoder
                    .decode(&section, MAX_FIELD_SECTION, |n, v| fields.field(n, v))
                    .map_err(|_| Fail::Protocol)?;
                let facts = fields.finish().map_err(|_| Fail::Malformed)?;
                let fields = facts.field_bytes;
                match (status, facts.status) {
                    // Trailers.
                    (Some(_), _) => head_bytes += fields,
                    // 101 has no place in HTTP/3 (RFC 9114 §4.5).
                    (None, 101) => return Err(Fail::Protocol),
                    // Interim (1xx): the final head follows.
                    (None, s) if is_interim(s) => {
                        interim = true;
                        w.interim();
                    }
                    (None, s) => {
                        status = Some(s);
                        let has_body = response_has_body(w.setup.is_head, s);
                        body = BodyLength::new(facts.content_length.filter(|_| has_body));
                        first_byte = at;
                        // As HTTP/1.1 would spell the status line, so that head bytes compare.
                        head_bytes = fields + 12;
                    }
                }
            }
            frame::DATA if status.is_some() => {
                body.data(len).map_err(|_| Fail::Malformed)?;
                r.skip(len).await?;
            }
            frame::DATA
            | frame::SETTINGS
            | frame::GOAWAY
            | frame::MAX_PUSH_ID
            | frame::PUSH_PROMISE
            | frame::CANCEL_PUSH => return Err(Fail::Protocol),
            t if frame::is_h2_only(t) => return Err(Fail::Protocol),
            _ => r.skip(len).await?,
        }
    }
    let Some(status) = status else {
        return Err(if interim {
            Fail::NoFinal
        } else {
            Fail::Protocol
        });
    };
    body.end().map_err(|_| Fail::Malformed)?;
    Ok(Response {
        first_byte: first_byte.unwrap_or_else(Instant::now),
        status,
        head_bytes,
        body_bytes: body.received(),
    })
}

#[cfg(test)]
mod tests {
    use super::unprocessed_stream;
    use loadterm_h3::frame::code;

    #[test]
    fn which_failed_requests_were_not_processed() {
        let rejected = Some(code::REQUEST_REJECTED.into());
        let cancelled = Some(code::REQUEST_CANCELLED.into());
        // No GOAWAY: only a refusal says the request was not processed.
        assert!(unprocessed_stream(8, rejected, None));
        assert!(!unprocessed_stream(8, cancelled, None));
        assert!(!unprocessed_stream(8, None, None));
        // GOAWAY with stream ID 8: streams 8 and above were not processed, below it may have
        // been, whatever ended them (a refusal still says so).
        for (id, code) in [(8, None), (8, cancelled), (12, None), (400, rejected)] {
            assert!(unprocessed_stream(id, code, Some(8)), "{id} {code:?}");
        }
        for (id, code) in [(0, None), (4, cancelled)] {
            assert!(!unprocessed_stream(id, code, Some(8)), "{id} {code:?}");
        }
        assert!(unprocessed_stream(4, rejected, Some(8)));
        // GOAWAY 0: nothing was processed.
        assert!(unprocessed_stream(0, None, Some(0)));
        // A stream that could not be opened (`u64::MAX`): unprocessed after a GOAWAY only.
        assert!(unprocessed_stream(u64::MAX, None, Some(8)));
        assert!(!unprocessed_stream(u64::MAX, None, None));
    }
}

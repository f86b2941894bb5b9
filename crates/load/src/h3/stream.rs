//! One HTTP/3 stream slot: requests one after another, each on a new bidirectional stream;
//! the response's frames read as they come, bodies counted, never copied.

use crate::inflight::End;
use crate::record::{ErrorKind, Sample};
use crate::sched::Schedule;
use crate::shared::WorkerRef;
use loadterm_h3::fields::{BodyLength, ResponseFields};
use loadterm_h3::frame::{self, code};
use loadterm_h3::qpack;
use loadterm_h3::reader::{ReadError, Reader};
use std::cell::Cell;
use std::time::Instant;

/// Largest response field section we take.
const MAX_FIELD_SECTION: u64 = 1 << 20;

/// Why an exchange failed.
enum Fail {
    /// The stream was reset or broken: the connection may still serve others.
    Stream,
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
            ReadError::Reset(_) | ReadError::Broken => Fail::Stream,
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
    goaway: &Cell<bool>,
) -> End {
    let setup = w.setup.clone();
    let mut decoder = qpack::Decoder::default();
    let mut fields = ResponseFields::default();
    loop {
        if goaway.get() {
            return End::Reconnect;
        }
        let intended = sched.wait().await;
        let Some(i) = w.take() else {
            return End::Finished;
        };
        let sent = Instant::now();
        w.rec.borrow_mut().sent(intended, sent);
        let request = setup.target(i).h3_request.clone();
        let exchange = exchange(w, conn, request, &setup.data, &mut decoder, &mut fields);
        match tokio::time::timeout(setup.timeout, exchange).await {
            Ok(Ok(r)) => w.done(&Sample {
                intended,
                sent,
                first_byte: r.first_byte,
                done: Instant::now(),
                status: r.status,
                head_bytes: r.head_bytes,
                body_bytes: r.body_bytes,
            }),
            Ok(Err(Fail::NoFinal)) => w.error(ErrorKind::Reset),
            Ok(Err(Fail::Malformed)) => w.error(ErrorKind::Protocol),
            Ok(Err(Fail::Stream)) => {
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

async fn exchange(
    w: &WorkerRef,
    conn: &quinn::Connection,
    request: bytes::Bytes,
    data: &bytes::Bytes,
    decoder: &mut qpack::Decoder,
    fields: &mut ResponseFields,
) -> Result<Response, Fail> {
    let (mut send, recv) = conn.open_bi().await.map_err(|_| Fail::Stream)?;
    let mut chunks = [request, data.clone()];
    let n = if data.is_empty() { 1 } else { 2 };
    send.write_all_chunks(&mut chunks[..n])
        .await
        .map_err(|_| Fail::Stream)?;
    let _ = send.finish();
    let mut r = Reader::new(recv);
    let result = read_response(w, &mut r, decoder, fields).await;
    if matches!(result, Err(Fail::Malformed)) {
        r.stop(code::MESSAGE_ERROR);
    }
    result
}

/// Read a response's frames, validating its fields and its length.
async fn read_response(
    w: &WorkerRef,
    r: &mut Reader,
    decoder: &mut qpack::Decoder,
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
                    (None, s) if s < 200 => {
                        interim = true;
                        w.interim();
                    }
                    (None, s) => {
                        status = Some(s);
                        // No body follows a HEAD's response, a 204's or a 304's, whatever its
                        // content-length says.
                        let bodiless = w.setup.is_head || s == 204 || s == 304;
                        body = BodyLength::new(facts.content_length.filter(|_| !bodiless));
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

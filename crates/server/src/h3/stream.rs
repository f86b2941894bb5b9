//! One HTTP/3 request/response exchange on a bidirectional QUIC stream. Response bodies go to
//! quinn as static `Bytes` (zero copy): with the `h3` crate every body byte was copied into a
//! fresh buffer first, and quinn's packet builder then read that cold copy (perf, H3 256k:
//! 13% of server CPU in memcpy).

use crate::config::Config;
use crate::mapped::{plan_fields, text_fields};
use bytes::Bytes;
use loadterm_h3::frame::{self, code, ReadError, Reader};
use loadterm_h3::qpack::{self, QpackError};
use loadterm_plan::headers::Timing;
use loadterm_plan::pages::{self, ErrorPage};
use loadterm_plan::{body, Outcome, Plan};
use std::cell::RefCell;
use std::time::{Duration, Instant};

/// What the server takes from a request's field section.
#[derive(Default)]
struct RequestHead {
    decoder: qpack::Decoder,
    method: Vec<u8>,
    path: Vec<u8>,
    /// The `x-loadterm` control header, if any.
    control: Option<Vec<u8>>,
    /// Regular fields as `name: value\r\n`, for the x-req size.
    field_bytes: u64,
    /// An `expect` field (100-continue) was sent.
    expect: bool,
}

impl RequestHead {
    fn decode(&mut self, section: &[u8], max: u64) -> Result<(), QpackError> {
        let RequestHead {
            decoder,
            method,
            path,
            control,
            field_bytes,
            expect,
        } = self;
        method.clear();
        path.clear();
        *control = None;
        *field_bytes = 0;
        *expect = false;
        decoder.decode(section, max, |name, value| match name {
            b":method" => method.extend_from_slice(value),
            b":path" => path.extend_from_slice(value),
            n if n.starts_with(b":") => {}
            n => {
                *field_bytes += (n.len() + value.len() + 4) as u64;
                if n == loadterm_plan::CONTROL_HEADER.as_bytes() {
                    *control = Some(value.to_vec());
                }
                *expect |= n == b"expect";
            }
        })
    }
}

thread_local! {
    /// Decoded request heads, reused: decoding allocates nothing once warm.
    static HEAD: RefCell<RequestHead> = RefCell::default();
    /// Rendered x-req/x-rsp values.
    static SCRATCH: RefCell<Vec<u8>> = RefCell::default();
}

/// A HEADERS frame, its field section made by `fields`, in one buffer: the section is written
/// after room for the frame head (type and a 2-byte length), then the head is put just
/// before it, its start returned.
fn headers_frame(
    out: &mut Vec<u8>,
    status: u16,
    fields: impl FnOnce(&mut dyn FnMut(&'static str, &[u8])),
) -> usize {
    out.extend_from_slice(&[0; 3]);
    qpack::begin_response(out, status);
    fields(&mut |name, value| qpack::field(out, name, value));
    let len = out.len() - 3;
    let mut head = Vec::with_capacity(3);
    frame::put_frame_head(&mut head, frame::HEADERS, len as u64);
    if head.len() > 3 {
        // Not with the fields we send (well under 16 KiB), but stay correct regardless.
        out.splice(0..3, head);
        return 0;
    }
    let start = 3 - head.len();
    out[start..3].copy_from_slice(&head);
    start
}

struct Exchange {
    send: quinn::SendStream,
    recv: Reader,
    timeout: Duration,
}

/// Why a request stream is abandoned.
enum Abort {
    /// Reset both directions with this code.
    Reset(u32),
    /// The connection must close with this code.
    Connection(u32),
    /// Answer with this status (431, 408) and end.
    Status(ErrorPage),
}

impl From<ReadError> for Abort {
    fn from(e: ReadError) -> Abort {
        match e {
            ReadError::Truncated => Abort::Reset(code::REQUEST_INCOMPLETE),
            ReadError::Broken => Abort::Reset(code::REQUEST_CANCELLED),
        }
    }
}

impl Exchange {
    fn reset(&mut self, code: u32) {
        let _ = self.send.reset(code.into());
        self.recv.stop(code);
    }

    /// Write frames (and body slices) whole, bounded by the client timeout: a client that stops
    /// reading is dropped.
    async fn write(&mut self, chunks: &mut [Bytes]) -> bool {
        matches!(
            tokio::time::timeout(self.timeout, self.send.write_all_chunks(chunks)).await,
            Ok(Ok(()))
        )
    }

    async fn text(&mut self, status: u16, text: &str) {
        let mut out = Vec::with_capacity(256 + text.len());
        let start = headers_frame(&mut out, status, |f| text_fields(text.len(), f));
        frame::put_frame(&mut out, frame::DATA, text.as_bytes());
        if self.write(&mut [Bytes::from(out).slice(start..)]).await {
            let _ = self.send.finish();
        }
    }

    /// The request's field section, skipping unknown (grease) frames before its HEADERS.
    async fn head(&mut self, max: u64) -> Result<Bytes, Abort> {
        loop {
            let (ty, len) = self
                .recv
                .frame_head()
                .await?
                .ok_or(Abort::Reset(code::REQUEST_INCOMPLETE))?;
            match ty {
                frame::HEADERS if len > max => {
                    return Err(Abort::Status(ErrorPage::HeadersTooLarge))
                }
                frame::HEADERS => return Ok(self.recv.payload(len as usize).await?),
                t if is_unexpected(t) || t == frame::DATA => {
                    return Err(Abort::Connection(code::FRAME_UNEXPECTED))
                }
                _ => self.recv.skip(len).await?,
            }
        }
    }

    /// Read the rest of the request (body DATA, trailers, unknown frames), counting body bytes.
    async fn drain(&mut self, bytes: &mut u64) -> Result<(), Abort> {
        let timeout = self.timeout;
        let drain = async {
            while let Some((ty, len)) = self.recv.frame_head().await? {
                if is_unexpected(ty) {
                    return Err(Abort::Connection(code::FRAME_UNEXPECTED));
                }
                if ty == frame::DATA {
                    *bytes += len;
                }
                self.recv.skip(len).await?;
            }
            Ok(())
        };
        tokio::time::timeout(timeout, drain)
            .await
            .unwrap_or(Err(Abort::Status(ErrorPage::Timeout)))
    }
}

/// Frames that have no place on a request stream.
fn is_unexpected(ty: u64) -> bool {
    matches!(
        ty,
        frame::CANCEL_PUSH
            | frame::SETTINGS
            | frame::PUSH_PROMISE
            | frame::GOAWAY
            | frame::MAX_PUSH_ID
    ) || frame::is_h2_only(ty)
}

/// Serve one request stream. Returns its send side (finished or reset; a connection that
/// closes must let finished ones be acknowledged first), or the connection error code if the
/// peer broke the protocol.
pub async fn serve(
    send: quinn::SendStream,
    recv: quinn::RecvStream,
    cfg: &Config,
) -> Result<quinn::SendStream, u32> {
    let mut x = Exchange {
        send,
        recv: Reader::new(recv),
        timeout: cfg.timeout,
    };
    match exchange(&mut x, cfg).await {
        Ok(()) => {}
        Err(Abort::Reset(code)) => x.reset(code),
        Err(Abort::Connection(code)) => return Err(code),
        Err(Abort::Status(page)) => {
            x.text(page.status(), page.body()).await;
            x.recv.stop(code::NO_ERROR);
        }
    }
    Ok(x.send)
}

/// A request as planned.
struct Planned {
    outcome: Outcome,
    is_head: bool,
    expect: bool,
    req_bytes: u64,
}

/// Decode a request's field section and plan its response.
fn plan(section: &[u8], max: u64) -> Result<Planned, Abort> {
    HEAD.with(|h| {
        let head = &mut *h.borrow_mut();
        head.decode(section, max).map_err(|e| match e {
            QpackError::TooLarge => Abort::Status(ErrorPage::HeadersTooLarge),
            QpackError::Decompression => Abort::Connection(code::QPACK_DECOMPRESSION_FAILED),
        })?;
        if head.method.is_empty() || head.path.is_empty() {
            return Err(Abort::Reset(code::MESSAGE_ERROR));
        }
        let is_head = head.method == b"HEAD";
        let request = loadterm_plan::Request {
            target: &head.path,
            control: head.control.as_deref(),
            is_head,
        };
        // As `mapped::head_bytes` counts the other protocols' requests.
        Ok(Planned {
            outcome: crate::planner::plan(&request),
            is_head,
            expect: head.expect,
            req_bytes: (head.method.len() + head.path.len() + 12) as u64 + head.field_bytes,
        })
    })
}

async fn exchange(x: &mut Exchange, cfg: &Config) -> Result<(), Abort> {
    let t_first = Instant::now();
    // A request whose head does not arrive in time gets 408, as on HTTP/1.1.
    let section = tokio::time::timeout(cfg.timeout, x.head(cfg.h3.h3_max_header_list))
        .await
        .unwrap_or(Err(Abort::Status(ErrorPage::Timeout)))?;
    let Planned {
        outcome,
        is_head,
        expect,
        mut req_bytes,
    } = plan(&section, cfg.h3.h3_max_header_list)?;
    if expect {
        // 100-continue, as on HTTP/2: an interim head before the body is read.
        let mut interim = Vec::with_capacity(16);
        let start = headers_frame(&mut interim, 100, |_| {});
        if !x.write(&mut [Bytes::from(interim).slice(start..)]).await {
            return Err(Abort::Reset(code::REQUEST_CANCELLED));
        }
    }
    let plan = match outcome {
        Outcome::Respond(plan) => plan,
        Outcome::Reject(e) => {
            x.text(400, &format!("400 Bad Request: {e}\n")).await;
            x.recv.stop(code::NO_ERROR);
            return Ok(());
        }
        Outcome::Help => {
            x.drain(&mut req_bytes).await?;
            x.text(200, if is_head { "" } else { pages::help() }).await;
            return Ok(());
        }
    };
    if !plan.drain_after {
        x.drain(&mut req_bytes).await?;
    }
    let t_req = Instant::now();
    if plan.delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(plan.delay_ms)).await;
    }
    if plan.is_informational() {
        // An interim status cannot be the final answer: send it, then end the stream with no
        // final response (a reset could overtake the interim head).
        let mut interim = Vec::with_capacity(16);
        let start = headers_frame(&mut interim, plan.status, |_| {});
        if x.write(&mut [Bytes::from(interim).slice(start..)]).await {
            let _ = x.send.finish();
        }
        x.recv.stop(code::NO_ERROR);
        return Ok(());
    }
    let timing = Timing {
        req_bytes,
        req_ms: t_req.duration_since(t_first).as_millis() as u64,
        real_ms: t_req.elapsed().as_millis() as u64,
    };
    respond(x, &plan, &timing).await?;
    if plan.drain_after {
        let _ = x.drain(&mut req_bytes).await;
    }
    let _ = x.send.finish();
    Ok(())
}

/// The head, then the body as static slices (zero copy), up to 16 per write (1 MiB).
async fn respond(x: &mut Exchange, plan: &Plan, timing: &Timing) -> Result<(), Abort> {
    let mut first = Vec::with_capacity(256);
    let start = SCRATCH.with(|s| {
        let scratch = &mut *s.borrow_mut();
        headers_frame(&mut first, plan.status, |f| {
            plan_fields(plan, timing, scratch, f)
        })
    });
    if plan.size > 0 {
        frame::put_frame_head(&mut first, frame::DATA, plan.size);
    }
    let mut chunks: [Bytes; 17] = Default::default();
    chunks[0] = Bytes::from(first).slice(start..);
    let (mut n, mut off) = (1, 0u64);
    loop {
        while off < plan.size && n < chunks.len() {
            let len = (plan.size - off).min(body::WINDOW as u64) as usize;
            chunks[n] = Bytes::from_static(body::slice(plan.body, off, len));
            off += len as u64;
            n += 1;
        }
        if !x.write(&mut chunks[..n]).await {
            return Err(Abort::Reset(code::REQUEST_CANCELLED));
        }
        n = 0;
        if off == plan.size {
            return Ok(());
        }
    }
}

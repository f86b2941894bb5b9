//! One HTTP/2 request/response exchange.

use crate::config::Config;
use crate::mapped::response_head;
use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream};
use http::{HeaderValue, Request, Response};
use loadterm_plan::headers::Timing;
use loadterm_plan::pages::{self, ErrorPage};
use loadterm_plan::{body, Outcome};
use std::time::{Duration, Instant};

enum Drain {
    Timeout,
    Broken,
}

/// Read and discard the request body, releasing flow-control capacity as it goes.
async fn drain(body: &mut RecvStream, bytes: &mut u64, limit: Duration) -> Result<(), Drain> {
    loop {
        match tokio::time::timeout(limit, body.data()).await {
            Err(_) => return Err(Drain::Timeout),
            Ok(None) => return Ok(()),
            Ok(Some(Ok(d))) => {
                *bytes += d.len() as u64;
                let _ = body.flow_control().release_capacity(d.len());
            }
            Ok(Some(Err(_))) => return Err(Drain::Broken),
        }
    }
}

fn text_response(respond: &mut SendResponse<Bytes>, status: u16, text: String) {
    let resp = crate::mapped::text_head(status, text.len());
    if let Ok(mut send) = respond.send_response(resp, false) {
        let _ = send.send_data(Bytes::from(text), true);
    }
}

/// A request, planned, with what answering it needs.
pub struct Exchange {
    body: RecvStream,
    respond: SendResponse<Bytes>,
    outcome: Outcome,
    req_bytes: u64,
    t_first: Instant,
    is_head: bool,
    expect: bool,
    alt_svc: Option<HeaderValue>,
}

/// Bodies up to this size are queued whole by the inline path (h2 holds them until the
/// flow-control window opens).
const INLINE_BODY: u64 = 16 * 1024;

impl Exchange {
    pub fn new(
        req: Request<RecvStream>,
        respond: SendResponse<Bytes>,
        alt_svc: Option<HeaderValue>,
    ) -> Exchange {
        let t_first = Instant::now();
        let req_bytes = crate::mapped::head_bytes(&req);
        let is_head = req.method() == http::Method::HEAD;
        let expect = req.headers().contains_key(http::header::EXPECT);
        let outcome = crate::planner::plan(&loadterm_plan::Request {
            target: req
                .uri()
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .as_bytes(),
            control: req
                .headers()
                .get(loadterm_plan::CONTROL_HEADER)
                .map(|v| v.as_bytes()),
            is_head,
        });
        Exchange {
            body: req.into_body(),
            respond,
            outcome,
            req_bytes,
            t_first,
            is_head,
            expect,
            alt_svc,
        }
    }

    /// Answer now, without a task of its own, when nothing in the exchange can wait: no request
    /// body, no delay, a small response. The connection then flushes many responses with one
    /// write instead of one write per stream (measured: docs/PERFORMANCE.md). Otherwise the
    /// exchange is handed back, to be run on its own task.
    pub fn try_now(mut self) -> Option<Exchange> {
        let Outcome::Respond(plan) = &self.outcome else {
            return Some(self);
        };
        if !self.body.is_end_stream()
            || self.expect
            || plan.delay_ms > 0
            || plan.size > INLINE_BODY
            || plan.is_informational()
        {
            return Some(self);
        }
        let timing = Timing {
            req_bytes: self.req_bytes,
            req_ms: 0,
            real_ms: self.t_first.elapsed().as_millis() as u64,
        };
        let Ok(mut resp) = response_head(plan, &timing) else {
            self.respond.send_reset(Reason::INTERNAL_ERROR);
            return None;
        };
        if let Some(v) = self.alt_svc.take() {
            resp.headers_mut().insert(http::header::ALT_SVC, v);
        }
        if let Ok(mut send) = self.respond.send_response(resp, plan.size == 0) {
            if plan.size > 0 {
                let data = body::slice(plan.body, 0, plan.size as usize);
                let _ = send.send_data(Bytes::from_static(data), true);
            }
        }
        None
    }

    pub async fn run(self, cfg: &Config) {
        let Exchange {
            mut body,
            mut respond,
            outcome,
            mut req_bytes,
            t_first,
            is_head,
            expect,
            alt_svc,
        } = self;
        if expect {
            let _ =
                respond.send_informational(Response::builder().status(100).body(()).expect("100"));
        }
        let plan = match outcome {
            Outcome::Respond(plan) => plan,
            Outcome::Reject(e) => {
                return text_response(&mut respond, 400, format!("400 Bad Request: {e}\n"))
            }
            Outcome::Help => {
                if drain(&mut body, &mut req_bytes, cfg.timeout).await.is_err() {
                    return respond.send_reset(Reason::CANCEL);
                }
                let text = if is_head {
                    String::new()
                } else {
                    pages::help().to_owned()
                };
                return text_response(&mut respond, 200, text);
            }
        };
        if !plan.drain_after {
            match drain(&mut body, &mut req_bytes, cfg.timeout).await {
                Ok(()) => {}
                Err(Drain::Timeout) => {
                    let page = ErrorPage::Timeout;
                    return text_response(&mut respond, page.status(), page.body().to_owned());
                }
                Err(Drain::Broken) => return respond.send_reset(Reason::CANCEL),
            }
        }
        let t_req = Instant::now();
        if plan.delay_ms > 0 {
            tokio::time::sleep(Duration::from_millis(plan.delay_ms)).await;
        }
        let timing = Timing {
            req_bytes,
            req_ms: t_req.duration_since(t_first).as_millis() as u64,
            real_ms: t_req.elapsed().as_millis() as u64,
        };
        if plan.is_informational() {
            // A 1xx cannot end a stream: send it as an interim response, then end the exchange.
            let interim = Response::builder()
                .status(plan.status)
                .body(())
                .expect("1xx");
            let _ = respond.send_informational(interim);
            return respond.send_reset(Reason::NO_ERROR);
        }
        let Ok(mut resp) = response_head(&plan, &timing) else {
            return respond.send_reset(Reason::INTERNAL_ERROR);
        };
        if let Some(v) = alt_svc {
            resp.headers_mut().insert(http::header::ALT_SVC, v);
        }
        let Ok(mut send) = respond.send_response(resp, plan.size == 0 && !plan.drain_after) else {
            return;
        };
        let mut off = 0u64;
        while off < plan.size {
            send.reserve_capacity((plan.size - off).min(1 << 20) as usize);
            let cap = match tokio::time::timeout(
                cfg.timeout,
                futures::future::poll_fn(|cx| send.poll_capacity(cx)),
            )
            .await
            {
                Ok(Some(Ok(cap))) if cap > 0 => cap,
                Ok(Some(Ok(_))) => continue,
                // Reset by the client, connection gone, or a client that stopped reading.
                _ => return send.send_reset(Reason::CANCEL),
            };
            let mut left = cap as u64;
            while left > 0 && off < plan.size {
                let chunk = body::slice(plan.body, off, left.min(plan.size - off) as usize);
                off += chunk.len() as u64;
                left -= chunk.len() as u64;
                let last = off == plan.size && !plan.drain_after;
                if send.send_data(Bytes::from_static(chunk), last).is_err() {
                    return;
                }
            }
        }
        if plan.drain_after {
            let _ = drain(&mut body, &mut req_bytes, cfg.timeout).await;
            let _ = send.send_data(Bytes::new(), true);
        }
    }
}

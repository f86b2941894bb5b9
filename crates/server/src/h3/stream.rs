//! One HTTP/3 request/response exchange.

use crate::config::Config;
use crate::mapped::{head_bytes, response_head, text_head};
use bytes::{Buf, Bytes};
use h3::error::Code;
use h3::server::RequestStream;
use h3_quinn::BidiStream;
use http::Request;
use loadterm_plan::headers::Timing;
use loadterm_plan::pages::{self, ErrorPage};
use loadterm_plan::{body, Outcome};
use std::time::{Duration, Instant};

type Stream = RequestStream<BidiStream<Bytes>, Bytes>;

enum Drain {
    Timeout,
    Broken,
}

async fn drain(s: &mut Stream, bytes: &mut u64, limit: Duration) -> Result<(), Drain> {
    loop {
        match tokio::time::timeout(limit, s.recv_data()).await {
            Err(_) => return Err(Drain::Timeout),
            Ok(Ok(None)) => return Ok(()),
            Ok(Ok(Some(mut d))) => {
                let n = d.remaining();
                *bytes += n as u64;
                d.advance(n);
            }
            Ok(Err(_)) => return Err(Drain::Broken),
        }
    }
}

async fn text(s: &mut Stream, status: u16, text: String) {
    if s.send_response(text_head(status, text.len())).await.is_ok() {
        let _ = s.send_data(Bytes::from(text)).await;
        let _ = s.finish().await;
    }
}

pub async fn serve(req: Request<()>, mut s: Stream, cfg: &Config) {
    let t_first = Instant::now();
    let mut req_bytes = head_bytes(&req);
    let is_head = req.method() == http::Method::HEAD;
    let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let control = req
        .headers()
        .get(loadterm_plan::CONTROL_HEADER)
        .map(|v| v.as_bytes());
    let request = loadterm_plan::Request {
        target: target.as_bytes(),
        control,
        is_head,
    };
    let outcome = crate::planner::plan(&request);
    let plan = match outcome {
        Outcome::Respond(plan) => plan,
        Outcome::Reject(e) => return text(&mut s, 400, format!("400 Bad Request: {e}\n")).await,
        Outcome::Help => {
            if drain(&mut s, &mut req_bytes, cfg.timeout).await.is_err() {
                return s.stop_stream(Code::H3_REQUEST_CANCELLED);
            }
            let body = if is_head {
                String::new()
            } else {
                pages::help().to_owned()
            };
            return text(&mut s, 200, body).await;
        }
    };
    if !plan.drain_after {
        match drain(&mut s, &mut req_bytes, cfg.timeout).await {
            Ok(()) => {}
            Err(Drain::Timeout) => {
                let page = ErrorPage::Timeout;
                return text(&mut s, page.status(), page.body().to_owned()).await;
            }
            Err(Drain::Broken) => return s.stop_stream(Code::H3_REQUEST_CANCELLED),
        }
    }
    let t_req = Instant::now();
    if plan.delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(plan.delay_ms)).await;
    }
    if plan.is_informational() {
        // An interim status cannot be the final answer: end the stream without a response.
        return s.stop_stream(Code::H3_NO_ERROR);
    }
    let timing = Timing {
        req_bytes,
        req_ms: t_req.duration_since(t_first).as_millis() as u64,
        real_ms: t_req.elapsed().as_millis() as u64,
    };
    let Ok(head) = response_head(&plan, &timing) else {
        return s.stop_stream(Code::H3_INTERNAL_ERROR);
    };
    if s.send_response(head).await.is_err() {
        return;
    }
    let mut off = 0u64;
    while off < plan.size {
        let chunk = body::slice(
            plan.body,
            off,
            (plan.size - off).min(body::WINDOW as u64) as usize,
        );
        off += chunk.len() as u64;
        // Bounded by the client's flow control: a client that stops reading is dropped.
        match tokio::time::timeout(cfg.timeout, s.send_data(Bytes::from_static(chunk))).await {
            Ok(Ok(())) => {}
            _ => return s.stop_stream(Code::H3_REQUEST_CANCELLED),
        }
    }
    if plan.drain_after {
        let _ = drain(&mut s, &mut req_bytes, cfg.timeout).await;
    }
    let _ = s.finish().await;
}

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

pub async fn serve(
    req: Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    cfg: &Config,
    alt_svc: Option<HeaderValue>,
) {
    let t_first = Instant::now();
    let mut req_bytes = crate::mapped::head_bytes(&req);
    let is_head = req.method() == http::Method::HEAD;
    let target = req
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let control = req
        .headers()
        .get(loadterm_plan::CONTROL_HEADER)
        .map(|v| v.as_bytes().to_vec());
    let expect = req.headers().contains_key(http::header::EXPECT);
    let mut body = req.into_body();
    let request = loadterm_plan::Request {
        target: target.as_bytes(),
        control: control.as_deref(),
        is_head,
    };
    let outcome = crate::planner::plan(&request);
    if expect {
        let _ = respond.send_informational(Response::builder().status(100).body(()).expect("100"));
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

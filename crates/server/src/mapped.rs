//! The plan mapped onto `http` types, shared by the HTTP/2 and HTTP/3 engines (no
//! `connection` or `transfer-encoding` there: C/K/k only drop content-length).

use http::{HeaderValue, Request, Response, StatusCode};
use loadterm_plan::headers::{x_req, x_rsp, Timing};
use loadterm_plan::{ConnForce, Plan};

/// Approximate request size: header lines as `name: value\r\n` plus the body.
pub fn head_bytes<T>(req: &Request<T>) -> u64 {
    let target = req.uri().path_and_query().map_or(1, |p| p.as_str().len());
    let headers: usize = req
        .headers()
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len() + 4)
        .sum();
    (req.method().as_str().len() + target + headers + 12) as u64
}

/// Response head for `plan`: `:status`, content-length (unless chunked/close mode or a
/// bodiless status), cache-control, x-req, x-rsp.
pub fn response_head(plan: &Plan, timing: &Timing) -> Result<Response<()>, http::Error> {
    let mut b =
        Response::builder().status(StatusCode::from_u16(plan.status).map_err(http::Error::from)?);
    if plan.has_length_header() && !plan.chunked && plan.conn != ConnForce::Close {
        b = b.header("content-length", plan.size);
    }
    if !plan.cacheable {
        b = b.header("cache-control", "no-cache");
    }
    let mut v = Vec::with_capacity(96);
    x_req(&mut v, timing);
    b = b.header(
        "x-req",
        HeaderValue::from_bytes(&v).map_err(http::Error::from)?,
    );
    v.clear();
    x_rsp(&mut v, plan, timing);
    b.header(
        "x-rsp",
        HeaderValue::from_bytes(&v).map_err(http::Error::from)?,
    )
    .body(())
}

/// A text/plain response head (errors, help).
pub fn text_head(status: u16, len: usize) -> Response<()> {
    Response::builder()
        .status(status)
        .header("content-length", len)
        .header("cache-control", "no-cache")
        .header("content-type", "text/plain")
        .body(())
        .expect("static response parts")
}

//! The plan mapped onto `http` types, shared by the HTTP/2 and HTTP/3 engines (no
//! `connection` or `transfer-encoding` there: C/K/k only drop content-length).

use http::{Request, Response, StatusCode};
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

/// The response fields for `plan`, in order: content-length (unless chunked/close mode or a
/// bodiless status), cache-control, x-req, x-rsp. `scratch` holds the rendered values.
pub fn plan_fields(
    plan: &Plan,
    timing: &Timing,
    scratch: &mut Vec<u8>,
    mut field: impl FnMut(&'static str, &[u8]),
) {
    if plan.has_length_header() && !plan.chunked && plan.conn != ConnForce::Close {
        field(
            "content-length",
            itoa::Buffer::new().format(plan.size).as_bytes(),
        );
    }
    if !plan.cacheable {
        field("cache-control", b"no-cache");
    }
    scratch.clear();
    x_req(scratch, timing);
    field("x-req", scratch);
    scratch.clear();
    x_rsp(scratch, plan, timing);
    field("x-rsp", scratch);
}

/// Response head for `plan` as `http` types (HTTP/2), fields as [`plan_fields`].
pub fn response_head(plan: &Plan, timing: &Timing) -> Result<Response<()>, http::Error> {
    let mut b =
        Response::builder().status(StatusCode::from_u16(plan.status).map_err(http::Error::from)?);
    let mut v = Vec::with_capacity(96);
    plan_fields(plan, timing, &mut v, |name, value| {
        b = std::mem::take(&mut b).header(name, value);
    });
    b.body(())
}

/// The fields of a text/plain response (errors, help) of `len` bytes.
pub fn text_fields(len: usize, mut field: impl FnMut(&'static str, &[u8])) {
    field("content-length", itoa::Buffer::new().format(len).as_bytes());
    field("cache-control", b"no-cache");
    field("content-type", b"text/plain");
}

/// A text/plain response head as `http` types (HTTP/2), fields as [`text_fields`].
pub fn text_head(status: u16, len: usize) -> Response<()> {
    let mut b = Response::builder().status(status);
    text_fields(len, |name, value| {
        b = std::mem::take(&mut b).header(name, value)
    });
    b.body(()).expect("static response parts")
}

//! A response head as [`crate::Exchange`] decided it, and its fields in order, for the engines
//! to encode: HTTP/2 and HTTP/3 as a list ([`ResponseHead::fields`]), HTTP/1.x as lines written
//! straight into its output ([`ResponseHead::each_field`], the server's `h1::encode`). Values are
//! appended into reused buffers (no `format!` on the hot path).

use crate::h1::ConnHeader;
use loadterm_plan::Plan;

/// Measurements reported in `x-req` / `x-rsp`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timing {
    /// Request bytes received (head and body so far).
    pub req_bytes: u64,
    /// Milliseconds from the first request byte to the complete request (or to the response
    /// when the body is drained afterwards).
    pub req_ms: u64,
    /// Milliseconds from the complete request to the response head, delay included.
    pub real_ms: u64,
}

/// What the body of a response is, as far as its head is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadKind {
    /// A dummy response: `x-req` and `x-rsp` report the plan and the timing.
    Dummy { plan: Reported, timing: Timing },
    /// A text/plain page (help, errors).
    Text,
    /// An interim status on HTTP/2 or HTTP/3: the status alone.
    Bare,
}

/// A response head, every field decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHead {
    pub status: u16,
    /// HTTP/1.x only: `HTTP/1.1` status line (else `HTTP/1.0`).
    pub h1_11: bool,
    pub content_length: Option<u64>,
    /// `cache-control: no-cache`.
    pub no_cache: bool,
    pub kind: HeadKind,
    /// HTTP/1.x only: the `connection` field.
    pub connection: Option<ConnHeader>,
    /// HTTP/1.x only: `transfer-encoding: chunked`.
    pub chunked: bool,
    /// No body follows (HTTP/2 and HTTP/3 end the stream with the head).
    pub last: bool,
    /// A `date` field goes first (its value is the engine's clock: see [`http_date`]).
    pub date: bool,
    /// An `etag` field (`e`), see [`etag_text`].
    pub etag: Option<u32>,
}

/// An HTTP date (IMF-fixdate, RFC 9110 §5.6.7): `Sun, 06 Nov 1994 08:49:37 GMT`.
pub type HttpDate = [u8; 29];

/// The HTTP date of `unix_secs` (seconds since 1970, UTC).
pub fn http_date(unix_secs: u64) -> HttpDate {
    const DAYS: [&[u8; 3]; 7] = [b"Thu", b"Fri", b"Sat", b"Sun", b"Mon", b"Tue", b"Wed"];
    const MONTHS: [&[u8; 3]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    let days = unix_secs / 86_400;
    let secs = unix_secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u64;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as usize;
    let year = (yoe + era * 400 + i64::from(month <= 2)) as u64;
    let mut out = *b"Thu, 01 Jan 1970 00:00:00 GMT";
    out[..3].copy_from_slice(DAYS[(days % 7) as usize]);
    let two = |out: &mut HttpDate, at: usize, v: u64| {
        out[at] = b'0' + (v / 10) as u8;
        out[at + 1] = b'0' + (v % 10) as u8;
    };
    two(&mut out, 5, day);
    out[8..11].copy_from_slice(MONTHS[month - 1]);
    two(&mut out, 12, year / 100 % 100);
    two(&mut out, 14, year % 100);
    two(&mut out, 17, secs / 3600);
    two(&mut out, 20, secs / 60 % 60);
    two(&mut out, 23, secs % 60);
    out
}

/// An ETag as sent: 8 upper-case hex digits in quotes (a strong tag, as httpterm's).
pub fn etag_text(tag: u32) -> [u8; 10] {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = *b"\"00000000\"";
    for (i, digit) in out[1..9].iter_mut().enumerate() {
        *digit = HEX[(tag >> (28 - 4 * i) & 0xf) as usize];
    }
    out
}

fn num(buf: &mut Vec<u8>, n: u64) {
    buf.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// `x-req` value: `size=<request bytes>, time=<ms> ms`.
pub fn x_req(buf: &mut Vec<u8>, t: &Timing) {
    buf.extend_from_slice(b"size=");
    num(buf, t.req_bytes);
    buf.extend_from_slice(b", time=");
    num(buf, t.req_ms);
    buf.extend_from_slice(b" ms");
}

/// What `x-rsp` reports of a [`Plan`]: only this goes into a [`ResponseHead`], which is copied and
/// compared on every response (the whole plan would double its size).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reported {
    pub status: u16,
    pub cacheable: bool,
    pub chunked: bool,
    pub size: u64,
    pub delay_ms: u64,
}

impl From<&Plan> for Reported {
    fn from(p: &Plan) -> Reported {
        Reported {
            status: p.status,
            cacheable: p.cacheable,
            chunked: p.chunked,
            // As content-length: a HEAD reports the GET's size.
            size: p.announced_length(),
            delay_ms: p.delay_ms,
        }
    }
}

/// `x-rsp` value, in haterm's field order with the commas fixed:
/// `id=dummy, code=200, cache=1[, chunked], size=100, time=0 ms (0 real)`.
pub fn x_rsp(buf: &mut Vec<u8>, plan: &Reported, t: &Timing) {
    buf.extend_from_slice(b"id=dummy, code=");
    num(buf, plan.status as u64);
    buf.extend_from_slice(if plan.cacheable {
        b", cache=1"
    } else {
        b", cache=0"
    });
    if plan.chunked {
        buf.extend_from_slice(b", chunked");
    }
    buf.extend_from_slice(b", size=");
    num(buf, plan.size);
    buf.extend_from_slice(b", time=");
    num(buf, plan.delay_ms);
    buf.extend_from_slice(b" ms (");
    num(buf, t.real_ms);
    buf.extend_from_slice(b" real)");
}

/// A field name, with its HTTP/1.x line prefix joined at compile time: one copy per line.
#[derive(Clone, Copy)]
pub struct FieldName {
    /// The name, lower case (HTTP/2, HTTP/3).
    pub lower: &'static str,
    /// `name: `, the start of its HTTP/1.x field line.
    pub line: &'static str,
}

macro_rules! name {
    ($n:literal) => {
        FieldName {
            lower: $n,
            line: concat!($n, ": "),
        }
    };
}

/// Where fields go: values that must be rendered are written by `render` into a buffer the sink
/// chooses (HTTP/1.x: straight into the output, no scratch copy).
pub trait FieldSink {
    fn field(&mut self, name: FieldName, value: &[u8]);
    fn rendered(&mut self, name: FieldName, render: impl FnOnce(&mut Vec<u8>));
}

struct Callback<'a, F> {
    scratch: &'a mut Vec<u8>,
    field: F,
}

impl<F: FnMut(&'static str, &[u8])> FieldSink for Callback<'_, F> {
    fn field(&mut self, name: FieldName, value: &[u8]) {
        (self.field)(name.lower, value)
    }
    fn rendered(&mut self, name: FieldName, render: impl FnOnce(&mut Vec<u8>)) {
        self.scratch.clear();
        render(self.scratch);
        (self.field)(name.lower, self.scratch)
    }
}

impl ResponseHead {
    /// An interim head on HTTP/2 or HTTP/3: the status alone.
    pub fn interim(status: u16) -> ResponseHead {
        ResponseHead {
            status,
            h1_11: true,
            content_length: None,
            no_cache: false,
            kind: HeadKind::Bare,
            connection: None,
            chunked: false,
            last: false,
            date: false,
            etag: None,
        }
    }

    /// The fields: `date` (if any, valued `date`), then haterm's order: content-length,
    /// cache-control, etag, content-type, x-req, x-rsp, then (HTTP/1.x) connection and
    /// transfer-encoding. `scratch` holds rendered values.
    pub fn fields(
        &self,
        scratch: &mut Vec<u8>,
        date: &HttpDate,
        field: impl FnMut(&'static str, &[u8]),
    ) {
        self.each_field(&mut Callback { scratch, field }, date);
    }

    /// The fields in [`ResponseHead::fields`]' order, into `sink`.
    pub fn each_field(&self, sink: &mut impl FieldSink, date: &HttpDate) {
        if self.date {
            sink.field(name!("date"), date);
        }
        if let Some(len) = self.content_length {
            sink.field(
                name!("content-length"),
                itoa::Buffer::new().format(len).as_bytes(),
            );
        }
        if self.no_cache {
            sink.field(name!("cache-control"), b"no-cache");
        }
        if let Some(tag) = self.etag {
            sink.field(name!("etag"), &etag_text(tag));
        }
        match &self.kind {
            HeadKind::Text => sink.field(name!("content-type"), b"text/plain"),
            HeadKind::Dummy { plan, timing } => {
                sink.rendered(name!("x-req"), |b| x_req(b, timing));
                sink.rendered(name!("x-rsp"), |b| x_rsp(b, plan, timing));
            }
            HeadKind::Bare => {}
        }
        match self.connection {
            Some(ConnHeader::Close) => sink.field(name!("connection"), b"close"),
            Some(ConnHeader::KeepAlive) => sink.field(name!("connection"), b"keep-alive"),
            None => {}
        }
        if self.chunked {
            sink.field(name!("transfer-encoding"), b"chunked");
        }
    }
}

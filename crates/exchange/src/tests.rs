//! The whole vocabulary through the state machine, without sockets: every row drives one
//! exchange to its end and checks the steps an engine would carry out.

use super::*;
use std::fmt::Write;

/// How the request body behaves when the exchange asks for it.
#[derive(Clone, Copy)]
enum Upload {
    /// This many bytes, then the end.
    Bytes(u64),
    Fails(BodyFailure),
}

struct Row {
    version: Version,
    method: &'static str,
    target: &'static str,
    /// `Connection:` tokens (HTTP/1.x).
    conn: &'static str,
    expect: bool,
    upload: Option<Upload>,
    date: bool,
    if_match: Option<&'static str>,
    if_none_match: Option<&'static str>,
}

fn row(version: Version, target: &'static str) -> Row {
    Row {
        version,
        method: "GET",
        target,
        conn: "",
        expect: false,
        upload: None,
        date: false,
        if_match: None,
        if_none_match: None,
    }
}

/// Drive one exchange; render each step on a line. Time advances 3 ms per body read and to
/// every wake-up, so the reported times are exact.
fn trace(r: &Row) -> String {
    let t0 = Instant::now();
    let mut now = t0;
    let req = RequestSummary {
        version: r.version,
        is_head: r.method == "HEAD",
        target: r.target.as_bytes(),
        control: None,
        expect_continue: r.expect,
        conn_close: r.conn.contains("close"),
        conn_keep_alive: r.conn.contains("keep-alive"),
        has_body: r.upload.is_some(),
        head_bytes: 50,
        date: r.date,
        is_get: r.method == "GET",
        if_match: r.if_match.map(str::as_bytes),
        if_none_match: r.if_none_match.map(str::as_bytes),
    };
    let mut x = Exchange::new(&req, &mut Rng::new(1), t0);
    let mut out = String::new();
    let mut read = 0;
    for _ in 0..60 {
        match x.next(now) {
            Step::Continue => out.push_str("100; "),
            Step::ReadBody { limit } => {
                now += Duration::from_millis(3);
                match r.upload.expect("read without a body") {
                    Upload::Bytes(n) if limit.is_some_and(|l| read + l < n) => {
                        let l = limit.unwrap();
                        read += l;
                        x.body_read(l, BodyRead::LimitReached);
                        write!(out, "read {l} (limit); ").unwrap();
                    }
                    Upload::Bytes(n) => {
                        x.body_read(n - read, BodyRead::Ended);
                        write!(out, "read {}; ", n - read).unwrap();
                    }
                    Upload::Fails(f) => {
                        x.body_read(0, BodyRead::Failed(f));
                        write!(out, "read {f:?}; ").unwrap();
                    }
                }
            }
            Step::WaitUntil(t) => {
                write!(out, "wait {}ms; ", t.duration_since(now).as_millis()).unwrap();
                now = t;
            }
            Step::Pause(d) => {
                write!(out, "pause {}ms; ", d.as_millis()).unwrap();
                now += d;
            }
            Step::Head(h) => {
                let mut fields = String::new();
                h.fields(&mut Vec::new(), &http_date(0), |n, v| {
                    write!(fields, " {n}={}", String::from_utf8_lossy(v)).unwrap()
                });
                let version = match (r.version.is_h1(), h.h1_11) {
                    (false, _) => "",
                    (true, true) => "1.1 ",
                    (true, false) => "1.0 ",
                };
                let last = if h.last { " (last)" } else { "" };
                write!(out, "head {version}{}{fields}{last}; ", h.status).unwrap();
            }
            Step::Body(Body::Generated(Generated {
                kind,
                size,
                chunked,
                byte_chunks,
                zero_copy,
                last,
            })) => {
                let c = match (chunked, byte_chunks) {
                    (true, true) => " byte-chunked",
                    (true, false) => " chunked",
                    _ => "",
                };
                let z = if zero_copy { "" } else { " copy" };
                let more = if last { "" } else { " (more)" };
                write!(out, "body {kind:?} {size}{c}{z}{more}; ").unwrap();
            }
            Step::Body(Body::Piece(Piece {
                kind,
                offset,
                len,
                chunked,
                byte_chunks,
                last,
            })) => {
                let c = match (chunked, byte_chunks) {
                    (true, true) => " byte-chunked",
                    (true, false) => " chunked",
                    _ => "",
                };
                let more = if last { "" } else { " (more)" };
                write!(out, "piece {kind:?} {offset}+{len}{c}{more}; ").unwrap();
            }
            Step::Body(Body::Text(t)) => {
                write!(out, "text {}; ", t.lines().next().unwrap_or("")).unwrap()
            }
            Step::Done(e) => {
                write!(out, "{e:?}").unwrap();
                return out;
            }
        }
    }
    panic!("no end: {out}")
}

const H10: Version = Version::Http10;
const H11: Version = Version::Http11;
const H2: Version = Version::H2;
const H3: Version = Version::H3;

fn check(rows: &[(Row, &str)]) {
    let mut failed = String::new();
    for (r, want) in rows {
        let got = trace(r);
        if got != *want {
            writeln!(
                failed,
                "{:?} {} {} conn={:?} expect={} upload={}:\n   got  {got}\n   want {want}",
                r.version,
                r.method,
                r.target,
                r.conn,
                r.expect,
                r.upload.is_some()
            )
            .unwrap();
        }
    }
    assert!(failed.is_empty(), "\n{failed}");
}

const XREQ0: &str = "x-req=size=50, time=0 ms";

#[test]
fn dummy_responses_on_every_protocol() {
    let x = |rest: &str| format!("{XREQ0} x-rsp=id=dummy, code={rest}");
    check(&[
        (row(H11, "/?s=10"), &format!("head 1.1 200 content-length=10 {}; body Pattern 10; KeepAlive", x("200, cache=1, size=10, time=0 ms (0 real)"))),
        (row(H2, "/?s=10"), &format!("head 200 content-length=10 {}; body Pattern 10; KeepAlive", x("200, cache=1, size=10, time=0 ms (0 real)"))),
        (row(H3, "/?s=10&R=1"), &format!("head 200 content-length=10 {}; body Random 10; KeepAlive", x("200, cache=1, size=10, time=0 ms (0 real)"))),
        (row(H11, "/"), &format!("head 1.1 200 content-length=0 {} (last); KeepAlive", x("200, cache=1, size=0, time=0 ms (0 real)"))),
        (row(H3, "/"), &format!("head 200 content-length=0 {} (last); KeepAlive", x("200, cache=1, size=0, time=0 ms (0 real)"))),
        (row(H11, "/?r=404&c=0&s=3"), &format!("head 1.1 404 content-length=3 cache-control=no-cache {}; body Pattern 3; KeepAlive", x("404, cache=0, size=3, time=0 ms (0 real)"))),
        // S=0 forbids zero-copy for this response, on every protocol.
        (row(H11, "/?s=256k&S=0"), &format!("head 1.1 200 content-length=262144 {}; body Pattern 262144 copy; KeepAlive", x("200, cache=1, size=262144, time=0 ms (0 real)"))),
        (row(H2, "/?s=1&S=0"), &format!("head 200 content-length=1 {}; body Pattern 1 copy; KeepAlive", x("200, cache=1, size=1, time=0 ms (0 real)"))),
        // Delays: after the request, reported in x-rsp.
        (row(H11, "/?t=100"), &format!("wait 100ms; head 1.1 200 content-length=0 {} (last); KeepAlive", x("200, cache=1, size=0, time=100 ms (100 real)"))),
        (row(H3, "/?t=20&s=1"), &format!("wait 20ms; head 200 content-length=1 {}; body Pattern 1; KeepAlive", x("200, cache=1, size=1, time=20 ms (20 real)"))),
        // Bodiless statuses and HEAD.
        (row(H11, "/?r=204&s=5"), &format!("head 1.1 204 {} (last); KeepAlive", x("204, cache=1, size=0, time=0 ms (0 real)"))),
        (row(H2, "/?r=304&s=5"), &format!("head 304 {} (last); KeepAlive", x("304, cache=1, size=0, time=0 ms (0 real)"))),
        // HEAD: the GET's length, no body (RFC 9110 §9.3.2), on every protocol.
        (Row { method: "HEAD", ..row(H11, "/?s=10") }, &format!("head 1.1 200 content-length=10 {} (last); KeepAlive", x("200, cache=1, size=10, time=0 ms (0 real)"))),
        (Row { method: "HEAD", ..row(H2, "/?s=1k") }, &format!("head 200 content-length=1024 {} (last); KeepAlive", x("200, cache=1, size=1024, time=0 ms (0 real)"))),
        (Row { method: "HEAD", ..row(H3, "/?s=10") }, &format!("head 200 content-length=10 {} (last); KeepAlive", x("200, cache=1, size=10, time=0 ms (0 real)"))),
        (Row { method: "HEAD", ..row(H10, "/?s=10&K=1") }, &format!("head 1.0 200 content-length=10 {} (last); Close", x("200, cache=1, size=10, time=0 ms (0 real)"))),
        (Row { method: "HEAD", ..row(H11, "/?s=10&k=1") }, &format!("head 1.1 200 {} (last); KeepAlive", x("200, cache=1, chunked, size=10, time=0 ms (0 real)"))),
        (Row { method: "HEAD", ..row(H11, "/?s=10&r=204") }, &format!("head 1.1 204 {} (last); KeepAlive", x("204, cache=1, size=0, time=0 ms (0 real)"))),
    ]);
}

#[test]
fn http1_connection_and_framing() {
    let x = |rest: &str| format!("{XREQ0} x-rsp=id=dummy, code=200, cache=1{rest}");
    check(&[
        (row(H10, "/?s=10"), &format!("head 1.0 200 {}; body Pattern 10; Close", x(", size=10, time=0 ms (0 real)"))),
        (Row { conn: "keep-alive", ..row(H10, "/?s=10&K=1") }, &format!("head 1.0 200 content-length=10 {} connection=keep-alive; body Pattern 10; KeepAlive", x(", size=10, time=0 ms (0 real)"))),
        (Row { conn: "close", ..row(H11, "/?s=10") }, &format!("head 1.1 200 content-length=10 {} connection=close; body Pattern 10; Close", x(", size=10, time=0 ms (0 real)"))),
        (row(H11, "/?s=10&C=1"), &format!("head 1.1 200 {} connection=close; body Pattern 10; Close", x(", size=10, time=0 ms (0 real)"))),
        (row(H11, "/?s=10&k=1"), &format!("head 1.1 200 {} transfer-encoding=chunked; body Ones 10 chunked; KeepAlive", x(", chunked, size=10, time=0 ms (0 real)"))),
        (row(H11, "/?k=1"), &format!("head 1.1 200 {} transfer-encoding=chunked; body Ones 0 chunked; KeepAlive", x(", chunked, size=0, time=0 ms (0 real)"))),
        // HTTP/1.0 cannot take chunks: close-delimited, and closed (haterm left it open).
        (Row { conn: "keep-alive", ..row(H10, "/?s=10&k=1&K=1") }, &format!("head 1.0 200 {}; body Ones 10; Close", x(", chunked, size=10, time=0 ms (0 real)"))),
        // On HTTP/2 and HTTP/3, C/K/k only drop the length.
        (row(H2, "/?s=10&C=1"), &format!("head 200 {}; body Pattern 10; KeepAlive", x(", size=10, time=0 ms (0 real)"))),
        (row(H3, "/?s=10&k=1"), &format!("head 200 {}; body Ones 10; KeepAlive", x(", chunked, size=10, time=0 ms (0 real)"))),
    ]);
}

#[test]
fn request_bodies_expect_and_drain_order() {
    let up = Some(Upload::Bytes(10));
    let x = |t: u32| {
        format!("x-req=size=60, time={t} ms x-rsp=id=dummy, code=200, cache=1, size=5, time=0 ms (0 real)")
    };
    check(&[
        (Row { upload: up, ..row(H11, "/?s=5") }, &format!("read 10; head 1.1 200 content-length=5 {}; body Pattern 5; KeepAlive", x(3))),
        (Row { upload: up, expect: true, ..row(H11, "/?s=5") }, &format!("100; read 10; head 1.1 200 content-length=5 {}; body Pattern 5; KeepAlive", x(3))),
        (Row { upload: up, expect: true, ..row(H2, "/?s=5") }, &format!("100; read 10; head 200 content-length=5 {}; body Pattern 5; KeepAlive", x(3))),
        (Row { upload: up, expect: true, ..row(H3, "/?s=5") }, &format!("100; read 10; head 200 content-length=5 {}; body Pattern 5; KeepAlive", x(3))),
        // No 100 to HTTP/1.0, nor without a body to come.
        (Row { upload: up, expect: true, ..row(H10, "/?s=5&K=1") }, &format!("read 10; head 1.0 200 content-length=5 {}; body Pattern 5; Close", x(3))),
        (Row { expect: true, ..row(H3, "/?s=5") }, "head 200 content-length=5 x-req=size=50, time=0 ms x-rsp=id=dummy, code=200, cache=1, size=5, time=0 ms (0 real); body Pattern 5; KeepAlive"),
        // A=1: respond first, then read the body.
        (Row { upload: up, ..row(H11, "/?s=5&A=1") }, "head 1.1 200 content-length=5 x-req=size=50, time=0 ms x-rsp=id=dummy, code=200, cache=1, size=5, time=0 ms (0 real); body Pattern 5 (more); read 10; KeepAlive"),
        (Row { upload: up, ..row(H2, "/?A=1") }, "head 200 content-length=0 x-req=size=50, time=0 ms x-rsp=id=dummy, code=200, cache=1, size=0, time=0 ms (0 real); read 10; KeepAlive"),
        // The delay counts from the complete request.
        (Row { upload: up, ..row(H3, "/?t=7") }, "read 10; wait 7ms; head 200 content-length=0 x-req=size=60, time=3 ms x-rsp=id=dummy, code=200, cache=1, size=0, time=7 ms (7 real) (last); KeepAlive"),
    ]);
}

#[test]
fn body_failures() {
    let page = |s: u16, h1: &str, text: &str, end: &str| {
        format!("head {h1}{s} content-length={} cache-control=no-cache content-type=text/plain{}; text {text}; {end}",
            text.len() + 1,
            if h1.is_empty() { "" } else { " connection=close" })
    };
    let fails = |f| Some(Upload::Fails(f));
    check(&[
        (Row { upload: fails(BodyFailure::Timeout), ..row(H11, "/?s=5") }, &format!("read Timeout; {}", page(408, "1.1 ", "408 Request Timeout: the request was not received in time.", "Close"))),
        (Row { upload: fails(BodyFailure::Malformed), ..row(H11, "/?s=5") }, &format!("read Malformed; {}", page(400, "1.1 ", "400 Bad Request: the request could not be parsed.", "Close"))),
        (Row { upload: fails(BodyFailure::Timeout), ..row(H3, "/") }, &format!("read Timeout; {}", page(408, "", "408 Request Timeout: the request was not received in time.", "Close"))),
        (Row { upload: fails(BodyFailure::Broken), ..row(H2, "/?s=5") }, "read Broken; Abort"),
        // After the response, a failing body only ends the exchange.
        (Row { upload: fails(BodyFailure::Timeout), ..row(H11, "/?A=1") }, "head 1.1 200 content-length=0 x-req=size=50, time=0 ms x-rsp=id=dummy, code=200, cache=1, size=0, time=0 ms (0 real) (last); read Timeout; Close"),
    ]);
}

#[test]
fn informational_final_statuses() {
    check(&[
        (row(H11, "/?r=103"), "head 1.1 103 x-req=size=50, time=0 ms x-rsp=id=dummy, code=103, cache=1, size=0, time=0 ms (0 real) connection=close (last); NoFinal"),
        (row(H2, "/?r=103"), "head 103; NoFinal"),
        (row(H3, "/?r=100&t=5"), "wait 5ms; head 100; NoFinal"),
    ]);
}

#[test]
fn help_and_rejections() {
    let help = pages::help().len();
    let first = pages::help().lines().next().unwrap();
    let reject = "400 Bad Request: r=1000: the status must be within 100..=999";
    let rlen = reject.len() + 1;
    check(&[
        (row(H11, "/?"), &format!("head 1.0 200 cache-control=no-cache content-type=text/plain; text {first}; Close")),
        (Row { method: "HEAD", ..row(H11, "/?h") }, "head 1.0 200 cache-control=no-cache content-type=text/plain (last); Close"),
        (row(H2, "/?h"), &format!("head 200 content-length={help} cache-control=no-cache content-type=text/plain; text {first}; Close")),
        (Row { upload: Some(Upload::Bytes(4)), expect: true, ..row(H3, "/x?") }, &format!("100; read 4; head 200 content-length={help} cache-control=no-cache content-type=text/plain; text {first}; Close")),
        // Rejections answer at once: no 100, no body read; HTTP/1.x closes.
        (Row { upload: Some(Upload::Bytes(4)), expect: true, ..row(H11, "/?r=1000") }, &format!("head 1.1 400 content-length={rlen} cache-control=no-cache content-type=text/plain connection=close; text {reject}; Close")),
        (row(H3, "/?r=1000"), &format!("head 400 content-length={rlen} cache-control=no-cache content-type=text/plain; text {reject}; Close")),
    ]);
}

#[test]
fn date_goes_first_on_final_heads_only() {
    let d = "date=Thu, 01 Jan 1970 00:00:00 GMT";
    let x =
        "x-req=size=50, time=0 ms x-rsp=id=dummy, code=200, cache=1, size=1, time=0 ms (0 real)";
    check(&[
        (Row { date: true, ..row(H11, "/?s=1") }, &format!("head 1.1 200 {d} content-length=1 {x}; body Pattern 1; KeepAlive")),
        (Row { date: true, ..row(H3, "/?s=1") }, &format!("head 200 {d} content-length=1 {x}; body Pattern 1; KeepAlive")),
        (Row { date: true, ..row(H2, "/?r=103") }, "head 103; NoFinal"),
        (Row { date: true, upload: Some(Upload::Bytes(1)), expect: true, ..row(H2, "/?h") }, &format!("100; read 1; head 200 {d} content-length={} cache-control=no-cache content-type=text/plain; text {}; Close", pages::help().len(), pages::help().lines().next().unwrap())),
    ]);
}

#[test]
fn http_dates() {
    // RFC 9110 §5.6.7's example, the epoch, a leap day, the day after a century's missing
    // leap day, and a year's last second.
    for (secs, text) in [
        (784_111_777, "Sun, 06 Nov 1994 08:49:37 GMT"),
        (0, "Thu, 01 Jan 1970 00:00:00 GMT"),
        (951_825_600, "Tue, 29 Feb 2000 12:00:00 GMT"),
        (4_107_542_400, "Mon, 01 Mar 2100 00:00:00 GMT"),
        (4_133_980_799, "Fri, 31 Dec 2100 23:59:59 GMT"),
    ] {
        assert_eq!(
            std::str::from_utf8(&http_date(secs)).unwrap(),
            text,
            "{secs}"
        );
    }
}

/// Only the steps, without the head's x-req/x-rsp fields (checked elsewhere).
fn steps(r: &Row) -> String {
    let full = trace(r);
    full.split("; ")
        .map(|step| match step.find(" x-req=") {
            Some(at) => {
                let tail = step[at..]
                    .find(" (0 real)")
                    .map_or("", |end| &step[at + end + 9..]);
                format!("{}{tail}", &step[..at])
            }
            None => step.to_string(),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn check_steps(rows: &[(Row, &str)]) {
    let mut failed = String::new();
    for (r, want) in rows {
        let got = steps(r);
        if got != *want {
            writeln!(
                failed,
                "{:?} {} {}:\n   got  {got}\n   want {want}",
                r.version, r.method, r.target
            )
            .unwrap();
        }
    }
    assert!(failed.is_empty(), "\n{failed}");
}

#[test]
fn lying_lengths() {
    check_steps(&[
        // HTTP/1.1: the lie goes out, and the connection closes after it.
        (
            row(H11, "/?s=10&b=4"),
            "head 1.1 200 content-length=4 connection=close; body Pattern 10; Close",
        ),
        (
            row(H11, "/?s=4&b=10"),
            "head 1.1 200 content-length=10 connection=close; body Pattern 4; Close",
        ),
        (
            row(H11, "/?s=4&b=4"),
            "head 1.1 200 content-length=4; body Pattern 4; KeepAlive",
        ),
        // HTTP/1.0 gets the length it would not have had.
        (
            row(H10, "/?s=4&b=2"),
            "head 1.0 200 content-length=2; body Pattern 4; Close",
        ),
        // HTTP/2 and HTTP/3: the field as asked, the real body in DATA.
        (
            row(H2, "/?s=10&b=4"),
            "head 200 content-length=4; body Pattern 10; KeepAlive",
        ),
        (
            row(H3, "/?b=7"),
            "head 200 content-length=7 (last); KeepAlive",
        ),
        (
            row(H2, "/?s=3&b=9&C=1"),
            "head 200 content-length=9; body Pattern 3; KeepAlive",
        ),
        // Not with chunks, nor on bodiless statuses.
        (
            row(H11, "/?s=3&b=9&k=1"),
            "head 1.1 200 transfer-encoding=chunked; body Ones 3 chunked; KeepAlive",
        ),
        (row(H2, "/?r=204&b=9"), "head 204 (last); KeepAlive"),
    ]);
}

#[test]
fn partial_body_reads() {
    let big = Some(Upload::Bytes(1000));
    check_steps(&[
        (Row { upload: big, ..row(H11, "/?s=5&B=100") }, "read 100 (limit); head 1.1 200 content-length=5; body Pattern 5 (more); read 900; KeepAlive"),
        (Row { upload: big, ..row(H2, "/?B=100") }, "read 100 (limit); head 200 content-length=0; read 900; KeepAlive"),
        (Row { upload: big, ..row(H3, "/?s=2&B=100&t=5") }, "read 100 (limit); wait 5ms; head 200 content-length=2; body Pattern 2 (more); read 900; KeepAlive"),
        // A body within the limit is read whole, as without B.
        (Row { upload: Some(Upload::Bytes(10)), ..row(H11, "/?s=5&B=100") }, "read 10; head 1.1 200 content-length=5; body Pattern 5; KeepAlive"),
        // B=0: answer at once.
        (Row { upload: big, ..row(H11, "/?B=0") }, "read 0 (limit); head 1.1 200 content-length=0 (last); read 1000; KeepAlive"),
    ]);
}

#[test]
fn pauses_and_idle_times() {
    check_steps(&[
        (
            row(H11, "/?s=5&P=200"),
            "head 1.1 200 content-length=5; body Pattern 5 (more); pause 200ms; KeepAlive",
        ),
        // HTTP/2 and HTTP/3 end the stream after the pause.
        (
            row(H2, "/?s=5&P=200"),
            "head 200 content-length=5; body Pattern 5 (more); pause 200ms; KeepAlive",
        ),
        (
            row(H3, "/?P=50"),
            "head 200 content-length=0; pause 50ms; KeepAlive",
        ),
        (
            row(H11, "/?t=10&P=20"),
            "wait 10ms; head 1.1 200 content-length=0; pause 20ms; KeepAlive",
        ),
    ]);
    let idle = |target: &'static str, version| {
        let req = RequestSummary {
            version,
            is_head: false,
            target: target.as_bytes(),
            control: None,
            expect_continue: false,
            conn_close: false,
            conn_keep_alive: false,
            has_body: false,
            head_bytes: 0,
            date: false,
            is_get: true,
            if_match: None,
            if_none_match: None,
        };
        Exchange::new(&req, &mut Rng::new(1), Instant::now()).idle()
    };
    assert_eq!(idle("/?w=300", H11), Some(Duration::from_millis(300)));
    assert_eq!(idle("/?w=300", H2), Some(Duration::from_millis(300)));
    assert_eq!(idle("/", H11), None);
    assert_eq!(idle("/?w=0", H11), None);
}

#[test]
fn one_byte_chunks() {
    check_steps(&[
        (
            row(H11, "/?s=3&k=2"),
            "head 1.1 200 transfer-encoding=chunked; body Ones 3 byte-chunked; KeepAlive",
        ),
        (
            row(H11, "/?k=2"),
            "head 1.1 200 transfer-encoding=chunked; body Ones 0 byte-chunked; KeepAlive",
        ),
        // HTTP/1.0: no chunks at all, as with k=1.
        (row(H10, "/?s=3&k=2"), "head 1.0 200; body Ones 3; Close"),
        // HTTP/2 and HTTP/3: one DATA frame per byte.
        (
            row(H2, "/?s=3&k=2"),
            "head 200; piece Ones 0+1 (more); piece Ones 1+1 (more); piece Ones 2+1; KeepAlive",
        ),
        (
            row(H3, "/?s=2&k=2&P=5"),
            "head 200; piece Ones 0+1 (more); piece Ones 1+1 (more); pause 5ms; KeepAlive",
        ),
    ]);
}

#[test]
fn bodies_in_pieces() {
    // Sizes in 1..=p and pauses in 0..=15 ms, drawn from the thread's generator (seed 1 here).
    check_steps(&[
        (row(H11, "/?s=10&p=4"), "head 1.1 200 content-length=10; piece Pattern 0+2 (more); pause 5ms; piece Pattern 2+4 (more); pause 1ms; piece Pattern 6+1 (more); pause 10ms; piece Pattern 7+3; KeepAlive"),
        // Chunked: one chunk per piece, or the piece's bytes as one-byte chunks; then the last chunk.
        (row(H11, "/?s=3&p=2&k=1"), "head 1.1 200 transfer-encoding=chunked; piece Ones 0+2 chunked (more); pause 5ms; piece Ones 2+1 chunked (more); piece Ones 3+0 chunked; KeepAlive"),
        (row(H11, "/?s=3&p=2&k=2"), "head 1.1 200 transfer-encoding=chunked; piece Ones 0+2 byte-chunked (more); pause 5ms; piece Ones 2+1 byte-chunked (more); piece Ones 3+0 byte-chunked; KeepAlive"),
        // No pause after the last piece; P's comes after the body, then the stream ends.
        (row(H2, "/?s=3&p=1&P=1"), "head 200 content-length=3; piece Pattern 0+1 (more); pause 5ms; piece Pattern 1+1 (more); pause 1ms; piece Pattern 2+1 (more); pause 1ms; KeepAlive"),
        (row(H3, "/?s=0&p=5"), "head 200 content-length=0 (last); KeepAlive"),
    ]);
}

#[test]
fn conditional_requests() {
    let tag = "\"9565D87B\"";
    let c = |version, method: &'static str, target: &'static str, im, inm| Row {
        method,
        if_match: im,
        if_none_match: inm,
        ..row(version, target)
    };
    check_steps(&[
        // "/?e=1&s=5" as big-endian words, plus 1.
        (
            c(H11, "GET", "/?e=1&s=5", None, None),
            "head 1.1 200 content-length=5 etag=\"9565D87B\"; body Pattern 5; KeepAlive",
        ),
        (
            c(H11, "GET", "/?e=1&s=5", None, Some(tag)),
            "head 1.1 304 etag=\"9565D87B\" (last); KeepAlive",
        ),
        // If-None-Match compares weakly, in a list.
        (
            c(H2, "GET", "/?e=1&s=5", None, Some("\"x\", W/\"9565D87B\"")),
            "head 304 etag=\"9565D87B\" (last); KeepAlive",
        ),
        (
            c(H3, "HEAD", "/?e=1&s=5", None, Some("*")),
            "head 304 etag=\"9565D87B\" (last); KeepAlive",
        ),
        (
            c(H11, "POST", "/?e=1&s=5", None, Some(tag)),
            "head 1.1 412 content-length=0 etag=\"9565D87B\" (last); KeepAlive",
        ),
        (
            c(H11, "GET", "/?e=1&s=5", None, Some("\"other\"")),
            "head 1.1 200 content-length=5 etag=\"9565D87B\"; body Pattern 5; KeepAlive",
        ),
        (
            c(H11, "GET", "/?e=1&s=5", Some("\"other\""), None),
            "head 1.1 412 content-length=0 etag=\"9565D87B\" (last); KeepAlive",
        ),
        (
            c(H2, "GET", "/?e=1&s=5", Some(tag), None),
            "head 200 content-length=5 etag=\"9565D87B\"; body Pattern 5; KeepAlive",
        ),
        // A true If-Match, then the If-None-Match: 412 for a PUT.
        (
            c(H11, "PUT", "/?e=1&s=5", Some("*"), Some(tag)),
            "head 1.1 412 content-length=0 etag=\"9565D87B\" (last); KeepAlive",
        ),
        // If-Match compares strongly: a weak tag never matches.
        (
            c(H3, "GET", "/?e=1&s=5", Some("W/\"9565D87B\""), None),
            "head 412 content-length=0 etag=\"9565D87B\" (last); KeepAlive",
        ),
        // Only 2xx responses are conditional; without e nothing is.
        (
            c(H11, "GET", "/?e=1&r=404", None, Some("*")),
            "head 1.1 404 content-length=0 etag=\"94960B7B\" (last); KeepAlive",
        ),
        (
            c(H11, "GET", "/?s=5", Some("\"nope\""), Some("*")),
            "head 1.1 200 content-length=5; body Pattern 5; KeepAlive",
        ),
    ]);
}

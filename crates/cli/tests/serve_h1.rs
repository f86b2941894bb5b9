//! HTTP/1.x behaviour of `loadterm serve`, over real sockets against the real binary.
//! Every HTTP/1.1 request carries `Host: x`: the strict parser refuses HTTP/1.1 without Host
//! (RFC 9112 §3.2); the refusals themselves are in `serve_h1_strict.rs`.

use crate::common;

use common::http1::{assert_body, closed_within, connect, fill, get, read_response};
use common::Server;
use loadterm_plan::BodyKind;
use std::io::Write;
use std::time::{Duration, Instant};

fn server() -> Server {
    Server::start(&["-t", "1", "--no-quic"])
}

#[test]
fn haterm_vector_and_headers() {
    // --no-date: haterm's heads byte for byte.
    let s = Server::start(&["-t", "1", "--no-quic", "--no-date"]);
    let r = get(s.clear_port, "GET /?s=100 HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(
        r.head,
        "HTTP/1.1 200 OK\r\ncontent-length: 100\r\nx-req: size=33, time=0 ms\r\n\
         x-rsp: id=dummy, code=200, cache=1, size=100, time=0 ms (0 real)\r\n\r\n"
    );
    assert_eq!(
        &r.body[..50],
        b".123456789.123456789.123456789.123456789.12345678\n"
    );
    assert_body(&r.body, BodyKind::Pattern);

    let r = get(s.clear_port, "GET /?r=404&s=5 HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(r.head.starts_with("HTTP/1.1 404 Not Found\r\n"));
    assert_eq!(r.body, b".1234");

    let r = get(
        s.clear_port,
        "GET /?s=60&c=0&k=1 HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    assert_eq!(r.header("cache-control"), Some("no-cache"));
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    assert_eq!(r.header("content-length"), None);
    assert_eq!(
        r.header("x-rsp"),
        Some("id=dummy, code=200, cache=0, chunked, size=60, time=0 ms (0 real)")
    );
    assert_eq!(r.body, vec![b'1'; 60]);

    // First '?' wins: every parameter of the help page's example applies.
    let r = get(
        s.clear_port,
        "GET /?r=500?s=0?c=0?t=10 HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    assert_eq!(
        (r.status, r.body.len(), r.header("cache-control")),
        (500, 0, Some("no-cache"))
    );

    // Control header for when a proxy rewrites the URL.
    let r = get(
        s.clear_port,
        "GET /rewritten HTTP/1.1\r\nHost: x\r\nx-loadterm: r=503&s=7\r\n\r\n",
    );
    assert_eq!((r.status, r.body.len()), (503, 7));

    // Number forms.
    for (q, len) in [
        ("s=0x10", 16),
        ("s=010", 8),
        ("s=1k", 1024),
        ("x=abc&s=10", 0),
        ("z=5&s=10", 10),
    ] {
        let r = get(
            s.clear_port,
            &format!("GET /?{q} HTTP/1.1\r\nHost: x\r\n\r\n"),
        );
        assert_eq!(r.body.len(), len, "{q}");
    }
}

#[test]
fn bodyless_responses() {
    let s = server();
    // HEAD: the GET's length (RFC 9110 §9.3.2), no body: the next response follows at once.
    let mut c = connect(s.clear_port);
    c.write_all(b"HEAD /?s=100 HTTP/1.1\r\nHost: x\r\n\r\nGET /?s=3 HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut buf = Vec::new();
    let r = read_response(&mut c, &mut buf, true);
    assert_eq!((r.status, r.header("content-length")), (200, Some("100")));
    assert!(r.body.is_empty());
    let r = read_response(&mut c, &mut buf, false);
    assert_eq!((r.status, r.body.as_slice()), (200, &b".12"[..]));
    for code in [204, 304] {
        let mut c = connect(s.clear_port);
        c.write_all(
            format!("GET /?r={code}&s=5 HTTP/1.1\r\nHost: x\r\n\r\nGET /?s=3 HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
        )
        .unwrap();
        let mut buf = Vec::new();
        let r = read_response(&mut c, &mut buf, false);
        assert_eq!((r.status, r.header("content-length")), (code, None));
        // The next response follows immediately: no stray body bytes.
        let r = read_response(&mut c, &mut buf, false);
        assert_eq!((r.status, r.body.as_slice()), (200, &b".12"[..]));
    }
    // A 1xx as the final answer: head, then close.
    let mut c = connect(s.clear_port);
    c.write_all(b"GET /?r=103 HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let r = read_response(&mut c, &mut Vec::new(), false);
    assert_eq!(r.status, 103);
    assert!(closed_within(&mut c, Duration::from_secs(3)));
}

#[test]
fn absurd_parameters_are_refused_with_an_explanation() {
    let s = server();
    for (q, needle) in [
        ("r=1000", "status"),
        ("r=99", "status"),
        ("s=-1", "negative"),
        ("t=10g", "delay"),
    ] {
        let mut c = connect(s.clear_port);
        c.write_all(format!("GET /?{q} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .unwrap();
        let r = read_response(&mut c, &mut Vec::new(), false);
        assert_eq!(r.status, 400, "{q}");
        assert!(
            String::from_utf8_lossy(&r.body).contains(needle),
            "{q}: {:?}",
            String::from_utf8_lossy(&r.body)
        );
        assert!(closed_within(&mut c, Duration::from_secs(3)));
    }
    // Huge sizes are legal and stream: read the first bytes, then hang up; the server lives on.
    let mut c = connect(s.clear_port);
    c.write_all(b"GET /?s=999999g HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut buf = Vec::new();
    while buf.len() < 1 << 20 {
        assert!(fill(&mut c, &mut buf));
    }
    assert!(
        String::from_utf8_lossy(&buf).contains(&format!("content-length: {}", 999_999u64 << 30))
    );
    drop(c);
    assert_eq!(
        get(s.clear_port, "GET /?s=3 HTTP/1.1\r\nHost: x\r\n\r\n").body,
        b".12"
    );
}

/// haterm's keep-alive table (docs/COMPATIBILITY.md "HTTP/1.x framing"), with the HTTP/1.0 + keep-alive + k=1 row fixed (close, not unframed).
#[test]
fn keep_alive_decision_table() {
    let s = server();
    // (request, expected: status-line version, content-length, connection header, chunked, stays open)
    type Row = (
        &'static str,
        &'static str,
        Option<&'static str>,
        Option<&'static str>,
        bool,
        bool,
    );
    let rows: &[Row] = &[
        (
            "GET /?s=10 HTTP/1.0\r\n\r\n",
            "HTTP/1.0",
            None,
            None,
            false,
            false,
        ),
        (
            "GET /?s=10 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
            "HTTP/1.0",
            None,
            None,
            false,
            false,
        ),
        (
            "GET /?s=10&K=1 HTTP/1.0\r\n\r\n",
            "HTTP/1.0",
            Some("10"),
            None,
            false,
            false,
        ),
        (
            "GET /?s=10&C=0 HTTP/1.0\r\n\r\n",
            "HTTP/1.0",
            Some("10"),
            None,
            false,
            false,
        ),
        (
            "GET /?s=10&K=1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
            "HTTP/1.0",
            Some("10"),
            Some("keep-alive"),
            false,
            true,
        ),
        (
            "GET /?s=10 HTTP/1.1\r\nHost: x\r\n\r\n",
            "HTTP/1.1",
            Some("10"),
            None,
            false,
            true,
        ),
        (
            "GET /?s=10 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            "HTTP/1.1",
            Some("10"),
            Some("close"),
            false,
            false,
        ),
        (
            "GET /?s=10&K=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            "HTTP/1.1",
            Some("10"),
            Some("close"),
            false,
            false,
        ),
        (
            "GET /?s=10&C=1 HTTP/1.1\r\nHost: x\r\n\r\n",
            "HTTP/1.1",
            None,
            Some("close"),
            false,
            false,
        ),
        (
            "GET /?s=10&K=0 HTTP/1.1\r\nHost: x\r\n\r\n",
            "HTTP/1.1",
            None,
            Some("close"),
            false,
            false,
        ),
        (
            "GET /?s=10&k=1 HTTP/1.1\r\nHost: x\r\n\r\n",
            "HTTP/1.1",
            None,
            None,
            true,
            true,
        ),
        (
            "GET /?s=10&k=1&C=1 HTTP/1.1\r\nHost: x\r\n\r\n",
            "HTTP/1.1",
            None,
            Some("close"),
            true,
            false,
        ),
        (
            "GET /?s=10&k=1 HTTP/1.0\r\n\r\n",
            "HTTP/1.0",
            None,
            None,
            false,
            false,
        ),
        (
            "GET /?s=10&k=1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
            "HTTP/1.0",
            None,
            None,
            false,
            false,
        ),
        (
            "GET /?s=10&k=1&K=1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
            "HTTP/1.0",
            None,
            None,
            false,
            false,
        ),
    ];
    for &(req, version, cl, conn, chunked, open) in rows {
        let mut c = connect(s.clear_port);
        c.write_all(req.as_bytes()).unwrap();
        let r = read_response(&mut c, &mut Vec::new(), false);
        assert!(r.head.starts_with(version), "{req:?}: {}", r.head);
        assert_eq!(r.header("content-length"), cl, "{req:?}");
        assert_eq!(r.header("connection"), conn, "{req:?}");
        assert_eq!(r.header("transfer-encoding").is_some(), chunked, "{req:?}");
        assert_eq!(r.body.len(), 10, "{req:?}");
        if open {
            // Still usable.
            c.write_all(b"GET /?s=2 HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
            assert_eq!(
                read_response(&mut c, &mut Vec::new(), false).body,
                b".1",
                "{req:?}"
            );
        } else {
            assert!(
                closed_within(&mut c, Duration::from_secs(3)),
                "{req:?} should close"
            );
        }
    }
}

/// Three pipelined requests (one with a chunked body), delivered in two writes split at every
/// byte boundary: answered in order, bodies never eaten as requests or vice versa.
#[test]
fn pipelining_split_at_every_byte() {
    let s = server();
    let stream = "GET /?s=3 HTTP/1.1\r\nHost: x\r\n\r\nPOST /?s=4 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /?s=5&r=201 HTTP/1.1\r\nHost: x\r\n\r\n";
    for split in 1..stream.len() {
        let mut c = connect(s.clear_port);
        c.write_all(&stream.as_bytes()[..split]).unwrap();
        std::thread::sleep(Duration::from_millis(2));
        c.write_all(&stream.as_bytes()[split..]).unwrap();
        let mut buf = Vec::new();
        let got: Vec<(u16, usize)> = (0..3)
            .map(|_| {
                let r = read_response(&mut c, &mut buf, false);
                (r.status, r.body.len())
            })
            .collect();
        assert_eq!(got, [(200, 3), (200, 4), (201, 5)], "split at {split}");
    }
}

#[test]
fn pipelined_responses_arrive_together() {
    let s = server();
    let mut c = connect(s.clear_port);
    let reqs: String = (0..50)
        .map(|i| format!("GET /?s={i} HTTP/1.1\r\nHost: x\r\n\r\n"))
        .collect();
    c.write_all(reqs.as_bytes()).unwrap();
    let mut buf = Vec::new();
    for i in 0..50 {
        let r = read_response(&mut c, &mut buf, false);
        assert_eq!(r.body.len(), i);
        assert_body(&r.body, BodyKind::Pattern);
    }
}

#[test]
fn request_bodies_expect_and_drain_order() {
    let s = server();
    // Content-Length body drained before the response; x-req counts head + body.
    let req = "POST /?s=5 HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123456789";
    let r = get(s.clear_port, req);
    assert_eq!(
        r.header("x-req").unwrap(),
        format!("size={}, time=0 ms", req.len())
    );

    // Expect: interim 100 immediately, final response only after the body.
    let mut c = connect(s.clear_port);
    c.write_all(
        b"POST /?s=5 HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n",
    )
    .unwrap();
    let mut buf = Vec::new();
    let r = read_response(&mut c, &mut buf, false);
    assert_eq!(r.head, "HTTP/1.1 100 Continue\r\n\r\n");
    c.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut tmp = [0u8; 64];
    assert!(
        std::io::Read::read(&mut c, &mut tmp).is_err(),
        "no final response before the body"
    );
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"0123456789").unwrap();
    assert_eq!(read_response(&mut c, &mut buf, false).body, b".1234");

    // A=1: the response comes first, the body is drained afterwards, then the next request.
    let mut c = connect(s.clear_port);
    c.write_all(b"POST /?s=5&A=1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        .unwrap();
    let mut buf = Vec::new();
    assert_eq!(read_response(&mut c, &mut buf, false).body, b".1234");
    c.write_all(b"4\r\nbody\r\n0\r\n\r\nGET /?s=2 HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut c, &mut buf, false).body, b".1");

    // Malformed chunk → 400, close.
    let mut c = connect(s.clear_port);
    c.write_all(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
        .unwrap();
    let r = read_response(&mut c, &mut Vec::new(), false);
    assert_eq!(r.status, 400);
    assert!(closed_within(&mut c, Duration::from_secs(3)));
}

#[test]
fn delay_is_applied_and_reported() {
    let s = server();
    let t0 = Instant::now();
    let r = get(s.clear_port, "GET /?t=300&s=1 HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(t0.elapsed() >= Duration::from_millis(300));
    let rsp = r.header("x-rsp").unwrap();
    assert!(rsp.contains("time=300 ms ("), "{rsp}");
    let real: u64 = rsp
        .rsplit('(')
        .next()
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!((300..1000).contains(&real), "{rsp}");
}

#[test]
fn malformed_and_oversized_requests() {
    let s = server();
    let cases: Vec<(String, u16)> = vec![
        ("BLAH\r\n\r\n".into(), 400),
        (
            "GET / HTTP/1.1\r\nHost: x\r\nbad header line\r\n\r\n".into(),
            400,
        ),
        (
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n".into(),
            400,
        ),
        (
            format!(
                "GET / HTTP/1.1\r\nHost: x\r\nx-big: {}\r\n\r\n",
                "a".repeat(17 * 1024)
            ),
            431,
        ),
        (
            format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(9 * 1024)),
            414,
        ),
    ];
    for (req, status) in cases {
        let mut c = connect(s.clear_port);
        let _ = c.write_all(req.as_bytes());
        let r = read_response(&mut c, &mut Vec::new(), false);
        assert_eq!(r.status, status, "{}", &req[..req.len().min(40)]);
        assert_eq!(r.header("connection"), Some("close"));
        assert!(closed_within(&mut c, Duration::from_secs(3)));
    }
}

#[test]
fn timeouts_408_idle_close_and_slow_reader() {
    let m = std::net::SocketAddr::from(([127, 0, 0, 1], common::free_port()));
    let metrics = m.to_string();
    let s = Server::start(&[
        "-t",
        "1",
        "--no-quic",
        "--timeout",
        "1s",
        "--metrics",
        &metrics,
    ]);
    // Incomplete head.
    let mut c = connect(s.clear_port);
    c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
    let t0 = Instant::now();
    let r = read_response(&mut c, &mut Vec::new(), false);
    assert_eq!(r.status, 408);
    assert!(t0.elapsed() >= Duration::from_millis(900) && t0.elapsed() < Duration::from_secs(5));
    // Incomplete body.
    let mut c = connect(s.clear_port);
    c.write_all(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n01234")
        .unwrap();
    assert_eq!(read_response(&mut c, &mut Vec::new(), false).status, 408);
    // Idle keep-alive: silent close.
    let mut c = connect(s.clear_port);
    c.write_all(b"GET /?s=1 HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut buf = Vec::new();
    read_response(&mut c, &mut buf, false);
    assert!(closed_within(&mut c, Duration::from_secs(3)));
    assert!(buf.is_empty());
    // A client that stops reading a huge response is dropped; others are still served.
    let mut slow = connect(s.clear_port);
    slow.write_all(b"GET /?s=1g HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    // Until the server has given up on it (its write timed out, counted).
    common::wait_until("the slow reader dropped", Duration::from_secs(10), || {
        common::metrics::scrape(m).sum("loadterm_protections_total", &[("kind", "write_timeout")])
            >= 1
    });
    assert_eq!(
        get(s.clear_port, "GET /?s=3 HTTP/1.1\r\nHost: x\r\n\r\n").body,
        b".12"
    );
    let mut got = Vec::new();
    let t0 = Instant::now();
    while fill(&mut slow, &mut got) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "slow reader never dropped"
        );
    }
    assert!(
        got.len() < 1 << 30,
        "the server gave up before sending everything"
    );
}

/// Exact bodies on both large-body paths: spliced (clear text, ≥ 64 KiB, the default) and
/// copied (`--no-splice`), including a pipelined small response right behind a spliced one.
#[test]
fn bodies_are_exact_at_buffer_boundaries() {
    bodies_are_exact(&[]);
    bodies_are_exact(&["--no-splice"]);
}

fn bodies_are_exact(flags: &[&str]) {
    let s = Server::start(&[&["-t", "1", "--no-quic"], flags].concat());
    let mut c = connect(s.clear_port);
    let mut buf = Vec::new();
    for size in [
        0usize,
        1,
        49,
        50,
        51,
        16383,
        16384,
        16385,
        65535,
        65536,
        65537,
        300_001,
        1 << 20,
    ] {
        c.write_all(format!("GET /?s={size} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .unwrap();
        let r = read_response(&mut c, &mut buf, false);
        assert_eq!(r.body.len(), size);
        assert_body(&r.body, BodyKind::Pattern);
        c.write_all(format!("GET /?s={size}&k=1 HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .unwrap();
        let r = read_response(&mut c, &mut buf, false);
        assert_eq!(r.body, vec![b'1'; size]);
    }
    // Random bodies: not the pattern, periodic over 64 KiB.
    c.write_all(b"GET /?s=200000&R=1 HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let r = read_response(&mut c, &mut buf, false);
    assert_eq!(r.body.len(), 200_000);
    assert_ne!(
        &r.body[..50],
        b".123456789.123456789.123456789.123456789.12345678\n"
    );
    assert_eq!(&r.body[..1000], &r.body[65536..66536]);
    let distinct: std::collections::HashSet<u8> = r.body[..4096].iter().copied().collect();
    assert!(distinct.len() > 200);
    c.write_all(b"GET /?s=100001 HTTP/1.1\r\nHost: x\r\n\r\nGET /?s=7 HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let r = read_response(&mut c, &mut buf, false);
    assert_eq!(r.body.len(), 100_001);
    assert_body(&r.body, BodyKind::Pattern);
    assert_eq!(read_response(&mut c, &mut buf, false).body, b".123456");
}

#[test]
fn help_page() {
    let s = server();
    for target in ["/?", "/x?", "/?h"] {
        let mut c = connect(s.clear_port);
        c.write_all(format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .unwrap();
        let r = read_response(&mut c, &mut Vec::new(), false);
        assert!(r.head.starts_with("HTTP/1.0 200 OK\r\n"), "{target}");
        assert_eq!(r.header("content-type"), Some("text/plain"));
        let text = String::from_utf8(r.body).unwrap();
        assert!(
            text.contains(env!("CARGO_PKG_VERSION")) && text.contains("s=<size>"),
            "{text}"
        );
    }
}

#[test]
fn curl_and_h2load_h1() {
    let s = server();
    if common::have_tool("curl") {
        let out = std::process::Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code} %{size_download}",
            ])
            .arg(format!("http://127.0.0.1:{}/?s=123456&r=202", s.clear_port))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "202 123456");
        let out = std::process::Command::new("curl")
            .args([
                "-sk",
                "--http1.1",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code} %{size_download} %{http_version}",
            ])
            .arg(format!("https://127.0.0.1:{}/?s=70000", s.tls_port))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "200 70000 1.1");
    }
    if common::have_tool("h2load") {
        let out = std::process::Command::new("h2load")
            .args(["--h1", "-n", "2000", "-c", "10", "-m", "10"])
            .arg(format!("http://127.0.0.1:{}/?s=1k", s.clear_port))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(
                "2000 total, 2000 started, 2000 done, 2000 succeeded, 0 failed, 0 errored"
            ),
            "{text}"
        );
        assert!(text.contains("status codes: 2000 2xx"), "{text}");
    }
}

#[test]
fn command_line() {
    let run = |args: &[&str]| {
        std::process::Command::new(common::bin())
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&["serve", "-v"]);
    assert!(
        out.status.success()
            && String::from_utf8_lossy(&out.stdout).contains(env!("CARGO_PKG_VERSION"))
    );
    let out = run(&["-L", "127.0.0.1:1:2", "-G", "nbthread 3", "-C"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.split_whitespace().eq(["threads", "3"])));
    let out = run(&["serve", "-C"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("8889"),
        "defaults to 127.0.0.1:8888:8889"
    );
    for bad in [
        &["serve", "-L", "8888"][..],
        &["serve", "--threads", "0"],
        &["serve", "--timeout", "soon"],
        &["serve", "-c", "P-999"],
        &["serve", "-D"],
        &["serve", "-G", "nbthread x"],
        &["serve", "--bogus"],
    ] {
        let out = run(bad);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{bad:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    }
    // A port another socket holds: clear error, exit 1.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let out = run(&["serve", "-L", &format!("127.0.0.1:{port}")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already in use"));
}

/// A restart on the same ports works while connections of the previous run sit in TIME-WAIT
/// (the server closed them first: `C=1`), as after every benchmark run.
#[test]
fn restart_with_connections_in_time_wait() {
    let first = server();
    for _ in 0..3 {
        let r = get(
            first.clear_port,
            "GET /?s=1&C=1 HTTP/1.1\r\nHost: x\r\n\r\n",
        );
        assert_eq!(r.status, 200);
    }
    let port = first.clear_port;
    drop(first);
    let out = std::process::Command::new("ss")
        .args(["-Htan", "state", "time-wait", &format!("sport = :{port}")])
        .output()
        .unwrap();
    assert!(!out.stdout.is_empty(), "no TIME-WAIT left to test with");
    let mut again = std::process::Command::new(common::bin())
        .args([
            "serve",
            "-t",
            "1",
            "--no-quic",
            "-L",
            &format!("127.0.0.1:{port}"),
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        common::wait_tcp(port, Duration::from_secs(5)),
        "restart refused"
    );
    assert_eq!(
        get(port, "GET /?s=2 HTTP/1.1\r\nHost: x\r\n\r\n").body,
        b".1"
    );
    again.kill().unwrap();
    again.wait().unwrap();
}

/// The zero-copy system calls the server made while answering one request, seen by strace.
fn zero_copy_calls(target: &str) -> usize {
    let (clear, tls) = (common::free_port(), common::free_port());
    let log = std::env::temp_dir().join(format!("loadterm-strace-{clear}.log"));
    let mut strace = std::process::Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=splice,tee,vmsplice", "-o"])
        .arg(&log)
        .arg(common::bin())
        .args(["serve", "-t", "1", "--no-quic", "-L"])
        .arg(format!("127.0.0.1:{clear}:{tls}"))
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("strace");
    assert!(
        common::wait_tcp(clear, Duration::from_secs(20)),
        "server under strace did not start"
    );
    let r = get(clear, &format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n"));
    assert_eq!(r.body.len(), 256 << 10);
    assert_body(&r.body, BodyKind::Pattern);
    // Stop the traced server (strace's child) so that strace writes everything and exits.
    let _ = std::process::Command::new("pkill")
        .args(["-TERM", "-P", &strace.id().to_string()])
        .status();
    strace.wait().expect("strace exit");
    let text = std::fs::read_to_string(&log).expect("strace log");
    let _ = std::fs::remove_file(&log);
    text.lines()
        .filter(|l| l.contains("splice(") || l.contains("tee("))
        .count()
}

#[test]
fn s0_turns_zero_copy_off_for_that_response() {
    if !common::have_tool("strace") {
        return;
    }
    // The same body spliced by default (so the check below can see splicing when it happens).
    assert!(
        zero_copy_calls("/?s=256k") > 0,
        "a 256 KiB body was not spliced"
    );
    assert_eq!(zero_copy_calls("/?s=256k&S=0"), 0, "S=0 still spliced");
}

/// A `date` field (RFC 9110 §6.6.1) first on every response, dummy and error alike, in
/// IMF-fixdate form and within a few seconds of the test's own clock; none with --no-date.
#[test]
fn date_on_every_response_unless_no_date() {
    let s = server();
    let before = std::time::SystemTime::now();
    for request in [
        "GET /?s=3 HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET /?r=1000 HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET / HTTP/1.1\r\n\r\n",
    ] {
        let r = get(s.clear_port, request);
        let first = r.head.lines().nth(1).unwrap_or_default();
        let date = first
            .strip_prefix("date: ")
            .unwrap_or_else(|| panic!("{request:?}: no date first: {}", r.head));
        let t = httpdate_secs(date).unwrap_or_else(|| panic!("{request:?}: bad date {date:?}"));
        let now = before
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert!(t + 5 >= now && t <= now + 5, "{date} vs {now}");
    }
    let s = Server::start(&["-t", "1", "--no-quic", "--no-date"]);
    let r = get(s.clear_port, "GET /?s=3 HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(r.header("date"), None, "{}", r.head);
}

/// Seconds since 1970 of an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), checked strictly.
fn httpdate_secs(d: &str) -> Option<u64> {
    let b = d.as_bytes();
    if b.len() != 29 || &b[3..5] != b", " || !d.ends_with(" GMT") {
        return None;
    }
    let num = |r: std::ops::Range<usize>| d.get(r)?.parse::<u64>().ok();
    let (day, year) = (num(5..7)?, num(12..16)?);
    let (h, m, sec) = (num(17..19)?, num(20..22)?, num(23..25)?);
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = months.iter().position(|&x| x == &d[8..11])? as u64 + 1;
    // Days from civil (Howard Hinnant), written independently of the server's.
    let (y, mo) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let era = y / 400;
    let yoe = y - era * 400;
    let doy = (153 * mo + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + h * 3600 + m * 60 + sec)
}

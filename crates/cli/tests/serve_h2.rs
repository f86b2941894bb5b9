//! HTTP/2 behaviour of `loadterm serve` (TLS ALPN h2 and h2c), with curl, nghttp, h2load, h2spec
//! and our own h2 client for concurrency, resets and floods.

use crate::common;

use bytes::Bytes;
use common::Server;
use std::process::Command;
use std::time::{Duration, Instant};

fn server() -> Server {
    Server::start(&["-t", "1", "--no-quic"])
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run tool");
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn curl_nghttp_and_h2load() {
    let s = server();
    if common::have_tool("curl") {
        let tls = format!("https://127.0.0.1:{}/?s=70000&r=202", s.tls_port);
        let out = run(Command::new("curl").args([
            "-sk",
            "--http2",
            "-o",
            "/dev/null",
            "-w",
            "%{http_version} %{http_code} %{size_download}",
            &tls,
        ]));
        assert_eq!(out, "2 202 70000");
        let clear = format!("http://127.0.0.1:{}/?s=1234&c=0", s.clear_port);
        let out = run(Command::new("curl").args(["-si", "--http2-prior-knowledge", &clear]));
        assert!(out.starts_with("HTTP/2 200"), "{out}");
        assert!(
            out.contains("cache-control: no-cache") && out.contains("content-length: 1234"),
            "{out}"
        );
        // `Upgrade: h2c` (curl sends it for http:// with --http2): 101, then stream 1 over HTTP/2.
        let clear = format!("http://127.0.0.1:{}/?s=4321&r=203", s.clear_port);
        let out = run(Command::new("curl").args([
            "-s",
            "--http2",
            "-o",
            "/dev/null",
            "-w",
            "%{http_version} %{http_code} %{size_download}",
            &clear,
        ]));
        assert_eq!(out, "2 203 4321");
        // Over TLS, h2c is never negotiated: the same request is answered as HTTP/1.1.
        let tls = format!("https://127.0.0.1:{}/?s=10", s.tls_port);
        let out = run(Command::new("curl").args([
            "-sk",
            "--http1.1",
            "-H",
            "Connection: Upgrade, HTTP2-Settings",
            "-H",
            "Upgrade: h2c",
            "-H",
            "HTTP2-Settings: AAMAAABkAAQAAP__",
            "-o",
            "/dev/null",
            "-w",
            "%{http_version} %{http_code}",
            &tls,
        ]));
        assert_eq!(out, "1.1 200");
        // C=1 and k=1 only drop content-length; the body still arrives whole.
        for q in ["C=1", "k=1"] {
            let url = format!("http://127.0.0.1:{}/?s=5000&{q}", s.clear_port);
            let out = run(Command::new("curl").args([
                "-s",
                "--http2-prior-knowledge",
                "-D",
                "-",
                "-o",
                "/dev/null",
                "-w",
                "size=%{size_download}",
                &url,
            ]));
            assert!(out.starts_with("HTTP/2 200"), "{q}: {out}");
            assert!(!out.contains("content-length"), "{q}: {out}");
            assert!(out.ends_with("size=5000"), "{q}: {out}");
        }
    }
    if common::have_tool("nghttp") {
        let out = run(Command::new("nghttp").args([
            "-nv",
            &format!("https://127.0.0.1:{}/?s=100&r=418", s.tls_port),
        ]));
        assert!(out.contains(":status: 418"), "{out}");
        let out = run(Command::new("nghttp")
            .args(["-nv", &format!("http://127.0.0.1:{}/?s=100", s.clear_port)]));
        assert!(
            out.contains(":status: 200")
                && out.contains("x-rsp: id=dummy, code=200, cache=1, size=100"),
            "{out}"
        );
        // nghttp -u: HTTP/1.1 Upgrade, then more requests on the upgraded connection.
        let url = |n| format!("http://127.0.0.1:{}/?s={n}", s.clear_port);
        let out = run(Command::new("nghttp").args(["-uv", &url(2000), &url(2001)]));
        assert!(out.contains("HTTP Upgrade success"), "{out}");
        assert!(
            out.contains("(stream_id=1) content-length: 2000")
                && out.contains("content-length: 2001"),
            "{out}"
        );
    }
    if common::have_tool("h2load") {
        for url in [
            format!("https://127.0.0.1:{}/?s=1k", s.tls_port),
            format!("http://127.0.0.1:{}/?s=16k", s.clear_port),
        ] {
            let out = run(Command::new("h2load").args([
                "-n",
                "2000",
                "-c",
                "4",
                "-m",
                "10",
                "--npn-list=h2",
                &url,
            ]));
            assert!(
                out.contains("2000 total, 2000 started, 2000 done, 2000 succeeded"),
                "{url}: {out}"
            );
        }
    }
}

/// `Upgrade: h2c` needs exactly one `HTTP2-Settings` field, named in `Connection` too (RFC 7540
/// §3.2.1): without, the request is answered in HTTP/1.1.
#[test]
fn upgrade_without_one_http2_settings_field_is_answered_in_http1() {
    let s = server();
    let settings = "HTTP2-Settings: AAMAAABkAAQAAP__\r\n";
    let upgrade = "Connection: Upgrade, HTTP2-Settings\r\n";
    for (what, fields) in [
        ("none", upgrade.to_string()),
        ("two", format!("{upgrade}{settings}{settings}")),
        (
            "not in Connection",
            format!("Connection: Upgrade\r\n{settings}"),
        ),
    ] {
        let r = common::http1::get(
            s.clear_port,
            &format!("GET /?s=7 HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\n{fields}\r\n"),
        );
        assert_eq!((r.status, r.body.len()), (200, 7), "{what}: {}", r.head);
    }
}

/// `HTTP2-Settings` the server cannot take: the upgrade is answered (101, our SETTINGS), then
/// with the connection error a SETTINGS frame with those settings gets (RFC 7540 §3.2.1 has the
/// field read "as it would any other SETTINGS frame"), stream 1 not processed.
#[test]
fn upgrade_with_bad_http2_settings_gets_the_settings_frames_error() {
    use common::h2raw::*;
    use std::io::Write;
    let s = server();
    for (what, value, code) in [
        ("ENABLE_PUSH 2", http2_settings(&[(0x2, 2)]), 0x1u32),
        (
            "INITIAL_WINDOW_SIZE 2^31",
            http2_settings(&[(0x4, 1 << 31)]),
            0x3,
        ),
        (
            "MAX_FRAME_SIZE 16383",
            http2_settings(&[(0x5, 16_383)]),
            0x1,
        ),
        ("5 bytes", "AAAAAAA".to_string(), 0x6),
        ("not base64url", "AAMAAABk+AQAAP//".to_string(), 0x1),
    ] {
        let mut c = common::http1::connect(s.clear_port);
        upgrade_with(&mut c, "/?s=3", &value);
        c.write_all(&hello()).unwrap();
        let mut before = Vec::new();
        let goaway = loop {
            match next_frame(&mut c) {
                Some((GOAWAY, _, _, p)) => break p[..8].to_vec(),
                Some((ty, _, stream, _)) => before.push((ty, stream)),
                None => panic!("{what}: no GOAWAY"),
            }
        };
        assert_eq!(goaway, [[0; 4], code.to_be_bytes()].concat(), "{what}");
        assert_eq!(before.first(), Some(&(SETTINGS, 0)), "{what}");
        assert!(before.iter().all(|&(_, id)| id == 0), "{what}: {before:?}");
    }
}

/// h2spec in strict mode: everything passes on the TLS port; on the mixed H1/H2 clear port the
/// one expected exception is §3.5/2 (an invalid preface is served as HTTP/1.1, which answers 400).
#[test]
fn h2spec_strict() {
    if !common::have_tool("h2spec") {
        return;
    }
    let s = server();
    let tls = run(Command::new("h2spec").args([
        "-S",
        "-t",
        "-k",
        "-h",
        "127.0.0.1",
        "-p",
        &s.tls_port.to_string(),
        "-P",
        "/?s=1k",
        "-o",
        "5",
    ]));
    assert!(
        tls.contains("146 tests, 146 passed, 0 skipped, 0 failed"),
        "{tls}"
    );
    let clear = run(Command::new("h2spec").args([
        "-S",
        "-h",
        "127.0.0.1",
        "-p",
        &s.clear_port.to_string(),
        "-P",
        "/?s=1k",
        "-o",
        "5",
    ]));
    assert!(
        clear.contains("146 tests, 145 passed, 0 skipped, 1 failed"),
        "{clear}"
    );
    assert!(
        clear.contains("× 2: Sends invalid connection preface"),
        "{clear}"
    );
}

async fn h2c(port: u16) -> h2::client::SendRequest<Bytes> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

fn get(path: &str) -> http::Request<()> {
    http::Request::get(format!("http://127.0.0.1{path}"))
        .body(())
        .unwrap()
}

async fn fetch(client: &mut h2::client::SendRequest<Bytes>, path: &str) -> (u16, usize) {
    let (status, body) = fetch_all(client, path).await;
    (status, body.len())
}

async fn fetch_all(client: &mut h2::client::SendRequest<Bytes>, path: &str) -> (u16, Vec<u8>) {
    receive(send(client, path).await).await
}

/// Send `GET path` (its HEADERS queued on the connection in call order).
async fn send(client: &h2::client::SendRequest<Bytes>, path: &str) -> h2::client::ResponseFuture {
    let (resp, _) = client
        .clone()
        .ready()
        .await
        .unwrap()
        .send_request(get(path), true)
        .unwrap();
    resp
}

/// The response to a request sent: status and body.
async fn receive(resp: h2::client::ResponseFuture) -> (u16, Vec<u8>) {
    let resp = resp.await.unwrap();
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut all = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        all.extend_from_slice(&chunk);
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    (status, all)
}

#[tokio::test]
async fn streams_are_independent_and_flow_controlled() {
    let s = server();
    let mut client = h2c(s.clear_port).await;
    // A slow stream does not hold back fast ones on the same connection.
    let mut slow_client = client.clone();
    let slow = tokio::spawn(async move { fetch(&mut slow_client, "/?t=4000&s=10").await });
    let fast: Vec<_> = (0..20)
        .map(|i| {
            let mut c = client.clone();
            tokio::spawn(async move { fetch(&mut c, &format!("/?s={}", i * 1000)).await })
        })
        .collect();
    for (i, f) in fast.into_iter().enumerate() {
        assert_eq!(f.await.unwrap(), (200, i * 1000));
    }
    assert!(!slow.is_finished(), "fast streams waited for the slow one");
    assert_eq!(slow.await.unwrap(), (200, 10));
    // A body far larger than the client's 64 KiB default window.
    assert_eq!(fetch(&mut client, "/?s=20m").await, (200, 20 << 20));
}

#[tokio::test]
async fn resets_mid_body_and_rapid_reset_flood() {
    let s = server();
    let client = h2c(s.clear_port).await;
    // Open a huge response and reset it after the first bytes.
    let (resp, _) = client
        .clone()
        .ready()
        .await
        .unwrap()
        .send_request(get("/?s=1g"), true)
        .unwrap();
    let mut body = resp.await.unwrap().into_body();
    let first = body.data().await.unwrap().unwrap();
    assert!(!first.is_empty());
    drop(body);
    // Rapid reset: open and immediately cancel many streams.
    for _ in 0..2000 {
        let Ok(mut c) = client.clone().ready().await else {
            break;
        };
        match c.send_request(get("/?t=1000&s=10"), true) {
            Ok((resp, _)) => drop(resp),
            Err(_) => break,
        }
    }
    // The server either went on serving this connection or sent GOAWAY; either way it is alive.
    let mut fresh = h2c(s.clear_port).await;
    assert_eq!(fetch(&mut fresh, "/?s=3").await, (200, 3));
}

#[tokio::test]
async fn expect_continue_and_upload() {
    let s = server();
    let client = h2c(s.clear_port).await;
    let req = http::Request::post("http://127.0.0.1/?s=5")
        .header("expect", "100-continue")
        .body(())
        .unwrap();
    let (resp, mut tx) = client
        .ready()
        .await
        .unwrap()
        .send_request(req, false)
        .unwrap();
    tx.send_data(Bytes::from(vec![b'x'; 200_000]), true)
        .unwrap();
    let resp = resp.await.unwrap();
    assert_eq!(resp.status(), 200);
    let x_req = resp.headers()["x-req"].to_str().unwrap().to_owned();
    let size: u64 = x_req
        .trim_start_matches("size=")
        .split(',')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(size > 200_000, "{x_req}");
}

/// `--alt-svc` advertises HTTP/3 on the TLS port's responses (H1 and H2), never on clear text.
#[test]
fn alt_svc_advertises_h3_on_tls_only() {
    let s = Server::start(&["-t", "1", "--alt-svc"]);
    let want = format!("alt-svc: h3=\":{}\"; ma=86400", s.tls_port);
    for (proto, url) in [
        ("--http2", format!("https://127.0.0.1:{}/?s=1", s.tls_port)),
        (
            "--http1.1",
            format!("https://127.0.0.1:{}/?s=1", s.tls_port),
        ),
    ] {
        let out =
            run(Command::new("curl").args(["-sk", proto, "-D", "-", "-o", "/dev/null", &url]));
        assert!(out.contains(&want), "{proto}: {out}");
    }
    let url = format!("http://127.0.0.1:{}/?s=1", s.clear_port);
    let out = run(Command::new("curl").args(["-s", "-D", "-", "-o", "/dev/null", &url]));
    assert!(
        out.starts_with("HTTP/1.1 200") && !out.contains("alt-svc"),
        "{out}"
    );
}

/// SIGTERM: in-flight requests finish, idle HTTP/1 connections close at once, HTTP/2 connections
/// get GOAWAY and end, and the process exits well before the grace period.
#[tokio::test]
async fn sigterm_drains_connections_with_goaway() {
    // A grace far above the exit deadline below: the exit comes from the drained connections.
    let mut s = Server::start(&["-t", "1", "--no-quic", "--grace", "60s"]);
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", s.clear_port))
        .await
        .unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    let conn = tokio::spawn(conn);
    // The delayed request goes first; a quick one after it on the same connection is answered
    // only once the server has read the delayed one's HEADERS (one TCP stream, read in order).
    let t_sent = Instant::now();
    let delayed = send(&client, "/?t=2000&s=10").await;
    let delayed = tokio::spawn(async move {
        let (status, body) = receive(delayed).await;
        (status, body.len())
    });
    assert_eq!(fetch(&mut client.clone(), "/?s=1").await, (200, 1));
    let mut idle_h1 = std::net::TcpStream::connect(("127.0.0.1", s.clear_port)).unwrap();
    std::io::Write::write_all(&mut idle_h1, b"GET /?s=1 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    // Below the 25 s idle timeout: the EOF below comes from the shutdown.
    idle_h1
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut resp = vec![0u8; 4096];
    let n = std::io::Read::read(&mut idle_h1, &mut resp).unwrap();
    assert!(resp[..n].starts_with(b"HTTP/1.1 200"));
    s.sigterm();
    // The idle HTTP/1 connection is closed (EOF), not left to the 25 s timeout.
    assert_eq!(std::io::Read::read(&mut idle_h1, &mut resp).unwrap(), 0);
    // The stream in flight completes.
    assert_eq!(delayed.await.unwrap(), (200, 10));
    // GOAWAY, then the connection ends cleanly (an error here would be a reset).
    tokio::time::timeout(Duration::from_secs(30), conn)
        .await
        .expect("connection still open after GOAWAY")
        .unwrap()
        .expect("connection ended with an error");
    common::wait_until("the server exits", Duration::from_secs(30), || {
        s.child.try_wait().unwrap().is_some()
    });
    assert!(
        t_sent.elapsed() >= Duration::from_millis(2000),
        "exited before the stream's 2 s delay"
    );
}

/// A client that opens huge responses and never reads: the server waits on the full socket
/// (no spinning: write coalescing defers flushes, it must not keep waking itself) and its
/// memory stays flat.
#[test]
fn stalled_reader_costs_no_cpu() {
    use std::io::Write;
    let s = server();
    let frame = |t: u8, f: u8, sid: u32, payload: &[u8]| {
        let mut v = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        v.extend_from_slice(&[t, f]);
        v.extend_from_slice(&sid.to_be_bytes());
        v.extend_from_slice(payload);
        v
    };
    let lit = |n: &[u8], v: &[u8]| [&[0, n.len() as u8][..], n, &[v.len() as u8], v].concat();
    let mut c = std::net::TcpStream::connect(s.clear_addr()).unwrap();
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    // Maximal stream and connection windows: only the socket can hold the server back.
    out.extend(frame(4, 0, 0, &[0, 4, 0x7f, 0xff, 0xff, 0xff]));
    out.extend(frame(8, 0, 0, &(0x7fff_ffffu32 - 65535).to_be_bytes()));
    for sid in (1..40).step_by(2) {
        let block = [
            lit(b":method", b"GET"),
            lit(b":scheme", b"http"),
            lit(b":path", b"/?s=1g"),
            lit(b":authority", b"x"),
        ]
        .concat();
        out.extend(frame(1, 5, sid, &block));
    }
    c.write_all(&out).unwrap();
    let stat = || {
        let s = std::fs::read_to_string(format!("/proc/{}/stat", s.child.id())).unwrap();
        let f: Vec<u64> = s
            .rsplit(')')
            .next()
            .unwrap()
            .split_whitespace()
            .skip(11)
            .take(2)
            .map(|x| x.parse().unwrap())
            .collect();
        f[0] + f[1]
    };
    // Filling the socket takes CPU, and longer on a busy machine: 2 s windows until one is
    // quiet. A server that spins is never quiet.
    let quiet = |ticks: &[u64]| ticks.last().is_some_and(|&t| t < 20);
    let mut ticks = Vec::new();
    while ticks.len() < 10 && !quiet(&ticks) {
        let before = stat();
        std::thread::sleep(Duration::from_secs(2));
        ticks.push(stat() - before);
    }
    assert!(
        quiet(&ticks),
        "CPU ticks in each 2 s while the client read nothing: {ticks:?}"
    );
    drop(c);
}

/// Many streams of mixed sizes at once on one connection, so passes mix copied and referenced
/// pieces and exceed the 64 KiB pass limit; every body must arrive intact and in order.
async fn emit_keeps_every_byte(strategy: &str) {
    let s = Server::start(&[
        "-t",
        "1",
        "--no-quic",
        "--h2-emit",
        strategy,
        "--h2-emit-threshold",
        "2k",
    ]);
    let client = h2c(s.clear_port).await;
    let sizes = [
        100usize, 1000, 2047, 2048, 4096, 16384, 16385, 70000, 300_000,
    ];
    let tasks: Vec<_> = (0..3)
        .flat_map(|_| sizes)
        .map(|size| {
            let mut c = client.clone();
            tokio::spawn(async move { (size, fetch_all(&mut c, &format!("/?s={size}")).await.1) })
        })
        .collect();
    for t in tasks {
        let (size, body) = t.await.unwrap();
        assert_eq!(body.len(), size, "{strategy}");
        common::http1::assert_body(&body, loadterm_plan::BodyKind::Pattern);
    }
}

#[tokio::test]
async fn emit_drain_keeps_every_byte() {
    emit_keeps_every_byte("drain").await;
}

#[tokio::test]
async fn emit_gather_keeps_every_byte() {
    emit_keeps_every_byte("gather").await;
}

#[tokio::test]
async fn emit_hybrid_keeps_every_byte() {
    emit_keeps_every_byte("hybrid").await;
}

/// Over TLS (curl multiplexing on one connection), gathered random bodies match the server's
/// 64 KiB-periodic random block at every offset.
#[test]
fn emit_gather_over_tls_with_random_bodies() {
    if !common::have_tool("curl") {
        return;
    }
    let s = Server::start(&["-t", "1", "--no-quic", "--h2-emit", "gather"]);
    let dir = std::env::temp_dir().join(format!("loadterm-emit-{}", s.tls_port));
    std::fs::create_dir_all(&dir).unwrap();
    let mut cmd = Command::new("curl");
    cmd.args([
        "-sk",
        "--no-progress-meter",
        "--http2",
        "-Z",
        "--parallel-immediate",
    ]);
    for i in 0..6 {
        cmd.arg(format!(
            "https://127.0.0.1:{}/?s=150000&R=1&n={i}",
            s.tls_port
        ))
        .arg("-o")
        .arg(dir.join(format!("b{i}")));
    }
    assert!(cmd.status().unwrap().success());
    let first = std::fs::read(dir.join("b0")).unwrap();
    assert_eq!(first.len(), 150_000);
    assert!(first[..65536] == first[65536..131072], "random period");
    for i in 1..6 {
        assert_eq!(std::fs::read(dir.join(format!("b{i}"))).unwrap(), first);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Differential: the same requests through the HTTP/2 engine (the `h2` crate as an independent
/// client) and the HTTP/1.1 engine (raw bytes), field by field. Both carry out the same
/// exchange, so status, the fields that describe the response and the body must agree; only
/// the framing differs (HTTP/1.1's `connection`, `transfer-encoding` and chunked bodies, HTTP/2's
/// lack of them, and content-length where HTTP/1.1 needs another framing; `x-req` reports each
/// protocol's own request size, and delays are left out: `x-rsp` reports the real time).
#[tokio::test]
async fn http2_answers_as_http1_does_field_by_field() {
    let s = server();
    let h2 = h2c(s.clear_port).await;
    let targets = [
        "/?s=0",
        "/?s=1",
        "/?s=1k",
        "/?s=16385&c=0",
        "/?s=70000&R=1",
        "/?s=300&r=404",
        "/?s=12&r=503&c=0",
        "/?s=5&k=1",
        "/?s=5&C=1",
        "/?s=200&e=7",
        "/?s=10&x=y",
        "/?r=204",
        "/?r=304",
        "/?",
        "/?s=-1",
    ];
    let compared = [
        "content-length",
        "cache-control",
        "etag",
        "content-type",
        "x-rsp",
    ];
    for target in targets {
        let mut c = common::http1::connect(s.clear_port);
        std::io::Write::write_all(
            &mut c,
            format!("GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").as_bytes(),
        )
        .unwrap();
        let one = common::http1::read_response(&mut c, &mut Vec::new(), false);
        let resp = send(&h2, target).await.await.unwrap();
        let (head, mut body) = resp.into_parts();
        assert_eq!(head.status.as_u16(), one.status, "{target}: status");
        for name in compared {
            let two = head.headers.get(name).map(|v| v.to_str().unwrap());
            // HTTP/1.1 frames some bodies without content-length (chunked with `k=1`, the help
            // page close-delimited); HTTP/2 has END_STREAM for that, and sends the length it
            // knows.
            if name == "content-length" && one.header(name).is_none() {
                continue;
            }
            assert_eq!(two, one.header(name), "{target}: {name}");
        }
        let mut all = Vec::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.unwrap();
            let _ = body.flow_control().release_capacity(chunk.len());
            all.extend_from_slice(&chunk);
        }
        assert!(
            all == one.body,
            "{target}: body ({} and {} bytes)",
            all.len(),
            one.body.len()
        );
    }
}

/// What the server did with a stream-1 request: answered it, reset its stream (stream 3, sent
/// after it, still answered: a stream error), or ended the connection (GOAWAY: a connection
/// error).
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Verdict {
    Served,
    Reset(u32),
    GoAway(u32),
}

/// Send `frames` (stream 1, after the preface and SETTINGS) then a well-formed stream 3 on a
/// new h2c connection to `port`: what became of stream 1.
fn verdict_on(port: u16, frames: &[u8]) -> Verdict {
    use common::h2raw::*;
    use std::io::Write;
    let mut c = open(port);
    let mut out = frames.to_vec();
    out.extend(frame(
        HEADERS,
        END_STREAM | END_HEADERS,
        3,
        &request_block("/?s=1", &[]),
    ));
    c.write_all(&out).unwrap();
    let (mut first, mut second) = (None, false);
    while first.is_none() || !second {
        match next_frame(&mut c).expect("the server closed or went silent") {
            (RST_STREAM, _, 1, p) => {
                first = Some(Verdict::Reset(u32::from_be_bytes(
                    p[..4].try_into().unwrap(),
                )))
            }
            (HEADERS, _, 1, _) => first = Some(Verdict::Served),
            (HEADERS, _, 3, _) => second = true,
            (GOAWAY, _, _, p) => {
                return Verdict::GoAway(u32::from_be_bytes(p[4..8].try_into().unwrap()))
            }
            _ => {}
        }
    }
    first.unwrap()
}

/// docs/COMPATIBILITY.md "HTTP/2 requests": each malformed request or frame sequence and the
/// RFC 9113 error the server answers it with, on one server, a connection per row.
#[test]
fn h2_malformed_requests_get_their_rfc_errors() {
    use common::h2raw::*;
    use Verdict::*;
    let s = Server::start(&["-t", "1", "--no-quic"]);
    let headers = |block: &[u8]| frame(HEADERS, END_STREAM | END_HEADERS, 1, block);
    let with = |extra: &[(&str, &[u8])]| headers(&request_block("/", extra));
    let fields = |list: &[(&str, &[u8])]| {
        let mut b = Vec::new();
        for (n, v) in list {
            field(&mut b, n, v);
        }
        headers(&b)
    };
    let get: &[(&str, &[u8])] = &[
        (":method", b"GET"),
        (":scheme", b"http"),
        (":path", b"/"),
        (":authority", b"x"),
    ];
    fn and<'a>(
        get: &[(&'a str, &'a [u8])],
        more: &[(&'a str, &'a [u8])],
    ) -> Vec<(&'a str, &'a [u8])> {
        [get, more].concat()
    }
    let post = |cl: &[u8], body: &[u8]| {
        let mut f = frame(
            HEADERS,
            END_HEADERS,
            1,
            &request_block("/", &[("content-length", cl)]),
        );
        f.extend(frame(DATA, END_STREAM, 1, body));
        f
    };
    let trailers = |block: &[(&str, &[u8])]| {
        let mut f = frame(HEADERS, END_HEADERS, 1, &request_block("/", &[]));
        f.extend(frame(DATA, 0, 1, b"ab"));
        let mut t = Vec::new();
        for (n, v) in block {
            field(&mut t, n, v);
        }
        f.extend(frame(HEADERS, END_STREAM | END_HEADERS, 1, &t));
        f
    };
    let rows: Vec<(&str, Vec<u8>, Verdict)> = vec![
        ("well-formed GET", with(&[]), Served),
        (
            "uppercase field name",
            with(&[("Accept", b"*/*")]),
            Reset(1),
        ),
        ("field name with a space", with(&[("x y", b"1")]), Reset(1)),
        (
            "field name with a colon inside",
            with(&[("x:y", b"1")]),
            Reset(1),
        ),
        ("empty field name", with(&[("", b"1")]), Reset(1)),
        (
            "field value with CR LF",
            with(&[("x-a", b"1\r\nx-b: 2")]),
            Reset(1),
        ),
        (
            "field value with NUL",
            with(&[("x-a", b"1\x002")]),
            Reset(1),
        ),
        (
            "field value with leading space",
            with(&[("accept", b" */*")]),
            Reset(1),
        ),
        (
            "field value with trailing tab",
            with(&[("accept", b"*/*\t")]),
            Reset(1),
        ),
        ("connection", with(&[("connection", b"close")]), Reset(1)),
        ("keep-alive", with(&[("keep-alive", b"5")]), Reset(1)),
        (
            "proxy-connection",
            with(&[("proxy-connection", b"close")]),
            Reset(1),
        ),
        (
            "transfer-encoding",
            with(&[("transfer-encoding", b"chunked")]),
            Reset(1),
        ),
        ("upgrade", with(&[("upgrade", b"h2c")]), Reset(1)),
        ("te: trailers", with(&[("te", b"trailers")]), Served),
        ("te: gzip", with(&[("te", b"gzip")]), Reset(1)),
        (
            "te: trailers, gzip",
            with(&[("te", b"trailers, gzip")]),
            Reset(1),
        ),
        (
            "pseudo-header after a regular field",
            fields(&[&get[..3], &[("accept", b"*/*"), (":authority", b"x")]].concat()),
            Reset(1),
        ),
        (
            "unknown pseudo-header",
            fields(&and(get, &[(":foo", b"1")])),
            Reset(1),
        ),
        (
            "response pseudo-header :status",
            fields(&and(get, &[(":status", b"200")])),
            Reset(1),
        ),
        (
            "duplicate :path",
            fields(&and(get, &[(":path", b"/")])),
            Reset(1),
        ),
        (
            "duplicate :method",
            fields(&[&get[..1], get].concat()),
            Reset(1),
        ),
        ("missing :method", fields(&get[1..]), Reset(1)),
        (
            "missing :scheme",
            fields(&[get[0], get[2], get[3]]),
            Reset(1),
        ),
        ("missing :path", fields(&[get[0], get[1], get[3]]), Reset(1)),
        (
            "empty :path",
            fields(&[get[0], get[1], (":path", b""), get[3]]),
            Reset(1),
        ),
        ("missing :authority and host", fields(&get[..3]), Reset(1)),
        (
            "host agreeing with :authority (case aside)",
            with(&[("host", b"X")]),
            Served,
        ),
        (
            "host disagreeing with :authority",
            with(&[("host", b"y")]),
            Reset(1),
        ),
        (
            "two host fields",
            with(&[("host", b"x"), ("host", b"x")]),
            Reset(1),
        ),
        (
            "CONNECT without :authority",
            fields(&[(":method", b"CONNECT")]),
            Reset(1),
        ),
        (
            "CONNECT with :path",
            fields(&[
                (":method", b"CONNECT"),
                (":authority", b"x:443"),
                (":path", b"/"),
            ]),
            Reset(1),
        ),
        (
            "CONNECT (well-formed): no tunnels",
            fields(&[(":method", b"CONNECT"), (":authority", b"x:443")]),
            Reset(7),
        ),
        (
            "content-length above the DATA",
            post(b"10", b"12345"),
            Reset(1),
        ),
        (
            "content-length below the DATA",
            post(b"2", b"12345"),
            Reset(1),
        ),
        (
            "content-length not a number",
            post(b"5x", b"12345"),
            Reset(1),
        ),
        (
            "two content-length fields that differ",
            frame(
                HEADERS,
                END_STREAM | END_HEADERS,
                1,
                &request_block("/", &[("content-length", b"0"), ("content-length", b"1")]),
            ),
            Reset(1),
        ),
        (
            "trailers with a pseudo-header",
            trailers(&[(":path", b"/")]),
            Reset(1),
        ),
        (
            "trailers without END_STREAM",
            {
                let mut f = frame(HEADERS, END_HEADERS, 1, &request_block("/", &[]));
                f.extend(frame(HEADERS, END_HEADERS, 1, &{
                    let mut t = Vec::new();
                    field(&mut t, "x-t", b"1");
                    t
                }));
                f
            },
            Reset(1),
        ),
        ("invalid HPACK (index 0)", headers(&[0x80]), GoAway(0x9)),
        (
            "HEADERS on stream 0",
            frame(
                HEADERS,
                END_STREAM | END_HEADERS,
                0,
                &request_block("/", &[]),
            ),
            GoAway(1),
        ),
        (
            "HEADERS on an even stream",
            frame(
                HEADERS,
                END_STREAM | END_HEADERS,
                2,
                &request_block("/", &[]),
            ),
            GoAway(1),
        ),
        (
            "header block interrupted by another frame",
            {
                let mut f = frame(HEADERS, END_STREAM, 1, &request_block("/", &[]));
                f.extend(frame(PING, 0, 0, b"12345678"));
                f
            },
            GoAway(1),
        ),
        (
            "DATA on a stream never opened",
            frame(DATA, END_STREAM, 1, b"x"),
            GoAway(1),
        ),
        (
            "frame above SETTINGS_MAX_FRAME_SIZE",
            frame(DATA, 0, 1, &vec![0; 16_385]),
            GoAway(6),
        ),
    ];
    let mut wrong = Vec::new();
    for (what, frames, want) in &rows {
        let got = verdict_on(s.clear_port, frames);
        if got != *want {
            wrong.push(format!("{what}: {got:?}, expected {want:?}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

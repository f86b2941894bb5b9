//! HTTP/3 behaviour of `loadterm serve`, checked with an independent client (aioquic).

use crate::common;

use common::metrics::scrape;
use common::{have_aioquic, wait_until, Server};
use serde_json::Value;
use std::net::SocketAddr;
use std::time::Duration;

fn h3get(port: u16, requests: &[&str]) -> Vec<Value> {
    common::h3get(port, &[], requests)
}

#[test]
fn aioquic_client_sees_the_vocabulary() {
    if !have_aioquic() {
        return;
    }
    let s = Server::start(&["-t", "1"]);
    let r = h3get(
        s.tls_port,
        &[
            r#"{"path": "/?s=100&r=404"}"#,
            r#"{"path": "/?s=70000&c=0"}"#,
            r#"{"path": "/?s=5&k=1"}"#,
            r#"{"path": "/?s=5&C=1"}"#,
            r#"{"path": "/?t=300"}"#,
            r#"{"path": "/?s=5", "data": 100000}"#,
            r#"{"path": "/?s=6", "data": 5000, "no_length": true}"#,
            r#"{"path": "/?s=7&A=1", "data": 3000}"#,
            r#"{"path": "/?s=8", "grease": true}"#,
            r#"{"path": "/?s=9", "data": 10, "grease": true}"#,
            r#"{"path": "/x", "headers": [["x-loadterm", "r=503&s=4"]]}"#,
            r#"{"path": "/?r=1000"}"#,
            r#"{"path": "/?"}"#,
            r#"{"path": "/?s=3", "data": 10, "headers": [["expect", "100-continue"]]}"#,
            r#"{"path": "/?s=1000", "method": "HEAD"}"#,
        ],
    );
    let status = |i: usize| r[i]["status"].as_u64().unwrap();
    let len = |i: usize| r[i]["body_len"].as_u64().unwrap();
    let header = |i: usize, h: &str| r[i]["headers"][h].as_str().map(str::to_owned);
    assert_eq!((status(0), len(0)), (404, 100));
    assert_eq!(
        r[0]["body_head"].as_str().unwrap(),
        ".123456789.123456789.123456789.123456789.12345678\n.123456789"
    );
    assert_eq!(
        header(0, "x-rsp").unwrap(),
        "id=dummy, code=404, cache=1, size=100, time=0 ms (0 real)"
    );
    assert_eq!(
        (len(1), header(1, "cache-control").as_deref()),
        (70000, Some("no-cache"))
    );
    assert_eq!((len(2), header(2, "content-length")), (5, None));
    assert_eq!(r[2]["body_head"].as_str().unwrap(), "11111");
    assert_eq!((len(3), header(3, "content-length")), (5, None));
    assert!(r[4]["elapsed"].as_f64().unwrap() >= 0.3);
    assert!(header(4, "x-rsp").unwrap().contains("time=300 ms"));
    for i in 5..8 {
        assert_eq!(status(i), 200, "upload {i}");
    }
    let req_size: u64 = header(5, "x-req")
        .unwrap()
        .trim_start_matches("size=")
        .split(',')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(req_size >= 100_000, "the upload was drained and counted");
    // Requests ending in a grease frame complete at once (haterm 3.5-dev5 stalls 25 s here;
    // the bound leaves a busy machine time).
    for i in [8, 9] {
        assert_eq!(status(i), 200);
        assert!(
            r[i]["elapsed"].as_f64().unwrap() < 10.0,
            "grease request {i} stalled"
        );
    }
    assert_eq!((status(10), len(10)), (503, 4));
    assert_eq!(status(11), 400);
    assert_eq!(status(12), 200);
    assert!(r[12]["body_head"]
        .as_str()
        .unwrap()
        .starts_with("loadterm "));
    assert_eq!(r[13]["informational"], serde_json::json!([100]));
    assert_eq!((status(13), len(13)), (200, 3));
    assert_eq!((status(14), len(14)), (200, 0));
    // HEAD: as on HTTP/1.1 and HTTP/2, the GET's length (RFC 9110 §9.3.2) and no body.
    assert_eq!(header(14, "content-length").as_deref(), Some("1000"));
}

/// QPACK field sections above `--h3-max-header-list` get 431; the connection goes on serving.
#[test]
fn oversized_field_section_gets_431() {
    if !have_aioquic() {
        return;
    }
    let s = Server::start(&["-t", "1", "--h3-max-header-list", "16384"]);
    let headers = |n: usize| {
        let h: Vec<String> = (0..10)
            .map(|i| format!(r#"["x-h{i}", "{}"]"#, "a".repeat(n)))
            .collect();
        format!(r#"{{"path": "/?s=1", "headers": [{}]}}"#, h.join(", "))
    };
    let (big, small) = (headers(3000), headers(1000));
    let r = h3get(s.tls_port, &[&big, &small, r#"{"path": "/?s=2"}"#]);
    let status: Vec<u64> = r.iter().map(|v| v["status"].as_u64().unwrap()).collect();
    assert_eq!(status, [431, 200, 200]);
}

/// Protocol violations on a request stream: each closes its connection with the RFC's code, and
/// the server goes on serving new connections.
#[test]
fn protocol_violations_close_the_connection() {
    if !have_aioquic() {
        return;
    }
    let s = Server::start(&["-t", "1"]);
    for (raw, code, what) in [
        // HEADERS whose QPACK section needs a dynamic table (Required Insert Count 1).
        ("0103010000", 0x200, "QPACK_DECOMPRESSION_FAILED"),
        // DATA before HEADERS.
        ("000161", 0x105, "H3_FRAME_UNEXPECTED"),
        // SETTINGS on a request stream.
        ("0400", 0x105, "H3_FRAME_UNEXPECTED"),
    ] {
        let r = h3get(
            s.tls_port,
            &[&format!(r#"{{"raw": "{raw}", "timeout": 5}}"#)],
        );
        assert_eq!(r[0]["closed"].as_u64(), Some(code), "{what}: {}", r[0]);
    }
    // A HEADERS frame cut short by FIN: only that stream is reset (H3_REQUEST_INCOMPLETE).
    let r = h3get(
        s.tls_port,
        &[
            r#"{"raw": "0110c0d1", "timeout": 5}"#,
            r#"{"path": "/?s=3"}"#,
        ],
    );
    assert_eq!(r[0]["reset"].as_u64(), Some(0x10d), "{}", r[0]);
    assert_eq!(r[1]["status"].as_u64(), Some(200));
}

/// The client's QPACK instruction streams, with no dynamic table either way (RFC 9204): a zero
/// capacity and Stream Cancellations pass; any other instruction, or closing the stream, closes
/// the connection with the RFC's code.
#[test]
fn qpack_instruction_streams_allow_no_dynamic_table() {
    if !have_aioquic() {
        return;
    }
    let s = Server::start(&["-t", "1"]);
    // Capacity 0; Stream Cancellation of streams 4 and 1 000 000 (a multi-byte stream ID).
    let r = h3get(
        s.tls_port,
        &[
            r#"{"encoder": "2020", "decoder": "447f81843d", "wait_close": 1}"#,
            r#"{"path": "/?s=1"}"#,
        ],
    );
    assert_eq!(r[0]["closed"], Value::Null, "{}", r[0]);
    assert_eq!(r[1]["status"].as_u64(), Some(200), "{}", r[1]);
    for (spec, code, what) in [
        (r#""encoder": "3fe11f""#, 0x201, "capacity 4096"),
        (
            r#""encoder": "20c0""#,
            0x201,
            "Insert with a static name reference",
        ),
        (r#""decoder": "84""#, 0x202, "Section Acknowledgment"),
        (r#""decoder": "01""#, 0x202, "Insert Count Increment"),
        (
            r#""encoder": "20", "fin": true"#,
            0x104,
            "encoder stream closed",
        ),
        (
            r#""decoder": "", "fin": true"#,
            0x104,
            "decoder stream closed",
        ),
    ] {
        let r = h3get(s.tls_port, &[&format!(r#"{{{spec}, "wait_close": 5}}"#)]);
        assert_eq!(r[0]["closed"].as_u64(), Some(code), "{what}: {}", r[0]);
    }
}

/// A request stream whose HEADERS never completes (no FIN either) gets 408 after the client
/// timeout instead of holding its stream forever: not before the 1 s timeout, and long before
/// the client gives up (30 s).
#[test]
fn incomplete_head_times_out_with_408() {
    if !have_aioquic() {
        return;
    }
    let s = Server::start(&["-t", "1", "--timeout", "1s"]);
    let r = h3get(
        s.tls_port,
        &[r#"{"raw": "0110c0d1", "no_fin": true, "timeout": 30}"#],
    );
    assert_eq!(r[0]["status"].as_u64(), Some(408), "{}", r[0]);
    let elapsed = r[0]["elapsed"].as_f64().unwrap();
    assert!((0.9..20.0).contains(&elapsed), "answered after {elapsed} s");
}

/// SIGTERM with HTTP/3 requests in flight: they are answered in full (closing the connection
/// right after the last answer used to drop its unacknowledged data), then the server exits.
/// The signal goes once the server has read all 10 request heads (each asks `expect:
/// 100-continue`: its interim count tells), while their 2 s delay runs.
#[test]
fn sigterm_lets_requests_in_flight_finish() {
    let metrics = SocketAddr::from(([127, 0, 0, 1], common::free_port()));
    let metrics_arg = metrics.to_string();
    // A grace far above the exit deadline below: the exit comes from the drained connections.
    let mut s = Server::start(&["-t", "1", "--grace", "60s", "--metrics", &metrics_arg]);
    let url = format!("https://127.0.0.1:{}/?t=2000&s=20000", s.tls_port);
    let client = std::process::Command::new(common::bin())
        .args(["load", "--h3", "-k", "-n", "10", "-c", "2", "-m", "5"])
        .args(["-H", "expect: 100-continue", "--data-size", "1"])
        .args(["--json", "-", "-q", &url])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_until(
        "the server reads the 10 requests",
        Duration::from_secs(30),
        || scrape(metrics).sum("loadterm_interim_responses_total", &[("proto", "h3")]) == 10,
    );
    s.sigterm();
    let out = client.wait_with_output().unwrap();
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        r["requests"]["succeeded"].as_u64(),
        Some(10),
        "{}",
        r["errors"]
    );
    assert_eq!(r["bytes"]["body"].as_u64(), Some(10 * 20000));
    wait_until("the server exits", Duration::from_secs(30), || {
        s.child.try_wait().unwrap().is_some()
    });
}

/// SIGTERM with no HTTP/3 request in progress: the GOAWAY reaches the client before the close
/// (it was written, then dropped unsent by the close that followed at once).
#[test]
fn sigterm_with_no_request_in_progress_still_sends_goaway() {
    use std::io::BufRead;
    if !have_aioquic() {
        return;
    }
    let mut s = Server::start(&["-t", "1"]);
    let requests = [r#"{"path": "/?s=10"}"#, r#"{"wait_close": 20}"#];
    let mut client = common::h3get_cmd(s.tls_port, &requests)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let mut lines = std::io::BufReader::new(client.stdout.take().unwrap()).lines();
    let mut next = || -> Value { serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap() };
    // The answer came: the connection is idle when the signal arrives.
    assert_eq!(next()["status"].as_u64(), Some(200));
    s.sigterm();
    let closed = next();
    assert_eq!(closed["closed"].as_u64(), Some(0x100), "{closed}");
    // Its one request was on stream 0: none from stream 4 on was processed.
    assert_eq!(closed["goaway"].as_u64(), Some(4), "{closed}");
    assert!(client.wait().unwrap().success());
    assert!(s.child.wait().unwrap().success());
}

/// Send one request whose field section is exactly `fields` (`{authority}` replaced) and
/// `data` body bytes, then a well-formed one on the same connection; the first's result is
/// returned, the second must get its 200 (a malformed request resets only its stream).
fn exact_request(fields: &str, data: Option<u64>) -> Value {
    if !have_aioquic() {
        return Value::Null;
    }
    let s = Server::start(&["-t", "1"]);
    let data = data.map_or(String::new(), |n| format!(r#", "data": {n}"#));
    let bad = format!(r#"{{"exact_headers": {fields}{data}, "timeout": 5}}"#);
    let r = h3get(s.tls_port, &[&bad, r#"{"path": "/?s=3"}"#]);
    assert_eq!(r[1]["status"].as_u64(), Some(200), "{}", r[1]);
    r[0].clone()
}

/// The pseudo-headers of a well-formed request after its `:method`.
const REST: &str = r#"[":scheme", "https"], [":authority", "{authority}"], [":path", "/?s=1"]"#;

fn assert_message_error(r: Value) {
    if r.is_null() {
        return;
    }
    assert_eq!(r["reset"].as_u64(), Some(0x10e), "{r}");
    assert_eq!(r["status"], Value::Null, "{r}");
}

#[test]
fn h3_upper_case_field_name_is_malformed() {
    assert_message_error(exact_request(
        &format!(r#"[[":method", "GET"], {REST}, ["Accept", "*/*"]]"#),
        None,
    ));
}

#[test]
fn h3_connection_specific_field_is_malformed() {
    assert_message_error(exact_request(
        &format!(r#"[[":method", "GET"], {REST}, ["connection", "keep-alive"]]"#),
        None,
    ));
}

#[test]
fn h3_te_other_than_trailers_is_malformed() {
    assert_message_error(exact_request(
        &format!(r#"[[":method", "GET"], {REST}, ["te", "gzip"]]"#),
        None,
    ));
}

#[test]
fn h3_pseudo_header_after_regular_field_is_malformed() {
    assert_message_error(exact_request(
        r#"[[":method", "GET"], [":scheme", "https"], ["accept", "*/*"], [":authority", "{authority}"], [":path", "/"]]"#,
        None,
    ));
}

#[test]
fn h3_missing_scheme_is_malformed() {
    assert_message_error(exact_request(
        r#"[[":method", "GET"], [":authority", "{authority}"], [":path", "/"]]"#,
        None,
    ));
}

#[test]
fn h3_authority_and_host_disagreeing_is_malformed() {
    assert_message_error(exact_request(
        &format!(r#"[[":method", "GET"], {REST}, ["host", "other.example"]]"#),
        None,
    ));
}

#[test]
fn h3_connect_with_path_is_malformed() {
    assert_message_error(exact_request(
        r#"[[":method", "CONNECT"], [":authority", "{authority}"], [":path", "/"]]"#,
        None,
    ));
}

/// A well-formed CONNECT is refused unprocessed: no tunnels here.
#[test]
fn h3_connect_is_rejected() {
    let r = exact_request(
        r#"[[":method", "CONNECT"], [":authority", "{authority}"]]"#,
        None,
    );
    if !r.is_null() {
        assert_eq!(r["reset"].as_u64(), Some(0x10b), "{r}");
    }
}

#[test]
fn h3_field_value_with_trailing_space_is_malformed() {
    assert_message_error(exact_request(
        &format!(r#"[[":method", "GET"], {REST}, ["accept", "*/* "]]"#),
        None,
    ));
}

#[test]
fn h3_content_length_above_data_is_malformed() {
    let fields = format!(r#"[[":method", "POST"], {REST}, ["content-length", "10"]]"#);
    assert_message_error(exact_request(&fields, Some(5)));
}

#[test]
fn h3_content_length_below_data_is_malformed() {
    let fields = format!(r#"[[":method", "POST"], {REST}, ["content-length", "3"]]"#);
    assert_message_error(exact_request(&fields, Some(5)));
}

#[test]
fn h3_pseudo_header_in_trailers_is_malformed() {
    let fields = format!(r#"[[":method", "POST"], {REST}], "trailers": [[":path", "/"]]"#);
    assert_message_error(exact_request(&fields, Some(5)));
}

/// The control for the test above: valid trailers are read and the request answered.
#[test]
fn h3_valid_trailers_are_accepted() {
    let fields = format!(r#"[[":method", "POST"], {REST}], "trailers": [["x-sum", "1"]]"#);
    let r = exact_request(&fields, Some(5));
    if !r.is_null() {
        assert_eq!(r["status"].as_u64(), Some(200), "{r}");
    }
}

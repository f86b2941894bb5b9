//! `loadterm load --tls-resume`, `--requests-per-conn` and `--0rtt` against the real `loadterm
//! serve`: the client's count of full, resumed and 0-RTT handshakes is the server's (its
//! `--metrics`), on HTTP/1.1 over TLS, HTTP/2 and HTTP/3.

use crate::common;

use common::Server;
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

fn load(args: &[&str]) -> Value {
    let out = Command::new(common::bin())
        .arg("load")
        .args(args)
        .args(["--json", "-", "-q"])
        .output()
        .expect("run loadterm load");
    assert!(
        out.status.success(),
        "load failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON report")
}

/// The server's handshake counters for `transport`: (ok, resumed, 0-RTT).
fn server_counts(metrics: u16, transport: &str) -> (u64, u64, u64) {
    let m = common::metrics::scrape(([127, 0, 0, 1], metrics).into());
    let t = ("transport", transport);
    (
        m.sum("loadterm_tls_handshakes_total", &[t, ("result", "ok")]),
        m.sum(
            "loadterm_tls_handshakes_resumed_total",
            &[t, ("kind", "resumed")],
        ),
        m.sum(
            "loadterm_tls_handshakes_resumed_total",
            &[t, ("kind", "0rtt")],
        ),
    )
}

/// 200 requests, a new connection every 10: 20 handshakes or a few more, nearly all resumed
/// (each of the 2 connection slots makes its first one in full), then with `never` all in
/// full; the server counts exactly what the client does.
#[test]
fn both_sides_count_the_same_handshakes() {
    let metrics = common::free_port();
    let addr = format!("127.0.0.1:{metrics}");
    let s = Server::start(&["-t", "1", "--0rtt", "--metrics", &addr]);
    assert!(common::wait_tcp(metrics, Duration::from_secs(10)));
    let url = format!("https://127.0.0.1:{}/?s=100", s.tls_port);
    let mut before = std::collections::HashMap::new();
    for (proto, transport, resume, zero_rtt) in [
        ("--h1", "tls", "always", false),
        ("--h2", "tls", "always", false),
        ("--h2", "tls", "never", false),
        ("--h3", "quic", "always", false),
        ("--h3", "quic", "always", true),
        ("--h3", "quic", "never", false),
    ] {
        let mut args = vec![proto, "-k", "-n", "200", "-c", "2", "-t", "1"];
        args.extend(["--requests-per-conn", "10", "--tls-resume", resume, &url]);
        if zero_rtt {
            args.push("--0rtt");
        }
        let r = load(&args);
        let what = format!("{proto} --tls-resume {resume} 0rtt {zero_rtt}");
        assert_eq!(r["requests"]["succeeded"], 200, "{what}: {r}");
        let h = &r["handshakes"];
        let n = |k: &str| h[k].as_u64().unwrap();
        let (full, resumed, early) = (n("full"), n("resumed"), n("0rtt"));
        assert!((20..=24).contains(&(full + resumed)), "{what}: {h}");
        match resume {
            "always" => assert!(full <= 2 && resumed >= 18, "{what}: {h}"),
            _ => assert_eq!(resumed, 0, "{what}: {h}"),
        }
        if zero_rtt {
            assert_eq!(early, resumed, "{what}: every resumed one took 0-RTT: {h}");
        } else {
            assert_eq!(early, 0, "{what}: {h}");
        }
        let now = server_counts(metrics, transport);
        let was = before.insert(transport, now).unwrap_or((0, 0, 0));
        let seen = (now.0 - was.0, now.1 - was.1, now.2 - was.2);
        assert_eq!(
            seen,
            (full + resumed, resumed, early),
            "{what}: server (ok, resumed, 0-RTT) against the client's {h}"
        );
    }
}

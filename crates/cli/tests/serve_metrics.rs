//! Server statistics seen from outside (`--metrics`, SIGUSR1): what clients did equals what the
//! server counted (our load generator on each protocol, curl, h2load), failures and
//! protections show under their labels, and the exposition passes promtool and a real
//! Prometheus scrape.

use crate::common;

use common::h2raw::*;
use common::{bin, free_port, have_tool, Server};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Generous: the machine may be loaded.
const PATIENCE: Duration = Duration::from_secs(30);

/// A server with `--metrics` on a port of its own.
struct Metered {
    server: Server,
    metrics: u16,
}

impl Metered {
    fn start(extra: &[&str]) -> Metered {
        let metrics = free_port();
        let addr = format!("127.0.0.1:{metrics}");
        let mut args = vec!["-t", "1", "--metrics", &addr];
        args.extend_from_slice(extra);
        let server = Server::start(&args);
        assert!(common::wait_tcp(metrics, Duration::from_secs(10)));
        Metered { server, metrics }
    }

    fn scrape(&self) -> String {
        common::metrics::scrape(([127, 0, 0, 1], self.metrics).into()).0
    }

    /// Every sample, by `name{labels}` as exposed.
    fn samples(&self) -> HashMap<String, f64> {
        common::metrics::Metrics(self.scrape()).samples()
    }

    fn value(&self, key: &str) -> f64 {
        self.samples().get(key).copied().unwrap_or_else(|| {
            panic!("{key} is not exposed:\n{}", self.scrape());
        })
    }

    /// Poll until `key` equals `want` (or the patience runs out); its last value.
    fn settles_at(&self, key: &str, want: f64) -> f64 {
        let t0 = Instant::now();
        loop {
            let v = self.value(key);
            if v == want || t0.elapsed() > PATIENCE {
                return v;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Poll until `key` is at least `min`; its last value.
    fn reaches(&self, key: &str, min: f64) -> f64 {
        let t0 = Instant::now();
        loop {
            let v = self.samples().get(key).copied().unwrap_or(0.0);
            if v >= min || t0.elapsed() > PATIENCE {
                return v;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// One HTTP/1.1 GET on a fresh connection (the admin listener closes after each answer): the
/// status and the body.
fn get(port: u16, path: &str) -> (u16, String) {
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(c, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").expect("a response head");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, body.to_string())
}

fn requests(proto: &str, class: &str) -> String {
    format!("loadterm_requests_total{{proto=\"{proto}\",class=\"{class}\"}}")
}

fn open_conns(transport: &str) -> String {
    format!("loadterm_connections_open{{transport=\"{transport}\"}}")
}

/// `loadterm load ... --json -`: the report.
fn load(args: &[&str]) -> serde_json::Value {
    common::report(common::load_cmd(args).output().expect("run loadterm load"))
}

/// Our load generator sends `n` requests with `args`; the server's served count for `proto`
/// equals `n` and the client's completed count, the connections of `transport` close, and the
/// server counted no error of any kind.
fn load_agrees(proto: &str, transport: &str, args: &[&str], url: impl Fn(&Server) -> String) {
    let m = Metered::start(&[]);
    let n = 400;
    let mut all: Vec<String> = ["-n", &n.to_string(), "-c", "4"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    all.extend(args.iter().map(|s| s.to_string()));
    all.push(url(&m.server));
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    let report = load(&all);
    let completed = report["requests"]["completed"].as_u64().unwrap();
    assert_eq!(completed, n, "the client completed {completed} of {n}");
    assert_eq!(m.settles_at(&requests(proto, "2xx"), n as f64), n as f64);
    let samples = m.samples();
    let served: f64 = ["1xx", "2xx", "3xx", "4xx", "5xx"]
        .iter()
        .map(|c| samples[&requests(proto, c)])
        .sum();
    assert_eq!(served, completed as f64);
    assert_eq!(
        m.settles_at(&open_conns(transport), 0.0),
        0.0,
        "connections left open"
    );
    let errors: Vec<_> = m
        .samples()
        .into_iter()
        .filter(|(k, v)| k.starts_with("loadterm_errors_total") && *v != 0.0)
        .collect();
    assert!(errors.is_empty(), "the server counted errors: {errors:?}");
    assert!(
        m.value(&format!(
            "loadterm_connections_accepted_total{{transport=\"{transport}\"}}"
        )) >= 4.0
    );
}

#[test]
fn h1_served_equals_the_load_clients_completed() {
    load_agrees("h1", "tcp", &["--h1"], |s| {
        format!("http://127.0.0.1:{}/?s=1k", s.clear_port)
    });
}

#[test]
fn h2_over_tls_served_equals_the_load_clients_completed() {
    load_agrees("h2", "tls", &["--h2", "-k"], |s| {
        format!("https://127.0.0.1:{}/?s=1k", s.tls_port)
    });
}

#[test]
fn h2c_served_equals_the_load_clients_completed() {
    load_agrees("h2", "tcp", &["--h2c"], |s| {
        format!("http://127.0.0.1:{}/?s=1k", s.clear_port)
    });
}

#[test]
fn h3_served_equals_the_load_clients_completed() {
    load_agrees("h3", "quic", &["--h3", "-k"], |s| {
        format!("https://127.0.0.1:{}/?s=1k", s.tls_port)
    });
}

#[test]
fn curl_h1_requests_are_counted() {
    if !have_tool("curl") {
        return;
    }
    let m = Metered::start(&["--no-quic"]);
    let url = format!("http://127.0.0.1:{}/?s=10", m.server.clear_port);
    let out = Command::new("curl")
        .args(["-s", "-w", "%{http_code}\\n"])
        .args((0..25).flat_map(|_| ["-o", "/dev/null", &url]))
        .output()
        .unwrap();
    let codes = String::from_utf8_lossy(&out.stdout);
    let ok = codes.lines().filter(|c| *c == "200").count();
    assert_eq!(ok, 25, "curl saw {codes}");
    assert_eq!(m.settles_at(&requests("h1", "2xx"), 25.0), 25.0);
    assert_eq!(m.settles_at(&open_conns("tcp"), 0.0), 0.0);
}

#[test]
fn h2load_h2c_requests_are_counted() {
    if !have_tool("h2load") {
        return;
    }
    let m = Metered::start(&["--no-quic"]);
    let out = Command::new("h2load")
        .args(["-n", "300", "-c", "3", "-m", "10"])
        .arg(format!("http://127.0.0.1:{}/?s=1k", m.server.clear_port))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // "requests: 300 total, 300 started, 300 done, 300 succeeded, 0 failed, ..."
    let line = text
        .lines()
        .find(|l| l.starts_with("requests:"))
        .unwrap_or_else(|| panic!("no requests line from h2load:\n{text}"));
    let succeeded: f64 = line
        .split(", ")
        .find_map(|part| part.strip_suffix(" succeeded"))
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(succeeded, 300.0, "{line}");
    assert_eq!(m.settles_at(&requests("h2", "2xx"), 300.0), 300.0);
    assert_eq!(m.settles_at(&open_conns("tcp"), 0.0), 0.0);
}

#[test]
fn a_failed_alpn_negotiation_is_counted_by_its_alert() {
    if !have_tool("openssl") {
        return;
    }
    let m = Metered::start(&["--no-quic"]);
    let out = Command::new("openssl")
        .args(["s_client", "-alpn", "bogus", "-connect"])
        .arg(format!("127.0.0.1:{}", m.server.tls_port))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success(), "the handshake should fail");
    let key = "loadterm_tls_handshake_failures_total{reason=\"no_application_protocol\"}";
    assert_eq!(m.reaches(key, 1.0), 1.0, "{}", m.scrape());
    // The server's readiness probe (a bare TCP connect) is a failure too: "eof".
    let samples = m.samples();
    let by_reason: f64 = samples
        .iter()
        .filter(|(k, _)| k.starts_with("loadterm_tls_handshake_failures_total{"))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(
        samples["loadterm_tls_handshakes_total{transport=\"tls\",result=\"failed\"}"],
        by_reason
    );
    assert_eq!(
        m.value("loadterm_tls_handshakes_total{transport=\"tls\",result=\"ok\"}"),
        0.0
    );
}

#[test]
fn a_continuation_flood_is_counted_as_a_protection() {
    let m = Metered::start(&["--no-quic"]);
    let mut c = open(m.server.clear_port);
    // HEADERS without END_HEADERS, then empty CONTINUATION frames until the server objects.
    c.write_all(&frame(HEADERS, END_STREAM, 1, &request_block("/", &[])))
        .unwrap();
    let burst: Vec<u8> = frame(CONTINUATION, 0, 1, &[]).repeat(1000);
    for _ in 0..1000 {
        if c.write_all(&burst).is_err() {
            break;
        }
    }
    // The codec cuts a header block in too many frames off with GOAWAY ENHANCE_YOUR_CALM.
    let key = "loadterm_protections_total{kind=\"enhance_your_calm\"}";
    assert_eq!(m.reaches(key, 1.0), 1.0, "{}", m.scrape());
    assert_eq!(m.value("loadterm_errors_total{kind=\"limit\"}"), 1.0);
}

#[test]
fn a_slow_head_gets_408_and_is_counted() {
    let m = Metered::start(&["--no-quic", "--timeout", "1s"]);
    let mut c = common::http1::connect(m.server.clear_port);
    c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
    let r = common::http1::read_response(&mut c, &mut Vec::new(), false);
    assert_eq!(r.status, 408);
    assert_eq!(
        m.reaches("loadterm_protections_total{kind=\"slow_head\"}", 1.0),
        1.0
    );
    assert_eq!(m.value("loadterm_errors_total{kind=\"timeout\"}"), 1.0);
    // The 408 is a final response served.
    assert_eq!(m.settles_at(&requests("h1", "4xx"), 1.0), 1.0);
}

#[test]
fn other_paths_get_404() {
    let m = Metered::start(&["--no-quic"]);
    assert_eq!(get(m.metrics, "/").0, 404);
    assert_eq!(get(m.metrics, "/metricsx").0, 404);
}

#[test]
fn every_label_of_requests_and_connections_is_there_from_the_start() {
    let m = Metered::start(&[]);
    let s = m.samples();
    for proto in ["h1", "h2", "h3"] {
        for class in ["1xx", "2xx", "3xx", "4xx", "5xx"] {
            assert_eq!(s.get(&requests(proto, class)), Some(&0.0));
        }
    }
    // Present (the readiness probe's connections may still be counted as open).
    for t in ["tcp", "tls", "quic"] {
        assert!(s.contains_key(&open_conns(t)), "{}", m.scrape());
    }
}

#[test]
fn sigusr1_prints_the_summary_and_the_server_keeps_serving() {
    let port = free_port();
    let mut child = Command::new(bin())
        .args(["serve", "-t", "1", "--no-quic", "-L"])
        .arg(format!("127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let guard = Kill(&mut child);
    assert!(common::wait_tcp(port, PATIENCE));
    let get1 = "GET /?s=1 HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_eq!(common::http1::get(port, get1).status, 200);
    let stderr = guard.0.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    // A response is counted just after its last byte is written, so a summary taken as the client
    // reads it may not count it yet: ask again until one does.
    let t0 = Instant::now();
    let mut seen = Vec::new();
    let mut asked = None::<Instant>;
    while !seen
        .iter()
        .any(|l: &String| l.contains("h1 requests") && l.ends_with("2xx 1"))
    {
        assert!(t0.elapsed() < PATIENCE, "no summary; stderr: {seen:?}");
        if asked.is_none_or(|at| at.elapsed() > Duration::from_secs(1)) {
            signal(guard.0.id(), "-USR1");
            asked = Some(Instant::now());
        }
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
            seen.push(line);
        }
    }
    assert!(seen.iter().any(|l| l == "loadterm statistics:"), "{seen:?}");
    // Still serving, and still running.
    assert_eq!(common::http1::get(port, get1).status, 200);
    assert!(guard.0.try_wait().unwrap().is_none());
}

struct Kill<'a>(&'a mut Child);

impl Drop for Kill<'_> {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill").args([sig, &pid.to_string()]).status();
    assert!(ok.is_ok_and(|s| s.success()), "kill {sig} {pid}");
}

#[test]
fn promtool_accepts_the_exposition() {
    if !have_tool("promtool") {
        return;
    }
    let m = Metered::start(&[]);
    load(&[
        "-n",
        "50",
        "-c",
        "2",
        &format!("http://127.0.0.1:{}/?s=1", m.server.clear_port),
    ]);
    // promtool parses the Prometheus text format (what clients get unless they ask for
    // OpenMetrics, as Prometheus itself does: see the next test).
    let text = m.scrape();
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = check.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(&format!("{} 50\n", requests("h1", "2xx"))),
        "{text}"
    );
}

#[test]
fn prometheus_scrapes_the_server() {
    if !have_tool("prometheus") || !have_tool("curl") {
        return;
    }
    let m = Metered::start(&["--no-quic"]);
    load(&[
        "-n",
        "20",
        "-c",
        "1",
        &format!("http://127.0.0.1:{}/?s=1", m.server.clear_port),
    ]);
    let dir = std::env::temp_dir().join(format!(
        "loadterm-prometheus-{}-{}",
        std::process::id(),
        m.metrics
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: loadterm\n    static_configs:\n      - targets: ['127.0.0.1:{}']\n",
            m.metrics
        ),
    )
    .unwrap();
    let web = free_port();
    let mut prometheus = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{web}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let guard = Kill(&mut prometheus);
    let query = format!(
        "http://127.0.0.1:{web}/api/v1/query?query=loadterm_requests_total%7Bproto%3D%22h1%22%2Cclass%3D%222xx%22%7D"
    );
    let t0 = Instant::now();
    let value = loop {
        let out = Command::new("curl").args(["-s", &query]).output().unwrap();
        let v: Option<f64> = serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .ok()
            .and_then(|j| {
                j["data"]["result"][0]["value"][1]
                    .as_str()
                    .and_then(|s| s.parse().ok())
            });
        if let Some(v) = v {
            break v;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "Prometheus returned no sample: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(value, 20.0);
    drop(guard);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_metrics_address_in_use_is_a_clear_error_at_startup() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = Command::new(bin())
        .args(["serve", "--no-quic", "-L"])
        .arg(format!("127.0.0.1:{}", free_port()))
        .args(["--metrics", &addr])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(&format!("--metrics: cannot listen on {addr}")),
        "{stderr}"
    );
}

//! `loadterm agent` and `loadterm ab --server-host`: the variants run on the agent's host,
//! the load where ab runs. The agent runs nothing for a request without valid credentials, a
//! replayed or a truncated one; refuses to listen off loopback without credentials; and
//! leaves no process and no cgroup once ab is gone. Across two network namespaces (root),
//! `bench/ab-two-hosts.sh` runs a whole comparison.

use crate::common::{self, cgroups_of, json_file as json, root, Dir, AB_SHORT as SHORT};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

/// A running agent, stopped (SIGTERM) when dropped.
struct Agent {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Agent {
    fn start(dir: &Dir, extra: &[&str]) -> Agent {
        let port = common::free_port();
        let log = dir.file("agent.log");
        let child = Command::new(common::bin())
            .arg("agent")
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .args(extra)
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        common::wait_until("the agent listens", Duration::from_secs(20), || {
            std::fs::read_to_string(&log).is_ok_and(|l| l.contains("listening on"))
        });
        Agent { child, port, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Wait for `text` in the log: the agent may reply before it writes why, and its unbuffered
    /// stderr writes a line in pieces.
    fn logged(&self, text: &str) {
        let limit = Duration::from_secs(20);
        let t0 = std::time::Instant::now();
        while !self.log().contains(text) {
            assert!(
                t0.elapsed() < limit,
                "{text:?} not in the agent's log within {limit:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Processes the agent started and still has (its children).
    fn children(&self) -> usize {
        let me = self.child.id().to_string();
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
            .filter(|s| {
                s.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1).map(|p| p == me))
                    .unwrap_or(false)
            })
            .count()
    }
}

impl Drop for Agent {
    #[allow(unsafe_code)] // kill
    fn drop(&mut self) {
        // SAFETY: plain kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// Credentials made by `loadterm agent --init`.
fn init(dir: &Dir, name: &str) -> PathBuf {
    let path = dir.file(name);
    let out = Command::new(common::bin())
        .args(["agent", "--init"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    path
}

fn token(auth: &Path) -> String {
    std::fs::read_to_string(auth.join("token"))
        .unwrap()
        .trim()
        .to_owned()
}

/// A TLS connection to the agent trusting `ca`'s CA, presenting `client`'s certificate (ab's)
/// if given.
fn connect(port: u16, ca: &Path, client: Option<&Path>) -> Box<dyn ReadWrite> {
    let pem = std::fs::read(ca.join("ca.pem")).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pemfile::certs(&mut pem.as_slice()) {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let cfg = match client {
        Some(dir) => {
            let pem = std::fs::read(dir.join("ab.pem")).unwrap();
            let certs: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut pem.as_slice())
                .map(Result::unwrap)
                .collect();
            let key = std::fs::read(dir.join("ab.key")).unwrap();
            let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut key.as_slice())
                .unwrap()
                .unwrap();
            builder.with_client_auth_cert(certs, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    let conn =
        rustls::ClientConnection::new(Arc::new(cfg), ServerName::try_from("127.0.0.1").unwrap())
            .unwrap();
    let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    Box::new(rustls::StreamOwned::new(conn, tcp))
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// A request of the agent's protocol, as bytes on the wire.
fn request(name: &str, seq: u64, token: Option<&str>, body: &str) -> Vec<u8> {
    let auth = token.map_or(String::new(), |t| format!("authorization: Bearer {t}\r\n"));
    format!(
        "POST /v1/{name} HTTP/1.1\r\ncontent-length: {}\r\nx-loadterm-seq: {seq}\r\n{auth}\r\n{body}",
        body.len()
    )
    .into_bytes()
}

const HELLO: &str = r#"{"op":"hello","version":1}"#;

/// A launch of `loadterm serve` that first appends a line to `starts`: the file counts the
/// commands the agent ran.
fn launch_body(starts: &Path) -> String {
    let command = format!(
        "echo started >> {}; exec {} serve --listen {{host}}:{{clear_port}}",
        starts.display(),
        common::bin()
    );
    serde_json::json!({
        "op": "launch",
        "role": "variant",
        "tag": "probe",
        "command": command,
        "config": null,
        "vars": [],
        "host": "127.0.0.1",
        "ports": {"first": 20000, "last": 31999},
        "cpus": [],
        "accounting": null,
        "ready_on_tls": false
    })
    .to_string()
}

/// Send `bytes` and read the reply's status code; `None` when the connection fails or ends
/// without one.
fn exchange(s: &mut dyn ReadWrite, bytes: &[u8]) -> Option<u16> {
    s.write_all(bytes).ok()?;
    s.flush().ok()?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
    }
    let text = String::from_utf8_lossy(&head);
    let len: usize = text
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    s.read_exact(&mut body).ok()?;
    text.split_whitespace().nth(1)?.parse().ok()
}

/// A connection with the lab's credentials that said hello: a comparison begun.
fn greeted(port: u16, auth: &Path, token: &str) -> Box<dyn ReadWrite> {
    let mut s = connect(port, auth, Some(auth));
    assert_eq!(
        exchange(&mut *s, &request("hello", 1, Some(token), HELLO)),
        Some(200)
    );
    s
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

#[test]
fn an_agent_off_loopback_without_credentials_refuses_to_start() {
    let out = Command::new(common::bin())
        .args(["agent", "--listen", "0.0.0.0:0"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("refusing to listen on 0.0.0.0:0 without authentication"),
        "{stderr}"
    );
}

#[test]
fn no_certificate_or_another_labs_certificate_runs_nothing() {
    let dir = Dir::new("agent-tls");
    let auth = init(&dir, "auth");
    let other = init(&dir, "other");
    let agent = Agent::start(&dir, &["--auth", auth.to_str().unwrap()]);
    let starts = dir.file("starts");
    let t = token(&auth);
    for client in [None, Some(other.as_path())] {
        let mut s = connect(agent.port, &auth, client);
        let mut bytes = request("hello", 1, Some(&t), HELLO);
        bytes.extend(request("launch", 2, Some(&t), &launch_body(&starts)));
        assert_eq!(exchange(&mut *s, &bytes), None, "{client:?} got a reply");
    }
    assert_eq!(lines(&starts), 0, "a command ran");
    agent.logged("refused: TLS handshake");
    // The same requests with the lab's certificate do run: the refusals were the credentials'.
    let mut s = greeted(agent.port, &auth, &t);
    assert_eq!(
        exchange(
            &mut *s,
            &request("launch", 2, Some(&t), &launch_body(&starts))
        ),
        Some(200)
    );
    assert_eq!(lines(&starts), 1);
}

#[test]
fn no_token_or_a_wrong_token_gets_401_and_runs_nothing() {
    let dir = Dir::new("agent-token");
    let auth = init(&dir, "auth");
    let agent = Agent::start(&dir, &["--auth", auth.to_str().unwrap()]);
    let starts = dir.file("starts");
    let wrong = "0".repeat(64);
    for t in [None, Some(wrong.as_str())] {
        let mut s = connect(agent.port, &auth, Some(&auth));
        assert_eq!(exchange(&mut *s, &request("hello", 1, t, HELLO)), Some(401));
        // The connection is over: a launch after the refusal gets nothing either.
        assert_eq!(
            exchange(&mut *s, &request("launch", 2, t, &launch_body(&starts))),
            None
        );
    }
    assert_eq!(lines(&starts), 0, "a command ran");
}

#[test]
fn a_replayed_request_is_refused_and_runs_nothing() {
    let dir = Dir::new("agent-replay");
    let auth = init(&dir, "auth");
    let agent = Agent::start(&dir, &["--auth", auth.to_str().unwrap()]);
    let (starts, t) = (dir.file("starts"), token(&auth));
    let mut s = greeted(agent.port, &auth, &t);
    let launch = request("launch", 2, Some(&t), &launch_body(&starts));
    assert_eq!(exchange(&mut *s, &launch), Some(200));
    assert_eq!(exchange(&mut *s, &launch), Some(409), "the replay");
    // On a new connection the same bytes come before any hello.
    let mut s2 = connect(agent.port, &auth, Some(&auth));
    assert_eq!(exchange(&mut *s2, &launch), Some(409));
    assert_eq!(lines(&starts), 1, "the replays ran a command");
    agent.logged("a replayed or out-of-order request");
}

#[test]
fn a_truncated_request_runs_nothing() {
    let dir = Dir::new("agent-truncated");
    let auth = init(&dir, "auth");
    let agent = Agent::start(&dir, &["--auth", auth.to_str().unwrap()]);
    let (starts, t) = (dir.file("starts"), token(&auth));
    let mut s = greeted(agent.port, &auth, &t);
    let launch = request("launch", 2, Some(&t), &launch_body(&starts));
    // All but the body's last 20 bytes, then the end of the connection.
    s.write_all(&launch[..launch.len() - 20]).unwrap();
    s.flush().unwrap();
    drop(s);
    agent.logged("nothing of it ran");
    assert_eq!(lines(&starts), 0, "a command ran");
}

#[test]
fn a_killed_ab_leaves_no_process_and_no_cgroup_on_the_agent_host() {
    if !root() {
        return;
    }
    let dir = Dir::new("agent-killed");
    let agent = Agent::start(&dir, &["--lease", "5s"]);
    let serve = format!("{} serve --listen {{host}}:{{clear_port}}", common::bin());
    let mut ab = Command::new(common::bin())
        .arg("ab")
        .arg("--server-host")
        .arg(format!("http://127.0.0.1:{}", agent.port))
        .args(["--a", &serve, "--b", &serve])
        .args(["--rounds", "1000"])
        .args(&SHORT[2..])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = agent.child.id();
    common::wait_until(
        "the agent runs both servers",
        Duration::from_secs(60),
        || cgroups_of(pid).len() >= 2,
    );
    ab.kill().unwrap();
    let _ = ab.wait();
    common::wait_until(
        "the agent stops and removes what it started",
        Duration::from_secs(30),
        || cgroups_of(pid).is_empty() && agent.children() == 0,
    );
    assert!(
        agent.log().contains("comparison started"),
        "{}",
        agent.log()
    );
}

#[test]
fn ab_through_an_agent_in_another_network_namespace_measures_the_servers_there() {
    if !root() {
        return;
    }
    if !common::have_tool("ip") {
        return common::cannot_run("ip (iproute2) is not installed");
    }
    let dir = Dir::new("agent-netns");
    let js = dir.file("ab.json");
    let serve = format!("{} serve --listen {{host}}:{{clear_port}}", common::bin());
    let burn = format!("{serve} --burn 3");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench/ab-two-hosts.sh");
    let out = Command::new(script)
        .env("LOADTERM", common::bin())
        .args(["--a", &serve, "--b", &burn])
        .args(SHORT)
        .arg("--json")
        .arg(&js)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("through the agent at https://198.18.0.1:7878"),
        "{stderr}"
    );
    assert!(
        stderr.contains("comparison started") && stderr.contains("session ended"),
        "{stderr}"
    );
    let report = json(&js);
    let host = &report["environment"]["server_host"];
    assert_eq!(host["agent"], "https://198.18.0.1:7878", "{host}");
    let runs = report["cells"][0]["runs"].as_array().unwrap();
    assert!(runs.len() >= 4, "{runs:?}");
    for r in runs {
        // The servers' CPU, read on the agent's host from their cgroups.
        assert!(r["cpu_us_per_req"].as_f64().unwrap() > 0.1, "{r}");
        assert!(
            r["accounting"].as_str().unwrap().starts_with("cgroup-"),
            "{r}"
        );
        assert!(r["server_window_off_ms"].as_f64().is_some(), "{r}");
        assert_eq!(r["errors"], 0, "{r}");
    }
    // The script removed its namespaces.
    let netns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&netns.stdout).contains("lt-srv-"),
        "namespaces left"
    );
}

#[test]
fn a_client_host_runs_a_shard_of_every_window_and_the_rate_is_held() {
    if !root() {
        return;
    }
    let dir = Dir::new("agent-shards");
    let agent = Agent::start(&dir, &[]);
    let js = dir.file("ab.json");
    let url = format!("http://127.0.0.1:{}", agent.port);
    let serve = format!("{} serve --listen {{host}}:{{clear_port}}", common::bin());
    let mut ab = Command::new(common::bin())
        .arg("ab")
        .args(["--client-host", &url, "--a", &serve, "--b", &serve])
        .args(SHORT)
        .arg("--json")
        .arg(&js)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The agent runs no server here: its children are the load's shards.
    let mut shards_seen = 0;
    while ab.try_wait().unwrap().is_none() {
        shards_seen = shards_seen.max(agent.children());
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = ab.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(shards_seen >= 1, "the agent ran no load");
    let report = json(&js);
    assert_eq!(report["environment"]["client_hosts"][0], url.as_str());
    for r in report["cells"][0]["runs"].as_array().unwrap() {
        // 2000 req/s in one-second windows, half from each host, merged into one report.
        let n = r["requests"].as_f64().unwrap();
        assert!((1900.0..=2100.0).contains(&n), "{r}");
        assert_eq!(r["errors"], 0, "{r}");
    }
}

//! haterm's `-F bind …` lines and the `-G` lines benchmark setups use, against the real
//! binary: certificates chosen by SNI from a `crt` directory, the options loadterm cannot honour
//! named in warnings, `cpu-map` pinning the worker threads, `ssl-default-bind-*` restricting
//! what TLS negotiates. (The seed's own two bind lines: seed_000.rs.)

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("loadterm-bind-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn openssl(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A self-signed certificate for `name` with its key, in one PEM file (HAProxy's format).
fn combined_pem(dir: &Path, file: &str, name: &str) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
            "-addext",
            &format!("subjectAltName=DNS:{name}"),
            "-keyout",
            "k.tmp",
            "-out",
            "c.tmp",
        ],
    );
    let mut pem = std::fs::read(dir.join("c.tmp")).unwrap();
    pem.extend(std::fs::read(dir.join("k.tmp")).unwrap());
    std::fs::write(dir.join(file), pem).unwrap();
    std::fs::remove_file(dir.join("c.tmp")).unwrap();
    std::fs::remove_file(dir.join("k.tmp")).unwrap();
}

/// `loadterm <args>` (haterm's argv, with `{clear}` and `{tls}` replaced by free ports), once
/// both ports accept connections; stderr goes to a file.
struct Running {
    child: Child,
    clear: u16,
    tls: u16,
    stderr: PathBuf,
}

impl Running {
    fn start(dir: &Path, args: &[&str]) -> Running {
        for attempt in 0..5 {
            let (clear, tls) = (common::free_port(), common::free_port());
            let stderr = dir.join(format!("server-{attempt}.err"));
            let args: Vec<String> = args
                .iter()
                .map(|a| {
                    a.replace("{clear}", &clear.to_string())
                        .replace("{tls}", &tls.to_string())
                })
                .collect();
            let mut child = Command::new(common::bin())
                .args(&args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&stderr).unwrap())
                .spawn()
                .unwrap();
            if common::wait_listening(&mut child, &[clear, tls], Duration::from_secs(15)) {
                return Running {
                    child,
                    clear,
                    tls,
                    stderr,
                };
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("loadterm {args:?} did not start");
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The subject of the certificate the server presents for `sni` (none: no SNI at all).
fn served_subject(dir: &Path, port: u16, sni: Option<&str>) -> String {
    let connect = format!("127.0.0.1:{port}");
    let mut args = vec!["s_client", "-connect", &connect];
    match sni {
        Some(name) => args.extend(["-servername", name]),
        None => args.push("-noservername"),
    }
    let out = openssl(dir, &args);
    out.lines()
        .find_map(|l| l.strip_prefix("subject="))
        .unwrap_or_else(|| panic!("no subject in {out}"))
        .replace(' ', "")
}

#[test]
fn crt_directory_is_served_by_sni() {
    if !common::have_tool("openssl") {
        return;
    }
    let dir = temp_dir("sni");
    let crts = dir.join("crts");
    std::fs::create_dir(&crts).unwrap();
    // Sorted by name: a.test is the first, the default for clients without (or with an
    // unknown) SNI. Files HAProxy reads beside a certificate are not certificates.
    combined_pem(&crts, "1-a.pem", "a.test");
    combined_pem(&crts, "2-b.pem", "b.test");
    combined_pem(&crts, "3-wild.pem", "*.wild.test");
    std::fs::write(crts.join("2-b.pem.ocsp"), b"\x30\x03\x0a\x01\x01").unwrap();
    let crt = crts.to_str().unwrap().to_owned();
    let s = Running::start(
        &dir,
        &[
            "-L",
            "127.0.0.1:{clear}",
            "-F",
            &format!("bind 127.0.0.1:{{tls}} ssl crt {crt}"),
        ],
    );
    for (sni, expected) in [
        (Some("b.test"), "CN=b.test"),
        (Some("A.TEST"), "CN=a.test"),
        (Some("x.wild.test"), "CN=*.wild.test"),
        (Some("unknown.test"), "CN=a.test"),
        (None, "CN=a.test"),
    ] {
        assert_eq!(served_subject(&dir, s.tls, sni), expected, "SNI {sni:?}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn unsupported_options_are_named_and_bad_binds_refused() {
    if !common::have_tool("curl") {
        return;
    }
    let dir = temp_dir("warn");
    // haterm's own generated TLS bind line, with the certificate loadterm generates (no crt).
    let s = Running::start(
        &dir,
        &[
            "-L",
            "127.0.0.1:{clear}",
            "-F",
            "bind 127.0.0.1:{tls} shards by-thread ssl alpn h3,h2,http1.1,http1.0 ktls on",
            "-G",
            "tune.bufsize 32768",
            "-G",
            "stats socket /tmp/x",
            "-G",
            "ssl-default-bind-ciphers HIGH:!aNULL",
        ],
    );
    let out = Command::new("curl")
        .args([
            "-sk",
            "--http2",
            "-o",
            "/dev/null",
            "-w",
            "%{http_version} %{http_code}",
        ])
        .arg(format!("https://127.0.0.1:{}/?s=1k", s.tls))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "2 200");
    let err = s.stderr();
    for expected in [
        "warning: bind option 'ktls on' has no effect in loadterm",
        "ALPN h3 over TCP (HAProxy's experimental QMux) is not served",
        "warning: 'tune.bufsize 32768' has no effect",
        "warning: ignoring haterm configuration line 'stats socket /tmp/x'",
        "warning: ssl-default-bind-ciphers: HIGH, !aNULL not available in rustls",
    ] {
        assert!(err.contains(expected), "missing '{expected}' in:\n{err}");
    }
    assert!(!err.contains("option 'shards"), "{err}");
    // A listener that cannot be opened as written: exit 2, saying why.
    for (line, why) in [
        ("bind quic4@127.0.0.1:1 alpn h3", "QUIC needs 'ssl'"),
        ("bind localhost:1", "is not an IP address"),
        ("bind 127.0.0.1:1 ssl crt", "'crt' needs an argument"),
    ] {
        let out = Command::new(common::bin())
            .args(["-L", "127.0.0.1:2", "-F", line])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{line}: {err}");
        assert!(err.contains(why), "{line}: {err}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// The CPUs this process may run on, from /proc.
fn allowed_cpus(status: &str) -> Vec<usize> {
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim();
    list.split(',')
        .flat_map(|r| {
            let (a, b) = r.split_once('-').unwrap_or((r, r));
            a.parse::<usize>().unwrap()..=b.parse::<usize>().unwrap()
        })
        .collect()
}

#[test]
fn cpu_map_pins_the_worker_threads() {
    let cpus = allowed_cpus(&std::fs::read_to_string("/proc/self/status").unwrap());
    assert!(cpus.len() >= 2, "this test needs 2 CPUs, has {cpus:?}");
    let (c0, c1) = (cpus[0], cpus[1]);
    let dir = temp_dir("cpumap");
    let s = Running::start(
        &dir,
        &[
            "-L",
            "127.0.0.1:{clear}:{tls}",
            "-G",
            "nbthread 2",
            "-G",
            &format!("cpu-map auto:1/1-2 {c0}-{c1}"),
        ],
    );
    // Each worker pins itself when it starts: wait for both (no tight window).
    let pinned = |name: &str| -> Option<Vec<usize>> {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", s.child.id())).ok()?;
        tasks.flatten().find_map(|t| {
            let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
            (comm.trim() == name)
                .then(|| std::fs::read_to_string(t.path().join("status")).ok())
                .flatten()
                .map(|st| allowed_cpus(&st))
        })
    };
    let start = Instant::now();
    loop {
        let now = (pinned("worker-0"), pinned("worker-1"));
        if now == (Some(vec![c0]), Some(vec![c1])) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "workers not pinned to {c0} and {c1}: {now:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!s.stderr().contains("warning"), "{}", s.stderr());
    // A CPU this process may not use is refused at start.
    let out = Command::new(common::bin())
        .args(["-L", "127.0.0.1:2", "-G", "cpu-map 1/all 4095"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("CPU 4095 is not available"));
    let _ = (s.clear, std::fs::remove_dir_all(dir));
}

#[test]
fn ssl_default_bind_lines_restrict_tls() {
    if !common::have_tool("openssl") {
        return;
    }
    let dir = temp_dir("policy");
    let s = Running::start(
        &dir,
        &[
            "-L",
            "127.0.0.1:{clear}:{tls}",
            "-G",
            "ssl-default-bind-ciphersuites TLS_CHACHA20_POLY1305_SHA256:TLS_AES_256_GCM_SHA384",
            "-G",
            "ssl-default-bind-curves P-384",
        ],
    );
    // OpenSSL prefers TLS_AES_256_GCM_SHA384 and X25519: the server's lines and order decide.
    let connect = format!("127.0.0.1:{}", s.tls);
    let out = openssl(&dir, &["s_client", "-connect", &connect, "-tls1_3"]);
    assert!(
        out.contains("Cipher is TLS_CHACHA20_POLY1305_SHA256"),
        "{out}"
    );
    assert!(out.contains("secp384r1") || out.contains("P-384"), "{out}");
    // QUIC still works (its Initial packets need TLS_AES_128_GCM_SHA256, kept for it: said).
    let h3 = Command::new(common::bin())
        .args(["load", "--h3", "-k", "-n", "5"])
        .arg(format!("https://127.0.0.1:{}/?s=1k", s.tls))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&h3.stdout);
    assert!(text.contains("5 succeeded, 0 failed"), "{text}");
    let err = s.stderr();
    assert!(
        err.contains("QUIC listeners keep TLS_AES_128_GCM_SHA256 last"),
        "{err}"
    );
    assert_eq!(err.matches("warning").count(), 1, "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

/// With no `ssl-default-bind-*` line the server prefers AES-128-GCM, on TLS 1.3 and 1.2, though
/// OpenSSL's client lists AES-256-GCM first.
#[test]
fn aes_128_gcm_is_preferred_by_default() {
    if !common::have_tool("openssl") {
        return;
    }
    let dir = temp_dir("aes128");
    let s = Running::start(&dir, &["-L", "127.0.0.1:{clear}:{tls}"]);
    let connect = format!("127.0.0.1:{}", s.tls);
    let out = openssl(&dir, &["s_client", "-connect", &connect, "-tls1_3"]);
    assert!(out.contains("Cipher is TLS_AES_128_GCM_SHA256"), "{out}");
    let out = openssl(&dir, &["s_client", "-connect", &connect, "-tls1_2"]);
    assert!(
        out.contains("Cipher is ECDHE-RSA-AES128-GCM-SHA256")
            || out.contains("Cipher is ECDHE-ECDSA-AES128-GCM-SHA256"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// `serve -C` prints the configuration, one `name  value` line per setting, defaults included,
/// with what -L, -G and -F lines set; it printed Rust internals (`RwLock(PhantomData<…>`,
/// `Notify`, `LinkedList`). It binds nothing and writes no file.
#[test]
fn dump_config_prints_the_configuration() {
    let dir = temp_dir("dump-config");
    let cert_out = dir.join("cert.pem");
    let out = Command::new(common::bin())
        .args(["serve", "-C"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let value = |text: &str, key: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| l.strip_prefix(key))
            .filter(|rest| rest.starts_with("  "))
            .map(|rest| rest.trim().to_owned())
            .collect()
    };
    assert!(text.starts_with("# loadterm "), "{text}");
    assert_eq!(
        value(&text, "listen"),
        [
            "http://127.0.0.1:8888  HTTP/1.1, h2c  (default: no -L given)",
            "https://127.0.0.1:8889  TLS, ALPN h2,http/1.1,http/1.0  (default: no -L given)",
            "https://127.0.0.1:8889  QUIC (UDP): HTTP/3  (default: no -L given)",
        ],
        "{text}"
    );
    for (key, want) in [
        ("timeout", "25s"),
        ("maxconn", "100000"),
        ("quic", "on"),
        ("h2-max-streams", "256"),
        ("quic-window", "8388608"),
        ("ssl-default-bind-curves", "rustls defaults"),
    ] {
        assert_eq!(value(&text, key), [want], "{key}: {text}");
    }
    assert!(value(&text, "certificate")[0].starts_with("generated: ECDSA P-256 and RSA 2048"));
    let out = Command::new(common::bin())
        .args([
            "serve",
            "-C",
            "-L",
            "127.0.0.1:1:2",
            "--no-quic",
            "--timeout",
            "3s",
        ])
        .args([
            "-G",
            "nbthread 2",
            "-G",
            "cpu-map auto:1/1-2 0-1",
            "-G",
            "maxconn 50",
        ])
        .args([
            "-F",
            "bind 127.0.0.1:3 ssl alpn h2",
            "--seed",
            "7",
            "--h2-emit",
            "gather",
        ])
        .arg("--cert-out")
        .arg(&cert_out)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{text}");
    assert_eq!(
        value(&text, "listen"),
        [
            "http://127.0.0.1:1  HTTP/1.1, h2c",
            "https://127.0.0.1:2  TLS, ALPN h2,http/1.1,http/1.0",
            "https://127.0.0.1:3  TLS, ALPN h2",
        ],
        "{text}"
    );
    for (key, want) in [
        ("threads", "2"),
        ("cpu-map", "threads 1-2 on CPUs 0,1, one each (auto:)"),
        ("timeout", "3s"),
        ("maxconn", "50"),
        ("quic", "off"),
        ("seed", "7"),
        ("h2-emit", "gather"),
    ] {
        assert_eq!(value(&text, key), [want], "{key}: {text}");
    }
    for internal in ["PhantomData", "RwLock", "Notify", "Some(", "{", "["] {
        assert!(!text.contains(internal), "{internal}: {text}");
    }
    assert!(!cert_out.exists(), "-C wrote the certificate");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A server refused its ports (another server holds them) is not taken for their holder: the
/// tests' servers count as started only once they themselves listen. Waiting for a connection
/// to succeed took the holder for the new server, and two tests given one port talked to each
/// other's servers.
#[test]
fn a_server_refused_its_ports_is_not_taken_for_their_holder() {
    let holder = common::Server::start(&["-t", "1", "--no-quic"]);
    let t0 = Instant::now();
    let second = common::Server::try_start_at(
        holder.clear_port,
        holder.tls_port,
        &["-t", "1", "--no-quic"],
    );
    assert!(second.is_none(), "a second server on the holder's ports");
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "its exit was seen only after {:?}",
        t0.elapsed()
    );
}

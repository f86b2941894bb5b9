//! The first seed's own command lines (`shared/seeds/000_*.txt`: haterm started with two
//! `-F bind` lines sharing a port between TLS/TCP and QUIC, h2load run with `SSL_CERT_FILE`,
//! `--connect-to` and `--sni`), with `haterm` replaced by `loadterm` and `h2load` by
//! `loadterm load`, against a throw-away CA and a `combined.pem` (chain and key, HAProxy's
//! format) for bench.local. Only the ports (free ones, not 18089/18452, so that parallel
//! runs do not collide) and the certificate directory (`/mnt` in the seed's container) differ.
//!
//! One difference in size: the HTTP/3 run sends 200 requests, not 4000. Both processes are
//! debug builds under `cargo test`, where HTTP/3 with 256 KiB bodies ran at 12 to 70 req/s on
//! a busy 2-core machine: 4000 would take minutes, and with all of a run's requests in flight
//! at once (50 connections × 10 streams) each waits about as long as the whole run, so 400
//! already met the 30 s request timeout once. The runs of this file take turns (`turn`) so that
//! they do not slow each other down.

use crate::common;

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// One load run at a time in this file (the tests still run in parallel otherwise).
fn turn() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

/// A throw-away CA (`ca.crt`) and `combined.pem` (bench.local's certificate, the CA
/// certificate, the key) in a fresh directory; `None` when openssl is missing and the test may
/// skip (`common::have_tool`).
struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn new(tag: &str) -> Option<Pki> {
        if !common::have_tool("openssl") {
            return None;
        }
        let dir = std::env::temp_dir().join(format!("loadterm-seed0-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let run = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(&dir)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ];
        run(&[
            &["req", "-x509"][..],
            &ec,
            &[
                "-days",
                "2",
                "-subj",
                "/CN=loadterm test CA",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign",
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
            ],
        ]
        .concat());
        run(&[
            &["req"][..],
            &ec,
            &[
                "-subj",
                "/CN=bench.local",
                "-keyout",
                "srv.key",
                "-out",
                "srv.csr",
            ],
        ]
        .concat());
        std::fs::write(
            dir.join("ext.cnf"),
            "subjectAltName=DNS:bench.local\nbasicConstraints=critical,CA:FALSE\n\
             extendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        run(&[
            "x509",
            "-req",
            "-in",
            "srv.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
            "-out",
            "srv.crt",
        ]);
        let mut combined = std::fs::read(dir.join("srv.crt")).unwrap();
        combined.extend(std::fs::read(dir.join("ca.crt")).unwrap());
        combined.extend(std::fs::read(dir.join("srv.key")).unwrap());
        std::fs::write(dir.join("combined.pem"), combined).unwrap();
        Some(Pki { dir })
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).to_str().unwrap().to_owned()
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The seed's server: `haterm -L "127.0.0.1:<clear>" -F "bind quic4@127.0.0.1:<tls> ssl crt
/// combined.pem alpn h3" -F "bind 127.0.0.1:<tls> ssl crt combined.pem alpn h2"`.
struct SeedServer {
    child: Child,
    clear: u16,
    tls: u16,
    stderr: PathBuf,
}

impl SeedServer {
    fn start(pki: &Pki) -> SeedServer {
        let crt = pki.path("combined.pem");
        for attempt in 0..5 {
            let (clear, tls) = (common::free_port(), common::free_port());
            let stderr = pki.dir.join(format!("server-{attempt}.err"));
            let child = Command::new(common::bin())
                .args(["-L", &format!("127.0.0.1:{clear}")])
                .args([
                    "-F",
                    &format!("bind quic4@127.0.0.1:{tls} ssl crt {crt} alpn h3"),
                ])
                .args(["-F", &format!("bind 127.0.0.1:{tls} ssl crt {crt} alpn h2")])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&stderr).unwrap())
                .spawn()
                .expect("spawn loadterm");
            let mut s = SeedServer {
                child,
                clear,
                tls,
                stderr,
            };
            if common::wait_listening(&mut s.child, &[clear, tls], Duration::from_secs(15)) {
                return s;
            }
            let _ = s.child.kill();
        }
        panic!("loadterm with the seed's bind lines did not start");
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap()
    }
}

impl Drop for SeedServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `loadterm load <args>` with `SSL_CERT_FILE` set as given (and nothing else from the
/// environment's OpenSSL variables).
fn load(cert_file: Option<&str>, args: &[String]) -> Output {
    let mut cmd = Command::new(common::bin());
    cmd.arg("load")
        .args(args)
        .env_remove("SSL_CERT_FILE")
        .env_remove("SSL_CERT_DIR");
    if let Some(f) = cert_file {
        cmd.env("SSL_CERT_FILE", f);
    }
    cmd.output().expect("run loadterm load")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The seed's TLS command: `--connect-to=127.0.0.1:<tls> --sni=bench.local --alpn-list=<alpn>
/// -n <n> -c 50 -t 4 -m 10 "https://bench.local:<tls>/?s=256k"`.
fn tls_command(s: &SeedServer, alpn: &str, n: u32) -> Vec<String> {
    [
        format!("--connect-to=127.0.0.1:{}", s.tls),
        "--sni=bench.local".into(),
        format!("--alpn-list={alpn}"),
        "-n".into(),
        n.to_string(),
        "-c".into(),
        "50".into(),
        "-t".into(),
        "4".into(),
        "-m".into(),
        "10".into(),
        format!("https://bench.local:{}/?s=256k", s.tls),
    ]
    .into()
}

/// The seed's HTTP/1.1 command: `--h1 -n <n> -c 50 -t 4 -m 10 "http://127.0.0.1:<clear>/?s=256k"`.
fn h1_command(s: &SeedServer, n: u32) -> Vec<String> {
    [
        "--h1",
        "-n",
        &n.to_string(),
        "-c",
        "50",
        "-t",
        "4",
        "-m",
        "10",
    ]
    .iter()
    .map(|a| a.to_string())
    .chain([format!("http://127.0.0.1:{}/?s=256k", s.clear)])
    .collect()
}

/// Every request succeeded, by loadterm's or h2load's summary line.
fn assert_all_succeeded(out: &Output, n: u32, what: &str) {
    let t = text(out);
    assert!(out.status.success(), "{what}: exit {:?}\n{t}", out.status);
    let expected = [
        format!("requests: {n} started, {n} done, {n} succeeded, 0 failed"),
        format!("requests: {n} total, {n} started, {n} done, {n} succeeded, 0 failed"),
    ];
    assert!(
        expected.iter().any(|e| t.contains(e.as_str())),
        "{what}: not every request succeeded\n{t}"
    );
}

#[test]
fn seed_server_understands_both_bind_lines() {
    let Some(pki) = Pki::new("binds") else {
        return;
    };
    let s = SeedServer::start(&pki);
    // Both lines understood (no "ignoring" warning), and the QUIC one is listening: an
    // HTTP/3 request over its UDP port verifies against the CA.
    let out = load(Some(&pki.path("ca.crt")), &tls_command(&s, "h3", 1));
    assert_all_succeeded(&out, 1, "one HTTP/3 request");
    let err = s.stderr();
    assert!(!err.contains("warning"), "{err}");
}

#[test]
fn seed_h1_with_loadterm_and_h2load() {
    let Some(pki) = Pki::new("h1") else {
        return;
    };
    let s = SeedServer::start(&pki);
    let _turn = turn();
    for n in [4000, 8000] {
        assert_all_succeeded(&load(None, &h1_command(&s, n)), n, "loadterm load --h1");
    }
    if !common::have_tool("h2load") {
        return;
    }
    let out = Command::new("h2load")
        .args(h1_command(&s, 4000))
        .output()
        .unwrap();
    assert_all_succeeded(&out, 4000, "h2load --h1");
}

/// Whether this h2load has `--sni` and `--alpn-list` (nghttp2 1.56 and later; Debian 12 has
/// 1.52, with `--npn-list`, which sets the ALPN list too, and no `--sni`).
fn h2load_is_recent() -> bool {
    let help = Command::new("h2load").arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    help.contains("--sni") && help.contains("--alpn-list")
}

#[test]
fn seed_h2_with_loadterm_and_h2load() {
    let Some(pki) = Pki::new("h2") else {
        return;
    };
    let s = SeedServer::start(&pki);
    let _turn = turn();
    let ca = pki.path("ca.crt");
    assert_all_succeeded(
        &load(Some(&ca), &tls_command(&s, "h2", 4000)),
        4000,
        "loadterm load --alpn-list=h2",
    );
    if !common::have_tool("h2load") {
        return;
    }
    let mut args = tls_command(&s, "h2", 4000);
    if !h2load_is_recent() {
        // Same request: the SNI is the URL's host (bench.local) without --sni.
        args.retain(|a| a != "--sni=bench.local");
        for a in &mut args {
            *a = a.replace("--alpn-list=", "--npn-list=");
        }
    }
    let out = Command::new("h2load")
        .args(&args)
        .env("SSL_CERT_FILE", &ca)
        .output()
        .unwrap();
    assert_all_succeeded(&out, 4000, "h2load h2");
}

#[test]
fn seed_h3_with_loadterm() {
    let Some(pki) = Pki::new("h3") else {
        return;
    };
    let s = SeedServer::start(&pki);
    let _turn = turn();
    assert_all_succeeded(
        &load(Some(&pki.path("ca.crt")), &tls_command(&s, "h3", 200)),
        200,
        "loadterm load --alpn-list=h3",
    );
}

/// The seed's HTTP/2 command without `SSL_CERT_FILE`: the CA is not trusted. The run says why
/// and stops at once with exit 1 (it used to retry for the whole budget and print nothing
/// but `4000 failed … 4000 tls`); the JSON report carries the reason too.
#[test]
fn untrusted_certificate_stops_early_with_the_reason() {
    let Some(pki) = Pki::new("untrusted") else {
        return;
    };
    let s = SeedServer::start(&pki);
    let mut args = tls_command(&s, "h2", 4000);
    args.extend(["--json".into(), "-".into(), "-q".into()]);
    let out = load(None, &args);
    let reason = "tls: certificate verify failed for bench.local: unknown issuer \
                  (use --cacert, SSL_CERT_FILE or -k)";
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("stopped early"), "{stderr}");
    assert!(stderr.contains(reason), "{stderr}");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(r["errors"]["first"]["tls"], reason, "{r}");
    assert_eq!(r["requests"]["completed"], 0);
    let tls = r["errors"]["tls"].as_u64().unwrap();
    assert!(
        (50..4000).contains(&tls),
        "one failure per connection, not the budget: {tls}"
    );
}

/// `SSL_CERT_DIR`: a directory holding the CA among other files is trusted as well.
#[test]
fn ssl_cert_dir_is_trusted() {
    let Some(pki) = Pki::new("dir") else {
        return;
    };
    let s = SeedServer::start(&pki);
    let dir = pki.dir.join("trust");
    std::fs::create_dir(&dir).unwrap();
    std::fs::copy(pki.dir.join("ca.crt"), dir.join("ca.crt")).unwrap();
    std::fs::write(dir.join("README"), "not a certificate\n").unwrap();
    let out = Command::new(common::bin())
        .arg("load")
        .args(tls_command(&s, "h2", 100))
        .env_remove("SSL_CERT_FILE")
        .env("SSL_CERT_DIR", &dir)
        .output()
        .unwrap();
    assert_all_succeeded(&out, 100, "SSL_CERT_DIR");
}

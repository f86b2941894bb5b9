//! TLS on the second port: a certificate clients can verify (--cert-out), TLS 1.2 and 1.3, the
//! ECDSA or RSA certificate chosen by the client's signature schemes, a user PEM (--cert), and
//! HTTP/1.1 over TLS written the same whatever the HTTP/2 options say.

use crate::common;

use common::Server;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("loadterm-test-{}-{name}", std::process::id()))
}

fn roots(pem: &std::path::Path) -> rustls::RootCertStore {
    let mut store = rustls::RootCertStore::empty();
    for c in rustls_pemfile::certs(&mut std::fs::read(pem).unwrap().as_slice()) {
        store.add(c.unwrap()).unwrap();
    }
    store
}

/// Delegates verification to webpki but offers only `schemes`, to steer the server's choice.
#[derive(Debug)]
struct Only(
    Arc<rustls::client::WebPkiServerVerifier>,
    Vec<SignatureScheme>,
);

impl ServerCertVerifier for Only {
    fn verify_server_cert(
        &self,
        end: &CertificateDer<'_>,
        inter: &[CertificateDer<'_>],
        name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.0.verify_server_cert(end, inter, name, ocsp, now)
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(m, c, d)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(m, c, d)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.1.clone()
    }
}

struct Fetched {
    version: rustls::ProtocolVersion,
    alpn: Option<Vec<u8>>,
    leaf: Vec<u8>,
    response: Vec<u8>,
}

fn fetch(port: u16, name: &str, cfg: rustls::ClientConfig) -> Fetched {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
        let mut tls = connector
            .connect(ServerName::try_from(name.to_string()).unwrap(), tcp)
            .await
            .expect("handshake");
        tls.write_all(b"GET /?s=5 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut response = Vec::new();
        let _ = tls.read_to_end(&mut response).await;
        let conn = tls.get_ref().1;
        Fetched {
            version: conn.protocol_version().unwrap(),
            alpn: conn.alpn_protocol().map(|p| p.to_vec()),
            leaf: conn.peer_certificates().unwrap()[0].to_vec(),
            response,
        }
    })
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

fn client(
    store: rustls::RootCertStore,
    versions: &[&'static rustls::SupportedProtocolVersion],
    alpn: &[&[u8]],
) -> rustls::ClientConfig {
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(store)
        .with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    cfg
}

#[test]
fn generated_certificate_verifies_for_names_and_versions() {
    let pem = temp_path("gen.pem");
    let s = Server::start(&["-t", "1", "--no-quic", "--cert-out", pem.to_str().unwrap()]);
    let store = roots(&pem);
    for name in ["127.0.0.1", "localhost"] {
        for (version, expect) in [
            (&rustls::version::TLS13, rustls::ProtocolVersion::TLSv1_3),
            (&rustls::version::TLS12, rustls::ProtocolVersion::TLSv1_2),
        ] {
            let f = fetch(
                s.tls_port,
                name,
                client(store.clone(), &[version], &[b"http/1.1"]),
            );
            assert_eq!(f.version, expect);
            assert_eq!(f.alpn.as_deref(), Some(&b"http/1.1"[..]));
            assert!(
                f.response.starts_with(b"HTTP/1.1 200 OK\r\n"),
                "{}",
                String::from_utf8_lossy(&f.response)
            );
            assert!(f.response.ends_with(b".1234"));
        }
    }
    // Without ALPN: HTTP/1.x.
    let f = fetch(
        s.tls_port,
        "localhost",
        client(store.clone(), &[&rustls::version::TLS13], &[]),
    );
    assert_eq!(f.alpn, None);
    assert!(f.response.starts_with(b"HTTP/1.1 200 OK"));

    // The server presents ECDSA to clients that accept it and RSA to the others.
    let certs: Vec<Vec<u8>> = rustls_pemfile::certs(&mut std::fs::read(&pem).unwrap().as_slice())
        .map(|c| c.unwrap().to_vec())
        .collect();
    assert_eq!(certs.len(), 2, "one ECDSA and one RSA certificate");
    let webpki =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider())
            .build()
            .unwrap();
    for (schemes, expected) in [
        (vec![SignatureScheme::ECDSA_NISTP256_SHA256], &certs[0]),
        (
            vec![
                SignatureScheme::RSA_PSS_SHA256,
                SignatureScheme::RSA_PKCS1_SHA256,
            ],
            &certs[1],
        ),
    ] {
        let mut cfg = client(
            rustls::RootCertStore::empty(),
            &[&rustls::version::TLS13, &rustls::version::TLS12],
            &[],
        );
        cfg.dangerous()
            .set_certificate_verifier(Arc::new(Only(webpki.clone(), schemes.clone())));
        assert_eq!(
            &fetch(s.tls_port, "localhost", cfg).leaf,
            expected,
            "{schemes:?}"
        );
    }
    if common::have_tool("curl") {
        let out = std::process::Command::new("curl")
            .args([
                "-s",
                "--cacert",
                pem.to_str().unwrap(),
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
            ])
            .arg(format!("https://localhost:{}/?s=10", s.tls_port))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "200",
            "curl verifies the certificate"
        );
    }
    let _ = std::fs::remove_file(pem);
}

#[test]
fn user_pem_with_chain_and_key() {
    if !common::have_tool("openssl") {
        return;
    }
    let (key, crt, combined) = (temp_path("u.key"), temp_path("u.crt"), temp_path("u.pem"));
    let ok = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-384",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=user.test",
        ])
        .args([
            "-addext",
            "subjectAltName=DNS:user.test",
            "-addext",
            "basicConstraints=critical,CA:FALSE",
            "-keyout",
            key.to_str().unwrap(),
            "-out",
            crt.to_str().unwrap(),
        ])
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(ok, "openssl req");
    let mut pem = std::fs::read(&crt).unwrap();
    pem.extend(std::fs::read(&key).unwrap());
    std::fs::write(&combined, pem).unwrap();
    let s = Server::start(&["-t", "1", "--no-quic", "--cert", combined.to_str().unwrap()]);
    let f = fetch(
        s.tls_port,
        "user.test",
        client(roots(&crt), &[&rustls::version::TLS13], &[b"http/1.1"]),
    );
    assert!(f.response.starts_with(b"HTTP/1.1 200 OK"));
    for p in [key, crt, combined] {
        let _ = std::fs::remove_file(p);
    }
    // A file without a key: a clear error, exit 1.
    let out = std::process::Command::new(common::bin())
        .args(["serve", "-L", "127.0.0.1:1:2", "--cert", "/dev/null"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no private key"));
}

/// A socket that keeps a copy of every byte read from it: the TLS records as they came.
struct Recorded {
    tcp: std::net::TcpStream,
    seen: Vec<u8>,
}

impl Read for Recorded {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.tcp.read(buf)?;
        self.seen.extend_from_slice(&buf[..n]);
        Ok(n)
    }
}

impl Write for Recorded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.tcp.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.tcp.flush()
    }
}

/// The lengths of the application-data records (type 23) the server sent for one HTTP/1.1
/// request over TLS 1.2 (whose session tickets go before the handshake ends, so every such
/// record is the response's), and the response.
fn response_records(port: u16, store: rustls::RootCertStore, path: &str) -> (Vec<usize>, Vec<u8>) {
    let cfg = client(store, &[&rustls::version::TLS12], &[b"http/1.1"]);
    let name = ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(cfg), name).unwrap();
    let tcp = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let io = Recorded {
        tcp,
        seen: Vec::new(),
    };
    let mut tls = rustls::StreamOwned::new(conn, io);
    write!(
        tls,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = Vec::new();
    tls.read_to_end(&mut response).expect("the whole response");
    let (mut records, mut raw) = (Vec::new(), &tls.sock.seen[..]);
    while raw.len() >= 5 {
        let len = usize::from(u16::from_be_bytes([raw[3], raw[4]]));
        if raw[0] == 23 {
            records.push(len);
        }
        raw = &raw[(5 + len).min(raw.len())..];
    }
    (records, response)
}

/// `--h2-emit` sets how HTTP/2 frames reach the transport; HTTP/1.1 over TLS keeps its own rule
/// (bodies up to 16 KiB copied): the same request gets the same TLS records with or without it.
/// A 100 000-byte body shows the difference: copied, it goes out in writes of the 64 KiB output
/// buffer, by reference in one vectored write as large as rustls takes.
#[test]
fn h2_emit_leaves_http1_over_tls_alone() {
    let pem = temp_path("emit.pem");
    let pem_arg = pem.to_str().unwrap();
    let path = "/?s=100000";
    let records = |extra: &[&str]| {
        let mut args = vec!["-t", "1", "--no-quic", "--cert-out", pem_arg];
        args.extend_from_slice(extra);
        let s = Server::start(&args);
        let (records, response) = response_records(s.tls_port, roots(&pem), path);
        assert!(response.starts_with(b"HTTP/1.1 200 OK\r\n"));
        let head_end = response.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        assert_eq!(
            response.len() - head_end,
            100_000,
            "{extra:?}: the whole body"
        );
        records
    };
    let own = records(&[]);
    assert!(own.len() > 2, "{own:?}");
    for strategy in ["drain", "gather", "hybrid"] {
        assert_eq!(
            records(&["--h2-emit", strategy]),
            own,
            "--h2-emit {strategy}"
        );
    }
    let _ = std::fs::remove_file(pem);
}

//! The TLS engine (`workers::handshake`: the handshake, then the session chosen by ALPN) as a
//! simulated pair: a rustls client on one end of an in-memory duplex stream, on tokio's paused
//! clock (the handshake timeout is reached at once, in simulated time). No socket.

use super::handshake;
use crate::config;
use crate::config::tls::{CertSource, Crypto, Curve, Identity, Policy};
use crate::plumbing::shutdown::{ConnSlot, Trigger};
use crate::plumbing::stats::Transport;
use rustls::pki_types::ServerName;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_rustls::client::TlsStream;

const TIMEOUT: Duration = Duration::from_secs(5);

/// Nothing below the duplex stream: TLS over it never reaches a socket.
impl crate::stream::TlsInner for DuplexStream {
    fn socket(&self) -> Option<&tokio::net::TcpStream> {
        None
    }
}

/// The server's generated certificates (as `loadterm serve` makes them for localhost), and the
/// roots a client trusts them by (the HTTP/3 pair tests' too).
pub(crate) fn identity() -> (Identity, rustls::RootCertStore) {
    let (crypto, warnings): (Crypto, _) = Policy::default().crypto();
    assert!(warnings.is_empty());
    let source = CertSource::Generate {
        rsa_bits: 2048,
        curve: Curve::P256,
        names: vec!["localhost".into()],
        ips: Vec::new(),
    };
    let identity = Identity::load(&source, crypto).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut identity.generated_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    (identity, roots)
}

/// Runs a test on a `LocalSet`, as the server's workers run (connections are tasks of their
/// thread).
async fn local<F: std::future::Future>(f: F) -> F::Output {
    tokio::task::LocalSet::new().run_until(f).await
}

/// The TLS engine serving one end of a duplex stream (offering h2 and http/1.1, as a TLS port
/// does): the client's end, the shutdown trigger, and the engine's task.
fn server() -> (DuplexStream, rustls::RootCertStore, Trigger, JoinHandle<()>) {
    let (identity, roots) = identity();
    let tls = identity
        .rustls_config(&[b"h2", b"http/1.1"], false)
        .unwrap();
    let (stop, cfg) = config::for_tests(TIMEOUT);
    let (client, server) = tokio::io::duplex(1 << 20);
    let slot = ConnSlot::new(&Arc::new(AtomicUsize::new(0)), Transport::Tls);
    let served = tokio::task::spawn_local(handshake(
        server,
        crate::stream::tls_stream::server_config(tls),
        cfg,
        Vec::new(),
        slot,
    ));
    (client, roots, stop, served)
}

/// A rustls client's handshake over `io`, offering `alpn`.
async fn connect(
    io: DuplexStream,
    roots: rustls::RootCertStore,
    alpn: &[&[u8]],
) -> std::io::Result<TlsStream<DuplexStream>> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let name = ServerName::try_from("localhost").unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, io)
        .await
}

#[tokio::test(start_paused = true)]
async fn http11_by_alpn_answers_and_closes() {
    local(async {
        let (io, roots, _stop, served) = server();
        let mut tls = connect(io, roots, &[b"http/1.1"]).await.unwrap();
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
        tls.write_all(b"GET /?s=5 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut response = Vec::new();
        tls.read_to_end(&mut response).await.unwrap();
        let text = String::from_utf8_lossy(&response);
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\n.1234"), "{text}");
        served.await.unwrap();
    })
    .await
}

#[tokio::test(start_paused = true)]
async fn h2_by_alpn_serves_streams() {
    local(async {
        let (io, roots, stop, served) = server();
        let tls = connect(io, roots, &[b"h2", b"http/1.1"]).await.unwrap();
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let (send, conn) = h2::client::handshake(tls).await.unwrap();
        let conn = tokio::spawn(conn);
        let req = http::Request::get("https://localhost/?s=100")
            .body(())
            .unwrap();
        let (resp, _) = send.ready().await.unwrap().send_request(req, true).unwrap();
        let resp = resp.await.unwrap();
        assert_eq!(resp.status(), 200);
        let mut body = resp.into_body();
        let mut len = 0;
        while let Some(data) = body.data().await {
            len += data.unwrap().len();
        }
        assert_eq!(len, 100);
        // Shutdown: GOAWAY, and the engine's task ends with the connection.
        stop.fire();
        served.await.unwrap();
        conn.await.unwrap().unwrap();
    })
    .await
}

#[tokio::test(start_paused = true)]
async fn silent_client_is_dropped_at_the_handshake_timeout() {
    local(async {
        let (mut io, _roots, _stop, served) = server();
        let start = Instant::now();
        served.await.unwrap();
        assert!(
            start.elapsed() >= TIMEOUT,
            "gave up after {:?}",
            start.elapsed()
        );
        assert_eq!(
            io.read(&mut [0u8; 1]).await.unwrap(),
            0,
            "closed, nothing sent"
        );
    })
    .await
}

#[tokio::test(start_paused = true)]
async fn no_common_protocol_fails_the_handshake() {
    local(async {
        let (io, roots, _stop, served) = server();
        let err = connect(io, roots, &[b"h3"]).await.unwrap_err();
        assert!(err.to_string().contains("NoApplicationProtocol"), "{err}");
        served.await.unwrap();
    })
    .await
}

//! What every connection needs, computed once from the command line: target address, TLS/QUIC
//! client configs, prebuilt requests.

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use rustls::pki_types::ServerName;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    H1,
    H2,
    H2c,
    H3,
    /// https: offer h2 and http/1.1 by ALPN and use what the server picks.
    Alpn,
}

impl Proto {
    pub fn name(self) -> &'static str {
        match self {
            Proto::H1 => "h1",
            Proto::H2 => "h2",
            Proto::H2c => "h2c",
            Proto::H3 => "h3",
            Proto::Alpn => "alpn",
        }
    }
}

/// One URL of the run (all share scheme, host and port).
#[derive(Debug, Clone)]
pub struct Target {
    pub uri: http::Uri,
    /// The whole HTTP/1.1 request, prebuilt.
    pub h1_request: Bytes,
}

pub struct Setup {
    pub proto: Proto,
    pub addr: SocketAddr,
    pub server_name: ServerName<'static>,
    pub targets: Vec<Target>,
    pub method: http::Method,
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
    pub data: Bytes,
    pub is_head: bool,
    /// Concurrent requests per connection (pipelining depth on HTTP/1.1).
    pub streams: usize,
    pub timeout: Duration,
    pub tls_config: Option<Arc<rustls::ClientConfig>>,
    pub quic_config: Option<quinn::ClientConfig>,
}

pub struct Options<'a> {
    pub urls: &'a [String],
    pub proto: Option<Proto>,
    pub connect_to: Option<&'a str>,
    pub sni: Option<&'a str>,
    pub insecure: bool,
    pub cacert: Option<&'a std::path::Path>,
    pub method: Option<&'a str>,
    pub headers: &'a [String],
    pub data: Bytes,
    pub streams: usize,
    pub timeout: Duration,
}

impl Setup {
    pub fn new(o: &Options<'_>) -> Result<Setup> {
        let uris: Vec<http::Uri> = o
            .urls
            .iter()
            .map(|u| {
                u.parse::<http::Uri>()
                    .with_context(|| format!("invalid URL '{u}'"))
            })
            .collect::<Result<_>>()?;
        let first = uris.first().context("no URL given")?;
        let scheme = first
            .scheme_str()
            .context("URL needs a scheme (http:// or https://)")?
            .to_owned();
        let tls = match scheme.as_str() {
            "https" => true,
            "http" => false,
            s => bail!("unsupported scheme '{s}' (use http or https)"),
        };
        let host = first.host().context("URL needs a host")?.to_owned();
        let port = first.port_u16().unwrap_or(if tls { 443 } else { 80 });
        for u in &uris[1..] {
            if u.scheme_str() != Some(&scheme)
                || u.host() != Some(&host)
                || u.port_u16().unwrap_or(if tls { 443 } else { 80 }) != port
            {
                bail!("all URLs must share scheme, host and port ({u} differs from {first})");
            }
        }
        let proto = match (o.proto, tls) {
            (None, true) => Proto::Alpn,
            (None, false) => Proto::H1,
            (Some(Proto::H2 | Proto::H3), false) => {
                bail!("--h2/--h3 need an https URL (use --h2c for HTTP/2 in clear)")
            }
            (Some(Proto::H2c), true) => bail!("--h2c needs an http URL"),
            (Some(p), _) => p,
        };
        let dial = o.connect_to.map(str::to_owned).unwrap_or_else(|| {
            format!(
                "{}:{port}",
                host.trim_start_matches('[').trim_end_matches(']')
            )
        });
        let dial = if o.connect_to.is_some() || !host.contains(':') {
            dial
        } else {
            format!(
                "[{}]:{port}",
                host.trim_start_matches('[').trim_end_matches(']')
            )
        };
        let addr = dial
            .to_socket_addrs()
            .with_context(|| format!("cannot resolve '{dial}'"))?
            .next()
            .with_context(|| format!("'{dial}' resolves to nothing"))?;
        let sni = o
            .sni
            .unwrap_or(host.trim_start_matches('[').trim_end_matches(']'))
            .to_owned();
        let server_name = ServerName::try_from(sni.clone())
            .with_context(|| format!("invalid TLS server name '{sni}'"))?;
        let default_port = if tls { 443 } else { 80 };
        let authority = if port == default_port {
            host.clone()
        } else {
            format!("{host}:{port}")
        };
        let method: http::Method = match o.method {
            Some(m) => m.parse().with_context(|| format!("invalid method '{m}'"))?,
            None if o.data.is_empty() => http::Method::GET,
            None => http::Method::POST,
        };
        let mut headers = Vec::new();
        for h in o.headers {
            let (n, v) = h
                .split_once(':')
                .with_context(|| format!("header '{h}' must be 'name: value'"))?;
            headers.push((
                http::HeaderName::try_from(n.trim())
                    .with_context(|| format!("invalid header name in '{h}'"))?,
                http::HeaderValue::try_from(v.trim())
                    .with_context(|| format!("invalid header value in '{h}'"))?,
            ));
        }
        let targets = uris
            .iter()
            .map(|u| {
                let path = u.path_and_query().map_or("/", |p| p.as_str()).to_owned();
                let h1_request = h1_request(&method, &path, &authority, &headers, o.data.len());
                Target {
                    uri: u.clone(),
                    h1_request,
                }
            })
            .collect();
        let alpn: &[&[u8]] = match proto {
            Proto::H1 => &[b"http/1.1"],
            Proto::H2 => &[b"h2"],
            Proto::H3 => &[b"h3"],
            Proto::Alpn => &[b"h2", b"http/1.1"],
            Proto::H2c => &[],
        };
        let rustls_cfg = if tls {
            Some(crate::tls::client_config(o.insecure, o.cacert, alpn)?)
        } else {
            None
        };
        let quic_config = match (&rustls_cfg, proto) {
            (Some(cfg), Proto::H3) => Some(crate::tls::quic_config(cfg.clone())?),
            _ => None,
        };
        Ok(Setup {
            proto,
            addr,
            server_name,
            targets,
            is_head: method == http::Method::HEAD,
            method,
            headers,
            data: o.data.clone(),
            streams: o.streams.max(1),
            timeout: o.timeout,
            tls_config: rustls_cfg.filter(|_| proto != Proto::H3).map(Arc::new),
            quic_config,
        })
    }

    /// The `i`-th request for HTTP/2 and HTTP/3 (URLs are used round-robin).
    pub fn request(&self, i: u64) -> http::Request<()> {
        let mut req = http::Request::builder()
            .method(self.method.clone())
            .uri(self.target(i).uri.clone());
        for (n, v) in &self.headers {
            req = req.header(n, v);
        }
        req.body(()).expect("request parts validated at setup")
    }

    /// The `i`-th request's target (URLs are used round-robin).
    pub fn target(&self, i: u64) -> &Target {
        &self.targets[(i % self.targets.len() as u64) as usize]
    }
}

fn h1_request(
    method: &http::Method,
    path: &str,
    authority: &str,
    headers: &[(http::HeaderName, http::HeaderValue)],
    data_len: usize,
) -> Bytes {
    let mut r = format!("{method} {path} HTTP/1.1\r\n").into_bytes();
    let has = |name: &str| {
        headers
            .iter()
            .any(|(n, _)| n.as_str().eq_ignore_ascii_case(name))
    };
    if !has("host") {
        r.extend_from_slice(format!("Host: {authority}\r\n").as_bytes());
    }
    if !has("user-agent") {
        r.extend_from_slice(
            format!("User-Agent: loadterm/{}\r\n", env!("CARGO_PKG_VERSION")).as_bytes(),
        );
    }
    for (n, v) in headers {
        r.extend_from_slice(n.as_str().as_bytes());
        r.extend_from_slice(b": ");
        r.extend_from_slice(v.as_bytes());
        r.extend_from_slice(b"\r\n");
    }
    if data_len > 0 && !has("content-length") {
        r.extend_from_slice(format!("Content-Length: {data_len}\r\n").as_bytes());
    }
    r.extend_from_slice(b"\r\n");
    Bytes::from(r)
}

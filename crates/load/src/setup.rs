//! What every connection needs, computed once from the command line: target address, TLS/QUIC
//! client configs, prebuilt requests.

use crate::request;
use crate::tls::{Configs, ResumePolicy};
use anyhow::{bail, Context, Result};
use bytes::Bytes;
use rustls::pki_types::ServerName;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

/// The protocol the command line chose, or ALPN's choice between h2 and http/1.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProtoChoice {
    H1,
    H2,
    H2c,
    H3,
    /// https: offer h2 and http/1.1 by ALPN and use what the server picks.
    Alpn,
}

impl ProtoChoice {
    /// The protocol used: the one asked for, or with ALPN the ones servers picked
    /// (`record::ALPN_*` bits; none yet: `alpn`).
    pub(crate) fn used(self, alpn: u8) -> &'static str {
        use crate::record::{ALPN_H1, ALPN_H2};
        match (self, alpn) {
            (ProtoChoice::Alpn, ALPN_H1) => "h1",
            (ProtoChoice::Alpn, ALPN_H2) => "h2",
            (ProtoChoice::Alpn, a) if a == ALPN_H1 | ALPN_H2 => "h1+h2",
            (p, _) => p.name(),
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            ProtoChoice::H1 => "h1",
            ProtoChoice::H2 => "h2",
            ProtoChoice::H2c => "h2c",
            ProtoChoice::H3 => "h3",
            ProtoChoice::Alpn => "alpn",
        }
    }
}

/// One URL of the run (all share scheme, host and port): its request prebuilt for each protocol.
#[derive(Debug, Clone)]
pub(crate) struct PrebuiltRequest {
    /// The whole HTTP/1.1 request, prebuilt.
    pub h1_request: Bytes,
    /// The HTTP/2 request's HPACK header block, prebuilt.
    pub h2_block: Vec<u8>,
    /// The HTTP/3 request's HEADERS frame (and the DATA frame head when there is a body).
    pub h3_request: Bytes,
}

pub(crate) struct Setup {
    pub proto: ProtoChoice,
    pub addr: SocketAddr,
    pub server_name: ServerName<'static>,
    pub targets: Vec<PrebuiltRequest>,
    pub data: Bytes,
    pub is_head: bool,
    /// Concurrent requests per connection (pipelining depth on HTTP/1.1).
    pub streams: usize,
    pub timeout: Duration,
    pub tls_config: Option<Configs<Arc<rustls::ClientConfig>>>,
    pub quic_config: Option<Configs<quinn::ClientConfig>>,
    /// `--tls-resume`.
    pub resume: ResumePolicy,
    /// `--requests-per-conn`.
    pub requests_per_conn: Option<u64>,
    /// `--0rtt` (HTTP/3): requests sent as 0-RTT data on resumed connections.
    pub zero_rtt: bool,
    pub offer: Offer,
}

/// What the client offers the server beyond the protocols' defaults: h2load's `-w`, `-W`,
/// `-f` and `--header-table-size`, with h2load's meaning and defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Offer {
    /// Each stream's receive window, 2^bits − 1 (`-w`): HTTP/2's SETTINGS_INITIAL_WINDOW_SIZE
    /// (default 30), HTTP/3's initial stream flow-control limit (bits capped at 26, as h2load
    /// does; not given: 8 MiB).
    pub stream_window_bits: Option<u8>,
    /// The connection's receive window, 2^bits − 1 (`-W`), HTTP/2 (default 30) and HTTP/3
    /// (capped at 26; not given: 32 MiB).
    pub conn_window_bits: Option<u8>,
    /// HTTP/2 SETTINGS_MAX_FRAME_SIZE: the largest frame accepted (`-f`, default 16384).
    pub max_frame: u32,
    /// HTTP/2 SETTINGS_HEADER_TABLE_SIZE: the HPACK decoder's largest table (default 4096).
    pub header_table: u32,
}

impl Default for Offer {
    fn default() -> Offer {
        Offer {
            stream_window_bits: None,
            conn_window_bits: None,
            max_frame: 16_384,
            header_table: 4096,
        }
    }
}

impl Offer {
    /// HTTP/2's stream window.
    pub(crate) fn h2_stream_window(&self) -> u32 {
        (1u32 << self.stream_window_bits.unwrap_or(30)) - 1
    }

    /// HTTP/2's connection window.
    pub(crate) fn h2_conn_window(&self) -> u32 {
        (1u32 << self.conn_window_bits.unwrap_or(30)) - 1
    }

    /// HTTP/3's (stream, connection) windows when given: 2^min(bits, 26) − 1.
    pub(crate) fn h3_windows(&self) -> (Option<u32>, Option<u32>) {
        let w = |bits: Option<u8>| bits.map(|b| (1u32 << b.min(26)) - 1);
        (w(self.stream_window_bits), w(self.conn_window_bits))
    }
}

/// The command line's options [`Setup::new`] turns into a run's setup.
pub(crate) struct SetupOptions<'a> {
    pub urls: &'a [String],
    pub proto: Option<ProtoChoice>,
    pub connect_to: Option<&'a str>,
    pub sni: Option<&'a str>,
    pub insecure: bool,
    pub cacert: Option<&'a std::path::Path>,
    pub method: Option<&'a str>,
    pub headers: &'a [String],
    pub data: Bytes,
    pub streams: usize,
    pub timeout: Duration,
    pub offer: Offer,
    pub resume: ResumePolicy,
    pub requests_per_conn: Option<u64>,
    pub zero_rtt: bool,
}

/// The scheme, host and port every URL of a run shares, and the URLs.
struct Origin {
    uris: Vec<http::Uri>,
    tls: bool,
    host: String,
    port: u16,
    default_port: u16,
}

impl Origin {
    fn of(urls: &[String]) -> Result<Origin> {
        let uris: Vec<http::Uri> = urls
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
        let default_port = if tls { 443 } else { 80 };
        let ports = uris
            .iter()
            .map(|u| url_port(u, default_port))
            .collect::<Result<Vec<u16>>>()?;
        let port = ports[0];
        for (u, &p) in uris.iter().zip(&ports).skip(1) {
            if u.scheme_str() != Some(&scheme) || u.host() != Some(&host) || p != port {
                bail!("all URLs must share scheme, host and port ({u} differs from {first})");
            }
        }
        Ok(Origin {
            uris,
            tls,
            host,
            port,
            default_port,
        })
    }
}

impl ProtoChoice {
    /// The protocol asked for, if the URL's scheme allows it; else the scheme's default.
    fn for_scheme(asked: Option<ProtoChoice>, tls: bool) -> Result<ProtoChoice> {
        Ok(match (asked, tls) {
            (None, true) => ProtoChoice::Alpn,
            (None, false) => ProtoChoice::H1,
            (Some(ProtoChoice::H2 | ProtoChoice::H3), false) => {
                bail!("--h2/--h3 need an https URL (use --h2c for HTTP/2 in clear)")
            }
            (Some(ProtoChoice::H2c), true) => bail!("--h2c needs an http URL"),
            (Some(p), _) => p,
        })
    }
}

/// The address to connect to: `--connect-to`'s, or the URL's host, resolved.
fn dial_addr(connect_to: Option<&str>, host: &str, port: u16) -> Result<SocketAddr> {
    // h2load's --connect-to may leave the port out: the URL's then.
    let connect_to = connect_to.map(|c| match c.rsplit_once(':') {
        Some((_, p)) if !p.contains(']') => c.to_owned(),
        _ => format!("{c}:{port}"),
    });
    let dial = connect_to.clone().unwrap_or_else(|| {
        format!(
            "{}:{port}",
            host.trim_start_matches('[').trim_end_matches(']')
        )
    });
    let dial = if connect_to.is_some() || !host.contains(':') {
        dial
    } else {
        format!(
            "[{}]:{port}",
            host.trim_start_matches('[').trim_end_matches(']')
        )
    };
    dial.to_socket_addrs()
        .with_context(|| format!("cannot resolve '{dial}'"))?
        .next()
        .with_context(|| format!("'{dial}' resolves to nothing"))
}

/// `-H` values (`name: value`) as header fields.
fn parse_headers(headers: &[String]) -> Result<Vec<(http::HeaderName, http::HeaderValue)>> {
    let mut out = Vec::new();
    for h in headers {
        let (n, v) = h
            .split_once(':')
            .with_context(|| format!("header '{h}' must be 'name: value'"))?;
        out.push((
            http::HeaderName::try_from(n.trim())
                .with_context(|| format!("invalid header name in '{h}'"))?,
            http::HeaderValue::try_from(v.trim())
                .with_context(|| format!("invalid header value in '{h}'"))?,
        ));
    }
    Ok(out)
}

/// The URL's port, or `default` when it names none (or an empty one, RFC 3986 §3.2.3). http's
/// `port_u16` reads a port that is not a number below 65536 as none, which silently dialled
/// the default port (`:99999`, `:abc` went to 80): that is refused here.
fn url_port(u: &http::Uri, default: u16) -> Result<u16> {
    let authority = u.authority().map_or("", |a| a.as_str());
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    let port = match host_port.rsplit_once(':') {
        // `[v6]` alone: that colon is the address's.
        Some((_, p)) if !p.contains(']') => p,
        _ => return Ok(default),
    };
    if port.is_empty() {
        return Ok(default);
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 && port.bytes().all(|b| b.is_ascii_digit()) => Ok(p),
        _ => bail!("invalid port '{port}' in URL '{u}' (a number from 1 to 65535)"),
    }
}

impl Setup {
    pub(crate) fn new(o: &SetupOptions<'_>) -> Result<Setup> {
        let Origin {
            uris,
            tls,
            host,
            port,
            default_port,
        } = Origin::of(o.urls)?;
        let proto = ProtoChoice::for_scheme(o.proto, tls)?;
        let addr = dial_addr(o.connect_to, &host, port)?;
        let sni = o
            .sni
            .unwrap_or(host.trim_start_matches('[').trim_end_matches(']'))
            .to_owned();
        let server_name = ServerName::try_from(sni.clone())
            .with_context(|| format!("invalid TLS server name '{sni}'"))?;
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
        let headers = parse_headers(o.headers)?;
        // On HTTP/2 and 3 a Host given with -H becomes :authority, as in h2load: h3 refuses a
        // host field that contradicts the URL, and an h2 server goes by :authority.
        let host_header = headers
            .iter()
            .find(|(n, _)| n == http::header::HOST)
            .map(|(_, v)| {
                v.to_str()
                    .ok()
                    .and_then(|v| v.parse::<http::uri::Authority>().ok())
                    .with_context(|| format!("invalid Host header '{v:?}'"))
            })
            .transpose()?;
        let targets = uris
            .iter()
            .map(|u| {
                let path = u.path_and_query().map_or("/", |p| p.as_str()).to_owned();
                let h1_request = request::h1(&method, &path, &authority, &headers, o.data.len());
                let fields = request::fields(
                    &method,
                    tls,
                    host_header
                        .as_ref()
                        .map_or(authority.as_str(), |a| a.as_str()),
                    &path,
                    &headers,
                    o.data.len(),
                );
                let fields = || fields.iter().map(|(n, v)| (n.as_str(), v.as_slice()));
                let h2_block = request::h2_block(fields());
                let h3_request = request::h3(fields(), o.data.len());
                PrebuiltRequest {
                    h1_request,
                    h2_block,
                    h3_request,
                }
            })
            .collect();
        let alpn: &[&[u8]] = match proto {
            ProtoChoice::H1 => &[b"http/1.1"],
            ProtoChoice::H2 => &[b"h2"],
            ProtoChoice::H3 => &[b"h3"],
            ProtoChoice::Alpn => &[b"h2", b"http/1.1"],
            ProtoChoice::H2c => &[],
        };
        let rustls_cfg = if tls {
            Some(crate::tls::client_configs(
                o.insecure, o.cacert, alpn, o.zero_rtt,
            )?)
        } else {
            None
        };
        let quic_config = match (&rustls_cfg, proto) {
            (Some(cfg), ProtoChoice::H3) => {
                let quic = |c: &rustls::ClientConfig| {
                    crate::tls::quic_config(c.clone(), o.offer.h3_windows())
                };
                Some(Configs {
                    resuming: quic(&cfg.resuming)?,
                    fresh: quic(&cfg.fresh)?,
                })
            }
            _ => None,
        };
        Ok(Setup {
            proto,
            addr,
            server_name,
            targets,
            is_head: method == http::Method::HEAD,
            data: o.data.clone(),
            streams: o.streams.max(1),
            timeout: o.timeout,
            tls_config: rustls_cfg
                .filter(|_| proto != ProtoChoice::H3)
                .map(|c| Configs {
                    resuming: Arc::new(c.resuming),
                    fresh: Arc::new(c.fresh),
                }),
            quic_config,
            resume: o.resume,
            requests_per_conn: o.requests_per_conn,
            zero_rtt: o.zero_rtt,
            offer: o.offer,
        })
    }

    /// The `i`-th request's target (URLs are used round-robin).
    pub(crate) fn target(&self, i: u64) -> &PrebuiltRequest {
        &self.targets[(i % self.targets.len() as u64) as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only IP literals and --connect-to: no name resolution. (The URLs are leaked so that
    /// `f` may borrow the caller's locals.)
    fn setup<'a>(urls: &[&str], f: impl FnOnce(&mut SetupOptions<'a>)) -> Result<Setup> {
        let urls: &'static [String] = Vec::leak(urls.iter().map(|u| u.to_string()).collect());
        let mut o = SetupOptions {
            urls,
            proto: None,
            connect_to: None,
            sni: None,
            insecure: true,
            cacert: None,
            method: None,
            headers: &[],
            data: Bytes::new(),
            streams: 1,
            timeout: Duration::from_secs(1),
            offer: Offer::default(),
            resume: ResumePolicy::Always,
            requests_per_conn: None,
            zero_rtt: false,
        };
        f(&mut o);
        Setup::new(&o)
    }

    /// The HTTP/3 request's fields, decoded back from its HEADERS frame.
    fn h3_fields(s: &Setup, i: u64) -> Vec<(String, String)> {
        use loadterm_h3::{frame, qpack};
        let f = &s.target(i).h3_request;
        let (ty, a) = frame::get_varint(f).unwrap();
        let (len, b) = frame::get_varint(&f[a..]).unwrap();
        assert_eq!(ty, frame::HEADERS);
        let mut out = Vec::new();
        qpack::QpackDecoder::default()
            .decode(&f[a + b..a + b + len as usize], u64::MAX, |n, v| {
                out.push((
                    String::from_utf8(n.to_vec()).unwrap(),
                    String::from_utf8(v.to_vec()).unwrap(),
                ))
            })
            .unwrap();
        out
    }

    fn field(s: &Setup, i: u64, name: &str) -> String {
        let fields = h3_fields(s, i);
        let f = fields.iter().find(|(n, _)| n == name);
        f.unwrap_or_else(|| panic!("no {name} in {fields:?}"))
            .1
            .clone()
    }

    fn head(s: &Setup) -> String {
        String::from_utf8(s.targets[0].h1_request.to_vec()).unwrap()
    }

    const UA: &str = concat!("User-Agent: loadterm/", env!("CARGO_PKG_VERSION"), "\r\n");

    #[test]
    fn url_gives_address_host_and_request() {
        let s = setup(&["http://127.0.0.1:8080/a/b?s=1k"], |_| {}).unwrap();
        assert_eq!(s.addr, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(s.proto, ProtoChoice::H1);
        assert_eq!(
            head(&s),
            format!("GET /a/b?s=1k HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n{UA}\r\n")
        );
        // No path: "/".
        let s = setup(&["http://127.0.0.1:8080"], |_| {}).unwrap();
        assert!(head(&s).starts_with("GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"));
    }

    #[test]
    fn default_ports_stay_out_of_host() {
        let s = setup(&["http://127.0.0.1/"], |_| {}).unwrap();
        assert_eq!(s.addr.port(), 80);
        assert!(head(&s).contains("\r\nHost: 127.0.0.1\r\n"));
        let s = setup(&["http://127.0.0.1:80/"], |_| {}).unwrap();
        assert!(head(&s).contains("\r\nHost: 127.0.0.1\r\n"));
        let s = setup(&["https://127.0.0.1/"], |_| {}).unwrap();
        assert_eq!((s.addr.port(), s.proto), (443, ProtoChoice::Alpn));
        assert!(head(&s).contains("\r\nHost: 127.0.0.1\r\n"));
        // A non-default port is kept, also on the other scheme's default.
        let s = setup(&["https://127.0.0.1:80/"], |_| {}).unwrap();
        assert!(head(&s).contains("\r\nHost: 127.0.0.1:80\r\n"));
    }

    #[test]
    fn bad_ports_are_refused() {
        for url in [
            "http://127.0.0.1:99999/",
            "http://127.0.0.1:65536/",
            "http://127.0.0.1:abc/",
            "http://127.0.0.1:0/",
            "http://127.0.0.1:+80/",
            "https://127.0.0.1:70000/",
            "https://[::1]:70000/",
        ] {
            let e = setup(&[url], |_| {}).err().map(|e| format!("{e:#}"));
            assert!(
                e.as_deref().is_some_and(|e| e.contains("invalid port")),
                "{url}: {e:?}"
            );
        }
        // In a second URL too.
        assert!(setup(&["http://127.0.0.1:1/", "http://127.0.0.1:99999/"], |_| {}).is_err());
        // An empty port is the scheme's default.
        let s = setup(&["http://127.0.0.1:/"], |_| {}).unwrap();
        assert_eq!(s.addr.port(), 80);
        let s = setup(&["https://[::1]:65535/"], |_| {}).unwrap();
        assert_eq!(s.addr.port(), 65535);
    }

    #[test]
    fn ipv6_literals() {
        let s = setup(&["https://[::1]:8443/"], |_| {}).unwrap();
        assert_eq!(s.addr, "[::1]:8443".parse().unwrap());
        assert!(head(&s).contains("\r\nHost: [::1]:8443\r\n"));
        assert_eq!(s.server_name, ServerName::try_from("::1").unwrap());
        let s = setup(&["http://[::1]/"], |_| {}).unwrap();
        assert_eq!(s.addr, "[::1]:80".parse().unwrap());
        assert!(head(&s).contains("\r\nHost: [::1]\r\n"));
    }

    #[test]
    fn connect_to_and_sni() {
        // --connect-to changes only where we dial: Host and SNI still come from the URL.
        let s = setup(&["https://example.com:8443/x"], |o| {
            o.connect_to = Some("127.0.0.2:9443")
        })
        .unwrap();
        assert_eq!(s.addr, "127.0.0.2:9443".parse().unwrap());
        assert!(head(&s).contains("\r\nHost: example.com:8443\r\n"));
        assert_eq!(s.server_name, ServerName::try_from("example.com").unwrap());
        assert_eq!(field(&s, 0, ":authority"), "example.com:8443");
        // As h2load's: without a port, the URL's.
        let s = setup(&["https://example.com:8443/x"], |o| {
            o.connect_to = Some("127.0.0.2")
        })
        .unwrap();
        assert_eq!(s.addr, "127.0.0.2:8443".parse().unwrap());
        // --sni changes only the TLS server name.
        let s = setup(&["https://127.0.0.1:8443/"], |o| o.sni = Some("alt.test")).unwrap();
        assert_eq!(s.server_name, ServerName::try_from("alt.test").unwrap());
        assert_eq!(s.addr, "127.0.0.1:8443".parse().unwrap());
        assert!(head(&s).contains("\r\nHost: 127.0.0.1:8443\r\n"));
        assert!(setup(&["https://127.0.0.1/"], |o| o.sni = Some("bad name")).is_err());
    }

    #[test]
    fn host_header_replaces_the_authority() {
        let headers = ["host: example.org:1234".to_owned(), "X-A: 1".to_owned()];
        let s = setup(&["https://127.0.0.1:8443/p?q"], |o| o.headers = &headers).unwrap();
        // HTTP/1.1: the given Host instead of ours, once.
        assert_eq!(
            head(&s),
            format!("GET /p?q HTTP/1.1\r\n{UA}host: example.org:1234\r\nx-a: 1\r\n\r\n")
        );
        // HTTP/2 and 3: as :authority, not as a host field beside it (h3 refuses that).
        let names: Vec<_> = h3_fields(&s, 0).into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            [
                ":method",
                ":scheme",
                ":authority",
                ":path",
                "user-agent",
                "x-a"
            ]
        );
        assert_eq!(field(&s, 0, ":authority"), "example.org:1234");
        assert_eq!(field(&s, 0, ":path"), "/p?q");
        assert_eq!(field(&s, 0, "x-a"), "1");
        // The TLS server name and the address still come from the URL.
        assert_eq!(s.server_name, ServerName::try_from("127.0.0.1").unwrap());
        assert_eq!(s.addr, "127.0.0.1:8443".parse().unwrap());
        let bad = ["Host: a b".to_owned()];
        assert!(setup(&["http://127.0.0.1/"], |o| o.headers = &bad).is_err());
    }

    #[test]
    fn method_and_body() {
        let s = setup(&["http://127.0.0.1/"], |o| {
            o.data = Bytes::from_static(b"hello")
        })
        .unwrap();
        assert_eq!(field(&s, 0, ":method"), "POST");
        assert_eq!(field(&s, 0, "content-length"), "5");
        assert!(head(&s).starts_with("POST / HTTP/1.1\r\n"));
        assert!(head(&s).ends_with("\r\nContent-Length: 5\r\n\r\n"));
        let s = setup(&["http://127.0.0.1/"], |o| o.method = Some("HEAD")).unwrap();
        assert!(s.is_head && head(&s).starts_with("HEAD / HTTP/1.1\r\n"));
        assert!(!head(&s).contains("Content-Length"));
        assert!(setup(&["http://127.0.0.1/"], |o| o.method = Some("GE T")).is_err());
        let bad = ["nocolon".to_owned()];
        assert!(setup(&["http://127.0.0.1/"], |o| o.headers = &bad).is_err());
    }

    #[test]
    fn urls_round_robin() {
        let s = setup(&["http://127.0.0.1:1/a", "http://127.0.0.1:1/b"], |_| {}).unwrap();
        let paths: Vec<_> = (0..4).map(|i| field(&s, i, ":path")).collect();
        assert_eq!(paths, ["/a", "/b", "/a", "/b"]);
        assert!(String::from_utf8_lossy(&s.target(3).h1_request).starts_with("GET /b "));
    }

    #[test]
    fn rejected_urls_and_protocols() {
        let err = |urls: &[&str], proto| {
            setup(urls, |o| o.proto = proto)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(err(&["http://127.0.0.1/", "http://127.0.0.2/"], None).contains("share"));
        assert!(err(&["http://127.0.0.1/", "https://127.0.0.1/"], None).contains("share"));
        assert!(err(&["http://127.0.0.1:1/", "http://127.0.0.1:2/"], None).contains("share"));
        assert!(err(&["ftp://127.0.0.1/"], None).contains("scheme"));
        assert!(err(&["/just/a/path"], None).contains("scheme"));
        assert!(err(&["http://127.0.0.1/"], Some(ProtoChoice::H2)).contains("https"));
        assert!(err(&["http://127.0.0.1/"], Some(ProtoChoice::H3)).contains("https"));
        assert!(err(&["https://127.0.0.1/"], Some(ProtoChoice::H2c)).contains("http URL"));
        assert!(err(&[], None).contains("no URL"));
        let ok = |url, proto| setup(&[url], |o| o.proto = proto).map(|s| s.proto).unwrap();
        assert_eq!(
            ok("http://127.0.0.1/", Some(ProtoChoice::H2c)),
            ProtoChoice::H2c
        );
        assert_eq!(
            ok("https://127.0.0.1/", Some(ProtoChoice::H1)),
            ProtoChoice::H1
        );
        assert_eq!(
            ok("https://127.0.0.1/", Some(ProtoChoice::H3)),
            ProtoChoice::H3
        );
    }
}

//! `--metrics ADDR`: an admin HTTP/1.1 listener on a thread of its own (not a worker) that
//! answers `GET /metrics` with the statistics in the OpenMetrics text format (the
//! `prometheus-client` crate's encoder), read from the per-thread counters at scrape time.
//! One request per connection, handled in turn: a scrape is rare and quick.

use crate::plumbing::stats::{Protection, Proto, Totals, Transport, CLASSES};
use anyhow::{Context, Result};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// The largest request head taken; larger ones get 431.
const MAX_HEAD: usize = 8192;
/// How long a client may take to send its request, and to take the answer.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Bind `addr` (errors say which address could not be bound) and serve the statistics on it
/// from a thread of its own; returns the bound address.
pub(crate) fn start(addr: SocketAddr) -> Result<SocketAddr> {
    let listener =
        TcpListener::bind(addr).with_context(|| format!("--metrics: cannot listen on {addr}"))?;
    let bound = listener.local_addr()?;
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || serve(listener))
        .context("cannot start the metrics thread")?;
    Ok(bound)
}

fn serve(listener: TcpListener) {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(SummedCounters));
    for conn in listener.incoming() {
        match conn {
            Ok(conn) => {
                // A client that misbehaves only loses its own answer.
                let _ = answer(conn, &registry);
            }
            // Out of file descriptors or similar: back off instead of spinning.
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

fn answer(mut conn: TcpStream, registry: &Registry) -> std::io::Result<()> {
    conn.set_write_timeout(Some(IO_TIMEOUT))?;
    let (status, body, openmetrics) = match read_head(&mut conn)? {
        ScrapeRequest::TooLarge => ("431 Request Header Fields Too Large", String::new(), false),
        ScrapeRequest::Malformed => ("400 Bad Request", String::new(), false),
        ScrapeRequest::Request {
            get,
            path,
            openmetrics,
        } => {
            let (status, body) = route(get, &path, registry);
            (status, body, openmetrics)
        }
    };
    let (content_type, body) = match status {
        "200 OK" if openmetrics => (OPENMETRICS, body),
        "200 OK" => (PROMETHEUS_TEXT, prometheus_text(&body)),
        _ => ("text/plain; charset=utf-8", format!("{status}\n")),
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    out.push_str(&body);
    conn.write_all(out.as_bytes())?;
    conn.shutdown(std::net::Shutdown::Write)
}

enum ScrapeRequest {
    Request {
        get: bool,
        /// The target's path (no query).
        path: String,
        /// The client accepts OpenMetrics (Prometheus does); others get the Prometheus text
        /// format, which older tools (promtool) parse.
        openmetrics: bool,
    },
    TooLarge,
    /// Not an HTTP/1.x request head (httparse refused it, or the client closed before its end).
    Malformed,
}

/// Read the request head (up to `MAX_HEAD` bytes, within `IO_TIMEOUT`) and parse it (httparse,
/// as the HTTP/1 engine's parser).
fn read_head(conn: &mut TcpStream) -> std::io::Result<ScrapeRequest> {
    let deadline = Instant::now() + IO_TIMEOUT;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let mut fields = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut fields);
        match req.parse(&buf) {
            Ok(httparse::Status::Complete(_)) => {
                let openmetrics = req.headers.iter().any(|h| {
                    h.name.eq_ignore_ascii_case("accept")
                        && String::from_utf8_lossy(h.value).contains("application/openmetrics-text")
                });
                let target = req.path.unwrap_or_default();
                return Ok(ScrapeRequest::Request {
                    get: req.method == Some("GET"),
                    path: target.split('?').next().unwrap_or_default().to_owned(),
                    openmetrics,
                });
            }
            Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => {
                return Ok(ScrapeRequest::TooLarge)
            }
            Ok(httparse::Status::Partial) => {}
            Err(httparse::Error::TooManyHeaders) => return Ok(ScrapeRequest::TooLarge),
            Err(_) => return Ok(ScrapeRequest::Malformed),
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        conn.set_read_timeout(Some(left))?;
        match conn.read(&mut chunk)? {
            0 => return Ok(ScrapeRequest::Malformed),
            n => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The status and body for a request: the exposition for `GET /metrics`.
fn route(get: bool, path: &str, registry: &Registry) -> (&'static str, String) {
    if path != "/metrics" {
        return ("404 Not Found", String::new());
    }
    if !get {
        return ("405 Method Not Allowed", String::new());
    }
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, registry) {
        Ok(()) => ("200 OK", body),
        Err(_) => ("500 Internal Server Error", String::new()),
    }
}

/// The OpenMetrics exposition in the Prometheus text format (0.0.4): a counter's family is
/// named as its samples are (`x_total`), and there is no `# EOF`.
fn prometheus_text(openmetrics: &str) -> String {
    let counters: Vec<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len() + 64 * counters.len());
    for line in openmetrics.lines().filter(|&l| l != "# EOF") {
        let meta = ["# HELP ", "# TYPE "]
            .iter()
            .find_map(|p| Some((*p, line.strip_prefix(p)?)));
        match meta {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let suffix = if counters.contains(&name) {
                    "_total"
                } else {
                    ""
                };
                out.push_str(&format!("{prefix}{name}{suffix} {tail}\n"));
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// Reads the summed counters at each scrape.
#[derive(Debug)]
struct SummedCounters;

type Labels = Vec<(&'static str, String)>;

fn family(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    ty: MetricType,
    samples: impl IntoIterator<Item = (Labels, u64)>,
) -> std::fmt::Result {
    let mut family = enc.encode_descriptor(name, help, None, ty)?;
    for (labels, v) in samples {
        let metric = family.encode_family(&labels)?;
        match ty {
            MetricType::Gauge => ConstGauge::new(v as i64).encode(metric)?,
            _ => ConstCounter::new(v).encode(metric)?,
        }
    }
    Ok(())
}

fn by_transport<'a>(
    transports: &'a [Transport],
    v: impl Fn(Transport) -> u64 + 'a,
) -> impl Iterator<Item = (Labels, u64)> + 'a {
    transports
        .iter()
        .map(move |&t| (vec![("transport", t.label().to_string())], v(t)))
}

fn by_proto(v: &[u64; 3]) -> impl Iterator<Item = (Labels, u64)> + '_ {
    Proto::ALL
        .iter()
        .map(|&p| (vec![("proto", p.label().to_string())], v[p as usize]))
}

impl Collector for SummedCounters {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        use MetricType::{Counter, Gauge};
        let t = Totals::now();
        let all = &Transport::ALL;
        let secure = &[Transport::Tls, Transport::Quic];
        family(
            &mut enc,
            "loadterm_connections_accepted",
            "Connections accepted.",
            Counter,
            by_transport(all, |x| t.accepted[x as usize]),
        )?;
        family(
            &mut enc,
            "loadterm_connections_open",
            "Connections open (accepted and not yet closed).",
            Gauge,
            by_transport(all, |x| t.open(x)),
        )?;
        family(
            &mut enc,
            "loadterm_connections_parked",
            "Idle HTTP/1 connections (clear TCP and TLS) parked out of their tasks (among those open).",
            Gauge,
            std::iter::once((Vec::new(), t.parked_now())),
        )?;
        let handshakes = secure.iter().flat_map(|&x| {
            let i = x as usize;
            [
                ("ok", t.handshakes_ok[i]),
                ("failed", t.handshakes_failed[i]),
            ]
            .map(|(r, n)| {
                let labels = vec![("transport", x.label().to_string()), ("result", r.into())];
                (labels, n)
            })
        });
        family(
            &mut enc,
            "loadterm_tls_handshakes",
            "TLS handshakes (QUIC included), by result.",
            Counter,
            handshakes,
        )?;
        let resumed = secure.iter().flat_map(|&x| {
            let i = x as usize;
            [("resumed", t.resumed[i]), ("0rtt", t.early_data[i])].map(|(k, n)| {
                let labels = vec![("transport", x.label().to_string()), ("kind", k.into())];
                (labels, n)
            })
        });
        family(
            &mut enc,
            "loadterm_tls_handshakes_resumed",
            "TLS handshakes (QUIC included, among the ok ones) that resumed a session, and of \
             those the ones whose 0-RTT data was accepted.",
            Counter,
            resumed,
        )?;
        family(
            &mut enc,
            "loadterm_tls_handshake_failures",
            "Failed TLS handshakes by reason: the alert sent or received, or timeout, eof, io.",
            Counter,
            t.failures
                .iter()
                .map(|(f, n)| (vec![("reason", f.label())], *n)),
        )?;
        let requests = Proto::ALL.iter().flat_map(|&p| {
            CLASSES.iter().enumerate().map(move |(c, class)| {
                let labels = vec![
                    ("proto", p.label().to_string()),
                    ("class", class.to_string()),
                ];
                (labels, t.requests[p as usize][c])
            })
        });
        family(
            &mut enc,
            "loadterm_requests",
            "Final responses served (their last byte handed to the transport), by status class.",
            Counter,
            requests,
        )?;
        family(
            &mut enc,
            "loadterm_interim_responses",
            "Interim (1xx) responses sent; not served requests.",
            Counter,
            by_proto(&t.interim),
        )?;
        family(
            &mut enc,
            "loadterm_requests_aborted",
            "Requests planned whose final response was not completed (peer gone, write timeout, abort).",
            Counter,
            by_proto(&t.aborted),
        )?;
        family(
            &mut enc,
            "loadterm_bytes_received",
            "Bytes received on the wire (TLS: ciphertext; QUIC: UDP payload, at close).",
            Counter,
            by_transport(all, |x| t.bytes_in[x as usize]),
        )?;
        family(
            &mut enc,
            "loadterm_bytes_sent",
            "Bytes sent on the wire (TLS: ciphertext; QUIC: UDP payload, at close).",
            Counter,
            by_transport(all, |x| t.bytes_out[x as usize]),
        )?;
        family(
            &mut enc,
            "loadterm_errors",
            "Errors by kind.",
            Counter,
            crate::plumbing::stats::CountedError::ALL
                .iter()
                .map(|&k| (vec![("kind", k.label().to_string())], t.errors[k as usize])),
        )?;
        family(
            &mut enc,
            "loadterm_protections",
            "Protections that triggered, by kind.",
            Counter,
            Protection::ALL.iter().map(|&p| {
                (
                    vec![("kind", p.label().to_string())],
                    t.protections[p as usize],
                )
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn counters_are_named_with_total_in_the_prometheus_text_format() {
        let om = "# HELP a_b Help.\n# TYPE a_b counter\na_b_total{x=\"1\"} 2\n# HELP g G.\n# TYPE g gauge\ng 1\n# EOF\n";
        assert_eq!(
            super::prometheus_text(om),
            "# HELP a_b_total Help.\n# TYPE a_b_total counter\na_b_total{x=\"1\"} 2\n# HELP g G.\n# TYPE g gauge\ng 1\n"
        );
    }
}

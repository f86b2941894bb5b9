//! The server's statistics as a test reads them: `GET /metrics` on its `--metrics` listener
//! (Prometheus text format), and the sum of one metric over the series whose labels match.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// One scrape: the exposition text.
pub struct Metrics(pub String);

/// `GET /metrics` from `addr`, retried for up to 10 s while the listener is not up yet.
pub fn scrape(addr: SocketAddr) -> Metrics {
    let t0 = Instant::now();
    loop {
        match try_scrape(addr) {
            Ok(m) => return m,
            Err(e) if t0.elapsed() > Duration::from_secs(10) => {
                panic!("cannot scrape http://{addr}/metrics: {e}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

fn try_scrape(addr: SocketAddr) -> std::io::Result<Metrics> {
    let mut c = TcpStream::connect(addr)?;
    c.set_read_timeout(Some(Duration::from_secs(10)))?;
    // HTTP/1.0: the body comes unchunked and ends with the connection.
    c.write_all(b"GET /metrics HTTP/1.0\r\nHost: metrics\r\n\r\n")?;
    let mut raw = String::new();
    c.read_to_string(&mut raw)?;
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head from {addr}: {raw:?}"));
    assert!(
        head.starts_with("HTTP/1.") && head[8..].starts_with(" 200"),
        "{head}"
    );
    Ok(Metrics(body.to_owned()))
}

impl Metrics {
    /// Every sample, by its series as exposed (`name{labels}`).
    pub fn samples(&self) -> std::collections::HashMap<String, f64> {
        self.0
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(sample)
            .map(|(series, v)| (series.to_owned(), v))
            .collect()
    }

    /// The sum of `name`'s samples whose labels include every `(label, value)` of `want`
    /// (all of them when `want` is empty). Every metric read here is a count: integral.
    pub fn sum(&self, name: &str, want: &[(&str, &str)]) -> u64 {
        let mut total = 0.0;
        for line in self.0.lines().filter(|l| !l.starts_with('#')) {
            let Some((series, value)) = sample(line) else {
                continue;
            };
            let (metric, labels) = match series.split_once('{') {
                Some((m, rest)) => (m, labels(rest.trim_end_matches('}'))),
                None => (series, Vec::new()),
            };
            if metric == name && want.iter().all(|&(k, v)| labels.contains(&(k, v))) {
                total += value;
            }
        }
        assert_eq!(total.fract(), 0.0, "{name} {want:?} = {total}: not a count");
        total as u64
    }
}

/// `series value [timestamp]` → (series, value).
fn sample(line: &str) -> Option<(&str, f64)> {
    // The series ends at the closing brace (label values may hold spaces) or the first space.
    let end = match line.find('{') {
        Some(_) => line.rfind('}')? + 1,
        None => line.find(' ')?,
    };
    let value = line[end..].split_whitespace().next()?.parse().ok()?;
    Some((&line[..end], value))
}

/// `a="x",b="y"` → [(a, x), (b, y)] (values as written: the labels read here need no unescaping).
fn labels(s: &str) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    let mut rest = s;
    while let Some((key, after)) = rest.split_once("=\"") {
        let close = after.find('"').unwrap_or(after.len());
        out.push((key.trim_start_matches(',').trim(), &after[..close]));
        rest = after.get(close + 1..).unwrap_or("");
    }
    out
}

//! The server's statistics as a test reads them: `GET /metrics` on its `--metrics` listener
//! (Prometheus text format), and the sum of one metric over the series whose labels match.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// One scrape: the exposition text.
pub(crate) struct Metrics(pub String);

/// `GET /metrics` from `addr`, retried for up to 10 s while the listener is not up yet.
pub(crate) fn scrape(addr: SocketAddr) -> Metrics {
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
    pub(crate) fn samples(&self) -> std::collections::HashMap<String, f64> {
        self.0
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(sample)
            .map(|(series, v)| (series.to_owned(), v))
            .collect()
    }

    /// The sum of `name`'s samples whose labels include every `(label, value)` of `want`
    /// (all of them when `want` is empty). Every metric read here is a count: integral.
    pub(crate) fn sum(&self, name: &str, want: &[(&str, &str)]) -> u64 {
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

/// The server's own counts at exit, from the statistics summary it prints on stderr then
/// (its last `loadterm statistics:` block; zero counts are left out): (served, aborted) of
/// protocol `proto` (`h1`, `h2`, `h3`). Lines such as `  h1 requests  2xx 12, 4xx 4` and
/// `  aborted      h2 1, h3 2`.
pub(crate) fn exit_summary(stderr: &str, proto: &str) -> (u64, u64) {
    let block = stderr
        .rsplit_once("loadterm statistics:")
        .unwrap_or_else(|| panic!("no statistics summary at exit in:\n{stderr}"))
        .1;
    // `key n, key n, ...` → the sum of n over the keys `key` accepts.
    let items = |rest: &str, key: &dyn Fn(&str) -> bool| -> u64 {
        rest.split(", ")
            .filter_map(|item| item.trim().rsplit_once(' '))
            .filter(|(k, _)| key(k))
            .map(|(_, n)| n.parse::<u64>().expect("a count"))
            .sum()
    };
    let (mut served, mut aborted) = (0, 0);
    for line in block.lines().map(str::trim_start) {
        if let Some(rest) = line.strip_prefix(&format!("{proto} requests")) {
            served += items(rest, &|_| true);
        } else if let Some(rest) = line.strip_prefix("aborted ") {
            aborted += items(rest, &|k| k == proto);
        }
    }
    (served, aborted)
}

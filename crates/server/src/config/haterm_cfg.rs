//! haterm's `-G` (global) and `-F` (frontend) values: HAProxy configuration lines, of which
//! loadterm understands the subset benchmark setups use. Sans-I/O: text in, directives and
//! warnings out (nothing is resolved, opened or bound here); `cli` applies them. Every rule
//! about what a line means is decided here; docs/COMPATIBILITY.md has the table.

use crate::config::TCP_ALPN;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

/// One understood line.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Directive {
    /// `nbthread N`
    Threads(usize),
    /// `maxconn N`
    MaxConn(usize),
    /// `timeout client T`
    TimeoutClient(Duration),
    /// `option accept-unsafe-violations-in-http-request`
    Lenient,
    /// `bind ADDR [options]`
    Bind(Bind),
    /// `cpu-map [auto:]1[/THREADS] CPUS`
    CpuMap(CpuMap),
    /// `tune.pipesize N`: capacity asked for the splice pipes.
    PipeSize(usize),
    /// `ssl-default-bind-ciphersuites LIST` (TLS 1.3, `:`-separated OpenSSL names).
    Ciphersuites(String),
    /// `ssl-default-bind-ciphers LIST` (TLS 1.2, `:`-separated OpenSSL names).
    Ciphers(String),
    /// `ssl-default-bind-curves LIST` (`:`-separated).
    Curves(String),
    /// A line with nothing to do (blank, `limited-quic`, or not understood: see the warnings).
    Nothing,
}

/// A line's meaning and what the user should be told about it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ParsedLine {
    pub directive: Directive,
    pub warnings: Vec<String>,
}

impl ParsedLine {
    fn ok(directive: Directive) -> ParsedLine {
        ParsedLine {
            directive,
            warnings: Vec::new(),
        }
    }

    fn ignored(why: String) -> ParsedLine {
        ParsedLine {
            directive: Directive::Nothing,
            warnings: vec![why],
        }
    }
}

/// Where a bind line listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BindTransport {
    Tcp,
    /// `quic4@` / `quic6@`: QUIC on UDP, HTTP/3.
    Quic,
}

/// An understood `bind` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Bind {
    pub transport: BindTransport,
    pub addr: SocketAddr,
    /// TLS (always true on QUIC).
    pub ssl: bool,
    /// `crt` files or directories, in order; empty: the default certificate (generated or
    /// `--cert`).
    pub crt: Vec<PathBuf>,
    /// ALPN protocols offered on TLS/TCP, most preferred first (registered tokens). QUIC
    /// offers `h3` only.
    pub alpn: Vec<String>,
}

/// Which threads a `cpu-map` line pins, and to which CPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CpuMap {
    /// `auto:`: threads and CPUs paired one to one, in order; otherwise every thread may run
    /// on every CPU of the set.
    pub auto: bool,
    /// 1-based thread numbers, or `None` for all threads.
    pub threads: Option<(usize, usize)>,
    pub cpus: Vec<usize>,
}

/// A `-G`/`-F` value as haterm turns it into configuration lines: `\n` starts a new line, `\t`
/// is a TAB, `\` followed by another character is that character, a trailing lone `\` is
/// dropped.
pub(crate) fn lines(value: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        let line = out.last_mut().expect("never empty");
        if c != '\\' {
            line.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push(String::new()),
            Some('t') => line.push('\t'),
            Some(other) => line.push(other),
            None => {}
        }
    }
    out.retain(|l| !l.trim().is_empty());
    out
}

fn positive(line: &str, what: &str, v: Option<&&str>) -> Result<usize, String> {
    v.and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("'{line}': {what} needs a positive number"))
}

/// One configuration line. `Err` for a line loadterm understands but cannot honour as
/// written (a listener it cannot open, a malformed number): going on would run something else
/// than what was asked for.
pub(crate) fn parse(line: &str) -> Result<ParsedLine, String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    Ok(match words.as_slice() {
        [] | ["limited-quic"] => ParsedLine::ok(Directive::Nothing),
        ["nbthread", rest @ ..] => ParsedLine::ok(Directive::Threads(positive(
            line,
            "nbthread",
            rest.first(),
        )?)),
        ["maxconn", rest @ ..] => {
            ParsedLine::ok(Directive::MaxConn(positive(line, "maxconn", rest.first())?))
        }
        ["timeout", "client", v] => match loadterm_plan::units::parse_duration(v) {
            Ok(d) if !d.is_zero() => ParsedLine::ok(Directive::TimeoutClient(d)),
            Ok(_) => return Err(format!("'{line}': the timeout must be positive")),
            Err(e) => return Err(format!("'{line}': {e}")),
        },
        ["option", "accept-unsafe-violations-in-http-request"] => {
            ParsedLine::ok(Directive::Lenient)
        }
        ["bind", rest @ ..] => bind(line, rest)?,
        ["cpu-map", rest @ ..] => ParsedLine::ok(Directive::CpuMap(cpu_map(line, rest)?)),
        ["tune.pipesize", rest @ ..] => ParsedLine::ok(Directive::PipeSize(positive(
            line,
            "tune.pipesize",
            rest.first(),
        )?)),
        ["tune.bufsize", ..] => ParsedLine::ignored(format!(
            "'{line}' has no effect: loadterm's buffers are sized per protocol (HTTP/1 request \
             heads up to 16 KiB, haterm's default limit)"
        )),
        ["ssl-default-bind-ciphersuites", list] => {
            ParsedLine::ok(Directive::Ciphersuites(list.to_string()))
        }
        ["ssl-default-bind-ciphers", list] => ParsedLine::ok(Directive::Ciphers(list.to_string())),
        ["ssl-default-bind-curves", list] => ParsedLine::ok(Directive::Curves(list.to_string())),
        _ => ParsedLine::ignored(format!("ignoring haterm configuration line '{line}'")),
    })
}

/// Bind keywords that take one argument (their argument is not an option of its own).
const BIND_ONE_ARG: &[&str] = &[
    "accept-netscaler-cdp",
    "backlog",
    "ca-file",
    "ca-ignore-err",
    "ca-sign-file",
    "ca-sign-pass",
    "ca-verify-file",
    "ciphers",
    "ciphersuites",
    "client-sigalgs",
    "crl-file",
    "crt-ignore-err",
    "crt-list",
    "curves",
    "ecdhe",
    "gid",
    "group",
    "guid-prefix",
    "id",
    "interface",
    "ktls",
    "label",
    "level",
    "maxconn",
    "mode",
    "mss",
    "name",
    "namespace",
    "nice",
    "npn",
    "proto",
    "quic-cc-algo",
    "quic-socket",
    "severity-output",
    "sigalgs",
    "ssl-max-ver",
    "ssl-min-ver",
    "tcp-ut",
    "thread",
    "uid",
    "user",
    "verify",
];

fn bind(line: &str, words: &[&str]) -> Result<ParsedLine, String> {
    let Some((&addr, mut opts)) = words.split_first() else {
        return Err(format!("'{line}': bind needs an address"));
    };
    let (transport, addr) = bind_address(addr).map_err(|e| format!("'{line}': {e}"))?;
    let mut b = Bind {
        transport,
        addr,
        ssl: false,
        crt: Vec::new(),
        alpn: Vec::new(),
    };
    let mut alpn: Option<Vec<String>> = None;
    let mut warnings = Vec::new();
    while let Some((&kw, rest)) = opts.split_first() {
        opts = rest;
        let mut arg = || -> Result<&str, String> {
            let (&v, rest) = opts
                .split_first()
                .ok_or_else(|| format!("'{line}': '{kw}' needs an argument"))?;
            opts = rest;
            Ok(v)
        };
        match kw {
            "ssl" => b.ssl = true,
            "crt" => b.crt.push(PathBuf::from(arg()?)),
            "alpn" => alpn = Some(arg()?.split(',').map(str::to_owned).collect()),
            "no-alpn" => alpn = Some(Vec::new()),
            // `by-thread` is what loadterm always does: one SO_REUSEPORT socket per thread.
            "shards" => match arg()? {
                "by-thread" => {}
                v => warnings.push(format!(
                    "bind option 'shards {v}' has no effect: loadterm opens one socket per thread"
                )),
            },
            kw if BIND_ONE_ARG.contains(&kw) => {
                let v = arg()?;
                warnings.push(format!("bind option '{kw} {v}' has no effect in loadterm"));
            }
            kw => warnings.push(format!("bind option '{kw}' has no effect in loadterm")),
        }
    }
    match transport {
        BindTransport::Quic => {
            if !b.ssl {
                return Err(format!("'{line}': QUIC needs 'ssl' (and a 'crt')"));
            }
            if alpn.is_some_and(|a| a.iter().any(|p| p != "h3")) {
                warnings.push(format!(
                    "'{line}': QUIC binds serve HTTP/3 only (ALPN h3); other protocols ignored"
                ));
            }
            b.alpn = vec!["h3".to_owned()];
        }
        BindTransport::Tcp if !b.ssl => {
            if !b.crt.is_empty() || alpn.is_some() {
                warnings.push(format!(
                    "'{line}': 'crt' and 'alpn' need 'ssl': this bind serves clear text"
                ));
                b.crt.clear();
            }
        }
        BindTransport::Tcp => {
            let list = alpn.unwrap_or_else(|| TCP_ALPN.iter().map(|p| p.to_string()).collect());
            for p in list {
                // haterm's own lines say `http1.1`/`http1.0` (unregistered tokens no client
                // offers): taken as the registered ones.
                let p = match p.as_str() {
                    "http1.1" => "http/1.1",
                    "http1.0" => "http/1.0",
                    p => p,
                };
                match p {
                    "h2" | "http/1.1" | "http/1.0" => {
                        if !b.alpn.iter().any(|q| q == p) {
                            b.alpn.push(p.to_owned());
                        }
                    }
                    "h3" => warnings.push(format!(
                        "'{line}': ALPN h3 over TCP (HAProxy's experimental QMux) is not \
                         served; HTTP/3 needs a quic4@/quic6@ bind"
                    )),
                    other => warnings.push(format!("'{line}': unknown ALPN '{other}' ignored")),
                }
            }
        }
    }
    Ok(ParsedLine {
        directive: Directive::Bind(b),
        warnings,
    })
}

/// `IP:PORT`, `:PORT`, `*:PORT`, `[v6]:PORT`, `v6:PORT` (the last colon ends the address, as
/// in HAProxy), each optionally after `ipv4@`, `ipv6@`, `quic4@` or `quic6@`.
fn bind_address(s: &str) -> Result<(BindTransport, SocketAddr), String> {
    let (transport, family, rest) = match s.split_once('@') {
        None => (BindTransport::Tcp, None, s),
        Some(("ipv4", r)) => (BindTransport::Tcp, Some(4), r),
        Some(("ipv6", r)) => (BindTransport::Tcp, Some(6), r),
        Some(("quic4", r)) => (BindTransport::Quic, Some(4), r),
        Some(("quic6", r)) => (BindTransport::Quic, Some(6), r),
        Some((p, _)) => return Err(format!("address prefix '{p}@' is not supported")),
    };
    let (host, port) = rest
        .rsplit_once(':')
        .ok_or_else(|| format!("'{s}': expected IP:PORT"))?;
    let port: u16 = port.parse().map_err(|_| {
        format!("'{s}': invalid port '{port}' (port ranges and lists are not supported)")
    })?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let ip = match host {
        "" | "*" | "0.0.0.0" if family != Some(6) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        "" | "*" | "::" => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        h => h
            .parse::<IpAddr>()
            .map_err(|_| format!("'{s}': '{h}' is not an IP address"))?,
    };
    match (family, ip) {
        (Some(4), IpAddr::V6(_)) | (Some(6), IpAddr::V4(_)) => {
            Err(format!("'{s}': the address does not match the prefix"))
        }
        _ => Ok((transport, SocketAddr::new(ip, port))),
    }
}

/// `cpu-map [auto:]<group>[/<threads>] <cpu-set>...`; one thread group (`1` or `all`),
/// threads `all`, `N` or `N-M`; CPUs as numbers and ranges, separated by commas or spaces.
fn cpu_map(line: &str, words: &[&str]) -> Result<CpuMap, String> {
    let usage = || format!("'{line}': expected cpu-map [auto:]1[/THREADS] CPUS");
    let (&who, cpus) = words.split_first().ok_or_else(usage)?;
    let (auto, who) = match who.strip_prefix("auto:") {
        Some(w) => (true, w),
        None => (false, who),
    };
    let (group, threads) = match who.split_once('/') {
        Some((g, t)) => (g, Some(t)),
        None => (who, None),
    };
    if !matches!(group, "1" | "all") {
        return Err(format!(
            "'{line}': loadterm has one thread group (use 1/<threads>)"
        ));
    }
    let threads = match threads {
        None | Some("all") => None,
        Some(t) => {
            let r = range(t).ok_or_else(usage)?;
            if r.0 == 0 {
                return Err(format!("'{line}': threads are numbered from 1"));
            }
            Some(r)
        }
    };
    let mut set = Vec::new();
    for part in cpus
        .iter()
        .flat_map(|w| w.split(','))
        .filter(|p| !p.is_empty())
    {
        let (a, b) = range(part).ok_or_else(usage)?;
        set.extend(a..=b);
    }
    if set.is_empty() {
        return Err(usage());
    }
    Ok(CpuMap {
        auto,
        threads,
        cpus: set,
    })
}

/// `N` or `N-M` (N ≤ M).
fn range(s: &str) -> Option<(usize, usize)> {
    let (a, b) = s.split_once('-').unwrap_or((s, s));
    let (a, b) = (a.parse().ok()?, b.parse().ok()?);
    (a <= b).then_some((a, b))
}

/// The CPUs each of `threads` worker threads is pinned to (empty: not pinned), from the
/// `cpu-map` lines in order (a later line overrides an earlier one for the same thread), and
/// warnings for threads that do not exist.
pub(crate) fn pinning(
    maps: &[CpuMap],
    threads: usize,
) -> Result<(Vec<Vec<usize>>, Vec<String>), String> {
    let mut out = vec![Vec::new(); threads];
    let mut warnings = Vec::new();
    for m in maps {
        let (first, last) = m.threads.unwrap_or((1, threads));
        let named: Vec<usize> = (first..=last).collect();
        if m.auto && named.len() != m.cpus.len() && m.cpus.len() != 1 {
            return Err(format!(
                "cpu-map auto: {} thread(s) for {} CPU(s); give as many of each",
                named.len(),
                m.cpus.len()
            ));
        }
        for (i, &t) in named.iter().enumerate() {
            let Some(slot) = out.get_mut(t - 1) else {
                warnings.push(format!(
                    "cpu-map: thread {t} does not exist ({threads} thread(s)); not pinned"
                ));
                break;
            };
            *slot = if m.auto && m.cpus.len() > 1 {
                vec![m.cpus[i]]
            } else {
                m.cpus.clone()
            };
        }
    }
    Ok((out, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn directive(line: &str) -> Directive {
        parse(line).unwrap().directive
    }

    fn bind_of(line: &str) -> (Bind, Vec<String>) {
        let p = parse(line).unwrap();
        match p.directive {
            Directive::Bind(b) => (b, p.warnings),
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn escapes_split_and_join_lines() {
        assert_eq!(lines("nbthread 2"), ["nbthread 2"]);
        assert_eq!(
            lines("nbthread 2\\nmaxconn 9\\n"),
            ["nbthread 2", "maxconn 9"]
        );
        assert_eq!(lines("a\\tb\\\\c\\"), ["a\tb\\c"]);
        assert!(lines("").is_empty());
    }

    #[test]
    fn global_settings() {
        assert_eq!(directive("nbthread 3"), Directive::Threads(3));
        assert_eq!(directive("maxconn  50"), Directive::MaxConn(50));
        assert_eq!(
            directive("timeout client 2s"),
            Directive::TimeoutClient(Duration::from_secs(2))
        );
        assert_eq!(
            directive("option accept-unsafe-violations-in-http-request"),
            Directive::Lenient
        );
        assert_eq!(directive("limited-quic"), Directive::Nothing);
        assert_eq!(
            directive("tune.pipesize 262144"),
            Directive::PipeSize(262144)
        );
        assert_eq!(
            directive("ssl-default-bind-curves X25519:P-256"),
            Directive::Curves("X25519:P-256".into())
        );
        for bad in [
            "nbthread 0",
            "nbthread",
            "maxconn x",
            "timeout client 0",
            "tune.pipesize -1",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        let p = parse("tune.bufsize 32768").unwrap();
        assert_eq!(p.directive, Directive::Nothing);
        assert!(p.warnings[0].contains("no effect"));
        let p = parse("stats socket /tmp/s").unwrap();
        assert_eq!(
            p.warnings,
            ["ignoring haterm configuration line 'stats socket /tmp/s'"]
        );
    }

    #[test]
    fn the_seed_bind_lines() {
        let (b, w) = bind_of("bind quic4@127.0.0.1:18452 ssl crt /mnt/combined.pem alpn h3");
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(
            b,
            Bind {
                transport: BindTransport::Quic,
                addr: "127.0.0.1:18452".parse().unwrap(),
                ssl: true,
                crt: vec!["/mnt/combined.pem".into()],
                alpn: vec!["h3".into()],
            }
        );
        let (b, w) = bind_of("bind 127.0.0.1:18452 ssl crt /mnt/combined.pem alpn h2");
        assert!(w.is_empty(), "{w:?}");
        assert_eq!((b.transport, b.ssl), (BindTransport::Tcp, true));
        assert_eq!(b.alpn, ["h2"]);
    }

    #[test]
    fn bind_addresses() {
        let addr = |l: &str| bind_of(l).0.addr;
        let t = |l: &str| bind_of(l).0.transport;
        assert_eq!(addr("bind :8080"), "0.0.0.0:8080".parse().unwrap());
        assert_eq!(addr("bind *:8080"), "0.0.0.0:8080".parse().unwrap());
        assert_eq!(addr("bind [::1]:8080"), "[::1]:8080".parse().unwrap());
        assert_eq!(addr("bind ::1:8080"), "[::1]:8080".parse().unwrap());
        assert_eq!(addr("bind ipv6@:8080"), "[::]:8080".parse().unwrap());
        assert_eq!(addr("bind ipv4@10.0.0.1:1"), "10.0.0.1:1".parse().unwrap());
        assert_eq!(
            addr("bind quic6@[::1]:443 ssl"),
            "[::1]:443".parse().unwrap()
        );
        assert_eq!(t("bind quic6@:443 ssl"), BindTransport::Quic);
        assert_eq!(t("bind ipv6@:443"), BindTransport::Tcp);
        for bad in [
            "bind",
            "bind 8080",
            "bind host.example:80",
            "bind :80-90",
            "bind unix@/tmp/s:1",
            "bind ipv4@[::1]:80",
            "bind quic4@:443",
            "bind :443 ssl crt",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn bind_options() {
        // No alpn on TLS/TCP: HAProxy's default for HTTP.
        let (b, w) = bind_of("bind :443 ssl crt a.pem crt dir/");
        assert!(w.is_empty());
        assert_eq!(b.alpn, TCP_ALPN);
        assert_eq!(b.crt, [PathBuf::from("a.pem"), PathBuf::from("dir/")]);
        // haterm's own TLS line: its tokens mapped, h3 over TCP refused with a warning,
        // `shards by-thread` understood, `ktls on` named.
        let (b, w) = bind_of(
            "bind 127.0.0.1:8889 shards by-thread ssl alpn h3,h2,http1.1,http1.0 crt x.rsa crt x.ecdsa ktls on",
        );
        assert_eq!(b.alpn, ["h2", "http/1.1", "http/1.0"]);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0] == "bind option 'ktls on' has no effect in loadterm" && w[1].contains("QMux"));
        // Unknown flags and one-argument options are named, arguments not taken as options.
        let (_, w) = bind_of("bind :80 v4v6 name web thread 1-2 tfo");
        assert_eq!(
            w,
            [
                "bind option 'v4v6' has no effect in loadterm",
                "bind option 'name web' has no effect in loadterm",
                "bind option 'thread 1-2' has no effect in loadterm",
                "bind option 'tfo' has no effect in loadterm",
            ]
        );
        let (b, w) = bind_of("bind :80 crt x.pem");
        assert!(!b.ssl && b.crt.is_empty() && w[0].contains("need 'ssl'"));
        let (b, _) = bind_of("bind :443 ssl no-alpn");
        assert!(b.alpn.is_empty());
        let (b, w) = bind_of("bind quic4@:443 ssl alpn h2");
        assert_eq!((b.alpn, w.len()), (vec!["h3".to_owned()], 1));
    }

    #[test]
    fn cpu_maps() {
        let m = |l: &str| match directive(l) {
            Directive::CpuMap(m) => m,
            other => panic!("{other:?}"),
        };
        let seed = m("cpu-map auto:1/1-2 0-1");
        assert_eq!(
            seed,
            CpuMap {
                auto: true,
                threads: Some((1, 2)),
                cpus: vec![0, 1]
            }
        );
        assert_eq!(
            pinning(std::slice::from_ref(&seed), 2).unwrap().0,
            [vec![0], vec![1]]
        );
        // A third thread is left alone; a missing second is named.
        assert_eq!(
            pinning(std::slice::from_ref(&seed), 3).unwrap().0,
            [vec![0], vec![1], vec![]]
        );
        let (pins, w) = pinning(&[seed], 1).unwrap();
        assert_eq!((pins, w.len()), (vec![vec![0]], 1));
        // Without auto: every thread on the whole set; later lines win.
        let all = m("cpu-map 1/all 2,4 6-7");
        assert_eq!(all.cpus, [2, 4, 6, 7]);
        let one = m("cpu-map 1/2 3");
        assert_eq!(
            pinning(&[all, one], 2).unwrap().0,
            [vec![2, 4, 6, 7], vec![3]]
        );
        assert_eq!(m("cpu-map all 0").threads, None);
        assert!(pinning(&[m("cpu-map auto:1/1-3 0-1")], 3).is_err());
        for bad in [
            "cpu-map",
            "cpu-map 1/1",
            "cpu-map 2/1 0",
            "cpu-map 1/0 0",
            "cpu-map 1/1 3-1",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}

//! `loadterm serve` command line, including haterm's options (`-L`, `-G 'nbthread 1'`, `-C`, `-v`...).

use crate::config::haterm_cfg::{self, Directive};
use crate::config::listen::{self, ListenSpec, Listener, ListenerKind};
use crate::config::tls::{self, CertSource, Curve, Identity, Policy};
use crate::config::Config;
use crate::plumbing::shutdown::Shutdown;
use crate::plumbing::stats::Totals;
use anyhow::{Context, Result};
use loadterm_plan::exit::usage_error;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::signal::unix::{signal, SignalKind};

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Listener: [<ip>]:<clear port>[:<TLS+QUIC port>], IPv6 in brackets; repeatable.
    /// Default: 127.0.0.1:8888:8889.
    #[arg(short = 'L', long = "listen", value_name = "[IP]:CLEAR[:TLS]")]
    listen: Vec<ListenSpec>,
    /// Worker threads (default: the CPUs this process may run on).
    #[arg(short = 't', long)]
    threads: Option<usize>,
    /// Client timeout: incomplete requests (408), idle keep-alive, and clients that stop reading.
    #[arg(long, default_value = "25s", value_parser = parse_timeout)]
    timeout: Duration,
    /// Most connections served at once (more are closed on accept).
    #[arg(long, default_value_t = 100_000)]
    maxconn: usize,
    /// RSA key size of the generated certificate (2048, 3072 or 4096).
    #[arg(
        short = 'b',
        long = "rsa-bits",
        default_value_t = 2048,
        value_name = "BITS"
    )]
    rsa_bits: u32,
    /// ECDSA curve of the generated certificate (P-256 or P-384).
    #[arg(
        short = 'c',
        long = "curve",
        default_value = "P-256",
        value_name = "CURVE"
    )]
    curve: Curve,
    /// PEM file with certificate chain and private key (HAProxy's `crt` format), or a
    /// directory of them chosen by SNI, instead of a generated certificate.
    #[arg(long, value_name = "FILE")]
    cert: Option<PathBuf>,
    /// Write the generated certificates (PEM) here, for clients to trust.
    #[arg(long, value_name = "FILE")]
    cert_out: Option<PathBuf>,
    /// Do not serve HTTP/3 on the UDP twin of the TLS ports.
    #[arg(long)]
    no_quic: bool,
    /// Advertise HTTP/3 on the TLS ports' responses (`alt-svc: h3=":PORT"; ma=86400`), so
    /// browsers and other clients that discover HTTP/3 this way find it.
    #[arg(long)]
    alt_svc: bool,
    /// Accept 0-RTT early data on resumed HTTP/3 connections (off by default: early data can
    /// be replayed by an attacker, RFC 8446 §8, RFC 9001 §9.2; TLS over TCP never takes it).
    #[arg(long = "0rtt")]
    zero_rtt: bool,
    /// Compute each TLS and QUIC client's JA4 fingerprint (FoxIO's JA4 of its ClientHello):
    /// returned as `x-ja4` on every response of the connection, the most frequent printed at
    /// shutdown.
    #[arg(long)]
    ja4: bool,
    /// After SIGINT/SIGTERM, how long in-flight requests may take to finish (idle connections
    /// close at once, HTTP/2 and HTTP/3 with GOAWAY); a second signal exits at once.
    #[arg(long, default_value = "5s", value_parser = loadterm_plan::units::parse_duration, value_name = "DURATION")]
    grace: Duration,
    /// Serve the statistics (Prometheus/OpenMetrics text) at `http://ADDR/metrics`, from a
    /// thread of its own; without it, no admin listener. The same counts are printed on
    /// SIGUSR1 and at shutdown either way.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<std::net::SocketAddr>,
    /// Print the version and exit (haterm's -v).
    #[arg(short = 'v')]
    version: bool,
    /// Print the effective configuration and exit (haterm's -C).
    #[arg(short = 'C')]
    dump_config: bool,
    /// haterm "global" line; understood: `nbthread N`, `maxconn N`, `timeout client T`,
    /// `cpu-map`, `tune.pipesize N`, `ssl-default-bind-ciphersuites|ciphers|curves`,
    /// `limited-quic` (no effect), `option accept-unsafe-violations-in-http-request` (= --lenient);
    /// others are ignored with a warning (table in docs/COMPATIBILITY.md).
    #[arg(short = 'G', value_name = "LINE")]
    global: Vec<String>,
    /// haterm "frontend" line: `bind ADDR [ssl] [crt FILE|DIR]... [alpn LIST]` (ADDR: IP:PORT,
    /// :PORT, [v6]:PORT, ipv4@, ipv6@, quic4@, quic6@), and the same subset as -G.
    #[arg(short = 'F', value_name = "LINE")]
    frontend: Vec<String>,
    /// haterm "traces" line: accepted and ignored (loadterm has no HAProxy traces).
    #[arg(short = 'T', value_name = "LINE")]
    traces: Vec<String>,
    /// haterm's -d (protocol traces): accepted and ignored, with a warning.
    #[arg(short = 'd')]
    debug: bool,
    /// haterm's -D (daemon) is refused: run loadterm under a supervisor or with `&`.
    #[arg(short = 'D', hide = true)]
    daemon: bool,
    /// Accept HTTP/1.x requests haterm accepts but RFC 9112 forbids: no or several Host fields,
    /// any request-target, bare LF line ends, Transfer-Encoding on HTTP/1.0. What decides where a
    /// request ends (Content-Length, Transfer-Encoding, chunked syntax) stays strict.
    /// Also: `-G 'option accept-unsafe-violations-in-http-request'`.
    #[arg(long)]
    lenient: bool,
    /// No `date` field on responses (RFC 9110 §6.6.1 asks an origin server with a clock for one;
    /// haterm sends none: this gives its byte-exact heads).
    #[arg(long)]
    no_date: bool,
    /// Calibration only (`loadterm ab --calibrate`): spin for this extra percentage of the
    /// server's own measured CPU cost per request, a known injected effect.
    #[arg(long, value_name = "PERCENT", default_value_t = 0.0)]
    burn: f64,
    /// Seed the random draws (`r` suffix, distributions, `p` pieces) for reproducible runs:
    /// worker thread n starts from a seed derived from N and n (exactly reproducible with -t 1).
    #[arg(long, value_name = "N")]
    seed: Option<u32>,
    /// haterm's -dS: no splice(): large clear-text HTTP/1 bodies are copied with writev
    /// instead of spliced from the static body blocks.
    #[arg(long)]
    no_splice: bool,
    /// haterm's -dZ: no zero-copy forwarding (accepted for compatibility).
    #[arg(long)]
    no_zero_copy: bool,
    /// haterm's -dT: no kernel TLS (loadterm does not use kTLS; accepted for compatibility).
    #[arg(long, hide = true)]
    no_ktls: bool,
    /// haterm's extra bind options: accepted, ignored with a warning.
    #[arg(long, value_name = "OPTS")]
    tcp_bind_opts: Option<String>,
    /// haterm's extra QUIC bind options: accepted, ignored with a warning.
    #[arg(long, value_name = "OPTS")]
    quic_bind_opts: Option<String>,
    #[command(flatten)]
    h2: crate::config::H2Args,
    #[command(flatten)]
    h3: crate::config::H3Args,
}

/// The client timeout: a positive duration.
fn parse_timeout(s: &str) -> Result<Duration, String> {
    match loadterm_plan::units::parse_duration(s)? {
        d if d.is_zero() => Err(format!("timeout '{s}' must be positive")),
        d => Ok(d),
    }
}

fn cpus_available() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// What the -G/-F lines ask for beyond `Config`'s settings.
#[derive(Debug, Default)]
struct Lines {
    threads: Option<usize>,
    binds: Vec<Listener>,
    cpu_maps: Vec<haterm_cfg::CpuMap>,
    policy: Policy,
}

/// Apply haterm's -G/-F values (each one or more lines), in order; warnings are printed.
fn apply_haproxy_lines<'a>(
    values: impl Iterator<Item = &'a String>,
    cfg: &mut Config,
) -> Result<Lines> {
    let mut out = Lines::default();
    for line in values.flat_map(|v| haterm_cfg::lines(v)) {
        let parsed = haterm_cfg::parse(&line).map_err(usage_error)?;
        warn(&parsed.warnings);
        match parsed.directive {
            Directive::Threads(n) => out.threads = Some(n),
            Directive::MaxConn(n) => cfg.maxconn = n,
            Directive::TimeoutClient(d) => cfg.timeout = d,
            Directive::Lenient => cfg.lenient = true,
            Directive::PipeSize(n) => cfg.pipe_size = n,
            Directive::Bind(b) => {
                let kind = match (b.transport, b.ssl) {
                    (haterm_cfg::BindTransport::Quic, _) => ListenerKind::Quic,
                    (haterm_cfg::BindTransport::Tcp, true) => ListenerKind::Tls,
                    (haterm_cfg::BindTransport::Tcp, false) => ListenerKind::Clear,
                };
                out.binds.push(Listener {
                    kind,
                    addr: b.addr,
                    crt: b.crt,
                    alpn: b.alpn,
                });
            }
            Directive::CpuMap(m) => out.cpu_maps.push(m),
            Directive::Ciphersuites(l) => out.policy.ciphersuites = Some(l),
            Directive::Ciphers(l) => out.policy.ciphers = Some(l),
            Directive::Curves(l) => out.policy.curves = Some(l),
            Directive::Nothing => {}
        }
    }
    Ok(out)
}

fn warn(warnings: &[String]) {
    for w in warnings {
        eprintln!("loadterm: warning: {w}");
    }
}

/// Each worker's CPUs from the `cpu-map` lines, refused if they name a CPU this process may
/// not use.
fn pinning(maps: &[haterm_cfg::CpuMap], threads: usize) -> Result<Vec<Vec<usize>>> {
    if maps.is_empty() {
        return Ok(Vec::new());
    }
    let (pins, warnings) = haterm_cfg::pinning(maps, threads).map_err(usage_error)?;
    warn(&warnings);
    let allowed = loadterm_runtime::cpus::allowed().context("sched_getaffinity")?;
    if let Some(cpu) = pins.iter().flatten().find(|c| !allowed.contains(c)) {
        return Err(usage_error(format!(
            "cpu-map: CPU {cpu} is not available to this process (allowed: {allowed:?})"
        )));
    }
    Ok(pins)
}

pub fn run(a: ServeArgs) -> Result<()> {
    if a.version {
        println!("loadterm version {}", env!("CARGO_PKG_VERSION"));
        return Ok(());
    }
    check(&a)?;
    crate::plumbing::thread_ctx::set_burn(a.burn);
    let (stop, shutdown) = Shutdown::new();
    let (cfg, mut lines) = config(&a, shutdown)?;
    // The loopback defaults only when nothing at all says where to listen.
    let defaulted = a.listen.is_empty() && lines.binds.is_empty();
    let specs = if defaulted {
        vec![ListenSpec::default_loopback()]
    } else {
        a.listen.clone()
    };
    let mut listeners = listen::from_specs(&specs, cfg.quic);
    listeners.extend(std::mem::take(&mut lines.binds));
    listen::check_unique(&listeners).map_err(|e| usage_error(format!("{e:#}")))?;
    let source = cert_source(&a, &listeners);
    if a.dump_config {
        let extra = Extra {
            burn: a.burn,
            metrics: a.metrics,
            cert_out: a.cert_out.as_deref(),
        };
        print!(
            "{}",
            describe(&cfg, &listeners, &source, &lines, defaulted, &extra)
        );
        return Ok(());
    }
    let pins = pinning(&lines.cpu_maps, cfg.threads)?;
    let metrics = a.metrics.map(crate::plumbing::metrics::start).transpose()?;
    let (crypto, warnings) = lines.policy.crypto();
    warn(&warnings);
    let bound = identities(listeners, &source, crypto, a.cert_out.as_deref())?;
    let cfg = Arc::new(cfg);
    crate::plumbing::thread_ctx::seed(cfg.seed);
    let conns = crate::workers::start(cfg.clone(), &bound, &pins)?;
    announce(&bound, &cfg, defaulted, metrics);
    let r = shut_down_on_signal(stop, &conns, cfg.grace);
    eprint!("{}", Totals::now().summary());
    if let Some(stats) = &cfg.ja4 {
        eprint!("{}", stats.report());
    }
    r
}

/// The option combinations refused before anything starts.
fn check(a: &ServeArgs) -> Result<()> {
    if a.daemon {
        return Err(usage_error("-D (daemon mode) is not supported: run loadterm under a supervisor or in the background"));
    }
    if a.threads == Some(0) {
        return Err(usage_error("--threads must be at least 1"));
    }
    if a.alt_svc && a.no_quic {
        return Err(usage_error(
            "--alt-svc advertises HTTP/3, which --no-quic turns off",
        ));
    }
    if !(0.0..=1000.0).contains(&a.burn) {
        return Err(usage_error("--burn must be a percentage in [0, 1000]"));
    }
    Ok(())
}

/// The settings from the options, then haterm's -G/-F lines over them (what those lines ask
/// for beyond `Config` is returned with it); options loadterm has no use for are warned about.
fn config(a: &ServeArgs, shutdown: Shutdown) -> Result<(Config, Lines)> {
    let mut cfg = Config {
        timeout: a.timeout,
        threads: 0,
        maxconn: a.maxconn.max(1),
        quic: !a.no_quic,
        splice: !a.no_splice,
        pipe_size: crate::config::PIPE_SIZE,
        alt_svc: a.alt_svc,
        zero_rtt: a.zero_rtt,
        grace: a.grace,
        lenient: a.lenient,
        date: !a.no_date,
        seed: a.seed,
        ja4: a.ja4.then(Default::default),
        shutdown,
        h2: a.h2.clone(),
        h3: a.h3.clone(),
    };
    let lines = apply_haproxy_lines(a.global.iter().chain(&a.frontend), &mut cfg)?;
    cfg.threads = lines.threads.or(a.threads).unwrap_or_else(cpus_available);
    for (flag, set) in [("-d", a.debug), ("-T", !a.traces.is_empty())] {
        if set {
            eprintln!("loadterm: warning: {flag} (HAProxy traces) has no effect in loadterm");
        }
    }
    for (flag, v) in [
        ("--tcp-bind-opts", &a.tcp_bind_opts),
        ("--quic-bind-opts", &a.quic_bind_opts),
    ] {
        if let Some(v) = v {
            eprintln!("loadterm: warning: {flag} '{v}' has no effect in loadterm");
        }
    }
    Ok((cfg, lines))
}

/// `--cert`'s files, or a certificate generated for the listeners' addresses.
fn cert_source(a: &ServeArgs, listeners: &[Listener]) -> CertSource {
    match &a.cert {
        Some(path) => CertSource::Files(vec![path.clone()]),
        None => {
            let ips: Vec<_> = listeners.iter().map(|l| l.addr.ip()).collect();
            let (names, ips) = tls::default_sans(&ips);
            CertSource::Generate {
                rsa_bits: a.rsa_bits,
                curve: a.curve,
                names,
                ips,
            }
        }
    }
}

/// Each listener with the identity it presents: the default one (loaded if a listener or
/// `--cert-out` needs it, and written there) or its own `crt` list, each list loaded once.
fn identities(
    listeners: Vec<Listener>,
    source: &CertSource,
    crypto: tls::Crypto,
    cert_out: Option<&std::path::Path>,
) -> Result<Vec<crate::workers::Bound>> {
    let needs_default = listeners.iter().any(|l| l.secure() && l.crt.is_empty());
    let default = if needs_default || cert_out.is_some() {
        let id = Identity::load(source, crypto.clone()).context("TLS certificate")?;
        if let Some(out) = cert_out {
            std::fs::write(out, &id.generated_pem)
                .with_context(|| format!("cannot write {}", out.display()))?;
        }
        Some(Arc::new(id))
    } else {
        None
    };
    let mut loaded: HashMap<Vec<PathBuf>, Arc<Identity>> = HashMap::new();
    let mut bound = Vec::new();
    for l in listeners {
        let identity = match (l.secure(), l.crt.is_empty()) {
            (false, _) => None,
            (true, true) => default.clone(),
            (true, false) => Some(match loaded.get(&l.crt) {
                Some(id) => id.clone(),
                None => {
                    let id = Identity::load(&CertSource::Files(l.crt.clone()), crypto.clone())
                        .with_context(|| format!("crt of {} {}", l.proto(), l.addr))?;
                    let id = Arc::new(id);
                    loaded.insert(l.crt.clone(), id.clone());
                    id
                }
            }),
        };
        bound.push((l, identity));
    }
    Ok(bound)
}

/// Settings of the command line that `Config` does not keep, for [`describe`].
struct Extra<'a> {
    burn: f64,
    metrics: Option<std::net::SocketAddr>,
    cert_out: Option<&'a std::path::Path>,
}

/// `-C`: the effective configuration, one setting a line as `name  value`, named after the
/// option that sets it (haterm's `-G` line where there is one), defaults included.
fn describe(
    cfg: &Config,
    listeners: &[Listener],
    source: &CertSource,
    lines: &Lines,
    defaulted: bool,
    extra: &Extra<'_>,
) -> String {
    use std::fmt::Write;
    let on = |b: bool| if b { "on" } else { "off" };
    let mut rows: Vec<(&str, String)> = Vec::new();
    for l in listeners {
        rows.push(("listen", describe_listener(l, defaulted)));
    }
    rows.push(("certificate", describe_certificate(source)));
    if let Some(out) = extra.cert_out {
        rows.push(("cert-out", out.display().to_string()));
    }
    rows.push(("threads", cfg.threads.to_string()));
    rows.push(("cpu-map", describe_cpu_map(&lines.cpu_maps)));
    rows.push(("maxconn", cfg.maxconn.to_string()));
    rows.push(("timeout", format!("{:?}", cfg.timeout)));
    rows.push(("grace", format!("{:?}", cfg.grace)));
    rows.push(("quic", on(cfg.quic).to_owned()));
    rows.push(("alt-svc", on(cfg.alt_svc).to_owned()));
    rows.push(("0rtt", on(cfg.zero_rtt).to_owned()));
    rows.push(("splice", on(cfg.splice).to_owned()));
    rows.push(("tune.pipesize", cfg.pipe_size.to_string()));
    rows.push(("lenient", on(cfg.lenient).to_owned()));
    rows.push(("date", on(cfg.date).to_owned()));
    let seed = cfg.seed.map(|s| s.to_string());
    rows.push((
        "seed",
        seed.unwrap_or_else(|| "none (from entropy)".to_owned()),
    ));
    rows.push(("ja4", on(cfg.ja4.is_some()).to_owned()));
    let metrics = extra.metrics.map(|a| format!("http://{a}/metrics"));
    rows.push(("metrics", metrics.unwrap_or_else(|| "off".to_owned())));
    if extra.burn > 0.0 {
        rows.push(("burn", format!("{}%", extra.burn)));
    }
    let policy = |v: &Option<String>| v.clone().unwrap_or_else(|| "rustls defaults".to_owned());
    let p = &lines.policy;
    rows.push(("ssl-default-bind-ciphersuites", policy(&p.ciphersuites)));
    rows.push(("ssl-default-bind-ciphers", policy(&p.ciphers)));
    rows.push(("ssl-default-bind-curves", policy(&p.curves)));
    rows.extend(describe_h2_h3(cfg));
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = format!(
        "# loadterm {} serve: effective configuration\n",
        env!("CARGO_PKG_VERSION")
    );
    for (k, v) in rows {
        let _ = writeln!(out, "{k:width$}  {v}");
    }
    out
}

/// A `listen` row of `-C`.
fn describe_listener(l: &Listener, defaulted: bool) -> String {
    let crt = if l.crt.is_empty() {
        String::new()
    } else {
        let files: Vec<_> = l.crt.iter().map(|p| p.display().to_string()).collect();
        format!(", crt {}", files.join(" "))
    };
    let what = match l.kind {
        ListenerKind::Clear => format!("http://{}  HTTP/1.1, h2c", l.addr),
        ListenerKind::Tls => format!("https://{}  TLS, ALPN {}{crt}", l.addr, l.alpn.join(",")),
        ListenerKind::Quic => format!("https://{}  QUIC (UDP): HTTP/3{crt}", l.addr),
    };
    let note = if defaulted {
        "  (default: no -L given)"
    } else {
        ""
    };
    format!("{what}{note}")
}

/// The `certificate` row of `-C`.
fn describe_certificate(source: &CertSource) -> String {
    match source {
        CertSource::Generate {
            rsa_bits,
            curve,
            names,
            ips,
        } => {
            let curve = match curve {
                tls::Curve::P256 => "P-256",
                tls::Curve::P384 => "P-384",
            };
            let ips: Vec<_> = ips.iter().map(|ip| ip.to_string()).collect();
            format!(
                "generated: ECDSA {curve} and RSA {rsa_bits}, for {}, {}",
                names.join(", "),
                ips.join(", ")
            )
        }
        CertSource::Files(files) => {
            let files: Vec<_> = files.iter().map(|p| p.display().to_string()).collect();
            files.join(" ")
        }
    }
}

/// The `cpu-map` row of `-C`.
fn describe_cpu_map(maps: &[haterm_cfg::CpuMap]) -> String {
    if maps.is_empty() {
        return "none (threads float)".to_owned();
    }
    let maps: Vec<_> = maps
        .iter()
        .map(|m| {
            let threads = match m.threads {
                None => "all".to_owned(),
                Some((a, b)) if a == b => a.to_string(),
                Some((a, b)) => format!("{a}-{b}"),
            };
            let cpus: Vec<_> = m.cpus.iter().map(|c| c.to_string()).collect();
            let auto = if m.auto { ", one each (auto:)" } else { "" };
            format!("threads {threads} on CPUs {}{auto}", cpus.join(","))
        })
        .collect();
    maps.join("; ")
}

/// The HTTP/2 and HTTP/3 rows of `-C`.
fn describe_h2_h3(cfg: &Config) -> Vec<(&'static str, String)> {
    let (h2, h3) = (&cfg.h2, &cfg.h3);
    let emit = match h2.emit {
        None => "hybrid (default; HTTP/1.1: its own rule)",
        Some(crate::config::EmitMode::Drain) => "drain",
        Some(crate::config::EmitMode::Gather) => "gather",
        Some(crate::config::EmitMode::Hybrid) => "hybrid",
    };
    vec![
        ("h2-max-streams", h2.max_streams.to_string()),
        ("h2-stream-window", h2.stream_window.to_string()),
        ("h2-conn-window", h2.conn_window.to_string()),
        ("h2-max-frame-size", h2.max_frame_size.to_string()),
        ("h2-max-header-list", h2.max_header_list.to_string()),
        ("h2-emit", emit.to_owned()),
        ("h2-emit-threshold", h2.emit_threshold.to_string()),
        ("h3-max-streams", h3.h3_max_streams.to_string()),
        ("quic-window", h3.quic_window.to_string()),
        ("h3-max-header-list", h3.h3_max_header_list.to_string()),
    ]
}

fn announce(
    listeners: &[crate::workers::Bound],
    cfg: &Config,
    defaulted: bool,
    metrics: Option<std::net::SocketAddr>,
) {
    let mut msg = format!(
        "loadterm {} serving with {} thread(s)",
        env!("CARGO_PKG_VERSION"),
        cfg.threads
    );
    if defaulted {
        msg.push_str(" (no -L given: loopback defaults)");
    }
    msg.push_str(":\n");
    for (l, _) in listeners {
        msg.push_str(&match l.kind {
            ListenerKind::Clear => format!("  http://{}   HTTP/1.1, h2c\n", l.addr),
            ListenerKind::Tls => format!("  https://{}  TLS, ALPN {}\n", l.addr, l.alpn.join(",")),
            ListenerKind::Quic => format!("  https://{}  QUIC (UDP): HTTP/3\n", l.addr),
        });
    }
    if let Some(addr) = metrics {
        msg.push_str(&format!("  http://{addr}/metrics   statistics\n"));
    }
    if defaulted {
        msg.push_str(
            "Try:\n  curl 'http://127.0.0.1:8888/?s=1k'\n  curl -k --http2 'https://127.0.0.1:8889/?s=16k&r=404&t=20'\n  \
             curl 'http://127.0.0.1:8888/?'      # help: every parameter\n",
        );
    }
    print!("{msg}");
}

/// Block until SIGINT or SIGTERM (printing the statistics on each SIGUSR1 meanwhile), then shut
/// down gracefully: return once every connection has ended, the grace period is over, or a
/// second signal arrives (the process then exits).
fn shut_down_on_signal(
    stop: crate::plumbing::shutdown::Trigger,
    conns: &AtomicUsize,
    grace: Duration,
) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let mut usr1 = signal(SignalKind::user_defined1())?;
        loop {
            tokio::select! {
                _ = int.recv() => break,
                _ = term.recv() => break,
                _ = usr1.recv() => eprint!("{}", Totals::now().summary()),
            }
        }
        stop.fire();
        let drained = async {
            while conns.load(Ordering::Relaxed) > 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::select! {
            _ = drained => {}
            _ = tokio::time::sleep(grace) => {}
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        // The process exits now: what these connections had in flight is counted neither
        // served nor aborted, so say how much was cut off.
        let open = conns.load(Ordering::Relaxed);
        if open > 0 {
            eprintln!(
                "loadterm: shutdown: {open} connection(s) still open were cut off; requests in flight on them are not in the counts below"
            );
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_positive() {
        assert_eq!(parse_timeout("500ms"), Ok(Duration::from_millis(500)));
        assert!(parse_timeout("0").is_err() && parse_timeout("soon").is_err());
    }
}

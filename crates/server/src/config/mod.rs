//! Settings shared by every listener and engine, built once from the command line; the engines'
//! own settings (HTTP/2, HTTP/3) live here too, so that no engine module is imported back. Below
//! it, what the command line is turned into: haterm's configuration lines (`haterm_cfg`), the
//! listeners (`listen`), the TLS identities and policy (`tls`).

pub(crate) mod haterm_cfg;
pub(crate) mod listen;
pub(crate) mod tls;

use std::sync::Arc;
use std::time::Duration;

/// Header fields added to every response of a connection (`alt-svc`, `x-ja4`): per listener
/// or per connection, the same for HTTP/1.x, HTTP/2 and HTTP/3.
pub(crate) type ExtraHeaders = Vec<(http::HeaderName, http::HeaderValue)>;

/// ALPN protocols offered on TLS/TCP unless a `bind` line names others, most preferred first
/// (HAProxy 2.8+ offers `h2,http/1.1` on HTTP binds by default).
pub(crate) const TCP_ALPN: &[&str] = &["h2", "http/1.1", "http/1.0"];

/// Capacity asked for each splice pipe unless `-G 'tune.pipesize N'` says otherwise (haterm
/// sets 262144 itself on kTLS builds).
pub(crate) const PIPE_SIZE: usize = 256 * 1024;

#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// Client timeout: incomplete request head/body, idle keep-alive, and write inactivity.
    pub timeout: Duration,
    /// Worker threads, each with its own runtime and listeners.
    pub threads: usize,
    /// Most connections served at once by the whole process; more are closed on accept.
    pub maxconn: usize,
    /// Serve HTTP/3 on the UDP twin of every `-L` TLS port (`bind quic4@` lines are explicit).
    pub quic: bool,
    /// Send large clear-text HTTP/1 bodies with splice() (zero copy).
    pub splice: bool,
    /// Capacity asked for each splice pipe, bytes (`-G 'tune.pipesize N'`).
    pub pipe_size: usize,
    /// Advertise HTTP/3 (`alt-svc: h3=":port"`) on responses over TLS/TCP.
    pub alt_svc: bool,
    /// `--0rtt`: accept 0-RTT early data on resumed QUIC connections.
    pub zero_rtt: bool,
    /// How long in-flight requests may take to finish after SIGINT/SIGTERM.
    pub grace: Duration,
    /// Accept HTTP/1.x requests that break RFC 9112 rules haterm does not enforce (Host,
    /// request-target, bare LF, Transfer-Encoding on HTTP/1.0); framing rules stay on.
    pub lenient: bool,
    /// Send a `date` field on every response (off: `--no-date`, haterm's byte-exact heads).
    pub date: bool,
    /// `--seed`: the worker threads' random generators start from it (else from entropy).
    pub seed: Option<u32>,
    /// `--ja4`: fingerprint every TLS and QUIC client (`x-ja4`), counted here.
    pub ja4: Option<Arc<crate::ja4::FingerprintCounts>>,
    pub shutdown: crate::plumbing::shutdown::Shutdown,
    pub h2: H2Args,
    pub h3: H3Args,
}

/// HTTP/2 settings exposed on the command line (flattened into `loadterm serve`).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct H2Args {
    /// Concurrent streams a client may open per connection.
    #[arg(long = "h2-max-streams", default_value_t = 256, value_name = "N")]
    pub max_streams: u32,
    /// Initial receive window of each stream, bytes (request bodies).
    #[arg(long = "h2-stream-window", default_value_t = 4 << 20, value_name = "BYTES")]
    pub stream_window: u32,
    /// Receive window of the whole connection, bytes.
    #[arg(long = "h2-conn-window", default_value_t = 16 << 20, value_name = "BYTES")]
    pub conn_window: u32,
    /// Largest frame the server accepts (16384..=16777215).
    #[arg(long = "h2-max-frame-size", default_value_t = 16384, value_name = "BYTES",
          value_parser = clap::value_parser!(u32).range(16384..=16_777_215))]
    pub max_frame_size: u32,
    /// Largest request header list (HPACK-decoded), bytes; larger requests are refused.
    #[arg(long = "h2-max-header-list", default_value_t = 64 << 10, value_name = "BYTES")]
    pub max_header_list: u32,
    /// How response frames reach the transport: copy a pass into one buffer (drain), keep body
    /// bytes by reference and write the pass as one vectored write (gather), or reference only
    /// body pieces of at least --h2-emit-threshold (hybrid, the default). HTTP/2 only: HTTP/1.1
    /// keeps `H1_COPY_UP_TO`. See docs/PERFORMANCE.md.
    #[arg(long = "h2-emit", value_enum, value_name = "STRATEGY")]
    pub emit: Option<EmitMode>,
    /// Hybrid: body pieces of this size or more go by reference.
    #[arg(long = "h2-emit-threshold", default_value = "2k", value_name = "SIZE",
          value_parser = loadterm_plan::units::parse_size)]
    pub emit_threshold: u64,
}

/// `--h2-emit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum EmitMode {
    Drain,
    Gather,
    Hybrid,
}

/// HTTP/1.1's rule (clear and TLS; `--h2-emit` is HTTP/2's): bodies up to 16 KiB are copied into
/// the batch of pipelined responses, larger ones written by reference (or spliced). Measured best
/// for HTTP/1.1 over TLS in docs/PERFORMANCE.md.
pub(crate) const H1_COPY_UP_TO: u64 = 16 * 1024;

impl H2Args {
    /// HTTP/2 (clear and TLS): body bytes up to this size are copied into the write they go out
    /// in; larger bodies (pieces of the static body blocks) go by reference, in a vectored write.
    pub(crate) fn copy_up_to(&self) -> u64 {
        // Hybrid by default: with our own TLS stream sealing straight from the slices, a large
        // body by reference saves a copy (−7.2% CPU at 256 KiB), and small ones stay batched.
        match self.emit.unwrap_or(EmitMode::Hybrid) {
            EmitMode::Drain => u64::MAX,
            EmitMode::Gather => 0,
            EmitMode::Hybrid => self.emit_threshold.saturating_sub(1),
        }
    }
}

/// HTTP/3 and QUIC settings exposed on the command line (flattened into `loadterm serve`).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct H3Args {
    /// Concurrent request streams a client may open per QUIC connection. quinn keeps an entry
    /// for each stream allowed (256: 21.5 KB a connection, 100: 6.2 KB, 25: 1.6 KB; HAProxy's
    /// default is 100 too), so a connection starts with at most 52 and is allowed up to N once it
    /// has three quarters of them open.
    #[arg(long = "h3-max-streams", default_value_t = 100, value_name = "N")]
    pub h3_max_streams: u32,
    /// Receive window per stream and per connection (request bodies), bytes.
    #[arg(long = "quic-window", default_value_t = 8 << 20, value_name = "BYTES")]
    pub quic_window: u32,
    /// Largest request header section, bytes (QPACK-decoded).
    #[arg(long = "h3-max-header-list", default_value_t = 64 << 10, value_name = "BYTES")]
    pub h3_max_header_list: u64,
}

/// Settings at their command-line defaults, which the clap attributes state (once).
#[cfg(test)]
pub(crate) fn defaults<A: clap::Args + clap::FromArgMatches>() -> A {
    let cmd = A::augment_args(clap::Command::new("defaults"));
    A::from_arg_matches(&cmd.get_matches_from(["defaults"])).expect("the defaults parse")
}

/// Settings for the engines' simulated-pair tests: every default, `timeout` as the client
/// timeout, no date (byte-stable heads), seeded; with the trigger of its shutdown.
#[cfg(test)]
pub(crate) fn for_tests(timeout: Duration) -> (crate::plumbing::shutdown::Trigger, Arc<Config>) {
    let (stop, shutdown) = crate::plumbing::shutdown::Shutdown::new();
    let cfg = Config {
        timeout,
        threads: 1,
        maxconn: 16,
        quic: false,
        splice: false,
        pipe_size: PIPE_SIZE,
        alt_svc: false,
        zero_rtt: false,
        grace: Duration::from_secs(1),
        lenient: false,
        date: false,
        seed: Some(1),
        ja4: None,
        shutdown,
        h2: defaults(),
        h3: defaults(),
    };
    (stop, Arc::new(cfg))
}

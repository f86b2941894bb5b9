//! ab's end of the agent's protocol: one connection for the whole comparison (the agent
//! stops everything when it ends), requests one at a time, and the offset between the two
//! hosts' clocks, measured again before every window.

use super::auth;
use super::proto::{Reply, Request, SEQ_HEADER, VERSION};
use super::wire::{self, Start};
use crate::contam::Settings;
use crate::env::HostFacts;
use crate::station::{
    self as host, HostSample, Launch, Launched, LoadWindow, LoadWindowDone, WindowReadings,
};
use anyhow::{bail, Context, Result};
use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

struct Conn {
    stream: BufReader<Box<dyn Stream>>,
    /// Kept to set the read timeout per request.
    tcp: TcpStream,
    seq: u64,
}

/// A connection to an agent, holding one comparison.
pub(crate) struct AgentClient {
    url: String,
    token: Option<String>,
    conn: Mutex<Conn>,
    pub facts: HostFacts,
}

/// The offset of the agent's clock from ab's, and how well it is known.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClockOffset {
    /// Agent clock − ab's clock, seconds.
    pub offset_s: f64,
    /// The shortest round trip of the exchanges: the offset is known to ± half of it.
    pub rtt_s: f64,
}

/// The exchanges of one clock measurement (the one with the shortest round trip is kept).
const CLOCK_EXCHANGES: usize = 5;
/// Time for a request other than a window: a launch waits up to 15 s for its server to listen,
/// a container runtime's start and stop take seconds more.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

impl AgentClient {
    /// Connect to `url` (`http://` loopback without credentials, else `https://` with the
    /// credentials in `auth_dir`) and say hello.
    pub(crate) fn connect(url: &str, auth_dir: Option<&Path>) -> Result<AgentClient> {
        let (tls, rest) = match (url.strip_prefix("https://"), url.strip_prefix("http://")) {
            (Some(r), _) => (true, r),
            (None, Some(r)) => (false, r),
            _ => bail!("--server-host {url}: give https://HOST:PORT (or http://127.0.0.1:PORT for an agent on loopback)"),
        };
        let authority = rest.trim_end_matches('/');
        let host = match authority.rsplit_once(':') {
            Some((h, p)) if p.parse::<u16>().is_ok() => h,
            _ => bail!("--server-host {url}: no port"),
        };
        let tcp = TcpStream::connect(authority)
            .with_context(|| format!("cannot connect to the agent at {url}"))?;
        tcp.set_nodelay(true)?;
        let (stream, token): (Box<dyn Stream>, _) = match (tls, auth_dir) {
            (true, Some(dir)) => {
                let creds = auth::ab(dir)?;
                let conn = rustls::ClientConnection::new(creds.tls, auth::server_name(host)?)?;
                let mut s = rustls::StreamOwned::new(conn, tcp.try_clone()?);
                s.conn
                    .complete_io(&mut s.sock)
                    .with_context(|| format!("TLS handshake with the agent at {url}"))?;
                (Box::new(s), Some(creds.token))
            }
            (true, None) => bail!("--server-host {url} needs --agent-auth DIR (the credentials `loadterm agent --init DIR` made)"),
            (false, Some(_)) => bail!("--agent-auth is given but --server-host {url} is not https://"),
            (false, None) => (Box::new(tcp.try_clone()?), None),
        };
        let mut client = AgentClient {
            url: url.to_owned(),
            token,
            conn: Mutex::new(Conn {
                stream: BufReader::new(stream),
                tcp,
                seq: 0,
            }),
            facts: HostFacts {
                hostname: String::new(),
                kernel: String::new(),
                cpu_model: String::new(),
                cpus: 0,
            },
        };
        match client.call(&Request::Hello { version: VERSION }, CALL_TIMEOUT)? {
            Reply::Welcome { version, host } if version == VERSION => client.facts = host,
            other => bail!("the agent at {url} answered hello with {other:?}"),
        }
        Ok(client)
    }

    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    fn call(&self, req: &Request, timeout: Duration) -> Result<Reply> {
        let mut c = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        c.seq += 1;
        let seq = c.seq.to_string();
        let bearer = self.token.as_ref().map(|t| format!("Bearer {t}"));
        let mut headers = vec![
            ("content-type", "application/json"),
            (SEQ_HEADER, seq.as_str()),
        ];
        if let Some(b) = &bearer {
            headers.push(("authorization", b.as_str()));
        }
        let body = serde_json::to_vec(req)?;
        c.tcp.set_read_timeout(Some(timeout))?;
        let what = || format!("agent {}: {}", self.url, req.name());
        wire::write_message(
            c.stream.get_mut(),
            &format!("POST /v1/{} HTTP/1.1", req.name()),
            &headers,
            &body,
        )
        .with_context(what)?;
        let msg = wire::read_message(&mut c.stream).with_context(what)?;
        let status = match msg.start {
            Start::Reply { status } => status,
            Start::Request { .. } => bail!("{}: a request where a reply was due", what()),
        };
        let reply: Reply = serde_json::from_slice(&msg.body)
            .with_context(|| format!("{}: the reply (status {status}) is not one", what()))?;
        match (status, reply) {
            (200, r) => Ok(r),
            (_, Reply::Failed { error }) => bail!("{}: {error}", what()),
            (_, r) => bail!("{}: {status} {r:?}", what()),
        }
    }

    pub(crate) fn launch(&self, l: &Launch) -> Result<Launched> {
        match self.call(&Request::Launch(Box::new(l.clone())), CALL_TIMEOUT)? {
            Reply::Launched(l) => Ok(*l),
            other => bail!("agent {}: launch answered {other:?}", self.url),
        }
    }

    pub(crate) fn sample(&self, ids: &[u64]) -> Result<HostSample> {
        match self.call(&Request::Sample { ids: ids.to_vec() }, CALL_TIMEOUT)? {
            Reply::Sample(s) => Ok(s),
            other => bail!("agent {}: sample answered {other:?}", self.url),
        }
    }

    pub(crate) fn exited(&self, id: u64) -> Result<Option<String>> {
        match self.call(&Request::Exited { id }, CALL_TIMEOUT)? {
            Reply::Exited { why } => Ok(why),
            other => bail!("agent {}: exited answered {other:?}", self.url),
        }
    }

    pub(crate) fn stop(&self, id: u64) -> Result<()> {
        match self.call(&Request::Stop { id }, CALL_TIMEOUT)? {
            Reply::Stopped => Ok(()),
            other => bail!("agent {}: stop answered {other:?}", self.url),
        }
    }

    pub(crate) fn settings(&self, cpu: usize) -> Result<Settings> {
        match self.call(&Request::Settings { cpu }, CALL_TIMEOUT)? {
            Reply::Settings(s) => Ok(s),
            other => bail!("agent {}: settings answered {other:?}", self.url),
        }
    }

    /// Run this host's shard of a window's load (`w.at_unix_s` on the agent's clock).
    pub(crate) fn load(&self, w: &LoadWindow) -> Result<LoadWindowDone> {
        // The agent's clock and ours agree within the offset: a few seconds' slack covers it.
        let wait = host::from_unix_s(w.at_unix_s)
            .duration_since(SystemTime::now())
            .unwrap_or_default();
        let timeout = wait + Duration::from_secs_f64(w.duration_s) + CALL_TIMEOUT;
        match self.call(&Request::Load(Box::new(w.clone())), timeout)? {
            Reply::Loaded(done) => Ok(*done),
            other => bail!("agent {}: load answered {other:?}", self.url),
        }
    }

    /// The agent's clock against ab's: of a few exchanges, the one with the shortest round
    /// trip, its offset taken at the round trip's middle.
    pub(crate) fn clock(&self) -> Result<ClockOffset> {
        let mut best: Option<ClockOffset> = None;
        for _ in 0..CLOCK_EXCHANGES {
            let (t0, i0) = (SystemTime::now(), Instant::now());
            let Reply::Clock { unix_s } = self.call(&Request::Clock, CALL_TIMEOUT)? else {
                bail!("agent {}: clock answered something else", self.url);
            };
            let rtt_s = i0.elapsed().as_secs_f64();
            let offset_s = unix_s - (host::unix_s(t0) + rtt_s / 2.0);
            if best.is_none_or(|b| rtt_s < b.rtt_s) {
                best = Some(ClockOffset { offset_s, rtt_s });
            }
        }
        best.context("no clock exchange")
    }

    /// The readings at `at` (ab's clock) and `duration` later, taken by the agent at the same
    /// instants of its own clock. `misaligned_s` bounds how far its first reading was from
    /// `at`: its own lateness plus the offset's uncertainty.
    pub(crate) fn window(
        &self,
        ids: &[u64],
        at: SystemTime,
        duration: Duration,
        cpu0: usize,
        profile: bool,
    ) -> Result<(WindowReadings, f64)> {
        let clock = self.clock()?;
        let at_agent = host::unix_s(at) + clock.offset_s;
        let req = Request::Window {
            ids: ids.to_vec(),
            at_unix_s: at_agent,
            duration_s: duration.as_secs_f64(),
            cpu0,
            profile,
        };
        let wait = at.duration_since(SystemTime::now()).unwrap_or_default();
        match self.call(&req, wait + duration + CALL_TIMEOUT)? {
            Reply::Window(readings) => {
                let misaligned_s = (readings.before.unix_s - at_agent).abs() + clock.rtt_s / 2.0;
                Ok((*readings, misaligned_s))
            }
            other => bail!("agent {}: window answered {other:?}", self.url),
        }
    }
}

//! The agent's service: one connection is one comparison. It authenticates (mutual TLS and
//! the token, when credentials are given), then runs a `Station` for the requests of that
//! connection only; when the connection ends, goes idle past the lease, or the agent gets
//! SIGTERM, every process it started is stopped and every cgroup removed.

use super::auth::AgentCredentials;
use super::proto::{Reply, Request, SEQ_HEADER, VERSION};
use super::wire::{self, Start, WireError};
use crate::procs;
use crate::station::{self, Station};
use anyhow::{bail, Context, Result};
use std::io::{BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the agent was started with.
pub(crate) struct AgentConfig {
    pub listen: SocketAddr,
    /// `None`: no authentication, loopback only.
    pub credentials: Option<AgentCredentials>,
    /// A connection silent this long is over.
    pub lease: Duration,
}

/// Shared by the connections: who holds the agent, and every live connection's socket (shut
/// down on SIGTERM, which ends its session).
#[derive(Default)]
struct Shared {
    holder: Mutex<Option<SocketAddr>>,
    sockets: Mutex<Vec<(SocketAddr, TcpStream)>>,
}

/// Serve until SIGTERM or SIGINT.
pub(crate) fn serve(cfg: AgentConfig) -> Result<()> {
    if cfg.credentials.is_none() && !cfg.listen.ip().is_loopback() {
        return Err(loadterm_plan::exit::usage_error(format!(
            "refusing to listen on {} without authentication: anyone who reaches it could run commands; make credentials with `loadterm agent --init DIR` and start with `--auth DIR`, or listen on loopback",
            cfg.listen
        )));
    }
    let listener = TcpListener::bind(cfg.listen)
        .with_context(|| format!("cannot listen on {}", cfg.listen))?;
    listener.set_nonblocking(true)?;
    procs::catch_interrupts()?;
    crate::cgroup::adopt_orphans();
    crate::fixture::remove_leftovers();
    eprintln!(
        "agent: listening on {} ({}), protocol version {VERSION}, lease {} s",
        listener.local_addr()?,
        if cfg.credentials.is_some() {
            "mutual TLS and token"
        } else {
            "no authentication: loopback only"
        },
        cfg.lease.as_secs()
    );
    let cfg = Arc::new(cfg);
    let shared = Arc::new(Shared::default());
    let mut threads = Vec::new();
    while !procs::interrupted() {
        match listener.accept() {
            Ok((tcp, peer)) => {
                let (cfg, shared) = (cfg.clone(), shared.clone());
                threads.push(std::thread::spawn(move || {
                    connection(&cfg, &shared, tcp, peer)
                }));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => eprintln!("agent: accept: {e}"),
        }
        threads.retain(|t| !t.is_finished());
        // Between comparisons, the processes a session's servers orphaned (a shell's child,
        // a daemon) are the agent's to reap: it lives on, and they would stay zombies.
        let holder = shared.holder.lock().unwrap_or_else(|e| e.into_inner());
        if holder.is_none() {
            crate::cgroup::reap_orphans();
        }
        drop(holder);
    }
    eprintln!("agent: stopping: ending every session");
    for (_, s) in shared
        .sockets
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
    {
        let _ = s.shutdown(Shutdown::Both);
    }
    for t in threads {
        let _ = t.join();
    }
    Ok(())
}

fn connection(cfg: &AgentConfig, shared: &Shared, tcp: TcpStream, peer: SocketAddr) {
    let registered = tcp.try_clone().map(|s| {
        shared
            .sockets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((peer, s))
    });
    let _ = tcp.set_nonblocking(false);
    let _ = tcp.set_read_timeout(Some(cfg.lease));
    let _ = tcp.set_nodelay(true);
    let ended = match &cfg.credentials {
        Some(c) => match rustls::ServerConnection::new(c.tls.clone()) {
            Ok(conn) => {
                let mut tls = rustls::StreamOwned::new(conn, tcp);
                match tls.conn.complete_io(&mut tls.sock) {
                    Ok(_) => session(cfg, shared, tls, peer),
                    Err(e) => Err(anyhow::anyhow!("refused: TLS handshake: {e}")),
                }
            }
            Err(e) => Err(anyhow::anyhow!("TLS: {e}")),
        },
        None => session(cfg, shared, tcp, peer),
    };
    if registered.is_ok() {
        shared
            .sockets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(p, _)| *p != peer);
    }
    match ended {
        Ok(()) => eprintln!("agent: {peer}: session ended"),
        Err(e) => eprintln!("agent: {peer}: {e:#}"),
    }
}

/// The holder's claim on the agent, given back when dropped.
struct Claim<'a>(&'a Shared);

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        *self.0.holder.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// A reply, its status line's reason phrase the standard one for `status`.
fn reply(s: &mut impl Write, status: u16, body: &Reply) -> Result<()> {
    let json = serde_json::to_vec(body)?;
    wire::write_message(
        s,
        &format!(
            "HTTP/1.1 {status} {}",
            loadterm_plan::reason::phrase(status)
        ),
        &[("content-type", "application/json")],
        &json,
    )
    .context("writing a reply")
}

/// Refuse a request: nothing of it ran, and the connection ends.
fn refuse(s: &mut impl Write, status: u16, why: String) -> Result<()> {
    let _ = reply(s, status, &Reply::Failed { error: why.clone() });
    bail!("refused ({status}): {why}")
}

fn session<S: Read + Write>(
    cfg: &AgentConfig,
    shared: &Shared,
    stream: S,
    peer: SocketAddr,
) -> Result<()> {
    let mut r = BufReader::new(stream);
    let mut expected = 1u64;
    // The station (and the claim on the agent) exist from a valid hello to the session's end.
    let mut held: Option<(Mutex<Station>, Claim)> = None;
    loop {
        let msg = match wire::read_message(&mut r) {
            Ok(m) => m,
            Err(WireError::Closed) => return Ok(()),
            Err(e @ (WireError::Malformed(_) | WireError::TooLarge(_))) => {
                return refuse(r.get_mut(), 400, e.to_string())
            }
            Err(e @ WireError::Truncated(_)) => {
                let _ = refuse(r.get_mut(), 400, e.to_string());
                bail!("{e}: nothing of it ran")
            }
        };
        let w = r.get_mut();
        if let Some(c) = &cfg.credentials {
            let given = msg
                .header("authorization")
                .and_then(|v| v.strip_prefix("Bearer "))
                .unwrap_or_default();
            if !wire::constant_time_eq(given.as_bytes(), c.token.as_bytes()) {
                return refuse(w, 401, "no valid token".into());
            }
        }
        let seq: Option<u64> = msg.header(SEQ_HEADER).and_then(|v| v.parse().ok());
        if seq != Some(expected) {
            return refuse(
                w,
                409,
                format!(
                    "a replayed or out-of-order request: sequence {seq:?}, expected {expected}"
                ),
            );
        }
        expected += 1;
        let req: Request = match serde_json::from_slice(&msg.body) {
            Ok(r) => r,
            Err(e) => return refuse(w, 400, format!("not a request: {e}")),
        };
        let path = format!("/v1/{}", req.name());
        if !matches!(&msg.start, Start::Request { method, path: p } if method == "POST" && *p == path)
        {
            return refuse(
                w,
                400,
                format!("{} does not match a {} request", msg.start, req.name()),
            );
        }
        let station = match (&held, &req) {
            (None, Request::Hello { version }) => {
                if *version != VERSION {
                    return refuse(
                        w,
                        400,
                        format!("protocol version {version}; this agent speaks {VERSION}: use the same loadterm release on both hosts"),
                    );
                }
                let mut holder = shared.holder.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(h) = *holder {
                    drop(holder);
                    return refuse(
                        w,
                        409,
                        format!(
                            "busy: {h} runs a comparison here (two would share the server cores)"
                        ),
                    );
                }
                *holder = Some(peer);
                drop(holder);
                held = Some((Mutex::new(Station::default()), Claim(shared)));
                eprintln!("agent: {peer}: comparison started");
                reply(
                    w,
                    200,
                    &Reply::Welcome {
                        version: VERSION,
                        host: crate::env::host_facts(),
                    },
                )?;
                continue;
            }
            (None, _) => return refuse(w, 409, "hello first".into()),
            (Some(_), Request::Hello { .. }) => return refuse(w, 409, "a second hello".into()),
            (Some((s, _)), _) => s,
        };
        let answer = match handle(station, req) {
            Ok(a) => a,
            Err(e) => Reply::Failed {
                error: format!("{e:#}"),
            },
        };
        let status = if matches!(answer, Reply::Failed { .. }) {
            422
        } else {
            200
        };
        reply(w, status, &answer)?;
    }
}

fn handle(station: &Mutex<Station>, req: Request) -> Result<Reply> {
    let lock = || station.lock().unwrap_or_else(|e| e.into_inner());
    Ok(match req {
        Request::Hello { .. } => bail!("a second hello"),
        Request::Clock => Reply::Clock {
            unix_s: station::unix_s(std::time::SystemTime::now()),
        },
        Request::Launch(l) => Reply::Launched(Box::new(lock().launch(&l)?)),
        Request::Sample { ids } => Reply::Sample(lock().sample(&ids)?),
        Request::Window {
            ids,
            at_unix_s,
            duration_s,
            cpu0,
            profile,
        } => {
            if !(0.0..=3600.0).contains(&duration_s) {
                bail!("a window of {duration_s} s");
            }
            let at = station::from_unix_s(at_unix_s);
            if at
                .duration_since(std::time::SystemTime::now())
                .unwrap_or_default()
                > Duration::from_secs(60)
            {
                bail!("a window over a minute ahead");
            }
            // The agent wakes at the window's edges: not on the server CPUs, as ab runs on
            // the client's.
            let server_cpus = lock().server_cpus();
            let others: Vec<usize> = (0..crate::env::host_facts().cpus)
                .filter(|c| !server_cpus.contains(c))
                .collect();
            procs::pin_self(&others)?;
            Reply::Window(Box::new(station::window_here(
                station,
                &ids,
                at,
                Duration::from_secs_f64(duration_s),
                cpu0,
                profile,
            )?))
        }
        Request::Exited { id } => Reply::Exited {
            why: lock().exited(id)?,
        },
        Request::Stop { id } => {
            lock().stop(id);
            Reply::Stopped
        }
        Request::Settings { cpu } => Reply::Settings(crate::contam::settings(cpu)),
        Request::Load(w) => {
            if w.at_unix_s > station::unix_s(std::time::SystemTime::now()) + 60.0
                || !(0.0..=3600.0).contains(&w.duration_s)
            {
                bail!("a load window over a minute ahead, or over an hour long");
            }
            Reply::Loaded(Box::new(station::load_here(&w)?))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refusal's status line is HTTP's own, whatever the Rust names around it.
    #[test]
    fn refusals_carry_the_standard_reason_phrase() {
        for (status, line) in [
            (400, "HTTP/1.1 400 Bad Request\r\n"),
            (401, "HTTP/1.1 401 Unauthorized\r\n"),
            (409, "HTTP/1.1 409 Conflict\r\n"),
            (422, "HTTP/1.1 422 Unprocessable Content\r\n"),
        ] {
            let mut out = Vec::new();
            assert!(refuse(&mut out, status, "why".into()).is_err());
            assert!(out.starts_with(line.as_bytes()), "{status}");
        }
    }
}

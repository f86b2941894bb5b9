//! Connections: TCP (+TLS) and QUIC establishment, and the per-protocol request loops.

use crate::h1parse::{Event, Parser};
use crate::record::{ErrorKind, Sample};
use crate::setup::Proto;
use crate::worker::{Schedule, Schedules, WorkerRef};
use bytes::{Buf, Bytes};
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// How a connection ended.
pub(crate) enum End {
    /// No more work for it.
    Finished,
    /// Closed by the server or broken: open a new one if work remains.
    Reconnect,
}

/// Run one connection slot until the worker runs out of work, reconnecting as needed.
pub async fn run(w: WorkerRef, slot: u64) {
    let mut failures = 0u32;
    let mut scheds = Schedules::new(&w, slot);
    while w.more() {
        let end = match w.setup.proto {
            Proto::H3 => h3_connection(&w, &mut scheds.streams).await,
            _ => tcp_connection(&w, &mut scheds).await,
        };
        match end {
            Ok(End::Finished) => return,
            Ok(End::Reconnect) => failures = 0,
            Err(kind) => {
                w.error(kind);
                // A connection that cannot be made costs one request of the budget, so that
                // `-n` runs against a dead server end; back off so `-D` runs do not spin.
                let _ = w.take();
                failures += 1;
                tokio::time::sleep(Duration::from_millis(10 * failures.min(20) as u64)).await;
            }
        }
    }
}

async fn tcp_connection(w: &WorkerRef, scheds: &mut Schedules) -> Result<End, ErrorKind> {
    let setup = &w.setup;
    let tcp = tokio::time::timeout(setup.timeout, tokio::net::TcpStream::connect(setup.addr))
        .await
        .map_err(|_| ErrorKind::Connect)?
        .map_err(|_| ErrorKind::Connect)?;
    let _ = tcp.set_nodelay(true);
    match &setup.tls_config {
        None if setup.proto == Proto::H2c => {
            Ok(crate::h2::connection(w, tcp, &mut scheds.streams).await)
        }
        None => Ok(h1_connection(w, tcp, &mut scheds.h1).await),
        Some(cfg) => {
            let connector = tokio_rustls::TlsConnector::from(cfg.clone());
            let tls = tokio::time::timeout(
                setup.timeout,
                connector.connect(setup.server_name.clone(), tcp),
            )
            .await
            .map_err(|_| ErrorKind::Tls)?
            .map_err(|_| ErrorKind::Tls)?;
            if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
                Ok(crate::h2::connection(w, tls, &mut scheds.streams).await)
            } else if setup.proto == Proto::H2 {
                Err(ErrorKind::Tls)
            } else {
                Ok(h1_connection(w, tls, &mut scheds.h1).await)
            }
        }
    }
}

pub(crate) struct InFlight {
    pub intended: Option<Instant>,
    pub sent: Instant,
    pub first_byte: Option<Instant>,
}

/// HTTP/1.1 with up to `streams` pipelined requests; responses matched in order.
async fn h1_connection<IO: AsyncRead + AsyncWrite + Unpin>(
    w: &WorkerRef,
    mut io: IO,
    sched: &mut Schedule,
) -> End {
    let setup = w.setup.clone();
    let mut parser = Parser::default();
    let mut inflight: VecDeque<InFlight> = VecDeque::with_capacity(setup.streams);
    let mut out = Vec::with_capacity(4096);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // Top up the pipeline: closed loop to `streams`, open loop with what is due.
        let now = Instant::now();
        let mut queued = Vec::new();
        while inflight.len() + queued.len() < setup.streams {
            let intended = match sched.peek() {
                Some(t) if t > now => break,
                Some(_) => sched.advance(),
                None => None,
            };
            let Some(i) = w.take() else { break };
            out.extend_from_slice(&setup.target(i).h1_request);
            out.extend_from_slice(&setup.data);
            queued.push(intended);
        }
        if !out.is_empty() {
            if tokio::time::timeout(setup.timeout, io.write_all(&out))
                .await
                .map(|r| r.is_ok())
                != Ok(true)
            {
                lose(w, inflight.drain(..), ErrorKind::Reset);
                for _ in queued {
                    w.error(ErrorKind::Reset);
                }
                return End::Reconnect;
            }
            let _ = io.flush().await;
            out.clear();
            let sent = Instant::now();
            let mut rec = w.rec.borrow_mut();
            for intended in queued {
                rec.sent(intended, sent);
                inflight.push_back(InFlight {
                    intended,
                    sent,
                    first_byte: None,
                });
            }
        }
        if inflight.is_empty() {
            match sched.peek() {
                Some(next) if w.more() => {
                    crate::timer::sleep_until(next).await;
                    continue;
                }
                _ => return End::Finished,
            }
        }
        // Read, but wake up for the next open-loop send if the pipeline has room.
        let room = inflight.len() < setup.streams;
        let wake = sched.peek().filter(|_| room && w.more());
        let read = tokio::select! {
            r = tokio::time::timeout(setup.timeout, io.read(&mut buf)) => r,
            _ = sleep_opt(wake) => continue,
        };
        let n = match read {
            Err(_) => {
                lose(w, inflight.drain(..), ErrorKind::Timeout);
                return End::Reconnect;
            }
            Ok(Err(_)) | Ok(Ok(0)) => {
                if let (Some(done), Some(f)) = (parser.eof(), inflight.pop_front()) {
                    finish(
                        w,
                        f,
                        done.status,
                        done.head_bytes,
                        done.body_bytes,
                        Instant::now(),
                    );
                }
                lose(w, inflight.drain(..), ErrorKind::Reset);
                return End::Reconnect;
            }
            Ok(Ok(n)) => n,
        };
        let now = Instant::now();
        let mut rest = &buf[..n];
        while !rest.is_empty() {
            let Some(front) = inflight.front_mut() else {
                // Bytes nobody asked for.
                w.error(ErrorKind::Protocol);
                return End::Reconnect;
            };
            front.first_byte.get_or_insert(now);
            match parser.feed(rest, setup.is_head) {
                Err(_) => {
                    lose(w, inflight.drain(..), ErrorKind::Protocol);
                    return End::Reconnect;
                }
                Ok(Event::More) => break,
                Ok(Event::Response { done, consumed }) => {
                    rest = &rest[consumed..];
                    let f = inflight.pop_front().expect("front exists");
                    finish(w, f, done.status, done.head_bytes, done.body_bytes, now);
                    if done.close {
                        lose(w, inflight.drain(..), ErrorKind::Reset);
                        return End::Reconnect;
                    }
                }
            }
        }
    }
}

async fn sleep_opt(t: Option<Instant>) {
    match t {
        Some(t) => crate::timer::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

pub(crate) fn finish(
    w: &WorkerRef,
    f: InFlight,
    status: u16,
    head_bytes: u64,
    body_bytes: u64,
    done: Instant,
) {
    w.done(&Sample {
        intended: f.intended,
        sent: f.sent,
        first_byte: f.first_byte.unwrap_or(done),
        done,
        status,
        head_bytes,
        body_bytes,
    });
}

/// Requests that will get no response, each counted as an error of `kind`.
pub(crate) fn lose(w: &WorkerRef, lost: impl Iterator<Item = InFlight>, kind: ErrorKind) {
    for _ in lost {
        w.error(kind);
    }
}

fn header_bytes(h: &http::HeaderMap) -> u64 {
    h.iter()
        .map(|(n, v)| (n.as_str().len() + v.len() + 4) as u64)
        .sum::<u64>()
        + 12
}

/// HTTP/3 over QUIC: one connection, `streams` concurrent request loops.
async fn h3_connection(w: &WorkerRef, scheds: &mut [Schedule]) -> Result<End, ErrorKind> {
    let setup = w.setup.clone();
    let endpoint = w.endpoint.as_ref().expect("H3 workers have an endpoint");
    let config = setup
        .quic_config
        .clone()
        .expect("H3 setup has a QUIC config");
    let name = setup.server_name.to_str();
    let connecting = endpoint
        .connect_with(config, setup.addr, &name)
        .map_err(|_| ErrorKind::Connect)?;
    let conn = tokio::time::timeout(setup.timeout, connecting)
        .await
        .map_err(|_| ErrorKind::Connect)?
        .map_err(|e| match e {
            quinn::ConnectionError::TransportError(_)
            | quinn::ConnectionError::ConnectionClosed(_) => ErrorKind::Tls,
            _ => ErrorKind::Connect,
        })?;
    let (mut driver, send) = h3::client::builder()
        .send_grease(false)
        .build::<_, _, Bytes>(h3_quinn::Connection::new(conn.clone()))
        .await
        .map_err(|_| ErrorKind::Protocol)?;
    let drive = tokio::task::spawn_local(async move {
        let _ = futures::future::poll_fn(|cx| driver.poll_close(cx)).await;
    });
    let loops = scheds
        .iter_mut()
        .map(|sched| h3_stream_loop(w, send.clone(), sched));
    let ends = futures::future::join_all(loops).await;
    drop(send);
    conn.close(0u32.into(), b"done");
    drive.abort();
    Ok(if ends.iter().all(|e| matches!(e, End::Finished)) {
        End::Finished
    } else {
        End::Reconnect
    })
}

async fn h3_stream_loop(
    w: &WorkerRef,
    mut send: h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>,
    sched: &mut Schedule,
) -> End {
    let setup = w.setup.clone();
    loop {
        let intended = sched.wait().await;
        let Some(i) = w.take() else {
            return End::Finished;
        };
        let req = setup.request(i);
        let sent = Instant::now();
        w.rec.borrow_mut().sent(intended, sent);
        let exchange = async {
            let mut stream = send.send_request(req).await?;
            if !setup.data.is_empty() {
                stream.send_data(setup.data.clone()).await?;
            }
            stream.finish().await?;
            let resp = stream.recv_response().await?;
            let first_byte = Instant::now();
            let status = resp.status().as_u16();
            let head = header_bytes(resp.headers());
            let mut bytes = 0u64;
            while let Some(mut chunk) = stream.recv_data().await? {
                let n = chunk.remaining();
                bytes += n as u64;
                chunk.advance(n);
            }
            Ok::<_, h3::error::StreamError>((first_byte, status, head, bytes))
        };
        match tokio::time::timeout(setup.timeout, exchange).await {
            Ok(Ok((first_byte, status, head_bytes, body_bytes))) => w.done(&Sample {
                intended,
                sent,
                first_byte,
                done: Instant::now(),
                status,
                head_bytes,
                body_bytes,
            }),
            Ok(Err(e)) => {
                w.error(ErrorKind::Reset);
                use h3::error::StreamError as E;
                if !matches!(
                    e,
                    E::StreamError { .. } | E::RemoteTerminate { .. } | E::HeaderTooBig { .. }
                ) {
                    return End::Reconnect;
                }
            }
            Err(_) => {
                w.error(ErrorKind::Timeout);
                return End::Reconnect;
            }
        }
    }
}

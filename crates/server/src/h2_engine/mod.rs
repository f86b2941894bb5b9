//! HTTP/2 engine (TLS ALPN `h2`; h2c by prior knowledge or `Upgrade: h2c` on the clear port), on the `h2`
//! crate. Each stream is its own task: a delayed stream never blocks the others. Bodies are
//! static slices sent as flow control allows, so any size streams in constant memory.
//! Control-frame floods the crate does not bound are cut off by `guard`.

mod emit;
mod guard;
#[cfg(test)]
mod sim_tests;
mod stream;
pub(crate) mod upgrade;

use crate::plumbing::stats::{self, CountedError, Protection};
use futures::FutureExt;
use http::{HeaderName, HeaderValue};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Notify;

/// Why an HTTP/2 connection failed. Converting to it counts nothing: the caller counts it once,
/// with [`H2ConnError::count`], when the connection ends.
#[derive(Debug, thiserror::Error)]
pub(crate) enum H2ConnError {
    #[error("HTTP/2 handshake not done within the client timeout")]
    HandshakeTimeout,
    #[error("HTTP/2 connection failed: {0}")]
    H2(#[from] h2::Error),
}

impl H2ConnError {
    /// Count the failure: a timeout; the h2 crate's flood protections (its GOAWAY
    /// ENHANCE_YOUR_CALM); I/O errors by kind; anything else as a protocol error.
    pub(crate) fn count(&self) {
        match self {
            H2ConnError::HandshakeTimeout => stats::error(CountedError::Timeout),
            H2ConnError::H2(e) => {
                if let Some(io) = e.get_io() {
                    stats::io_error(io);
                } else if e.is_go_away()
                    && e.is_library()
                    && e.reason() == Some(h2::Reason::ENHANCE_YOUR_CALM)
                {
                    stats::protection(Protection::EnhanceYourCalm);
                } else {
                    stats::error(CountedError::Protocol);
                }
            }
        }
    }
}

/// Serve a connection that switched from HTTP/1.1 (`Upgrade: h2c`, the `101` sent): `buffered`
/// is what the client sent after the upgrading request, whose head becomes stream 1.
pub(crate) async fn serve_upgraded<IO>(
    io: IO,
    buffered: Vec<u8>,
    head: &[u8],
    cfg: Arc<crate::config::Config>,
) -> Result<(), H2ConnError>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    match upgrade::rewind(io, buffered, head, cfg.timeout).await {
        Some(io) => serve_connection(io, cfg, Vec::new()).await,
        None => Ok(()),
    }
}

/// Serve one HTTP/2 connection until it ends. The connection preface has not been consumed (the
/// guard skips it). `extra`: fields added to every response (`alt-svc`, `x-ja4`). A control
/// frame flood ends it with `Ok` (a protection, counted where it is cut off, not a failure).
pub(crate) async fn serve_connection<IO>(
    io: IO,
    cfg: Arc<crate::config::Config>,
    extra: crate::config::ExtraHeaders,
) -> Result<(), H2ConnError>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let s = &cfg.h2;
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(s.max_streams)
        .initial_window_size(s.stream_window)
        .initial_connection_window_size(s.conn_window)
        .max_frame_size(s.max_frame_size)
        .max_header_list_size(s.max_header_list)
        // Rapid reset (CVE-2023-44487) and error floods: bounded, then GOAWAY.
        .max_pending_accept_reset_streams(64)
        .max_local_error_reset_streams(Some(256))
        .max_concurrent_reset_streams(64)
        .max_send_buffer_size(256 << 10);
    // Notified once the client floods control frames (then `h2` reads nothing more).
    let flood = Arc::new(Notify::new());
    let io = guard::FloodGuard::new(emit::WriteBatcher::new(io, s.copy_up_to()), flood.clone());
    let mut conn =
        match tokio::time::timeout(cfg.timeout, builder.handshake::<_, bytes::Bytes>(io)).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => return Err(e.into()),
            Err(_) => return Err(H2ConnError::HandshakeTimeout),
        };
    let extra: std::sync::Arc<[(HeaderName, HeaderValue)]> = extra.into();
    let active = Arc::new(AtomicUsize::new(0));
    // `w`: the idle time (ms, 0: none) the last request set for the connection.
    let idle = std::sync::atomic::AtomicU64::new(0);
    let dispatch = |(req, respond)| {
        // Answered at once when it can be, else on a task of its own.
        let Some((stream, step)) = stream::H2Stream::new(req, respond, extra.clone(), &cfg)
            .and_then(|s| {
                if let Some(w) = s.idle() {
                    idle.store(w.as_millis() as u64, Ordering::Relaxed);
                }
                s.try_now()
            })
        else {
            return;
        };
        let active = active.clone();
        active.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            stream.run(step).await;
            active.fetch_sub(1, Ordering::Relaxed);
        });
    };
    let mut batch = Vec::new();
    let stop = cfg.shutdown.wait();
    tokio::pin!(stop);
    // The idle time in force: `w`'s once a request set it, until the next request arrives.
    let mut w = None;
    loop {
        // Idle connections (no stream for a whole timeout period, or for `w` after a request
        // that set it, once none is in progress) and every connection at
        // shutdown get GOAWAY, so clients waiting for the server to close do not hang.
        if let ms @ 1.. = idle.swap(0, Ordering::Relaxed) {
            w = Some(std::time::Duration::from_millis(ms));
        }
        let next = tokio::select! {
            r = tokio::time::timeout(w.unwrap_or(cfg.timeout), conn.accept()) => match r {
                Ok(next) => next,
                Err(_) if active.load(Ordering::Relaxed) > 0 => continue,
                Err(_) => break,
            },
            () = &mut stop => break,
            () = flood.notified() => return cut_off(&mut conn).await,
        };
        match next {
            Some(Ok(stream)) => {
                w = None;
                batch.push(stream);
            }
            Some(Err(e)) => return Err(e.into()),
            None => return Ok(()),
        }
        // Take every request already received before answering any: each accept flushes what
        // is queued, so answering between accepts would cost one write per response.
        let end = loop {
            match conn.accept().now_or_never() {
                Some(Some(Ok(stream))) => batch.push(stream),
                None => break None,
                Some(other) => break Some(other),
            }
        };
        batch.drain(..).for_each(&dispatch);
        match end {
            Some(Some(Err(e))) => return Err(e.into()),
            Some(None) => return Ok(()),
            _ => {}
        }
    }
    conn.graceful_shutdown();
    // Streams the client opened before it saw the GOAWAY are still served.
    let flooded = tokio::time::timeout(cfg.timeout, async {
        loop {
            tokio::select! {
                next = conn.accept() => match next {
                    Some(Ok(stream)) => dispatch(stream),
                    _ => return false,
                },
                () = flood.notified() => return true,
            }
        }
    })
    .await;
    if flooded == Ok(true) {
        return cut_off(&mut conn).await;
    }
    Ok(())
}

/// End a connection whose client floods control frames (`guard`), as `h2` ends its own floods:
/// GOAWAY ENHANCE_YOUR_CALM, then the guard's lingering close; flushing the GOAWAY and
/// lingering within `linger::LINGER` in all, as the client may read nothing.
async fn cut_off<T, B>(conn: &mut h2::server::Connection<T, B>) -> Result<(), H2ConnError>
where
    T: AsyncRead + AsyncWrite + Unpin,
    B: bytes::Buf,
{
    stats::protection(Protection::H2ControlFlood);
    conn.abrupt_shutdown(h2::Reason::ENHANCE_YOUR_CALM);
    let _ = tokio::time::timeout(
        crate::stream::linger::LINGER,
        std::future::poll_fn(|cx| conn.poll_closed(cx)),
    )
    .await;
    Ok(())
}

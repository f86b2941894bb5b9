//! Bookkeeping of requests in flight, shared by the HTTP/1.1, HTTP/2 and HTTP/3 clients: how a
//! connection ended, and each request's outcome recorded once.

use crate::record::{ErrorKind, Sample};
use crate::shared::WorkerRef;
use std::time::Instant;

/// How a connection ended.
pub(crate) enum End {
    /// No more work for it.
    Finished,
    /// Closed by the server or broken: open a new one if work remains.
    Reconnect,
}

/// A request sent and not yet answered.
pub(crate) struct InFlight {
    /// The request's index (which URL), to send it again if it is given back.
    pub index: u64,
    pub intended: Option<Instant>,
    pub sent: Instant,
    pub first_byte: Option<Instant>,
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

/// Requests the server did not process (HTTP/1.1: pipelined behind the close; HTTP/2 and
/// HTTP/3: above the GOAWAY, or refused): sent again if their connection `progressed` (answered
/// a request), as often as that happens, else `reset` errors. A run therefore ends: each
/// connection that gives requests back has answered one.
pub(crate) fn unprocessed(w: &WorkerRef, fs: impl Iterator<Item = InFlight>, progressed: bool) {
    if progressed {
        w.give_back(fs.map(|f| (f.index, f.intended)));
    } else {
        lose(w, fs, ErrorKind::Reset);
    }
}

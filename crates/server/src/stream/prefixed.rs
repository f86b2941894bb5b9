//! A stream that replays bytes before reading its socket again: the HTTP/2 upgrade (what the
//! client sent after the upgrading request) and `--ja4` (the ClientHello, read before rustls)
//! use it.

use crate::stream::layer::{Layer, Layered};
use std::io;
use std::task::Poll;
use tokio::io::ReadBuf;

/// Bytes the first reads return (already read from the stream, or rewritten), up to `pos`.
pub(crate) struct Replay {
    prefix: Vec<u8>,
    pos: usize,
}

/// An I/O stream whose first reads return a prefix, then the stream's own bytes.
pub(crate) type Prefixed<IO> = Layered<IO, Replay>;

impl<IO> Prefixed<IO> {
    pub(crate) fn new(prefix: Vec<u8>, io: IO) -> Self {
        Layered {
            io,
            layer: Replay { prefix, pos: 0 },
        }
    }

    /// The stream underneath, once the prefix has been read.
    pub(crate) fn drained(&self) -> Option<&IO> {
        (self.layer.pos == self.layer.prefix.len()).then_some(&self.io)
    }
}

impl Layer for Replay {
    fn before_read(&mut self, buf: &mut ReadBuf<'_>) -> Option<Poll<io::Result<()>>> {
        if self.pos < self.prefix.len() {
            let n = buf.remaining().min(self.prefix.len() - self.pos);
            buf.put_slice(&self.prefix[self.pos..self.pos + n]);
            self.pos += n;
            if self.pos == self.prefix.len() {
                self.prefix = Vec::new();
                self.pos = 0;
            }
            return Some(Poll::Ready(Ok(())));
        }
        None
    }
}

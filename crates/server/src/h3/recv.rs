//! A receive stream's bytes as quinn-proto hands them out, one chunk at a time, without a copy.

use bytes::Bytes;
use quinn_proto::{self as proto, StreamId};

/// Where a pull left the stream.
pub(super) enum Pulled {
    /// `Recv::chunk` holds bytes.
    Bytes,
    /// The stream ended (nothing left in `Recv::chunk`).
    Fin,
    /// Nothing more for now: quinn-proto reports the stream readable when more comes.
    Blocked,
}

/// The stream was reset by the peer, or cannot be read (the connection is gone).
pub(super) struct Broken;

pub(super) struct Recv {
    pub(super) id: StreamId,
    /// Bytes received and not yet used.
    pub(super) chunk: Bytes,
    fin: bool,
}

impl Recv {
    pub(super) fn new(id: StreamId) -> Recv {
        Recv {
            id,
            chunk: Bytes::new(),
            fin: false,
        }
    }

    /// Bytes in `chunk` (what is left of the last chunk, or the next one), or why none.
    pub(super) fn pull(&mut self, q: &mut proto::Connection) -> Result<Pulled, Broken> {
        if !self.chunk.is_empty() {
            return Ok(Pulled::Bytes);
        }
        if self.fin {
            return Ok(Pulled::Fin);
        }
        self.release();
        let mut stream = q.recv_stream(self.id);
        let mut chunks = stream.read(true).map_err(|_| Broken)?;
        let next = chunks.next(usize::MAX);
        // Flow-control credit goes out with the connection's next transmit.
        let _ = chunks.finalize();
        match next {
            Ok(Some(c)) => {
                self.chunk = c.bytes;
                Ok(Pulled::Bytes)
            }
            Ok(None) => {
                self.fin = true;
                Ok(Pulled::Fin)
            }
            Err(proto::ReadError::Blocked) => Ok(Pulled::Blocked),
            Err(proto::ReadError::Reset(_)) => Err(Broken),
        }
    }

    /// Let go of the datagram buffer an empty chunk still holds.
    pub(super) fn release(&mut self) {
        self.chunk = Bytes::new();
    }
}

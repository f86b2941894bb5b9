//! The quinn-bound driver of the sans-I/O decoders: reads a receive stream's chunks and feeds
//! them to [`crate::frame`]'s integer and frame-header decoders and to [`crate::message`]'s stream
//! machine, skipping DATA without copying it.

use crate::frame::{Decode, HeadDecoder, VarintDecoder};
use crate::message::{Message, MessageError, MessageEvent};
use bytes::{Buf, Bytes};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadError {
    /// The stream ended inside a frame.
    Truncated,
    /// The peer reset the stream with this error code (a client learns from it whether its
    /// request was processed: H3_REQUEST_REJECTED).
    Reset(u64),
    /// The connection was lost, or the stream is otherwise unreadable.
    Broken,
}

/// Reads frames off a receive stream: drives the decoders of [`crate::frame`] (and
/// [`crate::message`]) with quinn's chunks.
pub struct Reader {
    recv: quinn::RecvStream,
    chunk: Bytes,
}

impl Reader {
    pub fn new(recv: quinn::RecvStream) -> Reader {
        Reader {
            recv,
            chunk: Bytes::new(),
        }
    }

    /// Stop the peer sending (an error `code`, or NO_ERROR once we no longer need the rest).
    pub fn stop(&mut self, code: u32) {
        let _ = self.recv.stop(code.into());
    }

    /// Get more bytes; false at the end of the stream.
    async fn fill(&mut self) -> Result<bool, ReadError> {
        while self.chunk.is_empty() {
            // An empty slice still holds the whole datagram buffer it was cut from (several
            // datagrams with GRO): not kept while the stream waits, for as long as the
            // connection lasts on a control or QPACK stream.
            self.chunk = Bytes::new();
            match self.recv.read_chunk(usize::MAX, true).await {
                Ok(Some(c)) => self.chunk = c.bytes,
                Ok(None) => return Ok(false),
                Err(quinn::ReadError::Reset(code)) => return Err(ReadError::Reset(code.into())),
                Err(_) => return Err(ReadError::Broken),
            }
        }
        Ok(true)
    }

    /// A variable-length integer; `None` if the stream ends cleanly before it.
    pub async fn varint(&mut self) -> Result<Option<u64>, ReadError> {
        self.decode(VarintDecoder::default()).await
    }

    /// A frame header (type, length); `None` at a clean end of the stream.
    pub async fn frame_head(&mut self) -> Result<Option<(u64, u64)>, ReadError> {
        self.decode(HeadDecoder::default()).await
    }

    /// Feed chunks to `d` until it has a value; a stream that ends inside one is truncated.
    async fn decode<D: Decode>(&mut self, mut d: D) -> Result<Option<D::Value>, ReadError> {
        loop {
            if !self.fill().await? {
                return match d.is_partial() {
                    true => Err(ReadError::Truncated),
                    false => Ok(None),
                };
            }
            let (n, v) = d.feed(&self.chunk);
            self.chunk.advance(n);
            if v.is_some() {
                return Ok(v);
            }
        }
    }

    /// A frame payload, read whole (callers bound `len`); without a copy when it is all in
    /// the chunk at hand, as it usually is.
    pub async fn payload(&mut self, len: usize) -> Result<Bytes, ReadError> {
        // Without this an empty payload (our client's SETTINGS) waited for bytes that belong to
        // the next frame, or for the stream's end.
        if len == 0 {
            return Ok(Bytes::new());
        }
        if self.fill().await? && self.chunk.len() >= len {
            return Ok(self.chunk.split_to(len));
        }
        // Grown as bytes arrive, not reserved up front: `len` is the peer's claim.
        let mut out = Vec::with_capacity(len.min(16 << 10));
        while out.len() < len {
            if !self.fill().await? {
                return Err(ReadError::Truncated);
            }
            let n = (len - out.len()).min(self.chunk.len());
            out.extend_from_slice(&self.chunk.split_to(n));
        }
        Ok(out.into())
    }

    /// Skip a frame payload.
    pub async fn skip(&mut self, mut len: u64) -> Result<(), ReadError> {
        while len > 0 {
            if !self.fill().await? {
                return Err(ReadError::Truncated);
            }
            let n = len.min(self.chunk.len() as u64) as usize;
            self.chunk.advance(n);
            len -= n as u64;
        }
        Ok(())
    }

    /// The stream's next bytes, as they come; `None` at its end.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, ReadError> {
        Ok(match self.fill().await? {
            true => Some(std::mem::take(&mut self.chunk)),
            false => None,
        })
    }

    /// The next event of a request or response stream parsed by `m`: DATA is counted in
    /// place (one event per chunk), never copied.
    pub async fn event(&mut self, m: &mut Message) -> Result<MessageEvent, MessageError> {
        loop {
            let fin = !self.fill().await.map_err(|_| MessageError::Broken)?;
            let (n, event) = m.poll(&self.chunk, fin)?;
            self.chunk.advance(n);
            // At the end of the stream `poll` always has an event or an error.
            if let Some(event) = event {
                return Ok(event);
            }
        }
    }
}

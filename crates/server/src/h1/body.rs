//! Request-body framing (sans-I/O): counts and discards Content-Length bodies, and chunked ones
//! with the codec's strict decoder (the one the load client uses too), stopping exactly where the
//! body ends so pipelined bytes are never eaten.

use crate::h1::head::BodyFraming;
use loadterm_codec::chunked::{self, ChunkError};

#[derive(Debug, Clone)]
pub enum RequestBody {
    Length(u64),
    Chunked(chunked::ChunkedDecoder),
    Done,
}

impl RequestBody {
    pub fn new(framing: BodyFraming) -> RequestBody {
        match framing {
            BodyFraming::None | BodyFraming::Length(0) => RequestBody::Done,
            BodyFraming::Length(n) => RequestBody::Length(n),
            BodyFraming::Chunked => RequestBody::Chunked(chunked::ChunkedDecoder::new()),
        }
    }

    pub fn is_done(&self) -> bool {
        match self {
            RequestBody::Done => true,
            RequestBody::Length(_) => false,
            RequestBody::Chunked(d) => d.is_done(),
        }
    }

    /// Consume body bytes from `input`; returns how many belonged to the body.
    pub fn feed(&mut self, input: &[u8]) -> Result<usize, ChunkError> {
        match self {
            RequestBody::Done => Ok(0),
            RequestBody::Length(left) => {
                let n = (*left).min(input.len() as u64);
                *left -= n;
                if *left == 0 {
                    *self = RequestBody::Done;
                }
                Ok(n as usize)
            }
            RequestBody::Chunked(d) => d.feed(input),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feed `body` followed by `next` split at every position; the decoder must stop exactly at
    /// the end of the body.
    fn check(body: &str, framing: BodyFraming) {
        let next = "GET / HTTP/1.1\r\n\r\n";
        let all = format!("{body}{next}");
        for split in 0..=all.len() {
            let mut d = RequestBody::new(framing);
            let (a, b) = all.as_bytes().split_at(split);
            let used_a = d
                .feed(a)
                .unwrap_or_else(|e| panic!("{body:?} split {split}: {e:?}"));
            let used_b = if d.is_done() { 0 } else { d.feed(b).unwrap() };
            assert!(d.is_done(), "{body:?} split {split}: not done");
            assert_eq!(used_a + used_b, body.len(), "{body:?} split {split}");
        }
    }

    #[test]
    fn length_and_chunked_at_every_split() {
        check("0123456789", BodyFraming::Length(10));
        check("5\r\nhello\r\n0\r\n\r\n", BodyFraming::Chunked);
        check(
            "5;ext=1\r\nhello\r\nA\r\n0123456789\r\n0\r\nTrailer: x\r\n\r\n",
            BodyFraming::Chunked,
        );
        check("0\r\n\r\n", BodyFraming::Chunked);
    }

    #[test]
    fn malformed_chunks() {
        for bad in [
            "x\r\n",
            "\r\n",
            "5\r\nhelloX",
            "5\rX",
            "11111111111111111\r\n",
            "0\r\nT: x\rX",
            // Bare LF: allowed in the head only (RFC 9112 §2.2), a smuggling vector in a body.
            "3\nabc",
            "3\r\nabc\n",
        ] {
            let mut d = RequestBody::new(BodyFraming::Chunked);
            assert!(d.feed(bad.as_bytes()).is_err(), "{bad:?}");
        }
    }
}

//! Request-body decoding (sans-I/O): counts and discards Content-Length and chunked bodies,
//! trailers included, reporting where the body ends so pipelined bytes are never eaten.

use crate::h1::head::BodyFraming;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyError {
    /// Invalid chunk syntax.
    Malformed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    Size { value: u64, digits: u8 },
    Extension { value: u64 },
    SizeLf { value: u64 },
    Data(u64),
    DataCr,
    DataLf,
    TrailerStart,
    TrailerLine,
    TrailerLf { empty: bool },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoder {
    Length(u64),
    Chunked(ChunkState),
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkState(Chunk);

impl Decoder {
    pub fn new(framing: BodyFraming) -> Decoder {
        match framing {
            BodyFraming::None | BodyFraming::Length(0) => Decoder::Done,
            BodyFraming::Length(n) => Decoder::Length(n),
            BodyFraming::Chunked => Decoder::Chunked(ChunkState(Chunk::Size {
                value: 0,
                digits: 0,
            })),
        }
    }

    pub fn is_done(&self) -> bool {
        *self == Decoder::Done
    }

    /// Consume body bytes from `input`; returns how many belonged to the body.
    pub fn feed(&mut self, input: &[u8]) -> Result<usize, BodyError> {
        match self {
            Decoder::Done => Ok(0),
            Decoder::Length(left) => {
                let n = (*left).min(input.len() as u64);
                *left -= n;
                if *left == 0 {
                    *self = Decoder::Done;
                }
                Ok(n as usize)
            }
            Decoder::Chunked(state) => {
                let mut i = 0;
                while i < input.len() {
                    let b = input[i];
                    state.0 = match state.0 {
                        Chunk::Size { value, digits } => match (b as char).to_digit(16) {
                            Some(d) if digits < 16 => Chunk::Size {
                                value: value << 4 | d as u64,
                                digits: digits + 1,
                            },
                            Some(_) => return Err(BodyError::Malformed),
                            None if digits == 0 => return Err(BodyError::Malformed),
                            None => match b {
                                b';' | b' ' | b'\t' => Chunk::Extension { value },
                                b'\r' => Chunk::SizeLf { value },
                                b'\n' => after_size(value),
                                _ => return Err(BodyError::Malformed),
                            },
                        },
                        // Chunk extensions are ignored up to the end of the line.
                        Chunk::Extension { value } => match b {
                            b'\r' => Chunk::SizeLf { value },
                            b'\n' => after_size(value),
                            _ => Chunk::Extension { value },
                        },
                        Chunk::SizeLf { value } => match b {
                            b'\n' => after_size(value),
                            _ => return Err(BodyError::Malformed),
                        },
                        Chunk::Data(left) => {
                            let n = left.min((input.len() - i) as u64);
                            i += n as usize;
                            state.0 = if left == n {
                                Chunk::DataCr
                            } else {
                                Chunk::Data(left - n)
                            };
                            continue;
                        }
                        Chunk::DataCr => match b {
                            b'\r' => Chunk::DataLf,
                            b'\n' => Chunk::Size {
                                value: 0,
                                digits: 0,
                            },
                            _ => return Err(BodyError::Malformed),
                        },
                        Chunk::DataLf => match b {
                            b'\n' => Chunk::Size {
                                value: 0,
                                digits: 0,
                            },
                            _ => return Err(BodyError::Malformed),
                        },
                        Chunk::TrailerStart => match b {
                            b'\r' => Chunk::TrailerLf { empty: true },
                            b'\n' => {
                                *self = Decoder::Done;
                                return Ok(i + 1);
                            }
                            _ => Chunk::TrailerLine,
                        },
                        Chunk::TrailerLine => match b {
                            b'\r' => Chunk::TrailerLf { empty: false },
                            b'\n' => Chunk::TrailerStart,
                            _ => Chunk::TrailerLine,
                        },
                        Chunk::TrailerLf { empty } => match (b, empty) {
                            (b'\n', true) => {
                                *self = Decoder::Done;
                                return Ok(i + 1);
                            }
                            (b'\n', false) => Chunk::TrailerStart,
                            _ => return Err(BodyError::Malformed),
                        },
                    };
                    i += 1;
                }
                Ok(i)
            }
        }
    }
}

/// Append one chunk-size line (`<HEX>\r\n`) for a chunk of `len` bytes.
pub fn chunk_size_line(buf: &mut Vec<u8>, len: usize) {
    let mut digits = [0u8; 16];
    let mut i = digits.len();
    let mut n = len;
    loop {
        i -= 1;
        digits[i] = b"0123456789ABCDEF"[n & 15];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    buf.extend_from_slice(&digits[i..]);
    buf.extend_from_slice(b"\r\n");
}

fn after_size(value: u64) -> Chunk {
    if value == 0 {
        Chunk::TrailerStart
    } else {
        Chunk::Data(value)
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
            let mut d = Decoder::new(framing);
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
        check("3\nabc\n0\n\n", BodyFraming::Chunked);
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
        ] {
            let mut d = Decoder::new(BodyFraming::Chunked);
            assert_eq!(d.feed(bad.as_bytes()), Err(BodyError::Malformed), "{bad:?}");
        }
    }
}

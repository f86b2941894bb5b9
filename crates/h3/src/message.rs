//! The frames of one request or response stream (RFC 9114 §4.1), sans-I/O: fed the stream's
//! bytes and its end, a [`Message`] yields the field sections, DATA lengths (counted, never
//! copied), trailers and the end, or the error the peer's framing deserves. [`Reader::event`]
//! drives it with quinn's chunks.
//!
//! [`Reader::event`]: crate::reader::Reader::event

use crate::frame::{self, code, Decode, HeadDecoder};

/// What a stream yields, in order: for a request `Headers`, `Data`*, `Trailers`?, `End`; for a
/// response the same after any number of `Interim` heads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageEvent {
    /// The request's field section, or the response's final one: [`Message::section`].
    Headers,
    /// A response's interim (1xx) head, its status given; the section is in
    /// [`Message::section`], and the final head follows.
    Interim(u16),
    /// A HEADERS frame longer than the limit: the server answers 431. Nothing follows; the
    /// caller stops reading.
    TooLarge,
    /// This many DATA payload bytes went by.
    Data(u64),
    /// The trailers' field section: [`Message::section`].
    Trailers,
    /// The stream ended after a complete message.
    End,
}

/// Why a stream's framing is refused, with the RFC 9114 error to answer it with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    #[error("DATA frame before the HEADERS frame")]
    DataBeforeHeaders,
    #[error("frame type {0:#x} has no place on a request stream")]
    Unexpected(u64),
    #[error("frame type {0:#x} after the trailers")]
    AfterTrailers(u64),
    #[error("stream ended inside a frame or before a complete message")]
    Incomplete,
    /// Only from [`crate::reader::Reader::event`]: no framing at fault.
    #[error("stream reset or connection lost")]
    Broken,
}

impl MessageError {
    /// The HTTP/3 error code to reset the stream or close the connection with.
    pub fn code(&self) -> u32 {
        match self {
            MessageError::DataBeforeHeaders
            | MessageError::Unexpected(_)
            | MessageError::AfterTrailers(_) => code::FRAME_UNEXPECTED,
            MessageError::Incomplete => code::REQUEST_INCOMPLETE,
            MessageError::Broken => code::REQUEST_CANCELLED,
        }
    }

    /// A connection error (§4.1, §7.2: an invalid frame sequence), not only a stream error.
    pub fn is_connection_error(&self) -> bool {
        self.code() == code::FRAME_UNEXPECTED
    }
}

/// Frames that have no place on a request stream (§7.2). We never send MAX_PUSH_ID, so a
/// PUSH_PROMISE on a response stream is an error too.
pub fn is_unexpected(ty: u64) -> bool {
    matches!(
        ty,
        frame::CANCEL_PUSH
            | frame::SETTINGS
            | frame::PUSH_PROMISE
            | frame::GOAWAY
            | frame::MAX_PUSH_ID
    ) || frame::is_h2_only(ty)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Before the (final) HEADERS.
    Head,
    Body,
    AfterTrailers,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Between frames.
    Frame,
    /// Inside a frame of another type, skipped.
    Skip(u64),
    /// Inside a HEADERS frame: its payload gathered in `section`.
    Section(usize),
    Data(u64),
    /// After the end, an error or TooLarge.
    Done,
}

/// One request (server side) or response (client side) stream's frames.
#[derive(Debug, Clone)]
pub struct Message {
    response: bool,
    max_section: u64,
    phase: Phase,
    state: State,
    head: HeadDecoder,
    section: Vec<u8>,
    scratch: Vec<u8>,
}

impl Message {
    /// A request stream, as the server reads it; HEADERS frames longer than `max_section`
    /// bytes are [`MessageEvent::TooLarge`].
    pub fn request(max_section: u64) -> Message {
        Message::new(false, max_section)
    }

    /// A response stream, as the client reads it: interim heads are told from the final one.
    pub fn response(max_section: u64) -> Message {
        Message::new(true, max_section)
    }

    fn new(response: bool, max_section: u64) -> Message {
        Message {
            response,
            max_section,
            phase: Phase::Head,
            state: State::Frame,
            head: HeadDecoder::default(),
            section: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// Start over for the next message, keeping the buffers.
    pub fn reset(&mut self) {
        self.phase = Phase::Head;
        self.state = State::Frame;
        self.head = HeadDecoder::default();
    }

    /// The field section of the last `Headers`, `Interim` or `Trailers` event (QPACK-encoded).
    pub fn section(&self) -> &[u8] {
        &self.section
    }

    /// Parse `input`, the stream's next bytes; `fin`: the stream ends after them. Returns the
    /// bytes taken and at most one event; call again with the rest. Without an event all of
    /// `input` was taken and more is needed; with `fin` there is always an event or an error.
    /// After `End`, `TooLarge` or an error, input is taken and ignored (and `fin` is `End`).
    pub fn poll(
        &mut self,
        input: &[u8],
        fin: bool,
    ) -> Result<(usize, Option<MessageEvent>), MessageError> {
        let r = self.run(input, fin);
        if r.is_err() {
            self.state = State::Done;
        }
        r
    }

    fn run(
        &mut self,
        input: &[u8],
        fin: bool,
    ) -> Result<(usize, Option<MessageEvent>), MessageError> {
        let mut used = 0;
        loop {
            let rest = &input[used..];
            match self.state {
                State::Frame => {
                    let (n, head) = self.head.feed(rest);
                    used += n;
                    let Some((ty, len)) = head else {
                        return match fin {
                            false => Ok((used, None)),
                            true if self.head.is_partial() || self.phase == Phase::Head => {
                                Err(MessageError::Incomplete)
                            }
                            true => {
                                self.state = State::Done;
                                Ok((used, Some(MessageEvent::End)))
                            }
                        };
                    };
                    if let Some(event) = self.frame(ty, len)? {
                        return Ok((used, Some(event)));
                    }
                }
                State::Skip(left) => {
                    let n = left.min(rest.len() as u64);
                    used += n as usize;
                    if n == left {
                        self.state = State::Frame;
                    } else {
                        self.state = State::Skip(left - n);
                        return self.need_more(used, fin);
                    }
                }
                State::Data(left) => {
                    let n = left.min(rest.len() as u64);
                    if n == 0 {
                        return self.need_more(used, fin);
                    }
                    used += n as usize;
                    self.state = match left - n {
                        0 => State::Frame,
                        left => State::Data(left),
                    };
                    return Ok((used, Some(MessageEvent::Data(n))));
                }
                State::Section(len) => {
                    let n = (len - self.section.len()).min(rest.len());
                    self.section.extend_from_slice(&rest[..n]);
                    used += n;
                    if self.section.len() < len {
                        return self.need_more(used, fin);
                    }
                    return Ok((used, Some(self.section_done())));
                }
                State::Done => {
                    let event = fin.then_some(MessageEvent::End);
                    return Ok((input.len(), event));
                }
            }
        }
    }

    /// Input ran out inside a frame.
    fn need_more(
        &self,
        used: usize,
        fin: bool,
    ) -> Result<(usize, Option<MessageEvent>), MessageError> {
        match fin {
            true => Err(MessageError::Incomplete),
            false => Ok((used, None)),
        }
    }

    /// A frame header: the state it leads to, and an event if it makes one at once.
    fn frame(&mut self, ty: u64, len: u64) -> Result<Option<MessageEvent>, MessageError> {
        match (ty, self.phase) {
            (frame::HEADERS | frame::DATA, Phase::AfterTrailers) => {
                Err(MessageError::AfterTrailers(ty))
            }
            (frame::DATA, Phase::Head) => Err(MessageError::DataBeforeHeaders),
            (frame::DATA, _) => {
                if len > 0 {
                    self.state = State::Data(len);
                }
                Ok(None)
            }
            (frame::HEADERS, _) if len > self.max_section => {
                self.state = State::Done;
                Ok(Some(MessageEvent::TooLarge))
            }
            (frame::HEADERS, _) => {
                self.section.clear();
                // Grown as bytes arrive, not reserved: `len` is the peer's claim.
                self.state = State::Section(len as usize);
                match len {
                    0 => Ok(Some(self.section_done())),
                    _ => Ok(None),
                }
            }
            (t, _) if is_unexpected(t) => Err(MessageError::Unexpected(t)),
            // Unknown and reserved (grease) types are skipped (§9).
            (_, _) => {
                self.state = State::Skip(len);
                Ok(None)
            }
        }
    }

    /// A whole HEADERS payload is in `section`.
    fn section_done(&mut self) -> MessageEvent {
        self.state = State::Frame;
        match self.phase {
            Phase::Head => {
                if self.response {
                    if let Some(st @ 100..=199) =
                        crate::qpack::status(&self.section, &mut self.scratch)
                    {
                        return MessageEvent::Interim(st);
                    }
                }
                self.phase = Phase::Body;
                MessageEvent::Headers
            }
            _ => {
                self.phase = Phase::AfterTrailers;
                MessageEvent::Trailers
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qpack;

    /// Events with their sections, DATA lengths merged: comparable however input was split.
    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Ev {
        Headers(Vec<u8>),
        Interim(u16, Vec<u8>),
        TooLarge,
        Data(u64),
        Trailers(Vec<u8>),
        End,
    }

    const MAX: u64 = 1000;

    /// Feed `pieces` (the last one with FIN) to `m` until its end or an error.
    fn feed(m: &mut Message, pieces: &[&[u8]]) -> Result<Vec<Ev>, MessageError> {
        let mut out = Vec::new();
        for (k, piece) in pieces.iter().enumerate() {
            let fin = k + 1 == pieces.len();
            let mut at = 0;
            loop {
                let (n, event) = m.poll(&piece[at..], fin)?;
                at += n;
                assert!(at <= piece.len());
                let Some(event) = event else {
                    assert!(!fin, "no event at the end of the stream");
                    assert_eq!(at, piece.len(), "no event, yet input left");
                    break;
                };
                let ev = match event {
                    MessageEvent::Headers => Ev::Headers(m.section().to_vec()),
                    MessageEvent::Interim(st) => Ev::Interim(st, m.section().to_vec()),
                    MessageEvent::Trailers => Ev::Trailers(m.section().to_vec()),
                    MessageEvent::TooLarge => Ev::TooLarge,
                    MessageEvent::End => Ev::End,
                    MessageEvent::Data(n) => {
                        assert!(n > 0, "empty DATA events");
                        if let Some(Ev::Data(total)) = out.last_mut() {
                            *total += n;
                            continue;
                        }
                        Ev::Data(n)
                    }
                };
                let last = matches!(ev, Ev::End | Ev::TooLarge);
                out.push(ev);
                if last {
                    return Ok(out);
                }
            }
        }
        Ok(out)
    }

    /// `stream` parsed whole, split at every position into two and three pieces, and byte by
    /// byte: all alike.
    fn parse(response: bool, stream: &[u8]) -> Result<Vec<Ev>, MessageError> {
        let new = || match response {
            true => Message::response(MAX),
            false => Message::request(MAX),
        };
        let whole = feed(&mut new(), &[stream]);
        for i in 0..=stream.len() {
            let (a, b) = stream.split_at(i);
            assert_eq!(feed(&mut new(), &[a, b]), whole, "split at {i}");
            for j in i..=stream.len().min(i + 8) {
                let (b, c) = b.split_at(j - i);
                assert_eq!(feed(&mut new(), &[a, b, c]), whole, "split at {i}, {j}");
            }
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).chain([&[][..]]).collect();
        assert_eq!(feed(&mut new(), &bytes), whole, "byte by byte");
        whole
    }

    fn request(stream: &[u8]) -> Result<Vec<Ev>, MessageError> {
        parse(false, stream)
    }

    fn get_section() -> Vec<u8> {
        let mut s = Vec::new();
        qpack::begin(&mut s);
        qpack::field(&mut s, ":method", b"GET");
        qpack::field(&mut s, ":path", b"/?s=1k");
        s
    }

    fn frame(out: &mut Vec<u8>, ty: u64, payload: &[u8]) {
        frame::put_frame(out, ty, payload);
    }

    /// Reserved (grease) frame types are 0x1f * N + 0x21.
    const GREASE: [u64; 3] = [0x21, 0x1f * 1000 + 0x21, 0x1f * 0x0fff_ffff + 0x21];

    #[test]
    fn a_get() {
        let mut s = Vec::new();
        frame(&mut s, frame::HEADERS, &get_section());
        assert_eq!(request(&s), Ok(vec![Ev::Headers(get_section()), Ev::End]));
    }

    #[test]
    fn a_post_with_data_and_trailers() {
        let mut trailers = Vec::new();
        qpack::begin(&mut trailers);
        qpack::field(&mut trailers, "x-checksum", b"abc");
        let mut s = Vec::new();
        frame(&mut s, frame::HEADERS, &get_section());
        frame(&mut s, frame::DATA, b"hello");
        frame(&mut s, frame::DATA, b"");
        frame(&mut s, frame::DATA, &[7; 300]);
        frame(&mut s, frame::HEADERS, &trailers);
        assert_eq!(
            request(&s),
            Ok(vec![
                Ev::Headers(get_section()),
                Ev::Data(305),
                Ev::Trailers(trailers),
                Ev::End
            ])
        );
    }

    #[test]
    fn grease_before_headers_and_between_data() {
        let mut s = Vec::new();
        frame(&mut s, GREASE[0], b"");
        frame(&mut s, GREASE[1], b"grease");
        frame(&mut s, frame::HEADERS, &get_section());
        frame(&mut s, frame::DATA, b"ab");
        frame(&mut s, GREASE[2], &[0; 70]);
        frame(&mut s, 0x2f, b"unknown");
        frame(&mut s, frame::DATA, b"cd");
        frame(&mut s, GREASE[0], b"x");
        assert_eq!(
            request(&s),
            Ok(vec![Ev::Headers(get_section()), Ev::Data(4), Ev::End])
        );
    }

    #[test]
    fn empty_field_sections_are_events() {
        let mut s = Vec::new();
        frame(&mut s, frame::HEADERS, b"");
        frame(&mut s, frame::HEADERS, b"");
        assert_eq!(
            request(&s),
            Ok(vec![Ev::Headers(vec![]), Ev::Trailers(vec![]), Ev::End])
        );
    }

    #[test]
    fn too_large_headers_and_trailers() {
        let mut s = Vec::new();
        frame(&mut s, frame::HEADERS, &[0; MAX as usize]);
        assert_eq!(
            request(&s),
            Ok(vec![Ev::Headers(vec![0; MAX as usize]), Ev::End]),
            "exactly the limit"
        );
        let mut s = Vec::new();
        frame::put_frame_head(&mut s, frame::HEADERS, MAX + 1);
        assert_eq!(request(&s), Ok(vec![Ev::TooLarge]), "announced, not sent");
        let mut s = Vec::new();
        frame(&mut s, frame::HEADERS, &get_section());
        frame(&mut s, frame::HEADERS, &[0; MAX as usize + 1]);
        assert_eq!(
            request(&s),
            Ok(vec![Ev::Headers(get_section()), Ev::TooLarge]),
            "trailers"
        );
    }

    #[test]
    fn frames_out_of_place_are_connection_errors() {
        let mut s = Vec::new();
        frame(&mut s, frame::DATA, b"early");
        frame(&mut s, frame::HEADERS, &get_section());
        assert_eq!(request(&s), Err(MessageError::DataBeforeHeaders));
        let e = MessageError::DataBeforeHeaders;
        assert!(e.is_connection_error() && e.code() == code::FRAME_UNEXPECTED);
        for ty in [
            frame::CANCEL_PUSH,
            frame::SETTINGS,
            frame::PUSH_PROMISE,
            frame::GOAWAY,
            frame::MAX_PUSH_ID,
            0x02,
            0x06,
            0x08,
            0x09,
        ] {
            let mut s = Vec::new();
            frame(&mut s, ty, &[0]);
            frame(&mut s, frame::HEADERS, &get_section());
            assert_eq!(
                request(&s),
                Err(MessageError::Unexpected(ty)),
                "{ty:#x} before HEADERS"
            );
            let mut s = Vec::new();
            frame(&mut s, frame::HEADERS, &get_section());
            frame(&mut s, frame::DATA, b"x");
            frame(&mut s, ty, &[0]);
            assert_eq!(
                request(&s),
                Err(MessageError::Unexpected(ty)),
                "{ty:#x} in the body"
            );
        }
        for ty in [frame::HEADERS, frame::DATA] {
            let mut s = Vec::new();
            frame(&mut s, frame::HEADERS, &get_section());
            frame(&mut s, frame::HEADERS, &get_section());
            frame(&mut s, ty, b"");
            let e = request(&s).unwrap_err();
            assert_eq!(e, MessageError::AfterTrailers(ty), "{ty:#x} after trailers");
            assert!(e.is_connection_error());
        }
    }

    #[test]
    fn truncated_streams_are_incomplete() {
        let mut whole = Vec::new();
        frame(&mut whole, GREASE[1], b"grease");
        frame(&mut whole, frame::HEADERS, &get_section());
        let headers_end = whole.len();
        frame(&mut whole, frame::DATA, &[1; 100]);
        // Every cut but the frame boundaries after HEADERS.
        for cut in 0..whole.len() {
            if cut == headers_end {
                continue;
            }
            let e = request(&whole[..cut]).unwrap_err();
            assert_eq!(e, MessageError::Incomplete, "cut at {cut}");
            assert_eq!(e.code(), code::REQUEST_INCOMPLETE);
            assert!(!e.is_connection_error());
        }
        assert_eq!(request(&[]), Err(MessageError::Incomplete), "empty stream");
        assert_eq!(
            MessageError::Broken.code(),
            code::REQUEST_CANCELLED,
            "a reset stream is cancelled"
        );
    }

    #[test]
    fn responses_tell_interim_heads_from_the_final_one() {
        let head = |st| {
            let mut s = Vec::new();
            qpack::begin_response(&mut s, st);
            s
        };
        let mut s = Vec::new();
        frame(&mut s, frame::HEADERS, &head(100));
        frame(&mut s, GREASE[0], b"g");
        frame(&mut s, frame::HEADERS, &head(103));
        frame(&mut s, frame::HEADERS, &head(200));
        frame(&mut s, frame::DATA, b"body");
        assert_eq!(
            parse(true, &s),
            Ok(vec![
                Ev::Interim(100, head(100)),
                Ev::Interim(103, head(103)),
                Ev::Headers(head(200)),
                Ev::Data(4),
                Ev::End
            ])
        );
        let mut s = Vec::new();
        frame(&mut s, frame::HEADERS, &head(100));
        frame(&mut s, frame::DATA, b"body");
        assert_eq!(parse(true, &s), Err(MessageError::DataBeforeHeaders));
        let mut s = Vec::new();
        frame(&mut s, frame::HEADERS, &head(103));
        assert_eq!(
            parse(true, &s),
            Err(MessageError::Incomplete),
            "no final head"
        );
        // A request's sections are never interim, whatever they hold.
        let mut s = Vec::new();
        frame(&mut s, frame::HEADERS, &head(100));
        assert_eq!(request(&s), Ok(vec![Ev::Headers(head(100)), Ev::End]));
    }

    #[test]
    fn reset_reads_the_next_message() {
        let mut s = Vec::new();
        frame(&mut s, frame::HEADERS, &get_section());
        let mut m = Message::request(MAX);
        assert_eq!(
            feed(&mut m, &[b"\x00\x00"]),
            Err(MessageError::DataBeforeHeaders)
        );
        m.reset();
        assert_eq!(
            feed(&mut m, &[&s]),
            Ok(vec![Ev::Headers(get_section()), Ev::End])
        );
    }

    /// Random streams and mutated valid ones, in random pieces: errors are fine; panics, an
    /// outcome that depends on the pieces, or no event at FIN are not.
    #[test]
    fn random_and_mutated_streams_never_panic() {
        let mut valid = Vec::new();
        frame(&mut valid, GREASE[0], b"g");
        frame(&mut valid, frame::HEADERS, &get_section());
        frame(&mut valid, frame::DATA, &[5; 20]);
        frame(&mut valid, GREASE[1], b"");
        frame(&mut valid, frame::DATA, b"xyz");
        frame(&mut valid, frame::HEADERS, &get_section());
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..30_000 {
            let input: Vec<u8> = if round % 2 == 0 {
                (0..next() % 48).map(|_| next() as u8 % 12).collect()
            } else {
                let mut v = valid.clone();
                for _ in 0..1 + next() % 3 {
                    let i = next() as usize % v.len();
                    v[i] = next() as u8;
                }
                v.truncate(next() as usize % (v.len() + 1));
                v
            };
            let response = round % 3 == 0;
            let new = || match response {
                true => Message::response(64),
                false => Message::request(64),
            };
            let whole = feed(&mut new(), &[&input]);
            let mut pieces = Vec::new();
            let mut rest = &input[..];
            while !rest.is_empty() {
                let (a, b) = rest.split_at(1 + next() as usize % rest.len());
                pieces.push(a);
                rest = b;
            }
            pieces.push(&[]);
            assert_eq!(feed(&mut new(), &pieces), whole, "{input:02x?}");
        }
    }
}

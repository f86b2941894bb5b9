//! A sans-I/O HTTP/2 client connection (RFC 9113) for load generation: the driver feeds it bytes
//! read and takes the bytes to write; it reports per-request outcomes as events. It counts
//! response bodies without copying them, and sends prebuilt request header blocks.

use crate::setup::Offer;
use bytes::Bytes;
use loadterm_codec::fields::ResponseFields;
use loadterm_codec::h2::flag::{ACK, END_HEADERS, END_STREAM, PADDED, PRIORITY};
use loadterm_codec::h2::setting;
use loadterm_codec::h2::{
    CONTINUATION, DATA, GOAWAY, HEADERS, PING, PREFACE, PUSH_PROMISE, RST_STREAM, SETTINGS,
    WINDOW_UPDATE,
};
use loadterm_codec::hpack;
use loadterm_plan::{is_interim, response_has_body};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Receive window per stream and per connection by default, as h2load's (`-w 30 -W 30`): large
/// enough that window updates are rare.
#[cfg(test)]
pub(super) const WINDOW: u32 = (1 << 30) - 1;
/// RST_STREAM's error code for a request the server did not process (RFC 9113 §7).
const REFUSED_STREAM: u32 = 0x7;
/// SETTINGS_MAX_FRAME_SIZE's default (RFC 9113 §6.5.2): the largest frame the server accepts
/// until it says otherwise, and the largest we accept unless `-f` raised it.
const MAX_FRAME: usize = 16_384;
/// The protocol's initial windows (RFC 9113 §6.9.2) and HPACK table size (§6.5.2).
const DEFAULT_WINDOW: u32 = 65_535;
const DEFAULT_TABLE: u32 = 4096;
/// Cap on one header block (HEADERS + CONTINUATION), against endless CONTINUATION.
const MAX_BLOCK: usize = 256 * 1024;
/// Concurrent streams assumed before the server's SETTINGS arrive (RFC 9113 §6.5.2 advises
/// servers to allow at least 100).
const ASSUMED_STREAMS: usize = 100;
/// RST_STREAM error codes (RFC 9113 §7).
const NO_ERROR: u32 = 0x0;
const PROTOCOL_ERROR: u32 = 0x1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("HTTP/2 protocol error: {0}")]
pub(super) struct ProtocolError(pub &'static str);

type Result<T> = std::result::Result<T, ProtocolError>;

/// What happened to a request; `slot` is the caller's token given to [`Client::start`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RequestEvent {
    /// The final response head arrived.
    Head { slot: usize },
    /// The response is complete.
    Done {
        slot: usize,
        status: u16,
        head_bytes: u64,
        body_bytes: u64,
    },
    /// An interim (1xx) response head arrived; the final one is still to come.
    Interim { slot: usize },
    /// The stream was reset by the server.
    Reset { slot: usize },
    /// The server did not process the request (RFC 9113 §8.7): above its GOAWAY's last stream,
    /// or reset with REFUSED_STREAM. It may be sent again.
    Unprocessed { slot: usize },
    /// The response was malformed (RFC 9113 §8.1.1): the stream is reset with PROTOCOL_ERROR,
    /// the connection goes on.
    Malformed { slot: usize },
}

/// One request's stream as the client follows it: its response so far, its upload.
#[derive(Debug)]
struct ClientStream {
    slot: usize,
    /// Final status, once the response head is in.
    status: Option<u16>,
    /// The final head's content-length, which the DATA must add up to.
    content_length: Option<u64>,
    head_bytes: u64,
    body_bytes: u64,
    /// Request body still to send, from this offset, and the window for it.
    upload: Option<(Bytes, usize)>,
    send_window: i64,
    /// Received DATA not yet returned to the server by WINDOW_UPDATE.
    unacked: u32,
}

/// Stream ids are distinct small integers: hashing them is wasted work.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, _: &[u8]) {
        unreachable!("only u32 keys")
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = n as u64;
    }
}

/// The DATA frame being received, whose payload is counted as it streams by, never buffered.
#[derive(Debug, Clone, Copy)]
struct DataFrame {
    stream: u32,
    end_stream: bool,
    /// Padding length byte still to read.
    need_pad_len: bool,
    /// Body bytes, then padding bytes, still to come.
    body: usize,
    pad: usize,
}

pub(super) struct Client {
    out: Vec<u8>,
    events: Vec<RequestEvent>,
    streams: HashMap<u32, ClientStream, BuildHasherDefault<IdHasher>>,
    next_id: u32,
    decoder: hpack::HpackDecoder,
    fields: ResponseFields,
    /// Server settings.
    max_streams: usize,
    send_frame: usize,
    initial_send_window: i64,
    conn_send_window: i64,
    /// Our receive windows (`-w`, `-W`) and the largest frame we accept (`-f`).
    stream_window: u32,
    conn_window: u32,
    max_frame: usize,
    /// DATA the server may still send on the connection before our next WINDOW_UPDATE.
    conn_avail: i64,
    /// Streams with a request body waiting for window.
    blocked: Vec<u32>,
    goaway: bool,
    /// Partial frame (header, or a whole non-DATA frame) carried between reads.
    partial: Vec<u8>,
    data: Option<DataFrame>,
    /// A header block awaiting CONTINUATION: stream, end_stream, fragments so far.
    block: Option<(u32, bool, Vec<u8>)>,
    /// The requests are HEADs: their responses' content-length describes no DATA.
    head_requests: bool,
}

impl Default for Client {
    fn default() -> Self {
        Self::new(&Offer::default())
    }
}

impl Client {
    /// The requests sent will be HEADs.
    pub(super) fn head_requests(&mut self) {
        self.head_requests = true;
    }

    /// A new connection offering `offer` (windows, frame size, HPACK table; h2load's `-w`,
    /// `-W`, `-f`, `--header-table-size`); its preface and settings are ready in the output.
    pub(super) fn new(offer: &Offer) -> Client {
        let mut c = Client {
            out: Vec::with_capacity(16 * 1024),
            events: Vec::new(),
            streams: HashMap::default(),
            next_id: 1,
            decoder: hpack::HpackDecoder::with_limit(offer.header_table as usize),
            fields: ResponseFields::default(),
            max_streams: ASSUMED_STREAMS,
            send_frame: MAX_FRAME,
            initial_send_window: 65_535,
            conn_send_window: 65_535,
            stream_window: offer.h2_stream_window(),
            conn_window: offer.h2_conn_window(),
            max_frame: offer.max_frame as usize,
            conn_avail: DEFAULT_WINDOW.into(),
            blocked: Vec::new(),
            goaway: false,
            partial: Vec::new(),
            data: None,
            block: None,
            head_requests: false,
        };
        c.out.extend_from_slice(PREFACE);
        // Only the settings that differ from the protocol's defaults, push first.
        let mut settings = vec![(setting::ENABLE_PUSH, 0)];
        if c.stream_window != DEFAULT_WINDOW {
            settings.push((setting::INITIAL_WINDOW_SIZE, c.stream_window));
        }
        if c.max_frame != MAX_FRAME {
            settings.push((setting::MAX_FRAME_SIZE, offer.max_frame));
        }
        if offer.header_table != DEFAULT_TABLE {
            settings.push((setting::HEADER_TABLE_SIZE, offer.header_table));
        }
        frame_head(&mut c.out, 6 * settings.len(), SETTINGS, 0, 0);
        for (id, value) in settings {
            c.out.extend_from_slice(&id.to_be_bytes());
            c.out.extend_from_slice(&value.to_be_bytes());
        }
        // A connection window above the initial one is opened at once; one below it is
        // reached by holding back WINDOW_UPDATEs (see `data_frame`).
        if c.conn_window > DEFAULT_WINDOW {
            c.window_update(0, c.conn_window - DEFAULT_WINDOW);
            c.conn_avail = c.conn_window.into();
        }
        c
    }

    /// Whether a new request may start now.
    pub(super) fn can_start(&self) -> bool {
        !self.goaway && self.streams.len() < self.max_streams && self.next_id < 1 << 31
    }

    /// Requests in flight.
    pub(super) fn in_flight(&self) -> usize {
        self.streams.len()
    }

    /// The server said GOAWAY: no new requests on this connection.
    pub(super) fn going_away(&self) -> bool {
        self.goaway
    }

    /// Start a request with a prebuilt HPACK header block and an optional body.
    pub(super) fn start(&mut self, block: &[u8], body: &Bytes, slot: usize) {
        debug_assert!(self.can_start());
        let id = self.next_id;
        self.next_id += 2;
        let (mut kind, mut flags) = (HEADERS, if body.is_empty() { END_STREAM } else { 0 });
        let mut chunks = block.chunks(self.send_frame).peekable();
        loop {
            let chunk = chunks.next().unwrap_or(&[]);
            let last = chunks.peek().is_none();
            if last {
                flags |= END_HEADERS;
            }
            frame_head(&mut self.out, chunk.len(), kind, flags, id);
            self.out.extend_from_slice(chunk);
            if last {
                break;
            }
            (kind, flags) = (CONTINUATION, 0);
        }
        self.streams.insert(
            id,
            ClientStream {
                slot,
                status: None,
                content_length: None,
                head_bytes: 0,
                body_bytes: 0,
                upload: (!body.is_empty()).then(|| (body.clone(), 0)),
                send_window: self.initial_send_window,
                unacked: 0,
            },
        );
        if !body.is_empty() {
            self.send_body(id);
        }
    }

    /// Bytes to write: swapped into `buf`, which must be empty.
    pub(super) fn take_output(&mut self, buf: &mut Vec<u8>) {
        debug_assert!(buf.is_empty());
        std::mem::swap(&mut self.out, buf);
    }

    pub(super) fn has_output(&self) -> bool {
        !self.out.is_empty()
    }

    /// Outcomes since the last call.
    pub(super) fn events(&mut self) -> std::vec::Drain<'_, RequestEvent> {
        self.events.drain(..)
    }

    /// Process bytes read from the server.
    pub(super) fn feed(&mut self, mut input: &[u8]) -> Result<()> {
        while !input.is_empty() {
            if self.data.is_some() {
                input = self.data_payload(input)?;
                continue;
            }
            // Whole frames (DATA: just its header) straight from the input when they are there.
            if self.partial.is_empty() && input.len() >= 9 {
                let n = if input[3] == DATA {
                    9
                } else {
                    9 + frame_len(input)
                };
                if input.len() >= n {
                    let (frame, rest) = input.split_at(n);
                    input = rest;
                    self.frame(frame)?;
                    continue;
                }
            }
            let have = self.partial.len();
            let need = if have < 9 {
                9
            } else {
                9 + frame_len(&self.partial)
            };
            let take = (need - have).min(input.len());
            self.partial.extend_from_slice(&input[..take]);
            input = &input[take..];
            let p = &self.partial;
            if p.len() == 9 && frame_len(p) > self.max_frame {
                return Err(ProtocolError("frame larger than SETTINGS_MAX_FRAME_SIZE"));
            }
            if p.len() >= 9 && (p[3] == DATA || p.len() == 9 + frame_len(p)) {
                let frame = std::mem::take(&mut self.partial);
                self.frame(&frame)?;
                self.partial = frame;
                self.partial.clear();
            }
        }
        Ok(())
    }

    /// Consume what `input` holds of the current DATA frame's payload.
    fn data_payload<'a>(&mut self, mut input: &'a [u8]) -> Result<&'a [u8]> {
        let d = self.data.as_mut().expect("called with a DATA frame");
        if d.need_pad_len {
            let Some((&pad, rest)) = input.split_first() else {
                return Ok(input);
            };
            input = rest;
            d.need_pad_len = false;
            d.pad = pad as usize;
            d.body = d
                .body
                .checked_sub(d.pad)
                .ok_or(ProtocolError("padding longer than the frame"))?;
            if let Some(s) = self.streams.get_mut(&d.stream) {
                s.body_bytes += d.body as u64;
            }
        }
        let n = d.body.min(input.len());
        d.body -= n;
        input = &input[n..];
        let p = d.pad.min(input.len());
        d.pad -= p;
        input = &input[p..];
        if d.body == 0 && d.pad == 0 && !d.need_pad_len {
            let d = self.data.take().expect("set");
            if d.end_stream {
                self.finish(d.stream);
            }
        }
        Ok(input)
    }

    /// One frame: its 9-byte header and, except for DATA, its whole payload.
    fn frame(&mut self, frame: &[u8]) -> Result<()> {
        let len = frame_len(frame);
        let (kind, flags) = (frame[3], frame[4]);
        let id = u32::from_be_bytes([frame[5], frame[6], frame[7], frame[8]]) & 0x7fff_ffff;
        if len > self.max_frame {
            return Err(ProtocolError("frame larger than SETTINGS_MAX_FRAME_SIZE"));
        }
        if self.block.is_some() && kind != CONTINUATION {
            return Err(ProtocolError("header block interrupted"));
        }
        let payload = &frame[9.min(frame.len())..];
        match kind {
            DATA => self.data_frame(id, flags, len),
            HEADERS => {
                let mut p = payload;
                if flags & PADDED != 0 {
                    p = unpad(p)?;
                }
                if flags & PRIORITY != 0 {
                    p = p.get(5..).ok_or(ProtocolError("short HEADERS"))?;
                }
                if id == 0 {
                    return Err(ProtocolError("HEADERS on stream 0"));
                }
                let end_stream = flags & END_STREAM != 0;
                if flags & END_HEADERS != 0 {
                    self.headers(id, end_stream, p)
                } else {
                    self.block = Some((id, end_stream, p.to_vec()));
                    Ok(())
                }
            }
            CONTINUATION => {
                let Some((sid, end_stream, mut block)) = self.block.take() else {
                    return Err(ProtocolError("CONTINUATION without HEADERS"));
                };
                if sid != id || block.len() + payload.len() > MAX_BLOCK {
                    return Err(ProtocolError("bad CONTINUATION"));
                }
                block.extend_from_slice(payload);
                if flags & END_HEADERS != 0 {
                    self.headers(id, end_stream, &block)
                } else {
                    self.block = Some((sid, end_stream, block));
                    Ok(())
                }
            }
            RST_STREAM => {
                if len != 4 || id == 0 {
                    return Err(ProtocolError("bad RST_STREAM"));
                }
                if let Some(s) = self.streams.remove(&id) {
                    let code = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
                    self.events.push(if code == REFUSED_STREAM {
                        RequestEvent::Unprocessed { slot: s.slot }
                    } else {
                        RequestEvent::Reset { slot: s.slot }
                    });
                }
                Ok(())
            }
            SETTINGS => self.settings(id, flags, payload),
            PUSH_PROMISE => Err(ProtocolError("PUSH_PROMISE with push disabled")),
            PING => {
                if len != 8 || id != 0 {
                    return Err(ProtocolError("bad PING"));
                }
                if flags & ACK == 0 {
                    frame_head(&mut self.out, 8, PING, ACK, 0);
                    self.out.extend_from_slice(payload);
                }
                Ok(())
            }
            GOAWAY => {
                if len < 8 || id != 0 {
                    return Err(ProtocolError("bad GOAWAY"));
                }
                let last = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]])
                    & 0x7fff_ffff;
                self.goaway = true;
                let lost: Vec<u32> = self.streams.keys().copied().filter(|&i| i > last).collect();
                for i in lost {
                    let s = self.streams.remove(&i).expect("listed");
                    self.events.push(RequestEvent::Unprocessed { slot: s.slot });
                }
                Ok(())
            }
            WINDOW_UPDATE => {
                if len != 4 {
                    return Err(ProtocolError("bad WINDOW_UPDATE"));
                }
                let inc = (u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]])
                    & 0x7fff_ffff) as i64;
                if inc == 0 {
                    return Err(ProtocolError("WINDOW_UPDATE of 0"));
                }
                let window = if id == 0 {
                    &mut self.conn_send_window
                } else if let Some(s) = self.streams.get_mut(&id) {
                    &mut s.send_window
                } else {
                    return Ok(());
                };
                *window += inc;
                if *window > i32::MAX as i64 {
                    return Err(ProtocolError("window overflow"));
                }
                self.unblock();
                Ok(())
            }
            _ => Ok(()), // Unknown frame types are ignored (RFC 9113 §4.1).
        }
    }

    fn data_frame(&mut self, id: u32, flags: u8, len: usize) -> Result<()> {
        let padded = flags & PADDED != 0;
        if padded && len == 0 {
            return Err(ProtocolError("DATA padding without length"));
        }
        // Flow control counts the whole payload, padding included.
        // Topped up to the window once half of it is used.
        self.conn_avail -= len as i64;
        if self.conn_avail <= i64::from(self.conn_window / 2) {
            let n = i64::from(self.conn_window) - self.conn_avail;
            if n > 0 {
                self.window_update(0, n as u32);
                self.conn_avail += n;
            }
        }
        let body = len - padded as usize;
        match self.streams.get_mut(&id) {
            Some(s) if s.status.is_some() => {
                s.unacked += len as u32;
                if s.unacked >= (self.stream_window / 2).max(1) && flags & END_STREAM == 0 {
                    let n = std::mem::take(&mut s.unacked);
                    self.window_update(id, n);
                }
            }
            Some(_) => return Err(ProtocolError("DATA before response HEADERS")),
            // A stream already given up on (reset, or finished early): count nothing.
            None if id != 0 && id < self.next_id => {}
            None => return Err(ProtocolError("DATA on an idle stream")),
        }
        let d = DataFrame {
            stream: id,
            end_stream: flags & END_STREAM != 0 && self.streams.contains_key(&id),
            need_pad_len: padded,
            body,
            pad: 0,
        };
        if !padded {
            // (A padded frame's body is counted once its padding length is read.)
            if let Some(s) = self.streams.get_mut(&id) {
                s.body_bytes += body as u64;
            }
            if body == 0 {
                if d.end_stream {
                    self.finish(id);
                }
                return Ok(());
            }
        }
        self.data = Some(d);
        Ok(())
    }

    fn headers(&mut self, id: u32, end_stream: bool, block: &[u8]) -> Result<()> {
        let trailers = self.streams.get(&id).is_some_and(|s| s.status.is_some());
        let fields = &mut self.fields;
        fields.begin(trailers);
        // Decoded even for streams given up on, to keep the HPACK table in step.
        self.decoder
            .decode(block, usize::MAX, |name, value| fields.field(name, value))
            .map_err(|_| ProtocolError("invalid HPACK"))?;
        let Some(s) = self.streams.get_mut(&id) else {
            return if id < self.next_id {
                Ok(())
            } else {
                Err(ProtocolError("HEADERS on an idle stream"))
            };
        };
        let Ok(head) = self.fields.finish() else {
            // Malformed (RFC 9113 §8.1.1), a missing status or a pseudo-header in trailers
            // included.
            self.malformed(id);
            return Ok(());
        };
        if trailers {
            s.head_bytes += head.field_bytes;
            if !end_stream {
                return Err(ProtocolError("trailers without END_STREAM"));
            }
        } else {
            let status = head.status;
            if status == 101 {
                return Err(ProtocolError("101 on HTTP/2"));
            }
            if is_interim(status) {
                // Interim response: the final one follows. One that ends the stream is
                // malformed (RFC 9113 §8.1).
                self.events.push(RequestEvent::Interim { slot: s.slot });
                if end_stream {
                    self.malformed(id);
                }
                return Ok(());
            }
            s.status = Some(status);
            s.content_length = head
                .content_length
                .filter(|_| response_has_body(self.head_requests, status));
            // As HTTP/1.1 would spell the status line, so that head bytes compare.
            s.head_bytes = head.field_bytes + 12;
            self.events.push(RequestEvent::Head { slot: s.slot });
        }
        if end_stream {
            self.finish(id);
        }
        Ok(())
    }

    fn settings(&mut self, id: u32, flags: u8, payload: &[u8]) -> Result<()> {
        if id != 0 || !payload.len().is_multiple_of(6) || (flags & ACK != 0 && !payload.is_empty())
        {
            return Err(ProtocolError("bad SETTINGS"));
        }
        if flags & ACK != 0 {
            return Ok(());
        }
        for s in payload.chunks(6) {
            let value = u32::from_be_bytes([s[2], s[3], s[4], s[5]]);
            match u16::from_be_bytes([s[0], s[1]]) {
                setting::MAX_CONCURRENT_STREAMS => self.max_streams = value as usize,
                setting::INITIAL_WINDOW_SIZE => {
                    if value > i32::MAX as u32 {
                        return Err(ProtocolError("SETTINGS_INITIAL_WINDOW_SIZE too large"));
                    }
                    let delta = value as i64 - self.initial_send_window;
                    self.initial_send_window = value as i64;
                    for s in self.streams.values_mut() {
                        s.send_window += delta;
                    }
                }
                setting::MAX_FRAME_SIZE => {
                    if !(16_384..=16_777_215).contains(&value) {
                        return Err(ProtocolError("bad SETTINGS_MAX_FRAME_SIZE"));
                    }
                    self.send_frame = value as usize;
                }
                _ => {}
            }
        }
        frame_head(&mut self.out, 0, SETTINGS, ACK, 0);
        self.unblock();
        Ok(())
    }

    /// A response completed: report it, and stop an upload the server no longer wants. One
    /// whose DATA does not add up to its content-length is malformed.
    fn finish(&mut self, id: u32) {
        if self
            .streams
            .get(&id)
            .is_some_and(|s| s.content_length.is_some_and(|n| n != s.body_bytes))
        {
            return self.malformed(id);
        }
        let Some(s) = self.streams.remove(&id) else {
            return;
        };
        if s.upload.is_some() {
            self.rst_stream(id);
        }
        self.events.push(RequestEvent::Done {
            slot: s.slot,
            status: s.status.unwrap_or(0),
            head_bytes: s.head_bytes,
            body_bytes: s.body_bytes,
        });
    }

    /// A malformed response: report it, and reset the stream with PROTOCOL_ERROR.
    fn malformed(&mut self, id: u32) {
        let Some(s) = self.streams.remove(&id) else {
            return;
        };
        self.reset(id, PROTOCOL_ERROR);
        self.events.push(RequestEvent::Malformed { slot: s.slot });
    }

    fn rst_stream(&mut self, id: u32) {
        self.reset(id, NO_ERROR);
    }

    fn reset(&mut self, id: u32, code: u32) {
        frame_head(&mut self.out, 4, RST_STREAM, 0, id);
        self.out.extend_from_slice(&code.to_be_bytes());
    }

    fn unblock(&mut self) {
        for id in std::mem::take(&mut self.blocked) {
            self.send_body(id);
        }
    }

    /// Send what the windows allow of a stream's request body.
    fn send_body(&mut self, id: u32) {
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        let Some((body, mut off)) = s.upload.take() else {
            return;
        };
        while off < body.len() {
            let n = (body.len() - off)
                .min(self.send_frame)
                .min(self.conn_send_window.max(0) as usize)
                .min(s.send_window.max(0) as usize);
            if n == 0 {
                s.upload = Some((body, off));
                self.blocked.push(id);
                return;
            }
            let end = off + n == body.len();
            let flags = if end { END_STREAM } else { 0 };
            s.send_window -= n as i64;
            self.conn_send_window -= n as i64;
            frame_head(&mut self.out, n, DATA, flags, id);
            self.out.extend_from_slice(&body[off..off + n]);
            off += n;
        }
    }

    fn window_update(&mut self, id: u32, n: u32) {
        frame_head(&mut self.out, 4, WINDOW_UPDATE, 0, id);
        self.out.extend_from_slice(&n.to_be_bytes());
    }
}

fn frame_head(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, id: u32) {
    let l = (len as u32).to_be_bytes();
    let i = id.to_be_bytes();
    out.extend_from_slice(&[l[1], l[2], l[3], kind, flags, i[0], i[1], i[2], i[3]]);
}

fn frame_len(h: &[u8]) -> usize {
    (h[0] as usize) << 16 | (h[1] as usize) << 8 | h[2] as usize
}

/// Strip a padded frame's pad length byte and padding.
fn unpad(p: &[u8]) -> Result<&[u8]> {
    let (&pad, rest) = p.split_first().ok_or(ProtocolError("short padded frame"))?;
    rest.len()
        .checked_sub(pad as usize)
        .map(|n| &rest[..n])
        .ok_or(ProtocolError("padding longer than the frame"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame as the server would send it.
    fn frame(kind: u8, flags: u8, id: u32, payload: &[u8]) -> Vec<u8> {
        let mut f = Vec::new();
        frame_head(&mut f, payload.len(), kind, flags, id);
        f.extend_from_slice(payload);
        f
    }

    /// The client's output, split into (kind, flags, stream, payload) frames.
    fn sent(c: &mut Client) -> Vec<(u8, u8, u32, Vec<u8>)> {
        let mut out = Vec::new();
        c.take_output(&mut out);
        let mut b = out.strip_prefix(PREFACE).unwrap_or(&out);
        let mut frames = Vec::new();
        while !b.is_empty() {
            let len = frame_len(b);
            let id = u32::from_be_bytes([b[5], b[6], b[7], b[8]]);
            frames.push((b[3], b[4], id, b[9..9 + len].to_vec()));
            b = &b[9 + len..];
        }
        frames
    }

    fn setting(id: u16, value: u32) -> Vec<u8> {
        let mut s = id.to_be_bytes().to_vec();
        s.extend_from_slice(&value.to_be_bytes());
        s
    }

    /// Feed in every possible split: whole, then one byte at a time.
    fn feed_bytewise(c: &mut Client, input: &[u8]) -> Result<()> {
        for b in input.chunks(1) {
            c.feed(b)?;
        }
        Ok(())
    }

    fn events(c: &mut Client) -> Vec<RequestEvent> {
        c.events().collect()
    }

    /// `:status: 200` (static index 8) and `content-type: text/plain` (literal, name index 31).
    fn head_200() -> Vec<u8> {
        let mut b = vec![0x88, 0x0f, 0x10, 10];
        b.extend_from_slice(b"text/plain");
        b
    }

    fn done(slot: usize, status: u16, body: u64) -> RequestEvent {
        RequestEvent::Done {
            slot,
            status,
            head_bytes: 12 + (12 + 10 + 4),
            body_bytes: body,
        }
    }

    #[test]
    fn preface_settings_and_a_request() {
        let mut c = Client::default();
        let f = sent(&mut c);
        assert_eq!(f[0].0, SETTINGS);
        assert_eq!(f[0].3, [setting(2, 0), setting(4, WINDOW)].concat());
        assert_eq!(
            f[1],
            (
                WINDOW_UPDATE,
                0,
                0,
                (WINDOW - 65_535).to_be_bytes().to_vec()
            )
        );
        c.start(b"\x82\x84", &Bytes::new(), 7);
        assert_eq!(
            sent(&mut c),
            [(HEADERS, END_STREAM | END_HEADERS, 1, vec![0x82, 0x84])]
        );
        assert_eq!(c.in_flight(), 1);
    }

    #[test]
    fn responses_split_anywhere_are_counted_exactly() {
        for bytewise in [false, true] {
            let mut c = Client::default();
            sent(&mut c);
            c.start(b"\x82", &Bytes::new(), 0);
            c.start(b"\x82", &Bytes::new(), 1);
            sent(&mut c);
            let mut input = frame(SETTINGS, 0, 0, &setting(3, 10));
            input.extend(frame(HEADERS, END_HEADERS, 3, &head_200()));
            input.extend(frame(DATA, 0, 3, &[b'x'; 1000]));
            // Padded HEADERS (with priority) and padded DATA on stream 1.
            let mut h = vec![2, 0, 0, 0, 0, 16];
            h.extend(head_200());
            h.extend([0, 0]);
            input.extend(frame(HEADERS, END_HEADERS | PADDED | PRIORITY, 1, &h));
            let mut d = vec![5];
            d.extend([b'y'; 20]);
            d.extend([0; 5]);
            input.extend(frame(DATA, END_STREAM | PADDED, 1, &d));
            input.extend(frame(DATA, END_STREAM, 3, &[b'x'; 24]));
            if bytewise {
                feed_bytewise(&mut c, &input).unwrap();
            } else {
                c.feed(&input).unwrap();
            }
            assert_eq!(
                events(&mut c),
                [
                    RequestEvent::Head { slot: 1 },
                    RequestEvent::Head { slot: 0 },
                    done(0, 200, 20),
                    done(1, 200, 1024),
                ]
            );
            assert_eq!(c.in_flight(), 0);
            assert_eq!(c.max_streams, 10);
            assert_eq!(sent(&mut c), [(SETTINGS, ACK, 0, vec![])]);
        }
    }

    #[test]
    fn interim_responses_and_trailers() {
        let mut c = Client::default();
        sent(&mut c);
        c.start(b"\x82", &Bytes::new(), 0);
        // 103 Early Hints (literal :status, name index 8), then 200, then trailers.
        c.feed(&frame(HEADERS, END_HEADERS, 1, b"\x08\x03103"))
            .unwrap();
        assert_eq!(events(&mut c), [RequestEvent::Interim { slot: 0 }]);
        c.feed(&frame(HEADERS, END_HEADERS, 1, &head_200()))
            .unwrap();
        c.feed(&frame(DATA, 0, 1, b"abc")).unwrap();
        // Trailer `etag: x` (name index 34), split over HEADERS and CONTINUATION.
        c.feed(&frame(HEADERS, END_STREAM, 1, b"\x0f\x13")).unwrap();
        c.feed(&frame(CONTINUATION, END_HEADERS, 1, b"\x01x"))
            .unwrap();
        let mut want = done(0, 200, 3);
        if let RequestEvent::Done { head_bytes, .. } = &mut want {
            *head_bytes += 4 + 1 + 4;
        }
        assert_eq!(events(&mut c), [RequestEvent::Head { slot: 0 }, want]);
    }

    #[test]
    fn an_interim_response_that_ends_the_stream_is_malformed() {
        let mut c = Client::default();
        sent(&mut c);
        c.feed(&frame(SETTINGS, 0, 0, &setting(4, 0))).unwrap();
        c.start(b"\x83", &Bytes::from_static(b"body"), 0);
        sent(&mut c);
        // A 1xx with END_STREAM (RFC 9113 §8.1): no final response will come; the upload stops.
        c.feed(&frame(HEADERS, END_HEADERS | END_STREAM, 1, b"\x08\x03103"))
            .unwrap();
        assert_eq!(
            events(&mut c),
            [
                RequestEvent::Interim { slot: 0 },
                RequestEvent::Malformed { slot: 0 }
            ]
        );
        assert_eq!(sent(&mut c), [(RST_STREAM, 0, 1, vec![0, 0, 0, 1])]);
        assert_eq!(c.in_flight(), 0);
        // 101 has no place in HTTP/2 (RFC 9113 §8.6).
        let mut c = Client::default();
        c.start(b"\x82", &Bytes::new(), 0);
        assert!(c
            .feed(&frame(HEADERS, END_HEADERS, 1, b"\x08\x03101"))
            .is_err());
    }

    #[test]
    fn uploads_follow_the_server_windows() {
        let mut c = Client::default();
        sent(&mut c);
        c.feed(&frame(SETTINGS, 0, 0, &setting(4, 10))).unwrap();
        sent(&mut c);
        let body = Bytes::from(vec![b'u'; 25]);
        c.start(b"\x83", &body, 0);
        let f = sent(&mut c);
        assert_eq!((f[0].0, f[0].1), (HEADERS, END_HEADERS));
        assert_eq!((f[1].0, f[1].1, f[1].3.len()), (DATA, 0, 10));
        assert_eq!(f.len(), 2);
        let more = 12u32.to_be_bytes();
        c.feed(&frame(WINDOW_UPDATE, 0, 1, &more)).unwrap();
        let f = sent(&mut c);
        assert_eq!((f[0].0, f[0].1, f[0].3.len()), (DATA, 0, 12));
        // A larger initial window applies to open streams too.
        c.feed(&frame(SETTINGS, 0, 0, &setting(4, 100))).unwrap();
        let f = sent(&mut c);
        assert_eq!(f[0], (SETTINGS, ACK, 0, vec![]));
        assert_eq!((f[1].0, f[1].1, f[1].3.len()), (DATA, END_STREAM, 3));
    }

    #[test]
    fn a_response_before_the_whole_upload_stops_it() {
        let mut c = Client::default();
        sent(&mut c);
        c.feed(&frame(SETTINGS, 0, 0, &setting(4, 0))).unwrap();
        c.start(b"\x83", &Bytes::from_static(b"body"), 0);
        sent(&mut c);
        c.feed(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &head_200()))
            .unwrap();
        assert_eq!(
            sent(&mut c),
            [(RST_STREAM, 0, 1, vec![0; 4])],
            "the unsent body is abandoned"
        );
        assert!(matches!(events(&mut c)[..], [_, RequestEvent::Done { .. }]));
        // A late window update for it is ignored.
        c.feed(&frame(WINDOW_UPDATE, 0, 1, &[0, 0, 0, 9])).unwrap();
        assert!(!c.has_output());
    }

    #[test]
    fn resets_goaway_and_pings() {
        let mut c = Client::default();
        sent(&mut c);
        for slot in 0..3 {
            c.start(b"\x82", &Bytes::new(), slot);
        }
        sent(&mut c);
        c.feed(&frame(RST_STREAM, 0, 3, &[0, 0, 0, 2])).unwrap();
        c.feed(&frame(PING, 0, 0, b"12345678")).unwrap();
        assert_eq!(sent(&mut c), [(PING, ACK, 0, b"12345678".to_vec())]);
        // GOAWAY with last stream 1: stream 5 was never processed.
        c.feed(&frame(GOAWAY, 0, 0, &[0, 0, 0, 1, 0, 0, 0, 0]))
            .unwrap();
        assert_eq!(
            events(&mut c),
            [
                RequestEvent::Reset { slot: 1 },
                RequestEvent::Unprocessed { slot: 2 }
            ]
        );
        assert!(c.going_away() && !c.can_start());
        assert_eq!(c.in_flight(), 1);
        // Data for the reset stream is ignored, not an error.
        c.feed(&frame(HEADERS, END_HEADERS, 3, &head_200()))
            .unwrap();
        c.feed(&frame(DATA, END_STREAM, 3, b"late")).unwrap();
        c.feed(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &head_200()))
            .unwrap();
        assert!(matches!(
            events(&mut c)[..],
            [_, RequestEvent::Done { slot: 0, .. }]
        ));
    }

    /// `content-length` (literal, static name index 28) with `value`.
    fn length(value: &[u8]) -> Vec<u8> {
        let mut b = vec![0x0f, 0x0d, value.len() as u8];
        b.extend_from_slice(value);
        b
    }

    /// Malformed responses: a protocol error on their stream (RST_STREAM(PROTOCOL_ERROR)),
    /// the connection goes on.
    #[test]
    fn malformed_responses_reset_their_stream() {
        let with_length = |v: &[u8]| [&[0x88][..], &length(v)].concat();
        let cases: Vec<(&str, Vec<u8>)> = vec![
            (
                "no :status",
                frame(HEADERS, END_HEADERS | END_STREAM, 1, &head_200()[1..]),
            ),
            (
                ":status twice",
                frame(HEADERS, END_HEADERS | END_STREAM, 1, &[0x88, 0x88]),
            ),
            (
                ":status after a field",
                frame(
                    HEADERS,
                    END_HEADERS | END_STREAM,
                    1,
                    &[&head_200()[1..], &[0x88]].concat(),
                ),
            ),
            (
                ":status in trailers",
                [
                    frame(HEADERS, END_HEADERS, 1, &head_200()),
                    frame(HEADERS, END_HEADERS | END_STREAM, 1, &[0x88]),
                ]
                .concat(),
            ),
            (
                "content-length above the DATA",
                [
                    frame(HEADERS, END_HEADERS, 1, &with_length(b"5")),
                    frame(DATA, END_STREAM, 1, b"abc"),
                ]
                .concat(),
            ),
            (
                "content-length below the DATA",
                [
                    frame(HEADERS, END_HEADERS, 1, &with_length(b"2")),
                    frame(DATA, END_STREAM, 1, b"abc"),
                ]
                .concat(),
            ),
            (
                "content-length not decimal",
                frame(HEADERS, END_HEADERS | END_STREAM, 1, &with_length(b"-0")),
            ),
            (
                "content-length twice, differing",
                frame(
                    HEADERS,
                    END_HEADERS | END_STREAM,
                    1,
                    &[with_length(b"0"), length(b"1")].concat(),
                ),
            ),
        ];
        for (what, input) in cases {
            let mut c = Client::default();
            sent(&mut c);
            c.start(b"\x82", &Bytes::new(), 0);
            c.start(b"\x82", &Bytes::new(), 1);
            sent(&mut c);
            c.feed(&input).unwrap();
            c.feed(&frame(HEADERS, END_HEADERS | END_STREAM, 3, &head_200()))
                .unwrap();
            assert_eq!(
                events(&mut c).last(),
                Some(&done(1, 200, 0)),
                "{what}: the connection goes on"
            );
            assert!(
                sent(&mut c).contains(&(RST_STREAM, 0, 1, vec![0, 0, 0, 1])),
                "{what}"
            );
        }
        // A HEAD's response (and a 204's) has no DATA, whatever its content-length says.
        let mut c = Client::default();
        c.head_requests();
        c.start(b"\x82", &Bytes::new(), 0);
        c.feed(&frame(
            HEADERS,
            END_HEADERS | END_STREAM,
            1,
            &with_length(b"5"),
        ))
        .unwrap();
        assert!(matches!(
            events(&mut c)[..],
            [
                RequestEvent::Head { .. },
                RequestEvent::Done { slot: 0, .. }
            ]
        ));
    }

    #[test]
    fn protocol_violations_are_errors() {
        let big = vec![0; MAX_FRAME + 1];
        let cases: Vec<Vec<u8>> = vec![
            frame(0x42, 0, 0, &big),
            frame(DATA, 0, 1, b"no head yet"),
            frame(DATA, 0, 9, b"idle"),
            frame(HEADERS, END_HEADERS, 9, &head_200()),
            frame(HEADERS, END_HEADERS, 1, b"\x80"),
            frame(HEADERS, END_HEADERS, 1, b"\x5f"), // no :status
            frame(PUSH_PROMISE, END_HEADERS, 1, &[0, 0, 0, 2, 0x82]),
            [
                frame(HEADERS, 0, 1, &head_200()),
                frame(PING, 0, 0, &[0; 8]),
            ]
            .concat(),
            frame(CONTINUATION, END_HEADERS, 1, b""),
            frame(WINDOW_UPDATE, 0, 0, &[0; 4]),
            frame(WINDOW_UPDATE, 0, 0, &[0x7f, 0xff, 0xff, 0xff]),
            frame(SETTINGS, 0, 0, &setting(5, 100)),
            frame(SETTINGS, 0, 0, &[0; 5]),
            frame(DATA, PADDED, 1, &[]),
            frame(PING, 0, 0, &[0; 7]),
        ];
        for (k, input) in cases.iter().enumerate() {
            let mut c = Client::default();
            c.start(b"\x82", &Bytes::new(), 0);
            if k == 1 {
                assert!(c.feed(input).is_err());
                continue;
            }
            let mut with_head = frame(HEADERS, END_HEADERS, 1, &head_200());
            with_head.extend(frame(DATA, PADDED, 1, &[9, 1, 2]));
            let input = if k == 13 { &with_head } else { input };
            assert!(
                feed_bytewise(&mut c, input).is_err(),
                "case {k} accepted: {input:02x?}"
            );
        }
    }

    #[test]
    fn large_header_blocks_use_continuation() {
        let mut c = Client::default();
        sent(&mut c);
        let block = vec![0x82; MAX_FRAME * 2 + 1];
        c.start(&block, &Bytes::new(), 0);
        let f = sent(&mut c);
        let kinds: Vec<_> = f.iter().map(|f| (f.0, f.1, f.3.len())).collect();
        assert_eq!(
            kinds,
            [
                (HEADERS, END_STREAM, MAX_FRAME),
                (CONTINUATION, 0, MAX_FRAME),
                (CONTINUATION, END_HEADERS, 1)
            ]
        );
    }

    #[test]
    fn received_data_is_returned_to_the_server() {
        let mut c = Client::default();
        sent(&mut c);
        c.start(b"\x82", &Bytes::new(), 0);
        sent(&mut c);
        c.feed(&frame(HEADERS, END_HEADERS, 1, &head_200()))
            .unwrap();
        let chunk = frame(DATA, 0, 1, &vec![0; MAX_FRAME]);
        let frames = (WINDOW / 2) as usize / MAX_FRAME + 1;
        for _ in 0..frames {
            c.feed(&chunk).unwrap();
        }
        let n = (frames * MAX_FRAME) as u32;
        assert_eq!(
            sent(&mut c),
            [
                (WINDOW_UPDATE, 0, 0, n.to_be_bytes().to_vec()),
                (WINDOW_UPDATE, 0, 1, n.to_be_bytes().to_vec())
            ]
        );
    }

    /// h2load's `-w 16 -W 15 -f 64K --header-table-size 64K`: the SETTINGS say so, no
    /// connection WINDOW_UPDATE opens more than 2^15-1 (below the initial 65 535, reached by
    /// holding updates back), each window is topped up once half of it is used, frames up to
    /// 64K are taken and larger ones refused, and the server's HPACK table may grow to 64K.
    #[test]
    fn h2load_offers_set_settings_windows_frames_and_table() {
        let offer = Offer {
            stream_window_bits: Some(16),
            conn_window_bits: Some(15),
            max_frame: 65_536,
            header_table: 65_536,
        };
        let mut c = Client::new(&offer);
        let f = sent(&mut c);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].0, SETTINGS);
        assert_eq!(
            f[0].3,
            // 2^16-1 is the initial window already: not sent.
            [setting(2, 0), setting(5, 65_536), setting(1, 65_536)].concat()
        );
        c.start(b"\x82", &Bytes::new(), 0);
        sent(&mut c);
        // A table size update to 64K before the status: allowed by our HEADER_TABLE_SIZE.
        let mut block = vec![0x3f, 0xe1, 0xff, 0x03];
        block.extend(head_200());
        c.feed(&frame(HEADERS, END_HEADERS, 1, &block)).unwrap();
        // 40 000 bytes in one frame (above 16K): taken. The connection has 65 535 - 40 000
        // left, above half its window (16 383): no update yet; the stream passed half of 65 535.
        c.feed(&frame(DATA, 0, 1, &vec![0; 40_000])).unwrap();
        assert_eq!(
            sent(&mut c),
            [(WINDOW_UPDATE, 0, 1, 40_000u32.to_be_bytes().to_vec())]
        );
        // 10 000 more: 15 535 left on the connection, under half: topped up to 32 767.
        c.feed(&frame(DATA, 0, 1, &vec![0; 10_000])).unwrap();
        assert_eq!(
            sent(&mut c),
            [(
                WINDOW_UPDATE,
                0,
                0,
                (32_767u32 - 15_535).to_be_bytes().to_vec()
            )]
        );
        c.feed(&frame(DATA, END_STREAM, 1, b"")).unwrap();
        assert_eq!(
            events(&mut c),
            [RequestEvent::Head { slot: 0 }, done(0, 200, 50_000)]
        );
        let mut c = Client::new(&offer);
        assert_eq!(
            c.feed(&frame(DATA, 0, 1, &vec![0; 65_537])),
            Err(ProtocolError("frame larger than SETTINGS_MAX_FRAME_SIZE"))
        );
        // The defaults: 16K frames only, updates up to a 4K table.
        let mut c = Client::default();
        c.start(b"\x82", &Bytes::new(), 0);
        assert!(c.feed(&frame(HEADERS, END_HEADERS, 1, &block)).is_err());
    }

    /// Random bytes, and a valid server stream with bytes flipped, cut and fed in random pieces:
    /// errors are fine, panics and runaway buffering are not.
    #[test]
    fn random_and_mutated_input_never_panics() {
        let mut rng = loadterm_plan::Rng::new(7);
        let mut valid = frame(SETTINGS, 0, 0, &setting(3, 10));
        for id in [1u32, 3] {
            valid.extend(frame(HEADERS, END_HEADERS, id, &head_200()));
            valid.extend(frame(DATA, PADDED, id, &[2, b'a', b'b', 0, 0]));
            valid.extend(frame(DATA, END_STREAM, id, b"cd"));
        }
        valid.extend(frame(PING, 0, 0, b"12345678"));
        valid.extend(frame(GOAWAY, 0, 0, &[0, 0, 0, 3, 0, 0, 0, 0]));
        for round in 0..20_000 {
            let mut input = if round % 2 == 0 {
                let n = rng.next_u32() as usize % 200;
                (0..n).map(|_| rng.next_u32() as u8).collect::<Vec<u8>>()
            } else {
                let mut v = valid.clone();
                for _ in 0..1 + rng.next_u32() % 4 {
                    let i = rng.next_u32() as usize % v.len();
                    v[i] = rng.next_u32() as u8;
                }
                v
            };
            input.truncate(rng.next_u32() as usize % (input.len() + 1));
            let mut c = Client::default();
            c.start(b"\x82", &Bytes::new(), 0);
            c.start(b"\x83", &Bytes::from_static(b"upload"), 1);
            let mut rest = &input[..];
            while !rest.is_empty() {
                let n = 1 + rng.next_u32() as usize % rest.len();
                if c.feed(&rest[..n]).is_err() {
                    break;
                }
                rest = &rest[n..];
                let _ = c.events().count();
            }
            assert!(c.partial.len() <= 9 + MAX_FRAME, "round {round}");
        }
    }
}

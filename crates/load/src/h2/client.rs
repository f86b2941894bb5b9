//! The load generator's HTTP/2 client: requests on the codec's [`Connection`] in its client role,
//! which keeps the framing, settings, stream states, flow control and GOAWAY/RST rules; this
//! layer adds what a load generator needs on top. It sends prebuilt request header blocks,
//! decodes response heads (HPACK, the message rules), counts response bodies without copying
//! them, and reports per-request outcomes as events.

use crate::setup::Offer;
use bytes::Bytes;
use loadterm_codec::fields::ResponseFields;
use loadterm_codec::h2::{code, ConnError, Connection, Event, LocalSettings, Role};
use loadterm_codec::hpack;
use loadterm_plan::{is_interim, response_has_body};

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

/// One request in flight: its response so far, its upload.
#[derive(Debug)]
struct Request {
    slot: usize,
    stream: u32,
    /// Final status, once the response head is in.
    status: Option<u16>,
    head_bytes: u64,
    body_bytes: u64,
    /// Request body still to send, from this offset.
    upload: Option<(Bytes, usize)>,
}

pub(super) struct Client {
    conn: Connection,
    out: Vec<u8>,
    events: Vec<RequestEvent>,
    /// By slot, the token of their streams' events: no lookup by stream id.
    requests: Vec<Option<Request>>,
    in_flight: usize,
    decoder: hpack::HpackDecoder,
    fields: ResponseFields,
    /// Streams (and slots) with a request body waiting for window.
    blocked: Vec<(u32, usize)>,
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
        let mut conn = Connection::new(
            Role::Client,
            LocalSettings {
                stream_window: offer.h2_stream_window(),
                conn_window: offer.h2_conn_window(),
                max_frame_size: offer.max_frame,
                header_table_size: offer.header_table,
                ..LocalSettings::default()
            },
        );
        let mut out = Vec::with_capacity(16 * 1024);
        conn.take_control(&mut out);
        Client {
            conn,
            out,
            events: Vec::new(),
            requests: Vec::new(),
            in_flight: 0,
            decoder: hpack::HpackDecoder::with_limit(offer.header_table as usize),
            fields: ResponseFields::default(),
            blocked: Vec::new(),
            head_requests: false,
        }
    }

    /// Whether a new request may start now.
    pub(super) fn can_start(&self) -> bool {
        self.conn.can_open()
    }

    /// Requests in flight.
    pub(super) fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// The server said GOAWAY: no new requests on this connection.
    pub(super) fn going_away(&self) -> bool {
        self.conn.goaway_received()
    }

    /// Start a request with a prebuilt HPACK header block and an optional body.
    pub(super) fn start(&mut self, block: &[u8], body: &Bytes, slot: usize) {
        let stream = self.conn.open(&mut self.out, slot, body.is_empty(), |o| {
            o.extend_from_slice(block)
        });
        if self.requests.len() <= slot {
            self.requests.resize_with(slot + 1, || None);
        }
        debug_assert!(self.requests[slot].is_none(), "slot {slot} in use");
        self.requests[slot] = Some(Request {
            slot,
            stream,
            status: None,
            head_bytes: 0,
            body_bytes: 0,
            upload: (!body.is_empty()).then(|| (body.clone(), 0)),
        });
        self.in_flight += 1;
        if !body.is_empty() {
            self.send_body(stream, slot);
        }
    }

    /// Bytes to write: swapped into `buf`, which must be empty.
    pub(super) fn take_output(&mut self, buf: &mut Vec<u8>) {
        debug_assert!(buf.is_empty());
        self.conn.take_control(&mut self.out);
        std::mem::swap(&mut self.out, buf);
    }

    pub(super) fn has_output(&self) -> bool {
        !self.out.is_empty() || self.conn.has_control()
    }

    /// Outcomes since the last call.
    pub(super) fn events(&mut self) -> std::vec::Drain<'_, RequestEvent> {
        self.events.drain(..)
    }

    /// Process bytes read from the server.
    pub(super) fn feed(&mut self, mut input: &[u8]) -> Result<(), ConnError> {
        while let Some(ev) = self.conn.recv(&mut input)? {
            match ev {
                Event::Headers {
                    stream,
                    token,
                    block,
                    end_stream,
                    ..
                } => {
                    // No token: a stream given up on.
                    let r = request(&mut self.requests, stream, token);
                    let trailers = r.as_ref().is_some_and(|r| r.status.is_some());
                    let fields = &mut self.fields;
                    fields.begin(trailers);
                    // Decoded even for streams given up on, to keep the HPACK table in step.
                    if self
                        .decoder
                        .decode(block, usize::MAX, |name, value| fields.field(name, value))
                        .is_err()
                    {
                        return Err(self.conn.fail(code::COMPRESSION_ERROR, "invalid HPACK"));
                    }
                    let Some(r) = r else {
                        continue;
                    };
                    let verdict = head(
                        r,
                        &self.fields,
                        &mut self.conn,
                        &mut self.events,
                        (stream, end_stream, trailers, self.head_requests),
                    )?;
                    match verdict {
                        Verdict::Going => {}
                        Verdict::Done => self.finish(stream, token),
                        Verdict::Malformed => self.malformed(stream, token),
                    }
                }
                Event::Data {
                    stream,
                    token,
                    data,
                    end_stream,
                } => {
                    let Some(r) = request(&mut self.requests, stream, token) else {
                        continue;
                    };
                    if r.status.is_none() {
                        return Err(self.early_data());
                    }
                    r.body_bytes += data.len() as u64;
                    if end_stream {
                        self.finish(stream, token);
                    }
                }
                Event::Reset {
                    stream,
                    token,
                    code,
                    remote,
                } => {
                    let Some(r) = self.take(stream, token) else {
                        continue;
                    };
                    let slot = r.slot;
                    self.events.push(if !remote {
                        // A stream error the connection found in the response (its DATA against
                        // its content-length, its flow control).
                        RequestEvent::Malformed { slot }
                    } else if code == code::REFUSED_STREAM {
                        RequestEvent::Unprocessed { slot }
                    } else {
                        RequestEvent::Reset { slot }
                    });
                }
                Event::GoAway { last_stream, .. } => {
                    for r in &mut self.requests {
                        if let Some(r) = r.take_if(|r| r.stream > last_stream) {
                            self.in_flight -= 1;
                            self.events.push(RequestEvent::Unprocessed { slot: r.slot });
                        }
                    }
                }
                Event::Window => {
                    // The connection's frames first: the SETTINGS ACK for the window it opens.
                    self.conn.take_control(&mut self.out);
                    for (stream, slot) in std::mem::take(&mut self.blocked) {
                        self.send_body(stream, slot);
                    }
                }
            }
        }
        Ok(())
    }

    /// DATA before the final head: the connection fails.
    fn early_data(&mut self) -> ConnError {
        self.conn
            .fail(code::PROTOCOL_ERROR, "DATA before the final response head")
    }

    /// The request on `stream` (`token` its slot), out of the requests in flight.
    fn take(&mut self, stream: u32, token: Option<usize>) -> Option<Request> {
        let r = self.requests.get_mut(token?)?;
        let r = r.take_if(|r| r.stream == stream)?;
        self.in_flight -= 1;
        Some(r)
    }

    /// A response completed: report it, and stop an upload the server no longer wants.
    fn finish(&mut self, stream: u32, token: Option<usize>) {
        let Some(r) = self.take(stream, token) else {
            return;
        };
        if r.upload.is_some() {
            self.conn.reset(stream, code::NO_ERROR);
        }
        self.events.push(RequestEvent::Done {
            slot: r.slot,
            status: r.status.unwrap_or(0),
            head_bytes: r.head_bytes,
            body_bytes: r.body_bytes,
        });
    }

    /// A malformed response: report it, and reset the stream with PROTOCOL_ERROR.
    fn malformed(&mut self, stream: u32, token: Option<usize>) {
        let Some(r) = self.take(stream, token) else {
            return;
        };
        self.conn.reset(stream, code::PROTOCOL_ERROR);
        self.events.push(RequestEvent::Malformed { slot: r.slot });
    }

    /// Send what the windows allow of a stream's request body.
    fn send_body(&mut self, id: u32, slot: usize) {
        let Some(r) = request(&mut self.requests, id, Some(slot)) else {
            return;
        };
        let Some((body, mut off)) = r.upload.take() else {
            return;
        };
        while off < body.len() {
            let n = (body.len() - off)
                .min(self.conn.max_frame())
                .min(self.conn.send_window(id));
            if n == 0 {
                if self.conn.is_send_open(id) {
                    r.upload = Some((body, off));
                    self.blocked.push((id, slot));
                }
                return;
            }
            let end = off + n == body.len();
            self.conn.data(&mut self.out, id, n, end);
            self.out.extend_from_slice(&body[off..off + n]);
            off += n;
        }
    }
}

/// The request in flight on `stream`, by its events' `token` (its slot).
fn request(
    requests: &mut [Option<Request>],
    stream: u32,
    token: Option<usize>,
) -> Option<&mut Request> {
    requests
        .get_mut(token?)?
        .as_mut()
        .filter(|r| r.stream == stream)
}

/// What a response head (or trailers) did to its request.
enum Verdict {
    /// The response goes on.
    Going,
    Done,
    Malformed,
}

/// A response head (or trailers) decoded into `fields`, on request `r`'s stream `id`: its
/// events, its content-length given to the connection; `Err` for what breaks the connection.
fn head(
    r: &mut Request,
    fields: &ResponseFields,
    conn: &mut Connection,
    events: &mut Vec<RequestEvent>,
    (id, end_stream, trailers, head_requests): (u32, bool, bool, bool),
) -> Result<Verdict, ConnError> {
    let Ok(head) = fields.finish() else {
        // Malformed (RFC 9113 §8.1.1), a missing status or a pseudo-header in trailers included.
        return Ok(Verdict::Malformed);
    };
    if trailers {
        r.head_bytes += head.field_bytes;
        if !end_stream {
            return Err(conn.fail(code::PROTOCOL_ERROR, "trailers without END_STREAM"));
        }
        return Ok(Verdict::Done);
    }
    let status = head.status;
    if status == 101 {
        return Err(conn.fail(code::PROTOCOL_ERROR, "101 on HTTP/2"));
    }
    if is_interim(status) {
        // Interim response: the final one follows. One that ends the stream is malformed
        // (RFC 9113 §8.1).
        events.push(RequestEvent::Interim { slot: r.slot });
        return Ok(if end_stream {
            Verdict::Malformed
        } else {
            Verdict::Going
        });
    }
    r.status = Some(status);
    // As HTTP/1.1 would spell the status line, so that head bytes compare.
    r.head_bytes = head.field_bytes + 12;
    events.push(RequestEvent::Head { slot: r.slot });
    if let Some(n) = head
        .content_length
        .filter(|_| response_has_body(head_requests, status))
    {
        // The connection checks the DATA against it; a head that ends the stream announces
        // no DATA.
        if end_stream && n != 0 {
            return Ok(Verdict::Malformed);
        }
        conn.set_content_length(id, n);
    }
    Ok(if end_stream {
        Verdict::Done
    } else {
        Verdict::Going
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadterm_codec::h2::flag::{ACK, END_HEADERS, END_STREAM, PADDED, PRIORITY};
    use loadterm_codec::h2::{
        frame_len, put_frame_head, CONTINUATION, DATA, DEFAULT_MAX_FRAME as MAX_FRAME, GOAWAY,
        HEADERS, PING, PREFACE, RST_STREAM, SETTINGS, WINDOW_UPDATE,
    };

    /// Receive window per stream and per connection by default (`Offer`), as h2load's
    /// (`-w 30 -W 30`).
    const WINDOW: u32 = (1 << 30) - 1;

    /// A frame as the server would send it.
    fn frame(kind: u8, flags: u8, id: u32, payload: &[u8]) -> Vec<u8> {
        let mut f = Vec::new();
        put_frame_head(&mut f, payload.len(), kind, flags, id);
        f.extend_from_slice(payload);
        f
    }

    /// A client that has sent its preface and read the server's (empty) SETTINGS.
    fn ready() -> Client {
        let mut c = Client::default();
        c.feed(&frame(SETTINGS, 0, 0, &[])).unwrap();
        sent(&mut c);
        c
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

    /// Feed one byte at a time.
    fn feed_bytewise(c: &mut Client, input: &[u8]) -> Result<(), ConnError> {
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
            assert_eq!(c.conn.peer_max_streams(), 10);
            assert_eq!(sent(&mut c), [(SETTINGS, ACK, 0, vec![])]);
        }
    }

    #[test]
    fn interim_responses_and_trailers() {
        let mut c = ready();
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
        let mut c = ready();
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
        let mut c = ready();
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
        // (what, the response on stream 1, its stream still open when found: reset).
        let cases: Vec<(&str, Vec<u8>, bool)> = vec![
            (
                "no :status",
                frame(HEADERS, END_HEADERS | END_STREAM, 1, &head_200()[1..]),
                false,
            ),
            (
                ":status twice",
                frame(HEADERS, END_HEADERS | END_STREAM, 1, &[0x88, 0x88]),
                false,
            ),
            (
                ":status after a field",
                frame(
                    HEADERS,
                    END_HEADERS | END_STREAM,
                    1,
                    &[&head_200()[1..], &[0x88]].concat(),
                ),
                false,
            ),
            (
                ":status in trailers",
                [
                    frame(HEADERS, END_HEADERS, 1, &head_200()),
                    frame(HEADERS, END_HEADERS | END_STREAM, 1, &[0x88]),
                ]
                .concat(),
                false,
            ),
            (
                "content-length above the DATA",
                [
                    frame(HEADERS, END_HEADERS, 1, &with_length(b"5")),
                    frame(DATA, END_STREAM, 1, b"abc"),
                ]
                .concat(),
                true,
            ),
            (
                "content-length below the DATA",
                [
                    frame(HEADERS, END_HEADERS, 1, &with_length(b"2")),
                    frame(DATA, END_STREAM, 1, b"abc"),
                ]
                .concat(),
                true,
            ),
            (
                "content-length, and the head ends the stream",
                frame(HEADERS, END_HEADERS | END_STREAM, 1, &with_length(b"3")),
                false,
            ),
            (
                "content-length not decimal",
                frame(HEADERS, END_HEADERS | END_STREAM, 1, &with_length(b"-0")),
                false,
            ),
            (
                "content-length twice, differing",
                frame(
                    HEADERS,
                    END_HEADERS | END_STREAM,
                    1,
                    &[with_length(b"0"), length(b"1")].concat(),
                ),
                false,
            ),
        ];
        for (what, input, rst) in cases {
            let mut c = ready();
            c.start(b"\x82", &Bytes::new(), 0);
            c.start(b"\x82", &Bytes::new(), 1);
            sent(&mut c);
            c.feed(&input).unwrap();
            c.feed(&frame(HEADERS, END_HEADERS | END_STREAM, 3, &head_200()))
                .unwrap();
            let events = events(&mut c);
            assert!(
                events.contains(&RequestEvent::Malformed { slot: 0 }),
                "{what}: {events:?}"
            );
            assert_eq!(
                events.last(),
                Some(&done(1, 200, 0)),
                "{what}: the connection goes on"
            );
            assert_eq!(
                sent(&mut c).contains(&(RST_STREAM, 0, 1, vec![0, 0, 0, 1])),
                rst,
                "{what}"
            );
        }
        // A HEAD's response (and a 204's) has no DATA, whatever its content-length says.
        let mut c = ready();
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

    /// What this layer finds in a response that breaks the connection (the framing's errors
    /// are the codec's): an HPACK block that does not decode, a 101, trailers that do not end
    /// the stream, DATA before the final head.
    #[test]
    fn protocol_violations_are_errors() {
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("invalid HPACK", frame(HEADERS, END_HEADERS, 1, b"\x5f")),
            ("101", frame(HEADERS, END_HEADERS, 1, b"\x08\x03101")),
            (
                "trailers without END_STREAM",
                [
                    frame(HEADERS, END_HEADERS, 1, &head_200()),
                    frame(HEADERS, END_HEADERS, 1, b"\x0f\x13\x01x"),
                ]
                .concat(),
            ),
            (
                "DATA after an interim head",
                [
                    frame(HEADERS, END_HEADERS, 1, b"\x08\x03103"),
                    frame(DATA, 0, 1, b"early"),
                ]
                .concat(),
            ),
            (
                "a frame above 16K",
                frame(DATA, 0, 1, &vec![0; MAX_FRAME + 1]),
            ),
        ];
        for (what, input) in cases {
            let mut c = ready();
            c.start(b"\x82", &Bytes::new(), 0);
            assert!(feed_bytewise(&mut c, &input).is_err(), "{what} accepted");
        }
    }

    #[test]
    fn large_header_blocks_use_continuation() {
        let mut c = ready();
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
        let mut c = ready();
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
            [setting(2, 0), setting(1, 65_536), setting(5, 65_536)].concat()
        );
        c.feed(&frame(SETTINGS, 0, 0, &[])).unwrap();
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
            c.feed(&frame(DATA, 0, 1, &vec![0; 65_537]))
                .map_err(|e| e.code),
            Err(code::FRAME_SIZE_ERROR)
        );
        // The defaults: 16K frames only, updates up to a 4K table.
        let mut c = ready();
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
                assert!(sent(&mut c).len() < 64, "round {round}");
            }
        }
    }
}

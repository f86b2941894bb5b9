//! One HTTP/2 connection, sans-I/O, for either role (quinn-proto's shape): bytes read go in
//! through [`Connection::recv`], which yields [`Event`]s one at a time (header blocks and DATA
//! borrowed from the input, no copy unless a frame straddles reads); frames we send are written
//! into the caller's buffer (HEADERS and DATA headers, the payload appended or referenced by the
//! caller) or, for those the connection decides itself (SETTINGS and PING ACKs, WINDOW_UPDATE,
//! RST_STREAM, GOAWAY), queued for [`Connection::take_control`].
//!
//! What the connection decides: the preface and the first SETTINGS, frame sizes and layouts,
//! stream states and ids (RFC 9113 §5.1), the peer's concurrency limit, flow control both ways
//! (received DATA is returned to the peer at once, in WINDOW_UPDATEs batched per half window:
//! both users count request and response bodies and drop them), content-length against DATA,
//! PRIORITY parsed and ignored (§5.3.2), no server push, GOAWAY with the last stream processed,
//! every protocol error mapped to its stream or connection error code, and, for a server, the
//! flood budget (`flood`) and the cap on streams reset for the peer's errors (a client is the
//! load generator: it reports what its server does and does not cut it off). What it leaves to its user: HPACK ([`crate::hpack`]) and the message rules
//! ([`crate::fields`]), reported back with [`Connection::reset`] (a malformed message) or
//! [`Connection::fail`] (COMPRESSION_ERROR).

use super::flood::FrameLedger;
use super::streams::Streams;
use super::{
    code, flag, frame_head, frame_len, put_frame_head, setting, CONTINUATION, DATA,
    DEFAULT_MAX_FRAME, DEFAULT_WINDOW, GOAWAY, HEADERS, MAX_WINDOW, PING, PREFACE, PRIORITY,
    PUSH_PROMISE, RST_STREAM, SETTINGS, WINDOW_UPDATE,
};
use base64::Engine;
use std::collections::VecDeque;

/// Which end of the connection this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Client,
    Server,
}

/// What we offer the peer, sent in our SETTINGS (and a connection WINDOW_UPDATE).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalSettings {
    /// Streams the peer may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS).
    pub max_concurrent_streams: u32,
    /// Our receive window per stream (SETTINGS_INITIAL_WINDOW_SIZE) and per connection.
    pub stream_window: u32,
    pub conn_window: u32,
    /// The largest frame payload we take (SETTINGS_MAX_FRAME_SIZE).
    pub max_frame_size: u32,
    /// The largest header list we decode (SETTINGS_MAX_HEADER_LIST_SIZE; `u32::MAX`: not sent).
    pub max_header_list_size: u32,
    /// The HPACK table the peer's encoder may use (SETTINGS_HEADER_TABLE_SIZE).
    pub header_table_size: u32,
}

impl Default for LocalSettings {
    /// The protocol's defaults (and 100 streams, RFC 9113 §6.5.2's advice).
    fn default() -> LocalSettings {
        LocalSettings {
            max_concurrent_streams: 100,
            stream_window: DEFAULT_WINDOW,
            conn_window: DEFAULT_WINDOW,
            max_frame_size: DEFAULT_MAX_FRAME as u32,
            max_header_list_size: u32::MAX,
            header_table_size: 4096,
        }
    }
}

/// A connection error (RFC 9113 §5.4.1): the GOAWAY with `code` is queued, nothing more is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("HTTP/2 connection error {code:#x}: {reason}")]
pub struct ConnError {
    pub code: u32,
    pub reason: &'static str,
}

/// Why a connection ends with ENHANCE_YOUR_CALM because of the flood budget.
const CONTROL_FLOOD: &str = "frames that ask for nothing beyond the budget";

impl ConnError {
    /// The peer sent more frames asking for nothing than the flood budget allows.
    pub fn is_control_flood(&self) -> bool {
        self.reason == CONTROL_FLOOD
    }
}

/// What the peer's bytes amounted to, one at a time ([`Connection::recv`]). A stream's events
/// carry its `token` (given to [`Connection::open`]; 0 for the peer's streams), so that its user
/// need not look the stream up again; `None` for a stream no longer open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event<'a> {
    /// A whole header block (HEADERS and its CONTINUATIONs). `first`: the stream's first one
    /// (a request or response head; later ones are a client's interim heads' successors or
    /// trailers). `discard`: the stream is refused, reset or beyond our GOAWAY: decode the block
    /// only to keep HPACK in step (and `token` is `None`).
    Headers {
        stream: u32,
        token: Option<usize>,
        block: &'a [u8],
        end_stream: bool,
        first: bool,
        discard: bool,
    },
    /// Body bytes (padding removed), as they arrive; `end_stream` on the last piece.
    Data {
        stream: u32,
        token: Option<usize>,
        data: &'a [u8],
        end_stream: bool,
    },
    /// The stream ended abruptly: reset by the peer (`remote`), or by the connection for a
    /// stream error it found (its RST_STREAM queued).
    Reset {
        stream: u32,
        token: Option<usize>,
        code: u32,
        remote: bool,
    },
    /// The peer is going away: streams above `last_stream` were not processed.
    GoAway { last_stream: u32, code: u32 },
    /// Our send windows grew (WINDOW_UPDATE, or a larger SETTINGS_INITIAL_WINDOW_SIZE), or the
    /// peer's settings changed what we may open.
    Window,
}

/// A stream that is open on at least one side.
#[derive(Debug, Clone, Copy)]
struct Stream {
    /// The peer may still send on it (not half-closed remote).
    recv_open: bool,
    /// We may still send on it (not half-closed local).
    send_open: bool,
    send_window: i64,
    /// DATA the peer may still send before our next WINDOW_UPDATE.
    recv_avail: i64,
    /// A header block came on it.
    headers: bool,
    /// The peer's content-length, which its DATA must add up to.
    content_length: Option<u64>,
    received: u64,
    /// The user's token ([`Event`]).
    token: usize,
}

impl Stream {
    /// `n` body bytes received, `end_stream` if they end it: `false` if they break the
    /// content-length (beyond it, or short of it at the end; RFC 9113 §8.1.1).
    fn take(&mut self, n: usize, end_stream: bool) -> bool {
        self.received += n as u64;
        if self
            .content_length
            .is_some_and(|l| self.received > l || (end_stream && self.received != l))
        {
            return false;
        }
        if end_stream {
            self.recv_open = false;
        }
        true
    }
}

/// The DATA frame being received, whose payload streams by.
#[derive(Debug, Clone, Copy)]
struct DataIn {
    stream: u32,
    /// Payload bytes still to come (body and padding).
    left: usize,
    /// The padding length byte is still to come.
    need_pad: bool,
    pad: usize,
    end_stream: bool,
    /// The body goes to the user (else skipped: a stream reset or unknown).
    deliver: bool,
}

/// A header block awaiting CONTINUATION, or (`complete`) lent to the last event.
#[derive(Debug)]
struct BlockIn {
    complete: bool,
    /// CONTINUATION frames so far: bounded apart from the bytes, since empty ones add none.
    frames: usize,
    stream: u32,
    token: Option<usize>,
    end_stream: bool,
    first: bool,
    discard: bool,
    bytes: Vec<u8>,
}

/// Streams we reset lately, whose frames in flight are dropped quietly (RFC 9113 §5.1,
/// "closed"): enough for the peer's frames sent before it read our RST_STREAM.
const RECENT_RESETS: usize = 64;
/// Streams we may reset for the peer's errors (malformed messages, stream errors) before the
/// connection is cut off: a peer that sends nothing but errors is an error flood.
const ERROR_RESETS: u32 = 256;
/// Streams a client opens before the server's SETTINGS say its limit (RFC 9113 §6.5.2 advises
/// servers to allow at least 100): more could be refused before it had its say.
const ASSUMED_STREAMS: u32 = 100;

pub struct Connection {
    role: Role,
    cfg: LocalSettings,
    /// Connection preface bytes still expected (a server reading a client).
    preface_left: usize,
    /// The peer's first frame (its SETTINGS) came.
    settings_seen: bool,
    /// A frame straddling reads: its header, and its payload unless DATA.
    partial: Vec<u8>,
    data: Option<DataIn>,
    block: Option<BlockIn>,
    /// The largest header block taken (HEADERS and CONTINUATIONs, encoded): the CONTINUATION
    /// flood's bound.
    block_cap: usize,
    failed: Option<ConnError>,
    // The peer's settings.
    peer_max_streams: u32,
    peer_initial_window: i64,
    peer_max_frame: usize,
    /// The peer lowered its HPACK table below 4096: our blocks start with a size update to 0
    /// (we never index, so our table is empty whatever its size).
    table_update: bool,
    conn_send: i64,
    conn_recv_avail: i64,
    streams: Streams<Stream>,
    /// The highest stream id the peer opened (server) or we opened (client).
    last_peer: u32,
    next_local: u32,
    recent_resets: VecDeque<u32>,
    /// A stream error found with a header block: its `Reset` event, yielded after the block's.
    reset_due: Option<(u32, u32, Option<usize>)>,
    error_resets: u32,
    /// Our GOAWAY's last stream: newer streams are not processed.
    goaway_sent: Option<u32>,
    goaway_received: bool,
    ctl: Vec<u8>,
    ledger: FrameLedger,
}

/// An idle connection put away (`Connection::rest`): only what it must remember to go on, 80
/// bytes (a `Connection` is 328, and its buffers). Our own settings are not kept: the user
/// gives them back to `wake`, as it gave them to `Connection::new`.
#[derive(Debug)]
pub struct Dormant {
    role: Role,
    // The peer's settings.
    peer_max_streams: u32,
    peer_initial_window: u32,
    peer_max_frame: u32,
    table_update: bool,
    // Flow control: the connection's windows (streams have none while none is open).
    conn_send: u32,
    conn_recv_avail: u32,
    // Stream ids, the streams reset lately (empty: no allocation) and those reset for errors.
    last_peer: u32,
    next_local: u32,
    recent_resets: Box<[u32]>,
    error_resets: u32,
    goaway_sent: Option<u32>,
    goaway_received: bool,
    ledger: FrameLedger,
}

impl Dormant {
    /// The connection again, as it was put away, with our settings `cfg` (those it was made
    /// with): its buffers grow as its next bytes need them.
    pub fn wake(self, cfg: LocalSettings) -> Connection {
        Connection {
            role: self.role,
            preface_left: 0,
            settings_seen: true,
            partial: Vec::new(),
            data: None,
            block: None,
            block_cap: block_cap(&cfg),
            failed: None,
            peer_max_streams: self.peer_max_streams,
            peer_initial_window: self.peer_initial_window.into(),
            peer_max_frame: self.peer_max_frame as usize,
            table_update: self.table_update,
            conn_send: self.conn_send.into(),
            conn_recv_avail: self.conn_recv_avail.into(),
            streams: Streams::default(),
            last_peer: self.last_peer,
            next_local: self.next_local,
            recent_resets: self.recent_resets.into_vec().into(),
            reset_due: None,
            error_resets: self.error_resets,
            goaway_sent: self.goaway_sent,
            goaway_received: self.goaway_received,
            ctl: Vec::new(),
            ledger: self.ledger,
            cfg,
        }
    }
}

/// The largest header block taken (`Connection::block_cap`), from our SETTINGS_MAX_HEADER_LIST_SIZE.
fn block_cap(cfg: &LocalSettings) -> usize {
    (cfg.max_header_list_size as usize)
        .saturating_mul(4)
        .clamp(64 << 10, 1 << 20)
}

impl Connection {
    /// A connection whose first bytes out (the client preface, our SETTINGS, the connection
    /// window beyond the default) wait in the control queue.
    pub fn new(role: Role, cfg: LocalSettings) -> Connection {
        let block_cap = block_cap(&cfg);
        let mut c = Connection {
            role,
            preface_left: if role == Role::Server {
                PREFACE.len()
            } else {
                0
            },
            settings_seen: false,
            partial: Vec::new(),
            data: None,
            block: None,
            block_cap,
            failed: None,
            peer_max_streams: if role == Role::Client {
                ASSUMED_STREAMS
            } else {
                u32::MAX
            },
            peer_initial_window: DEFAULT_WINDOW.into(),
            peer_max_frame: DEFAULT_MAX_FRAME,
            table_update: false,
            conn_send: DEFAULT_WINDOW.into(),
            conn_recv_avail: DEFAULT_WINDOW.into(),
            streams: Streams::default(),
            last_peer: 0,
            next_local: 1,
            recent_resets: VecDeque::new(),
            reset_due: None,
            error_resets: 0,
            goaway_sent: None,
            goaway_received: false,
            ctl: Vec::new(),
            ledger: FrameLedger::default(),
            cfg,
        };
        if role == Role::Client {
            c.ctl.extend_from_slice(PREFACE);
        }
        // Only the settings that differ from the protocol's defaults.
        let cfg = &c.cfg;
        let mut settings = Vec::with_capacity(6);
        if role == Role::Client {
            settings.push((setting::ENABLE_PUSH, 0));
        }
        if cfg.header_table_size != 4096 {
            settings.push((setting::HEADER_TABLE_SIZE, cfg.header_table_size));
        }
        if role == Role::Server
            || cfg.max_concurrent_streams != LocalSettings::default().max_concurrent_streams
        {
            settings.push((setting::MAX_CONCURRENT_STREAMS, cfg.max_concurrent_streams));
        }
        if cfg.stream_window != DEFAULT_WINDOW {
            settings.push((setting::INITIAL_WINDOW_SIZE, cfg.stream_window));
        }
        if cfg.max_frame_size as usize != DEFAULT_MAX_FRAME {
            settings.push((setting::MAX_FRAME_SIZE, cfg.max_frame_size));
        }
        if cfg.max_header_list_size != u32::MAX {
            settings.push((setting::MAX_HEADER_LIST_SIZE, cfg.max_header_list_size));
        }
        put_frame_head(&mut c.ctl, 6 * settings.len(), SETTINGS, 0, 0);
        for (id, value) in settings {
            c.ctl.extend_from_slice(&id.to_be_bytes());
            c.ctl.extend_from_slice(&value.to_be_bytes());
        }
        // A connection window above the default is opened at once; one below it is reached by
        // holding WINDOW_UPDATEs back (`received`).
        if c.cfg.conn_window > DEFAULT_WINDOW {
            c.window_update(0, c.cfg.conn_window - DEFAULT_WINDOW);
            c.conn_recv_avail = c.cfg.conn_window.into();
        }
        c
    }

    /// A server's connection made for `Upgrade: h2c`: the client's `HTTP2-Settings` field
    /// value (RFC 7540 §3.2.1), applied as its first SETTINGS frame would be (before the one
    /// after its preface) but not acknowledged: the 101 was. A value that is not base64url is a
    /// PROTOCOL_ERROR; a payload a SETTINGS frame could not carry, that frame's error: its
    /// GOAWAY queued after our SETTINGS, and returned by `recv` too.
    pub fn upgrade_settings(&mut self, value: &[u8]) -> Result<(), ConnError> {
        debug_assert!(self.role == Role::Server && !self.settings_seen);
        // Base64url without padding: whole settings (6 bytes each) never need any.
        match base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(value) {
            Ok(payload) => self.apply_settings(&payload).map(drop),
            Err(_) => Err(self.error(code::PROTOCOL_ERROR, "HTTP2-Settings not base64url")),
        }
    }

    /// The upgrading request's stream (RFC 7540 §3.2: stream 1, half-closed (remote), its
    /// request the HTTP/1.1 one that asked for the upgrade), after [`Connection::upgrade_settings`]
    /// took its settings: its id, to answer on.
    pub fn upgraded_stream(&mut self) -> u32 {
        debug_assert!(self.role == Role::Server && self.last_peer == 0);
        self.last_peer = 1;
        let mut stream = self.new_stream(true, 0);
        stream.recv_open = false;
        self.streams.insert(1, stream);
        1
    }

    /// Frames the connection queued itself, appended to `out` (after what `out` holds: a
    /// stream's frames stay before its RST_STREAM, everything before GOAWAY).
    pub fn take_control(&mut self, out: &mut Vec<u8>) {
        if !self.ctl.is_empty() {
            self.ledger.wrote(self.ctl.len());
            out.extend_from_slice(&self.ctl);
            self.ctl.clear();
        }
    }

    pub fn has_control(&self) -> bool {
        !self.ctl.is_empty()
    }

    /// The peer's preface and first SETTINGS came.
    pub fn preface_received(&self) -> bool {
        self.settings_seen
    }

    /// Streams open on either side.
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// Nothing of the peer's is held and nothing of ours waits: the peer's SETTINGS came, no
    /// stream open, no frame, DATA payload or header block half received, no event or control
    /// frame due, no error. Such a connection can be put away (`rest`) until the peer's next
    /// bytes.
    pub fn at_rest(&self) -> bool {
        self.settings_seen
            && self.failed.is_none()
            && self.streams.is_empty()
            && self.partial.is_empty()
            && self.data.is_none()
            && self.block.as_ref().is_none_or(|b| b.complete)
            && self.reset_due.is_none()
            && self.ctl.is_empty()
    }

    /// Put an idle connection (`at_rest`) away: what it must remember to go on (`Dormant`),
    /// its buffers and stream map freed. [`Dormant::wake`] makes it a connection again.
    pub fn rest(self) -> Dormant {
        debug_assert!(self.at_rest());
        // Windows stay within 0..2^31 (the checks that change them see to it), frame sizes
        // below 2^24.
        let narrow = |v: i64| u32::try_from(v).expect("a window within 0..2^31");
        Dormant {
            role: self.role,
            peer_max_streams: self.peer_max_streams,
            peer_initial_window: narrow(self.peer_initial_window),
            peer_max_frame: self.peer_max_frame as u32,
            table_update: self.table_update,
            conn_send: narrow(self.conn_send),
            conn_recv_avail: narrow(self.conn_recv_avail),
            last_peer: self.last_peer,
            next_local: self.next_local,
            recent_resets: Vec::from(self.recent_resets).into_boxed_slice(),
            error_resets: self.error_resets,
            goaway_sent: self.goaway_sent,
            goaway_received: self.goaway_received,
            ledger: self.ledger,
        }
    }

    /// The connection failed (its GOAWAY queued).
    pub fn failed(&self) -> Option<ConnError> {
        self.failed
    }

    /// Whether the peer said GOAWAY.
    pub fn goaway_received(&self) -> bool {
        self.goaway_received
    }

    /// Whether a new stream may be opened now (client).
    pub fn can_open(&self) -> bool {
        self.failed.is_none()
            && !self.goaway_received
            && self.goaway_sent.is_none()
            && (self.streams.len() as u64) < u64::from(self.peer_max_streams)
            && self.next_local < 1 << 31
    }

    /// The peer's concurrency limit, until it says: `ASSUMED_STREAMS` for a client, none for a
    /// server (which opens no streams).
    pub fn peer_max_streams(&self) -> u32 {
        self.peer_max_streams
    }

    /// The largest DATA payload the peer takes in one frame.
    pub fn max_frame(&self) -> usize {
        self.peer_max_frame
    }

    /// DATA bytes we may send on `stream` now (both windows; 0 if it is not open for us).
    pub fn send_window(&self, stream: u32) -> usize {
        match self.streams.get(stream) {
            Some(s) if s.send_open => s.send_window.min(self.conn_send).max(0) as usize,
            _ => 0,
        }
    }

    /// Whether the peer may still send on `stream` (its request or response body goes on).
    pub fn is_recv_open(&self, stream: u32) -> bool {
        self.streams.get(stream).is_some_and(|s| s.recv_open)
    }

    /// Whether we may still send on `stream`.
    pub fn is_send_open(&self, stream: u32) -> bool {
        self.streams.get(stream).is_some_and(|s| s.send_open)
    }

    /// A stream just opened, either end open, at the windows the settings give; `headers`: its
    /// header block has come (a peer-opened stream); its events carry `token`.
    fn new_stream(&self, headers: bool, token: usize) -> Stream {
        Stream {
            recv_open: true,
            send_open: true,
            send_window: self.peer_initial_window,
            recv_avail: self.cfg.stream_window.into(),
            headers,
            content_length: None,
            received: 0,
            token,
        }
    }

    /// Open a stream (client) with its request head, written as by [`Connection::headers`]:
    /// its id. Its events carry `token`.
    pub fn open(
        &mut self,
        out: &mut Vec<u8>,
        token: usize,
        end_stream: bool,
        encode: impl FnOnce(&mut Vec<u8>),
    ) -> u32 {
        debug_assert!(self.can_open());
        let id = self.next_local;
        self.next_local += 2;
        let mut stream = self.new_stream(false, token);
        stream.send_open = !end_stream;
        self.streams.insert(id, stream);
        self.put_block(out, id, end_stream, encode);
        id
    }

    /// Write a header block on `stream` into `out`: the block is what `encode` appends (an
    /// HPACK block, at most 16 MiB), framed as HEADERS and, past the peer's frame size,
    /// CONTINUATIONs. Interim heads are header blocks without `end_stream` too. `false` (nothing
    /// written) if the stream is not open for sending.
    pub fn headers(
        &mut self,
        out: &mut Vec<u8>,
        stream: u32,
        end_stream: bool,
        encode: impl FnOnce(&mut Vec<u8>),
    ) -> bool {
        if self.failed.is_some() {
            return false;
        }
        let Some(s) = self.streams.get_mut(stream).filter(|s| s.send_open) else {
            return false;
        };
        if end_stream {
            s.send_open = false;
            self.forget_if_closed(stream);
        }
        self.put_block(out, stream, end_stream, encode);
        true
    }

    /// A header block's frames, into `out`.
    fn put_block(
        &mut self,
        out: &mut Vec<u8>,
        stream: u32,
        end_stream: bool,
        encode: impl FnOnce(&mut Vec<u8>),
    ) {
        let at = out.len();
        out.extend_from_slice(&[0; 9]);
        if std::mem::take(&mut self.table_update) {
            // A dynamic table size update to 0 (RFC 7541 §6.3).
            out.push(0x20);
        }
        encode(out);
        let len = out.len() - at - 9;
        let flags = if end_stream { flag::END_STREAM } else { 0 };
        if len <= self.peer_max_frame {
            out[at..at + 9].copy_from_slice(&frame_head(
                len,
                HEADERS,
                flags | flag::END_HEADERS,
                stream,
            ));
        } else {
            // Rare (a head over 16 KiB): re-framed into CONTINUATIONs.
            let block = out.split_off(at + 9);
            out.truncate(at);
            let mut chunks = block.chunks(self.peer_max_frame).peekable();
            let (mut kind, mut flags) = (HEADERS, flags);
            while let Some(chunk) = chunks.next() {
                let last = chunks.peek().is_none();
                let end = if last { flag::END_HEADERS } else { 0 };
                put_frame_head(out, chunk.len(), kind, flags | end, stream);
                out.extend_from_slice(chunk);
                (kind, flags) = (CONTINUATION, 0);
            }
        }
        self.ledger.wrote(out.len() - at);
    }

    /// Write a DATA frame's header for `len` bytes on `stream` into `out` (the caller appends or
    /// references the payload next), taking them from the windows: `len` must be within
    /// [`Connection::send_window`] and [`Connection::max_frame`]. `false` (nothing written) if
    /// the stream is not open for sending.
    pub fn data(&mut self, out: &mut Vec<u8>, stream: u32, len: usize, end_stream: bool) -> bool {
        if self.failed.is_some() {
            return false;
        }
        let Some(s) = self.streams.get_mut(stream).filter(|s| s.send_open) else {
            return false;
        };
        debug_assert!(len <= self.peer_max_frame);
        debug_assert!(len as i64 <= s.send_window.min(self.conn_send));
        s.send_window -= len as i64;
        self.conn_send -= len as i64;
        let flags = if end_stream { flag::END_STREAM } else { 0 };
        put_frame_head(out, len, DATA, flags, stream);
        self.ledger.wrote(9 + len);
        if end_stream {
            self.end_send(stream);
        }
        true
    }

    /// Reset `stream` with `code` (a malformed message: PROTOCOL_ERROR; a request not
    /// processed: REFUSED_STREAM; given up: CANCEL; our side done before the peer's: NO_ERROR);
    /// nothing if it is closed already (the peer reset it, or both sides ended). Past
    /// `ERROR_RESETS` resets for the peer's errors a server's connection fails
    /// (ENHANCE_YOUR_CALM).
    pub fn reset(&mut self, stream: u32, code: u32) {
        if self.failed.is_some() || self.streams.remove(stream).is_none() {
            return;
        }
        self.close_with(stream, code);
    }

    /// RST_STREAM for `stream` (open or not), counted against `ERROR_RESETS` if it is for an
    /// error of the peer's.
    fn close_with(&mut self, stream: u32, code: u32) {
        self.rst_stream(stream, code);
        if self.role == Role::Server
            && matches!(
                code,
                code::PROTOCOL_ERROR
                    | code::FLOW_CONTROL_ERROR
                    | code::STREAM_CLOSED
                    | code::FRAME_SIZE_ERROR
            )
        {
            self.error_resets += 1;
            if self.error_resets > ERROR_RESETS {
                self.error(code::ENHANCE_YOUR_CALM, "too many malformed streams");
            }
        }
    }

    /// A connection error found by the user (an HPACK block that does not decode:
    /// COMPRESSION_ERROR): GOAWAY, and nothing more is read.
    pub fn fail(&mut self, code: u32, reason: &'static str) -> ConnError {
        self.error(code, reason)
    }

    /// A graceful GOAWAY (NO_ERROR): streams the peer opens from now on are not processed.
    pub fn goaway(&mut self) {
        if self.failed.is_some() || self.goaway_sent.is_some() {
            return;
        }
        let last = if self.role == Role::Server {
            self.last_peer
        } else {
            0
        };
        self.goaway_sent = Some(last);
        self.put_goaway(last, code::NO_ERROR);
    }

    /// Whether we sent GOAWAY.
    pub fn goaway_sent(&self) -> bool {
        self.goaway_sent.is_some()
    }

    /// The peer declared `content-length: n` on `stream`: its DATA must add up to it (else the
    /// stream is reset with PROTOCOL_ERROR, RFC 9113 §8.1.1).
    pub fn set_content_length(&mut self, stream: u32, n: u64) {
        if let Some(s) = self.streams.get_mut(stream) {
            s.content_length = Some(n);
        }
    }

    /// Take the peer's bytes: the next event, with `input` advanced past what it consumed;
    /// `None` once `input` is used up. After a connection error, that error every time.
    pub fn recv<'s: 'e, 'i: 'e, 'e>(
        &'s mut self,
        input: &mut &'i [u8],
    ) -> Result<Option<Event<'e>>, ConnError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        // After the block's event: not while the block awaits CONTINUATION (the reads' split
        // would decide whether it came before the block's end, or at all if an error follows).
        if self.block.as_ref().is_none_or(|b| b.complete) {
            if let Some((stream, code, token)) = self.reset_due.take() {
                return Ok(Some(Event::Reset {
                    stream,
                    token,
                    code,
                    remote: false,
                }));
            }
        }
        loop {
            if self.preface_left > 0 {
                let at = PREFACE.len() - self.preface_left;
                let n = self.preface_left.min(input.len());
                if input[..n] != PREFACE[at..at + n] {
                    return Err(self.error(code::PROTOCOL_ERROR, "invalid connection preface"));
                }
                self.preface_left -= n;
                *input = &input[n..];
            }
            if input.is_empty() {
                return Ok(None);
            }
            if self.data.is_some() {
                if let Some(ev) = self.data_payload(input)? {
                    return Ok(Some(ev));
                }
                continue;
            }
            // A whole frame in the input: taken from there, no copy (DATA: its header only,
            // unless its unpadded payload is all there too).
            if self.partial.is_empty() && input.len() >= 9 {
                let len = frame_len(input);
                let n = if input[3] == DATA
                    && (input[4] & flag::PADDED != 0 || input.len() < 9 + len)
                {
                    9
                } else {
                    9 + len
                };
                if len <= self.cfg.max_frame_size as usize && input.len() >= n {
                    let (frame, rest) = input.split_at(n);
                    *input = rest;
                    match self.frame(frame)? {
                        Some(Found::Event(ev)) => return Ok(Some(ev)),
                        Some(Found::Block) => break,
                        None => continue,
                    }
                }
            }
            let have = self.partial.len();
            let need = if have < 9 || self.partial[3] == DATA {
                9
            } else {
                9 + frame_len(&self.partial)
            };
            let take = (need - have).min(input.len());
            self.partial.extend_from_slice(&input[..take]);
            *input = &input[take..];
            if self.partial.len() == 9
                && frame_len(&self.partial) > self.cfg.max_frame_size as usize
            {
                return Err(self.error(
                    code::FRAME_SIZE_ERROR,
                    "frame larger than SETTINGS_MAX_FRAME_SIZE",
                ));
            }
            let p = &self.partial;
            if p.len() >= 9 && (p[3] == DATA || p.len() == 9 + frame_len(p)) {
                // Handled out of `partial`, whose buffer is then kept for the next frame.
                let mut frame = std::mem::take(&mut self.partial);
                let found = if matches!(frame[3], HEADERS | CONTINUATION) {
                    // Its block is copied to the block buffer, which the event borrows.
                    self.header_frame(&frame, true)
                        .map(|f| f.map(|_| Found::Block))
                } else {
                    self.frame_inner(&frame).map(|e| e.map(Found::Event))
                };
                frame.clear();
                self.partial = frame;
                match found? {
                    Some(Found::Event(ev)) => return Ok(Some(ev)),
                    Some(Found::Block) => break,
                    None => {}
                }
            }
        }
        Ok(Some(self.block_event()))
    }

    /// A whole frame borrowed from the input (DATA: perhaps its header only).
    fn frame<'i>(&mut self, frame: &'i [u8]) -> Result<Option<Found<'i>>, ConnError> {
        if matches!(frame[3], HEADERS | CONTINUATION) {
            return self.header_frame(frame, false);
        }
        if frame[3] == DATA && frame.len() > 9 {
            let (len, flags) = (frame_len(frame), frame[4]);
            self.check_head(DATA, flags, len)?;
            let ev = self.data_head(stream_id(frame), flags, len, Some(&frame[9..]))?;
            return Ok(ev.map(Found::Event));
        }
        Ok(self.frame_inner(frame)?.map(Found::Event))
    }

    /// The event of the header block completed in the block buffer.
    fn block_event(&mut self) -> Event<'_> {
        let b = self.block.as_ref().expect("a completed block");
        Event::Headers {
            stream: b.stream,
            token: b.token,
            block: &b.bytes,
            end_stream: b.end_stream,
            first: b.first,
            discard: b.discard,
        }
    }

    /// A connection error: GOAWAY with the last stream we processed, then nothing more.
    fn error(&mut self, code: u32, reason: &'static str) -> ConnError {
        let e = ConnError { code, reason };
        if self.failed.is_none() {
            let last = if self.role == Role::Server {
                self.last_peer
            } else {
                0
            };
            self.put_goaway(last.min(self.goaway_sent.unwrap_or(u32::MAX)), code);
            self.failed = Some(e);
            self.data = None;
            self.block = None;
        }
        e
    }

    fn put_goaway(&mut self, last: u32, code: u32) {
        put_frame_head(&mut self.ctl, 8, GOAWAY, 0, 0);
        self.ctl.extend_from_slice(&last.to_be_bytes());
        self.ctl.extend_from_slice(&code.to_be_bytes());
    }

    fn rst_stream(&mut self, stream: u32, code: u32) {
        put_frame_head(&mut self.ctl, 4, RST_STREAM, 0, stream);
        self.ctl.extend_from_slice(&code.to_be_bytes());
        if self.recent_resets.len() == RECENT_RESETS {
            self.recent_resets.pop_front();
        }
        self.recent_resets.push_back(stream);
    }

    fn window_update(&mut self, stream: u32, n: u32) {
        put_frame_head(&mut self.ctl, 4, WINDOW_UPDATE, 0, stream);
        self.ctl.extend_from_slice(&n.to_be_bytes());
    }

    /// A stream error found here: RST_STREAM, and the event that tells the user.
    fn stream_error<'e>(&mut self, stream: u32, code: u32) -> Result<Option<Event<'e>>, ConnError> {
        let mut token = None;
        if self.failed.is_none() {
            token = self.streams.remove(stream).map(|s| s.token);
            self.close_with(stream, code);
        }
        if let Some(e) = self.failed {
            return Err(e);
        }
        Ok(Some(Event::Reset {
            stream,
            token,
            code,
            remote: false,
        }))
    }

    fn end_send(&mut self, stream: u32) {
        if let Some(s) = self.streams.get_mut(stream) {
            s.send_open = false;
            self.forget_if_closed(stream);
        }
    }

    fn end_recv(&mut self, stream: u32) {
        if let Some(s) = self.streams.get_mut(stream) {
            s.recv_open = false;
            self.forget_if_closed(stream);
        }
    }

    /// A stream closed on both sides leaves the table. Called where a side ends, once per
    /// stream and side: the second lookup is the table's slot, no hashing.
    fn forget_if_closed(&mut self, stream: u32) {
        if self
            .streams
            .get(stream)
            .is_some_and(|s| !s.send_open && !s.recv_open)
        {
            self.streams.remove(stream);
        }
    }

    /// Whether `stream` was never opened by the peer (or, for a client, by us).
    fn is_idle(&self, stream: u32) -> bool {
        let peer_initiated = stream.is_multiple_of(2) != (self.role == Role::Server);
        if peer_initiated {
            // A client never sees a server-initiated stream (no push).
            self.role == Role::Client || stream > self.last_peer
        } else {
            stream >= self.next_local
        }
    }

    /// The peer's frame header says `len` payload bytes: checked against the frame size, and the
    /// flood budget charged.
    fn check_head(&mut self, ty: u8, flags: u8, len: usize) -> Result<(), ConnError> {
        if !self.settings_seen {
            if ty != SETTINGS || flags & flag::ACK != 0 {
                return Err(self.error(code::PROTOCOL_ERROR, "the first frame is not SETTINGS"));
            }
            self.settings_seen = true;
        }
        if len > self.cfg.max_frame_size as usize {
            return Err(self.error(
                code::FRAME_SIZE_ERROR,
                "frame larger than SETTINGS_MAX_FRAME_SIZE",
            ));
        }
        if self.block.as_ref().is_some_and(|b| !b.complete) && ty != CONTINUATION {
            return Err(self.error(code::PROTOCOL_ERROR, "header block interrupted"));
        }
        if self.role == Role::Server && self.ledger.frame(ty, flags, len) {
            return Err(self.error(code::ENHANCE_YOUR_CALM, CONTROL_FLOOD));
        }
        Ok(())
    }

    /// HEADERS or CONTINUATION. A block complete in a borrowed frame is lent from it; one that
    /// spans frames, or comes from `partial` (`owned`), is collected in the block buffer.
    fn header_frame<'i>(
        &mut self,
        frame: &'i [u8],
        owned: bool,
    ) -> Result<Option<Found<'i>>, ConnError> {
        let (len, ty, flags) = (frame_len(frame), frame[3], frame[4]);
        let id = stream_id(frame);
        self.check_head(ty, flags, len)?;
        let mut p = &frame[9..];
        if ty == CONTINUATION {
            let Some(b) = self.block.as_mut().filter(|b| !b.complete) else {
                return Err(self.error(code::PROTOCOL_ERROR, "CONTINUATION without HEADERS"));
            };
            if b.stream != id {
                return Err(self.error(code::PROTOCOL_ERROR, "CONTINUATION on another stream"));
            }
            b.frames += 1;
            // A block may take as many frames as its largest size needs at the smallest frame
            // size, and a few more: beyond that, a CONTINUATION flood of small or empty frames.
            if b.bytes.len() + p.len() > self.block_cap
                || b.frames > 16 + self.block_cap / DEFAULT_MAX_FRAME
            {
                return Err(self.error(code::ENHANCE_YOUR_CALM, "header block too large"));
            }
            b.bytes.extend_from_slice(p);
            if flags & flag::END_HEADERS == 0 {
                return Ok(None);
            }
            b.complete = true;
            return Ok(Some(Found::Block));
        }
        if id == 0 {
            return Err(self.error(code::PROTOCOL_ERROR, "HEADERS on stream 0"));
        }
        if flags & flag::PADDED != 0 {
            let Some((&pad, rest)) = p.split_first() else {
                return Err(self.error(
                    code::FRAME_SIZE_ERROR,
                    "padded HEADERS without padding length",
                ));
            };
            if pad as usize >= len {
                return Err(self.error(code::PROTOCOL_ERROR, "padding longer than the frame"));
            }
            p = &rest[..rest.len() - pad as usize];
        }
        let mut self_dependent = false;
        if flags & flag::PRIORITY != 0 {
            if p.len() < 5 {
                return Err(
                    self.error(code::FRAME_SIZE_ERROR, "HEADERS too short for its priority")
                );
            }
            self_dependent = stream_id(&[0, 0, 0, 0, 0, p[0], p[1], p[2], p[3]]) == id;
            p = &p[5..];
        }
        let end_stream = flags & flag::END_STREAM != 0;
        let (first, mut discard, mut reset, token) = self.headers_on(id, end_stream)?;
        if self_dependent && !discard {
            // RFC 9113 §5.3.1: a stream cannot depend on itself.
            reset = Some(code::PROTOCOL_ERROR);
        }
        if let Some(code) = reset {
            if !discard {
                self.reset(id, code);
                if let Some(e) = self.failed {
                    return Err(e);
                }
                self.reset_due = Some((id, code, token));
                discard = true;
            }
        }
        if end_stream && !discard {
            self.end_recv(id);
        }
        if flags & flag::END_HEADERS == 0 || owned {
            if p.len() > self.block_cap {
                return Err(self.error(code::ENHANCE_YOUR_CALM, "header block too large"));
            }
            let mut bytes = self.block.take().map(|b| b.bytes).unwrap_or_default();
            bytes.clear();
            bytes.extend_from_slice(p);
            self.block = Some(BlockIn {
                complete: flags & flag::END_HEADERS != 0,
                frames: 0,
                stream: id,
                token: token.filter(|_| !discard),
                end_stream,
                first,
                discard,
                bytes,
            });
            if flags & flag::END_HEADERS == 0 {
                return Ok(None);
            }
            return Ok(Some(Found::Block));
        }
        Ok(Some(Found::Event(Event::Headers {
            stream: id,
            token: token.filter(|_| !discard),
            block: p,
            end_stream,
            first,
            discard,
        })))
    }

    /// A header block opens or continues stream `id`: (first block, discard it, reset the
    /// stream with this code, its token).
    fn headers_on(
        &mut self,
        id: u32,
        end_stream: bool,
    ) -> Result<(bool, bool, Option<u32>, Option<usize>), ConnError> {
        if let Some(s) = self.streams.get_mut(id) {
            if !s.recv_open {
                // Half-closed (remote): RFC 9113 §5.1.
                return Ok((false, false, Some(code::STREAM_CLOSED), Some(s.token)));
            }
            let first = !s.headers;
            s.headers = true;
            // A server's second block is trailers, which end the stream (§8.1); a client's
            // may be a final head after interim ones, which its user tells apart.
            if !first && !end_stream && self.role == Role::Server {
                return Ok((false, false, Some(code::PROTOCOL_ERROR), Some(s.token)));
            }
            return Ok((first, false, None, Some(s.token)));
        }
        if !self.is_idle(id) {
            if self.recent_resets.contains(&id) {
                return Ok((false, true, None, None));
            }
            return Err(self.error(code::STREAM_CLOSED, "HEADERS on a closed stream"));
        }
        if self.role == Role::Client {
            return Err(self.error(
                code::PROTOCOL_ERROR,
                "HEADERS on a stream the client did not open",
            ));
        }
        if id.is_multiple_of(2) {
            return Err(self.error(code::PROTOCOL_ERROR, "a client opened an even stream"));
        }
        // A new stream (ids only grow: a lower one is not idle, handled above).
        self.last_peer = id;
        if self.goaway_sent.is_some_and(|last| id > last) {
            return Ok((true, true, None, None));
        }
        if self.streams.len() >= self.cfg.max_concurrent_streams as usize {
            if self.ledger.charge() {
                return Err(self.error(code::ENHANCE_YOUR_CALM, CONTROL_FLOOD));
            }
            self.rst_stream(id, code::REFUSED_STREAM);
            return Ok((true, true, None, None));
        }
        let stream = self.new_stream(true, 0);
        self.streams.insert(id, stream);
        Ok((true, false, None, Some(0)))
    }

    /// Every frame but HEADERS and CONTINUATION (DATA: its header).
    fn frame_inner<'e>(&mut self, frame: &[u8]) -> Result<Option<Event<'e>>, ConnError> {
        let (len, ty, flags) = (frame_len(frame), frame[3], frame[4]);
        let id = stream_id(frame);
        self.check_head(ty, flags, len)?;
        let payload = &frame[9.min(frame.len())..];
        let u32_at = |i: usize| {
            u32::from_be_bytes([payload[i], payload[i + 1], payload[i + 2], payload[i + 3]])
        };
        match ty {
            DATA => self.data_head(id, flags, len, None),
            PRIORITY => {
                if id == 0 {
                    return Err(self.error(code::PROTOCOL_ERROR, "PRIORITY on stream 0"));
                }
                if len != 5 {
                    return self.stream_error(id, code::FRAME_SIZE_ERROR);
                }
                if u32_at(0) & 0x7fff_ffff == id {
                    return self.stream_error(id, code::PROTOCOL_ERROR);
                }
                Ok(None)
            }
            RST_STREAM => {
                if id == 0 {
                    return Err(self.error(code::PROTOCOL_ERROR, "RST_STREAM on stream 0"));
                }
                if len != 4 {
                    return Err(self.error(code::FRAME_SIZE_ERROR, "RST_STREAM not 4 bytes"));
                }
                if self.is_idle(id) {
                    return Err(self.error(code::PROTOCOL_ERROR, "RST_STREAM on an idle stream"));
                }
                let Some(s) = self.streams.remove(id) else {
                    return Ok(None);
                };
                if self.data.is_some_and(|d| d.stream == id) {
                    self.data = None;
                }
                Ok(Some(Event::Reset {
                    stream: id,
                    token: Some(s.token),
                    code: u32_at(0),
                    remote: true,
                }))
            }
            SETTINGS => self.settings(id, flags, payload),
            PUSH_PROMISE => {
                Err(self.error(code::PROTOCOL_ERROR, "PUSH_PROMISE (push is disabled)"))
            }
            PING => {
                if id != 0 {
                    return Err(self.error(code::PROTOCOL_ERROR, "PING on a stream"));
                }
                if len != 8 {
                    return Err(self.error(code::FRAME_SIZE_ERROR, "PING not 8 bytes"));
                }
                if flags & flag::ACK == 0 {
                    put_frame_head(&mut self.ctl, 8, PING, flag::ACK, 0);
                    self.ctl.extend_from_slice(payload);
                }
                Ok(None)
            }
            GOAWAY => {
                if id != 0 {
                    return Err(self.error(code::PROTOCOL_ERROR, "GOAWAY on a stream"));
                }
                if len < 8 {
                    return Err(self.error(code::FRAME_SIZE_ERROR, "GOAWAY shorter than 8 bytes"));
                }
                let last = u32_at(0) & 0x7fff_ffff;
                self.goaway_received = true;
                if self.role == Role::Client {
                    // Our streams it will not process are gone.
                    self.streams.retain(|i, _| i <= last);
                }
                Ok(Some(Event::GoAway {
                    last_stream: last,
                    code: u32_at(4),
                }))
            }
            WINDOW_UPDATE => {
                if len != 4 {
                    return Err(self.error(code::FRAME_SIZE_ERROR, "WINDOW_UPDATE not 4 bytes"));
                }
                let inc = i64::from(u32_at(0) & 0x7fff_ffff);
                if id == 0 {
                    if inc == 0 {
                        return Err(self.error(code::PROTOCOL_ERROR, "WINDOW_UPDATE of 0"));
                    }
                    self.conn_send += inc;
                    if self.conn_send > i64::from(MAX_WINDOW) {
                        return Err(
                            self.error(code::FLOW_CONTROL_ERROR, "connection window above 2^31-1")
                        );
                    }
                    return Ok(Some(Event::Window));
                }
                if self.is_idle(id) {
                    return Err(self.error(code::PROTOCOL_ERROR, "WINDOW_UPDATE on an idle stream"));
                }
                let Some(s) = self.streams.get_mut(id) else {
                    return Ok(None);
                };
                if inc == 0 {
                    return self.stream_error(id, code::PROTOCOL_ERROR);
                }
                s.send_window += inc;
                if s.send_window > i64::from(MAX_WINDOW) {
                    return self.stream_error(id, code::FLOW_CONTROL_ERROR);
                }
                Ok(Some(Event::Window))
            }
            CONTINUATION | HEADERS => {
                Err(self.error(code::INTERNAL_ERROR, "header frame misrouted"))
            }
            // Unknown frame types are ignored (RFC 9113 §4.1, §5.5).
            _ => Ok(None),
        }
    }

    fn settings<'e>(
        &mut self,
        id: u32,
        flags: u8,
        payload: &[u8],
    ) -> Result<Option<Event<'e>>, ConnError> {
        if id != 0 {
            return Err(self.error(code::PROTOCOL_ERROR, "SETTINGS on a stream"));
        }
        if flags & flag::ACK != 0 {
            if !payload.is_empty() {
                return Err(self.error(code::FRAME_SIZE_ERROR, "SETTINGS ACK with a payload"));
            }
            return Ok(None);
        }
        let grew = self.apply_settings(payload)?;
        put_frame_head(&mut self.ctl, 0, SETTINGS, flag::ACK, 0);
        Ok(grew.then_some(Event::Window))
    }

    /// The peer's settings (a SETTINGS frame's payload), checked and applied: whether our send
    /// windows grew or we may open more streams.
    fn apply_settings(&mut self, payload: &[u8]) -> Result<bool, ConnError> {
        if !payload.len().is_multiple_of(6) {
            return Err(self.error(code::FRAME_SIZE_ERROR, "SETTINGS not a multiple of 6 bytes"));
        }
        let mut grew = false;
        for s in payload.chunks(6) {
            let value = u32::from_be_bytes([s[2], s[3], s[4], s[5]]);
            match u16::from_be_bytes([s[0], s[1]]) {
                setting::HEADER_TABLE_SIZE => self.table_update = value < 4096,
                // Push may only be enabled by a client; we never push either way.
                setting::ENABLE_PUSH if value > 1 || (self.role == Role::Client && value != 0) => {
                    return Err(self.error(code::PROTOCOL_ERROR, "bad SETTINGS_ENABLE_PUSH"));
                }
                setting::MAX_CONCURRENT_STREAMS => {
                    self.peer_max_streams = value;
                    grew = true;
                }
                setting::INITIAL_WINDOW_SIZE => {
                    if value > MAX_WINDOW {
                        return Err(self.error(
                            code::FLOW_CONTROL_ERROR,
                            "SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1",
                        ));
                    }
                    let delta = i64::from(value) - self.peer_initial_window;
                    self.peer_initial_window = value.into();
                    let mut over = false;
                    for s in self.streams.values_mut() {
                        s.send_window += delta;
                        over |= s.send_window > i64::from(MAX_WINDOW);
                    }
                    if over {
                        return Err(
                            self.error(code::FLOW_CONTROL_ERROR, "a stream window above 2^31-1")
                        );
                    }
                    grew |= delta > 0;
                }
                setting::MAX_FRAME_SIZE => {
                    if !(DEFAULT_MAX_FRAME as u32..=16_777_215).contains(&value) {
                        return Err(self.error(code::PROTOCOL_ERROR, "bad SETTINGS_MAX_FRAME_SIZE"));
                    }
                    self.peer_max_frame = value as usize;
                }
                _ => {}
            }
        }
        Ok(grew)
    }

    /// A DATA frame's header: flow control, the stream's state, then its payload streams by;
    /// or, with its whole unpadded payload (`whole`), its event at once, the stream looked up
    /// once.
    fn data_head<'e>(
        &mut self,
        id: u32,
        flags: u8,
        len: usize,
        whole: Option<&'e [u8]>,
    ) -> Result<Option<Event<'e>>, ConnError> {
        if id == 0 {
            return Err(self.error(code::PROTOCOL_ERROR, "DATA on stream 0"));
        }
        let padded = flags & flag::PADDED != 0;
        if padded && len == 0 {
            return Err(self.error(code::FRAME_SIZE_ERROR, "padded DATA without padding length"));
        }
        if len as i64 > self.conn_recv_avail {
            return Err(self.error(
                code::FLOW_CONTROL_ERROR,
                "DATA beyond the connection window",
            ));
        }
        // Flow control counts the whole payload, padding included; returned at once, in one
        // WINDOW_UPDATE per half window.
        self.conn_recv_avail -= len as i64;
        let window = i64::from(self.cfg.conn_window);
        if self.conn_recv_avail <= window / 2 && window > self.conn_recv_avail {
            self.window_update(0, (window - self.conn_recv_avail) as u32);
            self.conn_recv_avail = window;
        }
        let end_stream = flags & flag::END_STREAM != 0;
        let mut data = DataIn {
            stream: id,
            left: len,
            need_pad: padded,
            pad: 0,
            end_stream,
            deliver: true,
        };
        let mut reset = None;
        let mut token = None;
        let idle = self.is_idle(id);
        match self.streams.get_mut(id) {
            Some(s) if s.recv_open && s.headers => {
                token = Some(s.token);
                if len as i64 > s.recv_avail {
                    reset = Some(code::FLOW_CONTROL_ERROR);
                } else {
                    s.recv_avail -= len as i64;
                    let window = i64::from(self.cfg.stream_window);
                    let update = (!end_stream && s.recv_avail <= window / 2).then(|| {
                        let n = (window - s.recv_avail) as u32;
                        s.recv_avail = window;
                        n
                    });
                    let taken = whole.map(|p| s.take(p.len(), end_stream));
                    match taken {
                        Some(false) => reset = Some(code::PROTOCOL_ERROR),
                        Some(true) if end_stream => self.forget_if_closed(id),
                        _ => {}
                    }
                    if let Some(n) = update {
                        self.window_update(id, n);
                    }
                }
            }
            Some(s) if !s.headers => {
                return Err(self.error(code::PROTOCOL_ERROR, "DATA before HEADERS"));
            }
            Some(_) => reset = Some(code::STREAM_CLOSED),
            None if idle => {
                return Err(self.error(code::PROTOCOL_ERROR, "DATA on an idle stream"));
            }
            None if self.recent_resets.contains(&id) => data.deliver = false,
            None => reset = Some(code::STREAM_CLOSED),
        }
        if let Some(code) = reset {
            data.deliver = false;
            // A payload still to come is skipped.
            self.data = (len > 0 && whole.is_none()).then_some(data);
            return self.stream_error(id, code);
        }
        if let Some(p) = whole {
            return Ok(data.deliver.then_some(Event::Data {
                stream: id,
                token,
                data: p,
                end_stream,
            }));
        }
        if len == 0 {
            return self.data_end(id, end_stream && data.deliver, &[]);
        }
        self.data = Some(data);
        Ok(None)
    }

    /// What `input` holds of the current DATA frame's payload.
    fn data_payload<'i>(&mut self, input: &mut &'i [u8]) -> Result<Option<Event<'i>>, ConnError> {
        let d = self.data.as_mut().expect("called with a DATA frame");
        if d.need_pad {
            let (&pad, rest) = input.split_first().expect("input not empty");
            *input = rest;
            d.need_pad = false;
            d.left -= 1;
            d.pad = pad as usize;
            if d.pad > d.left {
                return Err(self.error(code::PROTOCOL_ERROR, "padding longer than the frame"));
            }
        }
        let body = d.left - d.pad;
        let n = body.min(input.len());
        let (piece, rest) = input.split_at(n);
        d.left -= n;
        *input = rest;
        let last = d.left == d.pad;
        if last && d.pad > 0 {
            // The padding, skipped as it comes (it may straddle reads).
            let p = d.pad.min(input.len());
            *input = &input[p..];
            d.pad -= p;
            d.left -= p;
        }
        let d = *self.data.as_ref().expect("set");
        if d.left == 0 {
            self.data = None;
        }
        if !d.deliver {
            return Ok(None);
        }
        let end = d.end_stream && d.left == 0;
        if n == 0 && !end {
            return Ok(None);
        }
        self.data_end(d.stream, end, piece)
    }

    /// A piece of DATA for the user, counted against the content-length (at the end of the
    /// stream, it must be reached): the stream looked up once.
    fn data_end<'i>(
        &mut self,
        stream: u32,
        end_stream: bool,
        data: &'i [u8],
    ) -> Result<Option<Event<'i>>, ConnError> {
        let mut token = None;
        if let Some(s) = self.streams.get_mut(stream) {
            token = Some(s.token);
            if !s.take(data.len(), end_stream) {
                if let Some(x) = self.data.as_mut() {
                    x.deliver = false;
                }
                return self.stream_error(stream, code::PROTOCOL_ERROR);
            }
            if end_stream {
                self.forget_if_closed(stream);
            }
        }
        Ok(Some(Event::Data {
            stream,
            token,
            data,
            end_stream,
        }))
    }
}

/// What a frame came to: an event (borrowing the input, if anything), or a header block
/// complete in the block buffer.
enum Found<'i> {
    Event(Event<'i>),
    Block,
}

fn stream_id(head: &[u8]) -> u32 {
    u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff
}

#[cfg(test)]
#[path = "conn_tests.rs"]
mod tests;

//! HTTP/2 (RFC 9113) for both ends: frame types, flags, settings and error codes, and
//! [`Connection`], one sans-I/O connection state machine with a client and a server role
//! (bytes in, events out, frames written into the caller's buffer). HPACK is `crate::hpack`,
//! the message rules (malformed requests and responses) `crate::fields`: the roles' users
//! decode and check header blocks, the connection keeps the framing, the stream states, flow
//! control and the flood budget.

/// What a client sends first (RFC 9113 §3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const PRIORITY: u8 = 0x2;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PUSH_PROMISE: u8 = 0x5;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;

/// Flags; which apply depends on the frame type.
pub mod flag {
    /// DATA, HEADERS.
    pub const END_STREAM: u8 = 0x1;
    /// SETTINGS, PING.
    pub const ACK: u8 = 0x1;
    /// HEADERS, PUSH_PROMISE, CONTINUATION.
    pub const END_HEADERS: u8 = 0x4;
    /// DATA, HEADERS, PUSH_PROMISE.
    pub const PADDED: u8 = 0x8;
    /// HEADERS: a priority block precedes the header block fragment.
    pub const PRIORITY: u8 = 0x20;
}

/// SETTINGS parameters.
pub mod setting {
    pub const HEADER_TABLE_SIZE: u16 = 0x1;
    pub const ENABLE_PUSH: u16 = 0x2;
    pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
    pub const MAX_FRAME_SIZE: u16 = 0x5;
    pub const MAX_HEADER_LIST_SIZE: u16 = 0x6;
}

/// Error codes (RFC 9113 §7), for RST_STREAM and GOAWAY.
pub mod code {
    pub const NO_ERROR: u32 = 0x0;
    pub const PROTOCOL_ERROR: u32 = 0x1;
    pub const INTERNAL_ERROR: u32 = 0x2;
    pub const FLOW_CONTROL_ERROR: u32 = 0x3;
    pub const STREAM_CLOSED: u32 = 0x5;
    pub const FRAME_SIZE_ERROR: u32 = 0x6;
    pub const REFUSED_STREAM: u32 = 0x7;
    pub const CANCEL: u32 = 0x8;
    pub const COMPRESSION_ERROR: u32 = 0x9;
    pub const ENHANCE_YOUR_CALM: u32 = 0xb;
}

/// The protocol's initial flow-control window (RFC 9113 §6.9.2).
pub const DEFAULT_WINDOW: u32 = 65_535;
/// SETTINGS_MAX_FRAME_SIZE's default and smallest value (RFC 9113 §6.5.2).
pub const DEFAULT_MAX_FRAME: usize = 16_384;
/// The largest flow-control window (RFC 9113 §6.9.1).
pub const MAX_WINDOW: u32 = (1 << 31) - 1;

/// A frame header's size (RFC 9113 §4.1).
pub const FRAME_HEAD: usize = 9;

/// A frame header: `len` payload bytes of frame type `kind` on `stream`.
pub fn frame_head(len: usize, kind: u8, flags: u8, stream: u32) -> [u8; FRAME_HEAD] {
    let l = (len as u32).to_be_bytes();
    let i = stream.to_be_bytes();
    [l[1], l[2], l[3], kind, flags, i[0], i[1], i[2], i[3]]
}

/// Append a frame header (see [`frame_head`]).
pub fn put_frame_head(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    out.extend_from_slice(&frame_head(len, kind, flags, stream));
}

/// The payload length a frame header (at least 3 bytes) announces.
pub fn frame_len(head: &[u8]) -> usize {
    (head[0] as usize) << 16 | (head[1] as usize) << 8 | head[2] as usize
}

mod conn;
mod flood;
// The fuzz targets' bodies: for cargo-fuzz (which builds with `--cfg fuzzing`) and the stable
// test beside them, not in the production codec.
#[cfg(any(test, fuzzing))]
pub mod fuzz;
#[cfg(test)]
mod fuzz_tests;
mod streams;

pub use conn::{ConnError, Connection, Dormant, Event, LocalSettings, Role};

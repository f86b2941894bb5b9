//! HTTP/2 frame types, flags and setting identifiers (RFC 9113 §6), for code that speaks the
//! framing itself.

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

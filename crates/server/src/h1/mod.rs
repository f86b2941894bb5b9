//! HTTP/1.x engine: `head` (request parser), `body` (request body decoder) and `encode` (response
//! encoder) are sans-I/O (bytes in, decisions or bytes out); `conn` is the thin tokio driver,
//! generic over clear TCP and TLS streams; `splice` sends large bodies on clear TCP without
//! copying.

pub mod body;
mod conn;
pub mod encode;
pub mod head;
#[cfg(test)]
mod sim_tests;
mod splice;

pub(crate) use conn::{serve, Handover, ListenerOptions};

/// A connection that switched to HTTP/2 with `Upgrade: h2c`: the `101` is out; the HTTP/2 engine
/// takes it from here, the upgrading request becoming its stream 1.
pub struct Upgrade<IO> {
    pub io: IO,
    /// What the client sent after the upgrading request (its preface, usually).
    pub buffered: Vec<u8>,
    /// The upgrading request, as the exchange reads it: answered on stream 1 as it was parsed.
    pub request: Box<Upgrading>,
}

/// The request that asked for `Upgrade: h2c`.
#[derive(Debug)]
pub struct Upgrading {
    pub head: loadterm_exchange::HeadBuilder,
    /// Its head's size in bytes (for `x-req`).
    pub head_bytes: u64,
    /// Its `HTTP2-Settings` value: the client's first settings.
    pub http2_settings: Vec<u8>,
}

//! HTTP/3 (RFC 9114) over quinn, as both ends of loadterm speak it: frame and stream types,
//! error codes, sans-I/O frame decoding and a quinn reader that drives it without copying DATA,
//! the request/response stream machine (`message`: events, RFC 9114 errors), field validation
//! (`fields`, `loadterm_codec::fields` re-exported: HTTP/2's rules too), and QPACK
//! (RFC 9204) with a zero-capacity dynamic table — what we advertise, so peers may only use the
//! static table and literals, and their QPACK instruction streams may carry next to nothing. Purpose-built instead of the `h3` crate, which copied every body
//! byte (see docs/PERFORMANCE.md).

#![forbid(unsafe_code)]

/// Malformed messages and content-length against DATA: the rules HTTP/2 shares.
pub use loadterm_codec::fields;
pub mod frame;
pub mod message;
pub mod qpack;
pub mod reader;

//! Stream layers: what a connection's bytes pass through between its socket and an engine, and
//! what an engine serves over (`ByteStream`, `TlsInner`). The
//! one forwarding wrapper (`layer`) and the layers on it (`prefixed`), the TLS stream
//! (`tls_stream`, its handshakes paced by `handshake_turns`, its records sealed by
//! `record_cipher`; its socket taken out while the connection is parked), the lingering close
//! every TCP connection ends with (`linger`), and the kernel's arrival stamps of TCP reads
//! (`arrival`).

pub(crate) mod arrival;
mod byte_stream;
pub(crate) mod handshake_turns;
pub(crate) mod layer;
pub(crate) mod linger;
pub(crate) mod prefixed;
#[allow(unsafe_code)] // aws-lc's streaming ciphers, through their C interface
pub(crate) mod record_cipher;
pub(crate) mod tls_stream;

pub(crate) use byte_stream::{ByteStream, TlsInner};

//! HTTP/1.x engine: `head` and `body` are sans-I/O (bytes in, decisions out); `conn` is the
//! thin tokio driver, generic over clear TCP and TLS streams.

pub mod body;
mod conn;
pub mod head;

pub use conn::{serve, Options};

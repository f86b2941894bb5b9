//! HTTP/1.x engine: `head` and `body` are sans-I/O (bytes in, decisions out); `conn` is the
//! thin tokio driver, generic over clear TCP and TLS streams; `splice` sends large bodies on
//! clear TCP without copying.

pub mod body;
mod conn;
pub mod head;
mod splice;

pub use conn::{serve, Options, Transport};

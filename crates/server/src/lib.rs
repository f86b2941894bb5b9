//! See the crate description. Outside code uses `cli` (the `serve` command), the sans-I/O
//! HTTP/1 request parser and body decoder (`h1::head`, `h1::body`: the differential and
//! robustness tests, the fuzz target) and response encoder (`h1::encode`: the thread-per-core
//! spike in `bench/spike-epoll`, which answers with the engine's own bytes); everything else is
//! private to the crate.
mod buffers;
pub mod cli;
mod config;
mod detachable;
pub mod h1;
mod h2_engine;
mod h3;
mod handshake_turns;
mod haterm_cfg;
mod ja4;
mod layer;
mod linger;
mod listen;
mod metrics;
mod park;
mod prefixed;
mod shutdown;
mod stats;
mod thread_ctx;
mod tls;
mod tls_stream;
mod trim;
mod workers;

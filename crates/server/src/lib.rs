//! See the crate description.
pub mod cli;
pub mod config;
pub mod h1;
pub mod h2_engine;
pub mod h3;
mod handshake_turns;
pub mod haterm_cfg;
pub mod ja4;
pub mod listen;
pub mod metrics;
mod park;
mod prefixed;
mod shutdown;
pub mod stats;
mod thread_ctx;
pub mod tls;
mod trim;
mod workers;

pub use config::TCP_ALPN;

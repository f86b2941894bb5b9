//! See the crate description.
pub mod cli;
pub mod config;
pub mod h1;
pub mod h2;
pub mod h3;
pub mod haterm_cfg;
mod heavy;
pub mod ja4;
pub mod listen;
pub mod metrics;
mod park;
mod planner;
mod prefixed;
mod shutdown;
pub mod stats;
pub mod tls;
mod trim;
mod workers;

pub use config::TCP_ALPN;

//! See the crate description.
pub mod cli;
pub mod config;
pub mod h2;
pub mod h3;
pub mod tls;

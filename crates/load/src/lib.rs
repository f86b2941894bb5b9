//! See the crate description.
pub mod cli;
mod conn;
mod h2;
mod h1parse;
pub mod record;
pub mod report;
mod setup;
mod tls;
mod worker;

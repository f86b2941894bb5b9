//! See the crate description.
pub mod cli;
mod conn;
mod h1parse;
mod h2;
mod h3;
pub mod record;
pub mod report;
mod setup;
mod timer;
mod tls;
mod worker;

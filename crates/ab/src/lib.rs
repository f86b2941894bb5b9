//! See the crate description.
pub mod cli;
pub mod stats;

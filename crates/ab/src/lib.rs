//! See the crate description.
pub mod cli;

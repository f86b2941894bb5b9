//! See the crate description.
pub mod cli;
mod compare;
mod env;
mod measure;
mod procs;
mod report;
pub mod stats;

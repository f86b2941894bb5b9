//! See the crate description.
pub mod cli;
mod compare;
mod contam;
mod env;
mod fixture;
mod measure;
mod plot;
mod power;
mod procs;
mod report;
pub mod stats;

//! See the crate description.
mod cell;
mod cgroup;
pub mod cli;
mod compare;
mod contam;
mod env;
mod fixture;
mod measure;
mod plot;
mod procs;
mod report;
pub mod sequential;
pub mod stats;

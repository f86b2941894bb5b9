//! See the crate description.
pub mod agent;
mod cell;
mod cgroup;
pub mod cli;
mod compare;
mod contam;
mod env;
mod fixture;
mod host;
mod measure;
mod metric;
mod plot;
mod procs;
mod profile;
mod report;
pub mod sequential;
mod station;
pub mod stats;

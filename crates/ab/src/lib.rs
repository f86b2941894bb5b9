//! See the crate description.
pub mod agent;
mod cell;
mod cgroup;
pub mod cli;
mod compare;
mod container;
mod contam;
mod env;
mod fixture;
mod host;
mod measure;
mod plot;
mod procs;
mod report;
pub mod sequential;
mod station;
pub mod stats;

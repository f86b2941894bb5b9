//! `loadterm ab` and `loadterm agent`, end to end. A test binary of its own, run after the
//! others (`cargo test` runs binaries one at a time): each comparison measures the servers' CPU
//! and refuses, as contaminated or implausible, rounds that other tests' servers and clients on
//! the same cores would disturb; beside each other only, as before they were one binary.

// Shared with the other binary, which uses the rest of it.
#[allow(dead_code)]
mod common;

mod ab_agent;
mod ab_harness;
mod ab_levels;
mod ab_profile;
mod ab_round2;
mod ab_where;
mod ab_which;

//! Settings shared by every listener and engine, built once from the command line.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Config {
    /// Client timeout: incomplete request head/body, idle keep-alive, and write inactivity.
    pub timeout: Duration,
    pub h2: crate::h2::H2Args,
    pub h3: crate::h3::H3Args,
}

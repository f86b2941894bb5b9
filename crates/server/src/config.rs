//! Settings shared by every listener and engine, built once from the command line.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Config {
    /// Client timeout: incomplete request head/body, idle keep-alive, and write inactivity.
    pub timeout: Duration,
    /// Worker threads, each with its own runtime and listeners.
    pub threads: usize,
    /// Most connections served at once by the whole process; more are closed on accept.
    pub maxconn: usize,
    /// Serve HTTP/3 on the UDP twin of every TLS port.
    pub quic: bool,
    pub h2: crate::h2::H2Args,
    pub h3: crate::h3::H3Args,
}

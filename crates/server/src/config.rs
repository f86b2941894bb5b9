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
    /// Send large clear-text HTTP/1 bodies with splice() (zero copy).
    pub splice: bool,
    /// Advertise HTTP/3 (`alt-svc: h3=":port"`) on responses over TLS/TCP.
    pub alt_svc: bool,
    /// How long in-flight requests may take to finish after SIGINT/SIGTERM.
    pub grace: Duration,
    pub shutdown: crate::shutdown::Shutdown,
    pub h2: crate::h2::H2Args,
    pub h3: crate::h3::H3Args,
}

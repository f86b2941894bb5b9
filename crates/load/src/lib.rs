//! See the crate description.
//!
//! Layers, each using only those below it: `cli` (options, the run, the report) → `worker`
//! (one thread and runtime) → `conn` (dialing: TCP, TLS, ALPN, QUIC) → the protocol clients
//! `h1`, `h2`, `h3` → `inflight` (requests in flight and their outcomes), with `shared` (a
//! worker's state), `sched` (pacing), `record`, `timer` and `setup` (with `request`, `tls`)
//! beneath. `merge` (sans-I/O) combines the reports and interval logs of several runs;
//! `merge_cmd` is its command line; `h2load` the h2load flags `cli` refuses or takes as is;
//! `search` (sans-I/O) judges `--find-max-rate`'s trials and picks the next rate, `curve` draws
//! them.
pub mod cli;
mod conn;
mod curve;
mod h1;
mod h2;
mod h2load;
mod h3;
mod inflight;
pub mod merge;
pub mod merge_cmd;
pub mod record;
pub mod report;
mod request;
mod sched;
pub mod search;
mod setup;
mod shared;
mod tls;
mod worker;

// The worker threads' precise timer, shared with the server.
use loadterm_runtime::timer;

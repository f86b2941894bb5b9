//! Process plumbing every engine uses: the statistics (`stats`) and their `/metrics` listener
//! (`metrics`), graceful shutdown and the count of open connections (`shutdown`), per-thread
//! state the exchanges start from (`thread_ctx`), and memory given back after bursts (`trim`).

pub(crate) mod metrics;
pub(crate) mod shutdown;
pub(crate) mod stats;
pub(crate) mod thread_ctx;
pub(crate) mod trim;

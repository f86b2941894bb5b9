//! loadterm's integration tests: the real binary over real sockets, with our client and
//! third-party ones. One test binary, a module per area (a file each): one build of `common`
//! and one link, where a binary per file cost a build and a link each. The A/B harness's tests
//! are a binary of their own (`ab.rs`): they measure CPU on the machine, and refuse what other
//! tests running beside them would make of it.

// Shared with the A/B binary (`ab.rs`), which uses the rest of it.
#[allow(dead_code)]
mod common;

mod deploy;
mod load;
mod load_habits;
mod load_handshakes;
mod load_schedules;
mod seed_000;
mod serve_bind;
mod serve_faults;
mod serve_floods;
mod serve_h1;
mod serve_h1_strict;
mod serve_h2;
mod serve_h3;
mod serve_heads;
mod serve_hostile;
mod serve_idle;
mod serve_ja4;
mod serve_metrics;
mod serve_tls;
mod serve_vocab;
mod shards;

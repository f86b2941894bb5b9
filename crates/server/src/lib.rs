//! See the crate description. Outside code uses `cli` (the `serve` command), the sans-I/O
//! HTTP/1 request parser and body decoder (`h1::head`, `h1::body`: the differential and
//! robustness tests, the fuzz target) and response encoder (`h1::encode`: the thread-per-core
//! spike in `bench/spike-epoll`, which answers with the engine's own bytes); everything else is
//! private to the crate.
//!
//! The modules by what they are: the HTTP engines (`h1`, `h2_engine`, `h3`), the stream layers
//! under them (`stream`), the process plumbing (`plumbing`) and the configuration (`config`);
//! `workers` runs the listeners and hands each connection to its engine, `park` keeps idle
//! HTTP/1 connections out of their tasks, `ja4` fingerprints clients, `buffers` lends
//! connections their buffers.
mod buffers;
pub mod cli;
mod config;
pub mod h1;
mod h2_engine;
mod h3;
mod ja4;
mod park;
mod plumbing;
mod stream;
mod workers;

//! Arbitrary bytes as a whole client connection to the server role, answered as the server's
//! engine does (`loadterm_codec::h2::fuzz::server`: the same body the stable test
//! `h2::fuzz_tests` runs).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| loadterm_codec::h2::fuzz::server(data));

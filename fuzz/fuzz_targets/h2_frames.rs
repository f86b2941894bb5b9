//! Arbitrary bytes after a valid client preface and SETTINGS, as the frames a server reads
//! (`loadterm_codec::h2::fuzz::frames`: the same body the stable test `h2::fuzz_tests` runs).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| loadterm_codec::h2::fuzz::frames(data));

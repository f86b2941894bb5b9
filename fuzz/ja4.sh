#!/bin/sh
# Long run of the JA4 parse-path mutation tests (crates/ja4/tests/mutations.rs): random
# mutations and truncations of the captured ClientHellos and QUIC Initial datagrams, fed to the
# TLS stream reader, the fingerprint function and the QUIC Initial reassembler. Any panic fails.
#
#   fuzz/ja4.sh [ITERATIONS_PER_INPUT] [SEED]   (default: 100000, seed from the clock)
set -eu
iters=${1:-100000}
seed=${2:-$(date +%s)}
cd "$(dirname "$0")/.."
LOADTERM_FUZZ_ITERS=$iters LOADTERM_FUZZ_SEED=$seed \
    cargo test --release -p loadterm-ja4 --test mutations -- --nocapture

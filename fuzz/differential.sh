#!/bin/sh
# Long run of the stable differential harness (crates/server/tests/differential.rs): loadterm's
# HTTP/1.x request parser against a plain RFC 9112 reference model, on generated and mutated
# requests in smuggling shapes. Prints inputs/second and every finding; exits non-zero on one.
#
#   fuzz/differential.sh [MINUTES] [SEED]      (default: 10 minutes, seed from the clock)
set -eu
minutes=${1:-10}
seed=${2:-$(date +%s)}
cd "$(dirname "$0")/.."
DIFF_SECONDS=$((minutes * 60)) DIFF_SEED=$seed \
    cargo test --release -p loadterm-server --test differential -- --nocapture

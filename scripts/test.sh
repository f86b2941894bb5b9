#!/usr/bin/env bash
# Runs every check a submission must pass: formatting, clippy, and the whole test suite (unit tests
# plus integration tests that start the real server and talk to it with our client, curl, nghttp,
# h2load, h2spec and an aioquic HTTP/3 client). Installs the tools it needs first.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-test-deps.sh
export PATH="$PATH:$(go env GOPATH)/bin"

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# bench/spike-epoll is a workspace of its own on the server's API (docs/PERFORMANCE.md): checked
# here so that it keeps building as that API moves.
cargo clippy --locked --manifest-path bench/spike-epoll/Cargo.toml --target-dir target -- -D warnings
# The glossary in docs/ARCHITECTURE.md names only what exists, and each type name means one thing.
scripts/check-glossary.sh
cargo test --workspace --locked

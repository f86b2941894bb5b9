#!/usr/bin/env bash
# Runs every check a submission must pass: formatting, clippy, and the whole test suite (unit tests
# plus integration tests that start the real server and talk to it with our client, curl, nghttp,
# h2load, h2spec and an aioquic HTTP/3 client). Installs the tools it needs first: in the
# background while the code builds, when the build's own tools (a C compiler, make) are there.
set -euo pipefail
cd "$(dirname "$0")/.."

installs=""
install_log=$(mktemp)
trap 'rm -f "$install_log"' EXIT
if command -v cc >/dev/null && command -v make >/dev/null; then
  scripts/install-test-deps.sh >"$install_log" 2>&1 &
  installs=$!
else
  scripts/install-test-deps.sh
fi

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# bench/spike-epoll is a workspace of its own on the server's API (docs/PERFORMANCE.md): checked
# here so that it keeps building as that API moves.
cargo clippy --locked --manifest-path bench/spike-epoll/Cargo.toml --target-dir target -- -D warnings
# The glossary in docs/ARCHITECTURE.md names only what exists, and each type name means one thing.
scripts/check-glossary.sh
cargo test --workspace --locked --no-run

if [ -n "$installs" ]; then
  wait "$installs" || { cat "$install_log" >&2; echo "test.sh: installing the test tools failed" >&2; exit 1; }
  cat "$install_log"
fi
gopath=$(go env GOPATH)
export PATH="$PATH:$gopath/bin"
cargo test --workspace --locked

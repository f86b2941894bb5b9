#!/usr/bin/env bash
# Runs every check a submission must pass: formatting, clippy, and the whole test suite (unit tests
# plus integration tests that start the real server and talk to it with our client, curl, nghttp,
# h2load, h2spec and an aioquic HTTP/3 client). Installs the tools it needs, in the background while
# the code builds. Each phase's line is stamped with the time (scripts/stamp.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/stamp.sh
source scripts/stamp.sh

# The build's own tools (a C compiler, make) first if they are missing; the rest of the tools are
# installed in the background while the code builds, their output shown after the build.
if ! command -v cc >/dev/null || ! command -v make >/dev/null; then
  stamp "install the build's tools"
  scripts/install-test-deps.sh build
fi
install_log=$(mktemp)
trap 'rm -f "$install_log"' EXIT
stamp "installs started, in the background"
{ scripts/install-test-deps.sh && stamp "installs finished"; } >"$install_log" 2>&1 &
installs=$!

stamp "fmt"
cargo fmt --all -- --check
stamp "clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
# bench/spike-epoll is a workspace of its own on the server's API (docs/PERFORMANCE.md): checked
# here so that it keeps building as that API moves.
stamp "clippy bench/spike-epoll"
cargo clippy --locked --manifest-path bench/spike-epoll/Cargo.toml --target-dir target -- -D warnings
# The glossary in docs/ARCHITECTURE.md names only what exists, and each type name means one thing.
stamp "glossary"
scripts/check-glossary.sh
stamp "build the tests"
cargo test --workspace --locked --no-run
stamp "built"

wait "$installs" || { cat "$install_log" >&2; echo "test.sh: installing the test tools failed" >&2; exit 1; }
cat "$install_log"
stamp "tests"
gopath=$(go env GOPATH)
export PATH="$PATH:$gopath/bin"
# Each test binary's "Running" line stamped, so that the log shows what each one took.
cargo test --workspace --locked 2>&1 | while IFS= read -r line; do
  case $line in
    *' Running '* | *' Doc-tests '*) stamp "${line#"${line%%[! ]*}"}" ;;
    *) printf '%s\n' "$line" ;;
  esac
done
stamp "all tests passed"

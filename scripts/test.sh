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
# The glossary in docs/ARCHITECTURE.md names only what exists, and each type name means one thing.
stamp "glossary"
scripts/check-glossary.sh

# Clippy and the test build in one compilation: clippy-driver compiles the workspace's own
# crates, linting them as `cargo clippy --workspace --all-targets -- -D warnings` would, and
# the dependencies are built once, by rustc. `cargo clippy` before the build checked every
# dependency again in check mode (docs/PERFORMANCE.md, "The test command on a fresh machine,
# round 3"). Every cargo command below keeps the wrapper: without it, cargo would compile the
# workspace's crates once more (a build of their own, beside this one).
RUSTC_WORKSPACE_WRAPPER=$(command -v clippy-driver) || {
  echo "test.sh: clippy-driver is missing (rustup component add clippy)" >&2
  exit 1
}
# `-D warnings` through rustc's own flags, which clippy-driver takes as rustc does (the
# dependencies' lints stay capped by cargo); the same flags for every cargo command below, so
# that none builds anything again.
export RUSTC_WORKSPACE_WRAPPER RUSTFLAGS="${RUSTFLAGS:-} -D warnings"
# jemalloc's configure compiles its 180 objects with -g3 whatever the profile asks; -g0 (the
# last -g wins) took its make from 96 to 75 s on 2 cores. No C dependency's debug information
# is used by a test.
export CFLAGS="${CFLAGS:-} -g0"
# No incremental state: this build is the script's own (the wrapper and RUSTFLAGS above are in
# cargo's hash; a plain `cargo test` keeps its own), and writing that state made compiling our
# crates from scratch 24% slower (77 → 58 s, 80 → 62 s).
export CARGO_INCREMENTAL=0
stamp "build the tests, with clippy's lints"
cargo test --workspace --all-targets --locked --no-run
# bench/spike-epoll is a workspace of its own on the server's API (docs/PERFORMANCE.md): built
# and linted here so that it keeps building as that API moves.
stamp "build bench/spike-epoll, with clippy's lints"
cargo build --locked --manifest-path bench/spike-epoll/Cargo.toml --target-dir target
stamp "built"

wait "$installs" || { cat "$install_log" >&2; echo "test.sh: installing the test tools failed" >&2; exit 1; }
cat "$install_log"
stamp "tests"
gopath=$(go env GOPATH)
export PATH="$PATH:$gopath/bin"
# Each test binary's "Running" line stamped, so that the log shows what each one took.
# The profile tests compare sampled CPU with measured CPU: they run after the rest, alone on the
# machine, where other tests' servers would share their cores.
stamped() {
  while IFS= read -r line; do
    case $line in
      *' Running '* | *' Doc-tests '*) stamp "${line#"${line%%[! ]*}"}" ;;
      *) printf '%s\n' "$line" ;;
    esac
  done
}
# Every package's unit tests and test files but the two end-to-end binaries, from cargo's own
# list of targets (a new test file runs without being named here), and the doc-tests.
mapfile -t others < <(cargo metadata --locked --no-deps --format-version 1 | python3 -c '
import json, sys
for p in json.load(sys.stdin)["packages"]:
    for t in p["targets"]:
        if "test" in t["kind"] and t["name"] not in ("integration", "ab"):
            print("--test=" + t["name"])')
[ ${#others[@]} -gt 0 ] || { echo "test.sh: cargo metadata listed no test targets" >&2; exit 1; }
cargo test --workspace --locked --lib --bins "${others[@]}" 2>&1 | stamped
cargo test --workspace --locked --doc 2>&1 | stamped
# The integration tests wait on servers and clients much of the time: four at a time took the
# binary from 250 to 172 s on 2 cores, both then 89% busy (docs/PERFORMANCE.md).
cargo test --workspace --locked --test integration -- --test-threads=4 2>&1 | stamped
# The A/B tests two at a time, whatever the machine: each measures server core 0 (ab's
# default), which a third would crowd.
cargo test --workspace --locked --test ab -- --skip ab_profile:: --test-threads=2 2>&1 | stamped
stamp "the profile tests, alone"
# --workspace, as above: `-p loadterm` would resolve the dependencies' features for that package
# alone, and build the test binary again (15 s).
cargo test --workspace --test ab --locked ab_profile:: -- --test-threads=1 2>&1 | stamped
stamp "all tests passed"

#!/usr/bin/env bash
# `loadterm ab --profile` on a proxy (docs/AB.md, "Where did the CPU go?"): HAProxy in front of a
# `loadterm serve` backend, variant A the plain proxy, B the same with three `http-request
# set-header` actions (bench/ab-haproxy.cfg.in, one template: HAProxy's `.if` on `{variant}`).
# The profile should name HAProxy's functions (the rule loop, the actions, the sample fetches,
# htx_*) and the kernel's (`_[k]`), and the set-header path among B's increases.
#
#   HAPROXY=/path/to/haproxy bench/ab-profile-haproxy.sh [ab options…]
#   e.g. … --json h.json --html h.html --markdown h.md
#
# Needs root (perf with kernel symbols), `perf` (Debian's linux-perf), `cargo build --release`, and
# a HAProxy built from its source with symbols and frame pointers, so that its stacks are whole:
#   make -j2 TARGET=linux-glibc USE_OPENSSL=1 DEBUG_CFLAGS="-g -fno-omit-frame-pointer" haproxy
# The backend runs on BACKEND_CPUS (default 1), unmeasured; HAProxy on ab's server CPUs.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/target/release/loadterm}
HAPROXY=${HAPROXY:-haproxy}
BACKEND_CPUS=${BACKEND_CPUS:-1}
[ -x "$BIN" ] || { echo "build first: cargo build --release" >&2; exit 1; }
command -v "$HAPROXY" >/dev/null || { echo "no HAProxy: set HAPROXY=/path/to/haproxy" >&2; exit 1; }
command -v perf >/dev/null || { echo "--profile needs perf (Debian's linux-perf)" >&2; exit 1; }

HAP="$HAPROXY -f {config}"
exec "$BIN" ab \
  --backend "$BIN serve -t 1 -L {host}:{backend_port}:{backend_tls_port} --no-quic" \
  --backend-cpus "$BACKEND_CPUS" --config-template bench/ab-haproxy.cfg.in \
  --a "$HAP" --b "$HAP" --profile "$@"

#!/usr/bin/env bash
# User-space instructions per request of a server (or, with PROFILE=client, of the client),
# counted by valgrind's callgrind: a count that
# does not move with machine load or CPU frequency, for comparing two builds' hot paths on a busy
# machine where CPU-time A/B runs cannot resolve a few percent. It says nothing about system time
# or cache behaviour; confirm a change with `loadterm ab` on a quiet machine.
#
# Runs the server under callgrind twice, with N and 3N requests from CLIENT, and prints
# (I(3N) - I(N)) / 2N, which cancels start-up and shutdown. PROFILE=client runs the server
# natively and the client under callgrind instead (the client's CPU per request, e.g. old and new
# builds of the load generator against one server).
#
#   bench/instructions-per-request.sh 'target/release/loadterm serve -t 1 -L 127.0.0.1:{port}' \
#       'target/release/loadterm load --h1 -c 10 -m 10 -t 1 -n {requests} http://127.0.0.1:{port}/?s=1k' 20000
#
# Over TLS, give the server a fixed certificate (`--cert FILE`): generating one at start-up
# (an RSA key) costs a number of instructions that varies by hundreds of millions between runs.
#
# CALLGRIND_OUT=PREFIX keeps the two profiles as PREFIX.N and PREFIX.3N, for
# bench/callgrind-groups.py (where the count goes).
#
# Needs valgrind (apt install valgrind). The client runs natively; the server is ~50x slower
# under callgrind, so keep the client's concurrency modest and N around 10k-50k.
set -euo pipefail
server=$1 client=$2 n=$3
PORT=${PORT:-18930}
command -v valgrind >/dev/null || { echo "needs valgrind (apt install valgrind)" >&2; exit 1; }
fill() { local s=${1//\{port\}/$PORT}; echo "${s//\{requests\}/$2}"; }

count() {
  local requests=$1 out
  out=$(mktemp)
  local grind="valgrind --tool=callgrind --callgrind-out-file=$out"
  if [ "${PROFILE:-server}" = client ]; then
    # shellcheck disable=SC2046
    $(fill "$server" "$requests") >/dev/null 2>&1 &
  else
    # shellcheck disable=SC2046
    $grind $(fill "$server" "$requests") >/dev/null 2>&1 &
    grind=""
  fi
  local pid=$!
  for _ in $(seq 400); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.05; done
  sh -c "$grind $(fill "$client" "$requests")" >/dev/null 2>&1
  kill -TERM "$pid"; wait "$pid" 2>/dev/null || true
  callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1; exit }'
  if [ -n "${CALLGRIND_OUT:-}" ]; then mv "$out" "$CALLGRIND_OUT.$requests"; else rm -f "$out"; fi
}

a=$(count "$n"); b=$(count $((3 * n)))
awk -v a="$a" -v b="$b" -v n="$n" 'BEGIN { printf "%.0f user-space instructions per request (%d and %d requests: %.0f, %.0f)\n", (b - a) / (2 * n), n, 3 * n, a, b }'

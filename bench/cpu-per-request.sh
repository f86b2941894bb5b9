#!/usr/bin/env bash
# Server CPU per request, pinned: starts SERVER (a command with {clear_port} {tls_port}) on core
# $SERVER_CPU, runs CLIENT (a command with {clear_port} {tls_port} {requests}) on core $CLIENT_CPU,
# reads the server's utime+stime from /proc before and after, and prints µs per request.
# Repeats $ROUNDS times, a fresh server each time, and prints min/median/max.
#
#   bench/cpu-per-request.sh 'target/release/loadterm serve -t 1 -L 127.0.0.1:{clear_port}:{tls_port}' \
#       'h2load --h1 -n {requests} -c 50 -t 1 -m 10 http://127.0.0.1:{clear_port}/?s=256k' 8000
set -euo pipefail
server=$1 client=$2 requests=$3
SERVER_CPU=${SERVER_CPU:-0} CLIENT_CPU=${CLIENT_CPU:-1} ROUNDS=${ROUNDS:-3}
CLEAR_PORT=${CLEAR_PORT:-18888} TLS_PORT=${TLS_PORT:-18889}
tck=$(getconf CLK_TCK)

if ss -Hlntu | grep -qE ":($CLEAR_PORT|$TLS_PORT)\b"; then
  echo "port $CLEAR_PORT or $TLS_PORT is already in use" >&2; exit 1
fi
fill() { local s=${1//\{clear_port\}/$CLEAR_PORT}; s=${s//\{tls_port\}/$TLS_PORT}; echo "${s//\{requests\}/$requests}"; }
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

results=()
for round in $(seq "$ROUNDS"); do
  taskset -c "$SERVER_CPU" sh -c "exec $(fill "$server")" >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$CLEAR_PORT") 2>/dev/null && break; sleep 0.05; done
  before=$(ticks "$pid"); t0=$(date +%s.%N)
  out=$(taskset -c "$CLIENT_CPU" sh -c "$(fill "$client")" 2>&1)
  t1=$(date +%s.%N); after=$(ticks "$pid")
  kill "$pid"; wait "$pid" 2>/dev/null || true
  done_reqs=$(echo "$out" | grep -oE '[0-9]+ (succeeded|done)' | head -1 | grep -oE '^[0-9]+' || echo "$requests")
  us=$(awk -v a="$after" -v b="$before" -v t="$tck" -v n="$done_reqs" 'BEGIN { printf "%.2f", (a - b) / t * 1e6 / n }')
  util=$(awk -v a="$after" -v b="$before" -v t="$tck" -v w0="$t0" -v w1="$t1" 'BEGIN { printf "%.0f", (a - b) / t / (w1 - w0) * 100 }')
  rps=$(echo "$out" | grep -oE '[0-9.]+ req/s' | head -1)
  echo "round $round: $us µs/req, server CPU ${util}% of a core, $rps, $done_reqs requests"
  results+=("$us")
done
printf '%s\n' "${results[@]}" | sort -n | awk '{ v[NR] = $1 } END { printf "server CPU µs/request: min %s / median %s / max %s (%d rounds)\n", v[1], v[int((NR + 1) / 2)], v[NR], NR }'

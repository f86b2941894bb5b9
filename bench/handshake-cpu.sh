#!/usr/bin/env bash
# Server CPU per new TLS connection, full handshakes against resumed ones: `loadterm load --h1
# --requests-per-conn 1` (one request per connection) with `--tls-resume never` and `always`,
# against `loadterm serve -t 1` and nginx (bench/nginx-peer.sh: one worker, TLS 1.3, ECDSA
# P-256, its default stateless tickets), each server pinned to core $SERVER_CPU, the client to
# $CLIENT_CPU. Per run: the handshakes the client counted (full/resumed), and the server's CPU
# (utime + stime of its processes, /proc/PID/stat, 10 ms ticks) per connection. Softirq time on
# the server core is not in it.
#
#   cargo build --release && bench/handshake-cpu.sh
#
# Env: ROUNDS (3, interleaved), N (connections per run, 4000), SERVER_CPU (0), CLIENT_CPU (1),
# LOADTERM (target/release/loadterm), CLEAR_PORT/TLS_PORT (18898/18899).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3} N=${N:-4000} SERVER_CPU=${SERVER_CPU:-0} CLIENT_CPU=${CLIENT_CPU:-1}
CLEAR_PORT=${CLEAR_PORT:-18898} TLS_PORT=${TLS_PORT:-18899}
LOADTERM=${LOADTERM:-target/release/loadterm}
tick=$(getconf CLK_TCK)

# CPU seconds of a process and its children, summed.
cpu_s() {
  local total=0 p
  for p in $1 $(cat /proc/"$1"/task/*/children 2>/dev/null); do
    [ -r /proc/"$p"/stat ] || continue
    total=$(( total + $(awk '{print $14 + $15}' /proc/"$p"/stat) ))
  done
  awk -v t="$total" -v k="$tick" 'BEGIN { printf "%.3f", t / k }'
}

wait_port() {
  for _ in $(seq 100); do
    (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listens on $1" >&2
  return 1
}

start() {
  case $1 in
    loadterm) taskset -c "$SERVER_CPU" "$LOADTERM" serve -t 1 --no-quic \
                -L "127.0.0.1:$CLEAR_PORT:$TLS_PORT" >/dev/null 2>&1 & ;;
    nginx) taskset -c "$SERVER_CPU" bench/nginx-peer.sh "$CLEAR_PORT" "$TLS_PORT" >/dev/null 2>&1 & ;;
  esac
  pid=$!
  wait_port "$TLS_PORT"
  sleep 0.3
}

stop() { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; }

declare -A RESULT
for round in $(seq "$ROUNDS"); do
  for server in loadterm nginx; do
    start "$server"
    url="https://127.0.0.1:$TLS_PORT/?s=1k"
    # Warm: the server's first handshakes (and the client's session store) out of the way.
    taskset -c "$CLIENT_CPU" "$LOADTERM" load --h1 -k -q -n 200 -c 4 -t 1 \
      --requests-per-conn 1 "$url"
    for resume in never always; do
      before=$(cpu_s "$pid")
      json=$(taskset -c "$CLIENT_CPU" "$LOADTERM" load --h1 -k -q --json - -n "$N" -c 8 -t 1 \
        --requests-per-conn 1 --tls-resume "$resume" "$url")
      after=$(cpu_s "$pid")
      read -r full resumed ok < <(python3 -c 'import json,sys; r=json.load(sys.stdin); h=r["handshakes"]; print(h["full"], h["resumed"], r["requests"]["succeeded"])' <<<"$json")
      us=$(awk -v a="$after" -v b="$before" -v n=$((full + resumed)) 'BEGIN { printf "%.1f", (a - b) * 1e6 / n }')
      echo "round $round $server resume=$resume: $ok ok, $full full, $resumed resumed, server ${us} µs CPU per connection"
      RESULT[$server-$resume]+="$us "
    done
    stop
  done
done
echo
echo "server CPU µs per connection, median (min-max) of $ROUNDS:"
for server in loadterm nginx; do
  for resume in never always; do
    python3 -c 'import sys,statistics as s; v=sorted(map(float,sys.argv[2:])); print(f"  {sys.argv[1]:<22} {s.median(v):8.1f} ({v[0]:.1f}-{v[-1]:.1f})")' \
      "$server resume=$resume" ${RESULT[$server-$resume]}
  done
done

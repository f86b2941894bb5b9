#!/usr/bin/env bash
# Peak RSS per busy HTTP/2 connection (docs/PERFORMANCE.md "Memory per HTTP/2 connection").
#
#   bench/h2-peak-rss.sh SERVER h2|h2c [CONNS] [REQUESTS] [RUNS]
#
# For each run: a fresh `SERVER serve -t 1 --no-quic` on loopback, a warm-up of 100 requests on
# one connection, VmRSS read; then `loadterm load -c CONNS -m 10 -t 1 -n REQUESTS` of
# `/?s=1k` (HTTP/2 over TLS, or h2c) while the server's VmRSS is sampled every 20 ms. Prints
# (peak - before) / CONNS in KiB, one line per run. The client is `$LOAD` (default: the
# loadterm next to this script's checkout, target/release/loadterm), the same for every server
# compared. Defaults: CONNS 100, REQUESTS 200000, RUNS 3.
set -euo pipefail
bin=$1 transport=$2 c=${3:-100} n=${4:-200000} runs=${5:-3}
here=$(cd "$(dirname "$0")" && pwd)
load=${LOAD:-$here/../target/release/loadterm}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rss() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
for run in $(seq "$runs"); do
  port=$((20000 + RANDOM % 20000))
  "$bin" serve -t 1 --no-quic -L "127.0.0.1:$port:$((port + 1))" >"$work/serve.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do
    curl -sk -o /dev/null "http://127.0.0.1:$port/?s=1k" && break
    sleep 0.1
  done
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "the server did not start (port $port taken?):" >&2
    cat "$work/serve.log" >&2
    exit 1
  fi
  case $transport in
    h2) flags=(--h2 -k) url="https://127.0.0.1:$((port + 1))/?s=1k" ;;
    h2c) flags=(--h2c) url="http://127.0.0.1:$port/?s=1k" ;;
    *) echo "transport: h2 or h2c" >&2; exit 2 ;;
  esac
  "$load" load "${flags[@]}" -c 1 -t 1 -n 100 "$url" >/dev/null
  sleep 1
  before=$(rss "$pid")
  "$load" load "${flags[@]}" -c "$c" -m 10 -t 1 -n "$n" "$url" >"$work/load.log" &
  client=$!
  peak=$before
  while kill -0 "$client" 2>/dev/null; do
    now=$(rss "$pid")
    ((now > peak)) && peak=$now
    sleep 0.02
  done
  wait "$client"
  kill "$pid"
  wait "$pid" || true
  awk -v b="$before" -v p="$peak" -v c="$c" -v t="$transport" -v r="$run" \
    'BEGIN {printf "%s run %d: %d connections, RSS %d -> peak %d KiB, %.2f KiB per busy connection\n", t, r, c, b, p, (p - b) / c}'
done

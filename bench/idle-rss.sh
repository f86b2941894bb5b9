#!/usr/bin/env bash
# RSS per idle keep-alive connection (docs/PERFORMANCE.md "Memory per idle connection").
#
#   bench/idle-rss.sh BINARY clear|tls|h2c|h2 [N] [C] [RUNS] [HOLD_S]
#
# For each run: a fresh `BINARY serve -t 1` on loopback, one warm-up request, VmRSS read; then
# N keep-alive connections (C opening at once), one `GET /?s=1k` each, response read
# (bench/hostile.py idle: HTTP/1.1, or HTTP/2 for h2c and h2 over TLS), all held idle for HOLD_S seconds (default 5: past the 1 s
# after which idle connections are parked), VmRSS read again. Prints (after - before) / N in
# KiB, one line per run. Defaults: N 1000, C 100, RUNS 3.
set -euo pipefail
bin=$1 transport=$2 n=${3:-1000} c=${4:-100} runs=${5:-3} hold=${6:-5}
here=$(cd "$(dirname "$0")" && pwd)
tls=()
case $transport in
  tls) tls=(--tls) ;;
  h2c) tls=(--h2) ;;
  h2) tls=(--tls --h2) ;;
esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rss() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
for run in $(seq "$runs"); do
  port=$((20000 + RANDOM % 20000))
  "$bin" serve -t 1 -L "127.0.0.1:$port:$((port + 1))" --timeout 600s >"$work/serve.log" 2>&1 &
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
  target=$port
  [[ $transport = tls || $transport = h2 ]] && target=$((port + 1))
  curl -sk -o /dev/null "https://127.0.0.1:$((port + 1))/?s=1k"
  sleep 1
  before=$(rss "$pid")
  rm -f "$work/ready"
  python3 "$here/hostile.py" idle "${tls[@]}" --port "$target" -n "$n" --parallel "$c" \
    --path '/?s=1k' --duration $((hold + 5)) --ready "$work/ready" >"$work/idle.json" &
  client=$!
  while [ ! -e "$work/ready" ]; do sleep 0.1; done
  sleep "$hold"
  after=$(rss "$pid")
  wait "$client"
  kill "$pid"
  wait "$pid" || true
  opened=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["opened"])' "$work/idle.json")
  awk -v b="$before" -v a="$after" -v n="$opened" -v t="$transport" -v r="$run" \
    'BEGIN {printf "%s run %d: %d connections, RSS %d -> %d KiB, %.2f KiB per idle connection\n", t, r, n, b, a, (a - b) / n}'
done

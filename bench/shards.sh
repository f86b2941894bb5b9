#!/usr/bin/env bash
# Figures for sharded runs (docs/DISTRIBUTED.md), at a scale this machine can take:
#  1. the same run unsharded and as 4 local shards (deploy/simulate.sh, started together with
#     --start-at, merged): counts, req/s, p50/p99/p99.9 side by side, for a -D run (a) and a
#     -n run (b, whose counts must be equal);
#  2. the time `loadterm merge` takes for 4 runs of MINUTES (default 10) of 1-second interval
#     logs. The logs are synthesized (cheap): the intervals of a short real run, repeated with
#     shifted timestamps to the full length, each shard from its own run.
#
#   bench/shards.sh [LOADTERM]      (default target/release/loadterm)
# Env: DURATION (5s), REQUESTS (100000), CONNS (8), MINUTES (10), PORT (18890).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:-target/release/loadterm}")
duration=${DURATION:-5s} conns=${CONNS:-8} minutes=${MINUTES:-10} port=${PORT:-18890}
work=$(mktemp -d)
trap 'kill "$server" 2>/dev/null || true; rm -rf "$work"' EXIT

"$bin" serve -L "127.0.0.1:$port" -t 1 --no-quic >/dev/null 2>&1 &
server=$!
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.05; done
url="http://127.0.0.1:$port/?s=1k"

# One comparison: the run unsharded, then as 4 shards through deploy/simulate.sh, side by side.
compare() {
  local tag=$1; shift
  "$bin" load "$@" -q --json "$work/whole-$tag.json"
  LOADTERM_DIR=$(dirname "$bin") LOADTERM="$bin" deploy/simulate.sh -n 4 -l 6 -o "$work/sim-$tag" -- "$@" >/dev/null
  echo "## 1$tag. one run vs 4 local shards merged ($*; server -t 1; busy 2-core machine)"
  python3 - "$work/whole-$tag.json" "$work/sim-$tag/merged.json" <<'PY'
import json, sys
w, m = (json.load(open(f)) for f in sys.argv[1:3])
print(f"{'':22}{'unsharded':>12}{'4 shards':>12}")
rows = [("runs", lambda r: r["runs"]),
        ("connections", lambda r: r["connections"]),
        ("threads", lambda r: r["threads"]),
        ("requests completed", lambda r: r["requests"]["completed"]),
        ("errors", lambda r: sum(v for k, v in r["errors"].items())),
        ("window (s)", lambda r: f'{r["duration_s"]:.3f}'),
        ("req/s", lambda r: f'{r["rps"]:.0f}'),
        ("p50 (us)", lambda r: r["latency_us"]["p50"]),
        ("p99 (us)", lambda r: r["latency_us"]["p99"]),
        ("p99.9 (us)", lambda r: r["latency_us"]["p99_9"]),
        ("shards late by (s)", lambda r: f'{r["clock"]["late_s"]:.3f}')]
for name, f in rows:
    print(f"{name:22}{f(w):>12}{f(m):>12}")
PY
  echo
}
compare a -D "$duration" --warm-up-time 1s -c "$conns" "$url"
compare b -n "${REQUESTS:-100000}" -c "$conns" "$url"
sim=$work/sim-a

echo "## 2. merge time, 4 runs x $minutes min of 1-second interval logs (synthesized; busy 2-core machine)"
seconds=$((minutes * 60))
for i in 0 1 2 3; do
  # The shard's real intervals (header lines kept once), cycled to $seconds intervals.
  awk -v n="$seconds" -F, '
    /^#/ || /^"/ { print; next }
    { line[k++] = $0 }
    END { for (t = 0; t < n; t++) { split(line[t % k], f, ","); printf "%d.000,%s,%s,%s\n", t, f[2], f[3], f[4] } }
  ' "$sim/shard-$i.hlog" > "$work/long-$i.hlog"
done
echo "input: $(wc -l < "$work/long-0.hlog") lines/log, $(du -ch "$work"/long-*.hlog | tail -1 | cut -f1) in all"
for round in 1 2 3; do
  /usr/bin/time -f "round $round: %e s wall, %U s user, %M KB max RSS" \
    "$bin" merge "$work"/long-*.hlog --hdr-log "$work/long-merged.hlog"
done
echo "output: $(grep -vc '^#' "$work/long-merged.hlog") intervals"
for round in 1 2 3; do
  /usr/bin/time -f "reports only, round $round: %e s wall" \
    "$bin" merge -q "$sim"/shard-*.json --json "$work/m.json"
done

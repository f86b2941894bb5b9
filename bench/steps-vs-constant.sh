#!/usr/bin/env bash
# A --rate schedule's steps against constant-rate runs at each step's rate: `loadterm serve -t 1`
# pinned to $SERVER_CPU answering after $DELAY (`?t=`), `loadterm load -t 1` pinned to
# $CLIENT_CPU. One run of steps $RATES (each $STEP long), then one constant run per rate for
# $STEP; prints the corrected p50, p90, p99 and p99.9 of each step beside the constant run's.
#
#   cargo build --release && bench/steps-vs-constant.sh
#
# Env: RATES (1000,2000,4000), STEP (10s), DELAY (2, ms), CONNS (50), SERVER_CPU (0),
# CLIENT_CPU (1), LOADTERM (target/release/loadterm), CLEAR_PORT (18897).
set -euo pipefail
cd "$(dirname "$0")/.."
RATES=${RATES:-1000,2000,4000} STEP=${STEP:-10s} DELAY=${DELAY:-2} CONNS=${CONNS:-50}
SERVER_CPU=${SERVER_CPU:-0} CLIENT_CPU=${CLIENT_CPU:-1} CLEAR_PORT=${CLEAR_PORT:-18897}
LOADTERM=${LOADTERM:-target/release/loadterm}
taskset -c "$SERVER_CPU" "$LOADTERM" serve -t 1 --no-quic -L "127.0.0.1:$CLEAR_PORT" >/dev/null 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null' EXIT
sleep 0.5
url="http://127.0.0.1:$CLEAR_PORT/?t=$DELAY"
load() { taskset -c "$CLIENT_CPU" "$LOADTERM" load -q --json - -t 1 -c "$CONNS" --warm-up-time 1s "$@" "$url"; }
steps=$(load --rate "$RATES" --step-duration "$STEP")
printf '%-8s %-9s %9s %9s %9s %9s %9s\n' rate run rps p50 p90 p99 p99.9
k=0
for rate in ${RATES//,/ }; do
  constant=$(load --rate "$rate" -D "$STEP")
  python3 - "$rate" "$k" <<PY
import json, sys
rate, k = sys.argv[1], int(sys.argv[2])
step = json.loads('''$steps''')["steps"][k]
const = json.loads('''$constant''')
for name, r in (("step", step), ("constant", const)):
    p = r["latency_corrected_us"]
    print(f"{rate:<8} {name:<9} {r['rps']:9.1f} " + " ".join(f"{p[q]/1e3:7.2f}ms" for q in ("p50", "p90", "p99", "p99_9")))
PY
  k=$((k + 1))
done

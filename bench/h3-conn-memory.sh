#!/usr/bin/env bash
# Server memory per HTTP/3 connection (issue 31): N aioquic connections (bench/hostile.py h3
# conns), one GET each, then held idle. Prints one line per run: the server's RSS after one
# request (base), 5 s after the last connection opened (held; per connection: (held - base) / N),
# and 20 s after the server saw them all closed (after; what stays once they are gone).
#
#   bench/h3-conn-memory.sh [SERVER OPTIONS...]     e.g. --h3-max-streams 100 --quic-window 1m
# Env: LOADTERM (target/release/loadterm; never built here), N (300), CPUS (the CPU list for the
#      server and the client, default 1), PORT (29500: PORT clear, PORT+1 TLS and QUIC, PORT+2
#      the statistics)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${LOADTERM:-target/release/loadterm}")
n=${N:-300} cpus=${CPUS:-1} port=${PORT:-29500}
tport=$((port + 1)) mport=$((port + 2))
work=$(mktemp -d)
server=""
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$work"' EXIT

rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

taskset -c "$cpus" "$bin" serve -L "127.0.0.1:$port:$tport" -t 1 --metrics "127.0.0.1:$mport" "$@" \
  >/dev/null 2>"$work/err" &
server=$!
for _ in $(seq 200); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
  sleep 0.05
done
taskset -c "$cpus" "$bin" load --h3 -k -n 1 -q "https://127.0.0.1:$tport/?s=1" >/dev/null
base=$(rss_kib "$server")
# Held 5 s past --ready (written once every connection is open and has sent its request), then
# closed by the client's exit.
taskset -c "$cpus" python3 bench/hostile.py h3 conns --port "$tport" -n "$n" --parallel 100 \
  --timeout 60 --duration 8 --path '/?s=1' --ready "$work/ready" >"$work/out.json" &
client=$!
while [ ! -e "$work/ready" ]; do
  kill -0 "$client" 2>/dev/null || { echo "hostile.py ended early: $(cat "$work/out.json")" >&2; exit 1; }
  sleep 0.1
done
sleep 5
held=$(rss_kib "$server")
wait "$client"
# The client ends without closing its connections: they go at the server's idle timeout.
quic_open() {
  curl -s "http://127.0.0.1:$mport/metrics" |
    awk '/^loadterm_connections_open\{transport="quic"\}/ { print $2 }'
}
while [ "$(quic_open)" != 0 ]; do sleep 1; done
# Past the server's trims after a burst (3, 8 and 18 s after it).
sleep 20
after=$(rss_kib "$server")
opened=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["opened"])' "$work/out.json")
echo "options: ${*:-(defaults)}; N $n (opened $opened); RSS base $base KiB, held $held KiB" \
  "($(( (held - base) * 1024 / n )) B per connection), after close $after KiB (+$((after - base)) KiB)"

#!/usr/bin/env bash
# Server CPU per request, loadterm against a peer server (haterm), side by side: the rows of
# docs/PERFORMANCE.md, both servers pinned to $SERVER_CPU with one thread, the same client pinned
# to $CLIENT_CPU, a fresh server process per run, the servers in random order in every round.
#
#   PEER_CMD='/path/to/haterm -L 127.0.0.1:{clear_port}:{tls_port} -G "nbthread 1" -G limited-quic' \
#     bench/peer-compare.sh
#
# Env: PEER_CMD (required: the peer's command line with {clear_port} {tls_port}), PEER_NAME
# (default peer), BASE_CMD and BASE_NAME (an optional third server, e.g. an older build, in the
# same rounds), LOADTERM_CMD (default: target/release/loadterm serve -t 1 -L ...), ROUNDS (5),
# ROWS (subset of the row names below, space separated), SERVER_CPU (0), CLIENT_CPU (1),
# CLEAR_PORT (18888), TLS_PORT (18889), LOADTERM (client binary for the HTTP/3 rows), WARMUP
# (set: each server first serves the row's client run once, unmeasured), STEAL_MAX (2: a run
# whose server and client cores lost more than this percentage of their time to the hypervisor
# is run again, up to twice, as `loadterm ab` does; the steal is printed with every run), SCALE
# (1: K runs each row's client for K times its requests).
# Besides the server's own CPU (its process tree's user and system time), each run gives the
# server core's busy time per request from /proc/stat, softirq and irq included: loopback's
# network work runs in softirq on the sending core, and a kernel without
# CONFIG_IRQ_TIME_ACCOUNTING charges softirq to whichever task it interrupted, the server or
# not. Nothing else should run on SERVER_CPU.
# PERF_DIR: also record the server's samples in each run (perf, cpu-clock), as
# PERF_DIR/ROW.SERVER.ROUND.data, for bench/perf-groups.py; the sampling costs the server CPU,
# so take the µs figures from a run without it.
# Prints one line per run, then per row: median (min–max) µs/request of each server, the ratio
# of the medians and the median of the per-round ratios; req/s likewise; the medians of user and
# system µs/request apart (where the time goes: a server making the same system calls differs
# in user space).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${PEER_CMD:?set PEER_CMD to the peer server command (with {clear_port} and {tls_port})}"
PEER_NAME=${PEER_NAME:-peer} ROUNDS=${ROUNDS:-5}
SERVER_CPU=${SERVER_CPU:-0} CLIENT_CPU=${CLIENT_CPU:-1}
CLEAR_PORT=${CLEAR_PORT:-18888} TLS_PORT=${TLS_PORT:-18889}
LOADTERM=${LOADTERM:-target/release/loadterm}
default_cmd="$LOADTERM serve -t 1 -L 127.0.0.1:{clear_port}:{tls_port}"
LOADTERM_CMD=${LOADTERM_CMD:-$default_cmd}
tck=$(getconf CLK_TCK)
http="http://127.0.0.1:{clear_port}" https="https://127.0.0.1:{tls_port}"

declare -A CLIENT=(
  [h1-256k]="h2load --h1 -n 8000 -c 50 -t 1 -m 10 $http/?s=256k"
  [h1-1k-m1]="h2load --h1 -n 100000 -c 50 -t 1 -m 1 $http/?s=1k"
  [h1-1k-m10]="h2load --h1 -n 200000 -c 50 -t 1 -m 10 $http/?s=1k"
  [h1tls-256k]="h2load --h1 -n 4000 -c 50 -t 1 -m 10 $https/?s=256k"
  [h2tls-256k]="h2load -n 4000 -c 50 -t 1 -m 10 --npn-list=h2 $https/?s=256k"
  [h2tls-1k]="h2load -n 100000 -c 50 -t 1 -m 10 --npn-list=h2 $https/?s=1k"
  [h3-256k]="$LOADTERM load --h3 -k -n 2000 -c 10 -t 1 -m 10 $https/?s=256k"
  [h3-1k]="$LOADTERM load --h3 -k -n 50000 -c 10 -t 1 -m 10 $https/?s=1k"
  # The same with oha (cargo install oha --locked --features http3), a client that shares no
  # HTTP/3 code with loadterm's server (loadterm load does: both use crates/h3).
  [h3-256k-oha]="oha --http-version 3 --insecure --no-tui -n 2000 -c 10 -p 10 $https/?s=256k"
  [h3-1k-oha]="oha --http-version 3 --insecure --no-tui -n 50000 -c 10 -p 10 $https/?s=1k"
)
ORDER="h1-256k h1-1k-m1 h1-1k-m10 h1tls-256k h2tls-256k h2tls-1k h3-256k h3-1k h3-256k-oha h3-1k-oha"
ROWS=${ROWS:-$ORDER}

[[ " $ROWS " == *-oha\ * ]] && { command -v oha >/dev/null || { echo "oha is missing (cargo install oha --locked --features http3)" >&2; exit 1; }; }
for tool in h2load taskset ss; do command -v "$tool" >/dev/null || { echo "$tool is missing" >&2; exit 1; }; done
[ -x "$LOADTERM" ] || { echo "$LOADTERM not built (cargo build --release)" >&2; exit 1; }
if ss -Hlntu | grep -qE ":($CLEAR_PORT|$TLS_PORT)\b"; then
  echo "port $CLEAR_PORT or $TLS_PORT is already in use (a SO_REUSEPORT server would share it)" >&2; exit 1
fi
fill() { local s=${1//\{clear_port\}/$CLEAR_PORT}; echo "${s//\{tls_port\}/$TLS_PORT}"; }
# CPU ticks of the server's whole process tree (haterm may fork a master): "user system".
ticks() {
  local user=0 sys=0 p u s
  for p in $(pgrep -g "$1" 2>/dev/null || echo "$1"); do
    read -r u s < <(awk '{ print $14, $15 }' "/proc/$p/stat" 2>/dev/null || echo 0 0)
    user=$((user + ${u:-0})) sys=$((sys + ${s:-0}))
  done
  echo "$user $sys"
}
# wait_ready SERVER_CMD: its clear port accepts, and its TLS port if the command has one (a
# clear-only peer, such as bench/epoll-floor.c, is ready without it).
wait_ready() {
  local tls=$TLS_PORT
  [[ $1 == *"{tls_port}"* ]] || tls=$CLEAR_PORT
  for _ in $(seq 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$CLEAR_PORT") 2>/dev/null && (exec 3<>"/dev/tcp/127.0.0.1/$tls") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "server did not start" >&2; return 1
}

# Ticks of the server's and client's cores in /proc/stat: "steal all server-core-busy" (guest
# time is in user; busy is user, nice, system, irq and softirq).
core_ticks() {
  awk -v a="cpu$SERVER_CPU" -v b="cpu$CLIENT_CPU" \
    '$1 == a || $1 == b { for (i = 2; i <= 9; i++) all += $i; steal += $9 }
     $1 == a { busy = $2 + $3 + $4 + $7 + $8 } END { print steal, all, busy }' /proc/stat
}

# measure SERVER_CMD CLIENT_CMD -> "µs/req req/s requests user-µs/req system-µs/req steal-%
# core-µs/req"
measure() {
  setsid taskset -c "$SERVER_CPU" sh -c "exec $(fill "$1")" >/dev/null 2>&1 &
  local pid=$!
  wait_ready "$1"
  sleep 0.3 # QUIC listener and first-connection setup
  local before t0 out t1 after
  local perf=""
  if [ -n "${PERF_DIR:-}" ]; then # named after the caller's row, server and round
    taskset -c "$CLIENT_CPU" perf record -q -e cpu-clock -F 4999 -p "$pid" -o "$PERF_DIR/$row.${NAME[$who]}.$round.data" >/dev/null 2>&1 &
    perf=$!
    sleep 0.5
  fi
  # WARMUP=1: the client's run once, unmeasured, first (handshakes, buffers, first touches).
  if [ -n "${WARMUP:-}" ]; then taskset -c "$CLIENT_CPU" sh -c "$(fill "$2")" >/dev/null 2>&1 || true; fi
  before=$(ticks "$pid"); t0=$(date +%s.%N); local cores0 cores1
  cores0=$(core_ticks)
  out=$(taskset -c "$CLIENT_CPU" sh -c "$(fill "$2")" 2>&1) || true
  cores1=$(core_ticks)
  t1=$(date +%s.%N); after=$(ticks "$pid")
  if [ -n "$perf" ]; then kill -INT "$perf"; wait "$perf" 2>/dev/null || true; fi
  kill -TERM -- "-$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true
  for _ in $(seq 100); do ss -Hlntu | grep -qE ":($CLEAR_PORT|$TLS_PORT)\b" || break; sleep 0.05; done
  local n
  # h2load and loadterm say "N succeeded", oha "[200] N responses".
  n=$(echo "$out" | grep -oE '[0-9]+ succeeded|\[200\] [0-9]+ responses' | head -1 | grep -oE '[0-9]+' | tail -1 || echo 0)
  if [ "$n" -eq 0 ]; then echo "no successful request; client said:" >&2; echo "$out" | tail -5 >&2; echo "nan nan 0 nan nan 0 nan"; return; fi
  awk -v a="$after" -v b="$before" -v t="$tck" -v n="$n" -v w0="$t0" -v w1="$t1" -v c0="$cores0" -v c1="$cores1" \
    'BEGIN { split(a, x, " "); split(b, y, " "); u = (x[1] - y[1]) / t * 1e6 / n; s = (x[2] - y[2]) / t * 1e6 / n
             split(c0, p, " "); split(c1, q, " "); all = q[2] - p[2]
             printf "%.2f %.0f %d %.2f %.2f %.1f %.2f\n", u + s, n / (w1 - w0), n, u, s,
               (all > 0 ? 100 * (q[1] - p[1]) / all : 0), (q[3] - p[3]) / t * 1e6 / n }'
}

stats() { sort -g | awk '{ v[NR] = $1 } END { printf "%s (%s–%s)", v[int((NR + 1) / 2)], v[1], v[NR] }'; }
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# Each server's command and name; BASE_CMD adds a third server (an older loadterm, say), so that
# before, after and the peer come from one run.
declare -A CMD=([loadterm]=$LOADTERM_CMD [peer]=$PEER_CMD) NAME=([loadterm]=loadterm [peer]=$PEER_NAME)
WHO="loadterm peer"
if [ -n "${BASE_CMD:-}" ]; then CMD[base]=$BASE_CMD NAME[base]=${BASE_NAME:-base} WHO="base loadterm peer"; fi
for who in $WHO; do echo "${NAME[$who]}: $(fill "${CMD[$who]}")"; done
echo "server on core $SERVER_CPU, client on core $CLIENT_CPU, $ROUNDS rounds, random order per round"
col() { printf '%s\n' $1 | "$2"; } # col "VALUES" stats|median
ratio_of() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
summary=()
for row in $ROWS; do
  client=${CLIENT[$row]:?unknown row $row}
  # SCALE=K: K times the row's requests, a longer run (the client's own -n).
  if [ "${SCALE:-1}" != 1 ]; then
    n0=$(grep -oE -- '-n [0-9]+' <<<"$client" | head -1 | cut -d' ' -f2)
    client=${client/-n $n0 /-n $((n0 * SCALE)) }
  fi
  echo "== $row: $client"
  # Per server: space-separated values, one per round.
  declare -A us=() rps=() user=() sys=() core=() last=() lastr=()
  ratio=() rratio=() bratio=()
  for round in $(seq "$ROUNDS"); do
    for who in $(printf '%s\n' $WHO | shuf); do
      for try in 1 2 3; do
        read -r u r n uu ss st co <<<"$(measure "${CMD[$who]}" "$client")"
        awk -v s="$st" -v m="${STEAL_MAX:-2}" 'BEGIN { exit !(s > m) }' && [ "$try" -lt 3 ] || break
        echo "  round $round ${NAME[$who]}: $u µs/req, steal $st% of the measured cores' time: run again"
      done
      echo "  round $round ${NAME[$who]}: $u µs/req (user $uu, system $ss), $r req/s, $n requests, steal $st%, server core $co µs/req"
      us[$who]+="$u " rps[$who]+="$r " user[$who]+="$uu " sys[$who]+="$ss " core[$who]+="$co "
      last[$who]=$u lastr[$who]=$r
    done
    ratio+=("$(ratio_of "${last[loadterm]}" "${last[peer]}")")
    rratio+=("$(ratio_of "${lastr[loadterm]}" "${lastr[peer]}")")
    if [ -n "${CMD[base]:-}" ]; then bratio+=("$(ratio_of "${last[loadterm]}" "${last[base]}")"); fi
  done
  line=$(printf '%-11s µs/req' "$row")
  for who in $WHO; do line+=" | ${NAME[$who]} $(col "${us[$who]}" stats)"; done
  line+=" | ratio loadterm/${NAME[peer]} $(ratio_of "$(col "${us[loadterm]}" median)" "$(col "${us[peer]}" median)") (rounds: $(printf '%s\n' "${ratio[@]}" | stats))"
  if [ -n "${CMD[base]:-}" ]; then
    line+=" | ratio loadterm/${NAME[base]} $(ratio_of "$(col "${us[loadterm]}" median)" "$(col "${us[base]}" median)") (rounds: $(printf '%s\n' "${bratio[@]}" | stats))"
  fi
  line+=" | req/s"
  for who in $WHO; do line+=" ${NAME[$who]} $(col "${rps[$who]}" stats),"; done
  line+=" loadterm/${NAME[peer]} rounds $(printf '%s\n' "${rratio[@]}" | stats) | user/system medians"
  for who in $WHO; do line+=" ${NAME[$who]} $(col "${user[$who]}" median)/$(col "${sys[$who]}" median),"; done
  line="${line%,} | server core busy µs/req (all its softirq in)"
  for who in $WHO; do line+=" ${NAME[$who]} $(col "${core[$who]}" stats),"; done
  line+=" ratio loadterm/${NAME[peer]} $(ratio_of "$(col "${core[loadterm]}" median)" "$(col "${core[peer]}" median)")"
  echo "${line%,}"
  summary+=("${line%,}")
done
echo
echo "== summary (server CPU µs per request, median (min–max); ratios of medians)"
printf '%s\n' "${summary[@]}"

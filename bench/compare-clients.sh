#!/usr/bin/env bash
# The load generator against its peers — h2load for HTTP/1.1 and HTTP/2, oha (`cargo install oha
# --locked --features http3`) for HTTP/3: the same workloads through both clients against one
# `loadterm serve -t 1` pinned to core $SERVER_CPU, each client single-threaded and pinned to core
# $CLIENT_CPU. Per row and client: requests completed (must be -n exactly, else the script stops
# with exit 1), req/s as the client reports it, and the client's CPU µs per request.
#
# Client CPU is ru_utime + ru_stime from wait4() on the client process (python3 forks and execs
# it): the whole process, all threads, start-up included, at µs resolution. /proc/PID/stat is
# gone once the process has exited, and /usr/bin/time rounds to 10 ms.
#
#   cargo build --release && bench/compare-clients.sh
#   ROUNDS=5 ROWS='h1-1k-m1 h2tls-1k-m10' bench/compare-clients.sh
#
# Env: ROUNDS (3; the clients alternate which goes first, rounds are interleaved across rows),
# ROWS (subset of the row names below, space separated), SERVER_CPU (0), CLIENT_CPU (1),
# CLEAR_PORT (18888), TLS_PORT (18889), LOADTERM (target/release/loadterm).
# Prints one line per run, then per row the median (min–max) of each client and the ratio of the
# medians, loadterm / peer (req/s above 1 and CPU below 1 favour loadterm). oha is multi-threaded
# (tokio) and sends a grease frame per connection; its CPU is its whole process's, as ours.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3} SERVER_CPU=${SERVER_CPU:-0} CLIENT_CPU=${CLIENT_CPU:-1}
CLEAR_PORT=${CLEAR_PORT:-18888} TLS_PORT=${TLS_PORT:-18889}
LOADTERM=${LOADTERM:-target/release/loadterm}
http="http://127.0.0.1:$CLEAR_PORT" https="https://127.0.0.1:$TLS_PORT"

# row -> "requests | common options | peer options | loadterm options | URL"; h3 rows use oha.
declare -A ROW=(
  [h1-1k-m1]="100000|-c 50 -m 1|--h1|--h1|$http/?s=1k"
  [h1-1k-m10]="200000|-c 50 -m 10|--h1|--h1|$http/?s=1k"
  [h1-256k-m10]="8000|-c 50 -m 10|--h1|--h1|$http/?s=256k"
  [h2tls-1k-m10]="100000|-c 50 -m 10|--npn-list=h2|--h2 -k|$https/?s=1k"
  [h2c-1k-m10]="100000|-c 50 -m 10||--h2c|$http/?s=1k"
  [h3-1k-m10]="20000|-c 10|-p 10|-m 10|$https/?s=1k"
  [h3-256k-m10]="2000|-c 10|-p 10|-m 10|$https/?s=256k"
)
ORDER="h1-1k-m1 h1-1k-m10 h1-256k-m10 h2tls-1k-m10 h2c-1k-m10 h3-1k-m10 h3-256k-m10"
ROWS=${ROWS:-$ORDER}
for row in $ROWS; do [ -n "${ROW[$row]:-}" ] || { echo "unknown row $row (rows: $ORDER)" >&2; exit 1; }; done

peer_of() { [[ $1 == h3* ]] && echo oha || echo h2load; }
for row in $ROWS; do command -v "$(peer_of "$row")" >/dev/null || { echo "$(peer_of "$row") is missing" >&2; exit 1; }; done
for tool in taskset ss python3; do command -v "$tool" >/dev/null || { echo "$tool is missing" >&2; exit 1; }; done
[ -x "$LOADTERM" ] || { echo "$LOADTERM not built (cargo build --release)" >&2; exit 1; }
if ss -Hlntu | grep -qE ":($CLEAR_PORT|$TLS_PORT)\b"; then
  echo "port $CLEAR_PORT or $TLS_PORT is already in use (a SO_REUSEPORT server would share it)" >&2; exit 1
fi

setsid taskset -c "$SERVER_CPU" "$LOADTERM" serve -t 1 -L "127.0.0.1:$CLEAR_PORT:$TLS_PORT" >/dev/null 2>&1 &
server=$!
tmp=$(mktemp -d)
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 200); do
  (exec 3<>"/dev/tcp/127.0.0.1/$CLEAR_PORT") 2>/dev/null && (exec 3<>"/dev/tcp/127.0.0.1/$TLS_PORT") 2>/dev/null && break
  sleep 0.05
done

# Runs argv[2:] and writes "cpu_seconds exit_code" of that process to argv[1].
rusage='
import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, ru = os.wait4(pid, 0)
open(sys.argv[1], "w").write(f"{ru.ru_utime + ru.ru_stime:.6f} {os.waitstatus_to_exitcode(status)}\n")
'

# run CLIENT ROW -> "req/s µs/req"; stops the script if the count is not exactly -n.
run() {
  local who=$1 n common h2 lt url cmd out cpu code done ok rps
  IFS='|' read -r n common h2 lt url <<<"${ROW[$2]}"
  if [ "$who" = h2load ]; then
    cmd="h2load -t 1 -n $n $common $h2 $url"
  elif [ "$who" = oha ]; then
    cmd="oha --http-version 3 --insecure --no-tui -n $n $common $h2 $url"
  else
    local proto=""; [ "$(peer_of "$2")" = oha ] && proto="--h3 -k"
    cmd="$LOADTERM load -t 1 -n $n $common $proto $lt $url"
  fi
  kill -0 "$server" 2>/dev/null || { echo "the server died" >&2; exit 1; }
  # shellcheck disable=SC2086 # the options are meant to split
  out=$(taskset -c "$CLIENT_CPU" python3 -c "$rusage" "$tmp/ru" $cmd 2>&1) || true
  read -r cpu code <"$tmp/ru"
  if [ "$who" = oha ]; then
    ok=$(grep -oE '\[200\] [0-9]+ responses' <<<"$out" | grep -oE '[0-9]+ responses' | grep -oE '^[0-9]+' || echo 0)
    done=$ok
  else
    done=$(grep -oE '[0-9]+ done' <<<"$out" | head -1 | grep -oE '^[0-9]+' || echo 0)
    ok=$(grep -oE '[0-9]+ succeeded' <<<"$out" | head -1 | grep -oE '^[0-9]+' || echo 0)
  fi
  if [ "$code" != 0 ] || [ "$done" != "$n" ] || [ "$ok" != "$n" ]; then
    {
      echo "!! $2 $who: $done done, $ok succeeded of $n requests (exit $code)"
      echo "!! $cmd"
      tail -8 <<<"$out" | sed 's/^/!!   /'
    } >&2
    exit 1
  fi
  if [ "$who" = oha ]; then
    rps=$(grep -oE 'Requests/sec:\s+[0-9.]+' <<<"$out" | grep -oE '[0-9.]+$')
  else
    rps=$(grep -oE '[0-9.]+ req/s' <<<"$out" | head -1 | grep -oE '^[0-9.]+')
  fi
  awk -v r="$rps" -v c="$cpu" -v n="$n" 'BEGIN { printf "%.0f %.2f\n", r, c * 1e6 / n }'
}

stats() { sort -g | awk '{ v[NR] = $1 } END { printf "%s (%s–%s)", v[int((NR + 1) / 2)], v[1], v[NR] }'; }
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
list() { tr ' ' '\n' <<<"${1% }"; }

echo "server: $LOADTERM serve -t 1 on core $SERVER_CPU; clients on core $CLIENT_CPU; $ROUNDS rounds"
echo "$(h2load --version 2>/dev/null | head -1); $(oha --version 2>/dev/null); $("$LOADTERM" --version)"
declare -A RPS CPU
for round in $(seq "$ROUNDS"); do
  for row in $ROWS; do
    order="$(peer_of "$row") loadterm"; [ $((round % 2)) -eq 0 ] && order="loadterm $(peer_of "$row")"
    for who in $order; do
      res=$(run "$who" "$row") # a plain assignment, so that set -e sees a failed run
      read -r rps us <<<"$res"
      printf 'round %d %-13s %-8s %9s req/s %8s µs/req\n' "$round" "$row" "$who" "$rps" "$us"
      [ "$who" = loadterm ] || who=peer
      RPS[$row.$who]+="$rps " CPU[$row.$who]+="$us "
    done
  done
done

echo
echo "== median (min–max) of $ROUNDS rounds; ratio = loadterm / peer of the medians"
for row in $ROWS; do
  peer=$(peer_of "$row")
  r_h=$(list "${RPS[$row.peer]}") r_l=$(list "${RPS[$row.loadterm]}")
  c_h=$(list "${CPU[$row.peer]}") c_l=$(list "${CPU[$row.loadterm]}")
  printf '%-13s req/s  ratio %s  %s %s  loadterm %s\n' "$row" \
    "$(ratio "$(median <<<"$r_l")" "$(median <<<"$r_h")")" "$peer" "$(stats <<<"$r_h")" "$(stats <<<"$r_l")"
  printf '%-13s µs/req ratio %s  %s %s  loadterm %s\n' "" \
    "$(ratio "$(median <<<"$c_l")" "$(median <<<"$c_h")")" "$peer" "$(stats <<<"$c_h")" "$(stats <<<"$c_l")"
done

#!/usr/bin/env bash
# Floods and slow clients at scale (issue 16). Each scenario of bench/hostile.py runs against a
# fresh release `loadterm serve -t 1` pinned to CPU 0; the attacker and a legitimate probe
# (`loadterm load --rate 50 -c 1`, 10 s) run on CPU 1, the probe (and every loadterm client here)
# at real-time priority (`chrt -f 10`): the attacker keeps CPU 1 busy, and without it the probe's
# p99 measured its own wait for that core (TLS flood: 3.0-5.2 ms with the server 28% busy, against
# 1.2-1.5 ms with it). It needs little CPU at 50 req/s. The probe runs once at rest, then once
# while the attack is in place (hostile.py --ready); the server's RSS and CPU time are sampled
# from /proc every 0.2 s meanwhile. Afterwards: does a fresh 100-request run succeed, and does
# RSS come back near its baseline (base + max(10%, 4 MiB), within 20 s)?
# Prints one Markdown table row per scenario, then RSS per idle connection ((RSS - base) / N, held
# idle at the probe's end, and at the peak while the connections were opened).
#
#   bench/floods.sh [LOADTERM]          (default target/release/loadterm; never built here)
# Env: HATERM=/path/to/haterm   the idle scenarios against haterm too (never built or fetched)
#      ONLY=REGEX               only the scenarios whose name matches
#      PROBE_S (10), PORT (18900)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:-target/release/loadterm}")
if [ ! -x "$bin" ]; then
  echo "floods.sh: $bin is not there: cargo build --release first" >&2
  exit 2
fi
probe_s=${PROBE_S:-10} port=${PORT:-18900} only=${ONLY:-.}
tport=$((port + 1))
hostile=bench/hostile.py
work=$(mktemp -d)
server=""
trap 'stop_server; rm -rf "$work"' EXIT

stop_server() {
  if [ -n "$server" ]; then
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    server=""
  fi
}

rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }

# utime + stime of a process, in clock ticks (fields 14 and 15 of /proc/PID/stat; the command
# name in field 2 has no spaces here).
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }

# start_server CMD...: the server pinned to CPU 0, ready once its clear port accepts.
start_server() {
  taskset -c 0 "$@" >/dev/null 2>"$work/server.err" &
  server=$!
  for _ in $(seq 200); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  echo "floods.sh: the server did not start: $(cat "$work/server.err")" >&2
  exit 1
}

# client PROTO ARGS...: `loadterm load` of /?s=1k on PROTO's port and protocol, on CPU 1.
client() {
  local proto=$1
  shift
  case $proto in
    h1) set -- --h1 "$@" "http://127.0.0.1:$port/?s=1k" ;;
    tls) set -- --h1 -k "$@" "https://127.0.0.1:$tport/?s=1k" ;;
    h2c) set -- --h2c "$@" "http://127.0.0.1:$port/?s=1k" ;;
    h3) set -- --h3 -k "$@" "https://127.0.0.1:$tport/?s=1k" ;;
  esac
  # Real-time priority: see the header.
  chrt -f 10 taskset -c 1 "$bin" load "$@" >/dev/null 2>&1
}

# probe OUT.json PROTO: the legitimate client, 50 requests/s for PROBE_S seconds.
probe() {
  client "$2" --rate 50 -c 1 -D "${probe_s}s" --timeout 10s -q --json "$1" || true
}

# A fresh 100-request run on the attacked protocol: "ok" when all succeed.
serves() {
  if client "$1" -n 100 -c 1 --timeout 10s -q --json "$work/after.json" && python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))["requests"]
sys.exit(0 if r["succeeded"] == 100 else 1)' "$work/after.json"; then
    echo ok
  else
    echo FAILED
  fi
}

# sample PID OUT: "seconds rss_kib cpu_ticks" every 0.2 s until $work/stop-sampling exists.
sample() {
  local pid=$1 out=$2
  : >"$out"
  while [ ! -e "$work/stop-sampling" ] && [ -e "/proc/$pid" ]; do
    echo "$(date +%s.%N) $(rss_kib "$pid") $(cpu_ticks "$pid")" >>"$out"
    sleep 0.2
  done
}

rows=()

# scenario NAME PROBE_PROTO "SERVER OPTIONS" HOSTILE ARGS... (--port, --duration, --ready added)
# SERVER OPTIONS may start with "haterm": the scenario then runs against $HATERM.
scenario() {
  local name=$1 proto=$2 sopts=$3
  shift 3
  [[ $name =~ $only ]] || return 0
  local p=$port
  case $proto in tls | h3) p=$tport ;; esac
  local -a cmd
  if [[ $sopts == haterm* ]]; then
    cmd=("$HATERM" -L "127.0.0.1:$port:$tport" -G 'nbthread 1')
  else
    # shellcheck disable=SC2206 # options are words
    cmd=("$bin" serve -L "127.0.0.1:$port:$tport" -t 1 $sopts)
  fi
  echo "floods.sh: $name ($(date -u +%H:%M:%S))" >&2
  start_server "${cmd[@]}"
  probe "$work/rest.json" "$proto"
  local base
  base=$(rss_kib "$server")
  rm -f "$work/ready" "$work/stop-sampling"
  sample "$server" "$work/samples" &
  local sampler=$!
  taskset -c 1 python3 "$hostile" "$@" --port "$p" --duration $((probe_s + 3)) \
    --ready "$work/ready" >"$work/attack.json" 2>"$work/attack.err" &
  local attacker=$!
  for _ in $(seq 1200); do
    [ -e "$work/ready" ] || ! kill -0 "$attacker" 2>/dev/null && break
    sleep 0.1
  done
  local t_ready
  t_ready=$(date +%s.%N)
  probe "$work/under.json" "$proto"
  local t_probed
  t_probed=$(date +%s.%N)
  wait "$attacker" || true
  local t_end
  t_end=$(date +%s.%N)
  touch "$work/stop-sampling"
  wait "$sampler" || true
  local alive=yes
  kill -0 "$server" 2>/dev/null || alive=no
  # Back near the baseline?
  local end=0 settled=no
  if [ $alive = yes ]; then
    for _ in $(seq 100); do
      end=$(rss_kib "$server")
      if [ "$end" -le $((base + (base / 10 > 4096 ? base / 10 : 4096))) ]; then settled=yes; break; fi
      sleep 0.2
    done
  fi
  local after=FAILED
  [ $alive = yes ] && after=$(serves "$proto")
  [ $alive = yes ] || after="CRASHED: $(tail -c 300 "$work/server.err" | tr '\n' ' ')"
  rows+=("$(python3 - "$name" "$work" "$base" "$end" "$settled" "$after" "$t_ready" "$t_end" \
    "$(getconf CLK_TCK)" "$probe_s" "$t_probed" <<'PY'
import json, sys
name, work, base, end, settled, after, t0, t1, hz, probe_s, t_probed = sys.argv[1:12]
base, end, t0, t1, hz, t_probed = int(base), int(end), float(t0), float(t1), int(hz), float(t_probed)

def load(f):
    try:
        return json.load(open(f"{work}/{f}"))
    except (OSError, ValueError):
        return None

def lat(r):
    if not r or not r.get("latency_us"):
        return None, None, "no result"
    l = r["latency_us"]
    errs = sum(v for k, v in r["errors"].items() if k != "first") + r["requests"]["failed"]
    return l["p50"] / 1000, l["p99"] / 1000, errs

samples = [tuple(map(float, l.split())) for l in open(f"{work}/samples") if len(l.split()) == 3]
during = [s for s in samples if t0 <= s[0] <= t1] or samples
peak = max((s[1] for s in samples), default=0)
cpu = ((during[-1][2] - during[0][2]) / hz / (during[-1][0] - during[0][0]) * 100
       if len(during) > 1 and during[-1][0] > during[0][0] else float("nan"))
a = load("attack.json") or {"error": open(f"{work}/attack.err").read()[-200:]}
keep = ["opened", "handshakes", "per_s", "failed", "frames_sent", "streams_opened",
        "initials_sent", "instructions_sent", "bytes_sent", "bytes_received", "status", "ended",
        "ended_after_s", "rst_stream_received", "ratio", "within_limit", "error"]
saw = ", ".join(f"{k} {json.dumps(a[k], separators=(',', ':'))}" for k in keep
                if a.get(k) not in (None, {}, 0))
r50, r99, _ = lat(load("rest.json"))
u50, u99, uerr = lat(load("under.json"))
ratio = f"{u99 / r99:.1f}x" if r99 and u99 else "n/a"
met = "yes" if (r99 and u99 and u99 <= 10 * r99 and after == "ok" and settled == "yes") else "NO"
mib = lambda k: f"{k / 1024:.1f}"
fmt = lambda x: "n/a" if x is None else f"{x:.2f}"
print(f"| {name} | {saw} | {mib(base)} / {mib(peak)} / {mib(end)} ({'back' if settled == 'yes' else 'NOT back'}) "
      f"| {cpu:.0f}% | {fmt(r50)} / {fmt(r99)} | {fmt(u50)} / {fmt(u99)} | {ratio} | {uerr} | {after} | {met} |")
if name.startswith("idle"):
    # Held: the last sample while the probe ran, every connection idle for 10 s by then.
    n = a.get("opened") or 0
    held = ([s for s in samples if s[0] <= t_probed] or [(0, 0, 0)])[-1][1]
    per = lambda k: f"{(k - base) / n if n else float('nan'):.2f}"
    print(f"IDLE {name}: {n} connections; RSS {mib(base)} MiB before, {mib(held)} MiB held idle "
          f"({per(held)} KiB per idle connection), {mib(peak)} MiB at the peak while opening "
          f"({per(peak)} KiB)", file=open(f"{work}/idle.txt", "a"))
PY
)")
  stop_server
}

: "${HATERM:=}"
echo "floods.sh: $(date -u +%FT%TZ), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), $bin" >&2

scenario "idle clear 10000" h1 "" idle -n 10000 --parallel 500
# Python opens TLS connections slowly (~30 ms each on a loaded machine): a timeout longer than
# the setup, or the first ones are closed idle before the last one is open.
scenario "idle TLS 10000 (--timeout 600s)" tls "--timeout 600s" idle --tls -n 10000 --parallel 200
if [ -n "$HATERM" ]; then
  scenario "idle clear 10000 (haterm)" h1 haterm idle -n 10000 --parallel 500
  scenario "idle TLS 10000 (haterm)" tls haterm idle --tls -n 10000 --parallel 200
fi
scenario "slowloris 2000 (--timeout 5s)" h1 "--timeout 5s" slowloris -n 2000 --interval 1
scenario "slow-read 1000 x /?s=10m (--timeout 5s)" h1 "--timeout 5s" slow-read -n 1000
scenario "tls-flood 256 parallel" tls "" tls-flood --parallel 256
scenario "h2 rapid-reset 8 conns" h2c "" h2 rapid-reset -c 8 -n 100000000
scenario "h2 continuation 8 conns" h2c "" h2 continuation -c 8 -n 100000000
scenario "h2 ping 8 conns" h2c "" h2 ping -c 8 -n 1000000000
scenario "h2 settings 8 conns" h2c "" h2 settings -c 8 -n 1000000000
scenario "h2 empty-data 8 conns" h2c "" h2 empty-data -c 8 -n 1000000000
scenario "h2 window-update 8 conns" h2c "" h2 window-update -c 8 -n 1000000000
scenario "h2 hpack-bomb 8 conns" h2c "" h2 hpack-bomb -c 8 -n 1000000
scenario "h2 abandon 10 conns x 10000 streams" h2c "" h2 abandon -c 10 -n 10000
scenario "h3 streams 8 conns" h3 "" h3 streams -c 8 -n 100000000
scenario "h3 qpack 8 conns" h3 "" h3 qpack -c 8 -n 100000000
scenario "h3 conns 2000" h3 "" h3 conns -n 2000 --parallel 100
# --timeout 5s: the first 100 Initials get handshakes, held until the timeout (25 s by default,
# longer than the 20 s RSS-back window; 4.3 MiB for the 100).
scenario "h3 initial-flood 64x16 sources (--timeout 5s)" h3 "--timeout 5s" h3 initial-flood -n 100000000
scenario "amplification (1 Initial)" h3 "" amplification

echo "| scenario | what the attack did and saw | server RSS MiB: base / peak / end | server CPU | probe p50 / p99 ms at rest | probe p50 / p99 ms under attack | p99 ratio | probe errors | served afterwards | bound met |"
echo "|---|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
if [ -e "$work/idle.txt" ]; then
  echo
  sed 's/^IDLE /RSS per idle connection, /' "$work/idle.txt"
fi

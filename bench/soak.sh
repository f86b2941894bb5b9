#!/usr/bin/env bash
# Soak (issue 16, docs/RELIABILITY.md): the server under mixed load for DURATION at
# LOAD_PCT% of its measured saturation rate, its memory sampled every second, every request
# accounted for.
#  1. Saturation: one short closed-loop `loadterm load` per protocol (HTTP/1.1 clear, HTTP/2
#     over TLS, HTTP/3), alone, with the soak's mix of requests: its req/s is that protocol's
#     saturation rate S_p (of this machine: server and client share its CPUs).
#  2. Soak: the three protocols at once, open loop, each at LOAD_PCT/3 % of its own S_p (so the
#     shares add up to LOAD_PCT% of the server's capacity), for DURATION (-n = rate x seconds,
#     so every run ends with all its requests answered and the counts can be exact; a
#     protocol that cannot keep its rate therefore runs past DURATION: lower LOAD_PCT). Requests
#     round-robin over sizes, delays (`t=`), a chunked response, size and delay
#     distributions, 404s and 503s (`r=`), and an uncacheable one (`c=0`).
#  3. Report, and exit 1 when one fails: RSS drift after the first minute, judged on each
#     minute's peak (the highest and the last minute's peak vs. the peak of minute 2, i.e.
#     seconds 60-120; VmRSS and RssAnon; fails when RssAnon's reaches 5%: VmRSS also counts
#     the binary's pages as its code first runs). Peaks, not single samples: an allocator that
#     returns free pages (jemalloc's decay) makes RSS swing with the load in flight within a
#     minute, and a creep shows in the peaks as well. The single-sample drift (max and last
#     sample vs. the sample at 1 min) is printed beside it. Also transport errors seen by the
#     clients (fails when > 0; the 404s and 503s asked for are not errors), and nothing lost:
#     the clients' completed requests summed == the growth of the server's
#     loadterm_requests_total over the soak (fails when they differ).
#
#   bench/soak.sh [LOADTERM]      (default target/release/loadterm; needs curl, python3)
# Env: DURATION (30m; s, m or h), LOAD_PCT (80), SAT_TIME (5s), PORT (18900: clear; PORT+1:
#      TLS and QUIC; PORT+2: metrics), OUT (directory for the reports and rss.tsv; default a
#      new temporary one, kept and named at the end).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:-target/release/loadterm}")
duration=${DURATION:-30m} pct=${LOAD_PCT:-80} sat_time=${SAT_TIME:-5s} port=${PORT:-18900}
out=${OUT:-$(mktemp -d /tmp/soak.XXXXXX)}
mkdir -p "$out"
case $duration in
  *h) secs=$((${duration%h} * 3600)) ;;
  *m) secs=$((${duration%m} * 60)) ;;
  *s) secs=${duration%s} ;;
  *) secs=$duration ;;
esac
if ! [[ $secs =~ ^[0-9]+$ ]] || [ "$secs" -lt 180 ]; then
  echo "soak: DURATION '$duration' must be a whole number of s, m or h, of 3 minutes or more (the drift compares whole minutes after the first)" >&2
  exit 2
fi

tls=$((port + 1)) metrics=127.0.0.1:$((port + 2))
"$bin" serve -L "127.0.0.1:$port:$tls" -t 1 --metrics "$metrics" >"$out/server.log" 2>&1 &
server=$!
sampler=
trap 'kill $sampler $server 2>/dev/null || true' EXIT
for _ in $(seq 200); do
  curl -sf "http://$metrics/metrics" -o /dev/null && curl -sf "http://127.0.0.1:$port/?s=0" -o /dev/null \
    && curl -sfk "https://127.0.0.1:$tls/?s=0" -o /dev/null && break
  sleep 0.05
done

# The sum of a metric's samples (over all its labels) in the server's exposition.
metric() { curl -sf "http://$metrics/metrics" | awk -v m="$1" '$1 == m || index($1, m "{") == 1 { s += $2 } END { print s + 0 }'; }

targets=("/?s=1k" "/?s=16k&t=5" "/?s=64k&k=1" "/?s=256k" "/?s=1k:90,64k:10&t=1-10ms"
         "/?s=512&r=404" "/?s=0&r=503" "/?s=4k&c=0")
protos=(h1 h2 h3)
declare -A flags=([h1]="--h1 -c 64" [h2]="--h2 -k -c 4 -m 32" [h3]="--h3 -k -c 4 -m 32")
declare -A base=([h1]="http://127.0.0.1:$port" [h2]="https://127.0.0.1:$tls" [h3]="https://127.0.0.1:$tls")
# Run `loadterm load` for protocol $1 on the soak's URLs, with the options that follow.
load() {
  local p=$1 u=() t; shift
  for t in "${targets[@]}"; do u+=("${base[$p]}$t"); done
  # shellcheck disable=SC2086 # the protocol's options are words
  "$bin" load ${flags[$p]} -t 1 -q "$@" "${u[@]}"
}

echo "soak: $bin, server -t 1 on 127.0.0.1:$port (clear) and :$tls (TLS, QUIC), $(nproc) CPUs; output in $out"
declare -A rate
for p in "${protos[@]}"; do
  load "$p" -D "$sat_time" --warm-up-time 1s --json "$out/saturation-$p.json"
  sat=$(python3 -c 'import json, sys; print(round(json.load(open(sys.argv[1]))["rps"]))' "$out/saturation-$p.json")
  rate[$p]=$((sat * pct / 100 / ${#protos[@]}))
  if [ "${rate[$p]}" -lt 1 ]; then echo "soak: $p saturates at $sat req/s: too low to soak" >&2; exit 1; fi
  echo "saturation $p: $sat req/s closed loop ($sat_time) -> soak rate ${rate[$p]} req/s"
done
# The saturation runs end with requests in flight (-D): let the server finish them before
# its counts are taken as the soak's baseline.
for _ in $(seq 300); do [ "$(metric loadterm_connections_open)" = 0 ] && break; sleep 0.1; done
served0=$(metric loadterm_requests_total) aborted0=$(metric loadterm_requests_aborted_total)

t0=$(date +%s.%N)
(while kill -0 "$server" 2>/dev/null; do
   echo "$(date +%s.%N) $(awk '/^(VmRSS|RssAnon):/ { printf "%s ", $2 }' "/proc/$server/status")"
   sleep 1
 done) >"$out/rss.tsv" &
sampler=$!
clients=()
for p in "${protos[@]}"; do
  load "$p" --rate "${rate[$p]}" -n $((rate[$p] * secs)) --json "$out/soak-$p.json" &
  clients+=($!)
done
echo "soak: ${duration} from $(date -u +%H:%M:%S) UTC, $((rate[h1] + rate[h2] + rate[h3])) req/s in all"
status=0
for c in "${clients[@]}"; do wait "$c" || status=$?; done
kill "$sampler" 2>/dev/null || true
if [ "$status" -ne 0 ]; then echo "soak: a client failed (exit $status)"; exit 1; fi
served=$(($(metric loadterm_requests_total) - served0))
aborted=$(($(metric loadterm_requests_aborted_total) - aborted0))

python3 - "$out" "$t0" "$served" "$aborted" <<'PY'
import json, sys
out, t0, served, aborted = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
# Samples: time, VmRSS, RssAnon (KiB). The drift is judged on RssAnon, the server's own memory:
# VmRSS also counts the binary's file-backed pages, which grow as code first runs (shared,
# reclaimable, and not what a leak would show).
rss = [(float(f[0]), int(f[1]), int(f[2])) for f in (l.split() for l in open(f"{out}/rss.tsv")) if len(f) == 3]
later = [s for s in rss if s[0] >= t0 + 60]
minutes = {}
for s in later:
    minutes.setdefault(int((s[0] - t0) // 60), []).append(s)
# Whole minutes only: the last, partial one would be judged on fewer samples.
peaks = [m for k, m in sorted(minutes.items()) if k * 60 + 60 <= later[-1][0] - t0 + 1]
if len(peaks) < 2:
    sys.exit("soak: under two whole minutes of RSS samples after the first")
def drift(i):
    """(base, top, end, drift of the top, drift of the end) for sample field i, on minute peaks."""
    p = [max(s[i] for s in m) for m in peaks]
    return p[0], max(p[1:]), p[-1], (max(p[1:]) - p[0]) / p[0] * 100, (p[-1] - p[0]) / p[0] * 100
def sample_drift(i):
    at1, top = later[0][i], max(s[i] for s in later)
    return at1, top, (top - at1) / at1 * 100
drift_max, drift_end = drift(2)[3:]
runs = {p: json.load(open(f"{out}/soak-{p}.json")) for p in ("h1", "h2", "h3")}
done = sum(r["requests"]["completed"] for r in runs.values())
kinds = ("connect", "tls", "timeout", "reset", "protocol")
errors = sum(r["errors"][k] for r in runs.values() for k in kinds)
statuses = {}
for r in runs.values():
    for s, c in r["status"].items():
        statuses[s] = statuses.get(s, 0) + c
for name, i in (("VmRSS", 1), ("RssAnon", 2)):
    a, t, e, dm, de = drift(i)
    s1, st, sd = sample_drift(i)
    print(f"{name} (KiB, {len(rss)} samples), minute peaks: {a} in minute 2; after it highest {t} "
          f"({dm:+.2f}%), last minute {e} ({de:+.2f}%); single samples: {s1} at 1 min, "
          f"max {st} ({sd:+.2f}%)")
for p, r in runs.items():
    lat, ol = r["latency_us"], r["open_loop"]
    print(f"client {p}: {r['requests']['completed']} completed at {r['rps']:.0f} req/s, "
          f"latency p50 {lat['p50']} us p99 {lat['p99']} us max {lat['max']} us, "
          f"late sends {ol['late']}, missed {ol['missed']}, errors "
          + ", ".join(f"{k} {r['errors'][k]}" for k in kinds))
print(f"statuses: {dict(sorted(statuses.items()))}")
print(f"nothing lost: clients completed {done}, server served {served} (aborted {aborted})")
failed = []
if max(drift_max, drift_end) >= 5:
    failed.append(f"RssAnon drift {max(drift_max, drift_end):.2f}% >= 5%")
if errors:
    failed.append(f"{errors} transport errors")
if done != served:
    failed.append(f"completed {done} != served {served}")
print("soak: " + ("FAILED: " + "; ".join(failed) if failed else "passed"))
sys.exit(1 if failed else 0)
PY

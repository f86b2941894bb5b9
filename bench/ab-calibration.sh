#!/usr/bin/env bash
# The figures of issue 15 for the A/B harness, with the exact commands (each one is echoed):
#   1. the false-positive rate over AA_RUNS A/A comparisons (H1 1k);
#   2. the smallest change in CPU per request detected with 80% power for each budget in BUDGETS
#      (seconds of A/B rounds), on H1 1k and H2 TLS 1k (`ab --calibrate`, which also injects a
#      known +5% with `serve --burn 5` to check the measurement);
#   3. the A/A noise floor in the closed-loop and in the fixed-rate regime (0.5 × saturation);
#   4. the nginx proxy example's table (docs/AB.md), H1 and H2.
# Run it on a quiet machine with a release build. Defaults are the issue's scale (about 2.5 h);
# a functional check at tiny scale:
#   AA_RUNS=2 ROUNDS=2 DURATION=1s WARMUP=1s BUDGETS=8 LOAD_ARGS="-c 4 -m 2" bench/ab-calibration.sh
# LOAD_ARGS is added to every `loadterm ab` (client options; default: ab's -c 50 -m 10).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/loadterm}
AA_RUNS=${AA_RUNS:-20}
ROUNDS=${ROUNDS:-12}
DURATION=${DURATION:-5s}
WARMUP=${WARMUP:-2s}
BUDGETS=${BUDGETS:-"180 600"}
SERVER_CPUS=${SERVER_CPUS:-0}
CLIENT_CPUS=${CLIENT_CPUS:-1}
OUT=${OUT:-bench/ab-calibration-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
[ -x "$BIN" ] || { echo "no $BIN: cargo build --release" >&2; exit 1; }

SERVE="$BIN serve -t 1 -L {host}:{clear_port}:{tls_port} --no-quic"
read -r -a LOAD <<< "${LOAD_ARGS:-}"
COMMON=(--duration "$DURATION" --warmup "$WARMUP" --server-cpus "$SERVER_CPUS" --client-cpus "$CLIENT_CPUS" --url '/?s=1k' "${LOAD[@]}")
run() { echo "+ $*" | tee -a "$OUT/commands.txt" >&2; "$@"; }
# A metric of a JSON report: python3 reads it (no jq on a fresh Debian).
field() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }
secs() { python3 -c "import sys; v=sys.argv[1]; print(float(v[:-2])/1000 if v.endswith('ms') else float(v[:-1])*60 if v.endswith('m') else float(v.rstrip('s')))" "$1"; }

{
echo "# loadterm ab calibration ($(date -u +%FT%TZ), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg))"
echo
echo "AA_RUNS=$AA_RUNS ROUNDS=$ROUNDS DURATION=$DURATION WARMUP=$WARMUP BUDGETS='$BUDGETS' LOAD_ARGS='${LOAD_ARGS:-}' BIN=$BIN; commands in commands.txt"
} > "$OUT/summary.md"

# 1. False positives: A against itself, the ordinary verdict (no --aa, so no noise floor helps).
fp_cpu=0; fp_rps=0
for i in $(seq 1 "$AA_RUNS"); do
  run "$BIN" ab --a "$SERVE" "${COMMON[@]}" --rounds "$ROUNDS" --seed "$i" --json "$OUT/aa-$i.json" > "$OUT/aa-$i.txt"
  s=$(field "$OUT/aa-$i.json" "sum(1 for c in r['cells'][0]['comparisons'] if c['metric']=='cpu_us_per_req' and c['significant'])")
  fp_cpu=$((fp_cpu + s))
  s=$(field "$OUT/aa-$i.json" "sum(1 for c in r['cells'][0]['comparisons'] if c['metric']=='rps' and c['significant'])")
  fp_rps=$((fp_rps + s))
done
{
echo
echo "## 1. False positives over $AA_RUNS A/A comparisons (H1 1k, $ROUNDS rounds of $DURATION)"
echo
echo "- CPU per request: $fp_cpu significant of $AA_RUNS (the test's level is at most 5%; with few rounds the sign test is stricter)"
echo "- req/s: $fp_rps significant of $AA_RUNS"
} >> "$OUT/summary.md"

# 2. Detectable change per budget: the budget buys R rounds of an A/B comparison (2 runs each);
# --calibrate spends as much again on A/A rounds to measure the spread, plus one +5% variant.
run_s=$(python3 -c "print($(secs "$DURATION") + $(secs "$WARMUP") + 1)")
{
echo
echo "## 2. Smallest change in CPU per request detected with 80% power"
echo
echo "| protocol | budget (s of A/B rounds) | rounds | detectable | injected +5% measured |"
echo "|---|---|---|---|---|"
} >> "$OUT/summary.md"
for proto in h1 h2; do
  for budget in $BUDGETS; do
    rounds=$(python3 -c "print(max(2, int($budget / (2 * $run_s))))")
    j="$OUT/calibrate-$proto-$budget.json"
    run "$BIN" ab --a "$SERVE" "${COMMON[@]}" --proto "$proto" --rounds "$rounds" --calibrate --burn-levels 5 --json "$j" > "${j%.json}.txt"
    det=$(field "$j" "next((n.split('about ')[-1].split(' ')[0] if 'smallest' in n else 'none (under 6 rounds)' for n in r['cells'][0]['notes'] if 'smallest change' in n or 'no change is detectable' in n), 'n/a')")
    inj=$(field "$j" "next((n for n in r['cells'][0]['notes'] if 'injected' in n), 'n/a').split('measured ')[-1]")
    echo "| $proto | $budget | $rounds | $det | $inj |" >> "$OUT/summary.md"
  done
done

# 3. A/A noise floor: closed loop vs a fixed rate at half the baseline's saturation.
{
echo
echo "## 3. A/A noise floor (±%, half-width of the A/A ratio's 95% CI), H1 1k, $ROUNDS rounds"
echo
echo "| regime | CPU per request | req/s | p99 |"
echo "|---|---|---|---|"
} >> "$OUT/summary.md"
for regime in closed fixed; do
  extra=(); [ "$regime" = fixed ] && extra=(--rate-fraction 0.5)
  j="$OUT/noise-$regime.json"
  run "$BIN" ab --a "$SERVE" "${COMMON[@]}" --rounds "$ROUNDS" --aa "${extra[@]}" --json "$j" > "${j%.json}.txt"
  n() { field "$j" "next(('%.1f' % c['noise_pct']) for c in r['cells'][0]['comparisons'] if c['metric']=='$1')"; }
  echo "| $(field "$j" "r['cells'][0]['regime']") | $(n cpu_us_per_req) | $(n rps) | $(n p99_ms) |" >> "$OUT/summary.md"
done

# 4. The nginx proxy example of docs/AB.md (proxy_buffering on vs off), H1 and H2.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
  -keyout "$OUT/key.pem" -out "$OUT/cert.pem" 2>/dev/null
sed -e "s|@CERT@|$OUT/cert.pem|" -e "s|@KEY@|$OUT/key.pem|" bench/ab-nginx.conf.in > "$OUT/nginx.conf.in"
NGINX='nginx -p {tmp} -e {tmp}/error.log -c {config}'
run "$BIN" ab --backend "$BIN serve -t 1 -L {host}:{backend_port}:{backend_tls_port} --no-quic" \
  --backend-cpus "$CLIENT_CPUS" --config-template "$OUT/nginx.conf.in" \
  --variant "on=$NGINX" --variant "off=$NGINX" --proto h1,h2 --url '/?s=16k' \
  --rounds "$ROUNDS" --duration "$DURATION" --warmup "$WARMUP" \
  --server-cpus "$SERVER_CPUS" --client-cpus "$CLIENT_CPUS" "${LOAD[@]}" \
  --markdown "$OUT/nginx.md" --html "$OUT/nginx.html" --svg "$OUT/nginx.svg" > "$OUT/nginx.txt"
{ echo; echo "## 4. nginx proxy example"; echo; sed -n '2,$p' "$OUT/nginx.md"; } >> "$OUT/summary.md"
echo "done: $OUT/summary.md" >&2

#!/usr/bin/env bash
# The figures of the A/B harness (docs/AB.md, "Figures"), with the exact commands (each one is
# echoed into commands.txt):
#   1. false positives over AA_RUNS A/A comparisons of the default (H1 1k, `--max-time MAX_TIME`);
#   2. the calibration table (`--calibrate`: +1%, +3%, +10% injected with `serve --burn`), H1 1k
#      and H2 TLS 1k, in the default regime and in the closed loop;
#   3. the time to resolve an injected +3% to ±2 points, H1 1k and H2 TLS 1k, RESOLVE_RUNS times;
#   4. a proxy case: nginx in front of loadterm, one `add_header` more in B;
#   5. the designs against each other: the same +3% measured together, alternately, and with a
#      fresh process per run.
# Run it on a quiet machine with a release build. The defaults are the issue's scale (hours);
# SECTIONS picks some (aa calibrate resolve designs nginx_case); a functional check at tiny scale:
#   AA_RUNS=1 RESOLVE_RUNS=1 MAX_TIME=40s bench/ab-calibration.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/loadterm}
AA_RUNS=${AA_RUNS:-20}
RESOLVE_RUNS=${RESOLVE_RUNS:-5}
MAX_TIME=${MAX_TIME:-10m}
SERVER_CPUS=${SERVER_CPUS:-0}
CLIENT_CPUS=${CLIENT_CPUS:-1}
OUT=${OUT:-bench/ab-calibration-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
[ -x "$BIN" ] || { echo "no $BIN: cargo build --release" >&2; exit 1; }

SERVE="$BIN serve -t 1 -L {host}:{clear_port}:{tls_port} --no-quic"
COMMON=(--server-cpus "$SERVER_CPUS" --client-cpus "$CLIENT_CPUS" --url '/?s=1k' --max-time "$MAX_TIME")
run() { echo "+ $*" | tee -a "$OUT/commands.txt" >&2; "$@"; }
# A value of a JSON report: python3 reads it (no jq on a fresh Debian).
field() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }
cpu() { echo "next(c for c in r['cells'][0]['comparisons'] if c['metric']=='cpu_us_per_req' and c['variant']=='$1')"; }

{
echo "# loadterm ab calibration ($(date -u +%FT%TZ), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg))"
echo
echo "AA_RUNS=$AA_RUNS RESOLVE_RUNS=$RESOLVE_RUNS MAX_TIME=$MAX_TIME BIN=$BIN; commands in commands.txt"
} > "$OUT/summary.md"

# 1. False positives: A against a second A, the default run and verdict.
aa() {
fp=0
{
echo
echo "## 1. A/A over $AA_RUNS runs of the default (H1 1k, --max-time $MAX_TIME)"
echo
echo "| run | change | 95% CI | significant | rounds | seconds |"
echo "|---|---|---|---|---|---|"
} >> "$OUT/summary.md"
for i in $(seq 1 "$AA_RUNS"); do
  t0=$(date +%s)
  run "$BIN" ab --a "$SERVE" --b "$SERVE" "${COMMON[@]}" --seed "$i" --json "$OUT/aa-$i.json" > "$OUT/aa-$i.txt" 2> "$OUT/aa-$i.err"
  c=$(cpu B)
  s=$(field "$OUT/aa-$i.json" "int($c['significant'])")
  fp=$((fp + s))
  echo "| $i | $(field "$OUT/aa-$i.json" "'%+.2f%%' % $c['change_pct']") | $(field "$OUT/aa-$i.json" "'%+.2f%% to %+.2f%%' % tuple($c['ci_pct'])") | $s | $(field "$OUT/aa-$i.json" "$c['rounds']") | $(( $(date +%s) - t0 )) |" >> "$OUT/summary.md"
done
echo -e "\nSignificant: $fp of $AA_RUNS." >> "$OUT/summary.md"
}

# 2. Calibration, both regimes.
calibrate() {
{
echo
echo "## 2. Calibration (--calibrate, 1k): injected, measured (95% CI), detected, CI holds the injected value"
echo
} >> "$OUT/summary.md"
for proto in h1 h2; do
  for regime in default closed; do
    extra=(); [ "$regime" = closed ] && extra=(--closed-loop)
    j="$OUT/calibrate-$proto-$regime.json"
    run "$BIN" ab --a "$SERVE" --calibrate "${COMMON[@]}" --proto "$proto" "${extra[@]}" --json "$j" > "${j%.json}.txt" 2> "${j%.json}.err"
    { echo "### $proto, $(field "$j" "r['cells'][0]['regime']"), $(field "$j" "r['cells'][0]['rounds']") rounds"; echo;
      field "$j" "'\n'.join('- ' + n for n in r['cells'][0]['notes'])"; echo; } >> "$OUT/summary.md"
  done
done
}

# 3. Time to resolve an injected +3%.
resolve() {
{
echo
echo "## 3. Resolving an injected +3% (serve --burn 3), the default run"
echo
echo "| protocol | run | change | 95% CI | significant | rounds | seconds |"
echo "|---|---|---|---|---|---|---|"
} >> "$OUT/summary.md"
for proto in h1 h2; do
  for i in $(seq 1 "$RESOLVE_RUNS"); do
    j="$OUT/burn3-$proto-$i.json"
    t0=$(date +%s)
    run "$BIN" ab --a "$SERVE" --b "$SERVE --burn 3" "${COMMON[@]}" --proto "$proto" --seed "$i" --json "$j" > "${j%.json}.txt" 2> "${j%.json}.err"
    c=$(cpu B)
    echo "| $proto | $i | $(field "$j" "'%+.2f%%' % $c['change_pct']") | $(field "$j" "'%+.2f%% to %+.2f%%' % tuple($c['ci_pct'])") | $(field "$j" "$c['significant']") | $(field "$j" "$c['rounds']") | $(( $(date +%s) - t0 )) |" >> "$OUT/summary.md"
  done
done
}

# 5. Which design resolves a change sooner: the same +3% under the same budget, variants measured
# together (the default), one after another in windows (--alternate), and a fresh server process
# per run at half the closed-loop throughput (--fresh-process --rate-fraction 0.5, round 2's
# precise regime). The spread is the per-round log ratio's standard deviation.
designs() {
{
echo
echo "## 5. Designs: +3% injected (H1 1k), --max-time $MAX_TIME each"
echo
echo "| design | change | 95% CI | rounds | seconds | spread per round |"
echo "|---|---|---|---|---|---|"
} >> "$OUT/summary.md"
for design in together alternate fresh; do
  case $design in
    together) extra=() ;;
    alternate) extra=(--alternate) ;;
    fresh) extra=(--fresh-process --rate-fraction 0.5 --duration 2s --warmup 1s) ;;
  esac
  j="$OUT/design-$design.json"
  t0=$(date +%s)
  run "$BIN" ab --a "$SERVE" --b "$SERVE --burn 3" "${COMMON[@]}" "${extra[@]}" --json "$j" > "${j%.json}.txt" 2> "${j%.json}.err"
  c=$(cpu B)
  spread="import math,statistics as st; rs={}; [rs.setdefault(x['round'],{}).__setitem__(x['variant'],x['cpu_us_per_req']) for x in r['cells'][0]['runs']]; print('%.1f%%' % (100*st.stdev([math.log(v['B']/v['A']) for v in rs.values() if len(v)==2])))"
  echo "| $design | $(field "$j" "'%+.2f%%' % $c['change_pct']") | $(field "$j" "'%+.2f%% to %+.2f%%' % tuple($c['ci_pct'])") | $(field "$j" "$c['rounds']") | $(( $(date +%s) - t0 )) | $(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); exec(sys.argv[2])" "$j" "$spread") |" >> "$OUT/summary.md"
done
}

# 4. A proxy case: nginx from Debian in front of loadterm, B with one add_header more.
nginx_case() {
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
  -keyout "$OUT/key.pem" -out "$OUT/cert.pem" 2>/dev/null
sed -e "s|@CERT@|$OUT/cert.pem|" -e "s|@KEY@|$OUT/key.pem|" -e "s|proxy_buffering {variant};|proxy_buffering on;|" \
  bench/ab-nginx.conf.in > "$OUT/nginx-a.conf.in"
sed -e 's|proxy_buffering on;|proxy_buffering on;\n            add_header x-extra "one more header";|' "$OUT/nginx-a.conf.in" > "$OUT/nginx-b.conf.in"
NGINX='nginx -p {tmp} -e {tmp}/error.log -c {config}'
for proto in h1 h2; do
  t0=$(date +%s)
  run "$BIN" ab --backend "$BIN serve -t 1 -L {host}:{backend_port}:{backend_tls_port} --no-quic" \
    --backend-cpus "$CLIENT_CPUS" --config-template "A=$OUT/nginx-a.conf.in" --config-template "B=$OUT/nginx-b.conf.in" \
    --variant "A=$NGINX" --variant "B=$NGINX" "${COMMON[@]}" --proto "$proto" \
    --markdown "$OUT/nginx-$proto.md" --json "$OUT/nginx-$proto.json" > "$OUT/nginx-$proto.txt" 2> "$OUT/nginx-$proto.err"
  { echo; echo "## 4. nginx + one add_header, $proto ($(( $(date +%s) - t0 )) s)"; echo; sed -n '2,$p' "$OUT/nginx-$proto.md"; } >> "$OUT/summary.md"
done
}

for section in ${SECTIONS:-aa calibrate resolve designs nginx_case}; do "$section"; done
echo "done: $OUT/summary.md" >&2

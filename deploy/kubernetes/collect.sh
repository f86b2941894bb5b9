#!/usr/bin/env bash
# Collects a sharded run from its pods' logs and merges it, for run.sh and deploy/simulate.sh
# alike: OUTDIR/pod-I.log (what `kubectl logs` shows of pod I) holds the report and interval log
# between marker lines (see job.yaml); they are cut out into OUTDIR/shard-I.json and
# OUTDIR/shard-I.hlog, then merged into OUTDIR/merged.json and OUTDIR/merged.hlog, and the
# merged summary is printed. LOADTERM names the binary (default: loadterm on PATH).
set -euo pipefail
out=${1:?usage: collect.sh OUTDIR}
loadterm=${LOADTERM:-loadterm}

shopt -s nullglob
logs=("$out"/pod-*.log)
[ ${#logs[@]} -gt 0 ] || { echo "collect.sh: no pod logs in $out" >&2; exit 1; }
missing=()
inputs=()
for log in "${logs[@]}"; do
  i=${log##*/pod-}; i=${i%.log}
  awk -v json="$out/shard-$i.json" -v hlog="$out/shard-$i.hlog" '
    $0 == "==> loadterm report <==" { to = json; printf "" > to; next }
    $0 == "==> loadterm hdr-log <==" { to = hlog; printf "" > to; next }
    $0 == "==> loadterm end <==" { to = ""; next }
    to != "" { print > to }
  ' "$log"
  if [ -s "$out/shard-$i.json" ]; then
    inputs+=("$out/shard-$i.json")
    [ -s "$out/shard-$i.hlog" ] && inputs+=("$out/shard-$i.hlog")
  else
    missing+=("$i")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "collect.sh: no report from shard(s) ${missing[*]} (see $out/pod-I.log); not merging" >&2
  exit 1
fi
"$loadterm" merge "${inputs[@]}" --json "$out/merged.json" --hdr-log "$out/merged.hlog"

#!/usr/bin/env bash
# The Kubernetes run of deploy/kubernetes/run.sh, simulated on this machine: the same rendered
# manifest, each pod's command line and environment (from the manifest) run as a local process,
# collected and merged by the same collect.sh. What it cannot show: scheduling, image pulls,
# the network between pods and target, and clocks of different machines.
#
#   deploy/simulate.sh [-n SHARDS] [-l LEAD_S] [-o OUTDIR] -- LOAD_ARGS...
#
# loadterm is taken from PATH (LOADTERM_DIR, if set, is put first).
set -euo pipefail
here=$(cd "$(dirname "$0")/kubernetes" && pwd)
shards=4 lead=3 out=
while getopts n:l:o: opt; do
  case $opt in
    n) shards=$OPTARG ;;
    l) lead=$OPTARG ;;
    o) out=$OPTARG ;;
    *) sed -n '2,9p' "$0" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || { echo "simulate.sh: the load options and URL are missing (after --)" >&2; exit 2; }
[ -n "${LOADTERM_DIR:-}" ] && export PATH="$LOADTERM_DIR:$PATH"
name=loadterm-sim-$(date +%s)
out=${out:-results/$name}
mkdir -p "$out"
start_at=$(( $(date +%s) + lead ))
python3 "$here/job.py" render "$here/job.yaml" --name "$name" --shards "$shards" \
  --image loadterm:local --start-at "$start_at" --args "$*" > "$out/job.yaml"
python3 "$here/job.py" simulate "$out/job.yaml" "$out"
"$here/collect.sh" "$out"

#!/usr/bin/env bash
# A sharded loadterm run on a Kubernetes cluster: renders job.yaml (job.py), applies it,
# waits for every shard, collects the pods' logs and merges them (collect.sh).
#
#   deploy/kubernetes/run.sh [-n SHARDS] [-i IMAGE] [-l LEAD_S] [-o OUTDIR] -- LOAD_ARGS...
#
# LOAD_ARGS are the options and URL of the whole run (-c, -n, --rate are totals; each shard
# takes its share). Every shard starts measuring LEAD_S seconds (default 60) from now, after
# its warm-up: leave time for the pods to be scheduled and the image pulled. Needs kubectl
# (configured for the cluster), python3 with PyYAML, and loadterm on PATH (or LOADTERM) for the
# merge. See docs/DISTRIBUTED.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
shards=4 image=loadterm:latest lead=60 out=
while getopts n:i:l:o: opt; do
  case $opt in
    n) shards=$OPTARG ;;
    i) image=$OPTARG ;;
    l) lead=$OPTARG ;;
    o) out=$OPTARG ;;
    *) sed -n '2,12p' "$0" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || { echo "run.sh: the load options and URL are missing (after --)" >&2; exit 2; }
name=loadterm-$(date +%s)
out=${out:-results/$name}
mkdir -p "$out"
start_at=$(( $(date +%s) + lead ))
python3 "$here/job.py" render "$here/job.yaml" --name "$name" --shards "$shards" \
  --image "$image" --start-at "$start_at" --args "$*" > "$out/job.yaml"
kubectl apply -f "$out/job.yaml"
echo "run.sh: job $name, $shards shards, measuring from $(date -d "@$start_at")" >&2

# Done when every index has succeeded or one has failed (backoffLimit 0: no retries).
while :; do
  read -r ok failed < <(kubectl get job "$name" -o jsonpath='{.status.succeeded} {.status.failed}' | awk '{print ($1 == "" ? 0 : $1), ($2 == "" ? 0 : $2)}')
  [ "$ok" -ge "$shards" ] && break
  [ "$failed" -gt 0 ] && { echo "run.sh: $failed shard(s) failed" >&2; break; }
  sleep 5
done

kubectl get pods -l "job-name=$name" \
  -o jsonpath='{range .items[*]}{.metadata.name} {.metadata.annotations.batch\.kubernetes\.io/job-completion-index}{"\n"}{end}' |
  while read -r pod index; do
    kubectl logs "$pod" > "$out/pod-$index.log"
  done
"$here/collect.sh" "$out"
echo "run.sh: results in $out (merged.json, merged.hlog); kubectl delete job $name to clean up" >&2

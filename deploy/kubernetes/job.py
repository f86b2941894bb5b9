#!/usr/bin/env python3
"""The Indexed Job manifest (job.yaml), rendered for one run, and its pods simulated locally.

  job.py render job.yaml --name NAME --shards N --image IMAGE --start-at UNIX_S [--args "..."]
      prints the manifest with those values (completions, parallelism and SHARDS kept equal).
  job.py simulate RENDERED.yaml OUTDIR
      runs each pod's container command line, with the pod's environment, as a local process:
      JOB_COMPLETION_INDEX set as Kubernetes sets it, the results emptyDir mapped to
      OUTDIR/pod-I/, and the pod's log (stdout and stderr, as `kubectl logs` shows them) in
      OUTDIR/pod-I.log. Exits non-zero if any pod's command failed.

run.sh and deploy/simulate.sh both render with this script and collect with collect.sh, so
that the simulation runs exactly the command lines the cluster would.
"""

import argparse
import os
import subprocess
import sys

import yaml


def container(job):
    spec = job["spec"]
    if spec.get("completionMode") != "Indexed":
        sys.exit("job.py: the Job must have completionMode: Indexed")
    containers = spec["template"]["spec"]["containers"]
    if len(containers) != 1:
        sys.exit("job.py: the pod must have exactly one container")
    return containers[0]


def env_entry(c, name):
    for e in c.get("env", []):
        if e["name"] == name:
            return e
    sys.exit(f"job.py: the container has no {name} variable")


def results_dir(job, c):
    """RESULTS must be where the results emptyDir is mounted."""
    path = env_entry(c, "RESULTS")["value"]
    volumes = {v["name"]: v for v in job["spec"]["template"]["spec"].get("volumes", [])}
    for m in c.get("volumeMounts", []):
        if m["mountPath"] == path and "emptyDir" in volumes.get(m["name"], {}):
            return path
    sys.exit(f"job.py: RESULTS={path} is not the mount path of an emptyDir volume")


def render(a):
    with open(a.manifest) as f:
        job = yaml.safe_load(f)
    c = container(job)
    results_dir(job, c)
    job["metadata"]["name"] = a.name
    job["spec"]["completions"] = a.shards
    job["spec"]["parallelism"] = a.shards
    c["image"] = a.image
    env_entry(c, "SHARDS")["value"] = str(a.shards)
    env_entry(c, "START_AT")["value"] = str(a.start_at)
    if a.args is not None:
        env_entry(c, "LOAD_ARGS")["value"] = a.args
    yaml.safe_dump(job, sys.stdout, sort_keys=False)


def simulate(a):
    with open(a.rendered) as f:
        job = yaml.safe_load(f)
    spec = job["spec"]
    c = container(job)
    results_dir(job, c)
    if not (spec["completions"] == spec["parallelism"] == int(env_entry(c, "SHARDS")["value"])):
        sys.exit("job.py: completions, parallelism and SHARDS differ")
    argv = c.get("command", []) + c.get("args", [])
    procs = []
    for i in range(spec["completions"]):
        results = os.path.join(a.outdir, f"pod-{i}")
        os.makedirs(results, exist_ok=True)
        # A container starts with its image's PATH and the pod's variables, nothing of ours.
        env = {"PATH": os.environ["PATH"], "HOME": results}
        for e in c.get("env", []):
            env[e["name"]] = e["value"]
        # The one difference from a pod: the emptyDir mounted at RESULTS is a local directory.
        env["RESULTS"] = results
        env["JOB_COMPLETION_INDEX"] = str(i)
        log = open(os.path.join(a.outdir, f"pod-{i}.log"), "wb")
        procs.append((i, subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL), log))
    failed = []
    for i, p, log in procs:
        if p.wait() != 0:
            failed.append(i)
        log.close()
    if failed:
        sys.exit(f"job.py: pods {failed} failed (see their pod-I.log)")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("render")
    r.add_argument("manifest")
    r.add_argument("--name", required=True)
    r.add_argument("--shards", type=int, required=True)
    r.add_argument("--image", required=True)
    r.add_argument("--start-at", required=True)
    r.add_argument("--args")
    s = sub.add_parser("simulate")
    s.add_argument("rendered")
    s.add_argument("outdir")
    a = p.parse_args()
    if a.cmd == "render":
        if a.shards < 1:
            sys.exit("job.py: --shards must be at least 1")
        render(a)
    else:
        simulate(a)


if __name__ == "__main__":
    main()

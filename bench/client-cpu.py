#!/usr/bin/env python3
"""The load client's CPU, two loadterm builds alternated against one server.

  bench/client-cpu.py A B SERVER ROUNDS      (env ONLY=SUBSTRING: only the cells whose name has it)

SERVER (`serve -t 1`) runs on core 0; each cell runs `A load` and `B load` in random order in every
round, on core 1, and prints the client's CPU (user + system, from wait4) per run as median
(min-max) for each build and of the per-round ratio B/A. Every run must answer all its requests.
"""
import json
import os
import random
import statistics
import subprocess
import sys
import time

a, b, server, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
only = os.environ.get("ONLY")
clear, tls = "http://127.0.0.1:18950", "https://127.0.0.1:18951"
cells = {
    "h1 1k -m 10": (["--h1", "-n", "300000", "-c", "10", "-m", "10"], f"{clear}/?s=1k"),
    "h2c 1k -m 10": (["--h2c", "-n", "300000", "-c", "10", "-m", "10"], f"{clear}/?s=1k"),
    "h2 TLS 1k -m 10": (["--h2", "-k", "-n", "300000", "-c", "10", "-m", "10"], f"{tls}/?s=1k"),
    "h3 1k -m 10": (["--h3", "-k", "-n", "100000", "-c", "10", "-m", "10"], f"{tls}/?s=1k"),
    "h3 256k -m 32": (["--h3", "-k", "-n", "5000", "-c", "4", "-m", "32"], f"{tls}/?s=256k"),
}


def run(binary, args, url):
    p = subprocess.Popen(["taskset", "-c", "1", binary, "load", "-t", "1", "-q", "--json", "-"]
                         + args + [url], stdout=subprocess.PIPE)
    out = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    report = json.loads(out)
    wanted = int(args[args.index("-n") + 1])
    if status != 0 or report["requests"]["succeeded"] != wanted:
        sys.exit(f"{binary} load {' '.join(args)}: exit {status}, {report['requests']}")
    return usage.ru_utime + usage.ru_stime


def fmt(v):
    return f"{statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f})"


srv = subprocess.Popen(["taskset", "-c", "0", server, "serve", "-t", "1", "-L",
                        "127.0.0.1:18950:18951"], stdout=subprocess.DEVNULL)
time.sleep(1)
try:
    for name, (args, url) in cells.items():
        if only and only not in name:
            continue
        ta, tb = [], []
        for _ in range(rounds):
            order = [(a, ta), (b, tb)]
            random.shuffle(order)
            for binary, times in order:
                times.append(run(binary, args, url))
        ratios = [y / x for x, y in zip(ta, tb)]
        print(f"{name}: A {fmt(ta)} s, B {fmt(tb)} s, ratio B/A {fmt(ratios)}", flush=True)
finally:
    srv.terminate()
    srv.wait()

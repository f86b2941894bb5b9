#!/usr/bin/env python3
"""The pilot's clients at a ladder of fixed rates, measured as `loadterm ab` measures them.

  bench/ab-pilot-clients.py LOADTERM PROTO URL RATE[,RATE...] [CLIENTS]     e.g.
  bench/ab-pilot-clients.py target/release/loadterm h1 'http://127.0.0.1:24001/?s=1k' 27000,13000

A server must already listen at URL (e.g. `taskset -c 0 loadterm serve -t 1 -L
127.0.0.1:24001:24002 --no-quic`). For each rate, CLIENTS (2) `loadterm load` clients (ab's two
variants measured together: -c 50 -m 10 -t 1, 250 ms of warm-up, a 1 s window from an agreed
`--start-at`) run on CPU 1 against it. Printed per rate: the clients' own CPU time over the
window (utime + stime of /proc/PID/stat read at the window's edges, as ab reads it) as a share
of CPU 1, summed over the clients; their share of sends more than 1 ms late and of sends never made;
and the clients' CPU per request.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

binary, proto, url, rates = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
CLIENTS = int(sys.argv[5]) if len(sys.argv) > 5 else 2
HZ = os.sysconf("SC_CLK_TCK")


def cpu_s(pid):
    stat = open(f"/proc/{pid}/stat").read()
    fields = stat[stat.rfind(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / HZ


os.sched_setaffinity(0, {1})
tmp = tempfile.mkdtemp(prefix="ab-pilot-clients-")
print(f"{'req/s each':>10} {'clients busy':>12} {'late %':>7} {'missed %':>8} {'µs/req':>7}")
for rate in (float(r) for r in rates.split(",")):
    at = time.time() + 0.4
    jsons = [os.path.join(tmp, f"c{i}.json") for i in range(CLIENTS)]
    clients = [
        subprocess.Popen(["taskset", "-c", "1", binary, "load", f"--{proto}", "-k", "-q",
                          "-c", "50", "-m", "10", "-t", "1", "--rate", f"{rate:.0f}",
                          "--warm-up-time", "250ms", "--start-at", f"{at:.6f}", "-D", "1000ms",
                          url, "--json", j])
        for j in jsons
    ]
    time.sleep(max(0.0, at - time.time()))
    before, t0 = [cpu_s(c.pid) for c in clients], time.time()
    time.sleep(max(0.0, at + 1.0 - time.time()))
    after, wall = [cpu_s(c.pid) for c in clients], time.time() - t0
    for c in clients:
        if c.wait() != 0:
            sys.exit(f"loadterm load failed at {rate:.0f} req/s")
    busy = sum(a - b for a, b in zip(after, before)) / wall
    late = missed = sent = 0
    for j in jsons:
        o = json.load(open(j))["open_loop"]
        late, missed, sent = late + o["late"], missed + o["missed"], sent + o["sent"]
    print(f"{rate:10.0f} {100 * busy:11.0f}% {100 * late / max(sent, 1):7.1f} "
          f"{100 * missed / max(sent + missed, 1):8.2f} {1e6 * busy / (CLIENTS * rate):7.1f}")

#!/usr/bin/env python3
"""Where a server's user-space instructions per request go, by group of source files: the
profiles that `CALLGRIND_OUT=PREFIX bench/instructions-per-request.sh ... N` keeps (PREFIX.N and
PREFIX.3N), differenced as that script does ((I(3N) - I(N)) / 2N), so start-up and shutdown
cancel. One column per server, as a Markdown table.

    bench/callgrind-groups.py 20000 loadterm=/tmp/cg-loadterm spike=/tmp/cg-spike

A function's cost is grouped by the source file of its instructions (callgrind_annotate's
file:function lines: code inlined from another file counts where it came from), by the first
pattern below that matches. -v lists each group's largest lines per server.
"""

import collections
import re
import subprocess
import sys

# (group, pattern of the source file, pattern of the function). Code of the Rust standard
# library (/rustc/ paths: generic and inlined helpers) is grouped by the function it was
# compiled into, as is any file that no file pattern matches.
GROUPS = [
    ("parse the request head (httparse, strict checks)",
     r"h1/head\.rs|httparse-", r"h1::head::|httparse::|from_utf8"),
    ("plan and steps (exchange, plan)",
     r"crates/exchange/|crates/plan/|thread_ctx\.rs", r"loadterm_plan::|loadterm_exchange::|thread_ctx::"),
    ("write the response (encoder, copies)", r"h1/encode\.rs|memmove|memcpy|memset", r"h1::encode::"),
    ("timers and clock",
     r"tokio-[\d.]+/src/(time|runtime/time)/|crates/runtime/src/timer|clock_gettime",
     r"tokio::time::|runtime::time::|Timer|Sleep|Instant|Timespec|loadterm_runtime::"),
    ("shutdown signal",
     r"tokio-[\d.]+/src/(sync/(notify|watch)|util/rand)|shutdown\.rs", r"shutdown::|sync::notify|sync::watch"),
    ("socket I/O (tokio, mio, std and libc wrappers, byte counters)",
     r"tokio-[\d.]+/src/(runtime/io/(registration|scheduled_io)|io/|net/)"
     r"|mio-[\d.]+/src/(net|io_source|sys/unix/(tcp|net))|layer\.rs|stats\.rs|recv\.c|send\.c|writev\.c"
     r"|/read\.c|/write\.c|cancellation\.c|syscall",
     r"Registration|ScheduledIo|PollEvented|tokio::net::|tokio::io::|mio::net::|mio::io_source"
     r"|layer::|stats::|std::net::|std::io::|std::sys::net|std::sys::fd|read_buf|asynccancel"),
    ("scheduler, tasks, wake-ups, epoll (the spike: mio's poll, its slab)",
     r"tokio-[\d.]+/src/(runtime|task|util|sync/task)/|mio-|slab-|epoll_wait\.c",
     r"tokio::runtime::|tokio::task::|LocalKey|[Ww]ake|mio::|slab::"),
    ("HTTP/1 driver (conn.rs and futures glue; the spike: its main.rs)",
     r"h1/conn\.rs|workers\.rs|spike-epoll/src", r"h1::conn::|workers::|PollFn|Pin<P>|spike_epoll::"),
    ("allocator", r"jemalloc|malloc", r"alloc::alloc|__rust_(re|de)?alloc|finish_grow|RawVec"),
]
OTHER = "other (std code not told apart)"
LINE = re.compile(r"\s*([\d,]+)\s+\([^)]*\)\s+(.*)")


def profile(path):
    """(program total, {file:function: instructions}) of one callgrind profile."""
    out = subprocess.run(["callgrind_annotate", "--threshold=100", "--auto=no", path],
                         capture_output=True, text=True, check=True).stdout
    total, funcs, listing = 0, collections.Counter(), False
    for line in out.splitlines():
        if "PROGRAM TOTALS" in line:
            total = int(line.split()[0].replace(",", ""))
        elif "file:function" in line:
            listing = True
        elif listing and (m := LINE.match(line)):
            funcs[re.sub(r"\s*\[[^\]]*\]$", "", m.group(2))] += int(m.group(1).replace(",", ""))
    return total, funcs


def group(name):
    file, _, func = name.partition(":")
    if "/rustc/" not in file:
        for g, by_file, _ in GROUPS:
            if re.search(by_file, file):
                return g
    return next((g for g, _, by_func in GROUPS if re.search(by_func, func)), OTHER)


def per_request(prefix, n):
    """Instructions per request: total, by group, and by function."""
    t1, f1 = profile(f"{prefix}.{n}")
    t3, f3 = profile(f"{prefix}.{3 * n}")
    funcs = {k: (f3[k] - f1[k]) / (2 * n) for k in set(f1) | set(f3)}
    groups = collections.Counter()
    for k, v in funcs.items():
        groups[group(k)] += v
    return (t3 - t1) / (2 * n), groups, funcs


def main():
    args = sys.argv[1:]
    verbose = "-v" in args
    args = [a for a in args if a != "-v"]
    if len(args) < 2 or not args[0].isdigit() or any("=" not in a for a in args[1:]):
        sys.exit("usage: callgrind-groups.py [-v] N LABEL=PREFIX...")
    n = int(args[0])
    runs = [(label, per_request(prefix, n))
            for label, prefix in (a.split("=", 1) for a in args[1:])]
    names = [g for g, _, _ in GROUPS] + [OTHER]
    print("| where | " + " | ".join(label for label, _ in runs) + " |")
    print("|---|" + "---|" * len(runs))
    for name in names:
        print(f"| {name} | " + " | ".join(f"{r[1][name]:,.0f}" for _, r in runs) + " |")
    print("| **total** | " + " | ".join(f"**{r[0]:,.0f}**" for _, r in runs) + " |")
    if verbose:
        for label, (_, _, funcs) in runs:
            for name in names:
                top = sorted(((v, k) for k, v in funcs.items() if group(k) == name), reverse=True)
                print(f"\n{label}: {name}")
                for v, k in top[:12]:
                    print(f"  {v:8.1f}  {k[-150:]}")


if __name__ == "__main__":
    main()

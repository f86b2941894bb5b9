#!/usr/bin/env python3
"""Where a server's CPU time goes, by group: the samples that `PERF_DIR=DIR bench/peer-compare.sh`
records (perf, cpu-clock, the server's process only), as percentages of the server's samples, one
column per recording, as a Markdown table.

    bench/perf-groups.py DIR/h2tls-256k.loadterm.1.data DIR/h2tls-256k.haterm.1.data

A sample goes to the first group whose pattern matches "DSO SYMBOL" (perf report's dso and
symbol columns; kernel symbols are marked [k]). -v lists each group's largest symbols.
"""

import collections
import re
import subprocess
import sys

KERNEL_NET = (r"_*(tcp|udp|ip_|ip6|ipv4|dev_|skb|sk_|sock|net_rx|napi|netif|loopback|inet|nf_|dst_|gro|gso"
              r"|sys_send|sys_recv|x64_sys_send|x64_sys_recv|sendmsg|recvmsg|lock_sock|release_sock"
              r"|security_socket|raw_local_deliver|validate_xmit|qdisc|sch_|eth_|neigh)")
GROUPS = [
    ("kernel: copies between user and kernel",
     r"\[k\] _*(copy_user|copy_from_iter|copy_to_iter|copy_to_user|copy_from_user|rep_movs|memcpy|skb_copy)"),
    ("kernel: splice, pipes, pages", r"\[k\] _*\S*(splice|pipe|tee_|page|folio|gup_|pin_user)"),
    # Without a PMU in the guest, cpu-clock samples taken while interrupts were off land where
    # they come back on: mostly loopback delivery (softirqs) and wake-ups under a lock.
    ("kernel: where interrupts come back on (softirq delivery, wake-ups)",
     r"\[k\] _*(raw_spin_unlock_irq|handle_softirqs|do_softirq|irq_exit)"),
    ("kernel: TCP, UDP, IP, loopback", r"\[k\] " + KERNEL_NET),
    ("kernel: epoll, system call entry, scheduler, other", r"\[k\]"),
    ("crypto (AES-GCM, ChaCha20, hashes, key exchange)",
     r"libcrypto|aws_lc|aes_|_aes|gcm|ghash|chacha|poly1305|sha256|x25519|p256|keccak|mlkem"),
    ("QUIC (quinn, quinn-proto, quinn-udp; haterm's quic_/qc_)", r"quinn|^(haterm|haproxy)\S* .*(quic_|qc_)"),
    ("HTTP/2 (h2; haterm's h2_, hpack)", r"h2::|^(haterm|haproxy)\S* .*(h2_|h2s_|h2c_|hpack)"),
    ("Rust containers used by h2 and quinn (bytes, http, slab, indexmap)", r"bytes::|http::|slab::|indexmap::"),
    ("runtime (tokio, mio; haterm's poller and tasks)",
     r"tokio::|mio::|run_poll_loop|_do_poll|fd_update|process_runnable|run_tasks|task_|tasklet"),
    ("memcpy, memset (user space)", r"memcpy|memmove|memset"),
    ("allocator", r"malloc|free|jemalloc|_rjem_|je_|pool_|realloc|calloc|unlink_chunk"),
    ("loadterm's own code", r"^loadterm\S* "),
    ("haterm's own code", r"^(haterm|haproxy)\S* "),
]
OTHER = "other (libc, unresolved)"
LINE = re.compile(r"\s*([\d.]+)%\s+(\S+)\s+(\[[.k]\])\s+(.*)")


def profile(path):
    """{(dso, marker, symbol): percent of the server's samples} of one recording."""
    out = subprocess.run(["perf", "report", "-i", path, "--stdio", "--no-children", "--sort", "dso,sym",
                          "--percent-limit", "0"], capture_output=True, text=True, check=True).stdout
    rows = {}
    for line in out.splitlines():
        if m := LINE.match(line):
            rows[(m.group(2), m.group(3), m.group(4).strip())] = float(m.group(1))
    return rows


def group(rows):
    groups, tops = collections.Counter(), collections.defaultdict(collections.Counter)
    for (dso, mark, sym), pct in rows.items():
        key = f"{dso} {mark} {sym}"
        name = next((g for g, pat in GROUPS if re.search(pat, key)), OTHER)
        groups[name] += pct
        tops[name][sym] += pct
    return groups, tops


def main():
    args = [a for a in sys.argv[1:] if a != "-v"]
    if not args:
        sys.exit(__doc__)
    results = [group(profile(p)) for p in args]
    names = [g for g, _ in GROUPS] + [OTHER]
    print("| where | " + " | ".join(p.rsplit("/", 1)[-1].removesuffix(".data") for p in args) + " |")
    print("|---|" + "---|" * len(args))
    for name in names:
        if any(r[0][name] >= 0.05 for r in results):
            print(f"| {name} | " + " | ".join(f"{r[0][name]:.1f}%" for r in results) + " |")
    if "-v" in sys.argv:
        for path, (_, tops) in zip(args, results):
            print(f"\n{path}")
            for name in names:
                if tops[name]:
                    top = ", ".join(f"{s} {p:.1f}" for s, p in tops[name].most_common(6))
                    print(f"  {name}: {top}")


main()

#!/usr/bin/env python3
"""Where a process's CPU goes, by thread and by category, from `perf script`.

    perf record -F 1999 --call-graph dwarf,16384 -p PID -o OUT.data -- sleep 3
    perf script -F comm,tid,time,event,ip,sym,dso -i OUT.data > OUT.script
    scripts/perf_categories.py OUT.script

Each sample counts once, for the first category (below) that a frame of its
stack matches, leaf first; "other" when none does. The categories are the
per-operation costs issue 13 tracks (BENCHMARKS.md, 2026-11-28 afternoon):
Ed25519, the kernel's scheduling and socket paths, the store, SHA-256 request
digests, BLAKE3 MACs, the request pool, the client table, (de)serialisation,
the allocator and copies. Stacks through BLAKE3's assembly end there, so its
samples name no Rust caller.
"""
import collections
import re
import sys

CATEGORIES = [
    ("ed25519", r"curve25519|ed25519|sha512"),
    ("sched", r"finish_task_switch|schedule\b|__schedule"),
    ("futex", r"futex"),
    ("epoll", r"epoll"),
    ("tcp-send", r"tcp_sendmsg|__sys_sendto|sys_write|ksys_write"),
    ("tcp-recv", r"tcp_recvmsg|__sys_recvfrom|ksys_read"),
    ("store", r"chorus_store"),
    ("sha256", r"sha256|Sha256|of_parts_sha256"),
    ("blake3", r"blake3"),
    ("pool", r"chorus_order::pool"),
    ("client_table", r"client_table"),
    ("decode", r"deserialize|codec::decode"),
    ("encode", r"serialize|codec::encode"),
    ("alloc", r"mi_|_mi_|malloc|free"),
    ("memcpy", r"memcpy|memmove"),
]


def category(frames):
    for line in frames:
        for name, pattern in CATEGORIES:
            if re.search(pattern, line):
                return name
    return "other"


def main(path):
    total = 0
    by_cat = collections.Counter()
    by_thread = collections.Counter()
    per_thread = collections.defaultdict(collections.Counter)
    for sample in open(path).read().split("\n\n"):
        lines = sample.strip().split("\n")
        if len(lines) < 2 or not lines[0].split():
            continue
        total += 1
        thread = lines[0].split()[0]
        c = category(lines[1:])
        by_cat[c] += 1
        by_thread[thread] += 1
        per_thread[thread][c] += 1
    if total == 0:
        sys.exit("no samples")
    print(f"samples {total}")
    for t, n in by_thread.most_common():
        top = "  ".join(f"{k}:{100 * v / total:.1f}" for k, v in per_thread[t].most_common(8))
        print(f"{t:20s} {100 * n / total:5.1f}%  {top}")
    print("--- categories")
    for c, n in by_cat.most_common():
        print(f"{100 * n / total:5.1f}% {c}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else sys.exit(__doc__))

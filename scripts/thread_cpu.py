#!/usr/bin/env python3
"""Per-thread CPU of every running `chorus` process over an interval.

    thread_cpu.py SECONDS [DELAY]

Waits DELAY seconds, reads /proc/*/task/*/stat, sleeps SECONDS, reads again,
and prints each thread's share of one core, grouped by role (each replica,
the load generator) and thread name. For machines without perf or top -H
(the device machine); the numbers are utime + stime, as top counts them.
"""
import os
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def chorus_pids():
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if cmd and os.path.basename(cmd[0]) == b"chorus" and len(cmd) > 1:
            args = [a.decode(errors="replace") for a in cmd[1:] if a]
            if args[0] == "replica":
                conf = next((a for a in args if a.endswith(".toml")), "?")
                role = "replica " + os.path.basename(conf).removeprefix("replica-").removesuffix(".toml")
            else:
                role = args[0]
            yield int(pid), role


def sample():
    out = {}
    for pid, role in chorus_pids():
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                stat = open(f"/proc/{pid}/task/{tid}/stat").read()
            except OSError:
                continue
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2 :].split()
            out[(pid, int(tid))] = (role, name, int(fields[11]) + int(fields[12]))
    return out


def main():
    secs = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
    time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 0.0)
    a, t0 = sample(), time.monotonic()
    time.sleep(secs)
    b, dt = sample(), time.monotonic() - t0
    by = {}
    for key, (role, name, ticks) in b.items():
        used = ticks - a.get(key, (role, name, ticks))[2]
        # Threads of one name (tokio workers, pillars) are summed and counted.
        cell = by.setdefault((role, name), [0.0, 0, 0.0])
        share = used / TICK / dt
        cell[0] += share
        cell[1] += 1
        cell[2] = max(cell[2], share)
    roles = {}
    for (role, name), (share, count, top) in sorted(by.items()):
        roles.setdefault(role, []).append((share, name, count, top))
    for role, rows in sorted(roles.items()):
        total = sum(r[0] for r in rows)
        print(f"{role}: {total * 100:.0f} % of a core")
        for share, name, count, top in sorted(rows, reverse=True):
            if share >= 0.01:
                print(f"  {name:<16} x{count:<3} {share * 100:5.0f} %  (busiest {top * 100:.0f} %)")


if __name__ == "__main__":
    main()

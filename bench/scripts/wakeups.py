#!/usr/bin/env python3
"""Per request, what each party of a `token-wrk --binary` run asks of the kernel: system calls,
wake-ups it issues, context switches, and how often it waits in `epoll_wait` — for the fixed-JSON
handler's cells and the token fetch's cells apart, and for wrk in each.

A closed loop on two shared cores: the slower server leaves wrk waiting, so each answer it
writes has to wake wrk (on another CPU, an interrupt between CPUs, dear inside a VM); the faster
one finds wrk busy. These counts show which side pays that, cell by cell. Needs `perf` with
tracepoint access (root).

    bench/scripts/wakeups.py <mcp-connect-bench> <mcp-connect> [engine] [rounds]

The servers are counted per thread (`perf stat --per-thread -I 1000`): the bench's `server`
threads (the fixed handler) and the binary's `tokio-rt-worker` threads; each one-second interval
is put with the cells of whichever server answered in it (intervals where both did, at a cell's
edge, are left out). Requests are the server's `writev` calls (one per answer here). wrk is a
new process per cell: each is counted whole by its own `perf stat`, and put with the fixed or
token cells by the port it drives.
"""
import collections
import os
import re
import subprocess
import sys
import time

EVENTS = [
    "raw_syscalls:sys_enter",
    "syscalls:sys_enter_writev",
    "syscalls:sys_enter_write",
    "syscalls:sys_enter_epoll_wait",
    "sched:sched_wakeup",
    "context-switches",
    "cpu-migrations",
    "task-clock",
]
SHORT = {
    "raw_syscalls:sys_enter": "syscalls",
    "syscalls:sys_enter_epoll_wait": "epoll_wait",
    "sched:sched_wakeup": "wake-ups issued",
    "context-switches": "context switches",
    "cpu-migrations": "migrations",
    "task-clock": "CPU µs",
}


def pids(pattern: str, exact: bool = False) -> list[int]:
    flag = "-x" if exact else "-f"
    r = subprocess.run(["pgrep", flag, pattern], capture_output=True, text=True)
    return [int(p) for p in r.stdout.split()]


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    bench, binary = sys.argv[1], sys.argv[2]
    engine = sys.argv[3] if len(sys.argv) > 3 else "sqlite"
    rounds = sys.argv[4] if len(sys.argv) > 4 else "4"
    out = f"/tmp/wakeups-{os.getpid()}"
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ, MCP_CONNECT_BIN=binary)
    run = subprocess.Popen(
        [bench, "token-wrk", "--binary", "--engines", engine, "--rounds", rounds, "--duration", "4"],
        env=env, stdout=open(f"{out}/token-wrk.md", "w"), stderr=open(f"{out}/err.log", "w"),
    )
    while not pids("mcp-connect serve"):
        time.sleep(0.1)
    server = pids("mcp-connect serve")[0]
    bench_pid = pids("mcp-connect-ben", exact=True)[0]
    servers = subprocess.Popen(
        ["perf", "stat", "--per-thread", "-I", "1000", "-x", ",", "-e", ",".join(EVENTS),
         "-p", f"{bench_pid},{server}", "-o", f"{out}/servers.csv"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    token_port = None
    seen: set[int] = set()
    wrk_runs = []
    while run.poll() is None:
        if token_port is None:
            conf = open(f"/proc/{server}/cmdline").read().split("\0")
            path = conf[conf.index("--config") + 1] if "--config" in conf else None
            if path and os.path.exists(path):
                m = re.search(r'listen = "[^"]*:(\d+)"', open(path).read())
                token_port = m.group(1) if m else None
        for p in pids("wrk", exact=True):
            if p in seen:
                continue
            seen.add(p)
            try:
                cmd = open(f"/proc/{p}/cmdline").read().replace("\0", " ")
            except OSError:
                continue
            f = f"{out}/wrk-{p}.csv"
            perf = subprocess.Popen(
                ["perf", "stat", "-x", ",", "-e", ",".join(EVENTS), "-p", str(p), "-o", f],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            wrk_runs.append((cmd, f, perf))
        time.sleep(0.02)
    servers.send_signal(2)
    servers.wait()
    for _, _, perf in wrk_runs:
        perf.wait()

    # Servers: per interval, per thread.
    per_interval = collections.defaultdict(lambda: collections.defaultdict(collections.Counter))
    for line in open(f"{out}/servers.csv"):
        parts = line.strip().split(",")
        if len(parts) < 5 or line.startswith("#"):
            continue
        t, thread, value, event = parts[0], parts[1], parts[2], parts[4]
        try:
            v = float(value)
        except ValueError:
            continue
        who = "fixed" if thread.startswith("server-") else "token" if thread.startswith("tokio-rt-worker-") else None
        if who:
            per_interval[t][who][event] += v
    totals = {"fixed": collections.Counter(), "token": collections.Counter()}
    for t, by in per_interval.items():
        f, k = by["fixed"]["syscalls:sys_enter_writev"], by["token"]["syscalls:sys_enter_writev"]
        if f > 1000 and k < 0.01 * f:
            totals["fixed"].update(by["fixed"])
        elif k > 1000 and f < 0.01 * k:
            totals["token"].update(by["token"])

    wrk_totals = {"fixed": collections.Counter(), "token": collections.Counter()}
    for cmd, f, _ in wrk_runs:
        who = "token" if token_port and f":{token_port}/" in cmd else "fixed"
        for line in open(f):
            parts = line.strip().split(",")
            if len(parts) < 3 or line.startswith("#"):
                continue
            try:
                wrk_totals[who][parts[2]] += float(parts[0])
            except ValueError:
                continue

    print(open(f"{out}/token-wrk.md").read())
    print("Per request (a server's requests: its writev calls; wrk's: its write calls):\n")
    print("| party | " + " | ".join(SHORT[e] for e in EVENTS[:1] + EVENTS[3:]) + " |")
    print("|---|" + "---:|" * (len(EVENTS) - 2))
    for label, c, unit in [
        ("fixed handler (its cells)", totals["fixed"], "syscalls:sys_enter_writev"),
        ("wrk (fixed cells)", wrk_totals["fixed"], "syscalls:sys_enter_write"),
        ("token server (its cells)", totals["token"], "syscalls:sys_enter_writev"),
        ("wrk (token cells)", wrk_totals["token"], "syscalls:sys_enter_write"),
    ]:
        n = c[unit] or 1
        cells = []
        for e in EVENTS[:1] + EVENTS[3:]:
            v = c[e] / n
            # task-clock is in milliseconds (perf's unit "msec").
            cells.append(f"{v * 1000:.1f}" if e == "task-clock" else f"{v:.2f}")
        print(f"| {label} | " + " | ".join(cells) + " |")
    print(f"\nraw counts in {out}")


if __name__ == "__main__":
    main()

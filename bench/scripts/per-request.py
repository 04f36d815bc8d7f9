#!/usr/bin/env python3
"""Microseconds of CPU per request spent in stacks that match each pattern.

Reads `perf script` output of a `perf record -a -e cpu-clock` profile (bench/scripts/
profile-cells.sh), keeps the samples of the threads named <comm>, and for each pattern (a
regular expression over the stack's symbols) counts the samples whose stack holds a match:
inclusive time, so patterns may overlap. Each sample is 1/frequency seconds of one CPU.

    per-request.py <perf-script.txt> <comm> <requests> <pattern>... [--hz 4000]
"""
import re
import sys


def main() -> None:
    args = sys.argv[1:]
    hz = 4000.0
    if "--hz" in args:
        i = args.index("--hz")
        hz = float(args[i + 1])
        del args[i : i + 2]
    if len(args) < 4:
        sys.exit(__doc__)
    path, comm, requests, patterns = args[0], args[1], float(args[2]), args[3:]
    compiled = [re.compile(p) for p in patterns]
    counts = [0] * len(patterns)
    total = 0
    stack: list[str] = []
    thread = None

    def flush() -> None:
        nonlocal total
        if thread != comm or not stack:
            return
        total += 1
        text = "\n".join(stack)
        for i, rx in enumerate(compiled):
            if rx.search(text):
                counts[i] += 1

    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.strip():
                flush()
                stack, thread = [], None
            elif not line[0].isspace():
                thread = line.split()[0]
            else:
                parts = line.strip().split(None, 1)
                if len(parts) == 2:
                    stack.append(parts[1])
    flush()
    per = 1e6 / hz / requests
    print(f"{total * per:8.2f} µs/request  all samples of {comm}")
    for p, n in zip(patterns, counts):
        print(f"{n * per:8.2f} µs/request  {p}")


if __name__ == "__main__":
    main()

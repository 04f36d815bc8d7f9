#!/usr/bin/env python3
"""Instructions per request in a callgrind profile of an HTTP server (instructions.sh).

Reads the profile's total (the events collected, i.e. inside hyper's connection task) and the
number of calls to hyper's request-head parser (one per request), and prints their ratio.

    callgrind-per-request.py <callgrind.out>
"""
import re
import sys


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    names: dict[str, str] = {}
    total = 0
    requests = 0
    callee = None
    parser = re.compile(r"Http1Transaction>::parse$")
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            m = re.match(r"^(c?fn)=\((\d+)\)(?: (.*))?$", line)
            if m:
                kind, ident, name = m.groups()
                if name:
                    names[ident] = name
                if kind == "cfn":
                    callee = ident
                continue
            if line.startswith(("summary:", "totals:")):
                total = max(total, int(line.split()[1]))
            elif line.startswith("calls=") and callee is not None:
                if parser.search(names.get(callee, "")):
                    requests += int(line.split("=")[1].split()[0])
    if requests == 0:
        sys.exit(f"{path}: no request parsed")
    print(f"{path}: {total:,} instructions, {requests:,} requests, {total / requests:,.0f} per request")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Instructions per request in a callgrind profile of an HTTP server (instructions.sh).

Reads the profile's total (the events collected: the runtime's task polls) and the number of
requests, and prints their ratio. Requests are counted as calls of hyper's request-head parser
(one per request) where the build keeps it a function of its own; a whole-program build
(`lto = "fat"`) inlines it, and then they are counted as calls of SHA-256's compression
function, one per request with an API key (the token fetch's; the fixed-JSON handler hashes
nothing, and keeps its parser).

The token fetch reads the database only while its cache is cold (the first fetches, which on
Postgres may also open a connection, TLS handshake included); how many of the counted
requests fall in that start varies from run to run. What those reads cost (the inclusive cost
of `Db::token_read`) is printed apart, with the count per request without them: the cached
path, which is the one to compare.

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
    hashes = 0
    callee = None
    caller = None
    reads = 0
    parser = re.compile(r"Http1Transaction>::parse$")
    sha256 = re.compile(r"sha2::sha256::compress256$")
    db_read = re.compile(r"Db>::token_read::\{\{closure\}\}")
    after_calls = False
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
                else:
                    caller = ident
                continue
            if after_calls:
                # The line after `calls=` is the call's inclusive cost: position, then events.
                after_calls = False
                parts = line.split()
                outer = not db_read.search(names.get(caller or "", ""))
                if outer and len(parts) > 1 and db_read.search(names.get(callee or "", "")):
                    reads += int(parts[1])
                continue
            if line.startswith(("summary:", "totals:")):
                total = max(total, int(line.split()[1]))
            elif line.startswith("calls=") and callee is not None:
                after_calls = True
                if parser.search(names.get(callee, "")):
                    requests += int(line.split("=")[1].split()[0])
                elif sha256.search(names.get(callee, "")):
                    hashes += int(line.split("=")[1].split()[0])
    if requests == 0:
        requests = hashes
    if requests == 0:
        sys.exit(f"{path}: no request parsed or key hashed")
    line = f"{path}: {total:,} instructions, {requests:,} requests, {total / requests:,.0f} per request"
    if reads:
        line += f"; {(total - reads) / requests:,.0f} without the cold cache's database reads ({reads:,})"
    print(line)


if __name__ == "__main__":
    main()

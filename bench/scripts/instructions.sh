#!/usr/bin/env bash
# User-space instructions per request, counted by valgrind (callgrind) rather than timed: the
# token fetch (the release binary, as `token-wrk --binary` serves it) and the fixed-JSON axum
# handler (the bench's own server) in one `token-wrk` run, both processes under callgrind.
# Counts are collected only inside the runtime's task polls (`--toggle-collect` on
# `tokio::runtime::task::raw::poll`): the connection tasks (parsing, the whole service,
# writing) and the few background tasks; not start-up or the SQLite worker threads. A
# whole-program build inlines hyper's connection future into that poll, so no narrower
# function is there to toggle on. Requests are counted by `callgrind-per-request.py`.
#
# An instruction count is not a time (the kernel's side, cache misses and stalls are not in it)
# but it is the same from run to run on a noisy machine, so two builds compare exactly:
#
#   bench/scripts/instructions.sh /work/base/mcp-connect-bench /work/base/mcp-connect /tmp/cg-base
#   bench/scripts/instructions.sh target/release/mcp-connect-bench target/release/mcp-connect /tmp/cg-new
#
# Under valgrind the CPU's SHA extensions are not offered, so the API key's SHA-256 runs in
# software (about 3,500 instructions here, a few hundred with them). The token cache's window is
# raised to 10 s for the binary (`MCP_CONNECT_CACHE__SYNC_WINDOW_MS`): slowed fifty-fold, its
# change feed would otherwise fall behind the default 100 ms and some fetches read the
# database, which at full speed none do (`token-wrk` prints the share served from the cache).
set -euo pipefail
bench=${1:?usage: instructions.sh <mcp-connect-bench> <mcp-connect> <out-dir> [engine]}
bin=${2:?usage: instructions.sh <mcp-connect-bench> <mcp-connect> <out-dir> [engine]}
out=${3:?usage: instructions.sh <mcp-connect-bench> <mcp-connect> <out-dir> [engine]}
engine=${4:-sqlite}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
rm -f "$out"/callgrind.*
toggle='tokio::runtime::task::raw::poll*'
wrapper="$out/under-callgrind.sh"
cat >"$wrapper" <<WRAP
#!/bin/sh
export MCP_CONNECT_CACHE__SYNC_WINDOW_MS=10000
exec valgrind --tool=callgrind --callgrind-out-file=$out/callgrind.token.%p \
  --toggle-collect='$toggle' "$(realpath "$bin")" "\$@" 2>>$out/valgrind.log
WRAP
chmod +x "$wrapper"
MCP_CONNECT_BIN="$wrapper" valgrind --tool=callgrind --callgrind-out-file="$out/callgrind.fixed.%p" \
  --toggle-collect="$toggle" "$bench" token-wrk --binary --engines "$engine" --rounds 1 \
  --duration 8 >"$out/token-wrk.md" 2>>"$out/valgrind.log"
grep -E '^\| (engine|Postgres|SQLite) \| (round|1) ' "$out/token-wrk.md" || true
for f in "$out"/callgrind.fixed.* "$out"/callgrind.token.*; do
  python3 "$here/callgrind-per-request.py" "$f"
done

#!/usr/bin/env bash
# Profiles the `proxy` scenario's cells one by one: starts the bench, and when it announces a
# cell on stderr ("<label> at 64 connections: measured from ..."), records the whole machine
# with `perf record -a` (call graphs by frame pointer) for a few seconds inside that cell's
# measured window. Build the bench with frame pointers and line tables for readable stacks:
#
#   RUSTFLAGS="-C force-frame-pointers=yes" CARGO_PROFILE_RELEASE_DEBUG=line-tables-only \
#     CARGO_TARGET_DIR=/tmp/fp-target cargo build --release --manifest-path bench/Cargo.toml
#   bench/scripts/profile-cells.sh /tmp/fp-target/release/mcp-connect-bench /tmp/profile
#   perf script -i /tmp/profile/proxy.data > /tmp/profile/proxy.txt
#   bench/scripts/per-request.py /tmp/profile/proxy.txt server <requests> 'api::proxy::answer' ...
#
# <requests> is the cell's req/s (from out.md, one round) times the seconds recorded.
set -euo pipefail
bench=${1:?usage: profile-cells.sh <mcp-connect-bench> <out-dir> [seconds]}
out=${2:?usage: profile-cells.sh <mcp-connect-bench> <out-dir> [seconds]}
secs=${3:-3}
mkdir -p "$out"
MCP_CONNECT_BIN=/nonexistent "$bench" proxy --conns 64 --rounds 1 --duration 5 \
  --stream-bytes 1048576 >"$out/out.md" 2>"$out/err.log" &
pid=$!
declare -A done=()
while kill -0 "$pid" 2>/dev/null; do
  for cell in haproxy "bare forwarder" proxy /v1/tokens; do
    [ -n "${done[$cell]:-}" ] && continue
    if grep -q "^$cell at 64 connections" "$out/err.log"; then
      done[$cell]=1
      # The measurement starts after a 1 s warm-up; stay inside its 5 s.
      sleep 1.5
      name=$(echo "$cell" | tr -c 'a-z0-9\n' '-' | sed 's/^-*//')
      perf record -a --call-graph fp -e cpu-clock -o "$out/$name.data" -- sleep "$secs" \
        >/dev/null 2>&1
    fi
  done
  sleep 0.1
done
wait "$pid"
echo "profiles in $out: $(ls "$out"/*.data | xargs -n1 basename | tr '\n' ' ')"

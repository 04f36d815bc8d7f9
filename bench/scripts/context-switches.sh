#!/usr/bin/env bash
# Samples, once a second until stopped, the CPU ticks and context switches (voluntary,
# involuntary) of the servers' runtime threads during a `token-wrk --binary` run: the release
# binary's `tokio-rt-worker` threads and the bench's `server` threads (the fixed-JSON handler).
# Each line: time, pid, tid, name, utime+stime ticks, voluntary, involuntary (cumulative).
#
#   bench/scripts/context-switches.sh /tmp/switches.txt &
#   MCP_CONNECT_BIN=... mcp-connect-bench token-wrk --binary --engines sqlite --rounds 2 --duration 6
#   kill %1
set -uo pipefail
out=${1:?usage: context-switches.sh <out-file>}
while true; do
  t=$(date +%s.%N)
  for pid in $(pgrep -f "mcp-connect serve" | head -1) $(pgrep -x mcp-connect-ben | head -1); do
    for d in /proc/"$pid"/task/*; do
      comm=$(cat "$d/comm" 2>/dev/null) || continue
      case "$comm" in tokio-rt-worker | server) ;; *) continue ;; esac
      ticks=$(sed 's/.*) //' "$d/stat" | awk '{print $12 + $13}')
      switches=$(grep -E '^(voluntary|nonvoluntary)_ctxt' "$d/status" | awk '{print $2}' | tr '\n' ' ')
      echo "$t $pid $(basename "$d") $comm $ticks $switches"
    done
  done >>"$out"
  sleep 1
done

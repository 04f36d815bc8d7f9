#!/usr/bin/env bash
# API fuzzing: schemathesis against /openapi.json of a running `mcp-connect demo` (the real
# service on loopback with embedded SQLite), with the demo's real API key. Fails on any finding:
# a server error, a response that breaks the schema, a schema-valid request rejected, a
# schema-violating request accepted, an undocumented status code or content type.
#
#   tests/schemathesis/run.sh            # short run (ST_MAX_TIME, default 90 s)
#   ST_MAX_TIME=900 tests/schemathesis/run.sh   # a fuller run
#
# Needs python3 with venv; installs schemathesis into tests/schemathesis/.venv. Uses
# $MCP_CONNECT_BIN or target/debug/mcp-connect. GET /v1/events (a never-ending SSE stream) is not
# fuzzed; its 401 and its content type are checked here directly. Nor is /v1/proxy/...: what it
# answers is the provider's own (any status, any content type, which no schema of ours can
# describe); its own refusals (401, a path leaving the base) are checked here directly, and
# tests/it/proxy.rs drives it against a recording upstream.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin="${MCP_CONNECT_BIN:-$root/target/debug/mcp-connect}"
venv="$here/.venv"

if [ ! -x "$venv/bin/st" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
fi

work="$(mktemp -d)"
demo_pid=""
cleanup() {
  if [ -n "$demo_pid" ]; then kill "$demo_pid" 2>/dev/null || true; wait "$demo_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/data/secrets"
api_key="$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')"
printf '%s\n' "$api_key" >"$work/data/secrets/api-key"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
base="http://127.0.0.1:$port"

MCP_CONNECT_LOG="${MCP_CONNECT_LOG:-warn}" "$bin" demo --port "$port" --data-dir "$work/data" >"$work/demo.log" 2>&1 &
demo_pid=$!
for _ in $(seq 1 100); do
  curl -fsS "$base/readyz" >/dev/null 2>&1 && break
  kill -0 "$demo_pid" 2>/dev/null || { cat "$work/demo.log" >&2; echo "schemathesis: the demo did not start" >&2; exit 1; }
  sleep 0.2
done

# The SSE route, which schemathesis cannot read to the end.
status="$(curl -sS -o /dev/null -w '%{http_code} %{content_type}' "$base/v1/events")"
[ "$status" = "401 application/json" ] || { echo "GET /v1/events without a key: $status" >&2; exit 1; }
status="$(curl -sS -o /dev/null -m 2 -w '%{http_code} %{content_type}' -H "Authorization: Bearer $api_key" "$base/v1/events" || true)"
case "$status" in "200 text/event-stream"*) ;; *) echo "GET /v1/events: $status" >&2; exit 1 ;; esac

# The proxy's own refusals: no key, and a path that tries to leave the API base.
status="$(curl -sS -o /dev/null -w '%{http_code} %{content_type}' "$base/v1/proxy/sandbox/whoami")"
[ "$status" = "401 application/json" ] || { echo "GET /v1/proxy without a key: $status" >&2; exit 1; }
status="$(curl -sS --path-as-is -o /dev/null -w '%{http_code} %{content_type}' -H "Authorization: Bearer $api_key" -H 'Connect-Subject: alice' "$base/v1/proxy/sandbox/%2e%2e/x")"
[ "$status" = "400 application/json" ] || { echo "GET /v1/proxy/sandbox/%2e%2e/x: $status" >&2; exit 1; }

cd "$here"
PYTHONPATH="$here" SCHEMATHESIS_HOOKS=hooks "$venv/bin/st" --config-file "$here/schemathesis.toml" run "$base/openapi.json" \
  -H "Authorization: Bearer $api_key" \
  --exclude-path /v1/events \
  --exclude-path /oauth2/token \
  --exclude-path-regex '^/v1/proxy/' \
  --checks all \
  --workers 1 \
  --request-timeout 10 \
  --max-time "${ST_MAX_TIME:-90}" \
  --no-color \
  ${ST_ARGS:-}

# The token endpoint authenticates its client with HTTP Basic (the demo client's id and key),
# which the bearer header above would override: its own run.
basic="$(printf 'demo-mcp:%s' "$api_key" | base64 -w0)"
PYTHONPATH="$here" SCHEMATHESIS_HOOKS=hooks "$venv/bin/st" --config-file "$here/schemathesis.toml" run "$base/openapi.json" \
  -H "Authorization: Basic $basic" \
  --include-path /oauth2/token \
  --checks all \
  --workers 1 \
  --request-timeout 10 \
  --max-time "${ST_TOKEN_MAX_TIME:-30}" \
  --no-color

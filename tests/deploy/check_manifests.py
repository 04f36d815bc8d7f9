"""Validates rendered Kubernetes manifests (tests/deploy/validate.sh runs it in tests/deploy/.venv).

    check_manifests.py --crd-out FILE [--versions 1.30,1.37] RENDERED.yaml...

Every object is validated strictly (unknown fields are errors) against the Kubernetes API schemas
that kubernetes-validate bundles, for each version given. An object whose kind has no schema there
is an error, except the custom resources listed in CRDS: those are written as JSON lines to
--crd-out for check_crds.mjs (their CRD schemas come from npm). Then a few rules the schemas
cannot express, for the mcp-connect server Deployment: the probes, the security context, the
termination grace period against the drain, and that every ConfigMap and Secret a pod mounts is
in the same rendering and every image is set (when it holds any ConfigMap or Secret at all, as an
overlay does: the base alone holds none and names the placeholder image).
Exit status 1 on any finding.
"""

import argparse
import json
import sys

import kubernetes_validate
import yaml

CRDS = {("monitoring.coreos.com/v1", "ServiceMonitor")}
# The longest SIGTERM drain the service performs (readiness off, in-flight requests and long
# polls answered, background work stopped); docs/deploy.md, "Termination".
DRAIN_SECONDS = 30


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--crd-out", required=True)
    ap.add_argument("--versions", default="1.30,1.37")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    versions = [v.strip() for v in args.versions.split(",") if v.strip()]

    errors: list[str] = []
    count = 0
    with open(args.crd_out, "a", encoding="utf-8") as crd_out:
        for path in args.files:
            with open(path, encoding="utf-8") as f:
                docs = [d for d in yaml.safe_load_all(f) if d is not None]
            if not docs:
                errors.append(f"{path}: no objects")
            for doc in docs:
                count += 1
                where = f"{path}: {doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"
                if (doc.get("apiVersion"), doc.get("kind")) in CRDS:
                    crd_out.write(json.dumps({"where": where, "object": doc}) + "\n")
                    continue
                for version in versions:
                    try:
                        kubernetes_validate.validate(doc, version, strict=True)
                    except kubernetes_validate.ValidationError as e:
                        loc = ".".join(str(p) for p in e.path) or "(top)"
                        errors.append(f"{where} (Kubernetes {version}): {loc}: {e.message}")
                    except kubernetes_validate.SchemaNotFoundError:
                        errors.append(
                            f"{where} (Kubernetes {version}): no schema for "
                            f"{doc.get('apiVersion')} {doc.get('kind')}"
                        )
            errors.extend(check_rules(path, docs))
    for e in errors:
        print(f"INVALID {e}", file=sys.stderr)
    print(f"check_manifests: {count} objects in {len(args.files)} rendering(s), "
          f"Kubernetes {', '.join(versions)}: {len(errors)} finding(s)")
    return 1 if errors else 0


def check_rules(path: str, docs: list[dict]) -> list[str]:
    errs: list[str] = []
    names = {(d.get("kind"), (d.get("metadata") or {}).get("name")) for d in docs}
    has_config = any(k in ("ConfigMap", "Secret") for k, _ in names)
    deployments = [d for d in docs if d.get("kind") == "Deployment"]
    if not deployments:
        errs.append(f"{path}: no Deployment")
    for d in docs:
        spec = pod_spec(d)
        if spec is None:
            continue
        where = f"{path}: {d['kind']}/{d['metadata']['name']}"
        psc = spec.get("securityContext") or {}
        if psc.get("runAsNonRoot") is not True:
            errs.append(f"{where}: pod securityContext.runAsNonRoot must be true")
        if (psc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
            errs.append(f"{where}: pod seccompProfile must be RuntimeDefault")
        if spec.get("automountServiceAccountToken") is not False:
            errs.append(f"{where}: automountServiceAccountToken must be false")
        for c in spec.get("containers", []):
            csc = c.get("securityContext") or {}
            if csc.get("allowPrivilegeEscalation") is not False:
                errs.append(f"{where}: {c['name']}: allowPrivilegeEscalation must be false")
            if csc.get("readOnlyRootFilesystem") is not True:
                errs.append(f"{where}: {c['name']}: readOnlyRootFilesystem must be true")
            if (csc.get("capabilities") or {}).get("drop") != ["ALL"]:
                errs.append(f"{where}: {c['name']}: capabilities.drop must be [ALL]")
            if "memory" not in ((c.get("resources") or {}).get("limits") or {}):
                errs.append(f"{where}: {c['name']}: no memory limit")
            if has_config and (":" not in c["image"] or "/" not in c["image"]):
                errs.append(f"{where}: {c['name']}: image {c['image']} is not a registry/name:tag "
                            "(the overlay's `images` did not apply)")
        if has_config:
            for v in spec.get("volumes", []):
                ref = None
                if "configMap" in v:
                    ref = ("ConfigMap", v["configMap"].get("name"))
                elif "secret" in v:
                    ref = ("Secret", v["secret"].get("secretName"))
                if ref and ref not in names:
                    errs.append(f"{where}: volume {v['name']} names {ref[0]} {ref[1]}, not in this rendering")
        if d.get("kind") == "Deployment":
            errs.extend(check_server(where, d, spec))
    return errs


def check_server(where: str, d: dict, spec: dict) -> list[str]:
    errs: list[str] = []
    if (d["spec"].get("replicas") or 1) < 2:
        errs.append(f"{where}: fewer than 2 replicas")
    c = spec["containers"][0]
    want = {"livenessProbe": "/healthz", "readinessProbe": "/readyz"}
    for probe, p in want.items():
        got = ((c.get(probe) or {}).get("httpGet") or {}).get("path")
        if got != p:
            errs.append(f"{where}: {probe} must GET {p} (has {got})")
    pre = ((c.get("lifecycle") or {}).get("preStop") or {}).get("sleep", {}).get("seconds", 0)
    grace = spec.get("terminationGracePeriodSeconds", 30)
    if grace < pre + DRAIN_SECONDS:
        errs.append(f"{where}: terminationGracePeriodSeconds {grace} < preStop {pre} s + drain {DRAIN_SECONDS} s")
    return errs


def pod_spec(d: dict):
    kind = d.get("kind")
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
        return d["spec"]["template"]["spec"]
    if kind == "CronJob":
        return d["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    if kind == "Pod":
        return d["spec"]
    return None


if __name__ == "__main__":
    sys.exit(main())

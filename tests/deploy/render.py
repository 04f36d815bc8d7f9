"""A stand-in for `kubectl kustomize DIR`, for machines without kubectl (no package registry this
project reaches has a kustomize v5: Debian's kubectl is 1.20, with kustomize v2).

    render.py DIR > rendered.yaml
    render.py --compare DIR KUBECTL_RENDERED.yaml   # exit 1 if they differ (but for the hash)

It renders only the subset of kustomize that deploy/kubernetes uses, and refuses any other field:
resources (files and directories), namespace, labels (pairs, includeSelectors false,
includeTemplates), images (newName, newTag), configMapGenerator and secretGenerator (files,
`key=path` form, options.disableNameSuffixHash), with the generated names (content-hash suffix)
rewritten in pod volumes and envFrom/valueFrom references. The hash is not kustomize's own, so
names differ from kubectl's rendering; the objects are otherwise the same. tests/deploy/validate.sh
uses kubectl when it is there, and then compares the two renderings so that this stand-in
stays true.
"""

import base64
import hashlib
import json
import os
import re
import sys

import yaml

KNOWN = {"apiVersion", "kind", "resources", "namespace", "labels", "images",
         "configMapGenerator", "secretGenerator"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
                  "PersistentVolume", "StorageClass", "PriorityClass"}
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet"}


def render(d: str) -> list[dict]:
    with open(os.path.join(d, "kustomization.yaml"), encoding="utf-8") as f:
        k = yaml.safe_load(f) or {}
    unknown = set(k) - KNOWN
    if unknown:
        sys.exit(f"render.py: {d}: unsupported kustomization fields {sorted(unknown)}")
    objs: list[dict] = []
    for r in k.get("resources", []):
        p = os.path.normpath(os.path.join(d, r))
        if os.path.isdir(p):
            objs.extend(render(p))
        else:
            with open(p, encoding="utf-8") as f:
                objs.extend(o for o in yaml.safe_load_all(f) if o)
    renames: dict[tuple[str, str], str] = {}
    for kind, key in (("ConfigMap", "configMapGenerator"), ("Secret", "secretGenerator")):
        for g in k.get(key, []):
            extra = set(g) - {"name", "files", "options"}
            if extra or set(g.get("options", {})) - {"disableNameSuffixHash"}:
                sys.exit(f"render.py: {d}: unsupported {key} fields in {g['name']}")
            data = {}
            for spec in g.get("files", []):
                name, _, path = spec.rpartition("=") if "=" in spec else (os.path.basename(spec), "", spec)
                with open(os.path.join(d, path), "rb") as f:
                    raw = f.read()
                data[name] = base64.b64encode(raw).decode() if kind == "Secret" else raw.decode()
            obj = {"apiVersion": "v1", "kind": kind, "metadata": {"name": g["name"]}, "data": data}
            if kind == "Secret":
                obj["type"] = "Opaque"
            if not g.get("options", {}).get("disableNameSuffixHash"):
                h = hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:10]
                renames[(kind, g["name"])] = f"{g['name']}-{h}"
                obj["metadata"]["name"] = renames[(kind, g["name"])]
            objs.append(obj)
    for o in objs:
        meta = o.setdefault("metadata", {})
        if k.get("namespace") and o.get("kind") not in CLUSTER_SCOPED:
            meta["namespace"] = k["namespace"]
        for lab in k.get("labels", []):
            if lab.get("includeSelectors"):
                sys.exit(f"render.py: {d}: labels.includeSelectors is not supported")
            meta.setdefault("labels", {}).update(lab["pairs"])
            if lab.get("includeTemplates") and o.get("kind") in WORKLOADS:
                tmeta = o["spec"]["template"].setdefault("metadata", {})
                tmeta.setdefault("labels", {}).update(lab["pairs"])
        spec = pod_spec(o)
        if spec is None:
            continue
        for c in spec.get("initContainers", []) + spec.get("containers", []):
            for img in k.get("images", []):
                if c["image"].split(":")[0] == img["name"]:
                    c["image"] = f"{img.get('newName', img['name'])}:{img.get('newTag', 'latest')}"
            for ef in c.get("envFrom", []):
                for kind, field in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
                    if field in ef:
                        ef[field]["name"] = renames.get((kind, ef[field]["name"]), ef[field]["name"])
            for e in c.get("env", []):
                vf = e.get("valueFrom", {})
                for kind, field in (("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")):
                    if field in vf:
                        vf[field]["name"] = renames.get((kind, vf[field]["name"]), vf[field]["name"])
        for v in spec.get("volumes", []):
            if "configMap" in v:
                v["configMap"]["name"] = renames.get(("ConfigMap", v["configMap"]["name"]), v["configMap"]["name"])
            if "secret" in v:
                v["secret"]["secretName"] = renames.get(("Secret", v["secret"]["secretName"]), v["secret"]["secretName"])
    return objs


def pod_spec(o: dict):
    if o.get("kind") in WORKLOADS:
        return o["spec"]["template"]["spec"]
    return None


def normalized(objs: list[dict], generated: set[str]) -> dict:
    """Objects by (kind, name) as sorted YAML, generated names' hash suffixes replaced."""
    pat = re.compile(r"\b(" + "|".join(map(re.escape, sorted(generated))) + r")-[a-z0-9]{10}\b")
    out = {}
    for o in objs:
        text = yaml.safe_dump(o, sort_keys=True)
        if generated:
            text = pat.sub(r"\1-HASH", text)
        name = o["metadata"]["name"]
        if generated:
            name = pat.sub(r"\1-HASH", name)
        out[(o["kind"], name)] = text
    return out


def compare(d: str, kubectl_file: str) -> int:
    mine = render(d)
    with open(kubectl_file, encoding="utf-8") as f:
        theirs = [o for o in yaml.safe_load_all(f) if o]
    generated = {o["metadata"]["name"].rsplit("-", 1)[0] for o in mine
                 if o["kind"] in ("ConfigMap", "Secret") and re.search(r"-[0-9a-f]{10}$", o["metadata"]["name"])}
    a, b = normalized(theirs, generated), normalized(mine, generated)
    diffs = sorted(set(a) ^ set(b)) + sorted(k for k in set(a) & set(b) if a[k] != b[k])
    for k in diffs:
        print(f"render.py: {d}: {k[0]}/{k[1]} differs from kubectl kustomize", file=sys.stderr)
    return 1 if diffs else 0


if __name__ == "__main__":
    if sys.argv[1] == "--compare":
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    yaml.safe_dump_all(render(sys.argv[1]), sys.stdout, sort_keys=False)

// Validates custom resources against their CRD schemas (tests/deploy/validate.sh runs it).
//   node tests/deploy/check_crds.mjs CRDS.jsonl
// Each line: {"where": "...", "object": {...}} as check_manifests.py wrote it. The schemas are
// those of @kubernetes-models/prometheus-operator (generated from prometheus-operator's Go API
// types): types, enums, patterns and required fields are checked; unknown fields are not (the
// generated validators allow additional properties). Exit status 1 on any finding.
import { readFileSync } from "node:fs";
import { ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor";

const models = { "monitoring.coreos.com/v1/ServiceMonitor": ServiceMonitor };

const lines = readFileSync(process.argv[2], "utf8").split("\n").filter((l) => l.trim());
let errors = 0;
for (const line of lines) {
  const { where, object } = JSON.parse(line);
  const Model = models[`${object.apiVersion}/${object.kind}`];
  if (!Model) {
    console.error(`INVALID ${where}: no CRD schema for ${object.apiVersion} ${object.kind}`);
    errors++;
    continue;
  }
  try {
    new Model(object).validate();
  } catch (e) {
    console.error(`INVALID ${where}: ${e.message}`);
    errors++;
  }
}
console.log(`check_crds: ${lines.length} custom resource(s): ${errors} finding(s)`);
process.exit(errors ? 1 : 0);

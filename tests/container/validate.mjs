// Validates Kubernetes manifests offline against the API's schemas (kubernetes-models: JSON
// schemas compiled from the Kubernetes OpenAPI document), as `kubectl apply` with an API server
// would, unknown fields included (the API server's strict field validation refuses them; the
// schemas alone allow any):
//   node tests/container/validate.mjs FILE.yaml...
// Prints one line per document; exits 1 naming every error (file, document, field, reason).
// scripts/setup installs its packages (npm ci in tests/container/).
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";

// The schema module of an apiVersion and kind: apps/v1 StatefulSet -> IoK8sApiAppsV1StatefulSet.
function schemaName(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["core", apiVersion];
  const capital = (s) => s.charAt(0).toUpperCase() + s.slice(1);
  return `IoK8sApi${capital(group.split(".")[0])}${capital(version)}${kind}`;
}

// A deep copy of `value` whose objects record the fields that the validator reads: a field that
// it never reads is none of the schema's.
function watched(value, path, objects) {
  if (value === null || typeof value !== "object") return value;
  if (Array.isArray(value)) return value.map((v, i) => watched(v, `${path}/${i}`, objects));
  const read = new Set();
  const copy = {};
  for (const [k, v] of Object.entries(value)) copy[k] = watched(v, `${path}/${k}`, objects);
  objects.push({ path, keys: Object.keys(value), read });
  return new Proxy(copy, {
    get(target, key, receiver) {
      if (typeof key === "string") read.add(key);
      return Reflect.get(target, key, receiver);
    },
  });
}

// What a schema error of the compiled validators means (they carry no message of their own).
function reason({ keyword, params }) {
  switch (keyword) {
    case "enum": return `must be one of ${params.allowedValues.join(", ")}`;
    case "type": return `must be of type ${params.type}`;
    case "required": return `misses the required field ${params.missingProperty}`;
    case "format": return `must be of format ${params.format}`;
    default: return `fails ${keyword} ${JSON.stringify(params)}`;
  }
}

async function check(file, index, doc) {
  const where = `${file}: document ${index + 1}`;
  if (!doc || typeof doc !== "object" || !doc.apiVersion || !doc.kind)
    return [`${where}: not a Kubernetes object (no apiVersion and kind)`];
  const name = schemaName(doc.apiVersion, doc.kind);
  let validate;
  try {
    ({ validate } = await import(`kubernetes-models/_schemas/${name}`));
  } catch {
    return [`${where}: no schema for ${doc.apiVersion} ${doc.kind}`];
  }
  const objects = [];
  const what = `${where} (${doc.kind} ${doc.metadata?.name})`;
  const errors = validate(watched(doc, "", objects))
    ? []
    : validate.errors.map((e) => `${what}: ${e.instancePath || "/"} ${reason(e)}`);
  // The top level's apiVersion and kind are read by the model classes, not the schema.
  const unknown = [];
  for (const o of objects.reverse())  // outer objects first: what is inside an unknown field is not
    for (const k of o.keys) {         // reported again
      const path = `${o.path}/${k}`;
      if (o.read.has(k) || (o.path === "" && (k === "apiVersion" || k === "kind"))) continue;
      if (unknown.some((u) => path.startsWith(`${u}/`))) continue;
      unknown.push(path);
      errors.push(`${what}: ${path} is not a field of ${doc.kind}`);
    }
  if (errors.length === 0)
    console.log(`${where}: ${doc.apiVersion} ${doc.kind} ${doc.metadata?.name}: valid`);
  return errors;
}

const files = process.argv.slice(2);
if (files.length === 0) {
  console.error("usage: node validate.mjs FILE.yaml...");
  process.exit(2);
}
const errors = [];
for (const file of files) {
  // YAML 1.1, as Kubernetes reads it (0400 is octal).
  const docs = parseAllDocuments(readFileSync(file, "utf8"), { version: "1.1" });
  for (const [i, d] of docs.entries()) {
    if (d.errors.length) errors.push(`${file}: document ${i + 1}: ${d.errors[0].message}`);
    else if (d.contents !== null) errors.push(...(await check(file, i, d.toJS())));
  }
}
for (const e of errors) console.error(e);
process.exit(errors.length ? 1 : 0);

#!/usr/bin/env python3
"""Writes the compact schema catalogue kix-validate embeds.

Input: the api/openapi-spec/v3 directory of k8s.io/kubernetes@<version>, the
enum values dumped by enums.go (the published files leave them out) and the
version. Output (stdout): JSON with the kinds (group/version/kind -> model
name) and the models they reach, keeping only what validation reads:
type, format, properties, required, items, additionalProperties, $ref, enum,
scalar defaults, list types and map keys. Descriptions are dropped.
"""
import glob
import json
import os
import sys

spec_dir, enums_file, version = sys.argv[1:4]

models = {}
for path in sorted(glob.glob(os.path.join(spec_dir, "*.json"))):
    with open(path) as f:
        doc = json.load(f)
    for name, schema in doc.get("components", {}).get("schemas", {}).items():
        models.setdefault(name, schema)
with open(enums_file) as f:
    enums = json.load(f)

REF = "#/components/schemas/"


def compact(schema, model=None):
    """The validation-relevant part of one schema node."""
    if "allOf" in schema:
        (only,) = schema["allOf"]  # k8s wraps a single $ref in allOf
        schema = dict(schema, **only)
        del schema["allOf"]
    out = {}
    if "$ref" in schema:
        out["$ref"] = schema["$ref"][len(REF):]
        return out
    fmt = schema.get("format")
    if fmt == "int-or-string":
        return {"x-kubernetes-int-or-string": True}
    if "oneOf" in schema:
        types = sorted(s.get("type") for s in schema["oneOf"])
        if types == ["number", "string"]:
            return {"format": "quantity"}
        raise SystemExit(f"unexpected oneOf in {model}: {schema['oneOf']}")
    kind = schema.get("type")
    if kind is None:
        return {}  # any JSON value (apiextensions JSON, ...)
    out["type"] = kind
    if fmt in ("int32", "int64", "byte", "date-time"):
        out["format"] = fmt
    default = schema.get("default")
    if default is not None and not isinstance(default, (dict, list)):
        out["default"] = default
    if kind == "object":
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if props is None and extra is None:
            out["x-kubernetes-preserve-unknown-fields"] = True  # RawExtension, FieldsV1, ...
        if props is not None:
            model_enums = enums.get(model, {}) if model else {}
            out["properties"] = {}
            for prop, sub in sorted(props.items()):
                node = compact(sub)
                if prop in model_enums:
                    node["enum"] = model_enums[prop]
                if prop + "[]" in model_enums and "items" in node:
                    node["items"]["enum"] = model_enums[prop + "[]"]
                out["properties"][prop] = node
        if isinstance(extra, dict):
            out["additionalProperties"] = compact(extra)
        if schema.get("required"):
            out["required"] = sorted(schema["required"])
    if kind == "array":
        out["items"] = compact(schema.get("items", {}))
        if "x-kubernetes-list-type" in schema:
            out["x-kubernetes-list-type"] = schema["x-kubernetes-list-type"]
        if "x-kubernetes-list-map-keys" in schema:
            out["x-kubernetes-list-map-keys"] = schema["x-kubernetes-list-map-keys"]
    return out


kinds = {}
for name, schema in models.items():
    gvks = schema.get("x-kubernetes-group-version-kind", [])
    if len(gvks) != 1 or name.endswith("List"):
        continue  # meta types shared by every group (DeleteOptions, ...)
    (gvk,) = gvks
    api_version = gvk["version"] if not gvk["group"] else f"{gvk['group']}/{gvk['version']}"
    kinds[f"{api_version}/{gvk['kind']}"] = name

definitions = {}
todo = sorted(set(kinds.values()) | {"io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"})
while todo:
    name = todo.pop()
    if name in definitions:
        continue
    definitions[name] = compact(models[name], name)
    stack = [definitions[name]]
    while stack:
        node = stack.pop()
        if "$ref" in node:
            todo.append(node["$ref"])
        stack.extend(node.get("properties", {}).values())
        for key in ("items", "additionalProperties"):
            if key in node:
                stack.append(node[key])

json.dump(
    {"kubernetesVersion": version, "kinds": dict(sorted(kinds.items())), "definitions": dict(sorted(definitions.items()))},
    sys.stdout,
    separators=(",", ":"),
)
sys.stdout.write("\n")

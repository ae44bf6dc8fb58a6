//! Upgrades of CustomResourceDefinitions the build changes: what each version
//! of the CRD gains or loses, and which changes can lose stored objects.
//!
//! A version that `status.storedVersions` still lists may hold objects in
//! etcd. Removing it from `spec.versions` is refused by the apiserver (it
//! would leave those objects unreadable), and `served: false` on it hides the
//! objects stored in it from every client of that version. Both are
//! destructive: the plan names the CRD, the version and how many objects of
//! the CRD exist, and a deploy needs `--accept-migrations`. A removal the
//! apiserver would refuse is refused up front, before anything is applied,
//! with the steps that make it possible.
//!
//! Reads: one GET per CRD the plan updates, and, when a change is
//! destructive, one metadata LIST with `limit=1` (the apiserver's
//! `remainingItemCount` gives the rest).

use std::collections::{BTreeMap, BTreeSet};

use kix_manifest::ObjectKey;
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use serde_json::Value;

use crate::desired::Desired;
use crate::error::{EngineError, Result};
use crate::plan_object::{Action, PlannedObject};

pub use crate::plan_value::{CrdUpgrade, Hazard, SchemaChange, VersionHazard, refusals};

/// The note of a CRD whose dry-run the apiserver refused for removing a
/// stored version.
pub const NOTE_STORED_REMOVED: &str =
    "the apiserver refuses it: it removes a version status.storedVersions lists";

/// The apiserver's refusal of a CRD update that removes a stored version
/// (`status.storedVersions[0]: Invalid value: "v1alpha1": must appear in
/// spec.versions`).
pub fn is_stored_version_removal(status: &kube::core::Status) -> bool {
    status.code == 422 && status.message.contains("status.storedVersions")
}

/// The upgrades of the CRDs among `planned` that the deploy writes to an
/// existing CRD (update, adopt, replace, conflict).
pub async fn analyse(
    client: &Client,
    desired: &[Desired],
    planned: &[&PlannedObject],
) -> Result<Vec<CrdUpgrade>> {
    // Read raw, not typed: the typed schema turns `minimum: 1` into 1.0,
    // which would show as a change.
    let crds = ApiResource {
        group: "apiextensions.k8s.io".into(),
        version: "v1".into(),
        api_version: "apiextensions.k8s.io/v1".into(),
        kind: "CustomResourceDefinition".into(),
        plural: "customresourcedefinitions".into(),
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &crds);
    // Looked up by key: a scan of the desired objects per changed object
    // was 25 million key comparisons for 500 changes among 50,000.
    let desired_crds: BTreeMap<&ObjectKey, &Desired> = desired
        .iter()
        .filter(|d| d.is_crd())
        .map(|d| (&d.key, d))
        .collect();
    let mut out = Vec::new();
    for o in planned {
        if !matches!(
            o.action,
            Action::Update | Action::Adopt | Action::Replace | Action::Conflict
        ) {
            continue;
        }
        let Some(d) = desired_crds.get(&o.key) else {
            continue;
        };
        let live = api
            .get_opt(&d.key.name)
            .await
            .map_err(|source| EngineError::Object {
                action: "reading",
                key: d.key.clone(),
                source,
            })?;
        let Some(live) = live else { continue };
        let live = serde_json::to_value(live).unwrap_or(Value::Null);
        let mut upgrade = compare(&d.key, &live, &d.manifest());
        if upgrade.changes.is_empty() && upgrade.destructive.is_empty() {
            continue;
        }
        if !upgrade.destructive.is_empty() {
            upgrade.objects = Some(count(client, &live).await);
        }
        // Serving a stored version stops being a hazard when nothing is stored.
        if upgrade.objects == Some(0) {
            upgrade
                .destructive
                .retain(|h| h.hazard != Hazard::NotServed);
        }
        out.push(upgrade);
    }
    Ok(out)
}

/// Drops the generic diff under `spec.versions` of each CRD with an upgrade:
/// its per-version changes say the same, by field instead of list index.
pub fn trim_changes(packages: &mut [crate::plan_object::PackagePlan], upgrades: &[CrdUpgrade]) {
    for o in packages.iter_mut().flat_map(|p| &mut p.objects) {
        if upgrades.iter().any(|u| u.key == o.key) {
            o.changes.retain(|c| !c.path.starts_with("spec.versions"));
        }
    }
}

/// The upgrade from `live` to the desired manifest (objects not counted).
pub fn compare(key: &ObjectKey, live: &Value, desired: &Value) -> CrdUpgrade {
    let stored: Vec<String> = live["status"]["storedVersions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    let versions = |crd: &Value| -> BTreeMap<String, Value> {
        crd["spec"]["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| Some((v["name"].as_str()?.to_string(), v.clone())))
            .collect()
    };
    let (old, new) = (versions(live), versions(desired));
    let mut changes = Vec::new();
    let mut destructive = Vec::new();
    let names: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    for name in names {
        let is_stored = stored.contains(name);
        let change = |path: &str, change: String| SchemaChange {
            version: name.clone(),
            path: path.to_string(),
            change,
        };
        match (old.get(name), new.get(name)) {
            (None, Some(_)) => changes.push(change("", "added".into())),
            (Some(_), None) => {
                changes.push(change("", "removed".into()));
                if is_stored {
                    destructive.push(VersionHazard {
                        version: name.clone(),
                        hazard: Hazard::Removed,
                    });
                }
            }
            (Some(o), Some(n)) => {
                for flag in ["served", "storage", "deprecated"] {
                    let (a, b) = (flag_of(o, flag), flag_of(n, flag));
                    if a != b {
                        changes.push(change("", format!("{flag} {a} → {b}")));
                    }
                }
                if flag_of(o, "served") && !flag_of(n, "served") && is_stored {
                    destructive.push(VersionHazard {
                        version: name.clone(),
                        hazard: Hazard::NotServed,
                    });
                }
                let mut fields = Vec::new();
                schema_diff(
                    "",
                    &o["schema"]["openAPIV3Schema"],
                    &n["schema"]["openAPIV3Schema"],
                    &mut fields,
                );
                changes.extend(fields.into_iter().map(|(path, c)| change(&path, c)));
            }
            (None, None) => {}
        }
    }
    let storage_version = new
        .iter()
        .find(|(_, v)| flag_of(v, "storage"))
        .map(|(name, _)| name.clone());
    CrdUpgrade {
        key: key.clone(),
        stored_versions: stored,
        storage_version,
        objects: None,
        changes,
        destructive,
    }
}

fn flag_of(version: &Value, flag: &str) -> bool {
    version[flag].as_bool().unwrap_or(false)
}

/// Keys of a schema node compared by their nested structure, not as values.
const NESTED: [&str; 4] = ["properties", "items", "additionalProperties", "required"];
/// Keys whose changes do not change what is stored or accepted.
const IGNORED: [&str; 2] = ["description", "example"];

/// The property changes from schema `old` to `new` at field `path`.
fn schema_diff(path: &str, old: &Value, new: &Value, out: &mut Vec<(String, String)>) {
    let at = |p: &str| {
        if p.is_empty() {
            "(root)".to_string()
        } else {
            p.to_string()
        }
    };
    let keys: BTreeSet<&String> = old
        .as_object()
        .into_iter()
        .chain(new.as_object())
        .flat_map(|m| m.keys())
        .filter(|k| !NESTED.contains(&k.as_str()) && !IGNORED.contains(&k.as_str()))
        .collect();
    for key in keys {
        let (a, b) = (old.get(key.as_str()), new.get(key.as_str()));
        if a != b {
            out.push((at(path), format!("{key} {} → {}", shown(a), shown(b))));
        }
    }
    let required = |v: &Value| -> BTreeSet<String> {
        v["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r.as_str().map(str::to_string))
            .collect()
    };
    let (req_old, req_new) = (required(old), required(new));
    for name in req_new.difference(&req_old) {
        out.push((join(path, name), "now required".into()));
    }
    for name in req_old.difference(&req_new) {
        out.push((join(path, name), "no longer required".into()));
    }
    let empty = serde_json::Map::new();
    let props = |v: &Value| v["properties"].as_object().unwrap_or(&empty).clone();
    let (p_old, p_new) = (props(old), props(new));
    let names: BTreeSet<&String> = p_old.keys().chain(p_new.keys()).collect();
    for name in names {
        let field = join(path, name);
        match (p_old.get(name.as_str()), p_new.get(name.as_str())) {
            (None, Some(n)) => out.push((field, added(n))),
            (Some(_), None) => out.push((field, "removed".into())),
            (Some(o), Some(n)) => schema_diff(&field, o, n, out),
            (None, None) => {}
        }
    }
    nested(&format!("{path}[]"), &old["items"], &new["items"], out);
    nested(
        &format!("{}.*", at(path)),
        &old["additionalProperties"],
        &new["additionalProperties"],
        out,
    );
}

/// `items` or `additionalProperties`: a schema to walk, or a value (a bool).
fn nested(path: &str, old: &Value, new: &Value, out: &mut Vec<(String, String)>) {
    match (old, new) {
        (Value::Null, Value::Null) => {}
        (Value::Object(_), Value::Object(_)) => schema_diff(path, old, new, out),
        (Value::Null, n) => out.push((path.to_string(), added(n))),
        (_, Value::Null) => out.push((path.to_string(), "removed".into())),
        (o, n) if o != n => out.push((path.to_string(), format!("{} → {}", o, n))),
        _ => {}
    }
}

fn added(schema: &Value) -> String {
    match schema["type"].as_str() {
        Some(t) => format!("added ({t})"),
        None => "added".into(),
    }
}

fn shown(v: Option<&Value>) -> String {
    match v {
        None => "∅".into(),
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
    }
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

/// The custom resources of `crd` (all namespaces), through a version it
/// serves; none when it serves none.
async fn count(client: &Client, crd: &Value) -> u32 {
    let spec = &crd["spec"];
    let Some(version) = spec["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| flag_of(v, "served"))
        .and_then(|v| v["name"].as_str())
    else {
        return 0;
    };
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let group = text(&spec["group"]);
    let resource = ApiResource {
        api_version: format!("{group}/{version}"),
        group,
        version: version.to_string(),
        kind: text(&spec["names"]["kind"]),
        plural: text(&spec["names"]["plural"]),
    };
    crate::contents::how_many(&Api::<DynamicObject>::all_with(client.clone(), &resource)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key() -> ObjectKey {
        ObjectKey {
            group: "apiextensions.k8s.io".into(),
            kind: "CustomResourceDefinition".into(),
            namespace: None,
            name: "widgets.example.com".into(),
        }
    }

    fn crd(versions: Value, stored: &[&str]) -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"kind": "Widget", "plural": "widgets"}, "versions": versions},
            "status": {"storedVersions": stored},
        })
    }

    fn version(name: &str, served: bool, storage: bool, spec: Value) -> Value {
        json!({"name": name, "served": served, "storage": storage,
            "schema": {"openAPIV3Schema": {"type": "object",
                "properties": {"spec": spec}}}})
    }

    fn lines(u: &CrdUpgrade) -> Vec<String> {
        u.changes.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_schema_change_is_a_field_diff_and_not_destructive() {
        let old = json!({"type": "object", "required": ["size"], "properties": {
            "replicas": {"type": "integer"}, "size": {"type": "string"},
            "ports": {"type": "array", "items": {"type": "object",
                "properties": {"name": {"type": "string"}}}}}});
        let new = json!({"type": "object", "properties": {
            "replicas": {"type": "string", "description": "ignored"},
            "color": {"type": "string"},
            "ports": {"type": "array", "items": {"type": "object",
                "properties": {"name": {"type": "string", "maxLength": 15}}}}}});
        let live = crd(json!([version("v1", true, true, old)]), &["v1"]);
        let desired = json!({"spec": {"versions": [version("v1", true, true, new)]}});
        let u = compare(&key(), &live, &desired);
        assert_eq!(
            lines(&u),
            [
                "v1: spec.size: no longer required",
                "v1: spec.color: added (string)",
                "v1: spec.ports[].name: maxLength ∅ → 15",
                "v1: spec.replicas: type integer → string",
                "v1: spec.size: removed",
            ]
        );
        assert!(u.destructive.is_empty());
    }

    #[test]
    fn removing_or_not_serving_a_stored_version_is_destructive() {
        let spec = json!({"type": "object"});
        let live = crd(
            json!([
                version("v1alpha1", true, true, spec.clone()),
                version("v1beta1", true, false, spec.clone()),
                version("v1", true, false, spec.clone())
            ]),
            &["v1alpha1", "v1beta1"],
        );
        let desired = json!({"spec": {"versions": [
            version("v1beta1", false, false, spec.clone()),
            version("v1", true, true, spec.clone()),
            version("v2", true, false, spec)]}});
        let u = compare(&key(), &live, &desired);
        assert_eq!(
            lines(&u),
            [
                "v1: storage false → true",
                "v1alpha1: removed",
                "v1beta1: served true → false",
                "v2: added",
            ]
        );
        assert_eq!(
            u.actions().collect::<Vec<_>>(),
            [
                "drop stored version v1alpha1 of CustomResourceDefinition.apiextensions.k8s.io/widgets.example.com",
                "stop serving stored version v1beta1 of CustomResourceDefinition.apiextensions.k8s.io/widgets.example.com",
            ]
        );
        let refusal = u.refusal().expect("the apiserver refuses it");
        assert!(refusal.contains("v1alpha1"), "{refusal}");
        assert!(refusal.contains(r#"["v1beta1", "v1"]"#), "{refusal}");
    }

    #[test]
    fn removing_a_version_nothing_is_stored_in_is_not_destructive() {
        let spec = json!({"type": "object"});
        let live = crd(
            json!([
                version("v1beta1", true, false, spec.clone()),
                version("v1", true, true, spec.clone())
            ]),
            &["v1"],
        );
        let desired = json!({"spec": {"versions": [version("v1", true, true, spec)]}});
        let u = compare(&key(), &live, &desired);
        assert_eq!(lines(&u), ["v1beta1: removed"]);
        assert!(u.destructive.is_empty());
        assert!(u.refusal().is_none());
    }
}

//! Published manifests carry fields only the API server sets (a
//! `kubectl get -o yaml` dump, kube-prometheus' `metadata.generation: 1`):
//! kubectl takes them and the server ignores them. kix drops them from
//! what it applies, so they are never sent and never drift, and the tree
//! reader warns once per file naming them ([`DroppedFields`]).
//!
//! Dropped: `metadata.generation`, `creationTimestamp`, `uid`,
//! `resourceVersion`, `selfLink`, `managedFields`, and `status` where the
//! kind serves it as a subresource (every built-in API group; a custom
//! resource whose CRD in the same build declares `subresources.status`).
//! `deletionTimestamp` and `deletionGracePeriodSeconds` stay errors (see
//! `decode`), as do changes of what the object is (kind, name, namespace).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::object::Object;
use crate::tree::Package;

/// The metadata fields only the API server sets.
pub const SERVER_SET_METADATA: [&str; 6] = [
    "creationTimestamp",
    "generation",
    "managedFields",
    "resourceVersion",
    "selfLink",
    "uid",
];

/// The fields dropped from one resource file's objects.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DroppedFields {
    /// Relative to the build's root.
    pub file: PathBuf,
    /// `metadata.generation`, ..., `status`: sorted.
    pub fields: BTreeSet<&'static str>,
}

/// `<file>: dropped metadata.generation, status, which only the API server sets`
impl fmt::Display for DroppedFields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fields: Vec<&str> = self.fields.iter().copied().collect();
        write!(
            f,
            "{}: dropped {}, which only the API server sets",
            self.file.display(),
            fields.join(", ")
        )
    }
}

/// Whether every kind of this API group serves `status` as a subresource
/// (the built-in groups: a kind there without a status subresource has no
/// `status` field at all).
pub fn status_is_a_subresource(group: &str) -> bool {
    group.is_empty()
        || !group.contains('.')
        || group.ends_with(".k8s.io")
        || group == "apiextensions.k8s.io"
}

/// Removes from one object what only the API server sets (its metadata
/// fields; `status` where its group is built-in), adding the names of
/// those that held a value to `dropped`.
#[doc(hidden)]
pub fn drop_server_set(object: &mut Map<String, Value>, dropped: &mut BTreeSet<&'static str>) {
    if let Some(Value::Object(metadata)) = object.get_mut("metadata") {
        for (field, name) in SERVER_SET_METADATA.iter().zip(METADATA_NAMES) {
            if metadata.remove(*field).is_some_and(|v| !v.is_null()) {
                dropped.insert(name);
            }
        }
    }
    let group = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .and_then(|v| v.rsplit_once('/'))
        .map_or("", |(group, _)| group);
    if status_is_a_subresource(group) && object.remove("status").is_some_and(|v| !v.is_null()) {
        dropped.insert("status");
    }
}

const METADATA_NAMES: [&str; 6] = [
    "metadata.creationTimestamp",
    "metadata.generation",
    "metadata.managedFields",
    "metadata.resourceVersion",
    "metadata.selfLink",
    "metadata.uid",
];

/// Drops `status` from the custom resources whose CRD, in this build,
/// serves it as a subresource for their version (known only once every
/// file is read), adding each file to `dropped`.
pub(crate) fn drop_custom_status(
    packages: &mut [Package],
    dropped: &mut BTreeMap<PathBuf, BTreeSet<&'static str>>,
) {
    let with_status = crd_status_versions(packages);
    if with_status.is_empty() {
        return;
    }
    for object in packages.iter_mut().flat_map(|p| p.objects.iter_mut()) {
        let version = object.api_version.rsplit('/').next().unwrap_or_default();
        // A few CRD versions against every object: compared, not allocated.
        let served_with_status = with_status.iter().any(|(group, kind, v)| {
            *group == object.key.group && *kind == object.key.kind && v == version
        });
        if !served_with_status {
            continue;
        }
        let mut manifest = object.manifest();
        let Some(map) = manifest.as_object_mut() else {
            continue;
        };
        if map.remove("status").is_none() {
            continue;
        }
        let text = serde_json::to_string(&manifest).unwrap_or_default();
        *object = Object::new(
            object.key.clone(),
            &manifest,
            text,
            object.source.clone(),
            object.document,
            object.package.clone(),
        );
        dropped
            .entry(object.source.clone())
            .or_default()
            .insert("status");
    }
}

/// `(group, kind, version)` of every version that the build's CRDs serve
/// with a status subresource.
fn crd_status_versions(packages: &[Package]) -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    let crds = packages
        .iter()
        .flat_map(|p| &p.objects)
        .filter(|o| o.key.group_kind() == crate::group_kind::CUSTOM_RESOURCE_DEFINITION);
    for crd in crds {
        let crd = crd.manifest();
        let text = |pointer: &str| {
            crd.pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let (group, kind) = (text("/spec/group"), text("/spec/names/kind"));
        let versions = crd.pointer("/spec/versions").and_then(Value::as_array);
        for version in versions.into_iter().flatten() {
            if version.pointer("/subresources/status").is_some()
                && let Some(name) = version.get("name").and_then(Value::as_str)
            {
                out.insert((group.clone(), kind.clone(), name.to_owned()));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn status_subresource_groups() {
        for group in [
            "",
            "apps",
            "batch",
            "networking.k8s.io",
            "apiextensions.k8s.io",
            "apiregistration.k8s.io",
        ] {
            assert!(status_is_a_subresource(group), "{group}");
        }
        for group in ["argoproj.io", "cert-manager.io", "example.com"] {
            assert!(!status_is_a_subresource(group), "{group}");
        }
    }

    #[test]
    fn null_fields_are_dropped_without_a_warning() {
        let mut object = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "creationTimestamp": null, "uid": "u"}, "status": null});
        let mut dropped = BTreeSet::new();
        if let Some(map) = object.as_object_mut() {
            drop_server_set(map, &mut dropped);
        }
        assert_eq!(
            object,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})
        );
        assert_eq!(dropped, BTreeSet::from(["metadata.uid"]));
    }
}

//! The desired state: the build's objects with their API resource, their
//! namespace settled by the kind's scope, and kix's ownership labels and digest.

use std::path::PathBuf;

use kix_api::{
    ANNOTATION_DIGEST, LABEL_MANAGED_BY, LABEL_OWNER, LABEL_PACKAGE, MANAGED_BY_VALUE, owner_value,
};
use kix_manifest::{Build, ObjectKey, canonical_digest, kind_rank};
use serde_json::{Value, json};

use crate::error::{EngineError, Result};
use crate::resources::{Resource, Resources, scoped_key};

/// Namespace for a namespaced object that names none and whose package sets none.
pub const DEFAULT_NAMESPACE: &str = "default";

#[derive(Debug, Clone)]
pub struct Desired {
    pub key: ObjectKey,
    /// The Kix cluster of the build: its field manager applies the object.
    pub cluster: String,
    pub api_version: String,
    pub package: String,
    pub resource: Resource,
    /// The manifest as kix applies it, labels and digest included, the
    /// package's handed-off fields removed; the activations annotation is
    /// added at apply time. Kept as compact JSON text ([`Desired::manifest`]
    /// reads it): a `Value` tree of ordered maps is several times its
    /// text, and a plan needs the tree only of the objects it writes.
    manifest: Box<str>,
    /// Fields of the package's handoff rules that cover this object.
    pub handed_off: Vec<String>,
    /// Digest of the manifest as applied (without the digest annotation and
    /// the activations annotation): the next plan's fast path.
    pub digest: String,
    pub source: PathBuf,
    pub rank: u8,
}

impl Desired {
    /// The manifest as kix applies it (see the field).
    pub fn manifest(&self) -> Value {
        // It was written from a Value: it reads back.
        serde_json::from_str(&self.manifest).unwrap_or(Value::Null)
    }

    pub fn is_crd(&self) -> bool {
        self.key.kind == "CustomResourceDefinition" && self.key.group == "apiextensions.k8s.io"
    }

    pub fn is_namespace(&self) -> bool {
        self.key.kind == "Namespace" && self.key.group.is_empty()
    }
}

/// Resolves every object of the build. Fails, naming the file, on a kind that
/// neither the apiserver nor the build's CRDs define.
pub async fn desired_objects(build: &Build, resources: &mut Resources) -> Result<Vec<Desired>> {
    resources.learn_build_crds(build);
    let mut out = Vec::with_capacity(build.object_count());
    for object in build.objects() {
        let resource = resources
            .get(&object.api_version, &object.key.kind)
            .await?
            .ok_or_else(|| EngineError::UnknownKind {
                api_version: object.api_version.clone(),
                kind: object.key.kind.clone(),
                source_file: object.source.display().to_string(),
            })?;
        let mut key = scoped_key(&object.key, resource.namespaced);
        let mut manifest = object.manifest();
        if resource.namespaced {
            let ns = key
                .namespace
                .clone()
                .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string());
            manifest["metadata"]["namespace"] = json!(ns);
            key.namespace = Some(ns);
        } else if let Some(meta) = manifest["metadata"].as_object_mut() {
            meta.remove("namespace");
        }
        // Handed-off fields are never applied, so kix never owns them.
        let handoff = build.package(&object.package).map(|p| p.handoff.as_slice());
        let mut handed_off = Vec::new();
        for rule in handoff
            .unwrap_or_default()
            .iter()
            .filter(|r| r.covers(&key))
        {
            rule.strip(&mut manifest);
            handed_off.extend(rule.fields.iter().cloned());
        }
        let digest = stamp(&mut manifest, &key, &object.package);
        let manifest = manifest.to_string().into_boxed_str();
        out.push(Desired {
            rank: kind_rank(&key.group, &key.kind),
            cluster: build.cluster.clone(),
            key,
            api_version: object.api_version.clone(),
            package: object.package.clone(),
            resource,
            manifest,
            handed_off,
            digest,
            source: object.source.clone(),
        });
    }
    Ok(out)
}

/// Adds kix's labels, computes the digest, adds the digest annotation.
fn stamp(manifest: &mut Value, key: &ObjectKey, package: &str) -> String {
    let meta = &mut manifest["metadata"];
    if !meta["labels"].is_object() {
        meta["labels"] = json!({});
    }
    meta["labels"][LABEL_MANAGED_BY] = json!(MANAGED_BY_VALUE);
    meta["labels"][LABEL_PACKAGE] = json!(package);
    meta["labels"][LABEL_OWNER] = json!(owner_value(
        &key.group,
        &key.kind,
        key.namespace.as_deref(),
        &key.name
    ));
    let digest = canonical_digest(manifest);
    let meta = &mut manifest["metadata"];
    if !meta["annotations"].is_object() {
        meta["annotations"] = json!({});
    }
    meta["annotations"][ANNOTATION_DIGEST] = json!(digest);
    digest
}

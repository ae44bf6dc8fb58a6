//! The desired state: the build's objects with their API resource, their
//! namespace settled by the kind's scope, and kix's ownership labels and digest.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use kix_api::{
    ANNOTATION_DIGEST, LABEL_MANAGED_BY, LABEL_OWNER, LABEL_PACKAGE, MANAGED_BY_VALUE, owner_value,
};
use kix_manifest::{Build, Object, ObjectKey, canonical_digest, kind_rank};
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
    /// Shared by every object of its kind.
    pub resource: Arc<Resource>,
    /// The manifest as kix applies it, labels and digest included, the
    /// package's handed-off fields removed; the activations annotation is
    /// added at apply time. Kept as compact JSON text ([`Desired::manifest`]
    /// reads it): a `Value` tree of ordered maps is several times its
    /// text, and a plan needs the tree only of the objects it writes.
    manifest: Box<str>,
    /// Its manifest's [`crate::ownership::skeleton`], shared by the objects
    /// of one shape: whether kix still owns what it applied is decided once
    /// per shape and field set.
    pub(crate) shape: Arc<str>,
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
    // Each kind is resolved once (discovery is async); the objects are then
    // made on every core (a manifest read, stamped and hashed each).
    let mut kinds: HashMap<(&str, &str), Arc<Resource>> = HashMap::new();
    for object in build.objects() {
        let kind = (object.api_version.as_str(), object.key.kind.as_str());
        if kinds.contains_key(&kind) {
            continue;
        }
        let resource = resources
            .get(&object.api_version, &object.key.kind)
            .await?
            .ok_or_else(|| EngineError::UnknownKind {
                api_version: object.api_version.clone(),
                kind: object.key.kind.clone(),
                source_file: object.source.display().to_string(),
            })?;
        kinds.insert(kind, Arc::new(resource));
    }
    let objects: Vec<&Object> = build.objects().collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per_thread = objects.len().div_ceil(threads).max(1);
    let made = std::thread::scope(|scope| {
        let parts: Vec<_> = objects
            .chunks(per_thread)
            .map(|part| {
                let kinds = &kinds;
                scope.spawn(move || {
                    let mut shapes = Shapes::default();
                    part.iter()
                        .map(|object| {
                            let kind = (object.api_version.as_str(), object.key.kind.as_str());
                            // Every kind was resolved above.
                            let resource = Arc::clone(&kinds[&kind]);
                            desired_object(build, object, resource, &mut shapes)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        parts
            .into_iter()
            .map(|part| part.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect::<Vec<_>>()
    });
    Ok(made.into_iter().flatten().collect())
}

/// Each skeleton once, shared by the objects that have it.
type Shapes = HashMap<String, Arc<str>>;

/// One object of the build as kix applies it.
fn desired_object(
    build: &Build,
    object: &Object,
    resource: Arc<Resource>,
    shapes: &mut Shapes,
) -> Desired {
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
    let skeleton = crate::ownership::skeleton(&manifest);
    let shape = match shapes.get(&skeleton) {
        Some(shape) => Arc::clone(shape),
        None => Arc::clone(shapes.entry(skeleton.clone()).or_insert(skeleton.into())),
    };
    Desired {
        shape,
        rank: kind_rank(&key.group, &key.kind),
        cluster: build.cluster.clone(),
        key,
        api_version: object.api_version.clone(),
        package: object.package.clone(),
        resource,
        // Written straight to text (`Display` goes through a formatter).
        manifest: serde_json::to_string(&manifest)
            .unwrap_or_default()
            .into_boxed_str(),
        handed_off,
        digest,
        source: object.source.clone(),
    }
}

/// Adds kix's labels, computes the digest, adds the digest annotation.
fn stamp(manifest: &mut Value, key: &ObjectKey, package: &str) -> String {
    // Each map is looked up once (a key is hashed on every index).
    let labels = object_at(manifest, "labels");
    labels.insert(LABEL_MANAGED_BY.into(), json!(MANAGED_BY_VALUE));
    labels.insert(LABEL_PACKAGE.into(), json!(package));
    let owner = owner_value(&key.group, &key.kind, key.namespace.as_deref(), &key.name);
    labels.insert(LABEL_OWNER.into(), json!(owner));
    let digest = canonical_digest(manifest);
    object_at(manifest, "annotations").insert(ANNOTATION_DIGEST.into(), json!(digest));
    digest
}

/// The map `metadata.<field>` of `manifest`, made one if it is not.
fn object_at<'m>(manifest: &'m mut Value, field: &str) -> &'m mut serde_json::Map<String, Value> {
    let value = &mut manifest["metadata"][field];
    if !value.is_object() {
        *value = json!({});
    }
    match value {
        Value::Object(map) => map,
        _ => unreachable!("made a map above"),
    }
}

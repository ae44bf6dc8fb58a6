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
    /// The build's manifest text, shared with the build: [`Desired::manifest`]
    /// makes the manifest kix applies from it. A `Value` tree of ordered
    /// maps is several times its text, and a plan needs the tree only of
    /// the objects it writes.
    read: Arc<str>,
    /// Its manifest's [`crate::ownership::skeleton`] when asked for
    /// ([`Shapes::Made`]), shared by the objects of one shape: whether kix
    /// still owns what it applied is decided once per shape and field set.
    pub(crate) shape: Option<Arc<str>>,
    /// Fields of the package's handoff rules that cover this object.
    pub handed_off: Vec<String>,
    /// Digest of the manifest as applied (without the digest annotation and
    /// the activations annotation): the next plan's fast path.
    pub digest: String,
    pub source: PathBuf,
    pub rank: u8,
}

impl Desired {
    /// The manifest as kix applies it: labels and digest included, the
    /// package's handed-off fields removed; the activations annotation is
    /// added at apply time.
    pub fn manifest(&self) -> Value {
        let mut manifest = settled(
            &self.read,
            &self.key,
            self.resource.namespaced,
            &self.handed_off,
        );
        stamp_labels(&mut manifest, &self.key, &self.package);
        stamp_digest(&mut manifest, &self.digest);
        manifest
    }

    pub fn is_crd(&self) -> bool {
        self.key.kind == "CustomResourceDefinition" && self.key.group == "apiextensions.k8s.io"
    }

    pub fn is_namespace(&self) -> bool {
        self.key.kind == "Namespace" && self.key.group.is_empty()
    }
}

/// Whether [`desired_objects`] works out each object's shape: only
/// `kix status` reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shapes {
    Made,
    Skipped,
}

/// Resolves every object of the build. Fails, naming the file, on a kind that
/// neither the apiserver nor the build's CRDs define.
pub async fn desired_objects(
    build: &Build,
    resources: &mut Resources,
    shapes: Shapes,
) -> Result<Vec<Desired>> {
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
    Ok(crate::parallel::map_with(
        &objects,
        || (shapes == Shapes::Made).then(KnownShapes::default),
        |known, object| {
            let kind = (object.api_version.as_str(), object.key.kind.as_str());
            // Every kind was resolved above.
            let resource = Arc::clone(&kinds[&kind]);
            desired_object(build, object, resource, known.as_mut())
        },
    ))
}

/// Each skeleton once, shared by the objects that have it.
#[derive(Default)]
struct KnownShapes(HashMap<String, Arc<str>>);

impl KnownShapes {
    fn shared(&mut self, manifest: &Value) -> Arc<str> {
        let skeleton = crate::ownership::skeleton(manifest);
        Arc::clone(
            self.0
                .entry(skeleton)
                .or_insert_with_key(|skeleton| skeleton.as_str().into()),
        )
    }
}

/// One object of the build as kix applies it; its shape when `known` is
/// given ([`Shapes::Made`]).
fn desired_object(
    build: &Build,
    object: &Object,
    resource: Arc<Resource>,
    known: Option<&mut KnownShapes>,
) -> Desired {
    let mut key = scoped_key(&object.key, resource.namespaced);
    if resource.namespaced && key.namespace.is_none() {
        key.namespace = Some(DEFAULT_NAMESPACE.to_string());
    }
    // Handed-off fields are never applied, so kix never owns them.
    let handoff = build.package(&object.package).map(|p| p.handoff.as_slice());
    let handed_off: Vec<String> = handoff
        .unwrap_or_default()
        .iter()
        .filter(|r| r.covers(&key))
        .flat_map(|r| r.fields.iter().cloned())
        .collect();
    let read = Arc::clone(object.manifest_text());
    let mut manifest = settled(&read, &key, resource.namespaced, &handed_off);
    stamp_labels(&mut manifest, &key, &object.package);
    let digest = canonical_digest(&manifest);
    // The shape is of the manifest as applied, digest annotation included.
    let shape = known.map(|known| {
        stamp_digest(&mut manifest, &digest);
        known.shared(&manifest)
    });
    Desired {
        shape,
        rank: kind_rank(&key.group, &key.kind),
        cluster: build.cluster.clone(),
        key,
        api_version: object.api_version.clone(),
        package: object.package.clone(),
        resource,
        read,
        handed_off,
        digest,
        source: object.source.clone(),
    }
}

/// The build's manifest with its namespace settled by the kind's scope and
/// the handed-off fields removed.
fn settled(read: &str, key: &ObjectKey, namespaced: bool, handed_off: &[String]) -> Value {
    // It was written from a Value: it reads back.
    let mut manifest: Value = serde_json::from_str(read).unwrap_or(Value::Null);
    if namespaced {
        manifest["metadata"]["namespace"] =
            json!(key.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE));
    } else if let Some(meta) = manifest["metadata"].as_object_mut() {
        meta.remove("namespace");
    }
    kix_manifest::strip_fields(handed_off, &mut manifest);
    manifest
}

/// Adds kix's labels: the digest is of the manifest with them.
fn stamp_labels(manifest: &mut Value, key: &ObjectKey, package: &str) {
    // Each map is looked up once (a key is hashed on every index).
    let labels = object_at(manifest, "labels");
    labels.insert(LABEL_MANAGED_BY.into(), json!(MANAGED_BY_VALUE));
    labels.insert(LABEL_PACKAGE.into(), json!(package));
    let owner = owner_value(&key.group, &key.kind, key.namespace.as_deref(), &key.name);
    labels.insert(LABEL_OWNER.into(), json!(owner));
}

fn stamp_digest(manifest: &mut Value, digest: &str) {
    object_at(manifest, "annotations").insert(ANNOTATION_DIGEST.into(), json!(digest));
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

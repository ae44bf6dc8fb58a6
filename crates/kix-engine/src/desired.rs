//! The desired state: the build's objects with their API resource, their
//! namespace settled by the kind's scope, and kix's ownership labels and digest.
//!
//! The Secrets of a package's SOPS-encrypted files come decrypted from the
//! tree reader (with the process's age identities); a build whose files
//! were not decrypted is refused here, before any plan, so that nothing is
//! pruned for want of a key. Their digest is keyed (HMAC-SHA256 under a key
//! derived from the age identity that decrypted the file): a reader of the
//! live Secret or of a plan cannot test a guess of a value with it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use kix_api::{
    ANNOTATION_DIGEST, LABEL_MANAGED_BY, LABEL_OWNER, LABEL_PACKAGE, MANAGED_BY_VALUE, owner_value,
};
use kix_manifest::node::{self, Node};
use kix_manifest::secrets::DecryptedValues;
use kix_manifest::secrets::kix_sops::{DigestKey, Reason};
use kix_manifest::{
    Build, Object, ObjectKey, TreeError, canonical_digest, canonical_json, kind_rank,
};
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
    /// From an encrypted file: which values came out of decryption
    /// ([`kix_manifest::secrets::DecryptedValues`]); kix redacts them in
    /// what it prints or stores of the object.
    pub decrypted: Option<Arc<DecryptedValues>>,
    /// Its Helm hook annotations, when it is a hook ([`crate::hooks`]);
    /// boxed: most objects are not.
    pub hook: Option<Box<kix_manifest::helm::Hook>>,
}

impl Desired {
    /// `text` (a message about this object) without its decrypted values.
    pub fn scrub(&self, text: &str) -> String {
        match &self.decrypted {
            Some(values) => values.scrub(text).into_owned(),
            None => text.to_owned(),
        }
    }

    /// `error` (an apiserver's answer about this object) without its
    /// decrypted values: the apiserver may quote a value it refuses.
    pub fn scrub_error(&self, error: kube::Error) -> kube::Error {
        let Some(values) = &self.decrypted else {
            return error;
        };
        match error {
            kube::Error::Api(mut status) => {
                status.message = values.scrub(&status.message).into_owned();
                if let Some(details) = status.details.as_mut() {
                    for cause in &mut details.causes {
                        cause.message = values.scrub(&cause.message).into_owned();
                        cause.field = values.scrub(&cause.field).into_owned();
                    }
                }
                kube::Error::Api(status)
            }
            // Anything else is printed whole: its text, scrubbed.
            other => {
                let text = other.to_string();
                match values.scrub(&text) {
                    std::borrow::Cow::Borrowed(_) => other,
                    std::borrow::Cow::Owned(scrubbed) => kube::Error::Service(scrubbed.into()),
                }
            }
        }
    }
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
        self.key.group_kind() == kix_manifest::group_kind::CUSTOM_RESOURCE_DEFINITION
    }

    pub fn is_namespace(&self) -> bool {
        self.key.group_kind() == kix_manifest::group_kind::NAMESPACE
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
    // Without its encrypted Secrets the build would prune them.
    if let Some(secret) = build.secrets.first().filter(|_| !build.secrets_decrypted) {
        return Err(EngineError::Tree(TreeError::Secret {
            file: secret.file.clone(),
            reason: Reason::NoIdentities,
        }));
    }
    let objects: Vec<&Object> = build.objects().collect();
    desired_of(build, objects, resources, shapes).await
}

/// The desired objects of `objects`, some of `build`'s: the delete hooks of
/// a package an earlier build had ([`crate::delete_hooks`]) are read
/// without the rest of that build (its encrypted Secrets included).
pub(crate) async fn desired_of(
    build: &Build,
    objects: Vec<&Object>,
    resources: &mut Resources,
    shapes: Shapes,
) -> Result<Vec<Desired>> {
    resources.learn_build_crds(build);
    // Each kind is resolved once (discovery is async); the objects are then
    // made on every core (a manifest read, stamped and hashed each).
    let mut kinds: HashMap<(&str, &str), Arc<Resource>> = HashMap::new();
    for object in objects.iter().copied() {
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
    fn shared(&mut self, manifest: &Node) -> Arc<str> {
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
    mut known: Option<&mut KnownShapes>,
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
    let secret_key = build
        .secret_digest_keys
        .get(&object.source)
        .filter(|_| kix_manifest::secrets::is_decrypted(object));
    let stamped = if handed_off.is_empty() && secret_key.is_none() {
        stamped_node(
            &read,
            &key,
            resource.namespaced,
            &object.package,
            known.as_deref_mut(),
        )
    } else {
        None
    };
    let (digest, shape) = stamped.unwrap_or_else(|| {
        stamped_value(
            &read,
            &key,
            resource.namespaced,
            &handed_off,
            &object.package,
            known,
            secret_key,
        )
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
        decrypted: object.decrypted.clone(),
        // The reader checked the annotations: an error cannot happen here.
        hook: kix_manifest::helm::hook_of(object)
            .ok()
            .flatten()
            .map(Box::new),
    }
}

/// The digest of the manifest as applied, and its shape when `known` is
/// given, made on the manifest [`Desired::manifest`] applies. With
/// `secret_key` (a decrypted Secret), the digest is keyed by it.
fn stamped_value(
    read: &str,
    key: &ObjectKey,
    namespaced: bool,
    handed_off: &[String],
    package: &str,
    known: Option<&mut KnownShapes>,
    secret_key: Option<&DigestKey>,
) -> (String, Option<Arc<str>>) {
    let mut manifest = settled(read, key, namespaced, handed_off);
    stamp_labels(&mut manifest, key, package);
    let digest = match secret_key {
        Some(secret_key) => secret_key.digest_hex(canonical_json(&manifest).as_bytes()),
        None => canonical_digest(&manifest),
    };
    // The shape is of the manifest as applied, digest annotation included.
    let shape = known.map(|known| {
        stamp_digest(&mut manifest, &digest);
        let text = manifest.to_string();
        known.shared(&Node::read(&text).unwrap_or(Node::Null))
    });
    (digest, shape)
}

/// [`stamped_value`] made on the text's [`Node`]: what [`settled`] and
/// [`stamp_labels`] do to a `Value`, without a `Value` (a third of the
/// work, at 50,000 objects). For an object with no handed-off field; the
/// tests hold it equal to the `Value`'s.
fn stamped_node(
    read: &str,
    key: &ObjectKey,
    namespaced: bool,
    package: &str,
    known: Option<&mut KnownShapes>,
) -> Option<(String, Option<Arc<str>>)> {
    let mut manifest = Node::read(read)?;
    let metadata = manifest.map_at("metadata")?;
    if namespaced {
        let namespace = key.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE);
        node::insert(metadata, "namespace", Node::str(namespace));
    } else {
        node::remove(metadata, "namespace");
    }
    let owner = owner_value(&key.group, &key.kind, key.namespace.as_deref(), &key.name);
    let labels = node::map_in(metadata, "labels");
    node::insert(labels, LABEL_MANAGED_BY, Node::str(MANAGED_BY_VALUE));
    node::insert(labels, LABEL_PACKAGE, Node::str(package));
    node::insert(labels, LABEL_OWNER, Node::String(owner.into()));
    let digest = manifest.canonical_digest();
    let shape = known.map(|known| {
        if let Some(metadata) = manifest.map_at("metadata") {
            let annotations = node::map_in(metadata, "annotations");
            node::insert(
                annotations,
                ANNOTATION_DIGEST,
                Node::String(digest.clone().into()),
            );
        }
        known.shared(&manifest)
    });
    Some((digest, shape))
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn arb_scalar() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            "[a-z/.\"\\\\é\n-]{0,6}".prop_map(Value::from),
        ]
    }

    /// A map that may already hold kix's keys (a user's own
    /// `app.kubernetes.io/managed-by`, a namespace), or be no map at all.
    fn arb_meta_map(kix_keys: &'static [&'static str]) -> impl Strategy<Value = Value> {
        let key = prop_oneof![
            proptest::sample::select(kix_keys).prop_map(str::to_owned),
            "[a-z]{1,3}".prop_map(|k| k),
        ];
        prop_oneof![
            Just(Value::Null),
            arb_scalar(),
            proptest::collection::vec((key, arb_scalar()), 0..5)
                .prop_map(|e| Value::Object(e.into_iter().collect())),
        ]
    }

    fn arb_manifest() -> impl Strategy<Value = Value> {
        let labels = arb_meta_map(&[LABEL_MANAGED_BY, LABEL_PACKAGE, LABEL_OWNER]);
        let annotations = arb_meta_map(&[ANNOTATION_DIGEST]);
        (
            proptest::option::of(labels),
            proptest::option::of(annotations),
            proptest::option::of("[a-z]{1,4}"),
            proptest::collection::vec(("[a-z]{1,3}", arb_scalar()), 0..4),
            proptest::collection::vec(("[a-zé]{1,3}", arb_scalar()), 0..6),
        )
            .prop_map(|(labels, annotations, namespace, meta_extra, data)| {
                let mut metadata = serde_json::Map::new();
                metadata.insert("name".into(), json!("a"));
                for (k, v) in meta_extra {
                    metadata.insert(k, v);
                }
                if let Some(namespace) = namespace {
                    metadata.insert("namespace".into(), json!(namespace));
                }
                if let Some(labels) = labels {
                    metadata.insert("labels".into(), labels);
                }
                if let Some(annotations) = annotations {
                    metadata.insert("annotations".into(), annotations);
                }
                json!({
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": metadata,
                    "data": Value::Object(data.into_iter().collect()),
                })
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// The digest is stored on every applied object and compared by the
        /// next plan: the fast path must give the `Value` path's, or an
        /// upgrade would re-apply every object once.
        #[test]
        fn the_fast_path_stamps_and_digests_as_the_value_path(
            manifest in arb_manifest(),
            namespaced in any::<bool>(),
            namespace in proptest::option::of("[a-z]{1,4}"),
            package in "[a-z]{1,4}",
        ) {
            let key = ObjectKey {
                group: String::new(),
                kind: "ConfigMap".into(),
                namespace: if namespaced { namespace } else { None },
                name: "a".into(),
            };
            let read = manifest.to_string();
            let mut known = KnownShapes::default();
            let (digest, shape) = stamped_node(&read, &key, namespaced, &package, Some(&mut known))
                .expect("a manifest's text");
            let mut known = KnownShapes::default();
            let (value_digest, value_shape) =
                stamped_value(&read, &key, namespaced, &[], &package, Some(&mut known), None);
            prop_assert_eq!(digest, value_digest);
            prop_assert!(shape.is_some());
            prop_assert_eq!(shape.as_deref(), value_shape.as_deref());
        }
    }

    #[test]
    fn a_digest_known_before_the_fast_path_is_kept() {
        // Stored on live objects by earlier versions: it must not change.
        let key = ObjectKey {
            group: String::new(),
            kind: "ConfigMap".into(),
            namespace: Some("ns".into()),
            name: "a".into(),
        };
        let read =
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"k":"v"}}"#;
        // The SHA-256 of {"apiVersion":"v1","data":{"k":"v"},"kind":"ConfigMap",
        // "metadata":{"labels":{"app.kubernetes.io/managed-by":"kix",
        // "kix.run/owner":"1ddd905bd1fd2e0b3e20e9824469b5a12e408984",
        // "kix.run/package":"web"},"name":"a","namespace":"ns"}}.
        let known = "e2e19a6194ab9819f0cc75346a950c5209e9eed1b4dedb7d5cc2d76868736c6b";
        let (digest, _) = stamped_value(read, &key, true, &[], "web", None, None);
        assert_eq!(digest, known);
        let (fast, shape) = stamped_node(read, &key, true, "web", None).expect("json");
        assert_eq!(fast, known);
        assert_eq!(shape, None);
    }

    /// A decrypted Secret's digest is keyed: not the bare digest of its
    /// manifest, different under another key, the same under the same one.
    #[test]
    fn a_secret_digest_is_keyed() {
        let read = r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"db"},"stringData":{"password":"guess-me"}}"#;
        let key = ObjectKey {
            group: String::new(),
            kind: "Secret".into(),
            namespace: Some("app".into()),
            name: "db".into(),
        };
        let digest_with = |secret: Option<&DigestKey>| {
            stamped_value(read, &key, true, &[], "app", None, secret).0
        };
        let one = DigestKey::from_bytes([1; 32]);
        let two = DigestKey::from_bytes([2; 32]);
        let bare = digest_with(None);
        assert_ne!(digest_with(Some(&one)), bare);
        assert_ne!(digest_with(Some(&one)), digest_with(Some(&two)));
        assert_eq!(digest_with(Some(&one)), digest_with(Some(&one)));
        assert_eq!(digest_with(Some(&one)).len(), bare.len());
    }
}

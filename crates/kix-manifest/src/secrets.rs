//! The Secrets of a package's SOPS-encrypted files (`packages/<p>/secrets/`),
//! decrypted in memory while the tree is read, when the reader is given age
//! identities ([`ReadOptions::age_identities`]); without them the files stay
//! opaque and [`Build::secrets_decrypted`] is false.
//!
//! A process sets the identities once: the CLI from `--age-identity` or the
//! sops variables ([`use_age_identities`]: usable by every Kix cluster), the
//! operator as a key ring with keys bound to Kix clusters
//! ([`use_age_key_ring`]). Every [`ReadOptions::default`] then carries them,
//! so each reader of a build in that process (plan, deploy, rollback, gc,
//! status) decrypts it alike, with the keys of the cluster the build
//! declares; the operator reads a record's build with the keys of the
//! record's cluster only ([`age_identities_for`]). Values never leave memory: errors name files, documents and
//! reasons only.
//!
//! A decrypted object carries its provenance ([`Object::decrypted`]):
//! where in it the values that were encrypted in the file are, and those
//! values, so that whatever prints or stores something of the object (a
//! plan's changes, an apiserver's error or warning about it) redacts them,
//! whatever their path (a label, an annotation, `data`, `type`). Its name,
//! namespace, apiVersion and kind are its identity: kix names the object by
//! them everywhere, so they are shown even when the file encrypted them.
//!
//! [`Object::decrypted`]: crate::Object::decrypted
//! [`ReadOptions::age_identities`]: crate::ReadOptions::age_identities
//! [`ReadOptions::default`]: crate::ReadOptions
//! [`Build::secrets_decrypted`]: crate::Build::secrets_decrypted

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::path::Component;
use std::sync::{Arc, OnceLock};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
pub use kix_sops;
use kix_sops::{Identities, KeyRing};
use serde_json::{Value, json};

use crate::error::TreeError;
use crate::object::{Object, ObjectKey};
use crate::tree::SecretFile;

/// age identities for the reader: a key ring ([`KeyRing`]), so that a
/// build decrypts only with the keys of the Kix cluster it is read for.
/// Equal when they are the same ring.
#[derive(Clone, Debug)]
pub struct AgeIdentities(Arc<KeyRing>);

impl PartialEq for AgeIdentities {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for AgeIdentities {}

impl AgeIdentities {
    /// `identities`, usable by every Kix cluster's build.
    pub fn new(identities: Identities) -> AgeIdentities {
        AgeIdentities(Arc::new(KeyRing::shared(identities)))
    }

    /// The keys of `ring`: each build decrypts with those of the Kix
    /// cluster its `kix.json` declares.
    pub fn ring(ring: KeyRing) -> AgeIdentities {
        AgeIdentities(Arc::new(ring))
    }

    /// Only the keys `cluster`'s builds may use (bound to it, or shared),
    /// bound to `cluster` alone: a build that declares another cluster is
    /// not decrypted with them. None when it has none.
    pub fn for_cluster(&self, cluster: &str) -> Option<AgeIdentities> {
        let mut ring = KeyRing::default();
        ring.bind(cluster, self.0.for_cluster(cluster)?);
        Some(AgeIdentities::ring(ring))
    }

    /// The identities a build of `cluster` decrypts with, if any.
    pub(crate) fn of_cluster(&self, cluster: &str) -> Option<Identities> {
        self.0.for_cluster(cluster)
    }
}

static PROCESS_IDENTITIES: OnceLock<AgeIdentities> = OnceLock::new();

/// Sets the identities every [`crate::ReadOptions::default`] of this
/// process carries, usable by every Kix cluster (a single-team process).
/// The first call (of this or [`use_age_key_ring`]) wins; later calls
/// return false.
pub fn use_age_identities(identities: Identities) -> bool {
    use_age_key_ring(KeyRing::shared(identities))
}

/// Sets the key ring every [`crate::ReadOptions::default`] of this process
/// carries: a build decrypts with the keys of the cluster it declares. A
/// reader that acts for a record reads with the record's cluster's keys
/// only ([`age_identities_for`]).
pub fn use_age_key_ring(ring: KeyRing) -> bool {
    PROCESS_IDENTITIES.set(AgeIdentities::ring(ring)).is_ok()
}

/// The identities set by [`use_age_identities`], if any.
pub fn process_age_identities() -> Option<AgeIdentities> {
    PROCESS_IDENTITIES.get().cloned()
}

/// The process's keys that Kix cluster `cluster` may use, for a reader
/// that acts for one of its records: a file encrypted for another
/// cluster's key is then refused, naming the file and its recipients.
pub fn age_identities_for(cluster: &str) -> Option<AgeIdentities> {
    PROCESS_IDENTITIES.get()?.for_cluster(cluster)
}

/// Whether `object` came from an encrypted file of its package.
pub fn is_decrypted(object: &Object) -> bool {
    let mut parts = object.source.components();
    parts.next() == Some(Component::Normal("packages".as_ref()))
        && parts.next() == Some(Component::Normal(object.package.as_ref()))
        && parts.next() == Some(Component::Normal("secrets".as_ref()))
}

/// Printed instead of a value that came out of decryption.
pub const REDACTED: &str = "(redacted)";

/// A decrypted value shorter than this is not searched for in messages
/// ([`DecryptedValues::scrub`]): it would match inside unrelated words. It
/// is still redacted wherever kix prints it by its place (a plan's changes).
pub const MIN_SCRUBBED_CHARS: usize = 4;

/// The identity of an object: shown even when the file encrypted it.
const IDENTITY: [&str; 4] = [
    "/apiVersion",
    "/kind",
    "/metadata/name",
    "/metadata/namespace",
];

/// The provenance of a decrypted object's values: the JSON pointers of the
/// values that were encrypted in its file (its identity excepted), and the
/// texts to scrub from messages about it. Debug never shows a value.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct DecryptedValues {
    pointers: BTreeSet<String>,
    /// Each decrypted string, its base64 (a `stringData` value as the
    /// apiserver keeps it in `data`) and, for base64 text, what it decodes
    /// to; longest first, so a longer value is replaced before a part of it.
    texts: Vec<String>,
}

impl std::fmt::Debug for DecryptedValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DecryptedValues({} values, redacted)",
            self.pointers.len()
        )
    }
}

impl DecryptedValues {
    /// The values of `manifest` at `pointers` (those sops decrypted).
    pub fn of(manifest: &Value, pointers: Vec<String>) -> DecryptedValues {
        let pointers: BTreeSet<String> = pointers
            .into_iter()
            .filter(|p| !IDENTITY.contains(&p.as_str()))
            .collect();
        let mut texts = BTreeSet::new();
        for value in pointers.iter().filter_map(|p| manifest.pointer(p)) {
            let text = match value {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                // A boolean would match every "true" of a message; it is
                // redacted by its place.
                _ => continue,
            };
            let decoded = STANDARD
                .decode(&text)
                .ok()
                .and_then(|b| String::from_utf8(b).ok());
            texts.insert(STANDARD.encode(&text));
            texts.extend(decoded);
            texts.insert(text);
        }
        let mut texts: Vec<String> = texts
            .into_iter()
            .filter(|t| t.chars().count() >= MIN_SCRUBBED_CHARS)
            .collect();
        texts.sort_by_key(|t| std::cmp::Reverse(t.len()));
        DecryptedValues { pointers, texts }
    }

    /// Whether the value at `pointer` came out of decryption.
    pub fn contains(&self, pointer: &str) -> bool {
        self.pointers.contains(pointer)
    }

    /// Whether the value at `pointer` came out of decryption or holds one.
    pub fn within(&self, pointer: &str) -> bool {
        self.pointers.iter().any(|p| {
            p.strip_prefix(pointer)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        })
    }

    /// `value` (found at `pointer`) with every decrypted value in it
    /// replaced by [`REDACTED`].
    pub fn redact(&self, pointer: &str, value: &Value) -> Value {
        if self.contains(pointer) {
            return Value::String(REDACTED.into());
        }
        if !self.within(pointer) {
            return value.clone();
        }
        match value {
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (k.clone(), self.redact(&child(pointer, k), v)))
                    .collect(),
            ),
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| self.redact(&child(pointer, &i.to_string()), v))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// `text` (a message about the object: an apiserver's error or
    /// warning) with every decrypted value in it replaced by [`REDACTED`].
    pub fn scrub<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let mut out = Cow::Borrowed(text);
        for value in &self.texts {
            if out.contains(value.as_str()) {
                out = Cow::Owned(out.replace(value.as_str(), REDACTED));
            }
        }
        out
    }
}

/// The JSON pointer of `key` below `pointer`.
pub fn child(pointer: &str, key: &str) -> String {
    format!("{pointer}/{}", key.replace('~', "~0").replace('/', "~1"))
}

/// Decrypts `bytes` (the file of `secret`) with `identities`; its Secrets,
/// in file order, with `namespace` (the package's) where they name none,
/// and the key for their digests.
pub(crate) fn decrypt(
    secret: &SecretFile,
    bytes: &[u8],
    namespace: Option<&str>,
    identities: &Identities,
    max_object_bytes: usize,
) -> Result<(Vec<(usize, Object)>, kix_sops::DigestKey), TreeError> {
    let name = secret.file.display().to_string();
    let decrypted = kix_sops::decrypt(&name, bytes, secret.format(), identities).map_err(|e| {
        TreeError::Secret {
            file: secret.file.clone(),
            reason: e.reason,
        }
    })?;
    let mut objects = Vec::new();
    let provenance = decrypted.decrypted.into_iter();
    for (index, (mut manifest, pointers)) in
        decrypted.documents.into_iter().zip(provenance).enumerate()
    {
        let document = index + 1;
        if manifest.as_object().is_some_and(|m| m.is_empty()) {
            continue;
        }
        let mut object =
            secret_object(&mut manifest, secret, document, namespace, max_object_bytes)?;
        object.decrypted = Some(Arc::new(DecryptedValues::of(&manifest, pointers)));
        objects.push((document, object));
    }
    Ok((objects, decrypted.digest_key))
}

fn secret_object(
    manifest: &mut Value,
    secret: &SecretFile,
    document: usize,
    namespace: Option<&str>,
    max_object_bytes: usize,
) -> Result<Object, TreeError> {
    let refuse = |message: String| TreeError::SecretContent {
        file: secret.file.clone(),
        document,
        message,
    };
    let api_version = manifest.get("apiVersion").and_then(Value::as_str);
    let kind = manifest.get("kind").and_then(Value::as_str);
    if api_version != Some("v1") || kind != Some("Secret") {
        return Err(refuse(
            "an encrypted file holds Secrets (apiVersion v1, kind Secret) only".into(),
        ));
    }
    let mut key = ObjectKey::from_manifest(manifest).map_err(|e| refuse(e.to_string()))?;
    if key.namespace.is_none()
        && let Some(ns) = namespace
    {
        key.namespace = Some(ns.to_owned());
        manifest["metadata"]["namespace"] = json!(ns);
    }
    let text = manifest.to_string();
    if text.len() > max_object_bytes {
        return Err(refuse(format!(
            "the Secret is {} bytes as JSON, over the limit of {max_object_bytes}",
            text.len()
        )));
    }
    Ok(Object::new(
        key,
        manifest,
        text,
        secret.file.clone(),
        document,
        secret.package.clone(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provenance_redacts_values_and_scrubs_messages_but_names_the_object() {
        let manifest = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db", "annotations": {"a/b": "annotation-secret"}},
            "stringData": {"password": "hunter22"}, "immutable": true});
        let values = DecryptedValues::of(
            &manifest,
            [
                "/apiVersion",
                "/kind",
                "/metadata/name",
                "/metadata/annotations/a~1b",
            ]
            .into_iter()
            .chain(["/stringData/password", "/immutable"])
            .map(String::from)
            .collect(),
        );
        assert!(!values.contains("/metadata/name"), "the identity is shown");
        assert!(values.within("/metadata") && values.within("/metadata/annotations"));
        assert!(!values.within("/meta") && !values.within("/metadata/labels"));
        let redacted = values.redact("/metadata", &manifest["metadata"]);
        assert_eq!(
            redacted,
            json!({"name": "db", "annotations": {"a/b": REDACTED}})
        );
        let message = format!(
            "Secret \"db\": Invalid value: \"annotation-secret\", data.password: {}",
            STANDARD.encode("hunter22")
        );
        assert_eq!(
            values.scrub(&message),
            "Secret \"db\": Invalid value: \"(redacted)\", data.password: (redacted)"
        );
        assert!(!format!("{values:?}").contains("hunter22"));
    }
}

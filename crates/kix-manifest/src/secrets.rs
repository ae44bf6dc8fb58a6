//! The Secrets of a package's SOPS-encrypted files (`packages/<p>/secrets/`),
//! decrypted in memory while the tree is read, when the reader is given age
//! identities ([`ReadOptions::age_identities`]); without them the files stay
//! opaque and [`Build::secrets_decrypted`] is false.
//!
//! A process sets the identities once ([`use_age_identities`]): the CLI from
//! `--age-identity` or the sops variables, the operator from its key file.
//! Every [`ReadOptions::default`] then carries them, so each reader of a
//! build in that process (plan, deploy, rollback, gc, status) decrypts it
//! alike. Values never leave memory: errors name files, documents and
//! reasons only.
//!
//! [`ReadOptions::age_identities`]: crate::ReadOptions::age_identities
//! [`ReadOptions::default`]: crate::ReadOptions
//! [`Build::secrets_decrypted`]: crate::Build::secrets_decrypted

use std::path::Component;
use std::sync::{Arc, OnceLock};

pub use kix_sops;
use kix_sops::Identities;
use serde_json::{Value, json};

use crate::error::TreeError;
use crate::object::{Object, ObjectKey};
use crate::tree::SecretFile;

/// age identities for the reader; equal when they are the same set.
#[derive(Clone, Debug)]
pub struct AgeIdentities(pub Arc<Identities>);

impl PartialEq for AgeIdentities {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for AgeIdentities {}

static PROCESS_IDENTITIES: OnceLock<AgeIdentities> = OnceLock::new();

/// Sets the identities every [`crate::ReadOptions::default`] of this
/// process carries. The first call wins; later calls return false.
pub fn use_age_identities(identities: Identities) -> bool {
    PROCESS_IDENTITIES
        .set(AgeIdentities(Arc::new(identities)))
        .is_ok()
}

/// The identities set by [`use_age_identities`], if any.
pub fn process_age_identities() -> Option<AgeIdentities> {
    PROCESS_IDENTITIES.get().cloned()
}

/// Whether `object` came from an encrypted file of its package.
pub fn is_decrypted(object: &Object) -> bool {
    let mut parts = object.source.components();
    parts.next() == Some(Component::Normal("packages".as_ref()))
        && parts.next() == Some(Component::Normal(object.package.as_ref()))
        && parts.next() == Some(Component::Normal("secrets".as_ref()))
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
    for (index, mut manifest) in decrypted.documents.into_iter().enumerate() {
        let document = index + 1;
        if manifest.as_object().is_some_and(|m| m.is_empty()) {
            continue;
        }
        let object = secret_object(&mut manifest, secret, document, namespace, max_object_bytes)?;
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

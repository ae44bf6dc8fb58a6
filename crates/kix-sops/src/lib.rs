//! SOPS files (age recipients) read and decrypted in memory.
//!
//! Bytes and age identities in; the decrypted documents or a [`SopsError`]
//! naming the file and the reason out. The MAC over the whole file is
//! checked before any value is returned, so a tampered or truncated file,
//! a wrong key or a key that is not among the recipients never yields a
//! value. Errors never carry a value: only key paths. The format is the one
//! `sops` writes (YAML, multi-document YAML and JSON; whole-file or partial
//! encryption with `encrypted_regex`, `unencrypted_regex`,
//! `encrypted_suffix`, `unencrypted_suffix`, and `mac_only_encrypted`).
//!
//! Pure: no tokio, no kube.
//!
//! # Where things are
//!
//! - The file formats: `yaml` and `json` read a file into a tree of values
//!   and its `sops` metadata (`metadata`); `tree` walks it in sops' order.
//! - `decrypt`: the data key (the `age` crate), each value (RustCrypto
//!   AES-256-GCM with sops' path as additional data) and the MAC, checked
//!   before anything is returned. No cipher code of our own.
//! - `identity`: age identities as sops reads them; `ring`: identities bound
//!   to the Kix clusters allowed to use them ([`KeyRing`]); `digest`: the
//!   HMAC key a decrypted Secret's digest is keyed with.
//! - The engine calls this crate through the tree reader
//!   (`kix_manifest::secrets`); a new supported sops feature goes here with a
//!   differential test against the real `sops` (`tests/differential.rs`).

mod decrypt;
mod digest;
mod error;
mod identity;
mod json;
mod metadata;
mod ring;
mod tree;
mod yaml;

use std::path::Path;

pub use digest::DigestKey;
pub use error::{IdentityError, Reason, SopsError};
pub use identity::{Identities, Layout, SOPS_AGE_KEY, SOPS_AGE_KEY_FILE};
pub use json::count_json_nodes;
pub use metadata::AgeStanza;
pub use ring::KeyRing;

/// How a SOPS file is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Yaml,
    Json,
}

impl Format {
    /// As sops chooses: `.json` is JSON, anything else YAML.
    pub fn of_path(path: &Path) -> Format {
        match path.extension().and_then(|e| e.to_str()) {
            Some(ext) if ext.eq_ignore_ascii_case("json") => Format::Json,
            _ => Format::Yaml,
        }
    }
}

/// The documents of a decrypted file, as JSON values in file order, where
/// in each the decrypted values are, and the key for digests of them.
/// Debug shows how many there are, never a value.
pub struct Decrypted {
    pub documents: Vec<serde_json::Value>,
    /// Per document (same order), the JSON pointers (RFC 6901) of the
    /// values that were encrypted in the file: their provenance, so that
    /// whatever prints or stores a value can redact it. A value the file
    /// left unencrypted is not among them.
    pub decrypted: Vec<Vec<String>>,
    /// Derived from the identity that opened the file ([`DigestKey`]).
    pub digest_key: DigestKey,
}

impl std::fmt::Debug for Decrypted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Decrypted({} documents, redacted)", self.documents.len())
    }
}

/// What a SOPS file says about itself without a key: checked to be
/// readable, with an age recipient, a MAC and a valid encryption rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspected {
    pub documents: usize,
    /// The age recipients (public keys) the data key is encrypted to.
    pub recipients: Vec<String>,
}

fn read(
    file: &str,
    bytes: &[u8],
    format: Format,
) -> Result<(Vec<tree::Node>, metadata::Metadata), SopsError> {
    let mut documents = match format {
        Format::Json => json::parse(bytes),
        Format::Yaml => match std::str::from_utf8(bytes) {
            Ok(text) => yaml::parse(text),
            Err(e) => Err(Reason::Syntax {
                format: "YAML",
                line: line_of(bytes, e.valid_up_to()),
                message: "not UTF-8".into(),
            }),
        },
    }
    .map_err(|r| r.at(file))?;
    let metadata = metadata::extract(&mut documents).map_err(|r| r.at(file))?;
    Ok((documents, metadata))
}

fn line_of(bytes: &[u8], offset: usize) -> u32 {
    let newlines = bytes[..offset].iter().filter(|&&b| b == b'\n').count();
    u32::try_from(newlines + 1).unwrap_or(u32::MAX)
}

/// Checks that `bytes` is a SOPS file kix can decrypt, without a key.
pub fn inspect(file: &str, bytes: &[u8], format: Format) -> Result<Inspected, SopsError> {
    let (documents, metadata) = read(file, bytes, format)?;
    if metadata.age.is_empty() {
        return Err(Reason::NoAgeRecipients.at(file));
    }
    if metadata.mac.is_empty() {
        return Err(Reason::MacUnreadable("the file has no MAC").at(file));
    }
    Ok(Inspected {
        documents: documents.len(),
        recipients: metadata.age.into_iter().map(|s| s.recipient).collect(),
    })
}

/// Decrypts `bytes` (the file `file`) with `identities`: every document,
/// after the file's MAC matched its content.
pub fn decrypt(
    file: &str,
    bytes: &[u8],
    format: Format,
    identities: &Identities,
) -> Result<Decrypted, SopsError> {
    let (mut documents, metadata) = read(file, bytes, format)?;
    let (key, identity) = decrypt::data_key(&metadata, identities).map_err(|r| r.at(file))?;
    let (computed, decrypted) =
        decrypt::decrypt_documents(&mut documents, &metadata, &key).map_err(|r| r.at(file))?;
    let stored = decrypt::file_mac(&metadata, &key).map_err(|r| r.at(file))?;
    if stored != computed {
        return Err(Reason::MacMismatch.at(file));
    }
    let mut path = Vec::new();
    let documents = documents
        .into_iter()
        .map(|d| d.into_json(&mut path))
        .collect::<Result<_, _>>()
        .map_err(|r| r.at(file))?;
    Ok(Decrypted {
        documents,
        decrypted,
        digest_key: DigestKey::of_identity(identity),
    })
}

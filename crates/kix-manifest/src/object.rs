//! Kubernetes objects as read from a build: identity ([`ObjectKey`]), the
//! manifest, where it came from, and a stable digest of its content.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The identity of a Kubernetes object: API group (not version), kind,
/// namespace and name. Two manifests with the same key are the same object
/// (`apps/v1` and `apps/v1beta2` Deployments of one name collide).
///
/// Ordered by group, kind, namespace (cluster-scoped first), name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct ObjectKey {
    /// API group; `""` for the core group (`apiVersion: v1`).
    pub group: String,
    pub kind: String,
    /// `None` for cluster-scoped objects, and for namespaced objects that name
    /// no namespace (the engine then applies its default).
    pub namespace: Option<String>,
    pub name: String,
}

/// The hasher of maps and sets keyed by objects. A plan hashes each of
/// 50,000 keys several times, and SipHash (std's default) was a twentieth
/// of a no-op's CPU. foldhash is seeded per process, as hashbrown's
/// default hasher is.
pub type KeyHasher = foldhash::fast::RandomState;
/// A map keyed by objects ([`KeyHasher`]).
pub type KeyMap<K, V> = HashMap<K, V, KeyHasher>;
/// A set of objects ([`KeyHasher`]).
pub type KeySet<K> = HashSet<K, KeyHasher>;

/// Why a manifest has no usable identity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ObjectKeyError {
    /// The document is not a mapping (found `found`: "an array", "a string", ...).
    #[error("the document is not a mapping (found {found})")]
    NotAMapping { found: &'static str },
    /// A required field is absent, null or the empty string.
    #[error("missing {field}")]
    MissingField { field: &'static str },
    /// A field has the wrong JSON type.
    #[error("{field} must be {expected}, found {found}")]
    WrongType {
        field: &'static str,
        expected: &'static str,
        /// "a number", "an array", ...
        found: &'static str,
    },
    /// Something kubectl would read to other values than written, or
    /// refuse (see `decode`); the reason says what to write instead.
    #[error("{reason}")]
    Refused { reason: String },
    /// A field is present but unusable.
    #[error("invalid {field} {value}: {reason}")]
    InvalidField {
        field: &'static str,
        /// The offending value, as JSON.
        value: String,
        reason: &'static str,
    },
}

impl ObjectKey {
    /// Reads the key of a manifest: `apiVersion` (group part), `kind`,
    /// `metadata.namespace` (absent or `""` means none) and `metadata.name`.
    ///
    /// Names and namespaces are checked only as far as kix needs to use them
    /// safely in API paths (non-empty, no `/`, not `.` or `..`); the API server
    /// validates the rest.
    pub fn from_manifest(manifest: &Value) -> Result<ObjectKey, ObjectKeyError> {
        let Value::Object(map) = manifest else {
            return Err(ObjectKeyError::NotAMapping {
                found: json_type(manifest),
            });
        };
        let api_version = required_str(map.get("apiVersion"), "apiVersion")?;
        let group = group_of(api_version).ok_or_else(|| ObjectKeyError::InvalidField {
            field: "apiVersion",
            value: Value::from(api_version).to_string(),
            reason: "expected \"<version>\" or \"<group>/<version>\"",
        })?;
        let kind = required_str(map.get("kind"), "kind")?;
        if kind.contains(['/', ' ']) {
            return Err(ObjectKeyError::InvalidField {
                field: "kind",
                value: Value::from(kind).to_string(),
                reason: "a kind has no '/' or spaces",
            });
        }
        let metadata = match map.get("metadata") {
            None | Some(Value::Null) => {
                return Err(ObjectKeyError::MissingField {
                    field: "metadata.name",
                });
            }
            Some(Value::Object(m)) => m,
            Some(other) => {
                return Err(ObjectKeyError::WrongType {
                    field: "metadata",
                    expected: "a mapping",
                    found: json_type(other),
                });
            }
        };
        let name = required_str(metadata.get("name"), "metadata.name")?;
        check_path_segment(name, "metadata.name")?;
        let namespace = match metadata.get("namespace") {
            None | Some(Value::Null) => None,
            Some(Value::String(ns)) if ns.is_empty() => None,
            Some(Value::String(ns)) => {
                check_path_segment(ns, "metadata.namespace")?;
                Some(ns.clone())
            }
            Some(other) => {
                return Err(ObjectKeyError::WrongType {
                    field: "metadata.namespace",
                    expected: "a string",
                    found: json_type(other),
                });
            }
        };
        Ok(ObjectKey {
            group: group.to_owned(),
            kind: kind.to_owned(),
            namespace,
            name: name.to_owned(),
        })
    }

    /// The object's kind by group; shown `Kind` for the core group,
    /// `Kind.group` otherwise (`Deployment.apps`), as kubectl spells
    /// resource types.
    pub fn group_kind(&self) -> crate::GroupKind<'_> {
        crate::GroupKind::new(&self.group, &self.kind)
    }
}

/// `Kind.group namespace/name` for namespaced objects and `Kind.group/name`
/// for cluster-scoped ones, without `.group` for the core group:
/// `Deployment.apps web/frontend`, `ConfigMap web/settings`,
/// `Namespace/web`, `ClusterRole.rbac.authorization.k8s.io/admin`.
/// (The same spelling as `kix_api::ObjectRef`.)
impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.kind)?;
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        match &self.namespace {
            Some(ns) => write!(f, " {ns}/{}", self.name),
            None => write!(f, "/{}", self.name),
        }
    }
}

/// The group of an apiVersion: `"apps/v1"` → `"apps"`, `"v1"` → `""`.
/// `None` when it is not of either form (empty parts, more than one `/`).
pub fn group_of(api_version: &str) -> Option<&str> {
    match api_version.split_once('/') {
        None if !api_version.is_empty() => Some(""),
        None => None,
        Some((group, version)) => {
            let ok = !group.is_empty() && !version.is_empty() && !version.contains('/');
            ok.then_some(group)
        }
    }
}

fn required_str<'a>(
    value: Option<&'a Value>,
    field: &'static str,
) -> Result<&'a str, ObjectKeyError> {
    match value {
        None | Some(Value::Null) => Err(ObjectKeyError::MissingField { field }),
        Some(Value::String(s)) if s.is_empty() => Err(ObjectKeyError::MissingField { field }),
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(ObjectKeyError::WrongType {
            field,
            expected: "a string",
            found: json_type(other),
        }),
    }
}

/// Names and namespaces end up as segments of API URLs.
fn check_path_segment(value: &str, field: &'static str) -> Result<(), ObjectKeyError> {
    if value == "." || value == ".." || value.contains('/') {
        return Err(ObjectKeyError::InvalidField {
            field,
            value: Value::from(value).to_string(),
            reason: "must not be '.', '..' or contain '/'",
        });
    }
    Ok(())
}

/// A readable name for a JSON value's type, for messages.
pub(crate) fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "a mapping",
    }
}

/// One Kubernetes object of a build.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Object {
    pub key: ObjectKey,
    /// The manifest's `apiVersion`, e.g. `apps/v1`.
    pub api_version: String,
    /// The manifest as read (JSON key order preserved), with
    /// `metadata.namespace` filled in from the package's namespace where the
    /// reader defaulted it. Kept as compact JSON text ([`Object::manifest`]
    /// reads it): a tree of ordered maps is several times its text, and a
    /// build of 50,000 objects is held for the whole deploy.
    /// Shared with the desired objects made from it.
    #[serde(serialize_with = "as_json")]
    manifest: Arc<str>,
    /// The file it came from, relative to the tree root
    /// (`packages/web/resources/deploy.yaml`).
    pub source: PathBuf,
    /// Its document in that file, from 1 (the items of a `kind: List`
    /// document share its number). For messages; not part of the plan.
    #[serde(skip)]
    pub document: usize,
    /// The package it belongs to.
    pub package: String,
    /// Of an object from an encrypted file: which of its values came out of
    /// decryption ([`crate::secrets::DecryptedValues`]), to be redacted
    /// wherever kix prints or stores them. None for every other object.
    #[serde(skip)]
    pub decrypted: Option<Arc<crate::secrets::DecryptedValues>>,
}

impl Object {
    /// An object of `manifest`, kept as `text`: the manifest's compact JSON.
    pub fn new(
        key: ObjectKey,
        manifest: &Value,
        text: String,
        source: PathBuf,
        document: usize,
        package: String,
    ) -> Object {
        let api_version = manifest
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        Object {
            key,
            api_version,
            manifest: text.into(),
            source,
            document,
            package,
            decrypted: None,
        }
    }

    /// The manifest (see the field).
    pub fn manifest(&self) -> Value {
        json_of(&self.manifest)
    }

    /// The manifest's compact JSON text (see the field).
    pub fn manifest_text(&self) -> &Arc<str> {
        &self.manifest
    }

    /// [`canonical_digest`] of the manifest.
    pub fn digest(&self) -> String {
        canonical_digest(&self.manifest())
    }
}

/// A manifest's compact text read back. It was written from a `Value`, so
/// it reads.
fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

fn as_json<S: serde::Serializer>(text: &str, serializer: S) -> Result<S::Ok, S::Error> {
    json_of(text).serialize(serializer)
}

/// SHA-256 (lower-case hex) of the canonical JSON of `value`: object keys
/// sorted (by their UTF-8 bytes) at every level, no whitespace, strings
/// escaped as `serde_json` does. Independent of key order and formatting of
/// the source file.
pub fn canonical_digest(value: &Value) -> String {
    // Written out first and hashed at once: the hasher is slow to take the
    // many small writes of a manifest one by one.
    let mut text = Vec::with_capacity(1024);
    // Cannot fail: a Vec accepts every write, and serde_json fails only on
    // writer errors (or non-string map keys, which a `Value` cannot have).
    let written = write_canonical(&mut text, value);
    debug_assert!(written.is_ok(), "{written:?}");
    hex_of_sha256(&text)
}

/// The SHA-256 of `bytes` in lower-case hex. (`hex::encode` goes a char at a
/// time through an iterator: a fifth of a manifest's digest.)
pub(crate) fn hex_of_sha256(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut out = [0u8; 64];
    // 32 bytes always fit 64 characters.
    let encoded = hex::encode_to_slice(digest, &mut out);
    debug_assert!(encoded.is_ok(), "{encoded:?}");
    // Hex digits are ASCII.
    String::from_utf8(out.to_vec()).unwrap_or_default()
}

/// The canonical JSON text that [`canonical_digest`] hashes.
pub fn canonical_json(value: &Value) -> String {
    let mut out = Vec::new();
    // Cannot fail, as in `canonical_digest`.
    let written = write_canonical(&mut out, value);
    debug_assert!(written.is_ok(), "{written:?}");
    // serde_json writes UTF-8, so this never replaces anything.
    String::from_utf8_lossy(&out).into_owned()
}

fn write_canonical<W: Write>(out: &mut W, value: &Value) -> io::Result<()> {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.write_all(b"{")?;
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                serde_json::to_writer(&mut *out, key).map_err(io::Error::other)?;
                out.write_all(b":")?;
                write_canonical(out, value)?;
            }
            out.write_all(b"}")
        }
        Value::Array(items) => {
            out.write_all(b"[")?;
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                write_canonical(out, item)?;
            }
            out.write_all(b"]")
        }
        // Scalars have one serde_json spelling.
        scalar => serde_json::to_writer(out, scalar).map_err(io::Error::other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(v: Value) -> Result<ObjectKey, ObjectKeyError> {
        ObjectKey::from_manifest(&v)
    }

    #[test]
    fn key_from_manifest() {
        let k = key(json!({"apiVersion":"apps/v1","kind":"Deployment",
            "metadata":{"name":"frontend","namespace":"web"}}))
        .expect("valid");
        assert_eq!(
            k,
            ObjectKey {
                group: "apps".into(),
                kind: "Deployment".into(),
                namespace: Some("web".into()),
                name: "frontend".into()
            }
        );
        assert_eq!(k.to_string(), "Deployment.apps web/frontend");
        assert_eq!(k.group_kind().to_string(), "Deployment.apps");

        let k = key(
            json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name":"web","namespace":""}}),
        )
        .expect("valid");
        assert_eq!(k.group, "");
        assert_eq!(k.namespace, None);
        assert_eq!(k.to_string(), "Namespace/web");
        assert_eq!(k.group_kind().to_string(), "Namespace");

        let k = key(
            json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"s","namespace":"web"}}),
        )
        .expect("valid");
        assert_eq!(k.to_string(), "ConfigMap web/s");
    }

    #[test]
    fn key_errors() {
        use ObjectKeyError::*;
        assert_eq!(key(json!([1])), Err(NotAMapping { found: "an array" }));
        assert_eq!(key(json!("x")), Err(NotAMapping { found: "a string" }));
        assert_eq!(
            key(json!({"kind":"A","metadata":{"name":"n"}})),
            Err(MissingField {
                field: "apiVersion"
            })
        );
        assert_eq!(
            key(json!({"apiVersion":"","kind":"A","metadata":{"name":"n"}})),
            Err(MissingField {
                field: "apiVersion"
            })
        );
        assert_eq!(
            key(json!({"apiVersion":"v1","metadata":{"name":"n"}})),
            Err(MissingField { field: "kind" })
        );
        assert_eq!(
            key(json!({"apiVersion":"v1","kind":"A"})),
            Err(MissingField {
                field: "metadata.name"
            })
        );
        assert_eq!(
            key(json!({"apiVersion":"v1","kind":"A","metadata":{"name":null}})),
            Err(MissingField {
                field: "metadata.name"
            })
        );
        assert_eq!(
            key(json!({"apiVersion":"v1","kind":"A","metadata":{"generateName":"x-"}})),
            Err(MissingField {
                field: "metadata.name"
            })
        );
        let e = key(json!({"apiVersion":1,"kind":"A","metadata":{"name":"n"}})).expect_err("int");
        assert_eq!(e.to_string(), "apiVersion must be a string, found a number");
        for bad in ["a/b/c", "/v1", "apps/"] {
            let e =
                key(json!({"apiVersion":bad,"kind":"A","metadata":{"name":"n"}})).expect_err(bad);
            assert!(
                matches!(
                    e,
                    InvalidField {
                        field: "apiVersion",
                        ..
                    }
                ),
                "{bad}: {e}"
            );
        }
        for bad in ["..", ".", "a/b"] {
            let e =
                key(json!({"apiVersion":"v1","kind":"A","metadata":{"name":bad}})).expect_err(bad);
            assert!(
                matches!(
                    e,
                    InvalidField {
                        field: "metadata.name",
                        ..
                    }
                ),
                "{bad}: {e}"
            );
            let e =
                key(json!({"apiVersion":"v1","kind":"A","metadata":{"name":"n","namespace":bad}}))
                    .expect_err(bad);
            assert!(
                matches!(
                    e,
                    InvalidField {
                        field: "metadata.namespace",
                        ..
                    }
                ),
                "{bad}: {e}"
            );
        }
        assert_eq!(
            key(json!({"apiVersion":"v1","kind":"A","metadata":"x"}))
                .expect_err("metadata string")
                .to_string(),
            "metadata must be a mapping, found a string"
        );
    }

    #[test]
    fn group_of_api_versions() {
        assert_eq!(group_of("v1"), Some(""));
        assert_eq!(group_of("apps/v1"), Some("apps"));
        assert_eq!(group_of("kix.run/v1alpha1"), Some("kix.run"));
        assert_eq!(group_of(""), None);
        assert_eq!(group_of("a/b/c"), None);
    }

    #[test]
    fn keys_order_by_group_kind_namespace_name() {
        let k = |g: &str, kind: &str, ns: Option<&str>, n: &str| ObjectKey {
            group: g.into(),
            kind: kind.into(),
            namespace: ns.map(Into::into),
            name: n.into(),
        };
        let mut keys = [
            k("apps", "Deployment", Some("b"), "x"),
            k("", "ConfigMap", Some("a"), "z"),
            k("", "ConfigMap", None, "z"),
            k("apps", "Deployment", Some("a"), "y"),
        ];
        keys.sort();
        let shown: Vec<String> = keys.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "ConfigMap/z",
                "ConfigMap a/z",
                "Deployment.apps a/y",
                "Deployment.apps b/x"
            ]
        );
    }

    #[test]
    fn canonical_digest_ignores_key_order_and_formatting() {
        let a: Value = serde_json::from_str(
            r#"{"b": [1, {"y": "é\n", "x": null}], "a": {"d": true, "c": 1.5}}"#,
        )
        .expect("json");
        let b: Value =
            serde_json::from_str(r#"{"a":{"c":1.5,"d":true},"b":[1,{"x":null,"y":"é\n"}]}"#)
                .expect("json");
        assert_eq!(
            canonical_json(&a),
            r#"{"a":{"c":1.5,"d":true},"b":[1,{"x":null,"y":"é\n"}]}"#
        );
        assert_eq!(canonical_digest(&a), canonical_digest(&b));
        assert_eq!(canonical_digest(&a).len(), 64);
        // The digest is the SHA-256 of the canonical text.
        assert_eq!(
            canonical_digest(&a),
            hex::encode(Sha256::digest(canonical_json(&a).as_bytes()))
        );
        // Array order and values matter.
        let c = json!({"a":{"c":1.5,"d":true},"b":[{"x":null,"y":"é\n"},1]});
        assert_ne!(canonical_digest(&a), canonical_digest(&c));
        // A known value, so the digest never changes silently between releases
        // (it is stored on applied objects).
        assert_eq!(
            canonical_digest(&json!({})),
            "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
    }
}

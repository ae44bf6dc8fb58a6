//! Field-level differences between a live object and what applying would make
//! of it, with Secret values and every value that came out of decryption
//! redacted ([`Redaction`]).

use kix_manifest::secrets::{DecryptedValues, child};
use serde::Serialize;
use serde_json::Value;

/// Printed instead of a Secret's values.
pub use kix_manifest::secrets::REDACTED;

/// What a diff hides.
#[derive(Debug, Clone, Copy, Default)]
pub struct Redaction<'a> {
    /// A Secret: the values under `data` and `stringData`, whatever they
    /// came from.
    pub secret: bool,
    /// An object from an encrypted file: the new values that came out of
    /// decryption (by their place), and every old value. The live object's
    /// values came from an earlier build whose provenance the plan does not
    /// know: a value decrypted then may be at a place this build leaves
    /// unencrypted, or gone from it.
    pub decrypted: Option<&'a DecryptedValues>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FieldChange {
    /// Dotted path, list indexes in brackets: `spec.template.spec.containers[0].image`.
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new: Option<Value>,
}

/// Fields the server owns or that change on every write: never part of a diff.
fn ignored(path: &str) -> bool {
    matches!(
        path,
        "metadata.managedFields"
            | "metadata.resourceVersion"
            | "metadata.generation"
            | "metadata.creationTimestamp"
            | "metadata.uid"
            | "status"
            // Items of a LIST carry no type; an object's kind never changes.
            | "apiVersion"
            | "kind"
    ) || path.starts_with("metadata.annotations.kix.run/")
        // kix's bookkeeping: a shared object carries the package of the
        // cluster that applied it last.
        || path == "metadata.labels.kix.run/package"
}

/// The changes from `old` to `new`, the values `redaction` hides replaced
/// by [`REDACTED`].
pub fn diff(old: &Value, new: &Value, redaction: Redaction<'_>) -> Vec<FieldChange> {
    let mut out = Vec::new();
    walk(&Place::default(), old, new, &mut out);
    let hidden = || Value::String(REDACTED.into());
    for (change, pointer) in &mut out {
        let in_values = |top: &str| {
            change.path == top
                || change.path.starts_with(&format!("{top}."))
                || change.path.starts_with(&format!("{top}["))
        };
        if redaction.secret && (in_values("data") || in_values("stringData")) {
            change.old = change.old.as_ref().map(|_| hidden());
            change.new = change.new.as_ref().map(|_| hidden());
        } else if let Some(decrypted) = redaction.decrypted {
            change.old = change.old.as_ref().map(|_| hidden());
            change.new = change.new.as_ref().map(|v| decrypted.redact(pointer, v));
        }
    }
    out.into_iter().map(|(change, _)| change).collect()
}

/// Where the walk is: the dotted path shown and the JSON pointer.
#[derive(Default, Clone)]
struct Place {
    path: String,
    pointer: String,
}

impl Place {
    fn key(&self, key: &str) -> Place {
        Place {
            path: join(&self.path, key),
            pointer: child(&self.pointer, key),
        }
    }

    fn index(&self, index: usize) -> Place {
        Place {
            path: format!("{}[{index}]", self.path),
            pointer: format!("{}/{index}", self.pointer),
        }
    }
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

fn push(
    out: &mut Vec<(FieldChange, String)>,
    place: Place,
    old: Option<&Value>,
    new: Option<&Value>,
) {
    let change = FieldChange {
        path: place.path,
        old: old.cloned(),
        new: new.cloned(),
    };
    out.push((change, place.pointer));
}

fn walk(at: &Place, old: &Value, new: &Value, out: &mut Vec<(FieldChange, String)>) {
    if ignored(&at.path) {
        return;
    }
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, av) in a {
                let p = at.key(key);
                match b.get(key) {
                    Some(bv) => walk(&p, av, bv, out),
                    None if !ignored(&p.path) => push(out, p, Some(av), None),
                    None => {}
                }
            }
            for (key, bv) in b {
                let p = at.key(key);
                if !a.contains_key(key) && !ignored(&p.path) {
                    push(out, p, None, Some(bv));
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (av, bv)) in a.iter().zip(b).enumerate() {
                walk(&at.index(i), av, bv, out);
            }
        }
        _ if old != new => push(out, at.clone(), Some(old), Some(new)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reports_changed_added_and_removed_fields() {
        let old = json!({"metadata": {"name": "a", "resourceVersion": "1"}, "data": {"x": "1", "gone": "y"}});
        let new = json!({"metadata": {"name": "a", "resourceVersion": "2"}, "data": {"x": "2", "new": "z"}});
        let changes = diff(&old, &new, Redaction::default());
        let paths: Vec<_> = changes.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(paths, ["data.x", "data.gone", "data.new"]);
        assert_eq!(changes[0].old, Some(json!("1")));
        assert_eq!(changes[0].new, Some(json!("2")));
    }

    fn secret() -> Redaction<'static> {
        Redaction {
            secret: true,
            decrypted: None,
        }
    }

    #[test]
    fn secret_values_are_redacted() {
        let old = json!({"data": {"password": "c2VjcmV0"}});
        let new = json!({"data": {"password": "bmV3"}, "stringData": {"token": "plain"}});
        let text = serde_json::to_string(&diff(&old, &new, secret())).expect("json");
        assert!(
            !text.contains("c2VjcmV0") && !text.contains("bmV3") && !text.contains("plain"),
            "{text}"
        );
        assert!(text.contains(REDACTED));
    }

    /// Whatever its place, a value that came out of decryption is hidden;
    /// a value the file left unencrypted is shown; no old value is shown.
    #[test]
    fn decrypted_values_are_redacted_by_provenance() {
        let manifest = json!({"metadata": {"name": "db",
            "annotations": {"example.com/probe": "probe-value", "plain": "shown"},
            "labels": {"tier": "probe-label"}}, "type": "Opaque"});
        let decrypted = DecryptedValues::of(
            &manifest,
            vec![
                "/metadata/name".into(),
                "/metadata/annotations/example.com~1probe".into(),
                "/metadata/labels/tier".into(),
            ],
        );
        let redaction = Redaction {
            secret: true,
            decrypted: Some(&decrypted),
        };
        let old = json!({"metadata": {"name": "db", "labels": {"tier": "old-label", "gone": "old-gone"}},
            "type": "kubernetes.io/tls"});
        let changes = diff(&old, &manifest, redaction);
        let text = serde_json::to_string(&changes).expect("json");
        for value in [
            "probe-value",
            "probe-label",
            "old-label",
            "old-gone",
            "kubernetes.io/tls",
        ] {
            assert!(!text.contains(value), "{value} in {text}");
        }
        assert!(text.contains("shown") && text.contains("Opaque"), "{text}");
        let paths: Vec<_> = changes.iter().map(|c| c.path.as_str()).collect();
        assert!(paths.contains(&"metadata.labels.tier"), "{paths:?}");
    }
}

//! Field-level differences between a live object and what applying would make
//! of it, with Secret values redacted.

use serde::Serialize;
use serde_json::Value;

/// Printed instead of a Secret's values.
pub const REDACTED: &str = "(redacted)";

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

/// The changes from `old` to `new`. For Secrets, values under `data` and
/// `stringData` are replaced by [`REDACTED`].
pub fn diff(old: &Value, new: &Value, is_secret: bool) -> Vec<FieldChange> {
    let mut out = Vec::new();
    walk("", old, new, &mut out);
    if is_secret {
        for change in &mut out {
            if change.path.starts_with("data") || change.path.starts_with("stringData") {
                change.old = change.old.as_ref().map(|_| Value::String(REDACTED.into()));
                change.new = change.new.as_ref().map(|_| Value::String(REDACTED.into()));
            }
        }
    }
    out
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

fn walk(path: &str, old: &Value, new: &Value, out: &mut Vec<FieldChange>) {
    if ignored(path) {
        return;
    }
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, av) in a {
                let p = join(path, key);
                match b.get(key) {
                    Some(bv) => walk(&p, av, bv, out),
                    None if !ignored(&p) => out.push(FieldChange {
                        path: p,
                        old: Some(av.clone()),
                        new: None,
                    }),
                    None => {}
                }
            }
            for (key, bv) in b {
                let p = join(path, key);
                if !a.contains_key(key) && !ignored(&p) {
                    out.push(FieldChange {
                        path: p,
                        old: None,
                        new: Some(bv.clone()),
                    });
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (av, bv)) in a.iter().zip(b).enumerate() {
                walk(&format!("{path}[{i}]"), av, bv, out);
            }
        }
        _ if old != new => out.push(FieldChange {
            path: path.to_string(),
            old: Some(old.clone()),
            new: Some(new.clone()),
        }),
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
        let changes = diff(&old, &new, false);
        let paths: Vec<_> = changes.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(paths, ["data.x", "data.gone", "data.new"]);
        assert_eq!(changes[0].old, Some(json!("1")));
        assert_eq!(changes[0].new, Some(json!("2")));
    }

    #[test]
    fn secret_values_are_redacted() {
        let old = json!({"data": {"password": "c2VjcmV0"}});
        let new = json!({"data": {"password": "bmV3"}, "stringData": {"token": "plain"}});
        let text = serde_json::to_string(&diff(&old, &new, true)).expect("json");
        assert!(
            !text.contains("c2VjcmV0") && !text.contains("bmV3") && !text.contains("plain"),
            "{text}"
        );
        assert!(text.contains(REDACTED));
    }
}

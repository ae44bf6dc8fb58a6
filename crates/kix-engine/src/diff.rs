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

/// Whether every field `desired` sets has the same value in `live` (lists
/// compared element by element). What `--reconcile` calls drift.
///
/// What the apiserver normalises is not drift: a Secret's `stringData` (stored
/// base64-encoded in `data`), resource quantities (`0.5` and `500m`), and an
/// empty list or map the server omits.
pub fn drifted_fields(desired: &Value, live: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let is_secret = desired["kind"] == "Secret" && desired["apiVersion"] == "v1";
    if is_secret && desired["stringData"].is_object() {
        subset("", &secret_string_data_as_data(desired), live, &mut out);
    } else {
        subset("", desired, live, &mut out);
    }
    out
}

/// A Secret manifest with `stringData` merged into `data` (base64), as the
/// apiserver stores it.
fn secret_string_data_as_data(secret: &Value) -> Value {
    let mut secret = secret.clone();
    let string_data = secret
        .as_object_mut()
        .and_then(|o| o.remove("stringData"))
        .unwrap_or_default();
    if !secret["data"].is_object() {
        secret["data"] = Value::Object(Default::default());
    }
    for (key, value) in string_data.as_object().into_iter().flatten() {
        let bytes = value.as_str().unwrap_or_default().as_bytes().to_vec();
        secret["data"][key] =
            serde_json::to_value(k8s_openapi::ByteString(bytes)).unwrap_or_default();
    }
    secret
}

/// Path segments under which values are resource quantities.
const QUANTITY_FIELDS: [&str; 7] = [
    "requests",
    "limits",
    "capacity",
    "hard",
    "sizeLimit",
    "overhead",
    "allocatable",
];

fn is_quantity_path(path: &str) -> bool {
    path.split(['.', '['])
        .any(|segment| QUANTITY_FIELDS.contains(&segment))
}

/// The value of a Kubernetes quantity (`500m`, `1Gi`, `1e3`, `2`, `0.5`).
fn quantity(value: &Value) -> Option<f64> {
    let text = match value {
        Value::Number(n) => return n.as_f64(),
        Value::String(s) => s.trim(),
        _ => return None,
    };
    if !text.starts_with(|c: char| c.is_ascii_digit() || matches!(c, '+' | '-' | '.')) {
        return None;
    }
    const BINARY: [(&str, i32); 6] = [
        ("Ki", 1),
        ("Mi", 2),
        ("Gi", 3),
        ("Ti", 4),
        ("Pi", 5),
        ("Ei", 6),
    ];
    for (suffix, power) in BINARY {
        if let Some(number) = text.strip_suffix(suffix) {
            return number.parse::<f64>().ok().map(|n| n * 1024f64.powi(power));
        }
    }
    // Plain numbers and decimal exponents (`1e3`).
    if let Ok(n) = text.parse::<f64>() {
        return Some(n);
    }
    let (number, suffix) = text.split_at(text.len() - 1);
    let exponent = match suffix {
        "n" => -9,
        "u" => -6,
        "m" => -3,
        "k" => 3,
        "M" => 6,
        "G" => 9,
        "T" => 12,
        "P" => 15,
        "E" => 18,
        _ => return None,
    };
    number.parse::<f64>().ok().map(|n| n * 10f64.powi(exponent))
}

fn same_quantity(desired: &Value, live: &Value) -> bool {
    match (quantity(desired), quantity(live)) {
        (Some(a), Some(b)) => (a - b).abs() <= f64::EPSILON * a.abs().max(b.abs()).max(1.0),
        _ => false,
    }
}

fn subset(path: &str, desired: &Value, live: &Value, out: &mut Vec<String>) {
    match (desired, live) {
        (Value::Object(d), Value::Object(l)) => {
            for (key, dv) in d {
                let p = join(path, key);
                if ignored(&p) {
                    continue;
                }
                match l.get(key) {
                    Some(lv) => subset(&p, dv, lv, out),
                    None if dv.is_null() => {}
                    // The server omits empty lists and maps.
                    None if dv.as_array().is_some_and(Vec::is_empty)
                        || dv.as_object().is_some_and(|o| o.is_empty()) => {}
                    None => out.push(p),
                }
            }
        }
        (Value::Array(d), Value::Array(l)) if d.len() == l.len() => {
            for (i, (dv, lv)) in d.iter().zip(l).enumerate() {
                subset(&format!("{path}[{i}]"), dv, lv, out);
            }
        }
        (Value::Number(a), Value::Number(b)) if a.as_f64() == b.as_f64() => {}
        _ if desired != live && is_quantity_path(path) && same_quantity(desired, live) => {}
        _ if desired != live => out.push(path.to_string()),
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

    #[test]
    fn normalised_values_are_not_drift() {
        let desired = json!({"apiVersion": "v1", "kind": "Secret",
            "stringData": {"password": "s3cret"}, "data": {"raw": "cmF3"},
            "spec": {"resources": {"requests": {"cpu": 0.5, "memory": "1Gi"},
                                   "limits": {"cpu": "1000m", "storage": "1e3"}},
                     "env": [], "extra": {}}});
        let live = json!({"apiVersion": "v1", "kind": "Secret",
            "data": {"password": "czNjcmV0", "raw": "cmF3"},
            "spec": {"resources": {"requests": {"cpu": "500m", "memory": "1073741824"},
                                   "limits": {"cpu": "1", "storage": "1k"}}}});
        assert!(
            drifted_fields(&desired, &live).is_empty(),
            "{:?}",
            drifted_fields(&desired, &live)
        );
        let live = json!({"apiVersion": "v1", "kind": "Secret",
            "data": {"password": "b3RoZXI=", "raw": "cmF3"},
            "spec": {"resources": {"requests": {"cpu": "600m", "memory": "1Gi"},
                                   "limits": {"cpu": "1", "storage": "1k"}}}});
        let mut drifted = drifted_fields(&desired, &live);
        drifted.sort();
        assert_eq!(drifted, ["data.password", "spec.resources.requests.cpu"]);
        // Outside quantity fields, equal-valued strings still differ.
        assert_eq!(
            drifted_fields(
                &json!({"data": {"n": "1k"}}),
                &json!({"data": {"n": "1000"}})
            ),
            ["data.n"]
        );
    }

    #[test]
    fn drift_is_a_missing_or_different_desired_field() {
        let desired = json!({"data": {"a": "1"}, "spec": {"replicas": 2, "ports": [{"port": 80}]}});
        let live = json!({"data": {"a": "1", "extra": "ok"}, "spec": {"replicas": 2.0, "ports": [{"port": 80, "protocol": "TCP"}]}});
        assert!(drifted_fields(&desired, &live).is_empty());
        let live = json!({"data": {}, "spec": {"replicas": 3, "ports": [{"port": 80}]}});
        assert_eq!(drifted_fields(&desired, &live), ["data.a", "spec.replicas"]);
    }
}

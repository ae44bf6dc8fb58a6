//! Fields a package hands off to other managers, as declared in
//! `package.json`:
//!
//! ```json
//! "handoff": [
//!   {"kind": "Deployment", "fields": ["spec.replicas"]},
//!   {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db",
//!    "fields": ["spec.replicas", "metadata.annotations.backup.example.com/last"]}
//! ]
//! ```
//!
//! A rule names a kind, optionally an API group (through `apiVersion`), a
//! name and a namespace, and the fields: dotted paths of map keys. Under
//! `metadata.labels.` and `metadata.annotations.` the rest of the path is one
//! key (keys hold dots). kix removes those fields from the object before it
//! applies it, so it never owns them, never reports drift on them and never
//! takes them back from the manager that does (an autoscaler, an operator).

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::object::{ObjectKey, group_of};

/// One handoff rule of a package.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Handoff {
    /// Only its group counts (`apps/v1` and `apps/v1beta1` match alike).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub fields: Vec<String>,
}

impl fmt::Display for Handoff {
    /// `Deployment spec.replicas`, `Deployment web spec.replicas, spec.paused`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.kind)?;
        if let Some(name) = &self.name {
            match &self.namespace {
                Some(ns) => write!(f, " {ns}/{name}")?,
                None => write!(f, " {name}")?,
            }
        }
        write!(f, " {}", self.fields.join(", "))
    }
}

/// Paths kix needs for itself: never handed off.
const KEPT: [&str; 5] = [
    "apiVersion",
    "kind",
    "metadata.name",
    "metadata.namespace",
    "metadata",
];

impl Handoff {
    /// Whether the rule covers the object `key` (its namespace settled by the
    /// package's default).
    pub fn covers(&self, key: &ObjectKey) -> bool {
        self.kind == key.kind
            && self
                .api_version
                .as_deref()
                .is_none_or(|v| group_of(v) == Some(key.group.as_str()))
            && self.name.as_ref().is_none_or(|n| *n == key.name)
            && self
                .namespace
                .as_ref()
                .is_none_or(|ns| key.namespace.as_ref() == Some(ns))
    }

    /// Why the rule is unusable, if it is.
    pub fn problem(&self) -> Option<String> {
        if self.kind.is_empty() {
            return Some("`kind` must not be empty".into());
        }
        if self.fields.is_empty() {
            return Some("`fields` must name at least one field".into());
        }
        for field in &self.fields {
            let segments = segments(field);
            if field.is_empty() || segments.iter().any(|s| s.is_empty()) {
                return Some(format!(
                    "field {field:?} is not a dotted path such as \"spec.replicas\""
                ));
            }
            if KEPT.contains(&field.as_str())
                || matches!(field.as_str(), "metadata.labels" | "metadata.annotations")
            {
                return Some(format!(
                    "field {field:?} is kix's own: it cannot be handed off"
                ));
            }
            if field.starts_with("metadata.labels.kix.run/")
                || field.starts_with("metadata.annotations.kix.run/")
                || field == "metadata.labels.app.kubernetes.io/managed-by"
            {
                return Some(format!(
                    "field {field:?} is kix's bookkeeping: it cannot be handed off"
                ));
            }
        }
        None
    }

    /// Removes the rule's fields from `manifest`; returns those it had.
    pub fn strip(&self, manifest: &mut Value) -> Vec<String> {
        strip(&self.fields, manifest)
    }
}

/// Removes `fields` from `manifest`; returns those it had.
pub fn strip(fields: &[String], manifest: &mut Value) -> Vec<String> {
    let mut removed = Vec::new();
    for field in fields {
        let segments = segments(field);
        let Some((last, parents)) = segments.split_last() else {
            continue;
        };
        let parent = parents
            .iter()
            .try_fold(&mut *manifest, |node, segment| node.get_mut(*segment));
        if parent
            .and_then(Value::as_object_mut)
            .is_some_and(|map| map.remove(*last).is_some())
        {
            removed.push(field.clone());
        }
    }
    removed
}

/// The fields of `object` at `fields`, in a partial object of their own
/// (what a manager applies to take or share just them). Absent ones are left out.
pub fn select(fields: &[String], object: &Value) -> Value {
    let mut out = Value::Object(Default::default());
    for field in fields {
        let path = segments(field);
        let Some(value) = path.iter().try_fold(object, |node, s| node.get(*s)) else {
            continue;
        };
        let mut node = &mut out;
        for segment in &path {
            node = &mut node[*segment];
        }
        *node = value.clone();
    }
    out
}

/// The map keys of a field path: dotted, except that below
/// `metadata.labels` and `metadata.annotations` the rest is one key.
pub fn segments(field: &str) -> Vec<&str> {
    for prefix in ["metadata.labels.", "metadata.annotations."] {
        if let Some(key) = field.strip_prefix(prefix) {
            let mut out: Vec<&str> = prefix.trim_end_matches('.').split('.').collect();
            out.push(key);
            return out;
        }
    }
    field.split('.').collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(value: Value) -> Handoff {
        serde_json::from_value(value).expect("rule")
    }

    fn key(group: &str, kind: &str, ns: Option<&str>, name: &str) -> ObjectKey {
        ObjectKey {
            group: group.into(),
            kind: kind.into(),
            namespace: ns.map(Into::into),
            name: name.into(),
        }
    }

    #[test]
    fn a_rule_covers_its_kind_group_name_and_namespace() {
        let any = rule(json!({"kind": "Deployment", "fields": ["spec.replicas"]}));
        assert!(any.covers(&key("apps", "Deployment", Some("a"), "web")));
        assert!(!any.covers(&key("apps", "StatefulSet", Some("a"), "web")));
        let one = rule(
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
            "namespace": "a", "fields": ["spec.replicas"]}),
        );
        assert!(one.covers(&key("apps", "Deployment", Some("a"), "web")));
        assert!(!one.covers(&key("apps", "Deployment", Some("b"), "web")));
        assert!(!one.covers(&key("apps", "Deployment", Some("a"), "api")));
        assert!(!one.covers(&key("extensions", "Deployment", Some("a"), "web")));
        assert_eq!(one.to_string(), "Deployment a/web spec.replicas");
    }

    #[test]
    fn strip_removes_map_keys_and_label_or_annotation_keys_with_dots() {
        let handoff = rule(json!({"kind": "Deployment", "fields": [
            "spec.replicas", "spec.template.spec.absent",
            "metadata.annotations.backup.example.com/last"]}));
        let mut manifest = json!({"metadata": {"name": "web", "annotations": {
                "backup.example.com/last": "x", "keep": "y"}},
            "spec": {"replicas": 2, "paused": false}});
        let removed = handoff.strip(&mut manifest);
        assert_eq!(
            removed,
            [
                "spec.replicas",
                "metadata.annotations.backup.example.com/last"
            ]
        );
        assert_eq!(
            manifest,
            json!({"metadata": {"name": "web", "annotations": {"keep": "y"}},
                "spec": {"paused": false}})
        );
    }

    #[test]
    fn select_copies_the_fields_into_a_partial_object() {
        let object = json!({"metadata": {"annotations": {"a.b/c": "x"}},
            "spec": {"replicas": 3, "paused": false}});
        let fields = [
            "spec.replicas".to_string(),
            "metadata.annotations.a.b/c".to_string(),
            "spec.absent".to_string(),
        ];
        assert_eq!(
            select(&fields, &object),
            json!({"spec": {"replicas": 3}, "metadata": {"annotations": {"a.b/c": "x"}}})
        );
    }

    #[test]
    fn unusable_rules_say_why() {
        for (value, expected) in [
            (json!({"kind": "", "fields": ["spec.replicas"]}), "`kind`"),
            (json!({"kind": "Deployment", "fields": []}), "at least one"),
            (
                json!({"kind": "Deployment", "fields": ["spec..replicas"]}),
                "dotted path",
            ),
            (
                json!({"kind": "Deployment", "fields": ["metadata.name"]}),
                "kix's own",
            ),
            (
                json!({"kind": "Deployment", "fields": ["metadata.labels"]}),
                "kix's own",
            ),
            (
                json!({"kind": "Deployment", "fields": ["metadata.annotations.kix.run/digest"]}),
                "bookkeeping",
            ),
        ] {
            let problem = rule(value.clone()).problem().unwrap_or_default();
            assert!(problem.contains(expected), "{value}: {problem}");
        }
        assert_eq!(
            rule(json!({"kind": "Deployment", "fields": ["spec.replicas"]})).problem(),
            None
        );
    }
}

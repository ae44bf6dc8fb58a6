//! The walk of one value against one schema node, collecting every
//! violation (not only the first).

use std::collections::HashSet;
use std::fmt;

use serde_json::{Map, Value};

use crate::formats;
use crate::schema::{Arena, Flavor, ListType, Node, NodeId, Shape};

/// What is wrong at one place of an object.
#[derive(Debug, Clone, PartialEq)]
pub enum Problem {
    /// The value has the wrong JSON type.
    WrongType {
        expected: &'static str,
        found: String,
    },
    /// A field the schema does not declare; `suggestion` is a declared field
    /// of that level with a close name.
    UnknownField {
        suggestion: Option<String>,
    },
    RequiredMissing,
    NotInEnum {
        found: String,
        allowed: Vec<String>,
    },
    NoPatternMatch {
        found: String,
        pattern: String,
    },
    BadFormat {
        found: String,
        format: String,
    },
    OutOfRange {
        found: String,
        bound: String,
    },
    TooShort {
        what: &'static str,
        min: u64,
    },
    TooLong {
        what: &'static str,
        max: u64,
    },
    Duplicate {
        entry: String,
    },
    /// `oneOf`/`anyOf`/`not` not satisfied.
    Combinator {
        message: &'static str,
    },
    /// An embedded resource lacks apiVersion or kind.
    EmbeddedIdentity {
        field: &'static str,
    },
    /// A kind of a built-in API group that the release does not serve
    /// (`extensions/v1beta1 Deployment`).
    NotServed {
        api_version: String,
        kind: String,
        kubernetes: String,
    },
    /// A version of a custom resource kind that the build's CRD lacks.
    NotServedByCrd {
        api_version: String,
        kind: String,
        crd: String,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::WrongType { expected, found } => write!(f, "expected {expected}, got {found}"),
            Problem::UnknownField { suggestion: None } => f.write_str("unknown field"),
            Problem::UnknownField {
                suggestion: Some(s),
            } => write!(f, "unknown field; did you mean {s}?"),
            Problem::RequiredMissing => f.write_str("required field missing"),
            Problem::NotInEnum { found, allowed } => write!(
                f,
                "unsupported value {found}; expected one of {}",
                allowed.join(", ")
            ),
            Problem::NoPatternMatch { found, pattern } => {
                write!(f, "{found} does not match the pattern {pattern}")
            }
            Problem::BadFormat { found, format } => write!(f, "{found} is not a valid {format}"),
            Problem::OutOfRange { found, bound } => write!(f, "{found} is out of range: {bound}"),
            Problem::TooShort { what, min } => write!(f, "must have at least {min} {what}"),
            Problem::TooLong { what, max } => write!(f, "must have at most {max} {what}"),
            Problem::Duplicate { entry } => write!(f, "duplicate entry {entry}"),
            Problem::Combinator { message } => f.write_str(message),
            Problem::EmbeddedIdentity { field } => {
                write!(f, "an embedded resource needs {field}")
            }
            Problem::NotServed {
                api_version,
                kind,
                kubernetes,
            } => write!(
                f,
                "kind {kind} of {api_version} is not served by Kubernetes {kubernetes}"
            ),
            Problem::NotServedByCrd {
                api_version,
                kind,
                crd,
            } => write!(
                f,
                "kind {kind} of {api_version} is not a version of the build's CustomResourceDefinition {crd}"
            ),
        }
    }
}

/// One problem and where: a JSON path in kubectl's spelling
/// (`spec.template.spec.containers[0].name`, `metadata.labels[app]`).
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    pub path: String,
    pub problem: Problem,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.problem)
        } else {
            write!(f, "{}: {}", self.path, self.problem)
        }
    }
}

/// Walks values against the nodes of one arena.
pub(crate) struct Walker<'a> {
    pub arena: &'a Arena,
    /// ObjectMeta, for embedded resources' metadata, with its own arena.
    pub object_meta: Option<(&'a Arena, NodeId)>,
    pub out: &'a mut Vec<Violation>,
    /// When false (inside `oneOf`/`anyOf`/`not`), fields outside the branch
    /// are not unknown: branches only constrain values.
    pub strict: bool,
    /// Set while checking a custom resource's root object.
    pub identity_at_root: bool,
}

impl Walker<'_> {
    fn report(&mut self, path: &str, problem: Problem) {
        self.out.push(Violation {
            path: path.to_owned(),
            problem,
        });
    }

    /// Checks `value` at `path` against node `id`.
    pub fn check(&mut self, id: NodeId, value: &Value, path: &mut String) {
        let node = self.arena.node(id);
        if value.is_null() {
            if !node.nullable && self.arena.flavor == Flavor::Custom && node.shape != Shape::Any {
                let expected = expected_name(&node.shape);
                self.report(
                    path,
                    Problem::WrongType {
                        expected,
                        found: describe(value),
                    },
                );
            }
            return;
        }
        if !self.check_shape(node, value, path) {
            return;
        }
        if !node.enum_values.is_empty() && !node.enum_values.contains(value) {
            let allowed = node.enum_values.iter().map(Value::to_string).collect();
            self.report(
                path,
                Problem::NotInEnum {
                    found: value.to_string(),
                    allowed,
                },
            );
        }
        match value {
            Value::String(s) => self.check_string(node, s, path),
            Value::Number(_) => self.check_number(node, value, path),
            Value::Array(items) => self.check_array(node, items, path),
            Value::Object(map) => self.check_object(node, map, path),
            _ => {}
        }
        self.check_combinators(node, value, path);
    }

    /// A custom resource's root: its apiVersion, kind and metadata are the
    /// apiserver's (checked apart), whatever the schema says of them.
    pub fn check_resource_root(&mut self, id: NodeId, manifest: &Value) {
        self.identity_at_root = true;
        self.check(id, manifest, &mut String::new());
        self.identity_at_root = false;
    }

    /// The type check; false when the value's type is wrong (nothing more
    /// is checked below it).
    fn check_shape(&mut self, node: &Node, value: &Value, path: &str) -> bool {
        let ok = match (&node.shape, value) {
            (Shape::Any | Shape::Ref(_), _) => true,
            (Shape::Object, Value::Object(_)) | (Shape::Array, Value::Array(_)) => true,
            (Shape::String, Value::String(_)) | (Shape::Boolean, Value::Bool(_)) => true,
            (Shape::Integer, Value::Number(n)) => n.is_i64() || n.is_u64(),
            (Shape::Number, Value::Number(_)) => true,
            (Shape::IntOrString, Value::String(_)) => true,
            (Shape::IntOrString, Value::Number(n)) => n.is_i64() || n.is_u64(),
            (Shape::Quantity, Value::Number(_)) => true,
            (Shape::Quantity, Value::String(s)) => {
                if !formats::is_quantity(s) {
                    self.report(
                        path,
                        Problem::BadFormat {
                            found: quoted(s),
                            format: "quantity (e.g. 500m, 2Gi)".into(),
                        },
                    );
                }
                true
            }
            _ => false,
        };
        if !ok {
            self.report(
                path,
                Problem::WrongType {
                    expected: expected_name(&node.shape),
                    found: describe(value),
                },
            );
        }
        ok
    }

    fn check_string(&mut self, node: &Node, s: &str, path: &str) {
        let length = s.chars().count() as u64;
        if let Some(min) = node.min_length.filter(|min| length < *min) {
            self.report(
                path,
                Problem::TooShort {
                    what: "characters",
                    min,
                },
            );
        }
        if let Some(max) = node.max_length.filter(|max| length > *max) {
            self.report(
                path,
                Problem::TooLong {
                    what: "characters",
                    max,
                },
            );
        }
        if let Some(pattern) = &node.pattern
            && !pattern.is_match(s)
        {
            self.report(
                path,
                Problem::NoPatternMatch {
                    found: quoted(s),
                    pattern: pattern.as_str().to_owned(),
                },
            );
        }
        if let Some(format) = &node.format
            && !formats::string_ok(format, s, self.arena.flavor)
        {
            self.report(
                path,
                Problem::BadFormat {
                    found: quoted(s),
                    format: format.clone(),
                },
            );
        }
    }

    fn check_number(&mut self, node: &Node, value: &Value, path: &str) {
        let Some(n) = value.as_f64() else { return };
        let found = value.to_string();
        if self.arena.flavor == Flavor::BuiltIn
            && let Some(format) = node.format.as_deref()
            && let Some(bound) = formats::int_width_violation(format, value)
        {
            self.report(
                path,
                Problem::OutOfRange {
                    found: found.clone(),
                    bound,
                },
            );
        }
        if let Some((min, exclusive)) = node.minimum
            && (n < min || (exclusive && n == min))
        {
            let op = if exclusive { ">" } else { ">=" };
            self.report(
                path,
                Problem::OutOfRange {
                    found: found.clone(),
                    bound: format!("must be {op} {min}"),
                },
            );
        }
        if let Some((max, exclusive)) = node.maximum
            && (n > max || (exclusive && n == max))
        {
            let op = if exclusive { "<" } else { "<=" };
            self.report(
                path,
                Problem::OutOfRange {
                    found: found.clone(),
                    bound: format!("must be {op} {max}"),
                },
            );
        }
        if let Some(step) = node.multiple_of
            && step > 0.0
            && (n / step).fract() != 0.0
        {
            self.report(
                path,
                Problem::OutOfRange {
                    found,
                    bound: format!("must be a multiple of {step}"),
                },
            );
        }
    }

    fn check_array(&mut self, node: &Node, items: &[Value], path: &mut String) {
        let count = items.len() as u64;
        if let Some(min) = node.min_items.filter(|min| count < *min) {
            self.report(path, Problem::TooShort { what: "items", min });
        }
        if let Some(max) = node.max_items.filter(|max| count > *max) {
            self.report(path, Problem::TooLong { what: "items", max });
        }
        if let Some(item_schema) = node.items {
            let len = path.len();
            for (i, item) in items.iter().enumerate() {
                use std::fmt::Write as _;
                let _ = write!(path, "[{i}]");
                self.check(item_schema, item, path);
                path.truncate(len);
            }
        }
        self.check_list_type(node, items, path);
    }

    /// `set` and `map` lists: no two items with one value (one key).
    fn check_list_type(&mut self, node: &Node, items: &[Value], path: &str) {
        let keys: &[String] = match &node.list_type {
            ListType::Atomic => return,
            ListType::Set => &[],
            ListType::Map(keys) => keys,
        };
        let item_node = node.items.map(|id| self.arena.node(id));
        let mut seen = HashSet::new();
        for (i, item) in items.iter().enumerate() {
            let entry = if keys.is_empty() {
                item.to_string()
            } else {
                let Value::Object(fields) = item else {
                    continue;
                };
                let parts: Vec<String> = keys
                    .iter()
                    .map(|key| {
                        // A key left out takes its default, as the server does.
                        let value = fields.get(key).cloned().or_else(|| {
                            let field = item_node?.property(key)?;
                            self.arena.node(field).default.clone()
                        });
                        format!("{key}={}", value.unwrap_or(Value::Null))
                    })
                    .collect();
                format!("[{}]", parts.join(","))
            };
            if !seen.insert(entry.clone()) {
                self.report(&format!("{path}[{i}]"), Problem::Duplicate { entry });
            }
        }
    }

    fn check_object(&mut self, node: &Node, map: &Map<String, Value>, path: &mut String) {
        let count = map.len() as u64;
        if let Some(min) = node.min_properties.filter(|min| count < *min) {
            self.report(
                path,
                Problem::TooShort {
                    what: "properties",
                    min,
                },
            );
        }
        if let Some(max) = node.max_properties.filter(|max| count > *max) {
            self.report(
                path,
                Problem::TooLong {
                    what: "properties",
                    max,
                },
            );
        }
        for name in &node.required {
            let present = map.get(name).is_some_and(|v| !v.is_null());
            let defaulted = self.arena.flavor == Flavor::Custom
                && node
                    .property(name)
                    .is_some_and(|p| self.arena.node(p).default.is_some());
            if !present && !defaulted {
                let field = join_field(path, name);
                self.report(&field, Problem::RequiredMissing);
            }
        }
        if node.embedded {
            self.check_embedded(map, path);
        }
        let len = path.len();
        let at_root = std::mem::take(&mut self.identity_at_root) && path.is_empty();
        for (name, value) in map {
            if at_root && matches!(name.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            let declared = node.property(name).is_some() || node.additional.is_some();
            if value.is_null() && declared {
                // Built-in: Go's zero value; custom: pruned unless nullable.
                continue;
            }
            if let Some(field) = node.property(name) {
                push_field(path, name);
                self.check(field, value, path);
            } else if let Some(values) = node.additional {
                push_key(path, name);
                self.check(values, value, path);
            } else if node.embedded && matches!(name.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            } else if self.strict && !node.preserve_unknown && node.shape != Shape::Any {
                push_field(path, name);
                let suggestion = closest(name, node.properties.iter().map(|(n, _)| n.as_str()))
                    .map(|n| join_field(&path[..len], n));
                self.report(path, Problem::UnknownField { suggestion });
            }
            path.truncate(len);
        }
    }

    /// `x-kubernetes-embedded-resource`: apiVersion and kind set, metadata
    /// an ObjectMeta.
    fn check_embedded(&mut self, map: &Map<String, Value>, path: &mut String) {
        for field in ["apiVersion", "kind"] {
            let missing = map
                .get(field)
                .and_then(Value::as_str)
                .is_none_or(str::is_empty);
            if missing {
                self.report(
                    &join_field(path, field),
                    Problem::EmbeddedIdentity { field },
                );
            }
        }
        if let (Some(metadata), Some((arena, meta))) = (map.get("metadata"), self.object_meta) {
            let len = path.len();
            push_field(path, "metadata");
            let mut walker = Walker {
                arena,
                object_meta: self.object_meta,
                out: &mut *self.out,
                strict: self.strict,
                identity_at_root: false,
            };
            walker.check(meta, metadata, path);
            path.truncate(len);
        }
    }

    fn check_combinators(&mut self, node: &Node, value: &Value, path: &mut String) {
        for &sub in &node.all_of {
            self.check(sub, value, path);
        }
        if !node.any_of.is_empty() && !node.any_of.iter().any(|&s| self.passes(s, value)) {
            self.report(
                path,
                Problem::Combinator {
                    message: "matches none of the schemas of anyOf",
                },
            );
        }
        if !node.one_of.is_empty() {
            let matching = node
                .one_of
                .iter()
                .filter(|&&s| self.passes(s, value))
                .count();
            if matching != 1 {
                let message = if matching == 0 {
                    "matches none of the schemas of oneOf"
                } else {
                    "matches more than one schema of oneOf"
                };
                self.report(path, Problem::Combinator { message });
            }
        }
        if let Some(sub) = node.not
            && self.passes(sub, value)
        {
            self.report(
                path,
                Problem::Combinator {
                    message: "matches the schema of not",
                },
            );
        }
    }

    /// Whether `value` satisfies node `id` as a branch of a combinator.
    fn passes(&mut self, id: NodeId, value: &Value) -> bool {
        let mut out = Vec::new();
        let mut walker = Walker {
            arena: self.arena,
            object_meta: self.object_meta,
            out: &mut out,
            strict: false,
            identity_at_root: false,
        };
        walker.check(id, value, &mut String::new());
        out.is_empty()
    }
}

fn push_field(path: &mut String, name: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(name);
}

fn push_key(path: &mut String, key: &str) {
    path.push('[');
    path.push_str(key);
    path.push(']');
}

fn join_field(path: &str, name: &str) -> String {
    let mut out = path.to_owned();
    push_field(&mut out, name);
    out
}

fn expected_name(shape: &Shape) -> &'static str {
    match shape {
        Shape::Object => "object",
        Shape::Array => "array",
        Shape::String => "string",
        Shape::Integer => "integer",
        Shape::Number => "number",
        Shape::Boolean => "boolean",
        Shape::IntOrString => "integer or string",
        Shape::Quantity => "quantity (string or number)",
        Shape::Any | Shape::Ref(_) => "any value",
    }
}

/// The value as a message shows it: `string "3"`, `number 3.5`, `object`.
pub(crate) fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("boolean {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) => format!("string {}", quoted(s)),
        Value::Array(_) => "array".into(),
        Value::Object(_) => "object".into(),
    }
}

/// A JSON string literal, cut after 60 characters.
fn quoted(s: &str) -> String {
    const MAX: usize = 60;
    if s.chars().count() <= MAX {
        Value::from(s).to_string()
    } else {
        let cut: String = s.chars().take(MAX).collect();
        format!("{}...", Value::from(cut))
    }
}

/// The candidate closest to `name` by edit distance, if close enough to be a
/// typo: at most 2 edits and fewer than half the name's length.
fn closest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .map(|c| (edit_distance(name, c), c))
        .filter(|(d, c)| *d <= 2 && *d * 2 < name.len().max(c.len()))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Levenshtein distance, case-insensitive (a wrong case is one typo less
/// than a wrong letter, but still a typo: the apiserver is case-sensitive).
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.to_lowercase().chars().collect();
    let b: Vec<char> = b.to_lowercase().chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        current[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != cb);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_are_close_names_only() {
        let fields = ["replicas", "selector", "template"];
        assert_eq!(closest("replica", fields.into_iter()), Some("replicas"));
        assert_eq!(closest("Replicas", fields.into_iter()), Some("replicas"));
        assert_eq!(closest("templte", fields.into_iter()), Some("template"));
        assert_eq!(closest("image", fields.into_iter()), None);
        assert_eq!(closest("ab", ["xy"].into_iter()), None);
    }
}

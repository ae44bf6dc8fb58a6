//! The compact schema representation the validator walks: one arena of
//! nodes per schema source (a Kubernetes release, or the CRDs of a build),
//! read from OpenAPI v3 / CRD structural-schema JSON.

use std::collections::HashMap;

use regex::Regex;
use serde_json::Value;

/// Index of a [`Node`] in its [`Arena`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct NodeId(u32);

/// What a value must be, before the finer constraints.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Shape {
    /// No `type`: any JSON value (`apiextensions` JSON, ...).
    Any,
    Object,
    Array,
    String,
    Integer,
    Number,
    Boolean,
    /// `x-kubernetes-int-or-string`.
    IntOrString,
    /// A resource quantity (`500m`, `1Gi`, or a number).
    Quantity,
    /// `$ref` to a model of the arena, by name until resolved.
    Ref(String),
}

/// How lists are merged, and so which duplicates are errors.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub(crate) enum ListType {
    #[default]
    Atomic,
    Set,
    Map(Vec<String>),
}

/// One schema node.
#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub shape: Shape,
    pub format: Option<String>,
    /// Sorted by name, for binary search.
    pub properties: Vec<(String, NodeId)>,
    pub additional: Option<NodeId>,
    pub preserve_unknown: bool,
    pub embedded: bool,
    pub nullable: bool,
    pub required: Vec<String>,
    pub items: Option<NodeId>,
    pub list_type: ListType,
    pub enum_values: Vec<Value>,
    pub default: Option<Value>,
    pub pattern: Option<Regex>,
    pub minimum: Option<(f64, bool)>,
    pub maximum: Option<(f64, bool)>,
    pub multiple_of: Option<f64>,
    pub min_length: Option<u64>,
    pub max_length: Option<u64>,
    pub min_items: Option<u64>,
    pub max_items: Option<u64>,
    pub min_properties: Option<u64>,
    pub max_properties: Option<u64>,
    pub all_of: Vec<NodeId>,
    pub any_of: Vec<NodeId>,
    pub one_of: Vec<NodeId>,
    pub not: Option<NodeId>,
    /// `x-kubernetes-validations` rules (CEL), not evaluated offline.
    pub rules: Vec<String>,
}

impl Node {
    fn new(shape: Shape) -> Node {
        Node {
            shape,
            format: None,
            properties: Vec::new(),
            additional: None,
            preserve_unknown: false,
            embedded: false,
            nullable: false,
            required: Vec::new(),
            items: None,
            list_type: ListType::Atomic,
            enum_values: Vec::new(),
            default: None,
            pattern: None,
            minimum: None,
            maximum: None,
            multiple_of: None,
            min_length: None,
            max_length: None,
            min_items: None,
            max_items: None,
            min_properties: None,
            max_properties: None,
            all_of: Vec::new(),
            any_of: Vec::new(),
            one_of: Vec::new(),
            not: None,
            rules: Vec::new(),
        }
    }

    /// The schema of property `name`, if declared.
    pub fn property(&self, name: &str) -> Option<NodeId> {
        self.properties
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()
            .map(|i| self.properties[i].1)
    }
}

/// Where a schema came from decides how a few things are checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flavor {
    /// A built-in kind: the apiserver decodes into Go types (null is the
    /// zero value, integers have their Go width, quantities parse).
    BuiltIn,
    /// A custom resource: the apiextensions structural-schema validator
    /// (null pruned unless nullable, defaults fill required fields).
    Custom,
}

/// A schema that cannot be used, with the JSON path inside it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct SchemaError {
    pub path: String,
    pub message: String,
}

/// Nodes of one schema source; models are named roots.
#[derive(Debug)]
pub(crate) struct Arena {
    pub flavor: Flavor,
    nodes: Vec<Node>,
    models: HashMap<String, NodeId>,
}

impl Arena {
    pub fn new(flavor: Flavor) -> Arena {
        Arena {
            flavor,
            nodes: Vec::new(),
            models: HashMap::new(),
        }
    }

    /// The node, following `$ref`s.
    pub fn node(&self, id: NodeId) -> &Node {
        let mut node = &self.nodes[id.0 as usize];
        // A resolved ref is a node whose `items` points at the target.
        while let (Shape::Ref(_), Some(target)) = (&node.shape, node.items) {
            node = &self.nodes[target.0 as usize];
        }
        node
    }

    /// Adds a named model (a `$ref` target).
    pub fn add_model(&mut self, name: &str, schema: &Value) -> Result<NodeId, SchemaError> {
        let id = self.add(schema, name)?;
        self.models.insert(name.to_owned(), id);
        Ok(id)
    }

    pub fn model(&self, name: &str) -> Option<NodeId> {
        self.models.get(name).copied()
    }

    /// Points every `$ref` node at its model; fails on a dangling one.
    pub fn resolve_refs(&mut self) -> Result<(), SchemaError> {
        for index in 0..self.nodes.len() {
            if let Shape::Ref(name) = &self.nodes[index].shape {
                let target = self.models.get(name).copied().ok_or_else(|| SchemaError {
                    path: name.clone(),
                    message: "$ref to an unknown model".into(),
                })?;
                self.nodes[index].items = Some(target);
            }
        }
        Ok(())
    }

    /// Adds one schema (recursively); `path` names it in errors.
    pub fn add(&mut self, schema: &Value, path: &str) -> Result<NodeId, SchemaError> {
        let error = |message: &str| SchemaError {
            path: path.to_owned(),
            message: message.to_owned(),
        };
        let Value::Object(map) = schema else {
            return Err(error("a schema must be a mapping"));
        };
        let flag = |key: &str| map.get(key).and_then(Value::as_bool).unwrap_or(false);
        let shape = if let Some(target) = map.get("$ref").and_then(Value::as_str) {
            Shape::Ref(target.to_owned())
        } else if flag("x-kubernetes-int-or-string") {
            Shape::IntOrString
        } else {
            match map.get("type").and_then(Value::as_str) {
                None => match map.get("format").and_then(Value::as_str) {
                    Some("quantity") => Shape::Quantity,
                    _ => Shape::Any,
                },
                Some("object") => Shape::Object,
                Some("array") => Shape::Array,
                Some("string") => Shape::String,
                Some("integer") => Shape::Integer,
                Some("number") => Shape::Number,
                Some("boolean") => Shape::Boolean,
                Some(other) => return Err(error(&format!("unknown type {other:?}"))),
            }
        };
        let mut node = Node::new(shape);
        node.format = map.get("format").and_then(Value::as_str).map(str::to_owned);
        node.preserve_unknown = flag("x-kubernetes-preserve-unknown-fields");
        node.embedded = flag("x-kubernetes-embedded-resource");
        node.nullable = flag("nullable");
        node.required = strings(map.get("required"));
        node.enum_values = map
            .get("enum")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        node.default = map.get("default").cloned();
        if let Some(pattern) = map.get("pattern").and_then(Value::as_str) {
            node.pattern =
                Some(Regex::new(pattern).map_err(|e| error(&format!("pattern {pattern:?}: {e}")))?);
        }
        let number = |key: &str| map.get(key).and_then(Value::as_f64);
        let count = |key: &str| map.get(key).and_then(Value::as_u64);
        node.minimum = number("minimum").map(|m| (m, flag("exclusiveMinimum")));
        node.maximum = number("maximum").map(|m| (m, flag("exclusiveMaximum")));
        node.multiple_of = number("multipleOf");
        node.min_length = count("minLength");
        node.max_length = count("maxLength");
        node.min_items = count("minItems");
        node.max_items = count("maxItems");
        node.min_properties = count("minProperties");
        node.max_properties = count("maxProperties");
        node.list_type = match map.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => ListType::Set,
            Some("map") => ListType::Map(strings(map.get("x-kubernetes-list-map-keys"))),
            _ => ListType::Atomic,
        };
        node.rules = map
            .get("x-kubernetes-validations")
            .and_then(Value::as_array)
            .map(|rules| {
                rules
                    .iter()
                    .filter_map(|r| r.get("rule").and_then(Value::as_str).map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();

        if let Some(Value::Object(props)) = map.get("properties") {
            let mut properties = Vec::with_capacity(props.len());
            for (name, sub) in props {
                properties.push((name.clone(), self.add(sub, &format!("{path}.{name}"))?));
            }
            properties.sort_by(|a, b| a.0.cmp(&b.0));
            node.properties = properties;
        }
        match map.get("additionalProperties") {
            Some(sub @ Value::Object(_)) => {
                node.additional = Some(self.add(sub, &format!("{path}[*]"))?);
            }
            // `true` allows any value, as a schema-less node does.
            Some(Value::Bool(true)) => node.additional = Some(self.push(Node::new(Shape::Any))),
            _ => {}
        }
        match map.get("items") {
            Some(sub @ Value::Object(_)) => {
                node.items = Some(self.add(sub, &format!("{path}[*]"))?);
            }
            Some(_) => return Err(error("items must be one schema")),
            None => {}
        }
        node.all_of = self.add_all(map.get("allOf"), path, "allOf")?;
        node.any_of = self.add_all(map.get("anyOf"), path, "anyOf")?;
        node.one_of = self.add_all(map.get("oneOf"), path, "oneOf")?;
        if let Some(sub) = map.get("not") {
            node.not = Some(self.add(sub, &format!("{path}.not"))?);
        }
        Ok(self.push(node))
    }

    fn add_all(
        &mut self,
        list: Option<&Value>,
        path: &str,
        key: &str,
    ) -> Result<Vec<NodeId>, SchemaError> {
        let Some(Value::Array(list)) = list else {
            return Ok(Vec::new());
        };
        list.iter()
            .enumerate()
            .map(|(i, sub)| self.add(sub, &format!("{path}.{key}[{i}]")))
            .collect()
    }

    /// How many nodes the arena has (a mark for [`Arena::rules_since`]).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// How many CEL rules the nodes added since `mark` have.
    pub fn rules_since(&self, mark: usize) -> usize {
        self.nodes[mark..].iter().map(|n| n.rules.len()).sum()
    }

    fn push(&mut self, node: Node) -> NodeId {
        let id = NodeId(u32::try_from(self.nodes.len()).unwrap_or(u32::MAX));
        self.nodes.push(node);
        id
    }
}

fn strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

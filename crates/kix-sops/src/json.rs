//! JSON read as sops reads it: one object, keys in order, integers that
//! fit int64 as integers and every other number as a float.

use serde_json::Value;

use crate::error::Reason;
use crate::tree::Node;

/// Deepest nesting read (serde_json's own limit is 128 as well).
pub(crate) fn parse(bytes: &[u8]) -> Result<Vec<Node>, Reason> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| Reason::Syntax {
        format: "JSON",
        line: u32::try_from(e.line()).unwrap_or(u32::MAX),
        // serde_json's messages name the kind of error and the position, no text.
        message: format!("{:?} error at column {}", e.classify(), e.column()),
    })?;
    match value {
        Value::Object(_) => Ok(vec![node(value)]),
        _ => Err(Reason::Syntax {
            format: "JSON",
            line: 1,
            message: "the document is not an object".into(),
        }),
    }
}

fn node(value: Value) -> Node {
    match value {
        Value::Null => Node::Null,
        Value::Bool(b) => Node::Bool(b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Node::Int(i),
            None => Node::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Node::Str(s),
        Value::Array(items) => Node::Seq(items.into_iter().map(node).collect()),
        Value::Object(map) => Node::Map(map.into_iter().map(|(k, v)| (k, node(v))).collect()),
    }
}

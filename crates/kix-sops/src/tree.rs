//! A document as sops holds it: ordered mappings with string keys,
//! sequences, and typed scalars (the order and types are what the MAC is
//! computed over).

use serde_json::{Map, Number, Value};

use crate::error::Reason;

/// One node of a document.
#[derive(Clone, PartialEq)]
pub(crate) enum Node {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<(String, Node)>),
}

impl Node {
    /// The value as JSON, with the path named in an error (never the value).
    pub(crate) fn into_json(self, path: &mut Vec<String>) -> Result<Value, Reason> {
        Ok(match self {
            Node::Null => Value::Null,
            Node::Bool(b) => Value::Bool(b),
            Node::Int(i) => Value::Number(i.into()),
            Node::Float(f) => match Number::from_f64(f) {
                Some(n) => Value::Number(n),
                None => {
                    return Err(Reason::Unsupported(format!(
                        "`{}` is an infinite or NaN number, which a manifest cannot carry",
                        path.join(":")
                    )));
                }
            },
            Node::Str(s) => Value::String(s),
            Node::Seq(items) => Value::Array(
                items
                    .into_iter()
                    .map(|n| n.into_json(path))
                    .collect::<Result<_, _>>()?,
            ),
            Node::Map(entries) => {
                let mut map = Map::with_capacity(entries.len());
                for (key, node) in entries {
                    path.push(key);
                    let value = node.into_json(path)?;
                    let key = path.pop().unwrap_or_default();
                    map.insert(key, value);
                }
                Value::Object(map)
            }
        })
    }
}

/// The text sops hashes for a scalar (Go's `sops.ToBytes`): strings as
/// they are, numbers as Go formats them, booleans `True`/`False`.
pub(crate) fn mac_bytes(node: &Node) -> Option<std::borrow::Cow<'_, [u8]>> {
    use std::borrow::Cow;
    Some(match node {
        Node::Str(s) => Cow::Borrowed(s.as_bytes()),
        Node::Int(i) => Cow::Owned(i.to_string().into_bytes()),
        Node::Float(f) => Cow::Owned(go_float(*f).into_bytes()),
        Node::Bool(true) => Cow::Borrowed(b"True"),
        Node::Bool(false) => Cow::Borrowed(b"False"),
        Node::Null | Node::Seq(_) | Node::Map(_) => return None,
    })
}

/// Go's `strconv.FormatFloat(f, 'f', -1, 64)`: the shortest text that
/// reads back to `f`, never with an exponent. Rust's `Display` is the same
/// for finite numbers.
pub(crate) fn go_float(f: f64) -> String {
    if f.is_nan() {
        "NaN".into()
    } else if f.is_infinite() {
        if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        }
    } else {
        format!("{f}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_format_as_go_does() {
        for (f, go) in [
            (1.0, "1"),
            (1.5, "1.5"),
            (-0.0, "-0"),
            (1e21, "1000000000000000000000"),
            (1e-7, "0.0000001"),
            (0.1 + 0.2, "0.30000000000000004"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
        ] {
            assert_eq!(go_float(f), go);
        }
    }
}

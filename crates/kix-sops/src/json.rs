//! JSON read as sops reads it: one object, keys in order, integers that
//! fit int64 as integers and every other number as a float.

use serde_json::Value;

use crate::error::Reason;
use crate::tree::Node;

/// Deepest nesting read (serde_json's own limit is 128 as well).
pub(crate) fn parse(bytes: &[u8]) -> Result<Vec<Node>, Reason> {
    // Counted before the values are built, as YAML is.
    let mut left = crate::yaml::MAX_NODES;
    if let Some(line) = count_json_nodes(bytes, &mut left) {
        return Err(Reason::Syntax {
            format: "JSON",
            line,
            message: format!(
                "more than {} values, keys and items, more than kix reads from a file",
                crate::yaml::MAX_NODES
            ),
        });
    }
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

/// Counts the nodes (keys included) of the JSON value that `bytes` starts
/// with against `left`, without building it: the line where they pass
/// `left`, if they do. What is not JSON is left to the reader. kix's
/// manifest reader counts its JSON resource files with it too.
pub fn count_json_nodes(bytes: &[u8], left: &mut usize) -> Option<u32> {
    use serde::de::DeserializeSeed;
    let mut counter = Nodes { left, over: false };
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    match (&mut counter).deserialize(&mut deserializer) {
        Err(error) if counter.over => Some(u32::try_from(error.line()).unwrap_or(u32::MAX)),
        _ => None,
    }
}

/// Counts a JSON value's nodes (keys included).
struct Nodes<'a> {
    left: &'a mut usize,
    over: bool,
}

impl Nodes<'_> {
    fn take<E: serde::de::Error>(&mut self) -> Result<(), E> {
        match self.left.checked_sub(1) {
            Some(left) => {
                *self.left = left;
                Ok(())
            }
            None => {
                self.over = true;
                Err(E::custom("too many nodes"))
            }
        }
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for &mut Nodes<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for &mut Nodes<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<(), E> {
        self.take()
    }

    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<(), E> {
        self.take()
    }

    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<(), E> {
        self.take()
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<(), E> {
        self.take()
    }

    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<(), E> {
        self.take()
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.take()
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut items: A) -> Result<(), A::Error> {
        self.take()?;
        while items.next_element_seed(&mut *self)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut entries: A) -> Result<(), A::Error> {
        self.take()?;
        while entries.next_key::<serde::de::IgnoredAny>()?.is_some() {
            self.take()?;
            entries.next_value_seed(&mut *self)?;
        }
        Ok(())
    }
}

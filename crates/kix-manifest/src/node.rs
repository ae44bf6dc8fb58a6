//! A manifest read back from its compact JSON text without copying its
//! strings. The engine stamps and digests each of a build's objects: with a
//! `Value` (ordered maps hashing every key, every string owned) that was most
//! of the time, at 50,000 objects, of making the desired objects.

use std::borrow::Cow;
use std::fmt;
use std::io::{self, Write};

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Number;

/// The entries of a [`Node::Object`], in their order.
pub type Entries<'a> = Vec<(Cow<'a, str>, Node<'a>)>;

/// A JSON value whose strings borrow from the text it was read from when
/// they have no escapes.
#[derive(Clone, Debug, PartialEq)]
pub enum Node<'a> {
    Null,
    Bool(bool),
    Number(Number),
    String(Cow<'a, str>),
    Array(Vec<Node<'a>>),
    /// Read from a `Value`'s text: no key is there twice.
    Object(Entries<'a>),
}

impl<'a> Node<'a> {
    /// Reads `text`; `None` when it is not JSON.
    pub fn read(text: &'a str) -> Option<Node<'a>> {
        serde_json::from_str(text).ok()
    }

    pub fn str(text: &'a str) -> Node<'a> {
        Node::String(Cow::Borrowed(text))
    }

    /// The map at `key` of this map, made one if it is not (as indexing a
    /// `Value` does). `None` when this is not a map.
    pub fn map_at(&mut self, key: &'a str) -> Option<&mut Entries<'a>> {
        match self {
            Node::Object(entries) => Some(map_in(entries, key)),
            _ => None,
        }
    }

    /// The SHA-256 (lower-case hex) of its canonical JSON: the same as
    /// [`crate::canonical_digest`] of the `Value` it was read from.
    pub fn canonical_digest(&self) -> String {
        let mut text = Vec::with_capacity(1024);
        // A Vec takes every write, and strings are always written.
        let written = self.write_canonical(&mut text);
        debug_assert!(written.is_ok(), "{written:?}");
        crate::object::hex_of_sha256(&text)
    }

    fn write_canonical(&self, out: &mut Vec<u8>) -> io::Result<()> {
        match self {
            Node::Object(entries) => {
                let mut sorted: Vec<&(Cow<str>, Node)> = entries.iter().collect();
                sorted.sort_unstable_by(|a, b| a.0.cmp(&b.0));
                out.push(b'{');
                for (i, (key, value)) in sorted.into_iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    serde_json::to_writer(&mut *out, key.as_ref()).map_err(io::Error::other)?;
                    out.push(b':');
                    value.write_canonical(out)?;
                }
                out.write_all(b"}")
            }
            Node::Array(items) => {
                out.push(b'[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    item.write_canonical(out)?;
                }
                out.write_all(b"]")
            }
            // Scalars have one serde_json spelling, a Value's.
            scalar => serde_json::to_writer(out, scalar).map_err(io::Error::other),
        }
    }
}

/// The map at `key` of a map, made one if it is not (as indexing a `Value`
/// does): in place when `key` is there, last when not.
pub fn map_in<'a, 'e>(entries: &'e mut Entries<'a>, key: &'a str) -> &'e mut Entries<'a> {
    let at = match entries.iter().position(|(k, _)| k == key) {
        Some(at) => at,
        None => {
            entries.push((Cow::Borrowed(key), Node::Null));
            entries.len() - 1
        }
    };
    let value = &mut entries[at].1;
    if !matches!(value, Node::Object(_)) {
        *value = Node::Object(Vec::new());
    }
    match value {
        Node::Object(entries) => entries,
        _ => unreachable!("made a map above"),
    }
}

/// Sets `key` of a map to `value`: in place when it is there, last when not
/// (as a `Value`'s ordered map does).
pub fn insert<'a>(entries: &mut Entries<'a>, key: &'a str, value: Node<'a>) {
    match entries.iter_mut().find(|(k, _)| k == key) {
        Some((_, old)) => *old = value,
        None => entries.push((Cow::Borrowed(key), value)),
    }
}

/// Removes `key` from a map, the last entry taking its place (as a `Value`'s
/// ordered map does).
pub fn remove(entries: &mut Entries<'_>, key: &str) {
    if let Some(at) = entries.iter().position(|(k, _)| k == key) {
        entries.swap_remove(at);
    }
}

impl Serialize for Node<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Node::Null => serializer.serialize_unit(),
            Node::Bool(b) => serializer.serialize_bool(*b),
            Node::Number(n) => n.serialize(serializer),
            Node::String(s) => serializer.serialize_str(s),
            Node::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Node::Object(entries) => {
                let mut map = serializer.serialize_map(Some(entries.len()))?;
                for (key, value) in entries {
                    map.serialize_entry(key.as_ref(), value)?;
                }
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Node<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Node<'de>, E> {
        Ok(Node::Null)
    }

    fn visit_none<E>(self) -> Result<Node<'de>, E> {
        Ok(Node::Null)
    }

    fn visit_bool<E>(self, b: bool) -> Result<Node<'de>, E> {
        Ok(Node::Bool(b))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Node<'de>, E> {
        Ok(Node::Number(n.into()))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Node<'de>, E> {
        Ok(Node::Number(n.into()))
    }

    fn visit_f64<E>(self, n: f64) -> Result<Node<'de>, E> {
        // As a Value reads it: a float JSON cannot hold is null.
        Ok(Number::from_f64(n).map_or(Node::Null, Node::Number))
    }

    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Node<'de>, E> {
        Ok(Node::String(Cow::Borrowed(s)))
    }

    fn visit_str<E>(self, s: &str) -> Result<Node<'de>, E> {
        Ok(Node::String(Cow::Owned(s.to_owned())))
    }

    fn visit_string<E>(self, s: String) -> Result<Node<'de>, E> {
        Ok(Node::String(Cow::Owned(s)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node<'de>, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node<'de>, A::Error> {
        let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0));
        while let Some(Key(key)) = map.next_key()? {
            entries.push((key, map.next_value()?));
        }
        Ok(Node::Object(entries))
    }
}

/// A map key, borrowed when it has no escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(s)))
            }

            fn visit_str<E: de::Error>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s.to_owned())))
            }

            fn visit_string<E>(self, s: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical_digest;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    #[test]
    fn reads_borrowing_what_has_no_escapes() {
        let text = r#"{"a":"plain","b\n":"esc\"aped","c":[1,-2,2.5,null,true,{}]}"#;
        let node = Node::read(text).expect("json");
        let Node::Object(entries) = &node else {
            panic!("a map: {node:?}")
        };
        assert!(matches!(entries[0].0, Cow::Borrowed("a")));
        assert!(matches!(entries[0].1, Node::String(Cow::Borrowed("plain"))));
        assert_eq!(entries[1].0, "b\n");
        assert_eq!(entries[1].1, Node::String(Cow::Owned("esc\"aped".into())));
        // Written back, it is the text it was read from.
        assert_eq!(serde_json::to_string(&node).expect("json"), text);
        assert_eq!(Node::read("{"), None);
    }

    #[test]
    fn maps_are_set_and_made_as_a_value_does() {
        let text = r#"{"metadata":{"name":"a","labels":"not a map","namespace":"x","z":1}}"#;
        let mut node = Node::read(text).expect("json");
        let mut value: Value = serde_json::from_str(text).expect("json");

        let metadata = node.map_at("metadata").expect("a map");
        remove(metadata, "namespace");
        value["metadata"]
            .as_object_mut()
            .expect("map")
            .remove("namespace");
        // Not a map: made one.
        insert(map_in(metadata, "labels"), "k", Node::str("v"));
        value["metadata"]["labels"] = json!({"k": "v"});
        // Missing: made, last.
        insert(map_in(metadata, "annotations"), "a", Node::str("b"));
        value["metadata"]["annotations"] = json!({"a": "b"});
        // There: set in place.
        insert(metadata, "name", Node::str("renamed"));
        value["metadata"]["name"] = json!("renamed");

        assert_eq!(
            serde_json::to_string(&node).expect("json"),
            value.to_string(),
            "the same entries in the same order"
        );
        assert_eq!(node.canonical_digest(), canonical_digest(&value));
        assert_eq!(Node::str("x").map_at("metadata"), None);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Read from a Value's text, a node digests as the Value does, and
        /// writes the same text.
        #[test]
        fn digest_and_text_are_a_values(value in crate::value::arb_json()) {
            let text = value.to_string();
            let node = Node::read(&text).expect("a Value's text reads");
            prop_assert_eq!(node.canonical_digest(), canonical_digest(&value));
            prop_assert_eq!(serde_json::to_string(&node).expect("json"), text);
        }
    }
}

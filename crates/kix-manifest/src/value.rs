//! Building `serde_json::Value`s compactly, and measuring them as JSON.
//!
//! A build keeps every manifest in memory as a `serde_json::Value` (with
//! `preserve_order`, each mapping is an `IndexMap`). `Value`'s own
//! `Deserialize` grows every mapping and array by doubling, leaving on
//! average a third of each allocation unused; for a build of 10,000 objects
//! that is tens of megabytes. [`CompactValue`] collects the entries first and
//! allocates each mapping and array at its exact size, which is also faster
//! (no re-hashing or copying while growing). The result is the same `Value`
//! that `serde_json` would build.

use std::fmt;
use std::io;

use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// A `Value` deserialized with exact-size mappings and arrays.
pub(crate) struct CompactValue(pub Value);

impl<'de> Deserialize<'de> for CompactValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut scratch = Scratch::default();
        ValueSeed {
            scratch: &mut scratch,
        }
        .deserialize(deserializer)
        .map(CompactValue)
    }
}

/// Buffers reused across the whole document, so that collecting entries
/// before building each mapping does not allocate per mapping.
#[derive(Default)]
struct Scratch {
    /// Stack of pending mapping entries; each nested mapping uses the part
    /// above where its parent stopped.
    entries: Vec<(String, Value)>,
    /// The same for array elements.
    items: Vec<Value>,
}

struct ValueSeed<'a> {
    scratch: &'a mut Scratch,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Value, E> {
        Number::from_i128(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom(format!("integer {v} is out of range")))
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Value, E> {
        Number::from_u128(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom(format!("integer {v} is out of range")))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        // `1e400` in JSON: kubectl refuses it (out of range for float64).
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom(format!("number {v} is out of range")))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let start = self.scratch.items.len();
        loop {
            let item = seq.next_element_seed(ValueSeed {
                scratch: &mut *self.scratch,
            });
            match item {
                Ok(Some(item)) => self.scratch.items.push(item),
                Ok(None) => break,
                Err(e) => {
                    self.scratch.items.truncate(start);
                    return Err(e);
                }
            }
        }
        // `drain(..).collect()` allocates exactly the number of items.
        let items: Vec<Value> = self.scratch.items.drain(start..).collect();
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let start = self.scratch.entries.len();
        loop {
            let entry = match map.next_key::<String>() {
                Ok(Some(key)) => map
                    .next_value_seed(ValueSeed {
                        scratch: &mut *self.scratch,
                    })
                    .map(|value| Some((key, value))),
                Ok(None) => Ok(None),
                Err(e) => Err(e),
            };
            match entry {
                Ok(Some(entry)) => self.scratch.entries.push(entry),
                Ok(None) => break,
                Err(e) => {
                    self.scratch.entries.truncate(start);
                    return Err(e);
                }
            }
        }
        let mut object = Map::with_capacity(self.scratch.entries.len() - start);
        let mut repeated = None;
        for (key, value) in self.scratch.entries.drain(start..) {
            if let (Some(_), None) = (object.insert(key.clone(), value), &repeated) {
                repeated = Some(key);
            }
        }
        match repeated {
            // kubectl's decoders disagree on which value a repeated key has.
            Some(key) => Err(<A::Error as de::Error>::custom(format!(
                "duplicate key {key:?} in an object (kubectl may read either value): remove one"
            ))),
            None => Ok(Value::Object(object)),
        }
    }
}

/// `value` as compact JSON text (what `serde_json::to_string` writes), or
/// `None` once it passes `limit` bytes. Writing stops there: a small
/// document that anchors and aliases expand never becomes a text past the
/// limit.
pub(crate) fn json_text_at_most(value: &Value, limit: usize) -> Option<String> {
    struct Bounded {
        out: Vec<u8>,
        limit: usize,
    }
    impl io::Write for Bounded {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.out.len() + buf.len() > self.limit {
                return Err(io::Error::other("past the limit"));
            }
            self.out.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut bounded = Bounded {
        out: Vec::with_capacity(256.min(limit)),
        limit,
    };
    serde_json::to_writer(&mut bounded, value).ok()?;
    // serde_json writes UTF-8: this never fails.
    String::from_utf8(bounded.out).ok()
}

/// Any JSON value, for property tests: every scalar kind, strings and keys
/// with characters JSON escapes.
#[cfg(test)]
pub(crate) fn arb_json() -> impl proptest::strategy::Strategy<Value = Value> {
    use proptest::prelude::*;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        "\\PC{0,8}|[\\x00-\\x1f\"\\\\é/]{0,4}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            proptest::collection::vec(("[a-zA-Z\"\\\\é]{0,3}", inner), 0..8)
                .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        ]
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn compact_json(text: &str) -> Value {
        let mut de = serde_json::Deserializer::from_str(text);
        let value = CompactValue::deserialize(&mut de).expect("valid JSON").0;
        de.end().expect("end");
        value
    }

    #[test]
    fn same_value_as_serde_json() {
        let text = r#"{"b":[1,-2,3.5,1e300,18446744073709551615,-9223372036854775808,"x\n\"",null,true,false,[],{}],
            "a":{"z":{"y":[{"k":"v"}]},"dup":1},"":""}"#;
        let ours = compact_json(text);
        let theirs: Value = serde_json::from_str(text).expect("valid");
        assert_eq!(ours, theirs);
        // Same key order too.
        assert_eq!(ours.to_string(), theirs.to_string());
    }

    #[test]
    fn same_value_from_yaml() {
        let text = "a: 1\nb: [x, {c: ~}]\n1: one\ntrue: yes\nbig: 123456789012345678901234567890\n";
        let ours: Vec<CompactValue> = serde_saphyr::from_multiple(text).expect("yaml");
        let theirs: Vec<Value> = serde_saphyr::from_multiple(text).expect("yaml");
        assert_eq!(ours.len(), theirs.len());
        for (a, b) in ours.iter().zip(&theirs) {
            assert_eq!(a.0.to_string(), b.to_string());
        }
    }

    #[test]
    fn mappings_are_exact_size() {
        let value = compact_json(r#"{"a":1,"b":2,"c":3,"d":4,"e":5}"#);
        let map = value.as_object().expect("object");
        assert_eq!(map.len(), 5);
        let items = compact_json("[1,2,3,4,5]");
        assert_eq!(items.as_array().map(Vec::capacity), Some(5));
    }

    #[test]
    fn repeated_keys_are_errors() {
        let mut de = serde_json::Deserializer::from_str(r#"{"a":{"k":1,"k":2}}"#);
        let error = CompactValue::deserialize(&mut de)
            .err()
            .map(|e| e.to_string());
        assert!(error.is_some_and(|e| e.contains("duplicate key \"k\"")));
    }

    #[test]
    fn errors_propagate() {
        let mut de = serde_json::Deserializer::from_str(r#"{"a":[1,2,}"#);
        assert!(CompactValue::deserialize(&mut de).is_err());
    }

    #[test]
    fn json_length() {
        for text in [
            r#"{"a":[1,2.5,-3,1e300,null,true,false,"\u0001\b\f\n\r\t\"\\/é"],"b":{}}"#,
            "[]",
            "{}",
            r#""x""#,
            "0.1",
        ] {
            let value: Value = serde_json::from_str(text).expect("json");
            let len = serde_json::to_vec(&value).expect("serialize").len();
            assert_eq!(
                json_text_at_most(&value, len),
                Some(value.to_string()),
                "{text}"
            );
            assert_eq!(json_text_at_most(&value, len - 1), None, "{text}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn json_length_is_exact(value in arb_json()) {
            let len = serde_json::to_vec(&value).expect("serialize").len();
            prop_assert_eq!(json_text_at_most(&value, len), Some(value.to_string()));
            prop_assert_eq!(json_text_at_most(&value, len - 1), None);
        }

        #[test]
        fn compact_equals_serde_json(value in arb_json()) {
            // Compared with serde_json's own parse (its float parsing is not
            // exactly round-trip without the float_roundtrip feature).
            let text = value.to_string();
            let theirs: Value = serde_json::from_str(&text).expect("valid");
            prop_assert_eq!(compact_json(&text), theirs);
        }
    }
}

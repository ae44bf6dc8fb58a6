//! Plain YAML scalars and numbers, resolved to the values kubectl sends.
//!
//! kubectl reads YAML with `sigs.k8s.io/yaml`, which resolves plain
//! (unquoted, untagged) scalars with the YAML 1.1 rules of
//! `go.yaml.in/yaml/v2`, converts the result to JSON, and decodes that JSON
//! into unstructured objects, where a number is an `int64` when its JSON text
//! is an integer that fits, else a `float64`. [`resolve_plain`] and
//! [`kubectl_number`] reproduce those two steps; the differential test
//! (`tests/kubectl_parity.rs`) and the `kubectl_parity` fuzz target check
//! them against the real code.

use serde_json::{Number, Value};

/// What a plain scalar means to kubectl.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Plain {
    Null,
    Bool(bool),
    Int(i64),
    /// Above `i64::MAX`; kubectl sends it as a `float64`.
    BigInt(u64),
    /// Finite or not (`.inf`, `.nan`).
    Float(f64),
    /// `<<`: a merge key where a key is expected, else the string.
    Merge,
    Str,
}

/// Resolves a plain scalar as `go.yaml.in/yaml/v2` does: exact spellings
/// for null and booleans (`yes`, `On`, `N`, but not `oN`), integers in
/// bases 2, 8 (`0o17` and `017`), 10 and 16 with `_` anywhere, floats,
/// `.inf` and `.nan`. Everything else is a string (timestamps and `1:30`
/// included).
pub(crate) fn resolve_plain(s: &str) -> Plain {
    if let Some(word) = special_word(s) {
        return word;
    }
    match s.as_bytes()[0] {
        b'.' => go_float(s).map_or(Plain::Str, Plain::Float),
        b'0'..=b'9' | b'+' | b'-' => number(s),
        _ => Plain::Str,
    }
}

/// The spellings YAML 1.1 (as go-yaml v2 lists them) gives a meaning.
fn special_word(s: &str) -> Option<Plain> {
    Some(match s {
        "" | "~" | "null" | "Null" | "NULL" => Plain::Null,
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            Plain::Bool(true)
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            Plain::Bool(false)
        }
        ".nan" | ".NaN" | ".NAN" => Plain::Float(f64::NAN),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => Plain::Float(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => Plain::Float(f64::NEG_INFINITY),
        "<<" => Plain::Merge,
        _ => return None,
    })
}

/// A scalar starting with a digit or a sign: underscores are dropped, then
/// an integer (Go's `ParseInt(s, 0, 64)`, then `ParseUint`), a float of the
/// YAML form, or `0b` followed by a signed binary number.
fn number(s: &str) -> Plain {
    let plain: String = s.chars().filter(|&c| c != '_').collect();
    if let Some(i) = go_int(&plain) {
        return Plain::Int(i);
    }
    if let Some(u) = go_uint(&plain) {
        return Plain::BigInt(u);
    }
    if is_yaml_float(&plain)
        && let Some(f) = go_float(&plain)
    {
        return Plain::Float(f);
    }
    if let Some(binary) = plain.strip_prefix("0b") {
        if let Some(i) = signed_in_base(binary, 2) {
            return Plain::Int(i);
        }
        if let Some(u) = digits_in_base(binary, 2) {
            return Plain::BigInt(u);
        }
    } else if let Some(binary) = plain.strip_prefix("-0b")
        && let Some(u) = digits_in_base(binary, 2)
        && let Some(i) = negate(u)
    {
        return Plain::Int(i);
    }
    Plain::Str
}

/// `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`
fn is_yaml_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = usize::from(matches!(b.first(), Some(b'+' | b'-')));
    let digits = |i: &mut usize| {
        let start = *i;
        while b.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i > start
    };
    if b.get(i) == Some(&b'.') {
        i += 1;
        if !digits(&mut i) {
            return false;
        }
    } else {
        if !digits(&mut i) {
            return false;
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            digits(&mut i);
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if !digits(&mut i) {
            return false;
        }
    }
    i == b.len()
}

/// Go's `ParseFloat(s, 64)` for the decimal forms YAML lets through: `None`
/// when out of range (Go's `ErrRange`) or not a decimal float.
fn go_float(s: &str) -> Option<f64> {
    // The '.' branch passes the text as written; Go's syntax there is the
    // YAML float form without underscores.
    if !is_yaml_float(s) {
        return None;
    }
    s.parse::<f64>().ok().filter(|f| f.is_finite())
}

/// Go's `ParseUint(s, 0, 64)` on text without underscores.
fn go_uint(s: &str) -> Option<u64> {
    let (base, digits) = match s.as_bytes() {
        [b'0', b'x' | b'X', ..] => (16, &s[2..]),
        [b'0', b'o' | b'O', ..] => (8, &s[2..]),
        [b'0', b'b' | b'B', ..] => (2, &s[2..]),
        [b'0', _, ..] => (8, &s[1..]),
        _ => (10, s),
    };
    digits_in_base(digits, base)
}

/// Go's `ParseInt(s, 0, 64)` on text without underscores.
fn go_int(s: &str) -> Option<i64> {
    match s.as_bytes().first()? {
        b'-' => negate(go_uint(&s[1..])?),
        b'+' => i64::try_from(go_uint(&s[1..])?).ok(),
        _ => i64::try_from(go_uint(s)?).ok(),
    }
}

/// Go's `ParseInt(s, base, 64)`: an optional sign, then digits.
fn signed_in_base(s: &str, base: u32) -> Option<i64> {
    match s.as_bytes().first()? {
        b'-' => negate(digits_in_base(&s[1..], base)?),
        b'+' => i64::try_from(digits_in_base(&s[1..], base)?).ok(),
        _ => i64::try_from(digits_in_base(s, base)?).ok(),
    }
}

fn negate(magnitude: u64) -> Option<i64> {
    0i64.checked_sub_unsigned(magnitude)
}

/// At least one digit of `base`, nothing else (no sign), within u64.
fn digits_in_base(s: &str, base: u32) -> Option<u64> {
    if s.is_empty() || !s.chars().all(|c| c.is_digit(base)) {
        return None;
    }
    u64::from_str_radix(s, base).ok()
}

/// Why a number cannot be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NotFinite;

/// A number as kubectl sends it: JSON-encoded by Go, then read back as an
/// `int64` when that text is an integer that fits, else a `float64`. So
/// `1.0` and `1e2` are the integers 1 and 100, and an integer above
/// `i64::MAX` becomes the nearest `float64`. Infinities and NaN (`.inf`,
/// `.nan`) cannot be encoded: kubectl fails on them.
pub(crate) fn kubectl_number(n: &Number) -> Result<Number, NotFinite> {
    if n.is_i64() {
        return Ok(n.clone());
    }
    match n.as_u64() {
        Some(u) => float_number(u as f64),
        None => float_number(n.as_f64().ok_or(NotFinite)?),
    }
}

/// A `float64` as kubectl sends it (see [`kubectl_number`]).
pub(crate) fn float_number(f: f64) -> Result<Number, NotFinite> {
    if !f.is_finite() {
        return Err(NotFinite);
    }
    // Go writes floats of magnitude in [1e-6, 1e21) without an exponent,
    // with the shortest digits that read back the same; Rust's `Display`
    // writes the same digits. Integral ones then read back as integers.
    if f.fract() == 0.0
        && f.abs() < 1e21
        && let Ok(i) = format!("{f}").parse::<i64>()
    {
        return Ok(Number::from(i));
    }
    Number::from_f64(f).ok_or(NotFinite)
}

/// A plain scalar's JSON value, as kubectl sends it; `Err` for infinities
/// and NaN. `Merge` and `Str` are the text itself.
pub(crate) fn plain_json(s: &str, plain: Plain) -> Result<Value, NotFinite> {
    Ok(match plain {
        Plain::Null => Value::Null,
        Plain::Bool(b) => Value::Bool(b),
        Plain::Int(i) => Value::Number(i.into()),
        Plain::BigInt(u) => Value::Number(float_number(u as f64)?),
        Plain::Float(f) => Value::Number(float_number(f)?),
        Plain::Merge | Plain::Str => Value::String(s.to_owned()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(s: &str) -> Value {
        plain_json(s, resolve_plain(s)).expect("finite")
    }

    #[test]
    fn words_have_exact_spellings() {
        for (s, v) in [
            ("on", Value::Bool(true)),
            ("On", Value::Bool(true)),
            ("Y", Value::Bool(true)),
            ("NO", Value::Bool(false)),
            ("Null", Value::Null),
            ("~", Value::Null),
        ] {
            assert_eq!(json(s), v, "{s}");
        }
        for s in ["oN", "tRUE", "nO", "nULL", "yES", "NaN", ".iNf"] {
            assert_eq!(json(s), Value::from(s), "{s}");
        }
    }

    #[test]
    fn numbers_in_every_base() {
        for (s, n) in [
            ("0X1F", 31i64),
            ("0x_1F", 31),
            ("+0x1f", 31),
            ("0O17", 15),
            ("0o17", 15),
            ("017", 15),
            ("0644", 420),
            ("0B101", 5),
            ("0b-101", -5),
            ("-0b101", -5),
            ("1_", 1),
            ("1_000", 1000),
            ("-0", 0),
            ("08", 8),
            ("1e3", 1000),
            ("1.0", 1),
            ("-0.0", 0),
            ("4.611686018427387904e18", 4611686018427388000),
        ] {
            assert_eq!(json(s), Value::from(n), "{s}");
        }
        assert_eq!(json("685_230.15"), Value::from(685230.15));
        assert_eq!(json(".5"), Value::from(0.5));
        assert_eq!(json("+.5"), Value::from(0.5));
        assert_eq!(json("1e-400"), Value::from(0));
        assert_eq!(
            json("12345678901234567890"),
            Value::from(12345678901234567890u64 as f64)
        );
        for s in [
            "1:30",
            "1e400",
            "0x",
            "1.2.3",
            "2001-01-01",
            "._5",
            "-",
            "+",
            "0b",
        ] {
            assert_eq!(json(s), Value::from(s), "{s}");
        }
        assert_eq!(plain_json(".inf", resolve_plain(".inf")), Err(NotFinite));
    }
}

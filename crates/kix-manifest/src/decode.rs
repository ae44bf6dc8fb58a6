//! A resource file's objects, read as `kubectl apply -f FILE` reads them.
//!
//! kubectl (the cli-runtime resource builder) reads every file the same
//! way, whatever its extension:
//!
//! 1. A UTF-8 byte-order mark is dropped (kix refuses UTF-16 files, which
//!    kubectl converts).
//! 2. When the first character that is not white space (within 4096 bytes)
//!    is `{`, the file is a JSON stream: objects one after the other. If the
//!    first or second value is not JSON, the rest of the file, from the end
//!    of the last object read, is read as YAML.
//! 3. YAML is cut into chunks at lines that start with `---` followed by
//!    nothing but white space or a comment (a line starting with `---` and
//!    anything else is an error); CRLF line ends are read as LF. Each chunk's
//!    first document is read ([`crate::yaml`]); empty and `null` documents
//!    are skipped.
//! 4. A document with a top-level `items` key is a List: its items are the
//!    objects (`items: null` gives none); an item with neither `kind` nor
//!    `apiVersion` gets the List's `kind` without the `List` suffix and its
//!    `apiVersion`. A List inside a List is an error.
//! 5. `metadata` must decode as Kubernetes object metadata (labels and
//!    annotations are strings, ...).
//!
//! Numbers are what kubectl sends ([`crate::scalar::kubectl_number`]).
//! Whatever kubectl would read to values other than the text says is
//! refused with the line and what to write instead.

use std::collections::BTreeSet;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::fast_yaml;
use crate::published::drop_server_set;
use crate::scalar::kubectl_number;
use crate::value::CompactValue;
use crate::yaml::{Budget, MAX_FILE_NODES, YamlDocument, parse_chunk, too_many_nodes};

/// How far kubectl looks for the `{` that makes a file a JSON stream.
const JSON_SNIFF_BYTES: usize = 4096;

/// One document of a file.
#[derive(Debug)]
pub(crate) struct Document {
    pub value: Value,
    /// The line where it starts; `None` when not known yet (the fast path
    /// does not track lines: [`locate`] finds them).
    pub line: Option<u32>,
    /// For a YAML List, the line of each item.
    pub item_lines: Vec<u32>,
}

/// Why a file cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DecodeError {
    pub line: Option<u32>,
    pub message: String,
}

impl DecodeError {
    fn at(line: u32, message: impl Into<String>) -> Self {
        DecodeError {
            line: Some(line),
            message: message.into(),
        }
    }

    fn whole(message: impl Into<String>) -> Self {
        DecodeError {
            line: None,
            message: message.into(),
        }
    }
}

/// The documents of a resource file, as kubectl reads them. `fast`: try
/// the fast YAML path first (it leaves `line` unknown).
pub(crate) fn read(bytes: &[u8], fast: bool) -> Result<Vec<Document>, DecodeError> {
    let text = text_of(bytes)?;
    if looks_like_json(text) {
        return read_json_stream(text, fast);
    }
    read_yaml(text, 1, fast)
}

/// What kix makes of one resource file, before package defaults: the
/// objects it would send, in file order, or the message of the error it
/// reports. The same steps as `read_tree` takes for each file; for the
/// differential test against kubectl and its fuzz target.
#[doc(hidden)]
pub fn file_objects(bytes: &[u8]) -> Result<Vec<Value>, String> {
    let documents = read(bytes, true).map_err(|e| match e.line {
        Some(line) => format!("line {line}: {}", e.message),
        None => e.message,
    })?;
    let mut out = Vec::new();
    for (index, document) in documents.into_iter().enumerate() {
        let Document {
            value,
            line,
            item_lines,
        } = document;
        let at = |item: Item| {
            let (line, item_lines) = match line {
                Some(line) => (Some(line), item_lines.clone()),
                None => locate(bytes, index),
            };
            let line = item.and_then(|i| item_lines.get(i).copied()).or(line);
            let mut at = format!("document {}", index + 1);
            if let Some(i) = item {
                at.push_str(&format!(", items[{i}]"));
            }
            if let Some(line) = line {
                at.push_str(&format!(" (line {line})"));
            }
            at
        };
        // What only the API server sets is dropped (the tree reader warns).
        let mut dropped = std::collections::BTreeSet::new();
        let objects = objects(value, &mut dropped)
            .map_err(|(item, reason)| format!("{}: {reason}", at(item)))?;
        for (item, manifest) in objects {
            crate::object::ObjectKey::from_manifest(&manifest)
                .map_err(|e| format!("{}: {e}", at(item)))?;
            out.push(manifest);
        }
    }
    Ok(out)
}

/// The line and item lines of document `index` (0-based), read again
/// without the fast path.
pub(crate) fn locate(bytes: &[u8], index: usize) -> (Option<u32>, Vec<u32>) {
    match read(bytes, false) {
        Ok(mut documents) if index < documents.len() => {
            let document = documents.swap_remove(index);
            (document.line, document.item_lines)
        }
        _ => (None, Vec::new()),
    }
}

/// The file as text, without a UTF-8 byte-order mark.
fn text_of(bytes: &[u8]) -> Result<&str, DecodeError> {
    if bytes.starts_with(&[0xfe, 0xff]) || bytes.starts_with(&[0xff, 0xfe]) {
        return Err(DecodeError::whole(
            "UTF-16 text (kubectl converts it, kix does not): save the file as UTF-8",
        ));
    }
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    std::str::from_utf8(bytes).map_err(|e| DecodeError::whole(format!("not UTF-8: {e}")))
}

/// Whether kubectl takes the text for a JSON stream.
fn looks_like_json(text: &str) -> bool {
    let head = &text.as_bytes()[..text.len().min(JSON_SNIFF_BYTES)];
    // A character cut at the limit ends the look, as in kubectl.
    let head = match std::str::from_utf8(head) {
        Ok(head) => head,
        Err(e) => &text[..e.valid_up_to()],
    };
    head.trim_start().starts_with('{')
}

/// 1 + the number of line breaks before `offset`.
fn line_at(text: &str, offset: usize) -> u32 {
    let breaks = text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count();
    u32::try_from(breaks + 1).unwrap_or(u32::MAX)
}

/// A JSON stream; after one value, text that is not JSON is read as YAML.
fn read_json_stream(text: &str, fast: bool) -> Result<Vec<Document>, DecodeError> {
    let mut documents = Vec::new();
    let mut values = serde_json::Deserializer::from_str(text).into_iter::<CompactValue>();
    let mut count = 0;
    let mut end = 0;
    // Lines counted up to an offset, carried forward: counting from the
    // start for each object made a stream of many objects quadratic.
    let mut lines: (usize, u32) = (0, 1);
    let mut nodes_left = MAX_FILE_NODES;
    loop {
        let start = end + (text[end..].len() - text[end..].trim_start().len());
        if let Some(line) = kix_sops::count_json_nodes(&text.as_bytes()[start..], &mut nodes_left) {
            let before = line_at(&text[lines.0..start], usize::MAX) - 1;
            let line = lines.1.saturating_add(before).saturating_add(line - 1);
            return Err(DecodeError::at(line, too_many_nodes()));
        }
        match values.next() {
            None => return Ok(documents),
            Some(Ok(CompactValue(value))) => {
                count += 1;
                end = values.byte_offset();
                if value.is_null() {
                    continue;
                }
                let value = kubectl_numbers(value);
                let breaks = line_at(&text[lines.0..start], usize::MAX) - 1;
                lines = (start, lines.1.saturating_add(breaks));
                documents.push(Document {
                    value,
                    line: Some(lines.1),
                    item_lines: Vec::new(),
                });
            }
            Some(Err(error)) => {
                let json_error = || {
                    DecodeError::at(
                        u32::try_from(error.line()).unwrap_or(u32::MAX),
                        format!("JSON: {error}"),
                    )
                };
                // kubectl switches to YAML only at JSON syntax errors; a
                // value it cannot use (`1e400`) fails the file.
                let unusable = error.classify() == serde_json::error::Category::Data
                    || error.to_string().starts_with("number out of range");
                if count > 1 || unusable {
                    return Err(json_error());
                }
                // kubectl reads the rest as YAML, from the end of the last
                // object, after white space up to the first line break.
                let Some(rest) = skip_to_yaml(&text[end..]) else {
                    return Err(json_error());
                };
                let rest_start = text.len() - rest.len();
                // When YAML fails too, kubectl reports the JSON error.
                let yaml = read_yaml(rest, line_at(text, rest_start), fast);
                documents.extend(yaml.map_err(|_| json_error())?);
                return Ok(documents);
            }
        }
    }
}

/// White space up to and including the first line break dropped; `None`
/// when only white space is left.
fn skip_to_yaml(text: &str) -> Option<&str> {
    for (i, c) in text.char_indices() {
        if c == '\n' {
            return Some(&text[i + 1..]);
        }
        if !c.is_whitespace() {
            return Some(&text[i..]);
        }
    }
    None
}

/// Every number of `value` as kubectl sends it (JSON has no infinities,
/// so every number converts).
fn kubectl_numbers(value: Value) -> Value {
    match value {
        Value::Number(n) if !n.is_i64() => Value::Number(kubectl_number(&n).unwrap_or(n)),
        Value::Array(items) => Value::Array(items.into_iter().map(kubectl_numbers).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, kubectl_numbers(v)))
                .collect(),
        ),
        other => other,
    }
}

/// YAML text whose first line is line `first_line` of the file.
fn read_yaml(text: &str, first_line: u32, fast: bool) -> Result<Vec<Document>, DecodeError> {
    if fast && let Some(values) = fast_yaml::parse(text) {
        return Ok(values
            .into_iter()
            .map(|value| Document {
                value,
                line: None,
                item_lines: Vec::new(),
            })
            .collect());
    }
    let mut documents = Vec::new();
    let mut budget = Budget::for_file(text.len());
    // Each chunk read as it is cut, as kubectl does: a copy of all of
    // them held the file twice.
    chunks(text, first_line, &mut |chunk| {
        let parsed = parse_chunk(&chunk.text, chunk.first_line, &mut budget)
            .map_err(|e| DecodeError::at(e.line, e.message))?;
        if let Some(YamlDocument {
            value,
            line,
            item_lines,
        }) = parsed
        {
            documents.push(Document {
                value,
                line: Some(line),
                item_lines,
            });
        }
        Ok(())
    })?;
    Ok(documents)
}

/// The documents of YAML text without the fast path: what the fast path
/// must match (see `fast_yaml::check_against_full_parser`).
pub(crate) fn parse_yaml_full(text: &str) -> Result<Vec<Value>, DecodeError> {
    Ok(read_yaml(text, 1, false)?
        .into_iter()
        .map(|document| document.value)
        .collect())
}

/// A `---`-separated part of a YAML file, as kubectl cuts it.
struct Chunk {
    text: String,
    first_line: u32,
}

/// Cuts YAML text as kubectl's YAML reader does: lines end at LF (a CR
/// before it is dropped); a line starting with `---` that has only white
/// space or a comment after it ends a chunk (and starts the next one when
/// no content came before it). Gives each chunk to `each` as it is cut.
fn chunks(
    text: &str,
    first_line: u32,
    each: &mut dyn FnMut(Chunk) -> Result<(), DecodeError>,
) -> Result<(), DecodeError> {
    check_characters(text, first_line)?;
    let mut current = String::new();
    let mut current_line = first_line;
    let body = text.strip_suffix('\n');
    let ends_with_break = body.is_some();
    // One at a time: a Vec of lines took 256 MB for 16 Mi line breaks.
    let lines = (!text.is_empty()).then(|| body.unwrap_or(text).split('\n'));
    let mut lines = lines.into_iter().flatten().enumerate().peekable();
    // Whether a document has content since the last `---` or `...`.
    let mut content = false;
    while let Some((i, raw)) = lines.next() {
        let line_no = first_line.saturating_add(u32::try_from(i).unwrap_or(u32::MAX));
        let has_break = lines.peek().is_some() || ends_with_break;
        let line = if has_break {
            raw.strip_suffix('\r').unwrap_or(raw)
        } else {
            raw
        };
        if line.contains('\r') {
            return Err(DecodeError::at(
                line_no,
                "a carriage return that does not end a line: remove it",
            ));
        }
        if let Some(after) = line.strip_prefix("...")
            && (after.is_empty() || after.starts_with([' ', '\t', '#']))
        {
            // go-yaml v2 refuses a document end with no document before it.
            if !content {
                return Err(DecodeError::at(
                    line_no,
                    "`...` with no document before it, which kubectl refuses: remove it",
                ));
            }
            content = false;
        } else if !line.trim_start().is_empty() && !line.trim_start().starts_with('#') {
            content = !line.starts_with("---");
        }
        if let Some(after) = line.strip_prefix("---") {
            let after = after.trim();
            if !after.is_empty() && !after.starts_with('#') {
                return Err(DecodeError::at(
                    line_no,
                    format!(
                        "`---` followed by `{after}`: kubectl allows only a comment after a \
                         document separator; put the content on the next line"
                    ),
                ));
            }
            if !current.is_empty() {
                each(Chunk {
                    text: std::mem::take(&mut current),
                    first_line: current_line,
                })?;
                current_line = line_no + 1;
                continue;
            }
            current_line = line_no;
        }
        current.push_str(line);
        current.push('\n');
    }
    if !current.is_empty() {
        each(Chunk {
            text: current,
            first_line: current_line,
        })?;
    }
    Ok(())
}

/// Characters the YAML 1.1 reader of kubectl takes differently from a YAML
/// 1.2 one (line breaks NEL, LS, PS; a BOM inside the text), or refuses
/// (control characters).
fn check_characters(text: &str, first_line: u32) -> Result<(), DecodeError> {
    let bad = |c: char| {
        matches!(
            c,
            '\u{85}' | '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}'
        ) || (c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
    };
    if text.is_ascii()
        && !text
            .bytes()
            .any(|b| b.is_ascii_control() && !matches!(b, b'\t' | b'\n' | b'\r'))
    {
        return Ok(());
    }
    match text.char_indices().find(|&(_, c)| bad(c)) {
        None => Ok(()),
        Some((offset, c)) => Err(DecodeError::at(
            first_line + line_at(text, offset) - 1,
            format!(
                "character U+{:04X}, which YAML 1.1 (kubectl) reads differently or refuses: \
                 write it as an escape (\"\\u{:04X}\") in a double-quoted string",
                c as u32, c as u32
            ),
        )),
    }
}

/// The index of an object in its List's `items`; `None` for a document
/// that is an object.
pub(crate) type Item = Option<usize>;

/// What kubectl makes of a document: its objects, the index of each in the
/// List's `items` (`None` for a document that is an object), or why it is
/// refused and where (the item index, or `None` for the document). The
/// fields only the API server sets are dropped from each object, their
/// names added to `dropped` ([`crate::published`]).
pub(crate) fn objects(
    value: Value,
    dropped: &mut BTreeSet<&'static str>,
) -> Result<Vec<(Item, Value)>, (Item, String)> {
    let Value::Object(mut map) = value else {
        return Ok(vec![(None, value)]);
    };
    check_metadata(&map).map_err(|e| (None, e))?;
    drop_empty_namespace(&mut map);
    let Some(items) = map.remove("items") else {
        drop_server_set(&mut map, dropped);
        return Ok(vec![(None, Value::Object(map))]);
    };
    let list_kind = match map.get("kind") {
        Some(Value::String(kind)) if !kind.is_empty() => kind.clone(),
        _ => {
            return Err((
                None,
                "a List (a document with `items`) needs a `kind`".to_owned(),
            ));
        }
    };
    let list_api_version = map.get("apiVersion").cloned();
    let items = match items {
        Value::Null => Vec::new(),
        Value::Array(items) => items,
        other => {
            return Err((
                None,
                format!(
                    "the items of a List must be an array, found {}",
                    crate::object::json_type(&other)
                ),
            ));
        }
    };
    let item_kind = list_kind
        .strip_suffix("List")
        .unwrap_or(&list_kind)
        .to_owned();
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let Value::Object(mut item) = item else {
            return Err((
                Some(i),
                format!(
                    "an item of a List must be a mapping, found {}",
                    crate::object::json_type(&item)
                ),
            ));
        };
        if item.get("items").is_some_and(Value::is_array) {
            return Err((
                Some(i),
                "a List inside a List, which kubectl refuses: move its items into the outer \
                 List"
                    .to_owned(),
            ));
        }
        let has = |field: &str| {
            item.get(field)
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty())
        };
        if !has("kind") && !has("apiVersion") {
            item.insert("kind".into(), Value::from(item_kind.clone()));
            item.insert(
                "apiVersion".into(),
                match &list_api_version {
                    Some(Value::String(v)) => Value::from(v.clone()),
                    _ => Value::from(""),
                },
            );
        }
        check_metadata(&item).map_err(|e| (Some(i), e))?;
        drop_empty_namespace(&mut item);
        drop_server_set(&mut item, dropped);
        out.push((Some(i), Value::Object(item)));
    }
    Ok(out)
}

/// kubectl never sends `metadata.namespace: ""` (nor `null`, which its
/// typed metadata reads as ""): it drops it, or (for a namespaced kind)
/// puts its default namespace there, as kix's engine does.
fn drop_empty_namespace(object: &mut Map<String, Value>) {
    if let Some(Value::Object(metadata)) = object.get_mut("metadata")
        && metadata
            .get("namespace")
            .is_some_and(|ns| ns.is_null() || ns.as_str() == Some(""))
    {
        metadata.remove("namespace");
    }
}

/// The typed decoding of `metadata` (and `apiVersion`, `kind`) that
/// kubectl does before it takes a document: fields of the wrong type are
/// errors there. Of the fields the API server sets, those kix drops
/// ([`crate::published`]) must have their type (kix is stricter where
/// kubectl's format is hard to follow); the deletion fields are refused
/// unless null.
fn check_metadata(map: &Map<String, Value>) -> Result<(), String> {
    for field in ["apiVersion", "kind"] {
        if let Some(v) = map.get(field)
            && !(v.is_string() || v.is_null())
        {
            return Err(format!(
                "{field} must be a string, found {}",
                crate::object::json_type(v)
            ));
        }
    }
    let Some(Value::Object(metadata)) = map.get("metadata") else {
        return Ok(());
    };
    let wrong = |field: &str, expected: &str, v: &Value| {
        Err(format!(
            "metadata.{field} must be {expected}, found {} (kubectl refuses it)",
            crate::object::json_type(v)
        ))
    };
    for (field, v) in metadata {
        if v.is_null() {
            continue;
        }
        match field.as_str() {
            "name" | "generateName" | "namespace" | "selfLink" | "uid" | "resourceVersion"
                if !v.is_string() =>
            {
                return wrong(field, "a string", v);
            }
            "labels" | "annotations" => match v {
                Value::Object(m) if m.values().all(|x| x.is_string() || x.is_null()) => {}
                Value::Object(m) => {
                    let (key, bad) = m
                        .iter()
                        .find(|(_, x)| !(x.is_string() || x.is_null()))
                        .map(|(k, x)| (k.as_str(), x))
                        .unwrap_or(("?", v));
                    return Err(format!(
                        "metadata.{field}.{key} must be a string, found {} (kubectl refuses \
                         it): quote it",
                        crate::object::json_type(bad)
                    ));
                }
                _ => return wrong(field, "a mapping", v),
            },
            "finalizers" => match v {
                Value::Array(a) if a.iter().all(|x| x.is_string() || x.is_null()) => {}
                _ => return wrong(field, "a list of strings", v),
            },
            "ownerReferences" => check_owner_references(v)?,
            "generation" if !v.is_i64() => {
                return wrong(field, "an integer", v);
            }
            "creationTimestamp" if !v.as_str().is_some_and(is_rfc3339) => {
                return Err(format!(
                    "metadata.creationTimestamp must be a time such as \"2025-01-02T03:04:05Z\", \
                     found {v} (kubectl refuses it)"
                ));
            }
            "managedFields" if !is_managed_fields(v) => {
                return wrong(field, "a list of managed fields entries", v);
            }
            "deletionTimestamp" | "deletionGracePeriodSeconds" => {
                return Err(format!(
                    "metadata.{field} is set by the API server: remove it from the manifest"
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// `2025-01-02T03:04:05Z`, with optional fractional seconds and a `Z` or
/// `±hh:mm` offset: RFC 3339 as Go's `time.RFC3339` parses it.
fn is_rfc3339(text: &str) -> bool {
    let b = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| {
        b.get(range)
            .is_some_and(|d| d.iter().all(u8::is_ascii_digit))
    };
    if b.len() < 20
        || !(digits(0..4)
            && digits(5..7)
            && digits(8..10)
            && digits(11..13)
            && digits(14..16)
            && digits(17..19))
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
    {
        return false;
    }
    let mut rest = &text[19..];
    if let Some(fraction) = rest.strip_prefix('.') {
        let n = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return false;
        }
        rest = &fraction[n..];
    }
    match rest.as_bytes() {
        [b'Z'] => true,
        [sign, h1, h2, b':', m1, m2] => {
            (*sign == b'+' || *sign == b'-') && [h1, h2, m1, m2].iter().all(|d| d.is_ascii_digit())
        }
        _ => false,
    }
}

/// A list of `ManagedFieldsEntry` mappings whose known fields have their
/// types (strings; `time` a time; `fieldsV1` a mapping).
fn is_managed_fields(v: &Value) -> bool {
    let Value::Array(entries) = v else {
        return false;
    };
    entries.iter().all(|entry| {
        let Value::Object(entry) = entry else {
            return entry.is_null();
        };
        entry.iter().all(|(key, value)| match key.as_str() {
            _ if value.is_null() => true,
            "manager" | "operation" | "apiVersion" | "fieldsType" | "subresource" => {
                value.is_string()
            }
            "time" => value.as_str().is_some_and(is_rfc3339),
            "fieldsV1" => value.is_object(),
            _ => true,
        })
    })
}

fn check_owner_references(v: &Value) -> Result<(), String> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)] // only the types are checked
    struct OwnerReference {
        api_version: Option<String>,
        kind: Option<String>,
        name: Option<String>,
        uid: Option<String>,
        controller: Option<bool>,
        block_owner_deletion: Option<bool>,
    }
    Option::<Vec<Option<OwnerReference>>>::deserialize(v)
        .map(|_| ())
        .map_err(|e| format!("metadata.ownerReferences: {e} (kubectl refuses it)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(text: &str) -> Result<Vec<(u32, String)>, DecodeError> {
        let mut out = Vec::new();
        chunks(text, 1, &mut |c| {
            out.push((c.first_line, c.text));
            Ok(())
        })?;
        Ok(out)
    }

    fn texts(text: &str) -> Vec<(u32, String)> {
        cut(text).expect("chunks")
    }

    #[test]
    fn chunks_as_kubectl_cuts_them() {
        assert_eq!(
            texts("a: 1\r\n--- # x\r\nb: 2"),
            [(1, "a: 1\n".to_owned()), (3, "b: 2\n".to_owned())]
        );
        assert_eq!(
            texts("---\na: 1\n---\n---\nb: 2\n"),
            [(1, "---\na: 1\n".to_owned()), (4, "---\nb: 2\n".to_owned())]
        );
        assert!(cut("a: 1\n--- b: 2\n").is_err());
        assert!(cut("a: 1\n----\n").is_err());
    }
}

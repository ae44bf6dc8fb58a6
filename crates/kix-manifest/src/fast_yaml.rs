//! A fast reader for the plain YAML that manifests are almost always written
//! in, beside the full reader (`decode`, `yaml`) rather than instead of it.
//!
//! [`parse`] reads block mappings and sequences, one-line flow collections,
//! plain and quoted one-line scalars and `|` literal blocks. It gives up
//! (returns `None`) at anything else, or anything it is not sure of: anchors,
//! aliases, tags, folded or multi-line scalars, numbers other than plain
//! decimal integers, keys that could resolve to something other than a
//! string, `...`. The caller then reads the text with the full reader, which
//! also produces every error message. So for any text, `parse` either
//! returns exactly the values the full reader returns, or `None`; the full
//! reader in turn returns what kubectl sends, or refuses (checked against
//! kubectl by `tests/kubectl_parity.rs` and the `kubectl_parity` fuzz
//! target). The tests and the `yaml_fast_path` fuzz target check the first
//! claim by comparing the two readers.
//!
//! Why: the full reader spends tens of µs per Kubernetes object, most of a
//! build's read time; this reader takes a small fraction of that.

use serde_json::{Map, Number, Value};

use crate::scalar::{Plain, resolve_plain};

/// Comment lines in a row read here before giving up (a bound on work).
const MAX_BUFFERED_COMMENTS: usize = 100_000;

/// Deepest nesting read here; the full reader's limit (128) is higher, so
/// deeper documents reach it and get its error.
const MAX_DEPTH: usize = 64;
/// Most documents read here (a bound on work); empty documents count, so
/// the fast path counts markers.
const MAX_DOCUMENTS: usize = 100_000;
/// Most lines and nodes read here (a bound on memory: a line takes 24
/// bytes, a node about 80); past them the full reader counts the nodes
/// exactly and refuses the file past `yaml::MAX_FILE_NODES`.
const MAX_LINES: usize = 1_000_000;
const MAX_NODES: usize = crate::yaml::MAX_FILE_NODES;
/// Longest one-line flow collection read here (`[a, b]`, `{}`): a longer
/// one is left to the full reader, which counts its nodes as it goes.
const MAX_FLOW_BYTES: usize = 64 * 1024;
/// YAML limits implicit keys to 1,024 characters; stay well below.
const MAX_KEY_LEN: usize = 512;

/// The documents of `text`, empty documents skipped, as the full reader would
/// return them; `None` when the text needs the full parser.
pub(crate) fn parse(text: &str) -> Option<Vec<Value>> {
    if !characters_are_plain(text) || text.bytes().filter(|&b| b == b'\n').count() >= MAX_LINES {
        return None;
    }
    let lines: Vec<Line<'_>> = text.split('\n').map(Line::new).collect();
    let mut reader = Reader {
        lines,
        pos: 0,
        depth: 0,
        nodes: 0,
    };
    let mut documents = Vec::new();
    let mut markers = 0;
    // Text before the first `---` is a document too.
    loop {
        match reader.peek() {
            Next::End => break,
            Next::Marker => {
                markers += 1;
                if markers >= MAX_DOCUMENTS {
                    return None;
                }
                reader.start_document()?;
                continue;
            }
            Next::Content(line) => {
                if line.text.starts_with("- ") || line.text == "-" {
                    // A document that is a sequence: not a Kubernetes object.
                    return None;
                }
                let indent = line.indent;
                documents.push(Value::Object(reader.mapping(indent)?));
                // A document ends at a marker or at the end of the text.
                if let Next::Content(_) = reader.peek() {
                    return None;
                }
            }
        }
    }
    Some(documents)
}

/// No tabs, carriage returns, BOMs, control characters or characters that
/// YAML 1.1 takes as line breaks: those are left to the full parser.
fn characters_are_plain(text: &str) -> bool {
    if text.is_ascii() {
        return text
            .bytes()
            .all(|b| b == b'\n' || (b' '..=b'~').contains(&b));
    }
    text.chars().all(|c| match c {
        '\n' | ' '..='~' => true,
        '\u{a0}'..='\u{d7ff}' => !matches!(c, '\u{2028}' | '\u{2029}'),
        '\u{e000}'..='\u{fffd}' => c != '\u{feff}',
        '\u{10000}'.. => true,
        _ => false,
    })
}

#[derive(Clone, Copy)]
struct Line<'a> {
    /// Leading spaces.
    indent: usize,
    /// The rest of the line, trailing spaces included.
    text: &'a str,
}

impl<'a> Line<'a> {
    fn new(raw: &'a str) -> Self {
        let text = raw.trim_start_matches(' ');
        Line {
            indent: raw.len() - text.len(),
            text,
        }
    }

    /// Blank or only a comment.
    fn is_skipped(&self) -> bool {
        let text = self.text.trim_end_matches(' ');
        text.is_empty() || text.starts_with('#')
    }

    /// `---` or `...` at the start of a line.
    fn is_marker(&self) -> bool {
        self.indent == 0
            && (self.text.starts_with("---") || self.text.starts_with("..."))
            && matches!(self.text.as_bytes().get(3), None | Some(b' '))
    }
}

enum Next<'a> {
    End,
    Marker,
    Content(Line<'a>),
}

struct Reader<'a> {
    lines: Vec<Line<'a>>,
    pos: usize,
    depth: usize,
    /// Nodes read, keys included (at most [`MAX_NODES`]).
    nodes: usize,
}

impl<'a> Reader<'a> {
    /// The next line that is neither blank nor a comment; `pos` moves to it.
    fn peek(&mut self) -> Next<'a> {
        let mut skipped = 0;
        while let Some(line) = self.lines.get(self.pos) {
            if line.is_marker() {
                return Next::Marker;
            }
            if !line.is_skipped() {
                return Next::Content(*line);
            }
            skipped += 1;
            if skipped > MAX_BUFFERED_COMMENTS {
                // Left to the full reader.
                return Next::Content(*line);
            }
            self.pos += 1;
        }
        Next::End
    }

    /// Steps over a `---` line; anything after the marker (`... `, a
    /// document on the marker's line, a directive) is left to the full
    /// parser.
    fn start_document(&mut self) -> Option<()> {
        let line = self.lines[self.pos];
        let rest = line.text[3..].trim_start_matches(' ');
        if !line.text.starts_with("---") || !(rest.is_empty() || rest.starts_with('#')) {
            return None;
        }
        self.pos += 1;
        Some(())
    }

    /// Counts `nodes` more; `None` past [`MAX_NODES`].
    fn count(&mut self, nodes: usize) -> Option<()> {
        self.nodes += nodes;
        (self.nodes <= MAX_NODES).then_some(())
    }

    fn enter(&mut self) -> Option<()> {
        self.depth += 1;
        (self.depth <= MAX_DEPTH).then_some(())
    }

    /// A block mapping whose keys are at `indent`; the current line is its
    /// first entry.
    fn mapping(&mut self, indent: usize) -> Option<Map<String, Value>> {
        self.enter()?;
        let mut entries: Vec<(String, Value)> = Vec::new();
        loop {
            let line = match self.peek() {
                Next::Content(line) if line.indent == indent => line,
                Next::Content(line) if line.indent > indent => return None,
                _ => break,
            };
            if line.text.starts_with("- ") || line.text == "-" {
                // A sequence at the keys' indentation ends the mapping
                // only where a key's value is parsed, not here.
                break;
            }
            let (key, rest) = split_key(line.text)?;
            self.count(2)?;
            self.pos += 1;
            let value = self.value_after_key(indent, rest)?;
            entries.push((key, value));
        }
        self.depth -= 1;
        into_map(entries)
    }

    /// The value of a mapping entry at `indent` whose text after `key:` is
    /// `rest`.
    fn value_after_key(&mut self, indent: usize, rest: &'a str) -> Option<Value> {
        if is_empty_or_comment(rest) {
            return match self.peek() {
                Next::Content(next) if next.indent > indent => self.nested(next),
                // `key:` followed by `- item` at the key's indentation.
                Next::Content(next)
                    if next.indent == indent
                        && (next.text.starts_with("- ") || next.text == "-") =>
                {
                    self.sequence(indent)
                }
                _ => Some(Value::Null),
            };
        }
        self.inline_value(indent, rest.trim_start_matches(' '))
    }

    /// A value written after `key: ` or `- ` on the same line.
    fn inline_value(&mut self, parent_indent: usize, text: &'a str) -> Option<Value> {
        match text.as_bytes()[0] {
            b'|' => self.literal_block(parent_indent, text),
            b'{' | b'[' => {
                // At most one node per two bytes (`[]`, `0,`).
                if text.len() > MAX_FLOW_BYTES {
                    return None;
                }
                self.count(text.len() / 2)?;
                let (value, rest) = flow_value(text, self.depth)?;
                is_empty_or_comment(rest).then_some(value)
            }
            b'"' | b'\'' => {
                let (value, rest) = quoted(text)?;
                is_empty_or_comment(rest).then_some(Value::String(value))
            }
            _ => {
                let scalar = plain_in_block(text)?;
                plain_value(scalar)
            }
        }
    }

    /// A mapping or sequence starting on `line`, more indented than its
    /// parent.
    fn nested(&mut self, line: Line<'a>) -> Option<Value> {
        if line.text.starts_with("- ") || line.text == "-" {
            self.sequence(line.indent)
        } else {
            Some(Value::Object(self.mapping(line.indent)?))
        }
    }

    /// A block sequence whose `-` are at `indent`; the current line is its
    /// first item.
    fn sequence(&mut self, indent: usize) -> Option<Value> {
        self.enter()?;
        let mut items = Vec::new();
        loop {
            let line = match self.peek() {
                Next::Content(line) if line.indent == indent => line,
                Next::Content(line) if line.indent > indent => return None,
                _ => break,
            };
            if !(line.text.starts_with("- ") || line.text == "-") {
                break;
            }
            self.count(1)?;
            let after_dash = &line.text[1..];
            let content = after_dash.trim_start_matches(' ');
            if is_empty_or_comment(after_dash) {
                self.pos += 1;
                items.push(match self.peek() {
                    Next::Content(next) if next.indent > indent => self.nested(next)?,
                    _ => Value::Null,
                });
                continue;
            }
            if content.starts_with("- ") || content == "-" {
                return None; // `- - x`: left to the full parser
            }
            let column = indent + 1 + (after_dash.len() - content.len());
            if starts_mapping_entry(content) {
                // `- key: value`: a mapping whose keys are at `column`; read
                // the rest of this line as its first line.
                self.lines[self.pos] = Line {
                    indent: column,
                    text: content,
                };
                items.push(Value::Object(self.mapping(column)?));
            } else {
                self.pos += 1;
                items.push(self.inline_value(indent, content)?);
            }
        }
        self.depth -= 1;
        // Exact-size, like `value::CompactValue`: a build keeps every value.
        items.shrink_to_fit();
        Some(Value::Array(items))
    }

    /// A `|` or `|-` literal block scalar; the current line is the header's
    /// (already consumed). Content must be more indented than `parent_indent`.
    fn literal_block(&mut self, parent_indent: usize, header: &str) -> Option<Value> {
        let keep_last_newline = match header.as_bytes().get(1) {
            None | Some(b' ') => true,
            Some(b'-') => false,
            _ => return None, // `|+`, `|2`: left to the full parser
        };
        let after = if keep_last_newline {
            &header[1..]
        } else {
            &header[2..]
        };
        if !is_empty_or_comment(after) {
            return None;
        }
        // The first line fixes the indentation; leading blank lines (whose
        // meaning depends on their spaces) are left to the full parser.
        let first = *self.lines.get(self.pos)?;
        if first.text.trim_end_matches(' ').is_empty() || first.indent <= parent_indent {
            return None;
        }
        let indent = first.indent;
        let mut text = String::new();
        while let Some(line) = self.lines.get(self.pos) {
            if line.text.is_empty() {
                // Blank: spaces up to the indentation at most, else they
                // would be content.
                if line.indent > indent {
                    return None;
                }
                text.push('\n');
            } else if line.indent >= indent {
                for _ in indent..line.indent {
                    text.push(' ');
                }
                text.push_str(line.text);
                text.push('\n');
            } else {
                break;
            }
            self.pos += 1;
        }
        // The final line break (clip) or none (strip); trailing blank lines
        // are never content.
        let content_end = text.trim_end_matches('\n').len();
        text.truncate(content_end);
        if keep_last_newline {
            text.push('\n');
        }
        // A blank line ends the text but may belong to what follows: give
        // back the lines after the last content line.
        while self.pos > 0 && self.lines[self.pos - 1].text.is_empty() {
            self.pos -= 1;
        }
        Some(Value::String(text))
    }
}

/// A mapping of `entries`; `None` when a key repeats (the full reader
/// rejects that).
fn into_map(entries: Vec<(String, Value)>) -> Option<Map<String, Value>> {
    let count = entries.len();
    let mut map = Map::with_capacity(count);
    map.extend(entries);
    (map.len() == count).then_some(map)
}

/// Nothing left after a token but spaces and perhaps a comment (which
/// needs a space before it).
fn is_empty_or_comment(rest: &str) -> bool {
    let text = rest.trim_start_matches(' ');
    text.is_empty() || (text.len() < rest.len() && text.starts_with('#'))
}

/// Whether `text` (after `- `) is `key: value` or `key:`.
fn starts_mapping_entry(text: &str) -> bool {
    match text.as_bytes()[0] {
        b'"' | b'\'' => quoted(text).is_some_and(|(_, rest)| key_separator(rest).is_some()),
        b'{' | b'[' => false,
        _ => find_key_end(text).is_some(),
    }
}

/// Where a plain key ends: the first `:` followed by a space or the end of
/// the line, before any comment.
fn find_key_end(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b':' if matches!(bytes.get(i + 1), None | Some(b' ')) => return Some(i),
            b'#' if i > 0 && bytes[i - 1] == b' ' => return None,
            _ => {}
        }
    }
    None
}

/// `rest` after a quoted key: `:` then a space or the end of the line.
fn key_separator(rest: &str) -> Option<&str> {
    let after = rest.strip_prefix(':')?;
    (after.is_empty() || after.starts_with(' ')).then_some(after)
}

/// Splits `key: rest` into the key and what follows the colon.
fn split_key(text: &str) -> Option<(String, &str)> {
    match text.as_bytes()[0] {
        b'"' | b'\'' => {
            let (key, rest) = quoted(text)?;
            // The limit is on the key as written (escapes included).
            if text.len() - rest.len() > MAX_KEY_LEN {
                return None;
            }
            Some((key, key_separator(rest)?))
        }
        _ => {
            let end = find_key_end(text)?;
            let key = &text[..end];
            if !is_plain_key(key) {
                return None;
            }
            Some((key.to_owned(), &text[end + 1..]))
        }
    }
}

/// Plain keys read here: the characters of Kubernetes field names, label
/// and annotation keys, and nothing that YAML could read as other than a
/// string.
fn is_plain_key(key: &str) -> bool {
    let bytes = key.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_KEY_LEN
        && (bytes[0].is_ascii_alphabetic() || bytes[0] == b'_' || bytes[0] == b'$')
        && bytes
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'/' | b'$'))
        && !is_special_word(key)
}

/// Words YAML 1.1 takes as null or a boolean in some spelling (any case
/// here: keys spelled so are left to the full parser).
fn is_special_word(word: &str) -> bool {
    ["null", "true", "false", "yes", "no", "y", "n", "on", "off"]
        .iter()
        .any(|w| word.eq_ignore_ascii_case(w))
        || word == "~"
}

/// A plain scalar in block context: up to a comment, trailing spaces
/// dropped. `None` for what could be a mapping or an error.
fn plain_in_block(text: &str) -> Option<&str> {
    let bytes = text.as_bytes();
    let mut end = bytes.len();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'#' if i > 0 && bytes[i - 1] == b' ' => {
                end = i;
                break;
            }
            b':' if matches!(bytes.get(i + 1), None | Some(b' ')) => return None,
            _ => {}
        }
    }
    let scalar = text[..end].trim_end_matches(' ');
    (!scalar.is_empty()).then_some(scalar)
}

/// The value of a plain scalar, resolved as kubectl resolves it
/// ([`resolve_plain`]); `None` where the answer is not obvious.
fn plain_value(s: &str) -> Option<Value> {
    // `- x`, `? x`, `: x` are structure, not scalars.
    let bytes = s.as_bytes();
    if matches!(bytes[0], b'-' | b'?' | b':') && matches!(bytes.get(1), None | Some(b' ')) {
        return None;
    }
    if is_special_word(s) {
        // Exact spellings only: `on` and `On` are true, `oN` is a string.
        return Some(match resolve_plain(s) {
            Plain::Null => Value::Null,
            Plain::Bool(b) => Value::Bool(b),
            _ => Value::String(s.to_owned()),
        });
    }
    let first = s.as_bytes()[0];
    if first.is_ascii_digit() || matches!(first, b'+' | b'-' | b'.') {
        return numeric_looking(s);
    }
    let starts_plainly = first.is_ascii_alphabetic()
        || matches!(first, b'/' | b'_' | b'$' | b'(' | b'=' | b'^' | b';')
        || !first.is_ascii();
    starts_plainly.then(|| Value::String(s.to_owned()))
}

/// A scalar that starts like a number: a plain decimal integer, a string
/// that no YAML number can be, or `None`.
fn numeric_looking(s: &str) -> Option<Value> {
    let (negative, digits) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let is_decimal = !digits.is_empty()
        && digits.len() <= 18
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    if is_decimal {
        // At most 18 digits: fits in u64 and i64.
        let magnitude: u64 = digits.parse().ok()?;
        if negative {
            if magnitude == 0 {
                return None; // `-0`: left to the full parser
            }
            return Some(Value::Number(Number::from(-(magnitude as i64))));
        }
        return Some(Value::Number(Number::from(magnitude)));
    }
    // `0644`: octal, as in YAML 1.1 (kix reads file modes so).
    let is_octal = s.len() > 1
        && s.len() <= 20
        && s.starts_with('0')
        && s.bytes().all(|b| matches!(b, b'0'..=b'7'));
    if is_octal {
        return Some(Value::Number(Number::from(
            u64::from_str_radix(&s[1..], 8).ok()?,
        )));
    }
    // Every YAML number (any radix, floats, `.inf`, `1_000`, `1:30`) is made
    // of these characters and has at most one dot; `100m`, `128Mi` or
    // `10.0.0.1` cannot be a number.
    let number_chars = |b: u8| b.is_ascii_hexdigit() || b"+-._:xXoO".contains(&b);
    let unsigned = s.trim_start_matches(['+', '-']);
    let string = !unsigned.starts_with('.')
        && (!s.bytes().all(number_chars) || s.bytes().filter(|&b| b == b'.').count() >= 2);
    string.then(|| Value::String(s.to_owned()))
}

/// A quoted scalar at the start of `text` (on one line); returns it and
/// the rest of the line.
fn quoted(text: &str) -> Option<(String, &str)> {
    let quote = text.as_bytes()[0];
    let body = &text[1..];
    let mut out = String::new();
    let mut chars = body.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\'' if quote == b'\'' => {
                if body[i + 1..].starts_with('\'') {
                    out.push('\'');
                    chars.next();
                } else {
                    return Some((out, &body[i + 1..]));
                }
            }
            '"' if quote == b'"' => return Some((out, &body[i + 1..])),
            '\\' if quote == b'"' => {
                let (_, escape) = chars.next()?;
                match escape {
                    '\\' => out.push('\\'),
                    '"' => out.push('"'),
                    // `\/` is unknown to kubectl's YAML reader.
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    'r' => out.push('\r'),
                    'u' => {
                        let hex = body.get(i + 2..i + 6)?;
                        if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                            return None;
                        }
                        let code = u32::from_str_radix(hex, 16).ok()?;
                        out.push(char::from_u32(code)?); // surrogates: full parser
                        for _ in 0..4 {
                            chars.next();
                        }
                    }
                    _ => return None,
                }
            }
            _ => out.push(c),
        }
    }
    None // no closing quote on this line: a multi-line scalar
}

/// A one-line flow mapping or sequence at the start of `text`; returns it
/// and the rest of the line.
fn flow_value(text: &str, depth: usize) -> Option<(Value, &str)> {
    if depth >= MAX_DEPTH {
        return None;
    }
    let (open, close) = match text.as_bytes()[0] {
        b'{' => (b'{', b'}'),
        _ => (b'[', b']'),
    };
    let mut rest = text[1..].trim_start_matches(' ');
    let mut entries: Vec<(String, Value)> = Vec::new();
    let mut items = Vec::new();
    if let Some(after) = rest.strip_prefix(close as char) {
        rest = after;
    } else {
        loop {
            if open == b'{' {
                let (key, after_key) = flow_key(rest)?;
                let (value, after) = flow_item(after_key.trim_start_matches(' '), depth)?;
                entries.push((key, value));
                rest = after;
            } else {
                let (value, after) = flow_item(rest, depth)?;
                items.push(value);
                rest = after;
            }
            rest = rest.trim_start_matches(' ');
            match rest.as_bytes().first() {
                Some(b',') => {
                    rest = rest[1..].trim_start_matches(' ');
                    // A trailing comma is left to the full parser.
                    if rest.as_bytes().first() == Some(&close) {
                        return None;
                    }
                }
                Some(&b) if b == close => {
                    rest = &rest[1..];
                    break;
                }
                _ => return None,
            }
        }
    }
    let value = if open == b'{' {
        Value::Object(into_map(entries)?)
    } else {
        Value::Array(items)
    };
    Some((value, rest))
}

/// `key: ` inside a flow mapping.
fn flow_key(text: &str) -> Option<(String, &str)> {
    match text.as_bytes().first()? {
        b'"' | b'\'' => {
            let (key, rest) = quoted(text)?;
            // Long keys are left to the full reader, as in block mappings
            // (found by fuzzing: a 1,030-character quoted key in `{...}`).
            if text.len() - rest.len() > MAX_KEY_LEN {
                return None;
            }
            let after = rest.strip_prefix(": ")?;
            Some((key, after))
        }
        _ => {
            let end = text.find(": ")?;
            let key = &text[..end];
            is_plain_key(key).then(|| (key.to_owned(), &text[end + 2..]))
        }
    }
}

/// A value inside a flow collection, up to `,`, `]` or `}`.
fn flow_item(text: &str, depth: usize) -> Option<(Value, &str)> {
    match text.as_bytes().first()? {
        b'{' | b'[' => flow_value(text, depth + 1),
        b'"' | b'\'' => {
            let (value, rest) = quoted(text)?;
            Some((Value::String(value), rest))
        }
        _ => {
            let end = text.find([',', ']', '}']).unwrap_or(text.len());
            let scalar = text[..end].trim_end_matches(' ');
            // Anything that has structure of its own is left to the full
            // parser: `a: b` pairs, comments, nested brackets, and `?`
            // (an indicator in flow collections to kubectl).
            if scalar.is_empty() || scalar.contains([':', '#', '[', '{', '?']) {
                return None;
            }
            Some((plain_value(scalar)?, &text[end..]))
        }
    }
}

/// Checks the module's claim on `text`: when [`parse`] reads it, the full
/// parser reads it too, to the same values in the same order. Panics
/// otherwise. For the tests and the fuzz target.
#[doc(hidden)]
pub fn check_against_full_parser(text: &str) {
    let Some(fast) = parse(text) else {
        return;
    };
    let full: Vec<Value> = match crate::decode::parse_yaml_full(text) {
        Ok(documents) => documents,
        Err(error) => {
            panic!("fast path read {text:?} as {fast:?}; the full reader rejects it: {error:?}")
        }
    };
    let as_json = |values: &[Value]| serde_json::to_string(values).expect("values serialize");
    assert_eq!(
        as_json(&fast),
        as_json(&full),
        "fast path and full reader differ on {text:?}"
    );
    // Also the number types (an integer is not a float of the same value).
    assert_eq!(fast, full, "fast path and full reader differ on {text:?}");
}

#[cfg(test)]
mod tests;

//! YAML read as sops reads it (go-yaml v3 nodes): every document a
//! mapping (an empty one reads as an empty mapping), keys strings, plain
//! scalars resolved with go-yaml v3's rules (YAML 1.2 booleans and nulls,
//! Go's integer bases, `_` in numbers), quoted and block scalars strings,
//! aliases expanded, comments dropped (sops keeps them out of the MAC).
//!
//! What sops would read to something kix cannot carry (a plain timestamp
//! outside encryption, an integer past int64, a tag other than `!!str`) is
//! refused rather than guessed. No message quotes a value.

use std::collections::{HashMap, HashSet};

use granit_parser::{Event, Parser, ScalarStyle, Span, Tag};

use crate::error::Reason;
use crate::tree::Node;

/// Deepest nesting read.
const MAX_DEPTH: usize = 128;
/// Most nodes a file may count, aliases counted as what they expand to
/// and kept anchors once more ("billion laughs"): checked before a value is
/// copied, so memory stays bounded (a file of tiny values at the 16 MiB
/// file limit holds millions). The same limit as kix-manifest's
/// `MAX_FILE_NODES` for a resource file: an encrypted file of secrets holds
/// a few hundred nodes; JSON counts the same way ([`crate::json`]).
pub(crate) const MAX_NODES: usize = 500_000;
/// Bytes of scalar text (keys and values) that aliases may repeat beyond
/// the length of the file: one alias of a large value is one node.
const ALIAS_BYTES_FREE: usize = 1024 * 1024;

/// The documents of `text`.
pub(crate) fn parse(text: &str) -> Result<Vec<Node>, Reason> {
    let options = || {
        granit_parser::options! {
            emit_comments: false,
            block_nesting_limit: MAX_DEPTH,
            flow_nesting_limit: MAX_DEPTH,
        }
    };
    let mut reader = Reader {
        events: Parser::new_from_str_with_options(text, options()),
        named: anchors_named(text, options()),
        anchors: HashMap::new(),
        depth: 0,
        nodes: 0,
        alias_bytes: 0,
        max_alias_bytes: text.len().saturating_add(ALIAS_BYTES_FREE),
    };
    reader.stream()
}

/// The anchors (by id) that an alias of `text` names: only their values
/// are kept. A first reading of the events, only when the text could have
/// both an anchor and an alias (a syntax error ends it: the reading proper
/// reports it).
fn anchors_named(text: &str, options: granit_parser::Options) -> HashSet<usize> {
    if !(text.contains('&') && text.contains('*')) {
        return HashSet::new();
    }
    Parser::new_from_str_with_options(text, options)
        .map_while(Result::ok)
        .filter_map(|(event, _)| match event {
            Event::Alias(id) => Some(id),
            _ => None,
        })
        .collect()
}

fn syntax(line: usize, message: impl Into<String>) -> Reason {
    Reason::Syntax {
        format: "YAML",
        line: u32::try_from(line).unwrap_or(u32::MAX),
        message: message.into(),
    }
}

struct Reader<'a> {
    events: Parser<'a, granit_parser::StrInput<'a>>,
    /// The anchors an alias names ([`anchors_named`]).
    named: HashSet<usize>,
    /// Anchor id -> the node, its node count and scalar bytes, for those
    /// an alias names.
    anchors: HashMap<usize, (Node, usize, usize)>,
    depth: usize,
    nodes: usize,
    /// Scalar bytes repeated by aliases, and the most allowed.
    alias_bytes: usize,
    max_alias_bytes: usize,
}

impl<'a> Reader<'a> {
    fn next(&mut self) -> Result<(Event<'a>, Span), Reason> {
        match self.events.next() {
            Some(Ok(event)) => Ok(event),
            Some(Err(e)) => Err(syntax(e.marker().line(), e.info())),
            None => Err(syntax(0, "unexpected end of the YAML events")),
        }
    }

    fn stream(&mut self) -> Result<Vec<Node>, Reason> {
        let mut documents = Vec::new();
        loop {
            let (event, span) = self.next()?;
            match event {
                Event::StreamStart => {}
                Event::StreamEnd => return Ok(documents),
                Event::DocumentStart(..) => {
                    self.anchors.clear();
                    let (event, span) = self.next()?;
                    let line = span.start.line();
                    let root = match self.node(event, span)? {
                        Node::Null => Node::Map(Vec::new()),
                        map @ Node::Map(_) => map,
                        _ => return Err(syntax(line, "a YAML document that is not a mapping")),
                    };
                    let (event, span) = self.next()?;
                    if !matches!(event, Event::DocumentEnd) {
                        return Err(syntax(
                            span.start.line(),
                            "expected the end of the document",
                        ));
                    }
                    documents.push(root);
                }
                _ => return Err(syntax(span.start.line(), "expected a YAML document")),
            }
        }
    }

    fn count(&mut self, nodes: usize, span: &Span) -> Result<(), Reason> {
        self.nodes = self.nodes.saturating_add(nodes);
        if self.nodes > MAX_NODES {
            return Err(syntax(
                span.start.line(),
                format!(
                    "more than {MAX_NODES} values, keys and items (aliases counted as what they \
                     expand to), more than kix reads from a file"
                ),
            ));
        }
        Ok(())
    }

    fn node(&mut self, event: Event<'a>, span: Span) -> Result<Node, Reason> {
        self.count(1, &span)?;
        let (node, anchor) = match event {
            Event::Scalar(text, style, anchor, tag) => {
                (scalar(&text, style, tag.as_deref(), &span)?, anchor)
            }
            Event::SequenceStart(_, anchor, tag) => {
                refuse_collection_tag(tag.as_deref(), "!!seq", &span)?;
                (self.nested(&span, Self::sequence)?, anchor)
            }
            Event::MappingStart(_, anchor, tag) => {
                refuse_collection_tag(tag.as_deref(), "!!map", &span)?;
                (self.nested(&span, Self::mapping)?, anchor)
            }
            Event::Alias(id) => {
                let Some(&(_, nodes, bytes)) = self.anchors.get(&id) else {
                    return Err(syntax(span.start.line(), "an alias of an unknown anchor"));
                };
                // Counted before the copy is made.
                self.count(nodes, &span)?;
                self.alias_bytes = self.alias_bytes.saturating_add(bytes);
                if self.alias_bytes > self.max_alias_bytes {
                    return Err(syntax(
                        span.start.line(),
                        format!(
                            "aliases repeat more than {} bytes of text (aliases expand too far)",
                            self.max_alias_bytes
                        ),
                    ));
                }
                return Ok(self.anchors[&id].0.clone());
            }
            _ => return Err(syntax(span.start.line(), "expected a YAML node")),
        };
        if anchor != 0 && self.named.contains(&anchor) {
            // The copy kept counts too: anchors nested in anchors cannot
            // copy the file many times over.
            let (nodes, bytes) = size(&node);
            self.count(nodes, &span)?;
            self.anchors.insert(anchor, (node.clone(), nodes, bytes));
        }
        Ok(node)
    }

    fn nested(
        &mut self,
        span: &Span,
        read: fn(&mut Self) -> Result<Node, Reason>,
    ) -> Result<Node, Reason> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(syntax(span.start.line(), "nested too deeply"));
        }
        let node = read(self);
        self.depth -= 1;
        node
    }

    fn sequence(&mut self) -> Result<Node, Reason> {
        let mut items = Vec::new();
        loop {
            let (event, span) = self.next()?;
            if matches!(event, Event::SequenceEnd) {
                return Ok(Node::Seq(items));
            }
            items.push(self.node(event, span)?);
        }
    }

    fn mapping(&mut self) -> Result<Node, Reason> {
        let mut entries: Vec<(String, Node)> = Vec::new();
        // The keys so far: a search per key, not a scan (many keys stay
        // linear).
        let mut keys: HashSet<String> = HashSet::new();
        loop {
            let (event, span) = self.next()?;
            if matches!(event, Event::MappingEnd) {
                return Ok(Node::Map(entries));
            }
            let line = span.start.line();
            let Node::Str(key) = self.node(event, span)? else {
                return Err(syntax(
                    line,
                    "a mapping key that is not a string (sops reads string keys only)",
                ));
            };
            if !keys.insert(key.clone()) {
                return Err(syntax(
                    line,
                    format!("the key `{key}` appears twice in one mapping"),
                ));
            }
            let (event, span) = self.next()?;
            let value = self.node(event, span)?;
            entries.push((key, value));
        }
    }
}

/// The nodes `node` counts for, itself included, and the bytes of its
/// strings (keys included).
fn size(node: &Node) -> (usize, usize) {
    let add = |(n, b): (usize, usize), (m, c): (usize, usize)| (n + m, b + c);
    match node {
        Node::Seq(items) => items.iter().map(size).fold((1, 0), add),
        Node::Map(entries) => entries
            .iter()
            .map(|(k, n)| add((1, k.len()), size(n)))
            .fold((1, 0), add),
        Node::Str(s) => (1, s.len()),
        _ => (1, 0),
    }
}

fn refuse_collection_tag(tag: Option<&Tag>, allowed: &str, span: &Span) -> Result<(), Reason> {
    match tag {
        None => Ok(()),
        Some(t) if t.is_yaml_core_schema_tag(&allowed[2..]) => Ok(()),
        Some(t) => Err(Reason::Unsupported(format!(
            "the YAML tag `{}{}` (line {})",
            t.original_handle(),
            t.suffix(),
            span.start.line()
        ))),
    }
}

fn scalar(text: &str, style: ScalarStyle, tag: Option<&Tag>, span: &Span) -> Result<Node, Reason> {
    if let Some(tag) = tag {
        if tag.is_yaml_core_schema_tag("str") {
            return Ok(Node::Str(text.to_owned()));
        }
        return Err(Reason::Unsupported(format!(
            "the YAML tag `{}{}` (line {}): write the value untagged",
            tag.original_handle(),
            tag.suffix(),
            span.start.line()
        )));
    }
    if style != ScalarStyle::Plain {
        return Ok(Node::Str(text.to_owned()));
    }
    resolve_plain(text).map_err(|what| {
        Reason::Unsupported(format!(
            "a plain {what} on line {} outside encryption: quote it",
            span.start.line()
        ))
    })
}

/// A plain scalar as go-yaml v3 resolves it; `Err` names what it would be
/// that kix does not read (a timestamp, an integer past int64).
pub(crate) fn resolve_plain(text: &str) -> Result<Node, &'static str> {
    match text {
        "true" | "True" | "TRUE" => return Ok(Node::Bool(true)),
        "false" | "False" | "FALSE" => return Ok(Node::Bool(false)),
        "" | "~" | "null" | "Null" | "NULL" => return Ok(Node::Null),
        ".nan" | ".NaN" | ".NAN" => return Ok(Node::Float(f64::NAN)),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Ok(Node::Float(f64::INFINITY));
        }
        "-.inf" | "-.Inf" | "-.INF" => return Ok(Node::Float(f64::NEG_INFINITY)),
        _ => {}
    }
    let str = || Ok(Node::Str(text.to_owned()));
    match text.as_bytes()[0] {
        b'.' => match go_parse_float(text) {
            Some(f) => Ok(Node::Float(f)),
            None => str(),
        },
        b'0'..=b'9' | b'+' | b'-' => {
            if looks_like_timestamp(text) {
                return Err("timestamp");
            }
            let plain = text.replace('_', "");
            match go_parse_int(&plain) {
                IntParse::Int(i) => return Ok(Node::Int(i)),
                IntParse::TooBig => return Err("integer past the int64 range"),
                IntParse::No => {}
            }
            if is_yaml_style_float(&plain)
                && let Some(f) = go_parse_float(&plain)
            {
                return Ok(Node::Float(f));
            }
            str()
        }
        _ => str(),
    }
}

/// go-yaml v3 reads `YYYY-M-D` (with an optional time) as a timestamp.
fn looks_like_timestamp(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() > 4 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-' && {
        let rest = &text[5..];
        let date_end = rest.find(['T', 't', ' ']).unwrap_or(rest.len());
        let mut parts = rest[..date_end].split('-');
        let ok = |p: Option<&str>| {
            p.is_some_and(|p| (1..=2).contains(&p.len()) && p.bytes().all(|c| c.is_ascii_digit()))
        };
        ok(parts.next()) && ok(parts.next()) && parts.next().is_none()
    }
}

enum IntParse {
    Int(i64),
    TooBig,
    No,
}

/// Go's `strconv.ParseInt(s, 0, 64)` (after `_` were removed): a sign,
/// then `0x`, `0o`, `0b` or a leading `0` (octal) choose the base.
fn go_parse_int(s: &str) -> IntParse {
    let (negative, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = body.get(..2).map(str::to_ascii_lowercase);
    let (radix, digits) = match lower.as_deref() {
        Some("0x") => (16, &body[2..]),
        Some("0o") => (8, &body[2..]),
        Some("0b") => (2, &body[2..]),
        _ if body.len() > 1 && body.starts_with('0') => (8, &body[1..]),
        _ => (10, body),
    };
    if digits.is_empty() || !digits.bytes().all(|c| (c as char).is_digit(radix)) {
        return IntParse::No;
    }
    match u128::from_str_radix(digits, radix) {
        Ok(magnitude) => {
            let value = if negative {
                -(magnitude as i128)
            } else {
                magnitude as i128
            };
            match i64::try_from(value) {
                Ok(i) => IntParse::Int(i),
                Err(_) => IntParse::TooBig,
            }
        }
        Err(_) => IntParse::TooBig,
    }
}

/// go-yaml v3's `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`.
fn is_yaml_style_float(s: &str) -> bool {
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    let (mantissa, exponent) = match s.find(['e', 'E']) {
        Some(at) => (&s[..at], Some(&s[at + 1..])),
        None => (s, None),
    };
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|c| c.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some(("", frac)) => digits(frac),
        Some((int, frac)) => digits(int) && (frac.is_empty() || digits(frac)),
        None => digits(mantissa),
    };
    let exponent_ok = exponent.is_none_or(|e| digits(e.strip_prefix(['-', '+']).unwrap_or(e)));
    mantissa_ok && exponent_ok
}

/// Go's `strconv.ParseFloat(s, 64)` for the decimal forms YAML gives it.
pub(crate) fn go_parse_float(s: &str) -> Option<f64> {
    let lower = s.to_ascii_lowercase();
    let body = lower.trim_start_matches(['+', '-']);
    if body.starts_with("inf") || body.starts_with("nan") {
        // Go reads "inf", "infinity" and "nan" in any case.
        return match body {
            "inf" | "infinity" => Some(if lower.starts_with('-') {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            }),
            "nan" if lower == "nan" => Some(f64::NAN),
            _ => None,
        };
    }
    if !s
        .bytes()
        .all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'E' | b'+' | b'-'))
    {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(s: &str) -> Node {
        resolve_plain(s).expect("resolves")
    }

    #[test]
    fn plain_scalars_resolve_as_go_yaml_v3() {
        assert!(matches!(plain("yes"), Node::Str(_)));
        assert!(matches!(plain("on"), Node::Str(_)));
        assert!(matches!(plain("True"), Node::Bool(true)));
        assert!(matches!(plain("~"), Node::Null));
        assert!(matches!(plain("0x1F"), Node::Int(31)));
        assert!(matches!(plain("0o17"), Node::Int(15)));
        assert!(matches!(plain("017"), Node::Int(15)));
        assert!(matches!(plain("1_000"), Node::Int(1000)));
        assert!(matches!(plain("-0b101"), Node::Int(-5)));
        assert!(matches!(plain("1e3"), Node::Float(f) if f == 1000.0));
        assert!(matches!(plain(".5"), Node::Float(f) if f == 0.5));
        assert!(matches!(plain("1."), Node::Float(f) if f == 1.0));
        assert!(matches!(plain("08"), Node::Float(f) if f == 8.0));
        assert!(matches!(plain("1.2.3"), Node::Str(_)));
        assert!(matches!(plain("-"), Node::Str(_)));
        assert_eq!(resolve_plain("2024-01-02").err(), Some("timestamp"));
        assert_eq!(
            resolve_plain("99999999999999999999").err(),
            Some("integer past the int64 range")
        );
    }

    #[test]
    fn documents_are_mappings() {
        let docs = parse("a: 1\n---\n---\nb: [x, *y]\n").err();
        assert!(docs.is_some());
        let docs = parse("a: &y 1\n---\n---\nb: [x]\n").expect("parses");
        assert_eq!(docs.len(), 3);
        assert!(parse("- a\n").is_err());
        assert!(parse("a: 1\na: 2\n").is_err());
        assert!(parse("1: a\n").is_err());
    }
}

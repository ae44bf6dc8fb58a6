//! One YAML document, read to the value kubectl sends, or refused.
//!
//! kubectl (`sigs.k8s.io/yaml` over `go.yaml.in/yaml/v2`) reads the first
//! YAML document of each `---`-separated chunk of a file, resolves plain
//! scalars with YAML 1.1 rules ([`crate::scalar`]), turns every mapping key
//! into a string (`on` becomes `"true"`, `0644` becomes `"420"`), lets a
//! later key replace an earlier one, and applies merge keys (`<<`) in place.
//! This module reads the events of the granit-parser crate (the parser
//! serde-saphyr is built on) with those rules, and refuses, naming the line
//! and saying what to write instead, whatever kubectl would read to
//! something other than what the text says:
//!
//! * a key that is not a string to YAML (`on`, `1`, `null`, `[a]`): quote it;
//! * a key that appears twice in a mapping;
//! * a tag (`!!str`, `!foo`), a directive (`%YAML`);
//! * `.inf` and `.nan` (JSON cannot carry them; kubectl fails);
//! * content after the end of the first document of a chunk (after `...`),
//!   which kubectl silently ignores;
//! * heavy alias expansion (kubectl refuses "excessive aliasing"),
//!   counted while the document is read, before a value is copied, per
//!   document and per file ([`Budget`]): a "billion laughs" stops after a
//!   few hundred nodes, and what any file may expand to is bounded by its
//!   size (nesting: [`MAX_DEPTH`] levels);
//! * a file of more than [`MAX_FILE_NODES`] nodes, counted as they are
//!   read, before their values are built.

use std::collections::{HashMap, HashSet};

use granit_parser::{Event, Parser, ScalarStyle, Span, StrInput, StructureStyle};
use serde_json::{Map, Value};

use crate::scalar::{Plain, plain_json, resolve_plain};

/// Deepest nesting read (serde-saphyr's limit was the same).
const MAX_DEPTH: usize = 128;

/// A document: its value, the line where it starts, and, when it has a
/// top-level `items` sequence, the line of each item.
#[derive(Debug)]
pub(crate) struct YamlDocument {
    pub value: Value,
    pub line: u32,
    pub item_lines: Vec<u32>,
}

/// Why a chunk of YAML is refused: the line (in the file) and what is
/// wrong, with what to write instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct YamlError {
    pub line: u32,
    pub message: String,
}

/// Reads the chunk `text`, whose first line is line `first_line` of its
/// file, as kubectl reads it; `None` for an empty document (only comments,
/// or `null`), which kubectl skips. `file`: what aliases may still add in
/// the file ([`Budget::for_file`]), shared by its chunks.
pub(crate) fn parse_chunk(
    text: &str,
    first_line: u32,
    file: &mut Budget,
) -> Result<Option<YamlDocument>, YamlError> {
    let options = || {
        granit_parser::options! {
            emit_comments: false,
            disallow_directives: true,
            // libyaml's way: a BOM inside a document is content.
            bom_inside_document_as_content: true,
            block_nesting_limit: MAX_DEPTH,
            flow_nesting_limit: MAX_DEPTH,
            // For the names, which go-yaml v2 reads differently.
            emit_anchor_events: true,
        }
    };
    let has_tabs = text.contains('\t');
    let mut reader = Composer {
        events: Parser::new_from_str_with_options(text, options()),
        text,
        first_line,
        flow: 0,
        tabs: has_tabs.then(Tabs::default),
        named: anchors_named(text, options()),
        anchors: HashMap::new(),
        budget: Budget::for_text("a document", text.len()),
        file,
        depth: 0,
        nodes: 0,
        bytes: 0,
        aliased_nodes: 0,
        item_lines: Vec::new(),
    };
    let document = reader.document()?;
    if let Some(tabs) = &reader.tabs {
        check_tabs(text, first_line, tabs)?;
    }
    Ok(document)
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

/// go-yaml v2 refuses tabs in block context where a token may start (at
/// the start of a line, after `-`, `?`, `:`), and in a block scalar before
/// its content's indentation; YAML 1.2 parsers are more lenient. So a tab
/// is read only inside a scalar on its first line, or in a block scalar's
/// content at or past its indentation, after its first line (whose
/// indentation is being detected); any other tab is refused.
fn check_tabs(text: &str, first_line: u32, tabs: &Tabs) -> Result<(), YamlError> {
    let mut offset = 0;
    for (i, line) in text.split('\n').enumerate() {
        let start = offset;
        offset += line.len() + 1;
        let Some(first_tab) = line.find('\t') else {
            continue;
        };
        let number = u32::try_from(i + 1).unwrap_or(u32::MAX);
        // Blocks and scalars are recorded in text order and do not
        // overlap: only the last one that starts before a tab can hold it
        // (a search, not a scan: many tabs and scalars stay linear).
        let before = tabs
            .blocks
            .partition_point(|b| b.first_content_line < number);
        let in_block = before > 0 && {
            let b = &tabs.blocks[before - 1];
            number <= b.last_line && first_tab >= b.indent
        };
        let all_inline = line.match_indices('\t').all(|(at, _)| {
            let at = start + at;
            let before = tabs.inline.partition_point(|&(from, _)| from < at);
            before > 0 && at < tabs.inline[before - 1].1
        });
        if !(in_block || all_inline) {
            return Err(YamlError {
                line: first_line.saturating_add(number - 1),
                message: "a tab outside a value, which kubectl's YAML reader refuses or reads \
                          otherwise: use spaces"
                    .into(),
            });
        }
    }
    Ok(())
}

/// Where tabs are content, when the text has tabs to check.
#[derive(Default)]
struct Tabs {
    /// In text order; only blocks with content.
    blocks: Vec<BlockScalar>,
    /// Byte ranges of plain and quoted scalars, each on its first line, in
    /// text order.
    inline: Vec<(usize, usize)>,
}

/// Where a literal or folded block scalar's content is, in chunk lines.
struct BlockScalar {
    first_content_line: u32,
    last_line: u32,
    indent: usize,
}

/// Nodes that alias expansion may add to a document before the ratio
/// check applies, and the share of all nodes they may be. kubectl (go-yaml
/// v2) refuses a document when over 100 decoded nodes come from aliases
/// and they are over 10 % (for large documents; up to 99 % for small ones)
/// of its decoded nodes; these limits refuse at least what it refuses.
///
/// The share is checked once the document is read; while it is read, the
/// nodes aliases add are held under the most that share could allow for a
/// text of its length ([`Budget`]), so a "billion laughs" (anchors of
/// aliases of anchors) stops after a few hundred nodes, in memory and
/// time bounded by the text's length, not after expanding in full.
const ALIAS_NODES_FREE: usize = 100;
const ALIAS_SHARE_PERCENT: usize = 5;
/// Bytes of scalar text (keys and values) that aliases may repeat in a
/// document beyond the length of its own text: one alias of a large value
/// is one node, so nodes alone do not bound the memory.
const ALIAS_BYTES_FREE: usize = 1024 * 1024;
/// The nodes aliases may add in all the documents of a file together: one
/// per this many bytes of the file, and at most [`ALIAS_NODES_FILE_MAX`]
/// (about 50 MB of values), so a file of many small documents, each within
/// its own limits, stays bounded too.
const ALIAS_NODES_PER_FILE_BYTES: usize = 2;
const ALIAS_NODES_FILE_MAX: usize = 500_000;

/// Most nodes (values, keys, items; aliases as what they expand to) read
/// from one file, all its documents together. A file of tiny values
/// (`[[],[],...]`, a stream of `{}`) at the 16 MiB file limit holds
/// millions of them, about 80 bytes each once built (446 MB); this bounds
/// what any file may take to about 40 MB of values. The largest real
/// manifests hold far fewer: argo-cd's install.yaml (1.9 MB, the largest
/// file of kix's corpora) has 63,548 nodes, a CRD bundle under 20,000.
pub(crate) const MAX_FILE_NODES: usize = 500_000;

/// The message of a file refused by [`MAX_FILE_NODES`].
pub(crate) fn too_many_nodes() -> String {
    format!(
        "more than {MAX_FILE_NODES} values, keys and items in one file, more than kix reads \
         from a file (the largest real manifests have under 70,000): split the file"
    )
}

/// What aliases may add to a document (or a file, whose documents share
/// one) while it is read, and what they have added. An anchor's value is
/// kept (copied) only when an alias names it, and the copy is charged at
/// once, as that alias will add as much: so anchors nested in anchors
/// cannot copy a document many times over before the first alias is
/// checked. A file has a budget of its own, for its length, so that many
/// small documents, each within its own, do not add up past it.
pub(crate) struct Budget {
    /// `a document` or `a file`, for messages.
    what: &'static str,
    max_nodes: usize,
    max_bytes: usize,
    /// Nodes and scalar bytes added by aliases, plus those of the kept
    /// anchors that no alias has named yet.
    nodes: usize,
    bytes: usize,
    /// Of a file: every node read in it ([`MAX_FILE_NODES`]).
    read: usize,
}

impl Budget {
    /// The most the end-of-document check could accept for a text of
    /// `len` bytes (every node that is not an alias takes at least half a
    /// byte of it), and [`ALIAS_BYTES_FREE`] bytes beyond its length.
    fn for_text(what: &'static str, len: usize) -> Budget {
        let own_nodes = len.saturating_add(1).saturating_mul(2);
        let share = own_nodes / (100 - ALIAS_SHARE_PERCENT) * ALIAS_SHARE_PERCENT;
        Budget {
            what,
            max_nodes: share.max(ALIAS_NODES_FREE),
            max_bytes: len.saturating_add(ALIAS_BYTES_FREE),
            nodes: 0,
            bytes: 0,
            read: 0,
        }
    }

    /// The budget of a file of `len` bytes, for all its documents: each
    /// document's free nodes ([`ALIAS_NODES_FREE`]) count here, so tiny
    /// documents cannot add them up past [`ALIAS_NODES_PER_FILE_BYTES`]
    /// (nor a large document past [`ALIAS_NODES_FILE_MAX`]).
    pub(crate) fn for_file(len: usize) -> Budget {
        Budget {
            max_nodes: (len / ALIAS_NODES_PER_FILE_BYTES)
                .clamp(ALIAS_NODES_FREE, ALIAS_NODES_FILE_MAX),
            ..Budget::for_text("a file", len)
        }
    }

    /// Adds what an alias expands to; the limit it would pass, if any.
    fn charge(&mut self, nodes: usize, bytes: usize) -> Option<String> {
        self.nodes = self.nodes.saturating_add(nodes);
        self.bytes = self.bytes.saturating_add(bytes);
        if self.nodes > self.max_nodes {
            return Some(format!(
                "aliases expand to more than {} nodes, more than kix reads in {} of this length \
                 (kubectl too refuses excessive aliasing): write the repeated parts out",
                self.max_nodes, self.what
            ));
        }
        if self.bytes > self.max_bytes {
            return Some(format!(
                "aliases repeat more than {} bytes of text ({} may repeat at most its own \
                 length and 1 MiB through aliases): write the repeated parts out",
                self.max_bytes, self.what
            ));
        }
        None
    }
}

/// A kept anchor: its value, the nodes and scalar bytes it counts for,
/// and whether the charge paid when it was kept still covers an alias.
struct Anchored {
    value: Value,
    nodes: usize,
    bytes: usize,
    prepaid: bool,
}

const ALIAS_END: &str = "an alias not followed by a space, which kubectl's YAML reader refuses: \
                         add a space after it";

struct Composer<'a, 'f> {
    events: Parser<'a, StrInput<'a>>,
    text: &'a str,
    first_line: u32,
    /// Flow collections the current node is in.
    flow: usize,
    /// Where tabs are content, when the text has tabs to check.
    tabs: Option<Tabs>,
    /// The anchors an alias names ([`anchors_named`]).
    named: HashSet<usize>,
    /// Anchor id -> the anchored node, for those an alias names.
    anchors: HashMap<usize, Anchored>,
    budget: Budget,
    /// The file's, shared with its other documents.
    file: &'f mut Budget,
    depth: usize,
    /// Nodes read, keys included, aliases counted as what they expand to.
    nodes: usize,
    /// Bytes of the scalars read, counted so too.
    bytes: usize,
    /// Of those, the nodes that came from alias expansion.
    aliased_nodes: usize,
    item_lines: Vec<u32>,
}

/// What a mapping key is.
enum Key {
    Text(String),
    Merge,
}

impl<'a> Composer<'a, '_> {
    fn line(&self, span: &Span) -> u32 {
        let line = u32::try_from(span.start.line()).unwrap_or(u32::MAX);
        self.first_line.saturating_add(line.saturating_sub(1))
    }

    fn error(&self, span: &Span, message: impl Into<String>) -> YamlError {
        YamlError {
            line: self.line(span),
            message: message.into(),
        }
    }

    /// go-yaml v2 wants a space, a line end or one of `?:,]}%@` and a
    /// backtick after an anchor or alias.
    fn ends_anchor(&self, span: &Span) -> bool {
        let after = span.end.byte_offset().and_then(|end| self.text.get(end..));
        after.is_none_or(|rest| {
            rest.chars().next().is_none_or(|c| {
                matches!(
                    c,
                    ' ' | '\t' | '\n' | '\r' | '?' | ':' | ',' | ']' | '}' | '%' | '@' | '`'
                )
            })
        })
    }

    fn next(&mut self) -> Result<(Event<'a>, Span), YamlError> {
        match self.events.next() {
            Some(Ok((Event::Anchor(_, name), span))) => {
                // go-yaml v2's anchor names: letters, digits, `_`, `-`.
                let plain = name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'));
                if !plain || !self.ends_anchor(&span) {
                    return Err(self.error(
                        &span,
                        format!(
                            "anchor `&{name}`: kubectl reads anchor names of letters, digits, \
                             `_` and `-` only, followed by a space; rename it or add the space"
                        ),
                    ));
                }
                self.next()
            }
            Some(Ok(event)) => Ok(event),
            Some(Err(e)) => Err(YamlError {
                line: self.first_line.saturating_add(
                    u32::try_from(e.marker().line())
                        .unwrap_or(u32::MAX)
                        .saturating_sub(1),
                ),
                message: format!("{} (column {})", e.info(), e.marker().col() + 1),
            }),
            None => Err(YamlError {
                line: self.first_line,
                message: "unexpected end of the YAML events".into(),
            }),
        }
    }

    /// The chunk's first document; any later one must be empty.
    fn document(&mut self) -> Result<Option<YamlDocument>, YamlError> {
        let mut first: Option<Option<YamlDocument>> = None;
        loop {
            let (event, span) = self.next()?;
            match event {
                Event::StreamStart => {}
                Event::StreamEnd => return Ok(first.flatten()),
                Event::DocumentStart(..) => {
                    let (event, span) = self.next()?;
                    let line = self.line(&span);
                    let value = self.node(event, span, true)?;
                    let (event, span) = self.next()?;
                    if !matches!(event, Event::DocumentEnd) {
                        return Err(self.error(&span, "expected the end of the document"));
                    }
                    if first.is_some() {
                        if !value.is_null() {
                            return Err(YamlError {
                                line,
                                message: "content after the end of a document (`...`), which \
                                          kubectl ignores: remove the `...` line above it, or \
                                          start a new document with a `---` line"
                                    .into(),
                            });
                        }
                        continue;
                    }
                    self.check_aliasing(line)?;
                    first = Some((!value.is_null()).then(|| YamlDocument {
                        value,
                        line,
                        item_lines: std::mem::take(&mut self.item_lines),
                    }));
                }
                _ => return Err(self.error(&span, "expected a YAML document")),
            }
        }
    }

    fn check_aliasing(&self, line: u32) -> Result<(), YamlError> {
        if self.aliased_nodes > ALIAS_NODES_FREE
            && self.aliased_nodes * 100 > self.nodes * ALIAS_SHARE_PERCENT
        {
            return Err(YamlError {
                line,
                message: format!(
                    "aliases expand to {} of the document's {} nodes, which kubectl may refuse as \
                     excessive aliasing: write the repeated parts out",
                    self.aliased_nodes, self.nodes
                ),
            });
        }
        Ok(())
    }

    /// The value of the node that starts with `event`. `root`: the
    /// document's top node, whose `items` lines are recorded.
    fn node(&mut self, event: Event<'a>, span: Span, root: bool) -> Result<Value, YamlError> {
        self.count(1, &span)?;
        match event {
            Event::Scalar(text, style, anchor, tag) => {
                if let Some(tag) = tag {
                    return Err(self.tag_error(&span, &tag.to_string()));
                }
                self.check_scalar(&text, style, &span)?;
                let len = text.len();
                let value = if style == ScalarStyle::Plain {
                    plain_json(&text, resolve_plain(&text)).map_err(|_| {
                        self.error(
                            &span,
                            format!(
                                "`{text}` is not a number JSON can carry (kubectl fails on it): \
                                 quote it if you mean the string"
                            ),
                        )
                    })?
                } else {
                    Value::String(text.into_owned())
                };
                self.bytes += len;
                self.anchor(anchor, &value, (1, len), &span)?;
                Ok(value)
            }
            Event::SequenceStart(style, anchor, tag) => {
                if let Some(tag) = tag {
                    return Err(self.tag_error(&span, &tag.to_string()));
                }
                let before = (self.nodes, self.bytes);
                let flow = usize::from(style == StructureStyle::Flow);
                self.flow += flow;
                let value = self.sequence(&span, false)?;
                self.flow -= flow;
                let size = (self.nodes - before.0 + 1, self.bytes - before.1);
                self.anchor(anchor, &value, size, &span)?;
                Ok(value)
            }
            Event::MappingStart(style, anchor, tag) => {
                if let Some(tag) = tag {
                    return Err(self.tag_error(&span, &tag.to_string()));
                }
                let opens = span
                    .start
                    .byte_offset()
                    .and_then(|at| self.text.get(at..))
                    .is_some_and(|rest| rest.starts_with('{'));
                if style == StructureStyle::Flow && !opens {
                    // `[a: b]`: go-yaml v2 reads such pairs differently.
                    return Err(self.error(
                        &span,
                        "a `key: value` pair inside `[...]`, which kubectl's YAML reader reads \
                         otherwise: write it as `{key: value}`, or quote it",
                    ));
                }
                let before = (self.nodes, self.bytes);
                let flow = usize::from(style == StructureStyle::Flow);
                self.flow += flow;
                let value = Value::Object(self.mapping(&span, root)?);
                self.flow -= flow;
                let size = (self.nodes - before.0 + 1, self.bytes - before.1);
                self.anchor(anchor, &value, size, &span)?;
                Ok(value)
            }
            Event::Alias(id) => {
                self.nodes -= 1;
                self.file.read -= 1;
                if !self.ends_anchor(&span) {
                    return Err(self.error(&span, ALIAS_END));
                }
                self.alias(id, &span, false)
            }
            _ => Err(self.error(&span, "expected a YAML node")),
        }
    }

    /// A `:` right after a plain scalar with no space behind it (`{v1:, v}`):
    /// go-yaml v2 reads the colon as part of the scalar (`"v1:"`), this
    /// parser as the indicator (found by fuzzing).
    fn colon_glued_after(&self, span: &Span) -> bool {
        let Some(end) = span.end.byte_offset() else {
            return false;
        };
        let after = self.text.as_bytes().get(end..).unwrap_or_default();
        after.first() == Some(&b':')
            && !matches!(after.get(1), None | Some(b' ' | b'\t' | b'\r' | b'\n'))
    }

    /// What go-yaml v2 reads differently in a scalar's source: `\/` in
    /// double quotes (unknown to it), `?` or `:` in a plain scalar in a flow
    /// collection (indicators there to it). Records block scalars
    /// for the tab check.
    fn check_scalar(
        &mut self,
        text: &str,
        style: ScalarStyle,
        span: &Span,
    ) -> Result<(), YamlError> {
        if let Some(tabs) = &mut self.tabs
            && matches!(
                style,
                ScalarStyle::Plain | ScalarStyle::SingleQuoted | ScalarStyle::DoubleQuoted
            )
            && let (Some(from), Some(to)) = (span.start.byte_offset(), span.end.byte_offset())
        {
            let line_end = self.text[from..].find('\n').map_or(to, |n| from + n);
            tabs.inline.push((from, to.min(line_end)));
        }
        match style {
            ScalarStyle::DoubleQuoted => {
                let source = span.slice(self.text).unwrap_or_default();
                if source.contains('\\')
                    && let Some(refused) = escape_kubectl_refuses(source)
                {
                    return Err(self.error(span, refused));
                }
            }
            ScalarStyle::Plain
                if self.flow > 0 && (text.contains(['?', ':']) || self.colon_glued_after(span)) =>
            {
                return Err(self.error(
                    span,
                    format!(
                        "`{text}` in a flow collection (`[...]`, `{{...}}`): kubectl's YAML \
                         reader takes `?` and `:` there for YAML syntax; quote it"
                    ),
                ));
            }
            ScalarStyle::Literal | ScalarStyle::Folded => {
                if let (Some(tabs), Some(indent)) = (&mut self.tabs, span.indent) {
                    let start = u32::try_from(span.start.line()).unwrap_or(u32::MAX);
                    let source = span.slice(self.text).unwrap_or_default();
                    // The header line, then the first line with content.
                    let first_content = source
                        .split('\n')
                        .skip(1)
                        .position(|l| !l.trim_start_matches(' ').is_empty())
                        .map(|i| start + 1 + u32::try_from(i).unwrap_or(0));
                    // A block with no content holds no tab.
                    if let Some(first_content_line) = first_content {
                        tabs.blocks.push(BlockScalar {
                            first_content_line,
                            last_line: u32::try_from(span.end.line()).unwrap_or(u32::MAX),
                            indent,
                        });
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Keeps the value of `anchor` (its nodes and scalar bytes: `size`)
    /// when an alias names it, charging the budget for it.
    fn anchor(
        &mut self,
        anchor: usize,
        value: &Value,
        size: (usize, usize),
        span: &Span,
    ) -> Result<(), YamlError> {
        if anchor == 0 || !self.named.contains(&anchor) {
            return Ok(());
        }
        let (nodes, bytes) = size;
        if let Some(message) = self.charge(nodes, bytes) {
            return Err(self.error(span, message));
        }
        let kept = Anchored {
            value: value.clone(),
            nodes,
            bytes,
            prepaid: true,
        };
        self.anchors.insert(anchor, kept);
        Ok(())
    }

    /// The value of an alias of anchor `id`, its expansion counted and
    /// charged to the budget (before it is copied). `key`: the alias is a
    /// mapping key, which counts as one node.
    fn alias(&mut self, id: usize, span: &Span, key: bool) -> Result<Value, YamlError> {
        let Some(kept) = self.anchors.get_mut(&id) else {
            return Err(self.error(span, "alias to an unknown anchor"));
        };
        let (nodes, bytes) = (if key { 0 } else { kept.nodes }, kept.bytes);
        if kept.prepaid {
            // Paid when kept, for all its nodes.
            kept.prepaid = false;
            let unused = kept.nodes - nodes;
            self.budget.nodes -= unused;
            self.file.nodes -= unused;
        } else if let Some(message) = self.charge(nodes, bytes) {
            return Err(self.error(span, message));
        }
        self.count(nodes, span)?;
        let value = self.anchors[&id].value.clone();
        self.aliased_nodes += nodes;
        self.bytes += bytes;
        Ok(value)
    }

    /// Counts `nodes` more read in the file, refused past
    /// [`MAX_FILE_NODES`] (before their values are built).
    fn count(&mut self, nodes: usize, span: &Span) -> Result<(), YamlError> {
        self.nodes += nodes;
        self.file.read = self.file.read.saturating_add(nodes);
        if self.file.read > MAX_FILE_NODES {
            return Err(self.error(span, too_many_nodes()));
        }
        Ok(())
    }

    /// Charges the document's budget and the file's.
    fn charge(&mut self, nodes: usize, bytes: usize) -> Option<String> {
        let document = self.budget.charge(nodes, bytes);
        let file = self.file.charge(nodes, bytes);
        document.or(file)
    }

    fn tag_error(&self, span: &Span, tag: &str) -> YamlError {
        self.error(
            span,
            format!(
                "tag {tag}: kix reads no YAML tags; remove it (quote a value that must stay a \
                 string)"
            ),
        )
    }

    fn enter(&mut self, span: &Span) -> Result<(), YamlError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error(span, format!("nested more than {MAX_DEPTH} levels deep")));
        }
        Ok(())
    }

    /// A sequence whose start event was at `span`. `items`: record the
    /// line of each item.
    fn sequence(&mut self, span: &Span, items: bool) -> Result<Value, YamlError> {
        self.enter(span)?;
        let mut values = Vec::new();
        loop {
            let (event, span) = self.next()?;
            if matches!(event, Event::SequenceEnd) {
                break;
            }
            if items {
                self.item_lines.push(self.line(&span));
            }
            values.push(self.node(event, span, false)?);
        }
        self.depth -= 1;
        values.shrink_to_fit();
        Ok(Value::Array(values))
    }

    /// A mapping whose start event was at `span`.
    fn mapping(&mut self, span: &Span, root: bool) -> Result<Map<String, Value>, YamlError> {
        self.enter(span)?;
        let mut map = Map::new();
        // The keys written in this mapping, once a merge key has added
        // others (until then, the map's keys).
        let mut written: Option<HashSet<String>> = None;
        loop {
            let (event, key_span) = self.next()?;
            if matches!(event, Event::MappingEnd) {
                break;
            }
            let key = self.key(event, &key_span)?;
            let (event, value_span) = self.next()?;
            match key {
                Key::Merge => {
                    // An alias there must name a mapping (go-yaml v2).
                    let alias = matches!(event, Event::Alias(_));
                    let value = self.node(event, value_span, false)?;
                    if alias && !value.is_object() {
                        return Err(self.merge_error(&key_span));
                    }
                    written.get_or_insert_with(|| map.keys().cloned().collect());
                    self.merge(&mut map, value, &key_span)?;
                }
                Key::Text(key) => {
                    let value = if root
                        && key == "items"
                        && matches!(event, Event::SequenceStart(_, 0, None))
                    {
                        // The items of a List: their lines serve errors.
                        self.count(1, &value_span)?;
                        self.sequence(&value_span, true)?
                    } else {
                        self.node(event, value_span, false)?
                    };
                    let repeated = match &mut written {
                        None => map.contains_key(&key),
                        Some(written) => !written.insert(key.clone()),
                    };
                    if repeated {
                        return Err(self.error(
                            &key_span,
                            format!(
                                "duplicate key {key:?} in a mapping (kubectl would keep the last \
                                 one silently): remove one"
                            ),
                        ));
                    }
                    map.insert(key, value);
                }
            }
        }
        self.depth -= 1;
        Ok(map)
    }

    /// A mapping key: a string, or `<<`.
    fn key(&mut self, event: Event<'a>, span: &Span) -> Result<Key, YamlError> {
        self.count(1, span)?;
        match event {
            Event::Scalar(text, style, anchor, tag) => {
                if let Some(tag) = tag {
                    return Err(self.tag_error(span, &tag.to_string()));
                }
                self.check_scalar(&text, style, span)?;
                if span.start.line() != span.end.line() {
                    // go-yaml v2 reads no key over several lines.
                    return Err(self.error(
                        span,
                        "a key that spans lines, which kubectl's YAML reader refuses: write \
                         it on one line",
                    ));
                }
                self.bytes += text.len();
                let plain = match style {
                    ScalarStyle::Plain => resolve_plain(&text),
                    _ => Plain::Str,
                };
                if matches!(plain, Plain::Str | Plain::Merge) && anchor != 0 {
                    let value = Value::String(text.to_string());
                    self.anchor(anchor, &value, (1, text.len()), span)?;
                }
                match plain {
                    Plain::Str => Ok(Key::Text(text.into_owned())),
                    Plain::Merge => Ok(Key::Merge),
                    other => Err(self.non_string_key(span, &text, &other)),
                }
            }
            Event::Alias(_) if !self.ends_anchor(span) => Err(self.error(span, ALIAS_END)),
            Event::Alias(id) => match self.alias(id, span, true)? {
                Value::String(s) => Ok(Key::Text(s)),
                _ => Err(self.error(
                    span,
                    "an alias to something other than a string as a key: kubectl cannot use it; \
                     write the key out",
                )),
            },
            _ => Err(self.error(
                span,
                "a mapping or sequence as a key: kubectl cannot read it; use a string key",
            )),
        }
    }

    fn non_string_key(&self, span: &Span, text: &str, plain: &Plain) -> YamlError {
        let (what, sent) = match plain {
            Plain::Null => ("null".to_owned(), "fails".to_owned()),
            Plain::Bool(b) => (format!("the boolean {b}"), format!("sends the key \"{b}\"")),
            Plain::Int(i) => (format!("the integer {i}"), format!("sends the key \"{i}\"")),
            Plain::BigInt(u) => (format!("the integer {u}"), "sends another key".to_owned()),
            Plain::Float(_) => ("a number".to_owned(), "sends another key".to_owned()),
            Plain::Merge | Plain::Str => ("a string".to_owned(), "uses it".to_owned()),
        };
        self.error(
            span,
            format!(
                "key `{text}` is {what} to YAML, not a string (kubectl {sent}): quote it, as \
                 \"{text}\""
            ),
        )
    }

    fn merge_error(&self, span: &Span) -> YamlError {
        self.error(
            span,
            "the value of a merge key `<<` must be a mapping, an alias to one, or a sequence of \
             those",
        )
    }

    /// Applies a merge key's value to `map` as go-yaml v2 does: a mapping's
    /// entries replace what `map` has; for a sequence of mappings, the
    /// earlier ones win.
    fn merge(
        &self,
        map: &mut Map<String, Value>,
        value: Value,
        span: &Span,
    ) -> Result<(), YamlError> {
        let wrong = || self.merge_error(span);
        match value {
            Value::Object(entries) => map.extend(entries),
            Value::Array(list) => {
                for item in list.into_iter().rev() {
                    let Value::Object(entries) = item else {
                        return Err(wrong());
                    };
                    map.extend(entries);
                }
            }
            _ => return Err(wrong()),
        }
        Ok(())
    }
}

/// An escape of double-quoted source text that kubectl's YAML reader
/// (go-yaml v2) does not read, and what to write instead: `\/`, which it
/// does not know, and `\u` of a UTF-16 surrogate (`\ud83d`), which it
/// refuses where JSON would join a pair.
fn escape_kubectl_refuses(source: &str) -> Option<&'static str> {
    let mut chars = source.char_indices();
    while let Some((i, c)) = chars.next() {
        if c != '\\' {
            continue;
        }
        match chars.next() {
            Some((_, '/')) => {
                return Some(
                    "the escape `\\/`, which kubectl's YAML reader does not know: write `/`",
                );
            }
            Some((_, 'u'))
                if source
                    .get(i + 2..i + 6)
                    .and_then(|hex| u32::from_str_radix(hex, 16).ok())
                    .is_some_and(|code| (0xD800..=0xDFFF).contains(&code)) =>
            {
                return Some(
                    "a `\\u` escape of a UTF-16 surrogate, which kubectl's YAML reader refuses: \
                     write the character itself or `\\U` and its 8 hex digits",
                );
            }
            _ => {}
        }
    }
    None
}

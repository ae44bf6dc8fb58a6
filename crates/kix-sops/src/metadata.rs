//! The `sops` metadata of a file: its age recipients (each with the data
//! key encrypted to it), the encryption rule, the encrypted MAC and the
//! time it is bound to.

use regex::Regex;

use crate::error::Reason;
use crate::tree::Node;

/// sops' rule when a file names none.
const DEFAULT_UNENCRYPTED_SUFFIX: &str = "_unencrypted";

/// One age recipient and the data key encrypted to it (an armored age file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgeStanza {
    pub recipient: String,
    pub(crate) enc: String,
}

/// Which values of a file are encrypted (at most one rule per file).
#[derive(Debug, Clone)]
pub(crate) enum Rule {
    UnencryptedSuffix(String),
    EncryptedSuffix(String),
    UnencryptedRegex(Regex),
    EncryptedRegex(Regex),
}

impl Rule {
    /// Whether the value at `path` (mapping keys from the root) is
    /// encrypted: sops asks every key of the path.
    pub(crate) fn encrypts(&self, path: &[String]) -> bool {
        match self {
            Rule::UnencryptedSuffix(s) => !path.iter().any(|k| k.ends_with(s.as_str())),
            Rule::EncryptedSuffix(s) => path.iter().any(|k| k.ends_with(s.as_str())),
            Rule::UnencryptedRegex(r) => !path.iter().any(|k| r.is_match(k)),
            Rule::EncryptedRegex(r) => path.iter().any(|k| r.is_match(k)),
        }
    }
}

/// A file's metadata, read and checked.
#[derive(Debug, Clone)]
pub(crate) struct Metadata {
    pub age: Vec<AgeStanza>,
    pub rule: Rule,
    pub mac_only_encrypted: bool,
    /// The encrypted MAC (`ENC[...]`), empty when the file has none.
    pub mac: String,
    /// `lastmodified` as Go's `Format(time.RFC3339)` writes it back: the
    /// MAC's additional data.
    pub last_modified: String,
}

/// Takes the `sops` key out of every document; the first document's is
/// the metadata (as sops reads a multi-document file).
pub(crate) fn extract(documents: &mut [Node]) -> Result<Metadata, Reason> {
    let mut found = None;
    for (index, document) in documents.iter_mut().enumerate() {
        let Node::Map(entries) = document else {
            continue;
        };
        if let Some(at) = entries.iter().position(|(k, _)| k == "sops") {
            let (_, node) = entries.remove(at);
            if index == 0 {
                found = Some(node);
            }
        }
    }
    match found {
        None => Err(Reason::NotSops),
        Some(Node::Map(fields)) => read(&fields),
        Some(_) => Err(Reason::Metadata("`sops` is not a mapping".into())),
    }
}

fn field<'a>(fields: &'a [(String, Node)], name: &str) -> Option<&'a Node> {
    fields.iter().find(|(k, _)| k == name).map(|(_, v)| v)
}

fn text<'a>(fields: &'a [(String, Node)], name: &str) -> Result<Option<&'a str>, Reason> {
    match field(fields, name) {
        None | Some(Node::Null) => Ok(None),
        Some(Node::Str(s)) if s.is_empty() => Ok(None),
        Some(Node::Str(s)) => Ok(Some(s)),
        Some(_) => Err(Reason::Metadata(format!("`{name}` is not a string"))),
    }
}

fn read(fields: &[(String, Node)]) -> Result<Metadata, Reason> {
    for unsupported in ["unencrypted_comment_regex", "encrypted_comment_regex"] {
        if text(fields, unsupported)?.is_some() {
            return Err(Reason::Unsupported(format!("`{unsupported}`")));
        }
    }
    let age = recipients(fields)?;
    let last_modified = text(fields, "lastmodified")?
        .ok_or_else(|| Reason::Metadata("no `lastmodified`".into()))?;
    let last_modified = chrono::DateTime::parse_from_rfc3339(last_modified)
        .map_err(|_| Reason::Metadata("`lastmodified` is not an RFC 3339 time".into()))?
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let mac = text(fields, "mac")?.unwrap_or_default().to_owned();
    let mac_only_encrypted = match field(fields, "mac_only_encrypted") {
        None | Some(Node::Null) => false,
        Some(Node::Bool(b)) => *b,
        Some(Node::Str(s)) if s == "true" => true,
        Some(Node::Str(s)) if s == "false" => false,
        Some(_) => {
            return Err(Reason::Metadata(
                "`mac_only_encrypted` is not a boolean".into(),
            ));
        }
    };
    Ok(Metadata {
        age,
        rule: rule(fields)?,
        mac_only_encrypted,
        mac,
        last_modified,
    })
}

fn rule(fields: &[(String, Node)]) -> Result<Rule, Reason> {
    let regex = |name: &str, pattern: &str| {
        Regex::new(pattern).map_err(|_| Reason::Metadata(format!("`{name}` is not a valid regex")))
    };
    let mut rules = Vec::new();
    if let Some(s) = text(fields, "unencrypted_suffix")? {
        rules.push(Rule::UnencryptedSuffix(s.to_owned()));
    }
    if let Some(s) = text(fields, "encrypted_suffix")? {
        rules.push(Rule::EncryptedSuffix(s.to_owned()));
    }
    if let Some(s) = text(fields, "unencrypted_regex")? {
        rules.push(Rule::UnencryptedRegex(regex("unencrypted_regex", s)?));
    }
    if let Some(s) = text(fields, "encrypted_regex")? {
        rules.push(Rule::EncryptedRegex(regex("encrypted_regex", s)?));
    }
    match rules.len() {
        0 => Ok(Rule::UnencryptedSuffix(DEFAULT_UNENCRYPTED_SUFFIX.into())),
        1 => Ok(rules.remove(0)),
        _ => Err(Reason::Metadata(
            "more than one of encrypted_suffix, unencrypted_suffix, encrypted_regex, unencrypted_regex".into(),
        )),
    }
}

/// The age recipients: the top-level `age` list, or the one key group's
/// (several key groups split the data key with Shamir's scheme, which kix
/// does not read).
fn recipients(fields: &[(String, Node)]) -> Result<Vec<AgeStanza>, Reason> {
    let groups = match field(fields, "key_groups") {
        None | Some(Node::Null) => None,
        Some(Node::Seq(groups)) => Some(groups),
        Some(_) => return Err(Reason::Metadata("`key_groups` is not a list".into())),
    };
    let list = match groups {
        Some(groups) if groups.len() > 1 => {
            return Err(Reason::Unsupported(format!(
                "{} key groups (Shamir secret sharing)",
                groups.len()
            )));
        }
        Some(groups) => match groups.first() {
            Some(Node::Map(group)) => field(group, "age"),
            Some(_) => return Err(Reason::Metadata("a key group is not a mapping".into())),
            None => None,
        },
        None => field(fields, "age"),
    };
    let items = match list {
        None | Some(Node::Null) => return Ok(Vec::new()),
        Some(Node::Seq(items)) => items,
        Some(_) => return Err(Reason::Metadata("`age` is not a list".into())),
    };
    items
        .iter()
        .map(|item| {
            let Node::Map(entry) = item else {
                return Err(Reason::Metadata("an `age` entry is not a mapping".into()));
            };
            let recipient = text(entry, "recipient")?
                .ok_or_else(|| Reason::Metadata("an `age` entry has no `recipient`".into()))?;
            let enc = text(entry, "enc")?
                .ok_or_else(|| Reason::Metadata("an `age` entry has no `enc`".into()))?;
            Ok(AgeStanza {
                recipient: recipient.to_owned(),
                enc: enc.to_owned(),
            })
        })
        .collect()
}

//! Why a SOPS file is refused. No variant carries a value of the file:
//! paths name keys only, so an error can be printed, logged and recorded.

/// A SOPS file that could not be read or decrypted: the file and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {reason}")]
pub struct SopsError {
    /// The file as the caller named it.
    pub file: String,
    pub reason: Reason,
}

/// Why a SOPS file is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Reason {
    #[error("not readable as {format}: {message} (line {line})")]
    Syntax {
        format: &'static str,
        line: u32,
        message: String,
    },
    #[error(
        "not a SOPS file: it has no top-level `sops` metadata (encrypt it with `sops encrypt`)"
    )]
    NotSops,
    #[error("malformed SOPS metadata: {0}")]
    Metadata(String),
    #[error("unsupported by kix: {0}")]
    Unsupported(String),
    #[error(
        "no age identity to decrypt with (give --age-identity FILE, SOPS_AGE_KEY_FILE or SOPS_AGE_KEY)"
    )]
    NoIdentities,
    #[error("the file has no age recipient (kix decrypts with age keys only)")]
    NoAgeRecipients,
    #[error(
        "none of the {identities} age identities given is among the file's recipients ({})",
        recipients.join(", ")
    )]
    NotARecipient {
        identities: usize,
        recipients: Vec<String>,
    },
    #[error("the data key for recipient {recipient} could not be decrypted: {why}")]
    DataKey { recipient: String, why: String },
    #[error(
        "the value at `{path}` failed authentication: the file was changed after sops wrote it (tampered, or encrypted with another key)"
    )]
    ValueTampered { path: String },
    #[error("the value at `{path}` should be encrypted but is not a sops ENC[...] value: {why}")]
    NotEncrypted { path: String, why: &'static str },
    #[error("the value at `{path}` decrypts to no valid {value_type}")]
    BadPlaintext {
        path: String,
        value_type: &'static str,
    },
    #[error(
        "the file's MAC does not match its content: it was changed after sops wrote it (tampered or truncated)"
    )]
    MacMismatch,
    #[error("the file's MAC cannot be read: {0}")]
    MacUnreadable(&'static str),
}

impl Reason {
    pub(crate) fn at(self, file: &str) -> SopsError {
        SopsError {
            file: file.to_owned(),
            reason: self,
        }
    }
}

/// An age identity (key) file or variable that could not be read. Never
/// carries a line of the file: it may be a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    #[error("{source_name}: cannot read: {message}")]
    Read {
        source_name: String,
        message: String,
    },
    #[error("{source_name}, line {line}: not an age identity (AGE-SECRET-KEY-1...)")]
    Malformed { source_name: String, line: usize },
    #[error(
        "{source_name}, line {line}: {kind} identities are not supported by kix (use an X25519 key from age-keygen)"
    )]
    UnsupportedKind {
        source_name: String,
        line: usize,
        kind: &'static str,
    },
}

//! age identities (private keys), read as sops reads them: one per line,
//! empty lines and `#` comments skipped (an identity file from
//! `age-keygen`, `SOPS_AGE_KEY_FILE`), or several on a line separated by
//! white space (`SOPS_AGE_KEY`).

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use age::x25519;

use crate::error::IdentityError;

/// The variable holding identities themselves (several per line allowed).
pub const SOPS_AGE_KEY: &str = "SOPS_AGE_KEY";
/// The variable naming an identity file.
pub const SOPS_AGE_KEY_FILE: &str = "SOPS_AGE_KEY_FILE";

/// age identities to decrypt with. Debug shows the recipients (public
/// keys), never a key. A clone shares the keys.
#[derive(Default, Clone)]
pub struct Identities {
    keys: Vec<Arc<x25519::Identity>>,
}

impl std::fmt::Debug for Identities {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identities")
            .field("recipients", &self.recipients())
            .finish()
    }
}

/// How lines of an identity source are split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// One identity per line (identity files, `SOPS_AGE_KEY_FILE`).
    OnePerLine,
    /// Any number per line, separated by white space (`SOPS_AGE_KEY`).
    SeveralPerLine,
}

impl Identities {
    /// Reads the identities of `text`; `source_name` names it in errors.
    pub fn parse(text: &str, source_name: &str, layout: Layout) -> Result<Self, IdentityError> {
        let mut keys = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let line = line.strip_suffix('\r').unwrap_or(line);
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let words: Vec<&str> = match layout {
                Layout::OnePerLine => vec![line.trim()],
                Layout::SeveralPerLine => line.split_whitespace().collect(),
            };
            for word in words {
                keys.push(Arc::new(parse_one(word, source_name, index + 1)?));
            }
        }
        Ok(Self { keys })
    }

    /// Reads an identity file (as `SOPS_AGE_KEY_FILE` names one).
    pub fn from_file(path: &Path) -> Result<Self, IdentityError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| IdentityError::Read {
            source_name: name.clone(),
            message: e.to_string(),
        })?;
        Self::parse(&text, &name, Layout::OnePerLine)
    }

    /// The identities sops would find in the environment: `SOPS_AGE_KEY`,
    /// the file `SOPS_AGE_KEY_FILE` names, and the user's
    /// `sops/age/keys.txt` (under `$XDG_CONFIG_HOME`, else `~/.config`)
    /// when it exists. Empty when none is set.
    pub fn from_env() -> Result<Self, IdentityError> {
        let mut all = Self::default();
        if let Some(text) = std::env::var_os(SOPS_AGE_KEY) {
            let text = text.into_string().map_err(|_| IdentityError::Read {
                source_name: SOPS_AGE_KEY.into(),
                message: "not UTF-8".into(),
            })?;
            all.extend(Self::parse(&text, SOPS_AGE_KEY, Layout::SeveralPerLine)?);
        }
        if let Some(path) = std::env::var_os(SOPS_AGE_KEY_FILE) {
            all.extend(Self::from_file(Path::new(&path))?);
        }
        if let Some(path) = user_keys_file().filter(|p| p.is_file()) {
            all.extend(Self::from_file(&path)?);
        }
        Ok(all)
    }

    /// Adds `other`'s identities after these.
    pub fn extend(&mut self, other: Identities) {
        self.keys.extend(other.keys);
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// The public keys (`age1...`) of these identities.
    pub fn recipients(&self) -> Vec<String> {
        self.keys
            .iter()
            .map(|k| k.to_public().to_string())
            .collect()
    }

    pub(crate) fn keys(&self) -> impl Iterator<Item = &x25519::Identity> {
        self.keys.iter().map(|k| &**k)
    }
}

/// `$XDG_CONFIG_HOME/sops/age/keys.txt`, else `~/.config/sops/age/keys.txt`
/// (where sops looks on Linux).
fn user_keys_file() -> Option<PathBuf> {
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(config.join("sops").join("age").join("keys.txt"))
}

fn parse_one(
    word: &str,
    source_name: &str,
    line: usize,
) -> Result<x25519::Identity, IdentityError> {
    let unsupported = |kind| IdentityError::UnsupportedKind {
        source_name: source_name.to_owned(),
        line,
        kind,
    };
    if word.starts_with("AGE-PLUGIN-") {
        return Err(unsupported("age plugin"));
    }
    if word.starts_with("AGE-SECRET-KEY-PQ-1") {
        return Err(unsupported("post-quantum hybrid"));
    }
    x25519::Identity::from_str(word).map_err(|_| IdentityError::Malformed {
        source_name: source_name.to_owned(),
        line,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Generated by age-keygen for these tests only.
    const KEY_A: &str =
        "AGE-SECRET-KEY-1USLXNEA45VK4CDCNUP2F7L92VW425EC8PJ3ULK7JDRJY6QZM0UZS3DSSAH";

    #[test]
    fn comments_and_empty_lines_are_skipped() {
        let text = format!("# created: 2024\n# public key: age1...\n\n{KEY_A}\r\n");
        let ids = Identities::parse(&text, "keys.txt", Layout::OnePerLine).expect("parses");
        assert_eq!(ids.len(), 1);
    }

    #[test]
    fn several_per_line_only_for_the_variable() {
        let text = format!("{KEY_A} {KEY_A}\n{KEY_A}");
        let ids = Identities::parse(&text, SOPS_AGE_KEY, Layout::SeveralPerLine).expect("parses");
        assert_eq!(ids.len(), 3);
        let err = Identities::parse(&text, "keys.txt", Layout::OnePerLine).expect_err("refused");
        assert_eq!(
            err,
            IdentityError::Malformed {
                source_name: "keys.txt".into(),
                line: 1
            }
        );
    }

    #[test]
    fn an_error_never_shows_the_line() {
        let secret_looking = "AGE-SECRET-KEY-1NOTAKEYBUTSECRET";
        let err =
            Identities::parse(secret_looking, "keys.txt", Layout::OnePerLine).expect_err("refused");
        assert!(!err.to_string().contains("NOTAKEY"), "{err}");
        let err = Identities::parse("AGE-PLUGIN-YUBIKEY-1XYZ", "k", Layout::OnePerLine)
            .expect_err("refused");
        assert!(err.to_string().contains("age plugin"), "{err}");
        assert!(!err.to_string().contains("XYZ"), "{err}");
    }
}

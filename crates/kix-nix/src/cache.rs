//! Publishing builds to a Nix binary cache, signed with the user's key.
//!
//! Everything goes through the pinned `nix`: `nix path-info --store` asks
//! the cache what it has, `nix copy --to '<url>?secret-key=<file>'` sends
//! and signs what is missing (the signatures go into the cache's narinfos,
//! never into the local store), `nix store sign --store` adds our signature
//! to paths the cache has without it, and `nix store verify` checks
//! signatures. kix does no cryptography of its own.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use kix_manifest::cache::key_name;
use kix_manifest::{CacheUrl, PublicKey, StorePath};
use serde::Deserialize;

use crate::NixError;
use crate::command::{EXPERIMENTAL, NIX, NixCommand};

/// Arguments per `nix path-info` call, well under the kernel's limit.
const QUERY_CHUNK: usize = 500;

/// Every question to a cache goes to the cache: Nix otherwise remembers
/// what an http(s) cache had (up to 30 days), and a cache that lost a path
/// would be taken to still have it.
const NO_NARINFO_CACHE: [&str; 6] = [
    "--option",
    "narinfo-cache-negative-ttl",
    "0",
    "--option",
    "narinfo-cache-positive-ttl",
    "0",
];

/// A binary cache builds are published to and fetched from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cache {
    pub url: CacheUrl,
    /// The keys a build fetched from this cache must be signed by.
    pub public_keys: Vec<PublicKey>,
}

/// A Nix secret key file (`nix key generate-secret`), known by its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SigningKey {
    /// Absolute path of the file, handed to Nix.
    path: PathBuf,
    /// The part before `:`, which signatures carry.
    name: String,
}

/// What one push did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PushReport {
    /// Paths of the closure that were copied to the cache.
    pub paths_sent: usize,
    /// Bytes those paths take in the cache (compressed NARs).
    pub bytes_sent: u64,
    /// Paths the cache already had, not sent again.
    pub paths_present: usize,
    /// Paths the cache had without our signature, signed there.
    pub paths_signed: usize,
}

/// Progress of a push, for the front end to show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushProgress {
    /// The cache has `present` of the closure's `closure` paths.
    Checked { closure: usize, present: usize },
    /// Copying `path`, the `number`th of `total`.
    Copying {
        path: String,
        number: usize,
        total: usize,
    },
    /// Adding our signature to `paths` paths already in the cache.
    Signing { paths: usize },
}

/// Publishing or checking failed.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("signing key {}: {source}", path.display())]
    KeyRead {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "signing key {}: {reason} (a Nix secret key file, as `nix key generate-secret --key-name NAME` writes it)",
        path.display()
    )]
    KeyFormat { path: PathBuf, reason: String },
    #[error(
        "pushing {path} to {url} failed; nothing was recorded, run it again to finish:\n{message}"
    )]
    Push {
        path: String,
        url: String,
        message: String,
    },
    #[error("{url} still lacks {missing} of the paths of {path} after the push")]
    Incomplete {
        path: String,
        url: String,
        missing: usize,
    },
    #[error("{path} in {url} is not signed by a trusted key ({keys}):\n{message}")]
    Untrusted {
        path: String,
        url: String,
        keys: String,
        message: String,
    },
    #[error("cannot ask {url} which paths it has:\n{message}")]
    Unreachable { url: String, message: String },
    #[error("cache {url} has no public keys to check signatures against")]
    NoPublicKeys { url: String },
    #[error(transparent)]
    Nix(#[from] NixError),
}

impl SigningKey {
    /// Reads the key's name from a secret key file; the secret stays in the
    /// file, which only Nix reads.
    pub fn from_file(path: &Path) -> Result<SigningKey, CacheError> {
        let read_err = |source| CacheError::KeyRead {
            path: path.to_path_buf(),
            source,
        };
        let text = std::fs::read_to_string(path).map_err(read_err)?;
        let format_err = |reason: String| CacheError::KeyFormat {
            path: path.to_path_buf(),
            reason,
        };
        let name = key_name(text.trim()).map_err(format_err)?.to_owned();
        let absolute = std::fs::canonicalize(path).map_err(read_err)?;
        // The path goes into a store URL's query, where these would be read
        // as separators.
        let text_path = absolute.to_string_lossy();
        if text_path.contains(['&', '?', '#', '%', '+', ' ']) {
            return Err(format_err(
                "its path has a character (& ? # % + or space) a store URL cannot carry; move the file".into(),
            ));
        }
        Ok(SigningKey {
            path: absolute,
            name,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// One path as `nix path-info --json` prints it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PathInfo {
    path: String,
    #[serde(default = "valid_by_default")]
    valid: bool,
    #[serde(default)]
    signatures: Vec<String>,
    #[serde(default)]
    download_size: Option<u64>,
    #[serde(default)]
    nar_size: Option<u64>,
}

fn valid_by_default() -> bool {
    true
}

impl PathInfo {
    fn signed_by(&self, key_name: &str) -> bool {
        self.signatures.iter().any(|sig| {
            sig.split_once(':')
                .is_some_and(|(name, _)| name == key_name)
        })
    }
}

impl Cache {
    pub fn new(url: CacheUrl, public_keys: Vec<PublicKey>) -> Cache {
        Cache { url, public_keys }
    }

    /// Copies the closure of `path` to the cache, signed by `key` when one
    /// is given. Paths the cache has are not sent again (with a key: those
    /// it has without our signature are signed in place). Fails unless the
    /// whole closure is in the cache afterwards.
    pub fn push(
        &self,
        path: &StorePath,
        key: Option<&SigningKey>,
        progress: &mut (dyn FnMut(PushProgress) + Send),
    ) -> Result<PushReport, CacheError> {
        let closure = closure_of(path)?;
        let remote = self.query(&closure)?;
        let missing: Vec<&str> = remote
            .iter()
            .filter(|info| !info.valid)
            .map(|info| info.path.as_str())
            .collect();
        let unsigned: Vec<&str> = match key {
            Some(key) => remote
                .iter()
                .filter(|info| info.valid && !info.signed_by(key.name()))
                .map(|info| info.path.as_str())
                .collect(),
            None => Vec::new(),
        };
        progress(PushProgress::Checked {
            closure: closure.len(),
            present: closure.len() - missing.len(),
        });
        if !missing.is_empty() {
            self.copy(path, key, missing.len(), progress)?;
        }
        if let Some(key) = key.filter(|_| !unsigned.is_empty()) {
            progress(PushProgress::Signing {
                paths: unsigned.len(),
            });
            self.sign(&unsigned, key)?;
        }
        let sent: Vec<String> = missing.iter().map(|p| (*p).to_owned()).collect();
        let after = self.query(&sent)?;
        let still_missing = after.iter().filter(|info| !info.valid).count();
        if still_missing > 0 {
            return Err(CacheError::Incomplete {
                path: path.to_string(),
                url: self.url.to_string(),
                missing: still_missing,
            });
        }
        Ok(PushReport {
            paths_sent: sent.len(),
            bytes_sent: after
                .iter()
                .map(|info| info.download_size.or(info.nar_size).unwrap_or(0))
                .sum(),
            paths_present: closure.len() - missing.len(),
            paths_signed: unsigned.len(),
        })
    }

    /// Checks with Nix that every path of the closure of `path` in the
    /// cache is signed by one of the cache's public keys (content-addressed
    /// paths need no signature, as Nix has it).
    pub fn verify(&self, path: &StorePath) -> Result<(), CacheError> {
        if self.public_keys.is_empty() {
            return Err(CacheError::NoPublicKeys {
                url: self.url.to_string(),
            });
        }
        let keys = self
            .public_keys
            .iter()
            .map(PublicKey::as_str)
            .collect::<Vec<_>>()
            .join(" ");
        let command = NixCommand::new(NIX)
            .args(EXPERIMENTAL)
            .args(NO_NARINFO_CACHE)
            .args(["store", "verify", "--recursive", "--no-contents"])
            .args(["--store", self.url.as_str()])
            .args(["--trusted-public-keys", &keys])
            .arg(path.as_str());
        match command.run(false) {
            Ok(_) => Ok(()),
            Err(NixError::CommandFailed { stderr, .. }) => Err(CacheError::Untrusted {
                path: path.to_string(),
                url: self.url.to_string(),
                keys,
                message: stderr,
            }),
            Err(other) => Err(other.into()),
        }
    }

    /// What the cache knows of `paths` (in chunks, so any closure fits).
    fn query(&self, paths: &[String]) -> Result<Vec<PathInfo>, CacheError> {
        let mut infos = Vec::with_capacity(paths.len());
        for chunk in paths.chunks(QUERY_CHUNK) {
            let command = NixCommand::new(NIX)
                .args(EXPERIMENTAL)
                .args(NO_NARINFO_CACHE)
                .args(["path-info", "--json", "--store", self.url.as_str()])
                .args(chunk);
            let answer = path_infos(&command).map_err(|err| match err {
                CacheError::Nix(NixError::CommandFailed { stderr, .. }) => {
                    CacheError::Unreachable {
                        url: self.url.to_string(),
                        message: stderr,
                    }
                }
                other => other,
            })?;
            infos.extend(answer);
        }
        Ok(infos)
    }

    /// `nix copy` of the closure of `path`, reporting each path it starts.
    fn copy(
        &self,
        path: &StorePath,
        key: Option<&SigningKey>,
        total: usize,
        progress: &mut (dyn FnMut(PushProgress) + Send),
    ) -> Result<(), CacheError> {
        let to = match key {
            Some(key) => self
                .url
                .with_param("secret-key", &key.path().to_string_lossy()),
            None => self.url.to_string(),
        };
        let command = NixCommand::new(NIX)
            .args(EXPERIMENTAL)
            .args(NO_NARINFO_CACHE)
            .args(["copy", "--log-format", "internal-json", "-v", "--to", &to])
            .arg(path.as_str());
        let mut number = 0;
        let result = command.run_with(&mut |line| {
            if let Some(copied) = copying_path(line) {
                number += 1;
                progress(PushProgress::Copying {
                    path: copied,
                    number,
                    total,
                });
            }
        });
        match result {
            Ok(_) => Ok(()),
            Err(NixError::CommandFailed { stderr, .. }) => Err(CacheError::Push {
                path: path.to_string(),
                url: self.url.to_string(),
                message: log_messages(&stderr),
            }),
            Err(other) => Err(other.into()),
        }
    }

    /// Adds `key`'s signature to paths the cache already has.
    fn sign(&self, paths: &[&str], key: &SigningKey) -> Result<(), CacheError> {
        for chunk in paths.chunks(QUERY_CHUNK) {
            NixCommand::new(NIX)
                .args(EXPERIMENTAL)
                .args(NO_NARINFO_CACHE)
                .args(["store", "sign", "--store", self.url.as_str()])
                .arg("--key-file")
                .arg(key.path())
                .args(chunk)
                .run(false)?;
        }
        Ok(())
    }
}

/// The closure of `path` in the local store.
fn closure_of(path: &StorePath) -> Result<Vec<String>, CacheError> {
    let command = NixCommand::new(NIX)
        .args(EXPERIMENTAL)
        .args(["path-info", "--recursive", "--json"])
        .arg(path.as_str());
    let infos = path_infos(&command)?;
    let paths: BTreeSet<String> = infos.into_iter().map(|info| info.path).collect();
    Ok(paths.into_iter().collect())
}

fn path_infos(command: &NixCommand) -> Result<Vec<PathInfo>, CacheError> {
    let out = command.run(false)?;
    serde_json::from_str(&out.stdout).map_err(|e| {
        CacheError::Nix(NixError::UnexpectedOutput {
            command: command.display(),
            reason: e.to_string(),
            output: out.stdout.clone(),
        })
    })
}

/// One line of `--log-format internal-json`: `@nix {...}`.
#[derive(Deserialize)]
struct LogLine {
    action: String,
    #[serde(default, rename = "type")]
    activity: u64,
    #[serde(default)]
    fields: Vec<serde_json::Value>,
    #[serde(default)]
    level: u64,
    #[serde(default)]
    msg: String,
}

/// Nix's activity type for copying one path (`actCopyPath`).
const ACT_COPY_PATH: u64 = 100;

fn log_line(line: &[u8]) -> Option<LogLine> {
    let text = std::str::from_utf8(line).ok()?;
    serde_json::from_str(text.trim().strip_prefix("@nix ")?).ok()
}

/// The store path of a "copying path" activity start, if `line` is one.
fn copying_path(line: &[u8]) -> Option<String> {
    let entry = log_line(line)?;
    if entry.action != "start" || entry.activity != ACT_COPY_PATH {
        return None;
    }
    entry.fields.first()?.as_str().map(str::to_owned)
}

/// The errors and warnings of an internal-json log, as Nix would print
/// them; other lines as they are.
fn log_messages(stderr: &str) -> String {
    let mut messages = Vec::new();
    for line in stderr.lines() {
        match log_line(line.as_bytes()) {
            Some(entry) if entry.action == "msg" && entry.level <= 1 => {
                messages.push(strip_ansi(&entry.msg));
            }
            Some(_) => {}
            None if !line.trim().is_empty() => messages.push(line.to_owned()),
            None => {}
        }
    }
    messages.join("\n")
}

/// Nix colours its messages even in JSON; the terminal escapes go.
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters final-byte
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_copy_progress_and_errors_from_the_json_log() {
        let start = br#"@nix {"action":"start","fields":["/nix/store/c4vkif9iv07mw42z4fkx1lwsc0w3a7v2-e","local","file:///c"],"id":1,"level":3,"text":"copying path","type":100}"#;
        assert_eq!(
            copying_path(start).as_deref(),
            Some("/nix/store/c4vkif9iv07mw42z4fkx1lwsc0w3a7v2-e")
        );
        let other =
            br#"@nix {"action":"start","id":2,"level":3,"text":"copying 1 paths","type":103}"#;
        assert_eq!(copying_path(other), None);
        let log = "@nix {\"action\":\"msg\",\"level\":0,\"msg\":\"\\u001b[31;1merror:\\u001b[0m cannot write\"}\n@nix {\"action\":\"msg\",\"level\":4,\"msg\":\"chatter\"}\nplain text\n";
        assert_eq!(log_messages(log), "error: cannot write\nplain text");
    }

    #[test]
    fn signatures_are_matched_by_key_name() {
        let info = PathInfo {
            path: "/nix/store/x".into(),
            valid: true,
            signatures: vec!["ci-1:abc".into()],
            download_size: None,
            nar_size: None,
        };
        assert!(info.signed_by("ci-1"));
        assert!(!info.signed_by("ci"));
    }

    #[test]
    fn a_key_file_is_known_by_its_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("key");
        std::fs::write(&file, "ci-1:c2VjcmV0\n").expect("write");
        let key = SigningKey::from_file(&file).expect("key");
        assert_eq!(key.name(), "ci-1");
        std::fs::write(&file, "no-colon").expect("write");
        let err = SigningKey::from_file(&file)
            .expect_err("no name")
            .to_string();
        assert!(err.contains("no ':'") && err.contains("key"), "{err}");
        let err = SigningKey::from_file(&dir.path().join("missing"))
            .expect_err("missing")
            .to_string();
        assert!(err.contains("missing"), "{err}");
    }
}

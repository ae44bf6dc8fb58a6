//! The Nix store: validity, realisation, adding a plain directory.

use std::path::{Path, PathBuf};

use kix_manifest::{STORE_DIR, StorePath};

use crate::NixError;
use crate::command::{EXPERIMENTAL, NIX, NIX_STORE, NixCommand};

/// Whether `path` is a valid path in the local store (`nix-store
/// --check-validity`): present and registered, not half-written.
pub fn is_valid(path: &StorePath) -> Result<bool, NixError> {
    // --print-invalid prints invalid paths and exits 0, so a real failure
    // (no store, no permission) stays distinguishable from "not valid".
    let out = NixCommand::new(NIX_STORE)
        .args(["--check-validity", "--print-invalid"])
        .arg(path.as_str())
        .run(false)?;
    Ok(out.stdout.trim().is_empty())
}

/// Makes `path` valid locally: a no-op when it is, otherwise `nix-store
/// --realise` fetches it from the configured substituters (or builds it, for
/// a derivation output whose derivation is known).
pub fn realise(path: &StorePath) -> Result<(), NixError> {
    let command = NixCommand::new(NIX_STORE)
        .arg("--realise")
        .arg(path.as_str());
    match command.run(false) {
        Ok(_) => Ok(()),
        Err(NixError::CommandFailed { stderr, .. }) => Err(NixError::NotRealisable {
            path: path.to_string(),
            stderr,
        }),
        Err(other) => Err(other),
    }
}

/// Checks `path` and realises it when it is not valid.
pub fn ensure_valid(path: &StorePath) -> Result<(), NixError> {
    let unchecked = Resolved {
        path: path.clone(),
        checked: false,
    };
    unchecked.check().map(drop)
}

/// Adds a directory (recursively, as it is: symlinks stay symlinks) to the
/// store and returns the resulting path, named after the directory: `dir`
/// `/tmp/out` becomes `/nix/store/<hash>-out`. A base name that Nix does not
/// accept in a store path (spaces, a leading dot, ...) is cleaned up first
/// (`my build` -> `my-build`), using `nix store add-path --name`.
///
/// The hash is that of the directory's contents (NAR serialisation), so the
/// same contents always give the same path.
pub fn add_to_store(dir: &Path) -> Result<StorePath, NixError> {
    let meta = std::fs::metadata(dir).map_err(|source| NixError::PathNotFound {
        path: dir.to_path_buf(),
        source,
    })?;
    if !meta.is_dir() {
        return Err(NixError::NotABuild {
            path: dir.to_path_buf(),
            reason: "not a directory".into(),
        });
    }
    let base = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = store_name(&base);
    let command = if name == base {
        NixCommand::new(NIX_STORE).arg("--add").arg(dir)
    } else {
        NixCommand::new(NIX)
            .args(EXPERIMENTAL)
            .args(["store", "add-path", "--name", &name])
            .arg(dir)
    };
    let out = command.run(false)?;
    let printed = out.stdout.trim();
    let path = StorePath::parse(printed).map_err(|e| NixError::UnexpectedOutput {
        command: command.display(),
        reason: e.to_string(),
        output: out.stdout.clone(),
    })?;
    tracing::info!(dir = %dir.display(), path = %path, "added to the store");
    Ok(path)
}

/// What `--path` may name: a store path (or a symlink to one, such as
/// `./result`), used as it is after checking that it is valid here (realised
/// from the substituters otherwise); or a plain directory holding a manifest
/// tree, which is added to the store first.
pub fn resolve_path(path: &Path) -> Result<StorePath, NixError> {
    let resolved = resolve_path_unchecked(path)?;
    resolved.check()?;
    Ok(resolved.path)
}

/// A store path found for a build, whose validity may still be to check.
#[derive(Debug)]
pub struct Resolved {
    pub path: StorePath,
    /// Checked (or made) valid already.
    checked: bool,
}

/// What [`Resolved::check`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checked {
    /// Valid as it was found: what was read from it stands.
    AsFound,
    /// It was not valid and was realised: read it again.
    Realised,
}

impl Resolved {
    /// A path that is valid: made by `nix build` or added to the store.
    pub fn valid(path: StorePath) -> Resolved {
        Resolved {
            path,
            checked: true,
        }
    }

    /// Checks that the path is valid here, realising it when it is not.
    pub fn check(&self) -> Result<Checked, NixError> {
        if self.checked || is_valid(&self.path)? {
            return Ok(Checked::AsFound);
        }
        tracing::info!(path = %self.path, "not in the local store, realising");
        realise(&self.path)?;
        Ok(Checked::Realised)
    }
}

/// [`resolve_path`], leaving the validity check of a store path found here to
/// [`Resolved::check`]: that is a `nix-store` run (a tenth of a second),
/// which can go beside reading the path.
pub fn resolve_path_unchecked(path: &Path) -> Result<Resolved, NixError> {
    let canonical = match std::fs::canonicalize(path) {
        Ok(canonical) => canonical,
        Err(source) if source.kind() == std::io::ErrorKind::NotFound => {
            // A store path that is not here yet may still be substitutable.
            if let Some(text) = path.to_str()
                && let Ok(store_path) = StorePath::parse(text)
            {
                realise(&store_path)?;
                return Ok(Resolved::valid(store_path));
            }
            return Err(NixError::PathNotFound {
                path: path.to_path_buf(),
                source,
            });
        }
        Err(source) => {
            return Err(NixError::PathNotFound {
                path: path.to_path_buf(),
                source,
            });
        }
    };

    if canonical.starts_with(STORE_DIR) {
        let text = canonical.to_string_lossy();
        let store_path = match StorePath::parse(&text) {
            Ok(store_path) => store_path,
            Err(err) => {
                // Inside a store path: name the store path to use instead.
                if let Ok(with_sub) = StorePath::parse_with_subpath(&text)
                    && with_sub.sub_path().is_some()
                {
                    return Err(NixError::NotABuild {
                        path: path.to_path_buf(),
                        reason: format!(
                            "is inside the store path {}; pass that store path itself",
                            with_sub.base()
                        ),
                    });
                }
                return Err(err.into());
            }
        };
        return Ok(Resolved {
            path: store_path,
            checked: false,
        });
    }

    if !canonical.is_dir() {
        return Err(NixError::NotABuild {
            path: path.to_path_buf(),
            reason: "not a directory (a manifest tree is a directory with kix.json at its top)"
                .into(),
        });
    }
    if !canonical.join("kix.json").is_file() {
        return Err(NixError::NotABuild {
            path: path.to_path_buf(),
            reason: "no kix.json in this directory: not a kix manifest tree".into(),
        });
    }
    add_to_store(&canonical).map(Resolved::valid)
}

/// A store path name made from `base`: characters Nix does not allow become
/// `-`, leading dots go, and it is cut to the longest name Nix accepts.
/// An empty result becomes `kix-build`.
pub(crate) fn store_name(base: &str) -> String {
    let cleaned: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.' | '_' | '?' | '=') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = cleaned.trim_start_matches('.');
    let cut: String = trimmed.chars().take(kix_manifest::MAX_NAME_LEN).collect();
    if cut.is_empty() {
        "kix-build".to_owned()
    } else {
        cut
    }
}

/// The store directory kix works with.
pub fn store_dir() -> PathBuf {
    PathBuf::from(STORE_DIR)
}

#[cfg(test)]
mod tests {
    use super::store_name;

    #[test]
    fn store_names() {
        assert_eq!(store_name("out"), "out");
        assert_eq!(store_name("my build"), "my-build");
        assert_eq!(store_name(".hidden"), "hidden");
        assert_eq!(store_name(".tmpAbC12"), "tmpAbC12");
        assert_eq!(store_name("..."), "kix-build");
        assert_eq!(store_name(""), "kix-build");
        assert_eq!(store_name("ünï"), "-n-");
        assert_eq!(store_name(&"x".repeat(300)).len(), 211);
    }
}

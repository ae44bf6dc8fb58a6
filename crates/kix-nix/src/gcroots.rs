//! Nix GC roots that keep every store path an Activation names alive until
//! that Activation is retired.
//!
//! A root is the symlink `<dir>/<cluster>/<activation>` -> the store path,
//! made by `nix-store --add-root <link> --indirect --realise <path>`. Nix
//! registers it in `/nix/var/nix/gcroots/auto/` (through the daemon on a
//! multi-user install), so the link keeps the path alive wherever `<dir>` is.
//! The defaults are inside the GC roots tree, which the collector scans, so
//! each link is a root by itself as well: `/nix/var/nix/gcroots/kix` for
//! root, and for any other user `/nix/var/nix/gcroots/per-user/<user>/kix`,
//! under the per-user directory that Nix's daemon creates, owned by the user,
//! when the user first connects. Removing the link drops the root; the
//! dangling `auto/` entry is cleaned up by Nix's next collection.

use std::path::{Path, PathBuf};

use kix_manifest::StorePath;

use crate::NixError;
use crate::command::{NIX_STORE, NixCommand};

/// Where kix keeps its roots when run as root, unless told otherwise.
pub const DEFAULT_GCROOTS_DIR: &str = "/nix/var/nix/gcroots/kix";

/// Nix's per-user GC roots directories: `<this>/<user>`, owned by the user.
pub const PER_USER_GCROOTS: &str = "/nix/var/nix/gcroots/per-user";

/// Environment variable that overrides [`DEFAULT_GCROOTS_DIR`].
pub const GCROOTS_DIR_ENV: &str = "KIX_GCROOTS_DIR";

/// One root: the activation it belongs to and the store path it keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcRoot {
    pub cluster: String,
    pub activation: String,
    /// The symlink.
    pub link: PathBuf,
    /// Where it points (normally a store path).
    pub target: PathBuf,
}

/// The GC roots directory of kix: `<dir>/<cluster>/<activation>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcRoots {
    dir: PathBuf,
    /// The `--store` the roots are taken in; None: Nix's default store.
    store: Option<String>,
}

impl Default for GcRoots {
    /// `$KIX_GCROOTS_DIR`, else the default of the user kix runs as.
    fn default() -> Self {
        Self::from_env()
    }
}

/// The roots directory of the effective user when `KIX_GCROOTS_DIR` is not
/// set: [`DEFAULT_GCROOTS_DIR`] for root, else
/// `/nix/var/nix/gcroots/per-user/<user>/kix` (the user's name from the
/// password database, as Nix finds it, else `$USER`).
pub fn default_gcroots_dir() -> PathBuf {
    let uid = ::nix::unistd::geteuid();
    if uid.is_root() {
        return PathBuf::from(DEFAULT_GCROOTS_DIR);
    }
    let user = ::nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map(|u| u.name)
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| uid.to_string());
    Path::new(PER_USER_GCROOTS).join(user).join("kix")
}

impl GcRoots {
    /// Roots under `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        GcRoots {
            dir: dir.into(),
            store: None,
        }
    }

    /// The same roots, taken in the Nix store at `store` (`--store`).
    pub fn in_store(self, store: Option<String>) -> Self {
        GcRoots { store, ..self }
    }

    /// `$KIX_GCROOTS_DIR` when set and not empty, else [`default_gcroots_dir`],
    /// in the process's store ([`crate::use_store`]; inside a store of the
    /// operator's own, its own roots directory is the default).
    pub fn from_env() -> Self {
        let dir = match std::env::var_os(GCROOTS_DIR_ENV) {
            Some(dir) if !dir.is_empty() => Some(PathBuf::from(dir)),
            _ => None,
        };
        crate::fetch::process_store().gc_roots(dir)
    }

    /// `dir` when given, else [`GcRoots::from_env`].
    pub fn with_dir(dir: Option<PathBuf>) -> Self {
        dir.map_or_else(Self::from_env, Self::new)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The link path of a root.
    pub fn link(&self, cluster: &str, activation: &str) -> Result<PathBuf, NixError> {
        check_name(cluster)?;
        check_name(activation)?;
        Ok(self.dir.join(cluster).join(activation))
    }

    /// Checks, before a deploy changes anything, that roots of `cluster` can
    /// be written: makes `<dir>/<cluster>` and a file in it (removed again).
    pub fn check_writable(&self, cluster: &str) -> Result<(), NixError> {
        check_name(cluster)?;
        let dir = self.dir.join(cluster);
        let not_writable = |source| NixError::GcRootsNotWritable {
            dir: self.dir.clone(),
            source,
        };
        std::fs::create_dir_all(&dir).map_err(not_writable)?;
        let probe = dir.join(format!(".kix-write-check-{}", std::process::id()));
        std::fs::File::create(&probe).map_err(not_writable)?;
        let _ = std::fs::remove_file(&probe);
        Ok(())
    }

    /// Makes `path` a GC root for `<cluster>/<activation>` (realising it if
    /// needed). Idempotent; replaces a root of the same name that points at
    /// another store path. Returns the link.
    pub fn add(
        &self,
        cluster: &str,
        activation: &str,
        path: &StorePath,
    ) -> Result<PathBuf, NixError> {
        let link = self.link(cluster, activation)?;
        let parent = self.dir.join(cluster);
        std::fs::create_dir_all(&parent).map_err(|source| NixError::Io {
            path: parent.clone(),
            source,
        })?;
        let store = self.store.iter().flat_map(|url| ["--store", url.as_str()]);
        NixCommand::new(NIX_STORE)
            .args(store)
            .arg("--add-root")
            .arg(&link)
            .arg("--indirect")
            .arg("--realise")
            .arg(path.as_str())
            .run(false)?;
        tracing::info!(link = %link.display(), path = %path, "added GC root");
        Ok(link)
    }

    /// Drops the root of `<cluster>/<activation>`. Returns whether there was
    /// one. The cluster's directory goes too once it is empty.
    pub fn remove(&self, cluster: &str, activation: &str) -> Result<bool, NixError> {
        let link = self.link(cluster, activation)?;
        match std::fs::symlink_metadata(&link) {
            Ok(meta) if meta.file_type().is_symlink() => {}
            Ok(_) => {
                return Err(NixError::Io {
                    path: link,
                    source: std::io::Error::other("not a symlink; refusing to remove it"),
                });
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(source) => return Err(NixError::Io { path: link, source }),
        }
        std::fs::remove_file(&link).map_err(|source| NixError::Io {
            path: link.clone(),
            source,
        })?;
        tracing::info!(link = %link.display(), "removed GC root");
        // Only succeeds when empty, which is the point.
        let _ = std::fs::remove_dir(self.dir.join(cluster));
        Ok(true)
    }

    /// The roots of `cluster`, sorted by activation name. A cluster without
    /// roots gives an empty list.
    pub fn list(&self, cluster: &str) -> Result<Vec<GcRoot>, NixError> {
        check_name(cluster)?;
        let dir = self.dir.join(cluster);
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(NixError::Io { path: dir, source }),
        };
        let mut roots = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| NixError::Io {
                path: dir.clone(),
                source,
            })?;
            let link = entry.path();
            let Ok(target) = std::fs::read_link(&link) else {
                continue; // not a symlink: not ours
            };
            roots.push(GcRoot {
                cluster: cluster.to_owned(),
                activation: entry.file_name().to_string_lossy().into_owned(),
                link,
                target,
            });
        }
        roots.sort_by(|a, b| a.activation.cmp(&b.activation));
        Ok(roots)
    }
}

/// A cluster or activation name must be one plain file name.
fn check_name(name: &str) -> Result<(), NixError> {
    let reason = if name.is_empty() {
        Some("empty")
    } else if name == "." || name == ".." {
        Some("'.' and '..' are not names")
    } else if name.contains('/') {
        Some("contains '/'")
    } else if name.chars().any(|c| c.is_control()) {
        Some("contains control characters")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(NixError::InvalidRootName {
            name: name.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_names_that_are_not_file_names() {
        let roots = GcRoots::new("/tmp/kix-roots");
        for bad in ["", ".", "..", "a/b", "x\ny"] {
            assert!(roots.link("prod", bad).is_err(), "{bad:?}");
            assert!(roots.link(bad, "prod-1").is_err(), "{bad:?}");
        }
        assert_eq!(
            roots.link("prod", "prod-7").expect("valid"),
            PathBuf::from("/tmp/kix-roots/prod/prod-7")
        );
    }

    #[test]
    fn explicit_dir_wins() {
        let roots = GcRoots::with_dir(Some(PathBuf::from("/x/y")));
        assert_eq!(roots.dir(), Path::new("/x/y"));
    }
}

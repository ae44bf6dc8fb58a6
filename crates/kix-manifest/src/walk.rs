//! Lists every entry of a tree, following symlinks only into the store.
//!
//! Nix builds commonly contain symlinks into other store paths (for example
//! `symlinkJoin` outputs), so symlinks that resolve inside the store directory
//! are followed: a linked file is listed as a file, a linked directory is
//! walked as if it were a real one. A symlink that resolves anywhere else, or
//! does not resolve, is an error, so nothing outside the store is ever read.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

use walkdir::WalkDir;

use crate::error::TreeError;

/// What an entry is, after following an (allowed) symlink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EntryKind {
    Dir,
    File,
    /// FIFO, socket, device...
    Other,
}

/// One entry of the tree.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    /// Path relative to the root, through symlinks as they appear in the tree
    /// (`packages/web/resources/linked/cm.yaml`). Opening `root.join(rel)`
    /// reads the entry.
    pub rel: PathBuf,
    pub kind: EntryKind,
}

/// Lists all entries below `root` (not `root` itself), depth first, each
/// directory's entries sorted by file name. `root` and `store` must be
/// canonical.
pub(crate) fn walk(root: &Path, store: &Path) -> Result<Vec<Entry>, TreeError> {
    let mut walker = Walker {
        store,
        // Directories entered through symlinks (and the root): entering one
        // twice means a loop, or reading the same objects twice.
        entered: HashSet::from([root.to_path_buf()]),
        entries: Vec::new(),
    };
    walker.walk_dir(root, Path::new(""))?;
    Ok(walker.entries)
}

struct Walker<'a> {
    store: &'a Path,
    entered: HashSet<PathBuf>,
    entries: Vec<Entry>,
}

impl Walker<'_> {
    /// Walks `dir` (a path that opens the directory, possibly through
    /// symlinks), listing entries as `prefix/<path below dir>`.
    fn walk_dir(&mut self, dir: &Path, prefix: &Path) -> Result<(), TreeError> {
        let walker = WalkDir::new(dir)
            .min_depth(1)
            .follow_links(false)
            .sort_by_file_name();
        for entry in walker {
            let entry = entry.map_err(|e| {
                let path = e.path().unwrap_or(dir);
                let message = match e.io_error() {
                    Some(io) => io.to_string(),
                    None => e.to_string(),
                };
                TreeError::Io {
                    path: relative(path, dir, prefix),
                    message,
                }
            })?;
            let rel = relative(entry.path(), dir, prefix);
            let file_type = entry.file_type();
            let kind = if file_type.is_symlink() {
                self.follow_symlink(entry.path(), &rel)?
            } else if file_type.is_dir() {
                EntryKind::Dir
            } else if file_type.is_file() {
                EntryKind::File
            } else {
                EntryKind::Other
            };
            self.entries.push(Entry {
                rel: rel.clone(),
                kind,
            });
            if kind == EntryKind::Dir && file_type.is_symlink() {
                // walkdir does not descend into symlinked directories when
                // not following links; walk the target under the link's name.
                self.walk_dir(entry.path(), &rel)?;
            }
        }
        Ok(())
    }

    /// Checks that the symlink at `path` resolves strictly inside the store
    /// and says what it points to.
    fn follow_symlink(&mut self, path: &Path, rel: &Path) -> Result<EntryKind, TreeError> {
        let target = fs::read_link(path).map_err(|e| TreeError::Io {
            path: rel.to_path_buf(),
            message: e.to_string(),
        })?;
        let resolved = fs::canonicalize(path).map_err(|e| TreeError::BrokenSymlink {
            link: rel.to_path_buf(),
            target: target.clone(),
            message: e.to_string(),
        })?;
        // Strictly inside: a link to the store directory itself would make
        // kix read every store path.
        if !resolved.starts_with(self.store) || resolved == self.store {
            return Err(TreeError::SymlinkEscapesStore {
                link: rel.to_path_buf(),
                target,
            });
        }
        let metadata = fs::metadata(&resolved).map_err(|e| TreeError::Io {
            path: rel.to_path_buf(),
            message: e.to_string(),
        })?;
        if metadata.is_dir() {
            if !self.entered.insert(resolved) {
                return Err(TreeError::SymlinkLoop {
                    link: rel.to_path_buf(),
                    target,
                });
            }
            Ok(EntryKind::Dir)
        } else if metadata.is_file() {
            Ok(EntryKind::File)
        } else {
            Ok(EntryKind::Other)
        }
    }
}

/// `path` (below `dir`) as a path relative to the tree root.
fn relative(path: &Path, dir: &Path, prefix: &Path) -> PathBuf {
    match path.strip_prefix(dir) {
        Ok(below) => prefix.join(below),
        Err(_) => prefix.to_path_buf(),
    }
}

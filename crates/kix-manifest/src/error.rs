//! Why a manifest tree cannot be read.

use std::path::PathBuf;

use crate::migration::{ActionKind, MigrationRef};
use crate::object::{ObjectKey, ObjectKeyError};

/// Why [`read_tree`](crate::read_tree) rejected a build.
///
/// Larger fields are boxed to keep the enum small (under 100 bytes), so that
/// `Result<_, TreeError>`, and errors that wrap it, stay cheap to return.
///
/// Paths of files inside the tree are relative to the tree root (as in
/// `packages/web/resources/app.yaml`), so messages read the same on every
/// machine; the caller knows which build it read. Every message names the
/// file(s) involved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TreeError {
    /// The root itself cannot be resolved or is not a directory.
    #[error("cannot read the build at {}: {message}", root.display())]
    Root { root: PathBuf, message: String },
    /// The root resolves to a directory outside the store directory.
    #[error(
        "the build at {} resolves to {}, which is not inside the store {}",
        root.display(), resolved.display(), store_dir.display()
    )]
    RootOutsideStore {
        root: PathBuf,
        resolved: PathBuf,
        store_dir: PathBuf,
    },
    /// There is no `kix.json` at the root.
    #[error("kix.json not found at the root of the build (is this a kix build?)")]
    MissingKixJson,
    /// `kix.json` declares a format this reader does not know.
    #[error("kix.json: unknown format version {found} (this kix reads format 1)")]
    UnknownFormat {
        /// The `format` value as JSON (`2`, `"1"`), or `(missing)`.
        found: String,
    },
    /// A file is not valid JSON/YAML, or not of the expected shape.
    #[error("{}: {message}", file.display())]
    Unparsable { file: PathBuf, message: String },
    /// A file of a package's `secrets/` that is not a SOPS file kix can
    /// decrypt (checked without a key: format, metadata, age recipients).
    #[error("{}: {reason}", file.display())]
    Secret {
        file: PathBuf,
        reason: kix_sops::Reason,
    },
    /// A decrypted document of a package's encrypted file that is not a
    /// Secret kix can apply (the message never quotes a value).
    #[error("{} (document {document}): {message}", file.display())]
    SecretContent {
        file: PathBuf,
        document: usize,
        message: String,
    },
    /// A cluster, package or namespace name kix cannot use.
    #[error("{}: invalid {what} name {name:?}: {reason}", file.display())]
    InvalidName {
        file: PathBuf,
        /// `cluster`, `package` or `namespace`.
        what: &'static str,
        name: String,
        reason: &'static str,
    },
    /// `kix.json` lists a package twice.
    #[error("kix.json: package {name:?} is listed more than once")]
    DuplicatePackage { name: String },
    /// `kix.json` lists a package that has no directory.
    #[error("kix.json lists package {package:?}, but there is no directory packages/{package}/")]
    MissingPackageDir { package: String },
    /// A directory under `packages/` that `kix.json` does not list.
    #[error("packages/{package}/ is not listed in kix.json")]
    UnlistedPackageDir { package: String },
    /// A package directory without `package.json`.
    #[error("packages/{package}/package.json not found")]
    MissingPackageJson { package: String },
    /// `package.json` names a package other than its directory.
    #[error(
        "{}: the package is named {name:?}, but its directory is packages/{dir}/",
        file.display()
    )]
    PackageNameMismatch {
        file: PathBuf,
        dir: String,
        name: String,
    },
    /// A document that is not a usable Kubernetes object.
    #[error("{}: {}: {error}", file.display(), location(*document, *line, items))]
    InvalidObject {
        file: PathBuf,
        /// 1-based index of the document in the file, counting non-empty
        /// documents (a JSON file has one).
        document: usize,
        /// Line where the document, or the List item, starts.
        line: Option<u32>,
        /// Index into the items of a List (a document with `items`).
        items: Vec<usize>,
        error: Box<ObjectKeyError>,
    },
    /// Two manifests of the build have the same key.
    #[error(
        "duplicate object {key}: in {} (document {first_document}) and in {} (document {second_document})",
        first.display(), second.display()
    )]
    DuplicateObject {
        key: Box<ObjectKey>,
        /// The file read first (walk order) and the document in it.
        first: PathBuf,
        first_document: usize,
        second: PathBuf,
        second_document: usize,
    },
    /// `dependsOn` names a package that is not in the build.
    #[error(
        "packages/{package}/package.json: depends on {dependency:?}, which is not a package of this build"
    )]
    DependencyNotFound { package: String, dependency: String },
    /// Packages depend on each other in a circle. `cycle[0]` depends on
    /// `cycle[1]`, ..., the last on `cycle[0]`; starts at the smallest name.
    #[error("dependency cycle between packages: {} -> {}", cycle.join(" -> "), cycle.first().map_or("", String::as_str))]
    DependencyCycle { cycle: Vec<String> },
    /// A symlink in the tree resolves outside the store directory.
    #[error("symlink {} -> {} resolves outside the Nix store", link.display(), target.display())]
    SymlinkEscapesStore {
        link: PathBuf,
        /// The link's target as written in the link.
        target: PathBuf,
    },
    /// A symlink in the tree does not resolve.
    #[error("symlink {} -> {} does not resolve: {message}", link.display(), target.display())]
    BrokenSymlink {
        link: PathBuf,
        target: PathBuf,
        message: String,
    },
    /// A symlinked directory that is already being read: a loop, or a
    /// second link to one directory (which would read its objects twice).
    #[error(
        "symlink {} -> {} leads to a directory that is already read (a symlink loop or a second link to it)",
        link.display(), target.display()
    )]
    SymlinkLoop { link: PathBuf, target: PathBuf },
    /// A file over [`ReadOptions::max_file_bytes`](crate::ReadOptions).
    #[error("{}: {size} bytes, more than the limit of {limit} bytes per file", file.display())]
    FileTooLarge {
        file: PathBuf,
        size: u64,
        limit: u64,
    },
    /// An object whose JSON is over [`ReadOptions::max_object_bytes`](crate::ReadOptions).
    #[error(
        "{}: {}: object {key} is more than {limit} bytes as JSON",
        file.display(), location(*document, *line, items)
    )]
    ObjectTooLarge {
        file: PathBuf,
        document: usize,
        line: Option<u32>,
        items: Vec<usize>,
        key: Box<ObjectKey>,
        limit: usize,
    },
    /// More objects than [`ReadOptions::max_objects`](crate::ReadOptions);
    /// `file` is the one that crossed the limit.
    #[error("{}: the build has more than {limit} objects", file.display())]
    TooManyObjects { file: PathBuf, limit: usize },
    /// A resource file (a name kubectl reads) whose path is not UTF-8:
    /// named by its bytes, `\xe9` for a byte that is not ASCII.
    #[error(
        "{}: a resource file whose name is not UTF-8 (kubectl reads it; kix names every file it \
         reads in records and plans, so it refuses the build): rename it",
        escaped(file)
    )]
    NonUtf8Name { file: PathBuf },
    /// A file kix must read is a directory, a FIFO, a device...
    #[error("{} is not a regular file", file.display())]
    NotAFile { file: PathBuf },
    /// Reading the file system failed.
    #[error("{}: {message}", path.display())]
    Io { path: PathBuf, message: String },
    /// A `recreate` or `adopt` action names an object the package does not have.
    #[error(
        "packages/{package}/package.json: migration {from} -> {to}: {action} {object}: the package has no such object"
    )]
    UnknownMigrationObject {
        package: String,
        from: String,
        to: String,
        action: ActionKind,
        object: Box<MigrationRef>,
    },
    /// A health rule that does not compile, or two for one kind (the
    /// message names the file, the rule and the expression).
    #[error("{0}")]
    HealthRule(Box<kix_health::RuleError>),
    /// A `handoff` rule kix cannot use, or one that covers no object of the
    /// package (a misspelt kind or name).
    #[error("packages/{package}/package.json: handoff[{index}] ({rule}): {reason}")]
    InvalidHandoff {
        package: String,
        index: usize,
        rule: String,
        reason: String,
    },
    /// A migration whose `from` is not a version or version range, or whose
    /// `to` is not a version.
    #[error("packages/{package}/package.json: migration {from:?} -> {to:?}: {reason}")]
    InvalidMigrationVersion {
        package: String,
        from: String,
        to: String,
        reason: String,
    },
    /// A migration whose `from` is not lower than its `to`.
    #[error(
        "packages/{package}/package.json: migration {from:?} -> {to:?}: `from` must be a lower version than `to`"
    )]
    InvalidMigrationRange {
        package: String,
        from: String,
        to: String,
    },
    /// Two migrations of a package whose version ranges overlap.
    #[error(
        "packages/{package}/package.json: migrations {} -> {} and {} -> {} overlap",
        first.0, first.1, second.0, second.1
    )]
    OverlappingMigrations {
        package: String,
        /// `(from, to)` of the earlier migration in the file.
        first: Box<(String, String)>,
        second: Box<(String, String)>,
    },
}

/// A path as its bytes, those that are not printable ASCII escaped
/// (`caf\xe9.yaml`).
fn escaped(path: &std::path::Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    path.as_os_str().as_bytes().escape_ascii().to_string()
}

/// `document 2 (line 14)`, or `document 2, items[3] (line 20)` with the
/// line of the item.
fn location(document: usize, line: Option<u32>, items: &[usize]) -> String {
    let mut out = format!("document {document}");
    for (i, item) in items.iter().enumerate() {
        out.push_str(if i == 0 { ", " } else { "." });
        out.push_str(&format!("items[{item}]"));
    }
    if let Some(line) = line {
        out.push_str(&format!(" (line {line})"));
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn stays_small() {
        // Wrapping it in another error enum must not trip clippy's
        // result_large_err (128 bytes).
        assert!(std::mem::size_of::<super::TreeError>() <= 96);
    }
}

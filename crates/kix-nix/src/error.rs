//! Errors from calling Nix.

use std::path::PathBuf;

use kix_manifest::StorePathError;

/// Something went wrong calling Nix, or with what it returned.
#[derive(Debug, thiserror::Error)]
pub enum NixError {
    /// The `nix` or `nix-store` program is not on `PATH`.
    #[error(
        "Nix is not installed (or not on PATH): cannot run `{program}`: {source}; install Nix (on Debian: apt-get install nix-bin)"
    )]
    NixNotInstalled {
        program: String,
        #[source]
        source: std::io::Error,
    },

    /// The program exists but could not be started or talked to.
    #[error("cannot run `{command}`: {source}")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },

    /// The command ran and failed. `stderr` is everything it printed there.
    #[error("`{command}` failed ({status}):\n{stderr}")]
    CommandFailed {
        command: String,
        status: String,
        /// The exit code, when it exited (not killed by a signal).
        code: Option<i32>,
        stderr: String,
    },

    /// The command succeeded but printed something kix does not understand.
    #[error("`{command}` printed unexpected output ({reason}): {output:?}")]
    UnexpectedOutput {
        command: String,
        reason: String,
        output: String,
    },

    /// Nix answered with a path that is not a store path (or the user gave one
    /// that is not).
    #[error(transparent)]
    StorePath(#[from] StorePathError),

    /// A `--path` that does not exist.
    #[error("{path}: {source}")]
    PathNotFound {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A `--path` that exists but cannot be used as a build.
    #[error("{path}: {reason}")]
    NotABuild { path: PathBuf, reason: String },

    /// A store path that is neither valid here nor obtainable from the
    /// configured substituters.
    #[error("store path {path} is not valid and could not be realised:\n{stderr}")]
    NotRealisable { path: String, stderr: String },

    /// A GC root name (cluster or activation) that cannot be a file name.
    #[error("invalid GC root name {name:?}: {reason}")]
    InvalidRootName { name: String, reason: &'static str },

    /// The GC roots directory cannot be written by this user.
    #[error(
        "cannot write Nix GC roots in {}: {source}; kix keeps every deployed build alive with a root there, so nothing was changed. Set KIX_GCROOTS_DIR to a directory you can write under /nix/var/nix/gcroots, or have root create your per-user directory: `install -d -o $USER /nix/var/nix/gcroots/per-user/$USER` (a multi-user Nix daemon creates it when you first use Nix)",
        dir.display()
    )]
    GcRootsNotWritable {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// File-system trouble in the GC roots directory.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl NixError {
    /// True when the failure is that Nix is missing, so a caller can hint at
    /// installing it.
    pub fn is_nix_missing(&self) -> bool {
        matches!(self, NixError::NixNotInstalled { .. })
    }
}

//! kix-nix: everything kix asks of Nix.
//!
//! - [`build`] runs `nix build --no-link --json` for a [`BuildSource`] (a
//!   flake's `kixClusters.<name>`, a file and attribute, or a path) and returns
//!   the store path; Nix's stderr streams through while it is captured for the
//!   error.
//! - [`build_and_read`] also reads the manifest tree (kix-manifest) and checks
//!   the cluster name: what `kix build`, `kix plan` and `kix deploy` share.
//! - [`is_valid`], [`realise`], [`ensure_valid`], [`add_to_store`],
//!   [`resolve_path`], [`resolve_path_unchecked`]: the store.
//! - [`GcRoots`]: a GC root per Activation.
//! - [`Cache`]: publishing a build's closure to a binary cache, signed
//!   with the user's key ([`SigningKey`]), and checking its signatures.
//! - [`Fetcher`]: the operator's fetch-and-verify of a record's build from
//!   the caches it trusts, in the host's store or one of its own
//!   ([`Store`]), and the collection of that store.
//!
//! Everything is synchronous `std::process`; async callers use
//! `spawn_blocking`. Every `nix` invocation passes
//! `--extra-experimental-features 'nix-command flakes'`. A missing `nix` or
//! `nix-store` binary is [`NixError::NixNotInstalled`].
//!
//! # Where things are
//!
//! `build.rs` (nix build, sources), `store.rs` (store paths: validity,
//! realising), `gcroots.rs` (GC roots of records), `cache.rs` (binary caches), `fetch.rs` (the operator's store),
//! `command.rs` (running
//! nix), `error.rs`.

mod build;
mod cache;
mod command;
mod error;
mod fetch;
mod gcroots;
mod store;

pub use build::{
    BuildError, BuildOptions, BuildSource, build, build_and_read, build_unchecked, output_attr,
    read_build, read_build_of,
};
pub use cache::{Cache, CacheError, PushProgress, PushReport, SigningKey};
pub use error::NixError;
pub use fetch::{Collected, FetchError, Fetcher, Store, process_store, use_store};
pub use gcroots::{
    DEFAULT_GCROOTS_DIR, GCROOTS_DIR_ENV, GcRoot, GcRoots, PER_USER_GCROOTS, default_gcroots_dir,
};
pub use kix_manifest::StorePath;
pub use store::{
    Checked, Resolved, add_to_store, ensure_valid, is_valid, realise, resolve_path,
    resolve_path_unchecked, store_dir,
};

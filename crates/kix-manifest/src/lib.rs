//! kix-manifest: reads a kix build (a format-1 manifest tree, normally a Nix
//! store path) into an ordered, checked set of Kubernetes objects.
//!
//! Pure: no network, no Kubernetes client, no async. The engine crate plans
//! and applies what [`read_tree`] returns.
//!
//! * [`StorePath`]: syntactic validation of `/nix/store/<hash>-<name>`.
//! * [`read_tree`] → [`Build`] → [`Package`]s → [`Object`]s, or a
//!   [`TreeError`] naming the file(s) at fault.
//! * [`ObjectKey`], [`canonical_digest`], [`kind_rank`],
//!   [`compare_versions`]: the building blocks the engine shares.
//!
//! # Where things are
//!
//! - The tree and its files (`kix.json`, `package.json`, settings, what a
//!   new field of either means): `tree.rs`; walking a package: `walk.rs`.
//! - Reading YAML as kubectl does: `yaml.rs`, `fast_yaml`, `scalar.rs`;
//!   JSON values: `value.rs`, `node.rs`; server-set fields: `decode.rs`.
//! - An object's identity and digest: `object.rs`; kinds' ranks and scopes:
//!   `kinds.rs`; migrations: `migration.rs`; handoff rules: `handoff.rs`;
//!   a package's chart or overlay: `source.rs`;
//!   encrypted Secrets' files: `secrets.rs`.
//! - Nothing here decides whether a change may happen: that is a gate of
//!   the engine (`kix_engine::gates`).

pub mod cache;
#[doc(hidden)]
pub mod decode;
mod error;
#[doc(hidden)]
pub mod fast_yaml;
pub mod group_kind;
mod handoff;
pub mod helm;
mod kinds;
mod migration;
pub mod node;
mod object;
pub mod published;
mod range;
mod scalar;
pub mod secrets;
mod source;
mod store_path;
pub mod tree;
mod value;
mod version;
mod walk;
mod yaml;

pub use cache::{CacheSetting, CacheSettingError, CacheUrl, PublicKey};
pub use error::TreeError;
pub use group_kind::{GroupKind, GroupVersionKind};
pub use handoff::Handoff;
pub use handoff::{segments as field_segments, select as select_fields, strip as strip_fields};
pub use kinds::{is_well_known_cluster_scoped, kind_rank};
pub use migration::{ActionKind, Migration, MigrationAction, MigrationRef};
pub use object::{
    KeyMap, KeySet, Object, ObjectKey, ObjectKeyError, canonical_digest, canonical_json, group_of,
};
pub use published::DroppedFields;
pub use range::{Bound, VersionRange};
pub use source::{HelmSource, KustomizeSource, PackageSource, SourceText};
pub use store_path::{
    HASH_LEN, MAX_NAME_LEN, NIXBASE32_ALPHABET, STORE_DIR, StorePath, StorePathError,
};
pub use tree::{
    Build, BuildSummary, DeletionBudget, FORMAT, Package, ReadOptions, SecretFile, ServiceAccount,
    Settings, read_tree, settings_hint,
};
pub use version::compare_versions;

//! The format-1 manifest tree reader.
//!
//! ```text
//! <root>/
//!   kix.json                         {"format":1,"cluster":"prod","packages":["db","web"],"settings":{...}}
//!   packages/<package>/package.json  {"name","version","dependsOn":[...],"namespace"?,"migrations":[...],"handoff"?:[...],"source"?:{...}}
//!   packages/<package>/resources/**  *.json, *.yaml, *.yml
//!   packages/<package>/secrets/*     SOPS-encrypted files (age), opaque
//! ```
//!
//! * `kix.json`: `format` must be `1`. `packages` lists the package names
//!   (strings; objects `{"name": "web"}` are accepted too, other fields of
//!   such objects are ignored). `settings` holds `keep`, `maxAge`, `context`,
//!   `deletionBudget` (`{"percent": 25, "floor": 10}`);
//!   any other setting is kept in [`Settings::extra`]. `health` lists CEL
//!   health rules ([`kix_health::RuleSpec`]); a `package.json` may too. Every
//!   rule is compiled while the tree is read ([`Build::health`]).
//! * `source` in `package.json` (optional) says which Helm chart or
//!   Kustomize overlay the package came from ([`PackageSource`],
//!   [`Build::sources`]); trees without it read as before.
//! * Every listed package has a directory `packages/<name>/` with a
//!   `package.json` whose `name` is the directory's name, and every directory
//!   under `packages/` is listed. Other files in `packages/` are ignored.
//! * Resources are the files below `packages/<name>/resources/` (at any depth)
//!   whose names end in `.json`, `.yaml` or `.yml` (lower case), as
//!   `kubectl apply -f DIR` chooses them: hidden files (`.app.yaml`) and a
//!   file named just `.yaml` too. Any other file (`README.md`,
//!   `app.yaml.bak`, `app.YAML`) is ignored. A resource file whose path is
//!   not UTF-8 (kubectl reads it) is refused, named by its bytes: kix names
//!   every file it reads in records and plans.
//! * Every resource file is read as `kubectl apply -f` reads it (JSON
//!   streams, `---` documents, YAML 1.1 scalars, Lists of any kind), or
//!   refused where kubectl would read other values than written (non-string
//!   keys such as `on`, duplicate keys, tags, content after `...`): see
//!   [`crate::decode`] and docs/concepts.md for the exact rule.
//! * An object without `metadata.namespace` gets the package's `namespace`,
//!   in its key and in its manifest, unless its kind is a well-known
//!   cluster-scoped one ([`is_well_known_cluster_scoped`]). The reader cannot
//!   know the scope of custom resources: the engine corrects those with API
//!   discovery.
//! * The files below `packages/<name>/secrets/` are SOPS-encrypted (the
//!   format `sops` writes; YAML, or JSON when the name ends in `.json`).
//!   They are never parsed as resources: only their `sops` metadata is
//!   checked (readable, an age recipient, a MAC), after every resource file.
//!   The engine decrypts them where it applies them ([`SecretFile`]).
//!   `allowPlaintextSecrets` in `package.json` lets a package carry plain
//!   Secrets among its resources ([`Build::plaintext_secrets`]).
//! * Symlinks anywhere in the tree must resolve inside
//!   [`ReadOptions::store_dir`]; those are followed.
//!
//! The whole tree is checked before [`read_tree`] returns. When several
//! things are wrong, the first one found is reported, always the same one for
//! the same tree: the walk is in file-name order, and the checks run in this
//! order: root, symlinks, `kix.json`, package directories, each package in
//! name order (`package.json`, then its resource files in walk order, which
//! also decides which file of a duplicate pair is "first"), dependencies,
//! migrations. (Resource files are parsed on several threads, but these
//! checks, and so the error reported, stay in this order.)

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{self, Read};
use std::num::NonZeroUsize;
use std::path::{Component, Path, PathBuf};
use std::sync::mpsc::{Receiver, sync_channel};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::decode;
use crate::error::TreeError;
use crate::handoff::Handoff;
use crate::kinds::{is_well_known_cluster_scoped, kind_rank};
use crate::migration::{ActionKind, Migration};
use crate::object::{KeyMap, Object, ObjectKey, ObjectKeyError, group_of};
use crate::published::DroppedFields;
use crate::range::VersionRange;
use crate::source::PackageSource;
use crate::store_path::STORE_DIR;
use crate::value::json_text_at_most;
use crate::walk::{EntryKind, walk};

/// The only format this reader knows.
pub const FORMAT: u32 = 1;

/// Largest `kix.json` or `package.json` read (or [`ReadOptions::max_file_bytes`]
/// when lower): they hold names and rules, and JSON read into values takes
/// many times its size in memory.
pub const MAX_METADATA_FILE_BYTES: u64 = 1024 * 1024;

/// Limits and the store location for [`read_tree`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadOptions {
    /// The tree root and every symlink in it must resolve inside this
    /// directory. Default `/nix/store`.
    pub store_dir: PathBuf,
    /// Largest file read (kix.json, package.json, resources, encrypted
    /// files). Default 16 MiB; `kix.json` and `package.json` at most
    /// [`MAX_METADATA_FILE_BYTES`]. Within a file, YAML aliases may add at
    /// most a share of the file's own nodes and its length in bytes (see
    /// `yaml.rs`), nesting is at most 128 levels deep, and a file holds at
    /// most 500,000 nodes (values, keys, items, all its documents
    /// together; counted before they are built), so the memory a file takes
    /// is bounded: a file of tiny values at this limit is refused, naming
    /// its line, well under 100 MB.
    pub max_file_bytes: u64,
    /// Largest object, measured as compact JSON. Default 1 MiB (etcd's
    /// default request limit is 1.5 MiB).
    pub max_object_bytes: usize,
    /// Most objects in one build. Default 100,000.
    pub max_objects: usize,
    /// Decrypt the packages' SOPS-encrypted files with these (only the keys
    /// of the Kix cluster the build declares); without them the files are
    /// only checked. Default: the process's
    /// ([`crate::secrets::use_age_identities`]); a reader acting for a
    /// record gives its cluster's ([`crate::secrets::age_identities_for`]).
    pub age_identities: Option<crate::secrets::AgeIdentities>,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            store_dir: PathBuf::from(STORE_DIR),
            max_file_bytes: 16 * 1024 * 1024,
            max_object_bytes: 1024 * 1024,
            max_objects: 100_000,
            age_identities: crate::secrets::process_age_identities(),
        }
    }
}

/// A build read from a manifest tree.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Build {
    /// The tree root, canonicalized (a `./result` symlink becomes the store
    /// path it points to).
    pub root: PathBuf,
    pub cluster: String,
    pub format: u32,
    pub settings: Settings,
    /// The commit the build was made from (`revision` in `kix.json`, the
    /// flake's `self.rev`): 7 to 64 lowercase hex digits. Records carry it
    /// (`spec.source.revision`) and commit statuses are set on it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// The CEL health rules of `kix.json`, then of each package (in
    /// dependency order), each named by its file and place: compiled and
    /// checked by [`read_tree`]; [`Build::health_rules`] compiles them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub health: Vec<kix_health::UserRule>,
    /// What was dropped from the objects because only the API server sets
    /// it, one entry per file, in file order ([`crate::published`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<DroppedFields>,
    /// In dependency order: every package after the packages it depends on,
    /// ties broken by name.
    pub packages: Vec<Package>,
    /// The SOPS-encrypted files of the packages, in package order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<SecretFile>,
    /// The packages that allow plain Secrets among their resources.
    #[serde(skip_serializing_if = "BTreeSet::is_empty")]
    pub plaintext_secrets_allowed: BTreeSet<String>,
    /// Where packages came from (`source` in `package.json`), by package
    /// name: only those that say.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub sources: BTreeMap<String, PackageSource>,
    /// Whether [`Build::secrets`] were decrypted into their packages'
    /// objects (the reader had age identities).
    #[serde(skip)]
    pub secrets_decrypted: bool,
    /// Per decrypted file, the key for digests of its Secrets
    /// ([`kix_sops::DigestKey`]): a digest a reader cannot test a guess with.
    #[serde(skip)]
    pub secret_digest_keys: BTreeMap<PathBuf, kix_sops::DigestKey>,
}

/// A SOPS-encrypted file of a package (`packages/<p>/secrets/`), checked
/// to be readable without a key; its Secrets exist only once decrypted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretFile {
    pub package: String,
    /// Relative to the build's root.
    pub file: PathBuf,
    /// The age recipients (public keys) its data key is encrypted to.
    pub recipients: Vec<String>,
}

impl SecretFile {
    /// How the file is written (`.json`: JSON, else YAML).
    pub fn format(&self) -> kix_sops::Format {
        kix_sops::Format::of_path(&self.file)
    }
}

/// The cluster's settings from `kix.json`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Settings {
    /// How many Superseded activations to keep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep: Option<u32>,
    /// How long to keep Superseded activations (`"30d"`, `"12h"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age: Option<String>,
    /// The default kubeconfig context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// How many owned objects one deploy may delete without consent.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "DeletionBudget::deserialize_setting"
    )]
    pub deletion_budget: Option<DeletionBudget>,
    /// The ServiceAccount every request made for this Kix cluster acts as
    /// (impersonated by the CLI and the operator); absent: the deployer's
    /// own credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<ServiceAccount>,
    /// The binary cache the build is published to and the keys it is
    /// trusted under (`kix push`, `kix deploy --operator`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<crate::CacheSetting>,
    /// Every other setting, as written.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, Value>,
}

/// A ServiceAccount by namespace and name (`settings.serviceAccount`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceAccount {
    pub namespace: String,
    pub name: String,
}

/// The deletion budget setting: a deploy (rollback, operator prune, gc)
/// deleting more than `percent` % of the Kix cluster's owned objects *and*
/// more than `floor` objects needs explicit consent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct DeletionBudget {
    /// Share of the owned objects (0 to 100) deleted without consent.
    pub percent: u32,
    /// Deletions always allowed without consent, whatever the share.
    pub floor: u32,
}

impl DeletionBudget {
    /// `settings.deletionBudget`, checked field by field so the error names
    /// the setting at fault.
    fn deserialize_setting<'de, D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<DeletionBudget>, D::Error> {
        use serde::de::Error;
        let value = Value::deserialize(deserializer)?;
        let Value::Object(map) = value else {
            return Err(D::Error::custom(format!(
                "settings.deletionBudget must be an object {{\"percent\": 25, \"floor\": 10}}, got {value}"
            )));
        };
        let mut budget = DeletionBudget::default();
        for (key, v) in &map {
            let (field, max) = match key.as_str() {
                "percent" => (&mut budget.percent, 100),
                "floor" => (&mut budget.floor, u64::from(u32::MAX)),
                other => {
                    return Err(D::Error::custom(format!(
                        "settings.deletionBudget: unknown field {other:?} (known: percent, floor)"
                    )));
                }
            };
            *field = v
                .as_u64()
                .filter(|n| *n <= max)
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| {
                    D::Error::custom(format!(
                        "settings.deletionBudget.{key} must be an integer from 0 to {max}, got {v}"
                    ))
                })?;
        }
        Ok(Some(budget))
    }
}

impl Default for DeletionBudget {
    /// 25 % of the owned objects, at least 10.
    fn default() -> Self {
        DeletionBudget {
            percent: 25,
            floor: 10,
        }
    }
}

/// One package of a build.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Package {
    pub name: String,
    pub version: String,
    pub depends_on: Vec<String>,
    pub namespace: Option<String>,
    pub migrations: Vec<Migration>,
    /// Fields kix leaves to other managers ([`Handoff`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub handoff: Vec<Handoff>,
    /// Sorted by [`kind_rank`], then [`ObjectKey`].
    pub objects: Vec<Object>,
    /// Helm test hooks (`helm.sh/hook: test`): never deployed; `kix test`
    /// runs them ([`crate::helm`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tests: Vec<Object>,
}

/// Object counts of a build.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BuildSummary {
    /// Keyed by [`ObjectKey::group_kind`] (`Deployment.apps`, `ConfigMap`).
    pub by_kind: BTreeMap<String, usize>,
    /// Keyed by package name.
    pub by_package: BTreeMap<String, usize>,
}

impl Build {
    /// All objects: packages in dependency order, each package's objects in
    /// apply order.
    pub fn objects(&self) -> impl Iterator<Item = &Object> {
        self.packages.iter().flat_map(|p| p.objects.iter())
    }

    pub fn object_count(&self) -> usize {
        self.packages.iter().map(|p| p.objects.len()).sum()
    }

    pub fn package(&self, name: &str) -> Option<&Package> {
        self.packages.iter().find(|p| p.name == name)
    }

    /// The build's health rules, compiled (before the built-in library).
    pub fn health_rules(&self) -> Result<kix_health::Rules, kix_health::RuleError> {
        kix_health::Rules::with_user(self.health.iter().cloned())
    }

    /// The plain Secrets with values (`data`, `stringData`) of packages
    /// that do not allow them (`allowPlaintextSecrets`): their values lie
    /// readable in the store. A Secret with no values (a ServiceAccount
    /// token Secret, filled in by the cluster) is not one.
    pub fn plaintext_secrets(&self) -> Vec<&Object> {
        let has_values = |o: &Object| {
            let manifest = o.manifest();
            ["data", "stringData"].iter().any(|field| {
                manifest
                    .get(field)
                    .and_then(Value::as_object)
                    .is_some_and(|m| !m.is_empty())
            })
        };
        self.packages
            .iter()
            .filter(|p| !self.plaintext_secrets_allowed.contains(&p.name))
            .flat_map(|p| &p.objects)
            .filter(|o| o.key.group_kind() == crate::group_kind::SECRET)
            .filter(|o| !crate::secrets::is_decrypted(o) && has_values(o))
            .collect()
    }

    pub fn summary(&self) -> BuildSummary {
        let mut summary = BuildSummary::default();
        for package in &self.packages {
            summary
                .by_package
                .insert(package.name.clone(), package.objects.len());
            for object in &package.objects {
                *summary
                    .by_kind
                    .entry(object.key.group_kind().to_string())
                    .or_default() += 1;
            }
        }
        summary
    }
}

// ---- file formats ----------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KixJson {
    #[allow(dead_code)] // checked before this struct is parsed
    format: Value,
    cluster: String,
    #[serde(default)]
    packages: Vec<PackageEntry>,
    #[serde(default)]
    settings: Settings,
    #[serde(default)]
    health: Vec<kix_health::RuleSpec>,
    #[serde(default)]
    revision: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum PackageEntry {
    Name(String),
    Object { name: String },
}

impl PackageEntry {
    fn into_name(self) -> String {
        match self {
            PackageEntry::Name(name) | PackageEntry::Object { name } => name,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PackageJson {
    name: String,
    version: String,
    #[serde(default)]
    depends_on: Vec<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    migrations: Vec<Migration>,
    #[serde(default)]
    handoff: Vec<Handoff>,
    #[serde(default)]
    health: Vec<kix_health::RuleSpec>,
    #[serde(default)]
    allow_plaintext_secrets: bool,
    #[serde(default)]
    source: Option<PackageSource>,
}

// ---- the reader ------------------------------------------------------------

/// The `settings` of the tree's `kix.json`, read on their own and not
/// checked: a hint for what can start before the tree is read (the kube
/// context). None when they cannot be read; [`read_tree`] says why.
pub fn settings_hint(root: &Path) -> Option<Settings> {
    #[derive(Deserialize)]
    struct Head {
        #[serde(default)]
        settings: Settings,
    }
    let mut text = Vec::new();
    File::open(root.join("kix.json"))
        .ok()?
        .take(MAX_METADATA_FILE_BYTES)
        .read_to_end(&mut text)
        .ok()?;
    serde_json::from_slice::<Head>(&text)
        .ok()
        .map(|head| head.settings)
}

/// Reads and checks the manifest tree at `root`. See the [module
/// documentation](self) for the layout and the checks.
pub fn read_tree(root: &Path, options: &ReadOptions) -> Result<Build, TreeError> {
    let (canonical_root, store) = checked_root(root, options)?;
    let entries = walk(&canonical_root, &store)?;
    let reader = Reader {
        root: &canonical_root,
        options,
    };

    let kix = reader.read_kix_json_entry(&entries)?;
    let dirs = package_dirs(&entries, &kix.packages)?;

    // Packages, in name order: each package's package.json, then its
    // resource files. The package.json files are read first, because they
    // give the namespace that the objects of their resource files default
    // to; reading stops at the first bad one, since no package after it is
    // reached. Its error is returned in its turn, below.
    let (mut metas, meta_error) = reader.read_package_jsons(&dirs);
    // The resource files to parse, in the order they are checked.
    let jobs: Vec<Job> = metas
        .iter()
        .zip(dirs.values())
        .enumerate()
        .flat_map(|(index, (meta, files))| {
            files.resources.iter().map(move |file| Job {
                file,
                // Only to share the parsing out; a file that cannot be
                // read fails when it is parsed.
                bytes: std::fs::metadata(reader.root.join(file)).map_or(0, |m| m.len()),
                package_index: index,
                package: &meta.name,
                namespace: meta.namespace.as_deref(),
            })
        })
        .collect();
    // The files are parsed in parallel; the checks across files (object
    // count, duplicates) run here, in file order, so the first error is the
    // same as when reading one file after the other.
    let mut objects = ObjectSet {
        seen: KeyMap::default(),
        count: 0,
    };
    let mut package_objects: Vec<Vec<Object>> = metas.iter().map(|_| Vec::new()).collect();
    let threads = std::thread::available_parallelism()
        .map_or(1, NonZeroUsize::get)
        .min(MAX_THREADS);
    let mut dropped: BTreeMap<PathBuf, BTreeSet<&'static str>> = BTreeMap::new();
    reader.parse_in_order(&jobs, threads, |job, file| {
        if !file.dropped.is_empty() {
            dropped.insert(job.file.to_path_buf(), file.dropped);
        }
        for (document, object) in file.objects {
            objects.add(&object, document, options.max_objects)?;
            package_objects[job.package_index].push(object);
        }
        file.error.map_or(Ok(()), Err)
    })?;
    if let Some(error) = meta_error {
        return Err(error);
    }
    let mut health = user_rules("kix.json", &kix.health);
    let mut package_health: BTreeMap<String, Vec<kix_health::UserRule>> = metas
        .iter()
        .map(|m| {
            let file = format!("packages/{}/package.json", m.name);
            (m.name.clone(), user_rules(&file, &m.health))
        })
        .collect();
    let ids = (options.age_identities.as_ref()).and_then(|i| i.of_cluster(&kix.cluster));
    let (secrets, secret_digest_keys) = reader.read_secrets(
        &metas,
        &dirs,
        ids.as_ref(),
        &mut objects,
        &mut package_objects,
    )?;
    let secrets_decrypted = ids.is_some();
    let (plaintext_secrets_allowed, sources) = package_notes(&mut metas);
    let mut packages = into_packages(metas, package_objects)?;

    let order = dependency_order(&packages)?;
    for package in packages.values_mut() {
        check_migrations(package)?;
        check_handoff(package)?;
    }
    for name in &order {
        health.extend(package_health.remove(name).unwrap_or_default());
    }
    kix_health::Rules::with_user(health.iter().cloned())
        .map_err(|e| TreeError::HealthRule(Box::new(e)))?;
    let packages = order
        .iter()
        .filter_map(|name| packages.remove(name))
        .collect();

    let mut packages: Vec<Package> = packages;
    crate::published::drop_custom_status(&mut packages, &mut dropped);
    let dropped = dropped
        .into_iter()
        .map(|(file, fields)| DroppedFields { file, fields })
        .collect();

    Ok(Build {
        root: canonical_root,
        cluster: kix.cluster,
        format: FORMAT,
        settings: kix.settings,
        revision: kix.revision,
        health,
        dropped,
        packages,
        secrets,
        plaintext_secrets_allowed,
        sources,
        secrets_decrypted,
        secret_digest_keys,
    })
}

/// The tree's root, resolved, and the store it must be inside (a store
/// directory that does not exist contains nothing: every root is then
/// outside it).
fn checked_root(root: &Path, options: &ReadOptions) -> Result<(PathBuf, PathBuf), TreeError> {
    let store =
        std::fs::canonicalize(&options.store_dir).unwrap_or_else(|_| options.store_dir.clone());
    let canonical_root = std::fs::canonicalize(root).map_err(|e| TreeError::Root {
        root: root.to_path_buf(),
        message: e.to_string(),
    })?;
    if !canonical_root.is_dir() {
        return Err(TreeError::Root {
            root: root.to_path_buf(),
            message: "not a directory".into(),
        });
    }
    if !canonical_root.starts_with(&store) || canonical_root == store {
        return Err(TreeError::RootOutsideStore {
            root: root.to_path_buf(),
            resolved: canonical_root,
            store_dir: options.store_dir.clone(),
        });
    }
    Ok((canonical_root, store))
}

/// The walk's entries sorted into package directories; each listed
/// package must have one, and each one must be listed.
fn package_dirs(
    entries: &[crate::walk::Entry],
    packages: &[String],
) -> Result<BTreeMap<String, PackageFiles>, TreeError> {
    let listed: BTreeSet<&str> = packages.iter().map(String::as_str).collect();
    let mut dirs: BTreeMap<String, PackageFiles> = BTreeMap::new();
    for entry in entries {
        let mut parts = entry.rel.components();
        if parts.next() != Some(Component::Normal("packages".as_ref())) {
            continue;
        }
        let Some(Component::Normal(name)) = parts.next() else {
            continue;
        };
        let name = name.to_string_lossy().into_owned();
        let rest: PathBuf = parts.collect();
        if rest.as_os_str().is_empty() {
            if entry.kind == EntryKind::Dir {
                dirs.entry(name).or_default();
            }
            continue;
        }
        let Some(files) = dirs.get_mut(&name) else {
            continue;
        };
        if rest == Path::new("package.json") {
            files.package_json = Some(entry.kind);
        } else if rest.starts_with("secrets") && rest != Path::new("secrets") {
            match entry.kind {
                EntryKind::File => files.secrets.push(entry.rel.clone()),
                EntryKind::Dir => {}
                EntryKind::Other => {
                    return Err(TreeError::NotAFile {
                        file: entry.rel.clone(),
                    });
                }
            }
        } else if rest.starts_with("resources") && is_resource_file(&rest) {
            if entry.kind != EntryKind::File {
                // A directory named `x.yaml` is a directory, not a resource.
                if entry.kind == EntryKind::Other {
                    return Err(TreeError::NotAFile {
                        file: entry.rel.clone(),
                    });
                }
                continue;
            }
            if entry.rel.to_str().is_none() {
                return Err(TreeError::NonUtf8Name {
                    file: entry.rel.clone(),
                });
            }
            files.resources.push(entry.rel.clone());
        }
    }
    for name in packages {
        if !dirs.contains_key(name) {
            return Err(TreeError::MissingPackageDir {
                package: name.clone(),
            });
        }
    }
    if let Some(name) = dirs.keys().find(|d| !listed.contains(d.as_str())) {
        return Err(TreeError::UnlistedPackageDir {
            package: name.clone(),
        });
    }
    Ok(dirs)
}

/// The packages by name, each with its objects in apply order, its Helm
/// test hooks set apart.
/// From the packages' package.json: those that allow plain Secrets, and
/// where each came from (taken out: nothing else reads it).
fn package_notes(metas: &mut [PackageJson]) -> (BTreeSet<String>, BTreeMap<String, PackageSource>) {
    let plaintext_secrets_allowed = metas
        .iter()
        .filter(|m| m.allow_plaintext_secrets)
        .map(|m| m.name.clone())
        .collect();
    let sources = metas
        .iter_mut()
        .filter_map(|m| Some((m.name.clone(), m.source.take()?)))
        .collect();
    (plaintext_secrets_allowed, sources)
}

fn into_packages(
    metas: Vec<PackageJson>,
    package_objects: Vec<Vec<Object>>,
) -> Result<BTreeMap<String, Package>, TreeError> {
    let mut packages = BTreeMap::new();
    for (meta, objects) in metas.into_iter().zip(package_objects) {
        let (tests, objects) = split_tests(objects)?;
        let package = Package {
            name: meta.name,
            version: meta.version,
            depends_on: meta.depends_on,
            namespace: meta.namespace,
            migrations: meta.migrations,
            handoff: meta.handoff,
            objects: apply_order(objects),
            tests,
        };
        packages.insert(package.name.clone(), package);
    }
    Ok(packages)
}

/// A package's objects split into Helm test hooks and the rest; a Helm
/// annotation Helm would refuse is an error naming the object's file.
fn split_tests(objects: Vec<Object>) -> Result<(Vec<Object>, Vec<Object>), TreeError> {
    let mut tests = Vec::new();
    let mut rest = Vec::with_capacity(objects.len());
    for object in objects {
        match crate::helm::hook_of(&object) {
            Ok(Some(hook)) if hook.is_test() => tests.push(object),
            Ok(_) => rest.push(object),
            Err(error) => {
                return Err(TreeError::Unparsable {
                    message: format!("document {}: {}: {error}", object.document, object.key),
                    file: object.source,
                });
            }
        }
    }
    Ok((tests, rest))
}

/// The files of one package directory.
#[derive(Default)]
struct PackageFiles {
    package_json: Option<EntryKind>,
    resources: Vec<PathBuf>,
    secrets: Vec<PathBuf>,
}

/// What `kix.json` says, checked.
struct KixInfo {
    cluster: String,
    packages: Vec<String>,
    settings: Settings,
    health: Vec<kix_health::RuleSpec>,
    revision: Option<String>,
}

/// A commit: 7 to 64 lowercase hex digits (a short or full SHA-1 or
/// SHA-256 object name).
fn is_revision(text: &str) -> bool {
    (7..=64).contains(&text.len()) && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Health rules as declared in `file`, each named `<file> health[<i>]`.
fn user_rules(file: &str, specs: &[kix_health::RuleSpec]) -> Vec<kix_health::UserRule> {
    specs
        .iter()
        .enumerate()
        .map(|(i, spec)| kix_health::UserRule {
            source: format!("{file} health[{i}]"),
            spec: spec.clone(),
        })
        .collect()
}

/// Objects read so far, across packages.
struct ObjectSet {
    /// Where each key was first defined: file and document number.
    seen: KeyMap<ObjectKey, (PathBuf, usize)>,
    count: usize,
}

impl ObjectSet {
    /// Counts `object` (from document `document` of its source file) against
    /// the limit, and checks that no object before it has its key.
    fn add(
        &mut self,
        object: &Object,
        document: usize,
        max_objects: usize,
    ) -> Result<(), TreeError> {
        let file = &object.source;
        self.count += 1;
        if self.count > max_objects {
            return Err(TreeError::TooManyObjects {
                file: file.clone(),
                limit: max_objects,
            });
        }
        if let Some((first, first_document)) = self.seen.get(&object.key) {
            return Err(TreeError::DuplicateObject {
                key: Box::new(object.key.clone()),
                first: first.clone(),
                first_document: *first_document,
                second: file.clone(),
                second_document: document,
            });
        }
        self.seen
            .insert(object.key.clone(), (file.clone(), document));
        Ok(())
    }
}

/// A resource file to parse, with what its objects need from its package.
struct Job<'a> {
    file: &'a Path,
    /// The file's size: parsing time goes with it.
    bytes: u64,
    /// The package's place in name order.
    package_index: usize,
    package: &'a str,
    namespace: Option<&'a str>,
}

/// What one resource file gave.
struct FileObjects {
    /// Its objects, in file order, each with its document number.
    objects: Vec<(usize, Object)>,
    /// The error that stopped the file, after those objects.
    error: Option<TreeError>,
    /// What only the API server sets, dropped from its objects.
    dropped: BTreeSet<&'static str>,
}

/// Most parsing threads: each adds an allocator arena, that is memory.
const MAX_THREADS: usize = 8;

/// How many parsed files each helper thread may hold before the checks
/// have taken them: this bounds the work done past a file with an error
/// or past the object limit, and the memory held.
const LOOKAHEAD_FILES: usize = 16;

/// The thread (below `threads`) that parses each job: the one with the
/// fewest bytes so far, the lowest on a tie.
fn split_by_size(jobs: &[Job], threads: usize) -> Vec<usize> {
    let mut load = vec![0u64; threads.max(1)];
    jobs.iter()
        .map(|job| {
            let (t, _) = load
                .iter()
                .enumerate()
                .min_by_key(|&(t, &bytes)| (bytes, t))
                .expect("at least one thread");
            load[t] += job.bytes.max(1);
            t
        })
        .collect()
}

struct Reader<'a> {
    root: &'a Path,
    options: &'a ReadOptions,
}

impl Reader<'_> {
    /// Reads a whole file, refusing files over the size limit.
    fn read_file(&self, rel: &Path) -> Result<Vec<u8>, TreeError> {
        self.read_file_at_most(rel, self.options.max_file_bytes)
    }

    /// Reads `kix.json` or a `package.json`, refusing files over their
    /// limit.
    fn read_metadata_file(&self, rel: &Path) -> Result<Vec<u8>, TreeError> {
        let limit = MAX_METADATA_FILE_BYTES.min(self.options.max_file_bytes);
        self.read_file_at_most(rel, limit)
    }

    /// Reads a whole file, refusing files over `limit` bytes.
    fn read_file_at_most(&self, rel: &Path, limit: u64) -> Result<Vec<u8>, TreeError> {
        let io_err = |e: io::Error| TreeError::Io {
            path: rel.to_path_buf(),
            message: e.to_string(),
        };
        let file = File::open(self.root.join(rel)).map_err(io_err)?;
        let size = file.metadata().map_err(io_err)?.len();
        if size > limit {
            return Err(TreeError::FileTooLarge {
                file: rel.to_path_buf(),
                size,
                limit,
            });
        }
        // `take` guards against a file that grows while being read.
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        file.take(limit.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(io_err)?;
        if bytes.len() as u64 > limit {
            return Err(TreeError::FileTooLarge {
                file: rel.to_path_buf(),
                size: bytes.len() as u64,
                limit,
            });
        }
        Ok(bytes)
    }

    /// The packages' SOPS files: checked, and decrypted into their
    /// package's objects when the reader has age identities for the build's
    /// Kix cluster (`identities`: bound to it, or shared).
    #[allow(clippy::type_complexity)]
    fn read_secrets(
        &self,
        metas: &[PackageJson],
        dirs: &BTreeMap<String, PackageFiles>,
        identities: Option<&kix_sops::Identities>,
        objects: &mut ObjectSet,
        package_objects: &mut [Vec<Object>],
    ) -> Result<(Vec<SecretFile>, BTreeMap<PathBuf, kix_sops::DigestKey>), TreeError> {
        let mut secrets = Vec::new();
        let mut secret_digest_keys = BTreeMap::new();
        for (index, (meta, files)) in metas.iter().zip(dirs.values()).enumerate() {
            for file in &files.secrets {
                let (secret, bytes) = self.read_secret(&meta.name, file)?;
                if let Some(ids) = identities {
                    let (decrypted, key) = crate::secrets::decrypt(
                        &secret,
                        &bytes,
                        meta.namespace.as_deref(),
                        ids,
                        self.options.max_object_bytes,
                    )?;
                    for (document, object) in decrypted {
                        objects.add(&object, document, self.options.max_objects)?;
                        package_objects[index].push(object);
                    }
                    secret_digest_keys.insert(secret.file.clone(), key);
                }
                secrets.push(secret);
            }
        }
        Ok((secrets, secret_digest_keys))
    }

    /// Each package's package.json, in name order, up to the first that
    /// cannot be read (its error is second).
    fn read_package_jsons(
        &self,
        dirs: &BTreeMap<String, PackageFiles>,
    ) -> (Vec<PackageJson>, Option<TreeError>) {
        let mut metas = Vec::with_capacity(dirs.len());
        for (name, files) in dirs {
            match self.read_package_json(name, files) {
                Ok(meta) => metas.push(meta),
                Err(e) => return (metas, Some(e)),
            }
        }
        (metas, None)
    }

    /// kix.json: present, a file, its cluster and package names valid and
    /// no package listed twice.
    fn read_kix_json_entry(&self, entries: &[crate::walk::Entry]) -> Result<KixInfo, TreeError> {
        let kix_json_path = Path::new("kix.json");
        match entries.iter().find(|e| e.rel == kix_json_path) {
            None => return Err(TreeError::MissingKixJson),
            Some(e) if e.kind != EntryKind::File => {
                return Err(TreeError::NotAFile {
                    file: kix_json_path.into(),
                });
            }
            Some(_) => {}
        }
        let kix = self.read_kix_json(kix_json_path)?;
        check_name(&kix.cluster, "cluster", kix_json_path)?;
        if let Some(revision) = kix.revision.as_deref().filter(|r| !is_revision(r)) {
            return Err(TreeError::Unparsable {
                file: kix_json_path.into(),
                message: format!(
                    "revision {revision:?} is not a commit (7 to 64 lowercase hex digits, as the flake's self.rev)"
                ),
            });
        }
        let mut listed = BTreeSet::new();
        for name in &kix.packages {
            check_name(name, "package", kix_json_path)?;
            if !listed.insert(name.as_str()) {
                return Err(TreeError::DuplicatePackage { name: name.clone() });
            }
        }
        Ok(kix)
    }

    fn read_kix_json(&self, rel: &Path) -> Result<KixInfo, TreeError> {
        let bytes = self.read_metadata_file(rel)?;
        let unparsable = |e: serde_json::Error| TreeError::Unparsable {
            file: rel.to_path_buf(),
            message: e.to_string(),
        };
        // The format first: a future format may change everything else.
        let value: Value = serde_json::from_slice(&bytes).map_err(unparsable)?;
        let Value::Object(map) = &value else {
            return Err(TreeError::Unparsable {
                file: rel.to_path_buf(),
                message: format!(
                    "expected a JSON object, found {}",
                    crate::object::json_type(&value)
                ),
            });
        };
        match map.get("format") {
            Some(format) if format.as_u64() == Some(u64::from(FORMAT)) => {}
            Some(other) => {
                return Err(TreeError::UnknownFormat {
                    found: other.to_string(),
                });
            }
            None => {
                return Err(TreeError::UnknownFormat {
                    found: "(missing)".into(),
                });
            }
        }
        // Parse again as the struct, from the bytes, so that errors carry a
        // line and column.
        let kix: KixJson = serde_json::from_slice(&bytes).map_err(unparsable)?;
        Ok(KixInfo {
            cluster: kix.cluster,
            packages: kix
                .packages
                .into_iter()
                .map(PackageEntry::into_name)
                .collect(),
            settings: kix.settings,
            health: kix.health,
            revision: kix.revision,
        })
    }

    /// Reads a SOPS file of `package` and checks its metadata, with no key.
    fn read_secret(&self, package: &str, rel: &Path) -> Result<(SecretFile, Vec<u8>), TreeError> {
        let bytes = self.read_file(rel)?;
        let name = rel.display().to_string();
        let inspected =
            kix_sops::inspect(&name, &bytes, kix_sops::Format::of_path(rel)).map_err(|e| {
                TreeError::Secret {
                    file: rel.to_path_buf(),
                    reason: e.reason,
                }
            })?;
        let secret = SecretFile {
            package: package.to_owned(),
            file: rel.to_path_buf(),
            recipients: inspected.recipients,
        };
        Ok((secret, bytes))
    }

    /// Reads and checks `packages/<dir>/package.json`.
    fn read_package_json(&self, dir: &str, files: &PackageFiles) -> Result<PackageJson, TreeError> {
        let json_path = PathBuf::from(format!("packages/{dir}/package.json"));
        match files.package_json {
            None => {
                return Err(TreeError::MissingPackageJson {
                    package: dir.to_owned(),
                });
            }
            Some(EntryKind::File) => {}
            Some(_) => return Err(TreeError::NotAFile { file: json_path }),
        }
        let bytes = self.read_metadata_file(&json_path)?;
        let meta: PackageJson =
            serde_json::from_slice(&bytes).map_err(|e| TreeError::Unparsable {
                file: json_path.clone(),
                message: e.to_string(),
            })?;
        if meta.name != dir {
            return Err(TreeError::PackageNameMismatch {
                file: json_path,
                dir: dir.to_owned(),
                name: meta.name,
            });
        }
        if let Some(ns) = &meta.namespace {
            check_name(ns, "namespace", &json_path)?;
        }
        Ok(meta)
    }

    /// Parses the resource files of `jobs` on `threads` threads and gives
    /// each one's objects, in job order, to `check`; stops at the first error
    /// `check` returns.
    fn parse_in_order(
        &self,
        jobs: &[Job],
        threads: usize,
        mut check: impl FnMut(&Job, FileObjects) -> Result<(), TreeError>,
    ) -> Result<(), TreeError> {
        let threads = threads.clamp(1, jobs.len().max(1));
        // Each job goes to the thread with the fewest bytes so far. With
        // more than one core each part has a thread of its own and this one
        // only runs the checks (a tenth of the work: parsing a part here as
        // well made it the last to finish); with one, it parses all. Split
        // by size, as a tree often pairs a small file with a large one in
        // every package (splitting by place gave one thread every large
        // file). A fixed
        // split, not work stealing: each thread then allocates the same
        // objects every time a tree is read, so the allocator's per-thread
        // arenas reuse what the previous read freed (with work stealing, the
        // benchmark's peak RSS over its five reads varied from 93 to 99 MB,
        // against a steady 92 MB with this split). The helpers send their
        // results through bounded channels, taken here in job order: they
        // stay at most LOOKAHEAD_FILES ahead of the checks, and an error
        // returned drops the channels, which stops them.
        let owners = split_by_size(jobs, threads);
        std::thread::scope(|scope| {
            let parts = if threads > 1 { threads } else { 0 };
            let helpers: Vec<Receiver<FileObjects>> = (0..parts)
                .map(|t| {
                    let (results, receiver) = sync_channel(LOOKAHEAD_FILES);
                    let owners = &owners;
                    scope.spawn(move || {
                        let mine = jobs.iter().zip(owners).filter(|&(_, &o)| o == t);
                        for (job, _) in mine {
                            if results.send(self.read_resource_file(job)).is_err() {
                                break;
                            }
                        }
                    });
                    receiver
                })
                .collect();
            for (i, job) in jobs.iter().enumerate() {
                let file = match helpers.get(owners[i]) {
                    None => self.read_resource_file(job),
                    Some(helper) => helper
                        .recv()
                        .expect("a parsing thread stopped early: it panicked"),
                };
                check(job, file)?;
            }
            Ok(())
        })
    }

    /// Parses one resource file into objects. Runs on any thread: the checks
    /// across files are the caller's.
    fn read_resource_file(&self, job: &Job) -> FileObjects {
        let mut objects = Vec::new();
        let mut dropped = BTreeSet::new();
        let error = self.make_objects(job, &mut objects, &mut dropped).err();
        FileObjects {
            objects,
            error,
            dropped,
        }
    }

    /// Parses a resource file, adding its objects to `out` until an error.
    fn make_objects(
        &self,
        job: &Job,
        out: &mut Vec<(usize, Object)>,
        dropped: &mut BTreeSet<&'static str>,
    ) -> Result<(), TreeError> {
        let &Job {
            file,
            package,
            namespace,
            ..
        } = job;
        let bytes = self.read_file(file)?;
        let documents = decode::read(&bytes, true).map_err(|e| TreeError::Unparsable {
            file: file.to_path_buf(),
            message: match e.line {
                Some(line) => format!("line {line}: {}", e.message),
                None => e.message,
            },
        })?;
        for (index, document) in documents.into_iter().enumerate() {
            let number = index + 1;
            // Lines only matter in error messages, and the fast path does
            // not track them: find them when needed.
            let known = (document.line, document.item_lines);
            let line_of = |item: Option<usize>| -> Option<u32> {
                let (line, item_lines) = match known.0 {
                    Some(_) => (known.0, known.1.clone()),
                    None => decode::locate(&bytes, index),
                };
                match item {
                    None => line,
                    Some(i) => item_lines.get(i).copied().or(line),
                }
            };
            let invalid = |item: Option<usize>, error: ObjectKeyError| TreeError::InvalidObject {
                file: file.to_path_buf(),
                document: number,
                line: line_of(item),
                items: item.into_iter().collect(),
                error: Box::new(error),
            };
            let objects = decode::objects(document.value, dropped)
                .map_err(|(item, reason)| invalid(item, ObjectKeyError::Refused { reason }))?;
            for (item, manifest) in objects {
                let object = self
                    .make_object(manifest, file, number, package, namespace)
                    .map_err(|e| match e {
                        MakeError::Key(error) => invalid(item, error),
                        MakeError::TooLarge(key) => TreeError::ObjectTooLarge {
                            file: file.to_path_buf(),
                            document: number,
                            line: line_of(item),
                            items: item.into_iter().collect(),
                            key: Box::new(key),
                            limit: self.options.max_object_bytes,
                        },
                    })?;
                out.push((number, object));
            }
        }
        Ok(())
    }

    /// Turns a manifest into an [`Object`]: key, namespace default, size.
    fn make_object(
        &self,
        mut manifest: Value,
        file: &Path,
        document: usize,
        package: &str,
        namespace: Option<&str>,
    ) -> Result<Object, MakeError> {
        let mut key = ObjectKey::from_manifest(&manifest).map_err(MakeError::Key)?;
        if key.namespace.is_none()
            && let Some(ns) = namespace
            && !is_well_known_cluster_scoped(&key.group, &key.kind)
        {
            key.namespace = Some(ns.to_owned());
            // `from_manifest` checked that metadata is a mapping.
            if let Some(Value::Object(metadata)) = manifest.get_mut("metadata") {
                metadata.insert("namespace".into(), Value::from(ns));
            }
        }
        let Some(text) = json_text_at_most(&manifest, self.options.max_object_bytes) else {
            return Err(MakeError::TooLarge(key));
        };
        Ok(Object::new(
            key,
            &manifest,
            text,
            file.to_path_buf(),
            document,
            package.to_owned(),
        ))
    }
}

/// Sorts a package's objects into apply order; keys are unique, so this is
/// total. The rank is computed once per object, not per comparison.
fn apply_order(objects: Vec<Object>) -> Vec<Object> {
    let mut ranked: Vec<(u8, Object)> = objects
        .into_iter()
        .map(|o| (kind_rank(&o.key.group, &o.key.kind), o))
        .collect();
    ranked.sort_unstable_by(|(rank_a, a), (rank_b, b)| {
        rank_a.cmp(rank_b).then_with(|| a.key.cmp(&b.key))
    });
    ranked.into_iter().map(|(_, o)| o).collect()
}

enum MakeError {
    Key(ObjectKeyError),
    TooLarge(ObjectKey),
}

/// The line where the `document`th (1-based, counting non-empty documents)
/// document of a resource file starts: the file is read again, tracking
/// lines.
pub fn yaml_document_line(bytes: &[u8], document: usize) -> Option<u32> {
    decode::locate(bytes, document.checked_sub(1)?).0
}

/// Whether `file` (below `resources/`) is a resource by its name, as
/// kubectl's `-f DIR` decides: its extension (from the last `.` of the
/// name, so `.yaml` has one) is `.json`, `.yaml` or `.yml`, compared as
/// bytes (a name that is not UTF-8 has one too).
fn is_resource_file(file: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Some(name) = file.file_name() else {
        return false;
    };
    [".json", ".yaml", ".yml"]
        .iter()
        .any(|ext| name.as_bytes().ends_with(ext.as_bytes()))
}

/// Names kix uses as directory names, label values and API path segments:
/// 1 to 253 characters of `A-Z a-z 0-9 . _ -`, starting with a letter or
/// digit. (The Nix library is stricter: DNS labels.)
fn check_name(name: &str, what: &'static str, file: &Path) -> Result<(), TreeError> {
    let reason = if name.is_empty() {
        Some("must not be empty")
    } else if name.len() > 253 {
        Some("must be at most 253 characters")
    } else if !name
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
    {
        Some("only A-Z a-z 0-9 . _ - are allowed")
    } else if !name.as_bytes()[0].is_ascii_alphanumeric() {
        Some("must start with a letter or digit")
    } else {
        None
    };
    match reason {
        None => Ok(()),
        Some(reason) => Err(TreeError::InvalidName {
            file: file.to_path_buf(),
            what,
            name: name.to_owned(),
            reason,
        }),
    }
}

/// Package names in dependency order (dependencies first, ties by name).
fn dependency_order(packages: &BTreeMap<String, Package>) -> Result<Vec<String>, TreeError> {
    // Missing dependencies first, in package and then `dependsOn` order.
    for package in packages.values() {
        if let Some(dep) = package
            .depends_on
            .iter()
            .find(|d| !packages.contains_key(d.as_str()))
        {
            return Err(TreeError::DependencyNotFound {
                package: package.name.clone(),
                dependency: dep.clone(),
            });
        }
    }

    // Kahn's algorithm, always taking the smallest ready name.
    let deps: BTreeMap<&str, BTreeSet<&str>> = packages
        .values()
        .map(|p| {
            let set = p.depends_on.iter().map(String::as_str).collect();
            (p.name.as_str(), set)
        })
        .collect();
    let mut remaining_deps: BTreeMap<&str, usize> =
        deps.iter().map(|(name, d)| (*name, d.len())).collect();
    let mut dependents: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (name, d) in &deps {
        for dep in d {
            dependents.entry(dep).or_default().push(name);
        }
    }
    let mut ready: BTreeSet<&str> = remaining_deps
        .iter()
        .filter(|(_, n)| **n == 0)
        .map(|(name, _)| *name)
        .collect();
    let mut order = Vec::with_capacity(packages.len());
    while let Some(name) = ready.pop_first() {
        order.push(name.to_owned());
        for dependent in dependents.get(name).into_iter().flatten() {
            if let Some(n) = remaining_deps.get_mut(dependent) {
                *n -= 1;
                if *n == 0 {
                    ready.insert(dependent);
                }
            }
        }
    }
    if order.len() == packages.len() {
        return Ok(order);
    }

    // Every package left depends on another package left: follow the
    // smallest such dependency until a package repeats.
    let done: BTreeSet<&str> = order.iter().map(String::as_str).collect();
    let left = |name: &&str| !done.contains(*name);
    let mut path: Vec<&str> = Vec::new();
    let mut current = deps.keys().copied().find(left).unwrap_or_default();
    let cycle = loop {
        if let Some(start) = path.iter().position(|p| *p == current) {
            break path.split_off(start);
        }
        path.push(current);
        current = deps
            .get(current)
            .and_then(|d| d.iter().copied().find(left))
            .unwrap_or_default();
    };
    // Start the report at the smallest name, so it does not depend on where
    // the walk entered the cycle.
    let smallest = cycle
        .iter()
        .enumerate()
        .min_by_key(|(_, name)| **name)
        .map_or(0, |(i, _)| i);
    let cycle = cycle[smallest..]
        .iter()
        .chain(&cycle[..smallest])
        .map(|s| (*s).to_owned())
        .collect();
    Err(TreeError::DependencyCycle { cycle })
}

/// Checks a package's handoff rules: usable, and each covers an object of
/// the package.
fn check_handoff(package: &Package) -> Result<(), TreeError> {
    for (index, rule) in package.handoff.iter().enumerate() {
        let covers_one = package.objects.iter().any(|o| {
            let mut key = o.key.clone();
            if key.namespace.is_none() {
                key.namespace.clone_from(&package.namespace);
            }
            rule.covers(&key) || (rule.namespace.is_none() && rule.covers(&o.key))
        });
        let reason = rule
            .problem()
            .or_else(|| (!covers_one).then(|| "it covers no object of the package".to_owned()));
        if let Some(reason) = reason {
            return Err(TreeError::InvalidHandoff {
                package: package.name.clone(),
                index,
                rule: rule.to_string(),
                reason,
            });
        }
    }
    Ok(())
}

/// Checks a package's migrations (ranges, overlaps, object references) and
/// resolves `recreate`/`adopt` references to the objects they name.
fn check_migrations(package: &mut Package) -> Result<(), TreeError> {
    // `from` is a version or a range (see `VersionRange`); a migration covers
    // its `from` below its `to`. Half-open ranges [from, to): 1->2 and 2->3
    // chain, they do not overlap.
    let mut ranges: Vec<VersionRange> = Vec::with_capacity(package.migrations.len());
    for (i, m) in package.migrations.iter().enumerate() {
        let range = VersionRange::of_migration(&m.from, &m.to).map_err(|reason| {
            TreeError::InvalidMigrationVersion {
                package: package.name.clone(),
                from: m.from.clone(),
                to: m.to.clone(),
                reason,
            }
        })?;
        if range.is_empty() {
            return Err(TreeError::InvalidMigrationRange {
                package: package.name.clone(),
                from: m.from.clone(),
                to: m.to.clone(),
            });
        }
        for (earlier, earlier_range) in package.migrations[..i].iter().zip(&ranges) {
            let overlap = !earlier_range.intersect(&range).is_empty();
            if overlap {
                return Err(TreeError::OverlappingMigrations {
                    package: package.name.clone(),
                    first: Box::new((earlier.from.clone(), earlier.to.clone())),
                    second: Box::new((m.from.clone(), m.to.clone())),
                });
            }
        }
        ranges.push(range);
    }

    let Package {
        name,
        namespace,
        migrations,
        objects,
        ..
    } = package;
    for m in migrations.iter_mut() {
        for action in &mut m.actions {
            if action.action == ActionKind::Delete {
                continue;
            }
            let r = &action.object;
            let found = objects.iter().find(|o| {
                o.key.kind == r.kind
                    && o.key.name == r.name
                    && r.api_version
                        .as_deref()
                        .is_none_or(|v| group_of(v) == Some(o.key.group.as_str()))
                    && match &r.namespace {
                        Some(ns) => o.key.namespace.as_ref() == Some(ns),
                        None => o.key.namespace.is_none() || o.key.namespace == *namespace,
                    }
            });
            let Some(object) = found else {
                return Err(TreeError::UnknownMigrationObject {
                    package: name.clone(),
                    from: m.from.clone(),
                    to: m.to.clone(),
                    action: action.action,
                    object: Box::new(action.object.clone()),
                });
            };
            action.object.api_version = Some(object.api_version.clone());
            action.object.namespace = object.key.namespace.clone();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_file_names() {
        for yes in [
            "a.json",
            "a.yaml",
            "a.yml",
            "x/y/.z.yaml",
            "a.b.yaml",
            ".yaml",
            ".json",
        ] {
            assert!(is_resource_file(Path::new(yes)), "{yes}");
        }
        for no in [
            "a.yaml.bak",
            "a.YAML",
            "README.md",
            "a.jsonl",
            "a.yaml~",
            "ayaml",
        ] {
            assert!(!is_resource_file(Path::new(no)), "{no}");
        }
    }

    #[test]
    fn parsed_in_order_on_any_number_of_threads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files: Vec<PathBuf> = (0..50)
            .map(|i| PathBuf::from(format!("{i:02}.yaml")))
            .collect();
        for (i, file) in files.iter().enumerate() {
            let text = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}\n");
            std::fs::write(dir.path().join(file), text).expect("write");
        }
        let options = ReadOptions::default();
        let reader = Reader {
            root: dir.path(),
            options: &options,
        };
        let jobs: Vec<Job> = files
            .iter()
            .map(|file| Job {
                file,
                bytes: 1,
                package_index: 0,
                package: "p",
                namespace: None,
            })
            .collect();
        let stop = TreeError::MissingKixJson;
        for threads in [0, 1, 2, 3, 8, 64] {
            // Every file, in job order.
            let mut names = Vec::new();
            let all = reader.parse_in_order(&jobs, threads, |_, file| {
                names.extend(file.objects.into_iter().map(|(_, o)| o.key.name));
                Ok(())
            });
            assert_eq!(all, Ok(()));
            let expected: Vec<String> = (0..50).map(|i| format!("cm-{i}")).collect();
            assert_eq!(names, expected, "{threads} threads");
            // The first error returned ends the reading.
            let mut seen = 0;
            let stopped = reader.parse_in_order(&jobs, threads, |job, _| {
                seen += 1;
                if job.file == Path::new("20.yaml") {
                    return Err(stop.clone());
                }
                Ok(())
            });
            assert_eq!(stopped, Err(stop.clone()));
            assert_eq!(seen, 21, "{threads} threads");
        }
    }

    #[test]
    fn parsing_is_shared_by_size() {
        // A small file and a large one in every package: each thread gets
        // half the bytes, not every other file.
        let files: Vec<PathBuf> = (0..20).map(|i| PathBuf::from(format!("{i}"))).collect();
        let jobs: Vec<Job> = files
            .iter()
            .enumerate()
            .map(|(i, file)| Job {
                file,
                bytes: if i % 2 == 0 { 100 } else { 2_000_000 },
                package_index: 0,
                package: "p",
                namespace: None,
            })
            .collect();
        for threads in [1, 2, 3, 8] {
            let owners = split_by_size(&jobs, threads);
            let mut load = vec![0u64; threads];
            for (job, &t) in jobs.iter().zip(&owners) {
                load[t] += job.bytes;
            }
            let (least, most) = (load.iter().min(), load.iter().max());
            let (least, most) = (*least.expect("threads"), *most.expect("threads"));
            assert!(most - least <= 2_000_000, "{threads} threads: {load:?}");
        }
        // Empty files still go round.
        let empty: Vec<Job> = jobs.iter().map(|j| Job { bytes: 0, ..*j }).collect();
        assert_eq!(split_by_size(&empty, 2)[..4], [0, 1, 0, 1]);
    }

    #[test]
    fn names() {
        let f = Path::new("kix.json");
        for ok in ["prod", "a", "web-1", "A.b_c", &"x".repeat(253)] {
            assert_eq!(check_name(ok, "package", f), Ok(()), "{ok}");
        }
        for bad in ["", "-a", ".a", "..", "a/b", "a b", "é", &"x".repeat(254)] {
            assert!(check_name(bad, "package", f).is_err(), "{bad:?}");
        }
    }
}

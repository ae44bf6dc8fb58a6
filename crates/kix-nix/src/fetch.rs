//! What the operator does with a record's build: fetch it from the caches
//! it trusts and keep it only when a trusted key signed it ([`Fetcher`]),
//! in the host's store or a store of its own ([`Store`]), and collect from
//! its own store what no record names any more.
//!
//! Everything goes through the pinned Nix: `nix-store --realise` with the
//! operator's substituters and `require-sigs` fetches, `nix store verify`
//! checks the closure's signatures (and re-hashes its contents), `nix-store
//! --gc --print-dead` and `nix store delete` collect. kix does no
//! cryptography of its own.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, RwLock};

use kix_manifest::{CacheUrl, PublicKey, STORE_DIR, StorePath};
use serde::Deserialize;

use crate::NixError;
use crate::command::{EXPERIMENTAL, NIX, NIX_STORE, NixCommand};
use crate::gcroots::GcRoots;

/// Nix must ask the caches each time: a miss remembered from before a push
/// would otherwise hide the path for an hour.
const NO_NARINFO_CACHE: [&str; 6] = [
    "--option",
    "narinfo-cache-negative-ttl",
    "0",
    "--option",
    "narinfo-cache-positive-ttl",
    "0",
];

/// `nix store verify`'s exit code when a path lacks a trusted signature
/// (1: contents differ, or any other error).
const VERIFY_UNTRUSTED: i32 = 2;

/// Paths per `nix` call, well under the kernel's argument limit.
const CHUNK: usize = 500;

/// The store the operator keeps builds in.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Store {
    /// The Nix store URL passed as `--store`; None: Nix's default (the
    /// host's store, through its daemon when there is one).
    url: Option<String>,
    /// The directory holding a store of its own (`local?root=DIR`):
    /// builds are read under `DIR/nix/store`, and unused ones deleted.
    /// None: the host's store, never collected by kix.
    root: Option<PathBuf>,
}

/// Why the operator's store, fetch or verification failed.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error(
        "--store {url}: {reason}; the operator reads a build's files, so its store is on this machine: local?root=DIR (a store of its own) or daemon, local, auto (the host's)"
    )]
    StoreUrl { url: String, reason: String },
    #[error(
        "store path {path} is not available: it could not be fetched from {substituters} (trusted keys: {keys}):\n{message}"
    )]
    NotFetched {
        path: String,
        substituters: String,
        keys: String,
        message: String,
    },
    #[error(
        "store path {path} is not signed by a trusted key (checked against {keys}; caches asked: {substituters}), or its contents are not what was signed; nothing was applied:\n{message}"
    )]
    Untrusted {
        path: String,
        keys: String,
        substituters: String,
        message: String,
    },
    #[error(
        "store path {path} is content-addressed (made by nix-store --add, or kix --path of a plain directory): Nix accepts such a path without any signature, so it cannot show that a trusted key ({keys}) signed it; nothing was applied. Build it with the Nix library (mkCluster) and publish it with kix push"
    )]
    ContentAddressed { path: String, keys: String },
    #[error(transparent)]
    Nix(#[from] NixError),
}

static PROCESS_STORE: OnceLock<Store> = OnceLock::new();

/// Makes `store` the store this process keeps builds in: GC roots
/// ([`GcRoots::from_env`]) are then taken there. Set once, at start; a
/// later call is ignored (returns false).
pub fn use_store(store: Store) -> bool {
    PROCESS_STORE.set(store).is_ok()
}

/// The store set with [`use_store`]; the host's by default.
pub fn process_store() -> &'static Store {
    PROCESS_STORE.get_or_init(Store::default)
}

impl Store {
    /// The host's store, as Nix is configured.
    pub fn host() -> Store {
        Store::default()
    }

    /// A Nix store URL: `local?root=DIR` or an absolute `DIR` (a store of
    /// the operator's own), or `daemon`, `local`, `auto`, `unix://...` (the
    /// host's). Stores elsewhere (ssh, http, s3) cannot be read from.
    pub fn parse(url: &str) -> Result<Store, FetchError> {
        let refuse = |reason: &str| FetchError::StoreUrl {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(refuse("contains whitespace"));
        }
        let (kind, query) = url.split_once('?').unwrap_or((url, ""));
        let params: Vec<(&str, &str)> = query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| p.split_once('=').unwrap_or((p, "")))
            .collect();
        let param = |name: &str| params.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
        if param("store").is_some_and(|dir| dir != STORE_DIR) {
            return Err(refuse(
                "builds are /nix/store paths; another store= is not read",
            ));
        }
        let root = match kind {
            "local" => param("root").map(PathBuf::from),
            "daemon" | "auto" => None,
            _ if kind.starts_with("unix://") => None,
            _ if kind.starts_with('/') => Some(PathBuf::from(kind)),
            _ => return Err(refuse("not a store on this machine")),
        };
        if let Some(root) = &root
            && (!root.is_absolute() || root == Path::new("/"))
        {
            return Err(refuse("root= must be an absolute directory other than /"));
        }
        Ok(Store {
            url: Some(url.to_owned()),
            root,
        })
    }

    /// The directory of a store of the operator's own, if it is one.
    pub fn own_root(&self) -> Option<&Path> {
        self.root.as_deref()
    }

    /// The URL as given; None for Nix's default store.
    pub fn url(&self) -> Option<&str> {
        self.url.as_deref()
    }

    /// `--store URL`, or nothing for the default store.
    pub(crate) fn args(&self) -> Vec<String> {
        match &self.url {
            Some(url) => vec!["--store".into(), url.clone()],
            None => Vec::new(),
        }
    }

    /// Where the store's paths are on this machine: `/nix/store`, or
    /// `DIR/nix/store` for a store of its own.
    pub fn store_dir(&self) -> PathBuf {
        match &self.root {
            Some(root) => root.join(STORE_DIR.trim_start_matches('/')),
            None => PathBuf::from(STORE_DIR),
        }
    }

    /// Where the files of `path` are on this machine.
    pub fn physical(&self, path: &StorePath) -> PathBuf {
        match &self.root {
            Some(root) => root.join(path.as_str().trim_start_matches('/')),
            None => path.as_path().to_path_buf(),
        }
    }

    /// The GC roots of records in this store: inside a store of its own,
    /// `DIR/nix/var/nix/gcroots/kix` (unless `dir` is given); else
    /// [`GcRoots`]' usual directory.
    pub fn gc_roots(&self, dir: Option<PathBuf>) -> GcRoots {
        let dir = match (dir, &self.root) {
            (Some(dir), _) => dir,
            (None, Some(root)) => root.join("nix/var/nix/gcroots/kix"),
            (None, None) => crate::gcroots::default_gcroots_dir(),
        };
        GcRoots::new(dir).in_store(self.url.clone())
    }

    /// Whether `path` is valid in this store.
    fn is_valid(&self, path: &StorePath) -> Result<bool, NixError> {
        let out = NixCommand::new(NIX_STORE)
            .args(self.args())
            .args(["--check-validity", "--print-invalid"])
            .arg(path.as_str())
            .run(false)?;
        Ok(out.stdout.trim().is_empty())
    }
}

/// What a collection of the operator's own store deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Collected {
    pub paths: usize,
    /// The deleted paths' NAR size, as Nix records it.
    pub bytes: u64,
}

/// Fetches and verifies records' builds for the operator, several at once
/// (500 Kix clusters' first fetches do not queue behind each other), but a
/// collection never runs while a build is fetched and rooted. A path
/// verified once is not re-hashed at every reconcile while it stays in the
/// store.
#[derive(Debug)]
pub struct Fetcher {
    store: Store,
    roots: GcRoots,
    substituters: Vec<CacheUrl>,
    trusted_keys: Vec<PublicKey>,
    /// Held shared while fetching, alone while collecting.
    gate: RwLock<()>,
    /// The paths verified since they were last fetched.
    verified: Mutex<BTreeSet<String>>,
}

/// One path as `nix path-info --json` prints it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PathInfo {
    #[serde(default)]
    nar_size: Option<u64>,
    #[serde(default)]
    ca: Option<String>,
}

impl Fetcher {
    /// With no trusted key, builds are taken from the store as they are
    /// (realised as Nix is configured). `roots` is where records' GC roots
    /// are kept (normally `store.gc_roots(..)`).
    pub fn new(
        store: Store,
        roots: GcRoots,
        substituters: Vec<CacheUrl>,
        trusted_keys: Vec<PublicKey>,
    ) -> Fetcher {
        Fetcher {
            store,
            roots,
            substituters,
            trusted_keys,
            gate: RwLock::new(()),
            verified: Mutex::new(BTreeSet::new()),
        }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Whether builds must carry a trusted key's signature.
    pub fn requires_signatures(&self) -> bool {
        !self.trusted_keys.is_empty()
    }

    /// What this fetcher does, for the operator's startup log.
    pub fn describe(&self) -> String {
        let store = match (self.store.url(), self.store.own_root()) {
            (Some(url), Some(_)) => format!(
                "builds are kept in a store of the operator's own ({url}, files under {})",
                self.store.store_dir().display()
            ),
            (Some(url), None) => format!("builds are read from the host's store ({url})"),
            (None, _) => "builds are read from the host's store".to_owned(),
        };
        let trust = if self.requires_signatures() {
            format!(
                "a build is applied only when its closure is signed by one of {} (fetched from {})",
                self.keys(),
                self.substituter_list()
            )
        } else {
            "no trusted key is configured (--trusted-public-key): builds are taken from the store as they are, not checked for signatures".to_owned()
        };
        format!("{store}; {trust}")
    }

    /// Fetch and verify, in one place: makes `path` valid in the store
    /// (from the substituters when it is not), rooted as record
    /// `<cluster>/<activation>`, and, when trusted keys are configured,
    /// accepts it only if Nix finds its whole closure signed by one of them
    /// and its contents as signed, whether or not it was there before.
    /// Returns where its files are. On any failure the root is dropped.
    pub fn obtain(
        &self,
        path: &StorePath,
        cluster: &str,
        activation: &str,
    ) -> Result<PathBuf, FetchError> {
        let _fetching = self.gate.read().unwrap_or_else(|e| e.into_inner());
        let verified = || self.verified.lock().unwrap_or_else(|e| e.into_inner());
        let link = self.roots.link(cluster, activation)?;
        let result = self.fetch(path, &link).and_then(|()| {
            if verified().contains(path.as_str()) {
                return Ok(());
            }
            // Unlocked while Nix hashes: a path verified twice at once is
            // verified twice, nothing worse.
            self.verify(path)?;
            verified().insert(path.to_string());
            Ok(())
        });
        if let Err(err) = &result {
            tracing::warn!(%path, "refused: {err}");
            let _ = self.roots.remove(cluster, activation);
        }
        result.map(|()| self.store.physical(path))
    }

    /// `nix-store --realise` with a root: a no-op for a valid path, else a
    /// fetch from the substituters, requiring trusted signatures.
    fn fetch(&self, path: &StorePath, link: &Path) -> Result<(), FetchError> {
        if let Some(parent) = link.parent() {
            std::fs::create_dir_all(parent).map_err(|source| NixError::Io {
                path: parent.to_path_buf(),
                source,
            })?;
        }
        let was_valid = self.store.is_valid(path)?;
        let mut command = NixCommand::new(NIX_STORE).args(self.store.args());
        if self.requires_signatures() {
            command = command
                .args(["--option", "substituters", &self.substituter_words()])
                .args(["--option", "trusted-public-keys", &self.keys()])
                .args(["--option", "require-sigs", "true"])
                .args(NO_NARINFO_CACHE);
        }
        let command = command
            .arg("--add-root")
            .arg(link)
            .arg("--indirect")
            .arg("--realise")
            .arg(path.as_str());
        match command.run(false) {
            Ok(_) => {
                if !was_valid {
                    tracing::info!(%path, "fetched");
                }
                Ok(())
            }
            Err(NixError::CommandFailed { stderr, .. }) => Err(FetchError::NotFetched {
                path: path.to_string(),
                substituters: self.substituter_list(),
                keys: self.keys_or_none(),
                message: stderr,
            }),
            Err(other) => Err(other.into()),
        }
    }

    /// `nix store verify` of the closure against the trusted keys: the
    /// signatures in the store, then, for paths without one (built or
    /// copied here unsigned), the caches' signatures of the same contents.
    fn verify(&self, path: &StorePath) -> Result<(), FetchError> {
        if !self.requires_signatures() {
            return Ok(());
        }
        if self
            .path_info(&[path.as_str()])?
            .iter()
            .any(|i| i.ca.is_some())
        {
            return Err(FetchError::ContentAddressed {
                path: path.to_string(),
                keys: self.keys(),
            });
        }
        let mut outcome = self.run_verify(path, false);
        if matches!(
            &outcome,
            Err(NixError::CommandFailed {
                code: Some(VERIFY_UNTRUSTED),
                ..
            })
        ) && !self.substituters.is_empty()
        {
            outcome = self.run_verify(path, true);
        }
        match outcome {
            Ok(()) => Ok(()),
            Err(NixError::CommandFailed { stderr, .. }) => Err(FetchError::Untrusted {
                path: path.to_string(),
                keys: self.keys(),
                substituters: self.substituter_list(),
                message: verify_findings(&stderr),
            }),
            Err(other) => Err(other.into()),
        }
    }

    fn run_verify(&self, path: &StorePath, from_caches: bool) -> Result<(), NixError> {
        let mut command = NixCommand::new(NIX)
            .args(EXPERIMENTAL)
            .args(NO_NARINFO_CACHE)
            .args(["store", "verify", "--recursive", "--sigs-needed", "1"])
            .args(self.store.args())
            .args(["--trusted-public-keys", &self.keys()]);
        if from_caches {
            for cache in &self.substituters {
                command = command.args(["--substituter", cache.as_str()]);
            }
        }
        command.arg(path.as_str()).run(false).map(drop)
    }

    /// Deletes from a store of the operator's own every path no GC root
    /// keeps (roots of records not retired, and Nix's own); None for the
    /// host's store, which kix never collects.
    pub fn collect(&self) -> Result<Option<Collected>, FetchError> {
        if self.store.own_root().is_none() {
            return Ok(None);
        }
        let _collecting = self.gate.write().unwrap_or_else(|e| e.into_inner());
        let mut verified = self.verified.lock().unwrap_or_else(|e| e.into_inner());
        let dead = NixCommand::new(NIX_STORE)
            .args(self.store.args())
            .args(["--gc", "--print-dead"])
            .run(false)?;
        let paths: Vec<&str> = dead
            .stdout
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with(STORE_DIR))
            .collect();
        let mut collected = Collected::default();
        for chunk in paths.chunks(CHUNK) {
            let infos = self.path_info(chunk)?;
            // Refuses a path that came alive since: nothing is lost.
            NixCommand::new(NIX)
                .args(EXPERIMENTAL)
                .args(["store", "delete"])
                .args(self.store.args())
                .args(chunk)
                .run(false)?;
            for gone in chunk {
                verified.remove(*gone);
            }
            collected.paths += chunk.len();
            collected.bytes += infos.iter().filter_map(|i| i.nar_size).sum::<u64>();
        }
        Ok(Some(collected))
    }

    fn path_info(&self, paths: &[&str]) -> Result<Vec<PathInfo>, NixError> {
        let command = NixCommand::new(NIX)
            .args(EXPERIMENTAL)
            .args(["path-info", "--json"])
            .args(self.store.args())
            .args(paths);
        let out = command.run(false)?;
        serde_json::from_str(&out.stdout).map_err(|e| NixError::UnexpectedOutput {
            command: command.display(),
            reason: e.to_string(),
            output: out.stdout.clone(),
        })
    }

    /// The trusted keys, space-separated, as Nix takes them.
    fn keys(&self) -> String {
        let keys: Vec<&str> = self.trusted_keys.iter().map(PublicKey::as_str).collect();
        keys.join(" ")
    }

    fn keys_or_none(&self) -> String {
        if self.trusted_keys.is_empty() {
            "none configured".to_owned()
        } else {
            self.keys()
        }
    }

    fn substituter_words(&self) -> String {
        let urls: Vec<&str> = self.substituters.iter().map(CacheUrl::as_str).collect();
        urls.join(" ")
    }

    fn substituter_list(&self) -> String {
        if self.substituters.is_empty() {
            if self.requires_signatures() {
                "none".to_owned()
            } else {
                "Nix's configured substituters".to_owned()
            }
        } else {
            self.substituter_words()
        }
    }
}

/// What `nix store verify` found: its findings, not the "checking" chatter.
fn verify_findings(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with("checking "))
        .collect();
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_urls() {
        let own = Store::parse("local?root=/var/lib/kix").expect("own");
        assert_eq!(own.own_root(), Some(Path::new("/var/lib/kix")));
        assert_eq!(own.store_dir(), PathBuf::from("/var/lib/kix/nix/store"));
        let path = StorePath::parse("/nix/store/c4vkif9iv07mw42z4fkx1lwsc0w3a7v2-e").expect("path");
        assert_eq!(
            own.physical(&path),
            PathBuf::from("/var/lib/kix/nix/store/c4vkif9iv07mw42z4fkx1lwsc0w3a7v2-e")
        );
        assert_eq!(own.args(), ["--store", "local?root=/var/lib/kix"]);
        assert_eq!(
            Store::parse("/srv/kix").expect("dir").own_root(),
            Some(Path::new("/srv/kix"))
        );
        for host in [
            "daemon",
            "auto",
            "local",
            "unix:///nix/var/nix/daemon-socket/socket",
        ] {
            let store = Store::parse(host).expect(host);
            assert_eq!(store.own_root(), None, "{host}");
            assert_eq!(store.store_dir(), PathBuf::from("/nix/store"));
        }
        for bad in [
            "ssh://builder",
            "https://cache.example",
            "local?root=rel",
            "local?store=/gnu/store",
            "local?root=/a b",
        ] {
            let err = Store::parse(bad).expect_err(bad).to_string();
            assert!(err.contains(bad), "{err}");
        }
        assert_eq!(Store::host().args(), Vec::<String>::new());
    }

    #[test]
    fn own_store_roots_are_inside_it() {
        let own = Store::parse("local?root=/var/lib/kix").expect("own");
        let roots = own.gc_roots(None);
        assert_eq!(
            roots.dir(),
            Path::new("/var/lib/kix/nix/var/nix/gcroots/kix")
        );
    }

    #[test]
    fn verify_findings_drop_the_chatter() {
        let stderr = "checking '/nix/store/a-x'...\nchecking '/nix/store/b-y'...\npath '/nix/store/b-y' is untrusted\n";
        assert_eq!(
            verify_findings(stderr),
            "path '/nix/store/b-y' is untrusted"
        );
    }
}

//! What an object's `kix.run/activations` claim is worth (#43): anyone who
//! may write an object may write that annotation, naming any record, so a
//! claim on a record counts only when the record's build declares the
//! object. An object a record's build does not have cannot be the record's:
//! it is never pruned, adopted, released or read as the record's, whatever
//! it says.
//!
//! A build is read from its store path once per process (store paths never
//! change); a build that cannot be read proves no claim.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex, OnceLock};

use kix_manifest::{Build, ObjectKey, group_kind};

/// The objects one build declares, by identity.
#[derive(Debug, Default)]
pub struct Inventory {
    /// Each object's key as the build writes it.
    keys: HashSet<ObjectKey>,
    /// (group, kind, name) of each object: a cluster-scoped object's key
    /// has no namespace live, whatever its package's.
    names: HashSet<(String, String, String)>,
    /// The build's namespaces when it has encrypted Secrets it could not
    /// decrypt here (their names are unknown until decrypted): a Secret
    /// there may be the build's.
    sealed_secrets_in: Option<BTreeSet<String>>,
}

/// Namespace of a namespaced object whose build names none.
const DEFAULT_NAMESPACE: &str = "default";

impl Inventory {
    pub fn of_build(build: &Build) -> Inventory {
        let mut inventory = Inventory::default();
        for object in build.objects() {
            let key = &object.key;
            inventory.keys.insert(key.clone());
            inventory
                .names
                .insert((key.group.clone(), key.kind.clone(), key.name.clone()));
        }
        if !build.secrets.is_empty() && !build.secrets_decrypted {
            let namespaces = build
                .objects()
                .filter_map(|o| o.key.namespace.clone())
                .chain(build.packages.iter().filter_map(|p| p.namespace.clone()))
                .chain([DEFAULT_NAMESPACE.to_string()])
                .collect();
            inventory.sealed_secrets_in = Some(namespaces);
        }
        inventory
    }

    /// Whether the build declares the live object `key`.
    pub fn declares(&self, key: &ObjectKey) -> bool {
        if self.keys.contains(key) {
            return true;
        }
        let name = (key.group.clone(), key.kind.clone(), key.name.clone());
        match key.namespace.as_deref() {
            // Cluster-scoped: the build may have given it its package's
            // namespace, which the engine drops.
            None => self.names.contains(&name),
            Some(namespace) => {
                let unnamespaced = ObjectKey {
                    namespace: None,
                    ..key.clone()
                };
                let sealed_secret = key.group_kind() == group_kind::SECRET
                    && self
                        .sealed_secrets_in
                        .as_ref()
                        .is_some_and(|n| n.contains(namespace));
                (namespace == DEFAULT_NAMESPACE && self.keys.contains(&unnamespaced))
                    || sealed_secret
            }
        }
    }
}

/// Builds read so far, by store path (a few: the current builds of the
/// Kix clusters this process serves, and the ones before them).
/// Each store path read, with what its build declares (None: unreadable).
type Cached = Vec<(String, Option<Arc<Inventory>>)>;

fn cache() -> &'static Mutex<Cached> {
    static CACHE: OnceLock<Mutex<Cached>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(Vec::new()))
}

const CACHED_BUILDS: usize = 16;

/// The inventory of the build at `path`; None when it cannot be read here
/// (not a store path, not in this machine's store, unreadable).
pub fn of_path(path: &str) -> Option<Arc<Inventory>> {
    if let Ok(cache) = cache().lock()
        && let Some((_, inventory)) = cache.iter().find(|(p, _)| p == path)
    {
        return inventory.clone();
    }
    let read = kix_manifest::StorePath::parse(path).ok().and_then(|store| {
        let options = kix_manifest::ReadOptions::default();
        match kix_manifest::read_tree(store.as_path(), &options) {
            Ok(build) => Some(Arc::new(Inventory::of_build(&build))),
            Err(err) => {
                tracing::warn!("cannot read {path} to know its objects: {err}");
                None
            }
        }
    });
    if let Ok(mut cache) = cache().lock() {
        if cache.len() >= CACHED_BUILDS {
            cache.remove(0);
        }
        cache.push((path.to_string(), read.clone()));
    }
    read
}

/// Remembers the inventory of a build already read (the operator's and the
/// deploy's own build), so its claims are checked without reading it again.
pub fn remember(path: &str, build: &Build) -> Arc<Inventory> {
    let inventory = Arc::new(Inventory::of_build(build));
    if let Ok(mut cache) = cache().lock() {
        cache.retain(|(p, _)| p != path);
        if cache.len() >= CACHED_BUILDS {
            cache.remove(0);
        }
        cache.push((path.to_string(), Some(inventory.clone())));
    }
    inventory
}

/// Whether the claim of the object `key` on the record `record` holds: the
/// record exists (its store path in `paths`) and its build declares the
/// object; or, when that build cannot be read here (built on another
/// machine, collected from this store), the object is namespaced and in one
/// of `owned`, the namespaces the planning build declares. A Kix cluster
/// owns the namespaces its build declares, so prune still removes what a
/// build made elsewhere left there, and a claim planted in another team's
/// namespace still does not hold.
pub fn holds(
    record: &str,
    key: &ObjectKey,
    paths: &BTreeMap<String, String>,
    owned: &BTreeSet<String>,
) -> bool {
    let Some(path) = paths.get(record) else {
        return false;
    };
    match of_path(path) {
        Some(inventory) => inventory.declares(key),
        None => key.namespace.as_ref().is_some_and(|n| owned.contains(n)),
    }
}

/// The namespaces `build` declares: its packages' and its objects'.
pub fn owned_namespaces(build: &Build) -> BTreeSet<String> {
    build
        .packages
        .iter()
        .filter_map(|p| p.namespace.clone())
        .chain(build.objects().filter_map(|o| o.key.namespace.clone()))
        .collect()
}

/// The store path of every record, by name.
pub fn record_paths(records: &[kix_api::Activation]) -> BTreeMap<String, String> {
    records
        .iter()
        .filter_map(|r| Some((r.metadata.name.clone()?, r.spec.source.path.clone())))
        .collect()
}

/// The note on an object the plan keeps because its claims on this Kix
/// cluster's records do not hold.
pub fn unfounded_note(claimed: &[&String]) -> String {
    let names: Vec<&str> = claimed.iter().map(|s| s.as_str()).collect();
    format!(
        "not this Kix cluster's: it claims {} (kix.run/activations), but no build of those records read here has it, nor is it in a namespace this build declares; left as it is",
        names.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(group: &str, kind: &str, namespace: Option<&str>, name: &str) -> ObjectKey {
        ObjectKey {
            group: group.into(),
            kind: kind.into(),
            namespace: namespace.map(str::to_string),
            name: name.into(),
        }
    }

    #[test]
    fn a_build_declares_its_objects_and_no_other() {
        let mut inventory = Inventory::default();
        for k in [
            key("", "ConfigMap", Some("team-b"), "settings"),
            key("", "ConfigMap", None, "loose"),
            key(
                "rbac.authorization.k8s.io",
                "ClusterRole",
                Some("team-b"),
                "r",
            ),
        ] {
            inventory
                .names
                .insert((k.group.clone(), k.kind.clone(), k.name.clone()));
            inventory.keys.insert(k);
        }
        assert!(inventory.declares(&key("", "ConfigMap", Some("team-b"), "settings")));
        assert!(inventory.declares(&key("", "ConfigMap", Some("default"), "loose")));
        assert!(inventory.declares(&key("rbac.authorization.k8s.io", "ClusterRole", None, "r")));
        // The same name elsewhere is another object.
        assert!(!inventory.declares(&key("", "ConfigMap", Some("team-a"), "settings")));
        assert!(!inventory.declares(&key("", "ConfigMap", Some("team-a"), "loose")));
        assert!(!inventory.declares(&key("", "Secret", Some("team-b"), "settings")));
        // Sealed Secrets: any Secret of the build's namespaces, no other.
        inventory.sealed_secrets_in = Some(["team-b".to_string()].into());
        assert!(inventory.declares(&key("", "Secret", Some("team-b"), "db")));
        assert!(!inventory.declares(&key("", "Secret", Some("team-a"), "db")));
    }

    #[test]
    fn a_claim_on_a_record_that_does_not_exist_or_cannot_be_read_does_not_hold() {
        let k = key("", "ConfigMap", Some("team-a"), "decoy");
        let paths = BTreeMap::from([("team-b-1".to_string(), "/not/a/store/path".to_string())]);
        let owned = BTreeSet::from(["team-b".to_string()]);
        assert!(!holds("team-b-1", &k, &paths, &owned));
        assert!(!holds("team-b-9", &k, &paths, &owned));
    }

    #[test]
    fn a_claim_on_a_build_made_elsewhere_holds_in_the_namespaces_the_build_declares() {
        // The record's build is not in this store (built by another CI
        // runner): what it left in team-b's namespaces is still team-b's.
        let paths = BTreeMap::from([(
            "team-b-1".to_string(),
            "/nix/store/00000000000000000000000000000000-elsewhere".to_string(),
        )]);
        let owned = BTreeSet::from(["team-b".to_string()]);
        let left = key("", "ConfigMap", Some("team-b"), "old");
        assert!(holds("team-b-1", &left, &paths, &owned));
        // Planted in another team's namespace, or cluster-scoped: no.
        let decoy = key("", "ConfigMap", Some("team-a"), "decoy");
        assert!(!holds("team-b-1", &decoy, &paths, &owned));
        let cluster_scoped = key("rbac.authorization.k8s.io", "ClusterRole", None, "r");
        assert!(!holds("team-b-1", &cluster_scoped, &paths, &owned));
        // A record that does not exist proves nothing, whatever the place.
        assert!(!holds("team-b-9", &left, &paths, &owned));
    }
}

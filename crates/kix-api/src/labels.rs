//! Label, annotation and other well-known keys kix writes, and the helpers that
//! compute their values.
//!
//! Two audiences: kix's own records (Activation, PackageInstance) carry
//! [`LABEL_CLUSTER`]; every object kix applies carries [`LABEL_MANAGED_BY`],
//! [`LABEL_PACKAGE`], [`LABEL_OWNER`], [`ANNOTATION_DIGEST`] and
//! [`ANNOTATION_ACTIVATIONS`]. An applied object carries no cluster label:
//! several Kix clusters may share one object, so the Kix clusters that contain
//! it are found through the Activation records its [`ANNOTATION_ACTIVATIONS`]
//! names.

use std::collections::BTreeSet;

use sha2::{Digest, Sha256};

/// The API group of kix's records.
pub const GROUP: &str = "kix.run";
/// The version of kix's records.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of kix's records.
pub const API_VERSION: &str = "kix.run/v1alpha1";

/// Label on Activation and PackageInstance records naming their Kix cluster.
/// It wins over `spec.cluster` when both are present.
pub const LABEL_CLUSTER: &str = "kix.run/cluster";
/// Label on an Activation record putting it in one shard of a sharded
/// operator (`kix-operator --shards N`): an integer below N. Without it, the
/// record's shard is a hash of its Kix cluster's name. Give every record of
/// a Kix cluster the same value (or none).
pub const LABEL_SHARD: &str = "kix.run/shard";
/// Standard label on every object kix applies (and on its records).
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Value of [`LABEL_MANAGED_BY`].
pub const MANAGED_BY_VALUE: &str = "kix";
/// Label on every applied object naming the package it belongs to.
pub const LABEL_PACKAGE: &str = "kix.run/package";
/// Label on every applied object whose value names the object's *own* identity
/// (see [`owner_value`]). A controller that copies labels onto its children
/// copies a value that does not match the child's identity, so the child never
/// looks owned by kix.
pub const LABEL_OWNER: &str = "kix.run/owner";
/// Annotation on every applied object: the Activation records that contain it,
/// comma-separated (see [`format_activations`] / [`parse_activations`]).
pub const ANNOTATION_ACTIVATIONS: &str = "kix.run/activations";
/// Annotation on every applied object: the digest of the desired manifest as
/// applied (the fast path of the next plan).
pub const ANNOTATION_DIGEST: &str = "kix.run/digest";
/// Annotation a user puts on an object to keep prune from deleting it.
pub const ANNOTATION_PRUNE: &str = "kix.run/prune";
/// Value of [`ANNOTATION_PRUNE`] that disables pruning.
pub const PRUNE_DISABLED: &str = "disabled";
/// Annotation on an Activation record a NixOS host declared (`kix declare`,
/// `services.kix-operator.clusters.<name>`): the host's name. `kix deploy`
/// and `kix rollback` warn that the host re-declares its build.
pub const ANNOTATION_DECLARED_BY: &str = "kix.run/declared-by";
/// Finalizer the operator puts on `engine: operator` Activation records; it
/// deletes the record's objects before the record goes away.
pub const FINALIZER: &str = "kix.run/resources";
/// Server-side apply field manager of kix's own records (Activation,
/// PackageInstance), which belong to one Kix cluster each.
pub const RECORDS_FIELD_MANAGER: &str = "kix";
/// The one field manager every Kix cluster applied objects as before each got
/// its own ([`field_manager`]). Objects still carrying it are taken over by
/// the next deploy (`kix_engine::ownership`).
pub const LEGACY_FIELD_MANAGER: &str = "kix";
/// Prefix of a Kix cluster's field manager.
pub const FIELD_MANAGER_PREFIX: &str = "kix/";
/// The apiserver refuses a field manager longer than this.
pub const MAX_FIELD_MANAGER_LEN: usize = 128;
/// Condition type kix sets on its records.
pub const CONDITION_READY: &str = "Ready";

/// Number of hex characters in an [`owner_value`] (160 bits of SHA-256).
pub const OWNER_VALUE_LEN: usize = 40;

/// The [`LABEL_OWNER`] value of an object: the first 40 hex characters of the
/// SHA-256 of `group/kind/namespace/name`, where the core group and a
/// cluster-scoped object's namespace are empty strings.
///
/// Label-safe (lowercase hex, 40 characters ≤ 63). The same identity gives the
/// same value whatever the version in `apiVersion`.
pub fn owner_value(group: &str, kind: &str, namespace: Option<&str>, name: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(group.as_bytes());
    hasher.update(b"/");
    hasher.update(kind.as_bytes());
    hasher.update(b"/");
    hasher.update(namespace.unwrap_or_default().as_bytes());
    hasher.update(b"/");
    hasher.update(name.as_bytes());
    hex::encode(&hasher.finalize()[..OWNER_VALUE_LEN / 2])
}

/// The group of an `apiVersion` (`"apps/v1"` → `"apps"`, `"v1"` → `""`).
pub fn group_of(api_version: &str) -> &str {
    api_version
        .rsplit_once('/')
        .map(|(group, _)| group)
        .unwrap_or_default()
}

/// Parses a [`ANNOTATION_ACTIVATIONS`] value: comma-separated Activation names,
/// whitespace around names and empty entries ignored.
pub fn parse_activations(value: &str) -> BTreeSet<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Formats a [`ANNOTATION_ACTIVATIONS`] value: the names sorted, deduplicated,
/// comma-separated without spaces. Deterministic, so an unchanged set never
/// causes a write.
pub fn format_activations<I, S>(names: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let set: BTreeSet<String> = names
        .into_iter()
        .map(|name| name.as_ref().trim().to_owned())
        .filter(|name| !name.is_empty())
        .collect();
    set.into_iter().collect::<Vec<_>>().join(",")
}

/// The server-side apply field manager of the objects a Kix cluster applies:
/// `kix/<cluster>`, so the apiserver tracks each cluster's fields apart and
/// two clusters setting one field differently conflict.
///
/// A name too long for the apiserver's 128 characters keeps its start and
/// ends in `~` and 16 hex characters of its SHA-256 (cluster names are
/// ASCII, so the cut is at a character boundary).
pub fn field_manager(cluster: &str) -> String {
    let full = format!("{FIELD_MANAGER_PREFIX}{cluster}");
    if full.len() <= MAX_FIELD_MANAGER_LEN {
        return full;
    }
    let hash = hex::encode(Sha256::digest(cluster.as_bytes()));
    let keep = MAX_FIELD_MANAGER_LEN - 17;
    let cut = (0..=keep)
        .rev()
        .find(|&i| full.is_char_boundary(i))
        .unwrap_or(0);
    format!("{}~{}", &full[..cut], &hash[..16])
}

/// The Kix cluster a field manager belongs to, by its name (`kix/prod` →
/// `prod`); `None` for other managers and for [`LEGACY_FIELD_MANAGER`].
/// A shortened name ([`field_manager`]) gives the shortened text.
pub fn cluster_of_manager(manager: &str) -> Option<&str> {
    manager
        .strip_prefix(FIELD_MANAGER_PREFIX)
        .filter(|c| !c.is_empty())
}

/// Label selector for the records (Activation, PackageInstance) of one Kix
/// cluster.
pub fn cluster_selector(cluster: &str) -> String {
    format!("{LABEL_CLUSTER}={cluster}")
}

/// Label selector for every object kix manages.
pub fn managed_selector() -> String {
    format!("{LABEL_MANAGED_BY}={MANAGED_BY_VALUE}")
}

/// Prefix of the label that marks an applied object as one Kix cluster's:
/// `cluster.kix.run/<cluster>` ([`cluster_label`]). One key per Kix
/// cluster, so each of the clusters that share an object marks it (a
/// value would be the last writer's), and a plan lists its own objects
/// with a selector instead of every object kix manages.
pub const CLUSTER_LABEL_PREFIX: &str = "cluster.kix.run/";
/// Value of a [`cluster_label`].
pub const CLUSTER_LABEL_VALUE: &str = "true";
/// Condition on an Activation record whose deploy left every object of its
/// Kix cluster with the [`cluster_label`]: the next plan lists by it.
pub const CONDITION_OBJECTS_LABELLED: &str = "ObjectsLabelled";

/// Longest name part of a label key.
const LABEL_NAME_MAX: usize = 63;

/// The key of the label marking `cluster`'s objects: `cluster.kix.run/`
/// and the cluster's name, or, for a name a label key cannot hold (longer
/// than 63 characters or other characters), `h.` and 40 hex characters of
/// its SHA-256.
pub fn cluster_label(cluster: &str) -> String {
    let fits = !cluster.is_empty()
        && cluster.len() <= LABEL_NAME_MAX
        && cluster
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && cluster.starts_with(|c: char| c.is_ascii_alphanumeric())
        && cluster.ends_with(|c: char| c.is_ascii_alphanumeric());
    if fits {
        return format!("{CLUSTER_LABEL_PREFIX}{cluster}");
    }
    let hash = hex::encode(Sha256::digest(cluster.as_bytes()));
    format!("{CLUSTER_LABEL_PREFIX}h.{}", &hash[..40])
}

/// Label selector for the objects kix manages for `cluster`.
pub fn cluster_objects_selector(cluster: &str) -> String {
    format!("{},{}", managed_selector(), cluster_label(cluster))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_label_is_a_valid_key_for_any_cluster_name() {
        assert_eq!(cluster_label("prod-eu"), "cluster.kix.run/prod-eu");
        assert_eq!(
            cluster_objects_selector("prod"),
            "app.kubernetes.io/managed-by=kix,cluster.kix.run/prod"
        );
        for odd in ["x".repeat(64), "a/b".into(), "-a".into(), "a b".into()] {
            let key = cluster_label(&odd);
            let name = key.strip_prefix(CLUSTER_LABEL_PREFIX).expect("prefix");
            assert!(name.starts_with("h.") && name.len() == 42, "{key}");
        }
        assert_ne!(
            cluster_label(&"x".repeat(64)),
            cluster_label(&"y".repeat(64))
        );
    }

    #[test]
    fn owner_value_is_label_safe_and_stable() {
        let v = owner_value("apps", "Deployment", Some("default"), "web");
        assert_eq!(v.len(), OWNER_VALUE_LEN);
        assert!(v.len() <= 63);
        assert!(
            v.chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
        );
        assert_eq!(v, owner_value("apps", "Deployment", Some("default"), "web"));
        // sha256("apps/Deployment/default/web"), first 40 hex characters.
        let full = hex::encode(Sha256::digest(b"apps/Deployment/default/web"));
        assert_eq!(v, full[..40]);
    }

    #[test]
    fn owner_value_distinguishes_every_part() {
        let base = owner_value("apps", "Deployment", Some("default"), "web");
        assert_ne!(base, owner_value("", "Deployment", Some("default"), "web"));
        assert_ne!(
            base,
            owner_value("apps", "StatefulSet", Some("default"), "web")
        );
        assert_ne!(
            base,
            owner_value("apps", "Deployment", Some("other"), "web")
        );
        assert_ne!(
            base,
            owner_value("apps", "Deployment", Some("default"), "api")
        );
        assert_ne!(base, owner_value("apps", "Deployment", None, "web"));
    }

    #[test]
    fn cluster_scoped_owner_value_uses_empty_namespace() {
        let full = hex::encode(Sha256::digest(b"/Namespace//apps"));
        assert_eq!(owner_value("", "Namespace", None, "apps"), full[..40]);
        assert_eq!(
            owner_value("", "Namespace", None, "apps"),
            owner_value("", "Namespace", Some(""), "apps")
        );
    }

    #[test]
    fn group_of_api_version() {
        assert_eq!(group_of("v1"), "");
        assert_eq!(group_of("apps/v1"), "apps");
        assert_eq!(group_of("kix.run/v1alpha1"), "kix.run");
    }

    #[test]
    fn activations_annotation_round_trip() {
        let set = parse_activations(" prod-3, infra-7,,prod-3 ");
        assert_eq!(
            set.iter().map(String::as_str).collect::<Vec<_>>(),
            ["infra-7", "prod-3"]
        );
        assert_eq!(format_activations(&set), "infra-7,prod-3");
        assert_eq!(format_activations(["b", "a", "b", ""]), "a,b");
        assert!(parse_activations("").is_empty());
        assert_eq!(format_activations(Vec::<String>::new()), "");
    }

    #[test]
    fn field_managers_name_their_cluster_and_fit_the_apiserver() {
        assert_eq!(field_manager("prod"), "kix/prod");
        assert_eq!(cluster_of_manager("kix/prod"), Some("prod"));
        assert_eq!(cluster_of_manager(LEGACY_FIELD_MANAGER), None);
        assert_eq!(cluster_of_manager("kix/"), None);
        assert_eq!(cluster_of_manager("kubectl"), None);
        let long = "c".repeat(200);
        let manager = field_manager(&long);
        assert_eq!(manager.len(), MAX_FIELD_MANAGER_LEN);
        assert!(manager.starts_with("kix/ccc"));
        assert_ne!(manager, field_manager(&"c".repeat(201)));
        assert_eq!(field_manager(&"c".repeat(124)).len(), 128);
    }

    #[test]
    fn selectors() {
        assert_eq!(cluster_selector("prod"), "kix.run/cluster=prod");
        assert_eq!(managed_selector(), "app.kubernetes.io/managed-by=kix");
    }
}

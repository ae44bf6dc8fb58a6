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
/// Finalizer the operator puts on `engine: operator` Activation records; it
/// deletes the record's objects before the record goes away.
pub const FINALIZER: &str = "kix.run/resources";
/// Server-side apply field manager of every kix write.
pub const FIELD_MANAGER: &str = "kix";
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
    let mut hex = hex::encode(hasher.finalize());
    hex.truncate(OWNER_VALUE_LEN);
    hex
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

/// Label selector for the records (Activation, PackageInstance) of one Kix
/// cluster.
pub fn cluster_selector(cluster: &str) -> String {
    format!("{LABEL_CLUSTER}={cluster}")
}

/// Label selector for every object kix manages.
pub fn managed_selector() -> String {
    format!("{LABEL_MANAGED_BY}={MANAGED_BY_VALUE}")
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn selectors() {
        assert_eq!(cluster_selector("prod"), "kix.run/cluster=prod");
        assert_eq!(managed_selector(), "app.kubernetes.io/managed-by=kix");
    }
}

//! Typed names of Kubernetes kinds: a kind by API group ([`GroupKind`]),
//! and a kind with its API version as a record lists it
//! ([`GroupVersionKind`], `apps/v1/Deployment`). Matching a kind is matching
//! one of these, never a pair of string literals; reading a recorded kind
//! is [`GroupVersionKind::parse`], never a split by hand.

use std::fmt;

/// A kind by API group (`""` for the core group), whatever its version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupKind<'a> {
    pub group: &'a str,
    pub kind: &'a str,
}

impl<'a> GroupKind<'a> {
    pub const fn new(group: &'a str, kind: &'a str) -> Self {
        GroupKind { group, kind }
    }
}

pub const CUSTOM_RESOURCE_DEFINITION: GroupKind<'static> =
    GroupKind::new("apiextensions.k8s.io", "CustomResourceDefinition");
pub const NAMESPACE: GroupKind<'static> = GroupKind::new("", "Namespace");
pub const PERSISTENT_VOLUME_CLAIM: GroupKind<'static> = GroupKind::new("", "PersistentVolumeClaim");
pub const POD: GroupKind<'static> = GroupKind::new("", "Pod");
pub const CONFIG_MAP: GroupKind<'static> = GroupKind::new("", "ConfigMap");
pub const SECRET: GroupKind<'static> = GroupKind::new("", "Secret");
pub const SERVICE_ACCOUNT: GroupKind<'static> = GroupKind::new("", "ServiceAccount");
pub const JOB: GroupKind<'static> = GroupKind::new("batch", "Job");

/// `Kind`, or `Kind.group` beside the core group: `Deployment.apps`.
impl fmt::Display for GroupKind<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind)?;
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        Ok(())
    }
}

/// A kind with its API version, as an Activation lists the kinds of its
/// build: `apps/v1/Deployment`, `v1/ConfigMap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupVersionKind<'a> {
    /// `group/version`, or `version` for the core group.
    pub api_version: &'a str,
    pub kind: &'a str,
}

impl<'a> GroupVersionKind<'a> {
    pub const fn new(api_version: &'a str, kind: &'a str) -> Self {
        GroupVersionKind { api_version, kind }
    }

    /// Reads a recorded `apiVersion/Kind`; None when it has no `/`.
    pub fn parse(text: &'a str) -> Option<Self> {
        let (api_version, kind) = text.rsplit_once('/')?;
        (!api_version.is_empty() && !kind.is_empty())
            .then_some(GroupVersionKind { api_version, kind })
    }

    /// The API group: `apps` of `apps/v1`, `""` of `v1`.
    pub fn group(&self) -> &'a str {
        self.api_version
            .split_once('/')
            .map_or("", |(group, _)| group)
    }

    pub fn group_kind(&self) -> GroupKind<'a> {
        GroupKind::new(self.group(), self.kind)
    }
}

/// The recorded form, `apiVersion/Kind`, that [`GroupVersionKind::parse`]
/// reads back.
impl fmt::Display for GroupVersionKind<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.api_version, self.kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ObjectKey;

    #[test]
    fn recorded_kinds_read_back_as_written() {
        let deployment = GroupVersionKind::parse("apps/v1/Deployment").expect("a kind");
        assert_eq!(
            (deployment.api_version, deployment.kind, deployment.group()),
            ("apps/v1", "Deployment", "apps")
        );
        assert_eq!(deployment.to_string(), "apps/v1/Deployment");
        assert_eq!(deployment.group_kind().to_string(), "Deployment.apps");
        let config_map = GroupVersionKind::parse("v1/ConfigMap").expect("a kind");
        assert_eq!(config_map.group_kind(), CONFIG_MAP);
        assert_eq!(config_map.group_kind().to_string(), "ConfigMap");
        for bad in ["", "ConfigMap", "v1/", "/ConfigMap"] {
            assert_eq!(GroupVersionKind::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_kind_matches_its_constant() {
        let key = ObjectKey {
            group: "apiextensions.k8s.io".into(),
            kind: "CustomResourceDefinition".into(),
            namespace: None,
            name: "widgets.example.com".into(),
        };
        let matched = match key.group_kind() {
            CUSTOM_RESOURCE_DEFINITION => "crd",
            NAMESPACE => "namespace",
            _ => "other",
        };
        assert_eq!(matched, "crd");
    }
}

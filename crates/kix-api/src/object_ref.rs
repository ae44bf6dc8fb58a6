//! A reference to one Kubernetes object, as kix records it.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::labels::{group_of, owner_value};

/// One Kubernetes object, by apiVersion, kind, namespace and name.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// The object's apiVersion (`group/version`, or `version` for the core group).
    pub api_version: String,
    /// The object's kind.
    pub kind: String,
    /// The object's namespace; absent for cluster-scoped objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The object's name.
    pub name: String,
}

impl ObjectRef {
    pub fn new(
        api_version: impl Into<String>,
        kind: impl Into<String>,
        namespace: Option<impl Into<String>>,
        name: impl Into<String>,
    ) -> Self {
        Self {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: namespace.map(Into::into),
            name: name.into(),
        }
    }

    /// The API group (`""` for the core group).
    pub fn group(&self) -> &str {
        group_of(&self.api_version)
    }

    /// The [`LABEL_OWNER`](crate::LABEL_OWNER) value of this object.
    pub fn owner_value(&self) -> String {
        owner_value(
            self.group(),
            &self.kind,
            self.namespace.as_deref(),
            &self.name,
        )
    }
}

/// `Kind/name` or `Kind namespace/name`, with the group when there is one
/// (`Deployment.apps default/web`), as people read it in messages.
impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let group = self.group();
        if group.is_empty() {
            write!(f, "{}", self.kind)?;
        } else {
            write!(f, "{}.{group}", self.kind)?;
        }
        match &self.namespace {
            Some(ns) => write!(f, " {ns}/{}", self.name),
            None => write!(f, "/{}", self.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_and_group() {
        let deploy = ObjectRef::new("apps/v1", "Deployment", Some("default"), "web");
        assert_eq!(deploy.group(), "apps");
        assert_eq!(deploy.to_string(), "Deployment.apps default/web");
        let ns = ObjectRef::new("v1", "Namespace", None::<String>, "apps");
        assert_eq!(ns.group(), "");
        assert_eq!(ns.to_string(), "Namespace/apps");
    }

    #[test]
    fn owner_value_ignores_version() {
        let v1 = ObjectRef::new("apps/v1", "Deployment", Some("default"), "web");
        let beta = ObjectRef::new("apps/v1beta2", "Deployment", Some("default"), "web");
        assert_eq!(v1.owner_value(), beta.owner_value());
        assert_eq!(
            v1.owner_value(),
            owner_value("apps", "Deployment", Some("default"), "web")
        );
    }

    #[test]
    fn serde_shape() {
        let ns = ObjectRef::new("v1", "Namespace", None::<String>, "apps");
        assert_eq!(
            serde_json::to_value(&ns).ok(),
            Some(serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "name": "apps"}))
        );
    }
}

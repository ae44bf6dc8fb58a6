//! Package migrations as declared in `package.json`.
//!
//! ```json
//! "migrations": [{
//!   "from": "1.1.0", "to": "2.0.0",
//!   "description": "db moves to a StatefulSet",
//!   "actions": [
//!     {"action": "delete",   "object": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "db"}},
//!     {"action": "recreate", "object": {"kind": "StatefulSet", "namespace": "apps", "name": "db"}},
//!     {"action": "adopt",    "object": {"kind": "Secret", "name": "db-password"}}
//!   ]
//! }]
//! ```
//!
//! A migration applies when the installed version of the package moves
//! across the half-open range `[from, to)` (versions compared with
//! [`compare_versions`](crate::compare_versions)); `from` must be lower than
//! `to`, and the ranges of one package must not overlap. `from` may also be a
//! [`VersionRange`](crate::VersionRange) (`">=1.0.0 <2.0.0"`, `"1.x"`): the
//! migration then covers that range below `to`.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::object::group_of;

/// One migration of a package.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Migration {
    pub from: String,
    pub to: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub actions: Vec<MigrationAction>,
}

/// One action of a migration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MigrationAction {
    pub action: ActionKind,
    pub object: MigrationRef,
}

/// What a migration does with an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActionKind {
    /// Delete the live object and create it from the build (for changes to
    /// immutable fields). Must name an object of the build.
    Recreate,
    /// Delete the live object; it is no longer (or not yet) in the build.
    Delete,
    /// Take over an existing object kix does not own. Must name an object of
    /// the build.
    Adopt,
}

impl fmt::Display for ActionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ActionKind::Recreate => "recreate",
            ActionKind::Delete => "delete",
            ActionKind::Adopt => "adopt",
        })
    }
}

/// A reference to an object from a migration action.
///
/// `apiVersion` and `namespace` may be omitted. For `recreate` and `adopt`,
/// the reader resolves the reference against the package's objects and fills
/// both in from the object it names (a reference without namespace names an
/// object in the package's namespace, or a cluster-scoped one). `delete`
/// references are kept as written: the engine resolves them with discovery.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MigrationRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
}

impl MigrationRef {
    /// The API group, when `apiVersion` is given.
    pub fn group(&self) -> Option<&str> {
        self.api_version.as_deref().and_then(group_of)
    }
}

/// Like [`ObjectKey`](crate::ObjectKey): `Kind[.group] [namespace]/name`.
impl fmt::Display for MigrationRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.kind)?;
        if let Some(group) = self.group().filter(|g| !g.is_empty()) {
            write!(f, ".{group}")?;
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
    fn parses_the_documented_form() {
        let m: Migration = serde_json::from_str(
            r#"{"from":"1.1.0","to":"2.0.0","actions":[
                {"action":"recreate","object":{"kind":"StatefulSet","name":"db","namespace":"apps"}},
                {"action":"delete","object":{"apiVersion":"apps/v1","kind":"Deployment","name":"db"}}]}"#,
        )
        .expect("valid");
        assert_eq!(m.description, "");
        assert_eq!(m.actions[0].action, ActionKind::Recreate);
        assert_eq!(m.actions[0].object.to_string(), "StatefulSet apps/db");
        assert_eq!(m.actions[1].object.to_string(), "Deployment.apps/db");
        let back = serde_json::to_value(&m.actions[0]).expect("serialize");
        assert_eq!(
            back,
            serde_json::json!({"action":"recreate","object":{"kind":"StatefulSet","namespace":"apps","name":"db"}})
        );
        assert!(
            serde_json::from_str::<MigrationAction>(
                r#"{"action":"replace","object":{"kind":"A","name":"b"}}"#
            )
            .is_err()
        );
    }
}

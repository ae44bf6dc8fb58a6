//! `PackageInstance` (`packageinstances.kix.run`): one package installed by one
//! Kix cluster.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::labels::{LABEL_CLUSTER, LABEL_MANAGED_BY, LABEL_PACKAGE, MANAGED_BY_VALUE};

/// Which package a Kix cluster installed, at which version, by which
/// activation.
// kube's structured printcolumn(...) repeats keys clippy reads as duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "kix.run",
    version = "v1alpha1",
    kind = "PackageInstance",
    plural = "packageinstances",
    singular = "packageinstance",
    shortname = "kpi",
    category = "kix",
    status = "PackageInstanceStatus",
    derive = "PartialEq",
    doc = "One package installed by one Kix cluster: version, installing activation, phase and health. Named <cluster>.<package>.",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.cluster"),
    printcolumn(name = "Package", type_ = "string", json_path = ".spec.package"),
    printcolumn(name = "Version", type_ = "string", json_path = ".spec.version"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Activation",
        type_ = "string",
        json_path = ".spec.activation",
        priority = 1
    ),
    printcolumn(
        name = "Health",
        type_ = "string",
        json_path = ".status.health",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
pub struct PackageInstanceSpec {
    /// The Kix cluster that installed the package.
    pub cluster: String,
    /// The package name.
    pub package: String,
    /// The installed version.
    pub version: String,
    /// The Activation record that installed this version.
    pub activation: String,
}

/// Phase and health of an installed package.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::k8s_formats)]
pub struct PackageInstanceStatus {
    /// Pending, Installing, Upgrading, Ready, Degraded, Failed or Removing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<PackagePhase>,
    /// Human-readable detail for the phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Number of objects in the package.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<u32>,
    /// Number of the package's objects that are Ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<u32>,
    /// Summary of the package's health (for example `Ready` or `Progressing: 2/3 replicas available`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<String>,
    /// Conditions; `Ready` with a reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The phase of an installed package: Pending → Installing | Upgrading →
/// Ready | Degraded | Failed → Removing.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
pub enum PackagePhase {
    /// Recorded, not started.
    Pending,
    /// First install in progress.
    Installing,
    /// Moving to a new version.
    Upgrading,
    /// Installed and healthy.
    Ready,
    /// Installed, but not all objects are healthy.
    Degraded,
    /// The install or upgrade failed.
    Failed,
    /// The package's objects are being deleted.
    Removing,
}

impl PackagePhase {
    pub const ALL: [PackagePhase; 7] = [
        PackagePhase::Pending,
        PackagePhase::Installing,
        PackagePhase::Upgrading,
        PackagePhase::Ready,
        PackagePhase::Degraded,
        PackagePhase::Failed,
        PackagePhase::Removing,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PackagePhase::Pending => "Pending",
            PackagePhase::Installing => "Installing",
            PackagePhase::Upgrading => "Upgrading",
            PackagePhase::Ready => "Ready",
            PackagePhase::Degraded => "Degraded",
            PackagePhase::Failed => "Failed",
            PackagePhase::Removing => "Removing",
        }
    }
}

impl fmt::Display for PackagePhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PackageInstance {
    /// The record name of `package` installed by `cluster`: `<cluster>.<package>`.
    pub fn name_for(cluster: &str, package: &str) -> String {
        format!("{cluster}.{package}")
    }

    /// A new record named `<cluster>.<package>`, labelled with its cluster,
    /// package and `app.kubernetes.io/managed-by: kix`, without status.
    pub fn new_record(spec: PackageInstanceSpec) -> Self {
        let labels = BTreeMap::from([
            (LABEL_CLUSTER.to_owned(), spec.cluster.clone()),
            (LABEL_PACKAGE.to_owned(), spec.package.clone()),
            (LABEL_MANAGED_BY.to_owned(), MANAGED_BY_VALUE.to_owned()),
        ]);
        let name = Self::name_for(&spec.cluster, &spec.package);
        let mut instance = PackageInstance::new(&name, spec);
        instance.metadata = ObjectMeta {
            labels: Some(labels),
            ..instance.metadata
        };
        instance
    }

    /// The Kix cluster of this record: the `kix.run/cluster` label, or
    /// `spec.cluster` when the label is missing or empty.
    pub fn cluster_name(&self) -> &str {
        self.metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get(LABEL_CLUSTER))
            .map(String::as_str)
            .filter(|cluster| !cluster.is_empty())
            .unwrap_or(&self.spec.cluster)
    }

    /// The recorded phase; `None` before anything wrote a status.
    pub fn phase(&self) -> Option<PackagePhase> {
        self.status.as_ref().and_then(|status| status.phase)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec() -> PackageInstanceSpec {
        PackageInstanceSpec {
            cluster: "prod".to_owned(),
            package: "ingress".to_owned(),
            version: "4.11.2".to_owned(),
            activation: "prod-3".to_owned(),
        }
    }

    #[test]
    fn name_and_labels() {
        assert_eq!(PackageInstance::name_for("prod", "ingress"), "prod.ingress");
        let pi = PackageInstance::new_record(spec());
        assert_eq!(pi.metadata.name.as_deref(), Some("prod.ingress"));
        let labels = pi.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels.get(LABEL_CLUSTER).map(String::as_str), Some("prod"));
        assert_eq!(
            labels.get(LABEL_PACKAGE).map(String::as_str),
            Some("ingress")
        );
        assert_eq!(pi.cluster_name(), "prod");
        assert_eq!(pi.phase(), None);
    }

    #[test]
    fn cluster_label_wins_over_spec() {
        let mut pi = PackageInstance::new("x.ingress", spec());
        assert_eq!(pi.cluster_name(), "prod");
        pi.metadata.labels = Some(BTreeMap::from([(
            LABEL_CLUSTER.to_owned(),
            "apps".to_owned(),
        )]));
        assert_eq!(pi.cluster_name(), "apps");
    }

    #[test]
    fn phase_serde_round_trip() {
        for phase in PackagePhase::ALL {
            assert_eq!(
                serde_json::to_value(phase).ok(),
                Some(json!(phase.as_str()))
            );
            let back: Option<PackagePhase> = serde_json::from_value(json!(phase.as_str())).ok();
            assert_eq!(back, Some(phase));
            assert_eq!(phase.to_string(), phase.as_str());
        }
    }

    #[test]
    fn wire_format() {
        let mut pi = PackageInstance::new_record(spec());
        pi.status = Some(PackageInstanceStatus {
            phase: Some(PackagePhase::Ready),
            resources: Some(5),
            ready: Some(5),
            health: Some("Ready".to_owned()),
            ..PackageInstanceStatus::default()
        });
        let value = serde_json::to_value(&pi).unwrap_or_default();
        assert_eq!(
            value["spec"],
            json!({"cluster": "prod", "package": "ingress", "version": "4.11.2", "activation": "prod-3"})
        );
        assert_eq!(
            value["status"],
            json!({"phase": "Ready", "resources": 5, "ready": 5, "health": "Ready"})
        );
        let back: PackageInstance = serde_json::from_value(value).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, pi);
    }
}

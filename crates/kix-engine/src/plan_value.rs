//! The plan as a value: [`Plan`], what it crosses (migrations, CRD
//! upgrades, kix's own CRDs) and what a user accepts of it. `kix plan`
//! prints it, `kix deploy` executes it, the operator reconciles with it,
//! the gates ([`crate::gates`]) judge it, the seal ([`crate::seal`])
//! digests it.
//!
//! Values only: no client, no I/O (tests/architecture.rs keeps it so).

use std::collections::BTreeSet;

use kix_manifest::{MigrationAction, ObjectKey};
use serde::Serialize;

use crate::budget::BudgetCheck;
use crate::desired::Desired;
use crate::plan_object::{Action, Counts, NOTE_SHARED, PackagePlan, PlanOptions, PlannedObject};

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub cluster: String,
    pub store_path: String,
    pub current_activation: Option<String>,
    pub current_path: Option<String>,
    pub current_phase: Option<kix_api::Phase>,
    /// The ServiceAccount the build acts as (`settings.serviceAccount`):
    /// recorded in the Activation, impersonated by the executor's client.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_account: Option<kix_api::ServiceAccountRef>,
    /// The commit the build was made from (`revision` in its `kix.json`):
    /// recorded as the Activation's `spec.source.revision`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// The name the deploy of this plan records (`<cluster>-<n>`); applied
    /// objects name it in their activations annotation.
    pub activation: String,
    /// kix's own CRDs: installed or upgraded before anything else.
    pub kix_crds: CrdState,
    pub packages: Vec<PackagePlan>,
    /// Objects the build no longer has (delete, or keep with the reason).
    pub prune: Vec<PlannedObject>,
    pub counts: Counts,
    /// Digest of every action of the plan ([`crate::seal::digest`]),
    /// recorded in the receipt.
    pub digest: String,
    /// Kinds (apiVersion/Kind) of the build, recorded in the Activation so a
    /// later prune knows which kinds to list.
    pub kinds: Vec<String>,
    /// The plan's deletions weighed against the Kix cluster's deletion budget.
    pub deletion_budget: BudgetCheck,
    /// The package migrations this deploy crosses, in the order they run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub migrations: Vec<PlannedMigration>,
    /// The CRDs the deploy changes: per version changes, stored versions
    /// dropped or no longer served ([`crate::crd_upgrade`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub crd_upgrades: Vec<CrdUpgrade>,
    #[serde(skip)]
    pub desired: Vec<Desired>,
    /// The options it was planned with: an executor re-plans with them.
    pub options: PlanOptions,
    /// Whether the live objects were listed by the Kix cluster's label
    /// ([`crate::records::objects_labelled`]): a deploy of the plan keeps
    /// every object of the cluster labelled.
    #[serde(skip)]
    pub labelled: bool,
}

impl Plan {
    /// Whether executing the plan changes anything in the cluster.
    pub fn has_changes(&self) -> bool {
        self.kix_crds != CrdState::Current
            || !self.migrations.is_empty()
            || self
                .objects()
                .any(|o| o.action.writes() && o.action != Action::Keep)
            || self
                .prune
                .iter()
                .any(|o| o.action == Action::Keep && o.note.as_deref() == Some(NOTE_SHARED))
    }

    /// Leaves the objects of `keys` that the plan would create or update as
    /// they are this round (the operator's back-off and holds): they become
    /// Unchanged, the counts follow, and a CRD among them is no upgrade.
    pub fn leave_as_is(&mut self, keys: &BTreeSet<ObjectKey>) {
        self.crd_upgrades.retain(|u| !keys.contains(&u.key));
        for o in self.packages.iter_mut().flat_map(|p| &mut p.objects) {
            if !keys.contains(&o.key) {
                continue;
            }
            match o.action {
                Action::Update => self.counts.update -= 1,
                Action::Create => self.counts.create -= 1,
                _ => continue,
            }
            self.counts.unchanged += 1;
            o.action = Action::Unchanged;
        }
    }

    pub fn objects(&self) -> impl Iterator<Item = &PlannedObject> {
        self.packages
            .iter()
            .flat_map(|p| &p.objects)
            .chain(&self.prune)
    }

    /// What `--accept-migrations` must accept: migrations, replaces,
    /// adoptions and destructive deletions.
    pub fn needs_acceptance(&self) -> Vec<String> {
        let migrations = acceptance(&self.migrations);
        let objects = self
            .objects()
            .filter(|o| {
                matches!(o.action, Action::Replace | Action::Adopt)
                    || (o.action == Action::Delete && o.destructive)
            })
            .map(|o| match o.action {
                Action::Replace if o.fields.is_empty() => format!(
                    "replace {} ({})",
                    o.key,
                    o.note.as_deref().unwrap_or("recreate")
                ),
                Action::Replace => format!("replace {} ({})", o.key, o.fields.join(", ")),
                Action::Adopt => format!("adopt {}", o.key),
                _ => match o.takes_with_it {
                    Some(n) => format!("delete {} (destructive: takes {n} objects with it)", o.key),
                    None => format!("delete {} (destructive)", o.key),
                },
            });
        let crds = self.crd_upgrades.iter().flat_map(CrdUpgrade::acceptance);
        migrations.into_iter().chain(crds).chain(objects).collect()
    }

    /// The upgrade of the CRD `key` names, when the plan changes it.
    pub fn crd_upgrade(&self, key: &ObjectKey) -> Option<&CrdUpgrade> {
        self.crd_upgrades.iter().find(|u| &u.key == key)
    }

    pub fn conflicts(&self) -> Vec<String> {
        self.objects()
            .filter(|o| o.action == Action::Conflict)
            .map(|o| format!("{} ({})", o.key, o.fields.join("; ")))
            .collect()
    }

    /// The conflicts a deploy refuses: all of them without `force`, those
    /// with other Kix clusters when `yield_to_kix_clusters` even with it.
    pub fn refused_conflicts(&self, force: bool, yield_to_kix_clusters: bool) -> Vec<String> {
        self.objects()
            .filter(|o| o.action == Action::Conflict)
            .filter(|o| !force || (yield_to_kix_clusters && !o.contenders.is_empty()))
            .map(|o| format!("{} ({})", o.key, o.fields.join("; ")))
            .collect()
    }

    pub fn desired_for(&self, key: &ObjectKey) -> Option<&Desired> {
        self.desired.iter().find(|d| &d.key == key)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum CrdState {
    Missing,
    Outdated,
    Current,
}

/// One migration a deploy crosses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedMigration {
    pub package: String,
    /// The version the package's PackageInstance records as installed.
    pub installed: String,
    /// The build's version of the package.
    pub version: String,
    /// The migration's `from` (a version or range) and `to`, as declared.
    pub from: String,
    pub to: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// In order. Object references without namespace name one in the
    /// package's namespace (unless the kind is a well-known cluster-scoped one).
    pub actions: Vec<MigrationAction>,
    /// The package's default namespace.
    #[serde(skip)]
    pub namespace: Option<String>,
}

impl PlannedMigration {
    /// `1.0.0 -> 2.0.0`.
    pub fn label(&self) -> String {
        format!("{} -> {}", self.from, self.to)
    }
}

/// What `--accept-migrations` accepts of each migration: `migration web
/// 1.0.0 -> 2.0.0: recreate StatefulSet apps/db, adopt ConfigMap apps/x`.
pub fn acceptance(migrations: &[PlannedMigration]) -> Vec<String> {
    migrations
        .iter()
        .map(|m| {
            let actions: Vec<String> = m
                .actions
                .iter()
                .map(|a| format!("{} {}", a.action, a.object))
                .collect();
            let mut line = format!("migration {} {}", m.package, m.label());
            if !actions.is_empty() {
                line.push_str(": ");
                line.push_str(&actions.join(", "));
            }
            line
        })
        .collect()
}

/// One CRD of the build that differs from its live version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CrdUpgrade {
    pub key: ObjectKey,
    /// The live CRD's `status.storedVersions`.
    pub stored_versions: Vec<String>,
    /// The build's storage version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage_version: Option<String>,
    /// Custom resources of the CRD that exist (all namespaces); counted only
    /// when a change is destructive.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub objects: Option<u32>,
    /// Per version: added, removed, served or storage changed, and the
    /// schema's property changes.
    pub changes: Vec<SchemaChange>,
    /// Changes that can lose stored objects.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub destructive: Vec<VersionHazard>,
}

/// One change of a CRD version: `v1: spec.replicas: type integer → string`,
/// `v1beta1: removed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SchemaChange {
    pub version: String,
    /// The field the property describes (`spec.ports[].name`; `.*` for
    /// additionalProperties); empty for a change of the version itself.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub path: String,
    pub change: String,
}

impl std::fmt::Display for SchemaChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}: {}", self.version, self.change)
        } else {
            write!(f, "{}: {}: {}", self.version, self.path, self.change)
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Hazard {
    /// Removed from `spec.versions` while in `status.storedVersions`: the
    /// apiserver refuses the update.
    Removed,
    /// `served: false` while objects may be stored in it.
    NotServed,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VersionHazard {
    pub version: String,
    pub hazard: Hazard,
}

impl CrdUpgrade {
    /// The destructive actions a user confirms, one per version (stable
    /// text: the object count is not part of it).
    pub fn actions(&self) -> impl Iterator<Item = String> + '_ {
        self.destructive.iter().map(|h| match h.hazard {
            Hazard::Removed => format!("drop stored version {} of {}", h.version, self.key),
            Hazard::NotServed => {
                format!("stop serving stored version {} of {}", h.version, self.key)
            }
        })
    }

    /// What `--accept-migrations` accepts, with the object count.
    pub fn acceptance(&self) -> Vec<String> {
        let objects = self.objects_text();
        self.actions()
            .map(|a| format!("{a} (destructive: {objects})"))
            .collect()
    }

    /// `3 widgets.example.com objects exist, stored versions v1alpha1`.
    pub fn objects_text(&self) -> String {
        let n = self.objects.unwrap_or(0);
        format!(
            "{n} {} object{} exist, stored versions {}",
            self.key.name,
            if n == 1 { "" } else { "s" },
            self.stored_versions.join(", ")
        )
    }

    /// Why the apiserver would refuse this upgrade, with what to do: a
    /// stored version removed from `spec.versions`.
    pub fn refusal(&self) -> Option<String> {
        let removed: Vec<&str> = self
            .destructive
            .iter()
            .filter(|h| h.hazard == Hazard::Removed)
            .map(|h| h.version.as_str())
            .collect();
        if removed.is_empty() {
            return None;
        }
        // What storedVersions holds once every object is rewritten in the
        // build's storage version.
        let storage = self
            .storage_version
            .as_deref()
            .unwrap_or("<storage version>");
        let mut kept: Vec<&str> = self
            .stored_versions
            .iter()
            .map(String::as_str)
            .filter(|v| !removed.contains(v))
            .collect();
        if !kept.contains(&storage) {
            kept.push(storage);
        }
        let name = &self.key.name;
        let versions = removed.join(", ");
        Some(format!(
            "{key}: the build removes version {versions}, which status.storedVersions still lists \
             ({objects}); the apiserver refuses to remove a stored version. To drop it: \
             (1) deploy a build that keeps {versions} (served or not) and makes {storage} the \
             storage version; (2) rewrite every object of the CRD so it is stored in {storage} \
             (kubectl get {name} -A -o json | kubectl replace -f -); (3) remove {versions} from \
             the CRD's status.storedVersions (kubectl patch crd {name} --subresource=status \
             --type=merge -p '{{\"status\":{{\"storedVersions\":{kept:?}}}}}'); (4) deploy \
             this build again",
            key = self.key,
            objects = self.objects_text(),
        ))
    }
}

/// Upgrades the apiserver would refuse (a stored version removed), each
/// with what to do instead: a deploy stops before changing anything.
pub fn refusals(upgrades: &[CrdUpgrade]) -> Vec<String> {
    upgrades.iter().filter_map(CrdUpgrade::refusal).collect()
}

/// The ServiceAccount a build's settings name, as a record names it: whom
/// the build acts as.
pub fn declared_account(settings: &kix_manifest::Settings) -> Option<kix_api::ServiceAccountRef> {
    settings
        .service_account
        .as_ref()
        .map(|account| kix_api::ServiceAccountRef {
            namespace: account.namespace.clone(),
            name: account.name.clone(),
        })
}

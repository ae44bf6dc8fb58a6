//! What a plan does to each object: its [`Action`], the [`PlannedObject`]
//! with the reasons and fields behind it, per package, the [`Counts`], and
//! the [`PlanOptions`] it was made with.
//!
//! Values only: no client, no I/O (tests/architecture.rs keeps it so).
//! The planner (`plan.rs`) makes them from what it reads of the cluster;
//! the stages act on them; the gates judge them.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use kix_api::LEGACY_FIELD_MANAGER;
use kix_manifest::ObjectKey;
use serde::Serialize;

use crate::diff::FieldChange;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, PartialOrd, Ord, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Create,
    Update,
    Unchanged,
    Replace,
    Adopt,
    Conflict,
    Delete,
    /// Not deleted although the build dropped it (shared, prune disabled).
    Keep,
    /// Dropped by the build and already being deleted (a finalizer holds
    /// it): not sent DELETE again, waited for.
    Deleting,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::Update => "update",
            Action::Unchanged => "unchanged",
            Action::Replace => "replace",
            Action::Adopt => "adopt",
            Action::Conflict => "conflict",
            Action::Delete => "delete",
            Action::Keep => "keep",
            Action::Deleting => "deleting",
        }
    }

    pub fn writes(self) -> bool {
        !matches!(self, Action::Unchanged | Action::Deleting)
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedObject {
    pub key: ObjectKey,
    pub api_version: String,
    pub package: String,
    pub action: Action,
    /// Field-level changes (update, adopt, replace); Secret values redacted.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<FieldChange>,
    /// Immutable fields (replace) or contested fields (conflict).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<String>,
    /// Deleting it loses data or other objects (CRD, Namespace, PVC).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub destructive: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// A Helm hook this deploy runs: for which event, at which weight
    /// ([`crate::hooks`]); what the apply stage follows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hook: Option<HookRun>,
    /// The server's warnings on its dry-run (deprecated APIs, ignored values).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Other Kix clusters whose fields a conflict contests.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub contenders: Vec<String>,
    /// A Namespace or CRD deletion: how many objects go with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub takes_with_it: Option<u32>,
    /// Being deleted: since when, and the finalizers it waits for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deletion: Option<Deletion>,
    /// The activations annotation the object will carry (apply) or keep (trim).
    #[serde(skip)]
    pub activations: BTreeSet<String>,
    /// The take-over from the single `kix` field manager of earlier versions.
    #[serde(skip)]
    pub legacy: Legacy,
}

/// When a planned Helm hook runs: its event (which gives its phase) and
/// weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct HookRun {
    pub event: kix_manifest::helm::HookEvent,
    pub weight: i64,
}

#[derive(Debug, Clone, Serialize)]
pub struct PackagePlan {
    pub name: String,
    pub version: String,
    /// The package's handoff rules: fields kix leaves to other managers.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub handoff: Vec<String>,
    pub objects: Vec<PlannedObject>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Counts {
    pub create: u32,
    pub update: u32,
    pub unchanged: u32,
    pub replace: u32,
    pub adopt: u32,
    pub conflict: u32,
    pub delete: u32,
    pub keep: u32,
    #[serde(skip_serializing_if = "is_zero")]
    pub deleting: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

pub const NOTE_SHARED: &str =
    "another Kix cluster's current build has it: only this cluster's entry is removed";
pub const NOTE_PRUNE_DISABLED: &str = "annotated kix.run/prune: disabled";
/// An object Helm's release would keep: prune keeps it too.
pub const NOTE_HELM_KEEP: &str = "annotated helm.sh/resource-policy: keep";
/// A Helm hook the build dropped: Helm never tracks hooks as a release's
/// objects, so kix leaves it where a run left it.
pub const NOTE_HELM_HOOK: &str = "a Helm hook: never pruned";
/// Prefix of the note of an object `--reconcile` found drifted from the build
/// it was applied from. Its re-apply takes the drifted fields back from
/// whichever manager changed them (server-side apply force): undoing
/// out-of-band edits is what reconcile is for.
pub const NOTE_DRIFTED: &str = "drifted from the build";
/// A desired object still being deleted: the deploy waits, then creates it.
pub const NOTE_RECREATED: &str = "created again once it is gone";
/// An unchanged object without its Kix cluster's label (applied by an
/// older kix): applied again, which adds it.
pub const NOTE_UNLABELLED: &str = "its Kix cluster's label (cluster.kix.run/<cluster>) is added: kix finds a Kix cluster's objects by it";

impl PlannedObject {
    /// `--reconcile` found the live object drifted from its unchanged build.
    pub fn is_drift(&self) -> bool {
        self.note
            .as_deref()
            .is_some_and(|n| n.starts_with(NOTE_DRIFTED))
    }
}

#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PlanOptions {
    /// Compare every object with its live state instead of trusting digests.
    pub reconcile: bool,
    /// Take fields other managers own (server-side apply force).
    pub force_conflicts: bool,
    /// Never take a field another Kix cluster set, even with
    /// `force_conflicts`: the operator's setting (it has no user's consent).
    pub yield_to_kix_clusters: bool,
    /// Plan deletions of what the build dropped.
    pub prune: bool,
    /// The record the apply writes (the operator's existing record); default:
    /// the cluster's next `<cluster>-<n>`.
    #[serde(skip)]
    pub activation: Option<String>,
    /// Plan only these objects, each read by name, and take the rest of the
    /// build as unchanged: the operator's repair of the objects its watches
    /// saw change. Its periodic resync plans everything.
    #[serde(skip)]
    pub only: Option<BTreeSet<ObjectKey>>,
}

/// The note of an object whose server-side dry-run the apiserver refused
/// for lack of permission; the apiserver's message (user, verb, resource)
/// follows it.
pub const NOTE_NO_PERMISSION: &str = "not checked by server-side dry-run: no permission to patch";

/// An object whose deletion was accepted but which still exists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Deletion {
    /// Its deletionTimestamp.
    pub since: Option<DateTime<Utc>>,
    /// The finalizers it waits for.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub finalizers: Vec<String>,
}

impl Deletion {
    /// The deletion state of an object with this metadata: None unless it
    /// has a deletionTimestamp.
    pub fn of(deletion_timestamp: Option<&str>, finalizers: &[String]) -> Option<Deletion> {
        let since = deletion_timestamp?;
        Some(Deletion {
            since: DateTime::parse_from_rfc3339(since)
                .ok()
                .map(|t| t.with_timezone(&Utc)),
            finalizers: finalizers.to_vec(),
        })
    }

    /// `being deleted, waits for a, b`, as the plan notes it (no clock in
    /// it: the plan's digest must not change while it waits).
    pub fn describe(&self) -> String {
        if self.finalizers.is_empty() {
            "being deleted".to_string()
        } else {
            format!("being deleted, waits for {}", self.finalizers.join(", "))
        }
    }

    /// How long it has waited (`3m20s`), when its deletionTimestamp is known.
    pub fn waited(&self) -> Option<String> {
        let secs = (Utc::now() - self.since?).num_seconds().max(0);
        Some(human_duration(secs))
    }
}

/// `45s`, `3m20s`, `2h5m`, `3d4h`: how long something has waited.
pub fn human_duration(secs: i64) -> String {
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{}s", s / 60, s % 60),
        s if s < 86400 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        s => format!("{}d{}h", s / 86400, (s % 86400) / 3600),
    }
}

/// What the next apply of an object does about [`LEGACY_FIELD_MANAGER`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Legacy {
    /// Not applied by it (or this cluster already took over).
    #[default]
    None,
    /// Apply as this cluster's manager; `kix` keeps its fields because a Kix
    /// cluster sharing the object has not taken over yet.
    TakeOver,
    /// Apply as this cluster's manager, then `kix` gives up its fields.
    TakeOverAndRelease,
}

impl Legacy {
    /// From the object's appliers (managers with an Apply entry) and the
    /// Kix clusters that share it besides `cluster`.
    pub fn of(appliers: &[String], cluster: &str, others: &[String]) -> Legacy {
        let applies = |m: &str| appliers.iter().any(|a| a == m);
        if !applies(LEGACY_FIELD_MANAGER) || applies(&kix_api::field_manager(cluster)) {
            Legacy::None
        } else if others.iter().all(|c| applies(&kix_api::field_manager(c))) {
            Legacy::TakeOverAndRelease
        } else {
            Legacy::TakeOver
        }
    }
}

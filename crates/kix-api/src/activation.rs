//! `Activation` (`activations.kix.run`): one deploy of one Kix cluster's build.

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::admission::ServiceAccountRef;
use crate::labels::{LABEL_CLUSTER, LABEL_MANAGED_BY, MANAGED_BY_VALUE};
use crate::object_ref::ObjectRef;

/// What an activation deploys: the Kix cluster, the build's store path, the
/// receipt of the deploy and the engine that applies it.
// kube's structured printcolumn(...) repeats keys clippy reads as duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "kix.run",
    version = "v1alpha1",
    kind = "Activation",
    plural = "activations",
    singular = "activation",
    shortname = "act",
    category = "kix",
    status = "ActivationStatus",
    derive = "PartialEq",
    doc = "A deploy of one Kix cluster's build: the Nix store path, the deploy receipt and the phase. Named <cluster>-<sequence>.",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.cluster"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Path", type_ = "string", json_path = ".spec.source.path"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.message",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ActivationSpec {
    /// The Kix cluster this activation deploys. The kix.run/cluster label wins
    /// when both are set.
    pub cluster: String,
    /// The build this activation deploys.
    pub source: Source,
    /// Who deployed what, from where, when, and with which plan.
    pub receipt: Receipt,
    /// Which engine applies this activation: `local` (the CLI) or `operator`
    /// (the in-cluster operator, which also owns the record's finalizer).
    pub engine: Engine,
    /// The ServiceAccount every request made for this activation acts as
    /// (impersonated), as the build declares it. Absent: the engine's own
    /// credentials, or the operator's `--default-service-account`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<ServiceAccountRef>,
}

/// The build an activation deploys.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.signedBy) || has(self.cache)",
    "message": "spec.source.signedBy names the key that signed the build in spec.source.cache: set cache too",
}]))]
pub struct Source {
    /// The build's Nix store path (`/nix/store/<hash>-<name>`).
    pub path: String,
    /// The flake reference the build came from, when it came from a flake.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flake: Option<String>,
    /// The source revision (for example the git commit), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// The Nix binary cache the build's closure was published to
    /// (`settings.cache.url`), where an executor without the build fetches
    /// it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = "^(file|http|https|s3)://[^\\s]+$", "maxLength" = 2048))]
    pub cache: Option<String>,
    /// The name of the key that signed the closure in `cache` (the part of
    /// a Nix key before `:`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = "^[^:\\s]+$", "maxLength" = 253))]
    pub signed_by: Option<String>,
}

/// Who deployed what, from where, when, and with which plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::k8s_formats)]
pub struct Receipt {
    /// The user who deployed.
    pub user: String,
    /// The host the deploy ran from.
    pub host: String,
    /// The kix version that planned the deploy.
    pub kix_version: String,
    /// When the deploy was recorded (RFC 3339).
    #[schemars(schema_with = "crate::schema::date_time")]
    pub time: DateTime<Utc>,
    /// Digest of the plan the user confirmed.
    pub plan_digest: String,
    /// The plan's counts by action.
    #[serde(default)]
    pub counts: Counts,
    /// The destructive actions of the confirmed plan. An executor that
    /// re-plans and finds one not accepted here changes nothing.
    #[serde(default, skip_serializing_if = "Accepted::is_empty")]
    pub accepted: Accepted,
    /// For a rollback: the activation whose build this one restored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_from: Option<String>,
    /// How many deletions the user accepted beyond the Kix cluster's
    /// deletion budget (`--accept-deletions` accepts the plan's count,
    /// `--max-deletions N` accepts N): a count, so the record stays small
    /// however many objects the deploy deletes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted_deletions: Option<u32>,
    /// The confirmed plan is a saved plan (`kix deploy --plan`): its first
    /// apply runs only a plan with `planDigest`, re-checked right before it
    /// acts; otherwise the record ends Failed and nothing changes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub saved_plan: bool,
}

/// The destructive actions a user accepted with a plan: what an executor may
/// do beyond creating and updating. Its size is bounded whatever the object
/// count: a digest and counts per kind of consent, and the actions themselves
/// only when there are at most [`Accepted::MAX_LISTED`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::k8s_formats)]
pub struct Accepted {
    /// Digest of the sorted destructive actions (`sha256` hex); empty when
    /// there are none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub digest: String,
    /// Objects deleted (pruned).
    #[serde(default)]
    pub deletions: u32,
    /// Objects deleted and created again (immutable fields, migrations).
    #[serde(default)]
    pub replaces: u32,
    /// Existing objects kix takes over.
    #[serde(default)]
    pub adoptions: u32,
    /// Package migrations crossed.
    #[serde(default)]
    pub migrations: u32,
    /// CRD versions that may hold stored objects, dropped or no longer served.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub crd_versions: u32,
    /// The actions (`delete ConfigMap ns/name`, `replace …`, `adopt …`,
    /// `migration …`), when there are at most [`Accepted::MAX_LISTED`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<String>,
}

impl Accepted {
    /// The most actions a record lists; beyond it only digest and counts.
    pub const MAX_LISTED: usize = 100;

    /// How many destructive actions were accepted.
    pub fn total(&self) -> u32 {
        self.deletions + self.replaces + self.adoptions + self.migrations + self.crd_versions
    }

    /// Nothing destructive was accepted.
    pub fn is_empty(&self) -> bool {
        self.total() == 0 && self.digest.is_empty()
    }

    /// Every accepted action is listed (not only digest and counts).
    pub fn is_listed(&self) -> bool {
        self.actions.len() as u64 == u64::from(self.total())
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A plan's object counts by action.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::k8s_formats)]
pub struct Counts {
    #[serde(default)]
    pub create: u32,
    #[serde(default)]
    pub update: u32,
    #[serde(default)]
    pub unchanged: u32,
    #[serde(default)]
    pub delete: u32,
    #[serde(default)]
    pub replace: u32,
    #[serde(default)]
    pub adopt: u32,
}

/// Which engine applies an activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// The CLI applied it (`kix deploy`).
    Local,
    /// The in-cluster operator applies it (`kix deploy --operator`).
    Operator,
}

impl Engine {
    pub fn as_str(self) -> &'static str {
        match self {
            Engine::Local => "local",
            Engine::Operator => "operator",
        }
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How far an activation got: Pending → Applying → Active | Degraded | Failed,
/// later Superseded.
///
/// Its size is bounded whatever the number of objects (etcd refuses a record
/// over about 1.5 MiB): every list of objects holds at most a few entries,
/// with the total beside, and the message is cut to [`MESSAGE_MAX`] bytes.
/// [`bound`](Self::bound) enforces it before every write.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::k8s_formats)]
pub struct ActivationStatus {
    /// Pending, Applying, Active, Degraded, Failed or Superseded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// Human-readable detail for the phase (the error of a Failed
    /// activation), at most [`MESSAGE_MAX`] bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Conditions; `Ready` with a reason. One per type: bounded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The metadata.generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Apply progress counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
    /// Drift found and corrected while the activation is Active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<Drift>,
    /// Objects prune is deleting, written before the first deletion: at most
    /// [`PENDING_PRUNE_LISTED`], in deletion order, for a reader to see what
    /// goes. Nothing resumes from it: a rerun plans the prune again from the
    /// objects' own labels and annotations. (A record of an older kix may
    /// list them all; it is cut on its next write.)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_prune: Vec<ObjectRef>,
    /// How many objects prune is deleting in all, when more than
    /// `pendingPrune` lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_prune_total: Option<u32>,
    /// Number of objects in the build.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objects: Option<u32>,
    /// The kinds of the build (`apiVersion/Kind`), so a later prune lists
    /// them even when a newer build drops a kind entirely. It grows with the
    /// number of kinds, not of objects: not bounded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kinds: Vec<String>,
    /// Objects that could not be deleted (by prune or by the finalizer), with
    /// the reason: at most [`FAILED_DELETIONS_LISTED`], each reason at most
    /// [`REASON_MAX`] bytes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_deletions: Vec<FailedDeletion>,
    /// How many objects could not be deleted in all, when more than
    /// `failedDeletions` lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_deletions_total: Option<u32>,
    /// Objects whose deletion was accepted but which still exist (held by
    /// finalizers): at most [`DELETING_LISTED`], in name order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deleting: Vec<DeletingObject>,
    /// How many objects are being deleted in all, when more than `deleting`
    /// lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleting_total: Option<u32>,
    /// What the operator's alerts were sent of this record (its
    /// `--alerts`): per alert and kind of notice (the phase, deletions
    /// held, a drift fight, a stuck deletion) the last one delivered or
    /// given up on, so a restarted operator or a new leader sends each
    /// change once. At most one entry per alert and kind: bounded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notifications: Vec<Notified>,
}

/// The last notice of one kind an alert was sent of a record
/// (`status.notifications`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Notified {
    /// The alert's name in the operator's alerts file.
    pub alert: String,
    /// The notice's event: Applying, Active, Degraded, Failed,
    /// DeletionsHeld, DriftFight or StuckDeletion.
    pub event: String,
    /// The record's generation the notice was about.
    #[serde(default)]
    pub generation: i64,
    /// For a condition (deletions held, a drift fight) or a stuck
    /// deletion: since when it holds, so its next occurrence is a new
    /// notice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// Set when the notice was not delivered (retries exhausted, refused,
    /// its Secret missing): why, never a credential. It is not sent again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The most entries `status.notifications` keeps.
pub const NOTIFIED_LISTED: usize = 64;

/// How many deleting objects a record lists (the rest are counted): the
/// record must not grow with the number of objects.
pub const DELETING_LISTED: usize = 20;

/// How many objects of a running prune a record lists (the rest are counted).
pub const PENDING_PRUNE_LISTED: usize = 20;

/// How many failed deletions a record lists (the rest are counted).
pub const FAILED_DELETIONS_LISTED: usize = 20;

/// The longest status message a record keeps, in bytes.
pub const MESSAGE_MAX: usize = 4096;

/// The longest reason of a failed deletion a record keeps, in bytes.
pub const REASON_MAX: usize = 300;

/// The most finalizers a deleting object lists.
pub const FINALIZERS_LISTED: usize = 5;

impl ActivationStatus {
    /// How many objects prune is deleting (listed or not).
    pub fn pending_prune_count(&self) -> u32 {
        count(self.pending_prune.len(), self.pending_prune_total)
    }

    /// How many objects could not be deleted (listed or not).
    pub fn failed_deletion_count(&self) -> u32 {
        count(self.failed_deletions.len(), self.failed_deletions_total)
    }

    /// How many objects are being deleted (listed or not).
    pub fn deleting_count(&self) -> u32 {
        count(self.deleting.len(), self.deleting_total)
    }

    /// Records the objects prune is about to delete: the first
    /// [`PENDING_PRUNE_LISTED`], and how many in all.
    pub fn set_pending_prune(&mut self, objects: impl IntoIterator<Item = ObjectRef>) {
        let mut total = 0usize;
        self.pending_prune.clear();
        for object in objects {
            total += 1;
            if self.pending_prune.len() < PENDING_PRUNE_LISTED {
                self.pending_prune.push(object);
            }
        }
        self.pending_prune_total = beyond(total, self.pending_prune.len());
    }

    /// Forgets the prune set (the prune is over).
    pub fn clear_pending_prune(&mut self) {
        self.pending_prune.clear();
        self.pending_prune_total = None;
    }

    /// Adds an object that could not be deleted: listed while fewer than
    /// [`FAILED_DELETIONS_LISTED`] are, counted always.
    pub fn push_failed_deletion(&mut self, mut failed: FailedDeletion) {
        let total = self.failed_deletion_count() as usize + 1;
        if self.failed_deletions.len() < FAILED_DELETIONS_LISTED {
            failed.reason = truncate(&failed.reason, REASON_MAX);
            self.failed_deletions.push(failed);
        }
        self.failed_deletions_total = beyond(total, self.failed_deletions.len());
    }

    /// Replaces the failed deletions with `failed` (listed up to
    /// [`FAILED_DELETIONS_LISTED`], counted all).
    pub fn set_failed_deletions(&mut self, failed: impl IntoIterator<Item = FailedDeletion>) {
        self.failed_deletions.clear();
        self.failed_deletions_total = None;
        for f in failed {
            self.push_failed_deletion(f);
        }
    }

    /// Cuts every list of objects to its limit (keeping the totals right)
    /// and the message to [`MESSAGE_MAX`] bytes, so the record stays far
    /// below etcd's limit however many objects the deploy has. Idempotent.
    pub fn bound(&mut self) {
        self.pending_prune_total = bound_list(
            &mut self.pending_prune,
            self.pending_prune_total,
            PENDING_PRUNE_LISTED,
        );
        self.failed_deletions_total = bound_list(
            &mut self.failed_deletions,
            self.failed_deletions_total,
            FAILED_DELETIONS_LISTED,
        );
        for f in &mut self.failed_deletions {
            if f.reason.len() > REASON_MAX {
                f.reason = truncate(&f.reason, REASON_MAX);
            }
        }
        self.deleting_total = bound_list(&mut self.deleting, self.deleting_total, DELETING_LISTED);
        self.notifications.truncate(NOTIFIED_LISTED);
        for n in &mut self.notifications {
            if let Some(error) = &mut n.error
                && error.len() > REASON_MAX
            {
                *error = truncate(error, REASON_MAX);
            }
        }
        for d in &mut self.deleting {
            d.finalizers.truncate(FINALIZERS_LISTED);
        }
        if let Some(message) = &mut self.message
            && message.len() > MESSAGE_MAX
        {
            *message = truncate(message, MESSAGE_MAX);
        }
        for condition in &mut self.conditions {
            if condition.message.len() > MESSAGE_MAX {
                condition.message = truncate(&condition.message, MESSAGE_MAX);
            }
        }
    }
}

/// A list's total count from its length and its recorded total.
fn count(listed: usize, total: Option<u32>) -> u32 {
    total.unwrap_or(0).max(listed as u32)
}

/// The total to record beside a list of `listed`: only when it lists fewer.
fn beyond(total: usize, listed: usize) -> Option<u32> {
    (total > listed).then_some(total as u32)
}

/// Cuts `list` to `max` and returns the total to record beside it.
fn bound_list<T>(list: &mut Vec<T>, total: Option<u32>, max: usize) -> Option<u32> {
    let total = count(list.len(), total) as usize;
    list.truncate(max);
    beyond(total, list.len())
}

/// `text` cut to at most `max` bytes (at a character boundary), with `…`
/// when cut.
pub fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// An object whose DELETE was accepted but which still exists.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeletingObject {
    /// The object.
    pub object: ObjectRef,
    /// The finalizers it waits for (empty for a Namespace emptying itself or
    /// a Pod in its grace period).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub finalizers: Vec<String>,
    /// Its deletionTimestamp: since when it has been waiting (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::date_time")]
    pub since: Option<DateTime<Utc>>,
}

/// The phase of an activation.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
pub enum Phase {
    /// Recorded, not started.
    Pending,
    /// Being applied.
    Applying,
    /// Applied and healthy; the cluster's current activation.
    Active,
    /// Applied, but some objects failed or are not healthy.
    Degraded,
    /// The deploy failed.
    Failed,
    /// A newer activation of the same Kix cluster took over.
    Superseded,
}

impl Phase {
    pub const ALL: [Phase; 6] = [
        Phase::Pending,
        Phase::Applying,
        Phase::Active,
        Phase::Degraded,
        Phase::Failed,
        Phase::Superseded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Applying => "Applying",
            Phase::Active => "Active",
            Phase::Degraded => "Degraded",
            Phase::Failed => "Failed",
            Phase::Superseded => "Superseded",
        }
    }

    /// The deploy is over: Active, Degraded, Failed or Superseded. A waiting
    /// client stops at a terminal phase. (An Active record is still kept
    /// applied by the operator; "terminal" is about the deploy.)
    pub fn is_terminal(self) -> bool {
        !matches!(self, Phase::Pending | Phase::Applying)
    }

    /// The deploy finished with its objects applied: Active or Degraded.
    pub fn is_applied(self) -> bool {
        matches!(self, Phase::Active | Phase::Degraded)
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a deploy in `phase` is over (see [`Phase::is_terminal`]).
pub fn is_terminal(phase: Phase) -> bool {
    phase.is_terminal()
}

/// Apply progress counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::k8s_formats)]
pub struct Progress {
    /// Objects in the plan.
    #[serde(default)]
    pub total: u32,
    /// Objects applied so far.
    #[serde(default)]
    pub applied: u32,
    /// Applied objects that are healthy.
    #[serde(default)]
    pub healthy: u32,
    /// Objects pruned.
    #[serde(default)]
    pub pruned: u32,
    /// Objects that failed to apply or became Degraded.
    #[serde(default)]
    pub failed: u32,
}

/// Drift counts of an Active activation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::k8s_formats)]
pub struct Drift {
    /// Objects found drifted from the build (changed or deleted), in total.
    #[serde(default)]
    pub detected: u32,
    /// Drifted objects re-applied, in total.
    #[serde(default)]
    pub corrected: u32,
    /// When drift was last corrected (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::date_time")]
    pub last_corrected: Option<DateTime<Utc>>,
}

/// An object that could not be deleted, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailedDeletion {
    /// The object.
    pub object: ObjectRef,
    /// Why it could not be deleted.
    pub reason: String,
}

impl Activation {
    /// The name of a Kix cluster's activation number `sequence`:
    /// `<cluster>-<sequence>`.
    pub fn name_for(cluster: &str, sequence: u64) -> String {
        format!("{cluster}-{sequence}")
    }

    /// The sequence number of `name` if it is an activation name of `cluster`
    /// (`"prod-eu-3"` gives 3 for cluster `prod-eu` and nothing for `prod`).
    /// Only the exact form [`name_for`](Self::name_for) produces is accepted:
    /// decimal digits without a sign or leading zeros.
    pub fn sequence_in(name: &str, cluster: &str) -> Option<u64> {
        let digits = name.strip_prefix(cluster)?.strip_prefix('-')?;
        parse_sequence_digits(digits)
    }

    /// Splits an activation name into cluster and sequence at its last `-`
    /// (`"prod-eu-3"` → `("prod-eu", 3)`). Prefer
    /// [`sequence_in`](Self::sequence_in) when the cluster is known.
    pub fn parse_name(name: &str) -> Option<(&str, u64)> {
        let (cluster, digits) = name.rsplit_once('-')?;
        if cluster.is_empty() {
            return None;
        }
        Some((cluster, parse_sequence_digits(digits)?))
    }

    /// A new record: named `<spec.cluster>-<sequence>`, labelled with its
    /// cluster and `app.kubernetes.io/managed-by: kix`, without status.
    pub fn new_record(sequence: u64, spec: ActivationSpec) -> Self {
        let labels = BTreeMap::from([
            (LABEL_CLUSTER.to_owned(), spec.cluster.clone()),
            (LABEL_MANAGED_BY.to_owned(), MANAGED_BY_VALUE.to_owned()),
        ]);
        let mut activation = Activation::new(&Self::name_for(&spec.cluster, sequence), spec);
        activation.metadata = ObjectMeta {
            labels: Some(labels),
            ..activation.metadata
        };
        activation
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

    /// This record's sequence number, if its name is `<cluster>-<n>` for its
    /// [`cluster_name`](Self::cluster_name).
    pub fn sequence(&self) -> Option<u64> {
        Self::sequence_in(self.metadata.name.as_deref()?, self.cluster_name())
    }

    /// The recorded phase; `None` before anything wrote a status.
    pub fn phase(&self) -> Option<Phase> {
        self.status.as_ref().and_then(|status| status.phase)
    }

    /// The recorded phase, with a record without one counting as Pending.
    pub fn phase_or_pending(&self) -> Phase {
        self.phase().unwrap_or(Phase::Pending)
    }

    /// Whether this record's deploy is over (see [`Phase::is_terminal`]).
    pub fn is_terminal(&self) -> bool {
        self.phase().is_some_and(Phase::is_terminal)
    }

    /// The operator acts on this record (`spec.engine: operator`).
    pub fn is_operator(&self) -> bool {
        self.spec.engine == Engine::Operator
    }
}

fn parse_sequence_digits(digits: &str) -> Option<u64> {
    let well_formed = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    if well_formed {
        digits.parse().ok()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use serde_json::json;

    pub(crate) fn spec(cluster: &str) -> ActivationSpec {
        ActivationSpec {
            cluster: cluster.to_owned(),
            source: Source {
                path: "/nix/store/0123456789abcdfghijklmnpqrsvwxyz-kix-prod".to_owned(),
                flake: Some("github:example/infra".to_owned()),
                revision: None,
                cache: None,
                signed_by: None,
            },
            receipt: Receipt {
                user: "alice".to_owned(),
                host: "laptop".to_owned(),
                kix_version: "0.1.0".to_owned(),
                time: Utc
                    .with_ymd_and_hms(2025, 1, 2, 3, 4, 5)
                    .single()
                    .unwrap_or_default(),
                plan_digest: "sha256:abc".to_owned(),
                counts: Counts {
                    create: 3,
                    ..Counts::default()
                },
                accepted: Accepted::default(),
                rollback_from: None,
                accepted_deletions: None,
                saved_plan: false,
            },
            engine: Engine::Operator,
            service_account: None,
        }
    }

    #[test]
    fn name_round_trip() {
        assert_eq!(Activation::name_for("prod", 7), "prod-7");
        assert_eq!(Activation::sequence_in("prod-7", "prod"), Some(7));
        assert_eq!(Activation::parse_name("prod-7"), Some(("prod", 7)));
        for seq in [0, 1, 10, 12345, u64::MAX] {
            let name = Activation::name_for("prod-eu", seq);
            assert_eq!(Activation::sequence_in(&name, "prod-eu"), Some(seq));
            assert_eq!(Activation::parse_name(&name), Some(("prod-eu", seq)));
        }
    }

    #[test]
    fn sequence_needs_the_exact_cluster_prefix() {
        assert_eq!(Activation::sequence_in("prod-eu-3", "prod-eu"), Some(3));
        assert_eq!(Activation::sequence_in("prod-eu-3", "prod"), None);
        assert_eq!(Activation::sequence_in("production-3", "prod"), None);
        assert_eq!(Activation::sequence_in("prod3", "prod"), None);
        assert_eq!(Activation::sequence_in("infra-3", "prod"), None);
    }

    #[test]
    fn malformed_sequences_are_rejected() {
        for name in [
            "prod", "prod-", "-3", "prod-x", "prod-03", "prod-+3", "prod--3", "prod-3a", "prod- 3",
        ] {
            let parsed = Activation::parse_name(name);
            let in_prod = Activation::sequence_in(name, "prod");
            assert!(
                in_prod.is_none(),
                "{name:?} parsed as prod sequence {in_prod:?}"
            );
            if name != "prod--3" {
                assert!(parsed.is_none(), "{name:?} parsed as {parsed:?}");
            }
        }
        // "prod--3" is activation 3 of a cluster named "prod-", never of "prod".
        assert_eq!(Activation::parse_name("prod--3"), Some(("prod-", 3)));
        assert_eq!(Activation::parse_name("prod-0"), Some(("prod", 0)));
        assert_eq!(Activation::parse_name("prod-18446744073709551616"), None);
    }

    #[test]
    fn new_record_names_and_labels() {
        let act = Activation::new_record(4, spec("prod"));
        assert_eq!(act.metadata.name.as_deref(), Some("prod-4"));
        let labels = act.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels.get(LABEL_CLUSTER).map(String::as_str), Some("prod"));
        assert_eq!(
            labels.get(LABEL_MANAGED_BY).map(String::as_str),
            Some("kix")
        );
        assert_eq!(act.cluster_name(), "prod");
        assert_eq!(act.sequence(), Some(4));
        assert_eq!(act.phase(), None);
        assert_eq!(act.phase_or_pending(), Phase::Pending);
        assert!(!act.is_terminal());
        assert!(act.is_operator());
    }

    #[test]
    fn cluster_label_wins_over_spec() {
        let mut act = Activation::new("apps-2", spec("prod"));
        assert_eq!(act.cluster_name(), "prod", "no labels: spec.cluster");
        assert_eq!(act.sequence(), None, "apps-2 is not a prod name");

        act.metadata.labels = Some(BTreeMap::from([(
            LABEL_CLUSTER.to_owned(),
            "apps".to_owned(),
        )]));
        assert_eq!(act.cluster_name(), "apps", "label wins");
        assert_eq!(act.sequence(), Some(2));

        act.metadata.labels = Some(BTreeMap::from([(LABEL_CLUSTER.to_owned(), String::new())]));
        assert_eq!(act.cluster_name(), "prod", "empty label: spec.cluster");

        act.metadata.labels = Some(BTreeMap::from([("other".to_owned(), "apps".to_owned())]));
        assert_eq!(act.cluster_name(), "prod", "other labels: spec.cluster");
    }

    #[test]
    fn phase_serde_round_trip() {
        for phase in Phase::ALL {
            let value = serde_json::to_value(phase).ok();
            assert_eq!(value, Some(json!(phase.as_str())));
            assert_eq!(phase.to_string(), phase.as_str());
            let back: Option<Phase> = serde_json::from_value(json!(phase.as_str())).ok();
            assert_eq!(back, Some(phase));
        }
        assert!(serde_json::from_value::<Phase>(json!("active")).is_err());
    }

    #[test]
    fn terminal_phases() {
        let terminal: Vec<Phase> = Phase::ALL.into_iter().filter(|p| is_terminal(*p)).collect();
        assert_eq!(
            terminal,
            [
                Phase::Active,
                Phase::Degraded,
                Phase::Failed,
                Phase::Superseded
            ]
        );
        let applied: Vec<Phase> = Phase::ALL.into_iter().filter(|p| p.is_applied()).collect();
        assert_eq!(applied, [Phase::Active, Phase::Degraded]);

        let mut act = Activation::new("prod-1", spec("prod"));
        act.status = Some(ActivationStatus {
            phase: Some(Phase::Failed),
            ..ActivationStatus::default()
        });
        assert_eq!(act.phase(), Some(Phase::Failed));
        assert!(act.is_terminal());
    }

    #[test]
    fn engine_serde() {
        assert_eq!(
            serde_json::to_value(Engine::Local).ok(),
            Some(json!("local"))
        );
        assert_eq!(
            serde_json::to_value(Engine::Operator).ok(),
            Some(json!("operator"))
        );
        assert!(serde_json::from_value::<Engine>(json!("Operator")).is_err());
    }

    #[test]
    fn wire_format() {
        let mut act = Activation::new_record(1, spec("prod"));
        act.status = Some(ActivationStatus {
            phase: Some(Phase::Active),
            observed_generation: Some(1),
            pending_prune: vec![ObjectRef::new("v1", "ConfigMap", Some("apps"), "old")],
            failed_deletions: vec![FailedDeletion {
                object: ObjectRef::new("v1", "Namespace", None::<String>, "apps"),
                reason: "forbidden".to_owned(),
            }],
            drift: Some(Drift {
                detected: 2,
                corrected: 1,
                last_corrected: Utc.with_ymd_and_hms(2025, 1, 2, 3, 4, 6).single(),
            }),
            ..ActivationStatus::default()
        });
        let value = serde_json::to_value(&act).unwrap_or_default();
        assert_eq!(value["apiVersion"], "kix.run/v1alpha1");
        assert_eq!(value["kind"], "Activation");
        assert_eq!(
            value["spec"],
            json!({
                "cluster": "prod",
                "source": {
                    "path": "/nix/store/0123456789abcdfghijklmnpqrsvwxyz-kix-prod",
                    "flake": "github:example/infra"
                },
                "receipt": {
                    "user": "alice",
                    "host": "laptop",
                    "kixVersion": "0.1.0",
                    "time": "2025-01-02T03:04:05Z",
                    "planDigest": "sha256:abc",
                    "counts": {"create": 3, "update": 0, "unchanged": 0, "delete": 0, "replace": 0, "adopt": 0}
                },
                "engine": "operator"
            })
        );
        assert_eq!(
            value["status"],
            json!({
                "phase": "Active",
                "observedGeneration": 1,
                "drift": {"detected": 2, "corrected": 1, "lastCorrected": "2025-01-02T03:04:06Z"},
                "pendingPrune": [{"apiVersion": "v1", "kind": "ConfigMap", "namespace": "apps", "name": "old"}],
                "failedDeletions": [{
                    "object": {"apiVersion": "v1", "kind": "Namespace", "name": "apps"},
                    "reason": "forbidden"
                }]
            })
        );
        let back: Activation = serde_json::from_value(value).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, act);
    }

    /// An object reference as long as Kubernetes allows: a 253-character
    /// name in a 63-character namespace, of a long custom kind.
    fn longest_ref(i: usize) -> ObjectRef {
        let name = format!("{i:06}-{}", "n".repeat(246));
        ObjectRef::new(
            format!("{}.example.com/v1alpha1", "g".repeat(60)),
            "K".repeat(63),
            Some("s".repeat(63)),
            name,
        )
    }

    /// The Activation's status must stay far below etcd's ~1.5 MiB request
    /// limit whatever the number of objects (50,000 objects, half pruned,
    /// once made it exceed the limit and no rerun could finish).
    #[test]
    fn status_size_is_bounded_for_any_object_count() {
        for n in [0usize, 1, 20, 21, 1_000, 100_000] {
            let mut status = ActivationStatus {
                phase: Some(Phase::Degraded),
                message: Some("could not prune x: forbidden; ".repeat(n.min(10_000))),
                ..ActivationStatus::default()
            };
            status.set_pending_prune((0..n).map(longest_ref));
            for i in 0..n {
                status.push_failed_deletion(FailedDeletion {
                    object: longest_ref(i),
                    reason: "admission webhook denied the request: ".repeat(100),
                });
            }
            // `deleting` as a writer might set it, whole, before `bound`.
            status.deleting = (0..n)
                .map(|i| DeletingObject {
                    object: longest_ref(i),
                    finalizers: (0..20)
                        .map(|f| format!("{f}.finalizers.example.com/{}", "f".repeat(80)))
                        .collect(),
                    since: None,
                })
                .collect();
            status.bound();
            let size = serde_json::to_vec(&status).map(|v| v.len()).unwrap_or(0);
            assert!(size < 64 * 1024, "{n} objects: status is {size} bytes");
            assert_eq!(status.pending_prune_count() as usize, n);
            assert_eq!(status.failed_deletion_count() as usize, n);
            assert_eq!(status.deleting_count() as usize, n);
            assert!(status.pending_prune.len() <= PENDING_PRUNE_LISTED);
            assert_eq!(
                status.pending_prune.first(),
                (n > 0).then(|| longest_ref(0)).as_ref()
            );
            assert!(status.failed_deletions.len() <= FAILED_DELETIONS_LISTED);
            assert!(status.deleting.len() <= DELETING_LISTED);
            // Bounding again changes nothing.
            let again = {
                let mut s = status.clone();
                s.bound();
                s
            };
            assert_eq!(again, status, "{n} objects");
        }
    }

    /// A record an older kix wrote lists every object of a prune and every
    /// failed deletion, without totals: it still reads, its counts are
    /// right, and it is cut on its next write.
    #[test]
    fn records_of_older_kix_with_long_lists_deserialize() {
        let refs: Vec<serde_json::Value> = (0..3_000)
            .map(|i| json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": "apps", "name": format!("cm-{i}")}))
            .collect();
        let failed: Vec<serde_json::Value> = refs
            .iter()
            .take(500)
            .map(|r| json!({"object": r, "reason": "forbidden"}))
            .collect();
        let mut status: ActivationStatus = serde_json::from_value(json!({
            "phase": "Applying",
            "pendingPrune": refs,
            "failedDeletions": failed,
            "kinds": ["v1/ConfigMap"],
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(status.pending_prune.len(), 3_000);
        assert_eq!(status.pending_prune_count(), 3_000);
        assert_eq!(status.failed_deletion_count(), 500);
        status.bound();
        assert_eq!(status.pending_prune.len(), PENDING_PRUNE_LISTED);
        assert_eq!(status.pending_prune_total, Some(3_000));
        assert_eq!(status.pending_prune[0].name, "cm-0");
        assert_eq!(status.failed_deletions.len(), FAILED_DELETIONS_LISTED);
        assert_eq!(status.failed_deletion_count(), 500);
        status.clear_pending_prune();
        assert_eq!(status.pending_prune_count(), 0);
        let value = serde_json::to_value(&status).unwrap_or_default();
        assert!(value.get("pendingPrune").is_none(), "{value}");
        assert!(value.get("pendingPruneTotal").is_none(), "{value}");
        assert_eq!(value["failedDeletionsTotal"], 500);
    }

    #[test]
    fn truncate_cuts_at_a_character_boundary() {
        assert_eq!(truncate("short", 10), "short");
        let cut = truncate(&"é".repeat(100), 11);
        assert!(cut.len() <= 11, "{cut}");
        assert!(cut.ends_with('…'), "{cut}");
    }

    #[test]
    fn minimal_receipt_deserializes() {
        let receipt: Receipt = serde_json::from_value(json!({
            "user": "ci", "host": "runner", "kixVersion": "0.1.0",
            "time": "2025-01-02T03:04:05.123456789+02:00", "planDigest": "x"
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(receipt.counts, Counts::default());
        assert!(receipt.accepted.is_empty());
        assert_eq!(receipt.rollback_from, None);
        assert_eq!(
            receipt.time.to_rfc3339(),
            "2025-01-02T01:04:05.123456789+00:00"
        );
    }

    #[test]
    fn a_published_build_names_its_cache_and_signer() {
        let mut spec = spec("prod");
        spec.source.cache = Some("https://cache.example.com".to_owned());
        spec.source.signed_by = Some("ci-1".to_owned());
        let value = serde_json::to_value(&spec).unwrap_or_default();
        assert_eq!(value["source"]["cache"], "https://cache.example.com");
        assert_eq!(value["source"]["signedBy"], "ci-1");
        let back: ActivationSpec = serde_json::from_value(value).expect("reads back");
        assert_eq!(back, spec);
    }
}

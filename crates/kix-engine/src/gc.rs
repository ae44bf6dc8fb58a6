//! `kix gc`: retire the Activation records retention no longer keeps.
//!
//! Retention keeps the `keep` newest Superseded records of a Kix cluster and
//! retires the older ones, plus every Superseded or Failed record older than
//! `maxAge` when set. The current record, records still in flight (Pending,
//! Applying) and Failed records newer than the oldest kept Superseded one are
//! never retired. [`select`] is that rule as a pure function.
//!
//! For the retired records, [`plan`] works out what happens to the live
//! objects that name them in `kix.run/activations`:
//!
//! - an object a kept record's build still contains is *re-pointed*: its
//!   annotation loses the retired names and names the newest kept record whose
//!   build has it. The write is a server-side apply (the cluster's field manager `kix/<cluster>`) of
//!   that build's manifest, made only when the live digest shows the object is
//!   exactly what kix applied, so it changes nothing but the annotation and
//!   leaves no second field manager behind (a merge patch would own the
//!   annotation as an `Update` and make the next deploy's apply conflict);
//! - an object still named by a kept record or another Kix cluster, or
//!   annotated `kix.run/prune: disabled`, is kept as it is;
//! - any other object is deleted, unless a kept record's build could not be
//!   read (then nothing is deleted: kix cannot tell what that build has).
//!
//! [`execute`] then, holding the cluster's deploy Lease, deletes and
//! re-points the objects, deletes each retired record whose objects are
//! settled, and removes its Nix GC root, so `nix-store --gc` may reclaim the
//! build. Roots of records that no longer exist go too; a kept record whose
//! build is valid here but not rooted gets its root.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use kix_api::{Activation, ObjectRef, Phase};
use kix_manifest::{GroupVersionKind, ObjectKey, Settings};
use kix_nix::GcRoots;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PropagationPolicy};
use kube::discovery::ApiResource;
use kube::{Client, ResourceExt};
use serde::{Serialize, Serializer};

use crate::budget::BudgetCheck;
use crate::desired::{Desired, Shapes, desired_objects};
use crate::error::{EngineError, Result};
use crate::lease::{DeployLease, LeaseOptions};
use crate::live::{activation_clusters, belongs_to, list_kinds};
use crate::plan::{api_for, applied_manifest, is_destructive};
use crate::records::{self, RecordDeletion};
use crate::resources::{Resources, Served};

/// Superseded records kept when neither a flag nor the build says.
pub const DEFAULT_KEEP: u32 = 5;

/// How many Superseded records to keep, and for how long.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Retention {
    pub keep: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_age: Option<MaxAge>,
    /// Where each value came from: `flag`, `build` (the current build's
    /// kix.json settings) or `default`.
    pub keep_from: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_age_from: Option<&'static str>,
}

/// An age limit; shown and serialized as `30d`, `12h`, `1d12h`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxAge(pub Duration);

impl fmt::Display for MaxAge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_age(self.0))
    }
}

impl Serialize for MaxAge {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl Retention {
    /// Flags win, then the build's settings, then [`DEFAULT_KEEP`] (and no
    /// age limit). A `maxAge` in the settings that does not parse is an error.
    pub fn resolve(
        keep: Option<u32>,
        max_age: Option<Duration>,
        settings: Option<&Settings>,
    ) -> std::result::Result<Retention, String> {
        let (keep, keep_from) = match (keep, settings.and_then(|s| s.keep)) {
            (Some(k), _) => (k, "flag"),
            (None, Some(k)) => (k, "build"),
            (None, None) => (DEFAULT_KEEP, "default"),
        };
        let (max_age, max_age_from) = match (max_age, settings.and_then(|s| s.max_age.as_deref())) {
            (Some(age), _) => (Some(MaxAge(age)), Some("flag")),
            (None, Some(text)) => (
                Some(MaxAge(
                    parse_age(text).map_err(|e| format!("the build's settings.maxAge: {e}"))?,
                )),
                Some("build"),
            ),
            (None, None) => (None, None),
        };
        Ok(Retention {
            keep,
            max_age,
            keep_from,
            max_age_from,
        })
    }
}

/// Parses `30d`, `12h`, `90m`, `45s`, `2w` or a sum such as `1d12h`.
pub fn parse_age(text: &str) -> std::result::Result<Duration, String> {
    let text = text.trim();
    let bad = || format!("{text:?} is not an age (like 30d, 12h, 90m, 2w, 1d12h)");
    if text.is_empty() {
        return Err(bad());
    }
    let mut total: u64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(bad());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = match &rest[..unit_len] {
            "s" => 1,
            "m" => 60,
            "h" => 3600,
            "d" => 86_400,
            "w" => 604_800,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        total = n
            .checked_mul(unit)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(bad)?;
    }
    Ok(Duration::from_secs(total))
}

/// The shortest `1d12h`-style text of a duration (whole seconds).
pub fn format_age(d: Duration) -> String {
    let mut secs = d.as_secs();
    if secs == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    out
}

/// A record retention gives up, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RetiredRecord {
    pub name: String,
    pub phase: Option<Phase>,
    pub path: String,
    pub time: DateTime<Utc>,
    /// `beyond keep N`, `older than 30d`.
    pub reasons: Vec<String>,
}

/// What retention keeps and what it retires, names oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Selection {
    pub current: Option<String>,
    pub kept: Vec<String>,
    pub retired: Vec<RetiredRecord>,
}

/// Applies `retention` to the records of one Kix cluster (any order). Pure.
pub fn select(records: &[&Activation], retention: &Retention, now: DateTime<Utc>) -> Selection {
    let mut sorted: Vec<&Activation> = records.to_vec();
    sorted.sort_by_key(|r| r.sequence().unwrap_or(0));
    let current = sorted
        .iter()
        .rev()
        .find(|r| !matches!(r.phase(), Some(Phase::Superseded | Phase::Failed)))
        .map(|r| r.name_any());
    let current_seq = sorted
        .iter()
        .find(|r| Some(r.name_any()) == current)
        .and_then(|r| r.sequence());
    let superseded: Vec<&Activation> = sorted
        .iter()
        .rev()
        .filter(|r| r.phase() == Some(Phase::Superseded))
        .copied()
        .collect();
    let keep = retention.keep as usize;
    let kept_superseded: BTreeSet<String> =
        superseded.iter().take(keep).map(|r| r.name_any()).collect();
    // Failed records older than the kept window go with the Superseded ones
    // around them; the window starts at the oldest kept Superseded record
    // (at the current one when nothing Superseded is kept).
    let window_start = if keep == 0 {
        current_seq.unwrap_or(0)
    } else if superseded.len() >= keep {
        superseded
            .get(keep - 1)
            .and_then(|r| r.sequence())
            .unwrap_or(0)
    } else {
        0
    };
    let mut selection = Selection {
        current: current.clone(),
        ..Selection::default()
    };
    for record in sorted {
        let name = record.name_any();
        let phase = record.phase();
        let mut reasons = Vec::new();
        if Some(&name) != current.as_ref() {
            match phase {
                Some(Phase::Superseded) if !kept_superseded.contains(&name) => {
                    reasons.push(format!("beyond keep {}", retention.keep));
                }
                Some(Phase::Failed) if record.sequence().unwrap_or(u64::MAX) < window_start => {
                    reasons.push(format!(
                        "Failed, older than the {} kept Superseded",
                        retention.keep
                    ));
                }
                _ => {}
            }
            if let Some(MaxAge(max)) = retention.max_age
                && matches!(phase, Some(Phase::Superseded | Phase::Failed))
            {
                let age = now.signed_duration_since(records::recorded_at(record));
                if age.to_std().is_ok_and(|age| age > max) {
                    reasons.push(format!("older than {}", MaxAge(max)));
                }
            }
        }
        if reasons.is_empty() {
            selection.kept.push(name);
        } else {
            selection.retired.push(RetiredRecord {
                name,
                phase,
                path: record.spec.source.path.clone(),
                time: records::recorded_at(record),
                reasons,
            });
        }
    }
    selection
}

/// What gc does to one live object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GcAction {
    /// Only retired records name it: deleted.
    Delete,
    /// A kept build has it: the annotation names a kept record instead.
    Repoint,
    /// Left as it is (see the note).
    Keep,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GcObject {
    pub object: ObjectRef,
    pub action: GcAction,
    /// The activations annotation now.
    pub activations: Vec<String>,
    /// The annotation after a re-point.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub destructive: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    #[serde(skip)]
    resource: ApiResource,
    #[serde(skip)]
    desired: Option<Desired>,
}

/// What `kix gc` will do; `--dry-run` prints it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GcPlan {
    pub cluster: String,
    pub current: Option<String>,
    pub retention: Retention,
    pub kept: Vec<String>,
    pub retired: Vec<RetiredRecord>,
    /// Objects that name a retired record, with what happens to them.
    pub objects: Vec<GcObject>,
    /// GC roots of records that no longer exist.
    pub orphaned_roots: Vec<String>,
    /// Kept records whose build is valid here but has no GC root.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unrooted: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Live objects the Kix cluster owns, of the kinds gc looked at: what
    /// the deletion budget weighs gc's deletions against.
    pub owned: u32,
    #[serde(skip)]
    kept_paths: BTreeMap<String, String>,
}

impl GcPlan {
    /// gc's deletions weighed against the deletion budget.
    pub fn deletion_budget(&self, budget: Option<kix_manifest::DeletionBudget>) -> BudgetCheck {
        let deletions = self
            .objects
            .iter()
            .filter(|o| o.action == GcAction::Delete)
            .count() as u32;
        BudgetCheck::new(budget, deletions, self.owned)
    }

    /// Whether executing the plan changes anything.
    pub fn has_work(&self) -> bool {
        !self.retired.is_empty()
            || !self.orphaned_roots.is_empty()
            || !self.unrooted.is_empty()
            || self.objects.iter().any(|o| o.action != GcAction::Keep)
    }
}

/// An object gc deleted (or a finalizer was to delete) that still exists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Remaining {
    pub object: ObjectRef,
    /// The records it names (the retired ones it belonged to among them).
    pub activations: Vec<String>,
    /// Its finalizers: what holds it.
    pub finalizers: Vec<String>,
    /// It has a deletionTimestamp (Terminating).
    pub deleting: bool,
}

impl fmt::Display for Remaining {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.object)?;
        match (self.deleting, self.finalizers.is_empty()) {
            (true, false) => write!(
                f,
                " (Terminating, held by finalizers {})",
                self.finalizers.join(", ")
            ),
            (true, true) => write!(f, " (Terminating)"),
            (false, _) => write!(f, " (not deleted)"),
        }
    }
}

impl GcPlan {
    /// The objects this plan deletes, and the records it retires.
    fn destructive(&self) -> BTreeSet<String> {
        self.objects
            .iter()
            .filter(|o| o.action == GcAction::Delete)
            .map(|o| format!("delete {}", o.object))
            .chain(self.retired.iter().map(|r| format!("retire {}", r.name)))
            .collect()
    }

    /// gc plans again right before it acts: the plan made now, when it
    /// deletes nothing and retires nothing `self` (the plan shown) did not.
    pub async fn again(&self, client: &Client, roots: &GcRoots) -> Result<GcPlan> {
        let now = plan(
            client,
            &self.cluster,
            self.retention.clone(),
            roots,
            Utc::now(),
        )
        .await?;
        let confirmed = self.destructive();
        let unconfirmed: Vec<String> = now
            .destructive()
            .into_iter()
            .filter(|a| !confirmed.contains(a))
            .collect();
        if unconfirmed.is_empty() {
            Ok(now)
        } else {
            Err(crate::seal::Unconfirmed {
                actions: unconfirmed,
                note: Some("the live state moved since gc planned".into()),
            }
            .into())
        }
    }

    /// The objects `self` deletes that still exist: a record is gone only
    /// when these are. Reads one object each.
    pub async fn remaining(&self, client: &Client) -> Result<Vec<Remaining>> {
        let mut out = Vec::new();
        for o in self.objects.iter().filter(|o| o.action == GcAction::Delete) {
            let api: Api<DynamicObject> = match &o.object.namespace {
                Some(ns) => Api::namespaced_with(client.clone(), ns, &o.resource),
                None => Api::all_with(client.clone(), &o.resource),
            };
            if let Some(live) = api.get_opt(&o.object.name).await? {
                out.push(Remaining {
                    object: o.object.clone(),
                    activations: o.activations.clone(),
                    finalizers: live.finalizers().to_vec(),
                    deleting: live.metadata.deletion_timestamp.is_some(),
                });
            }
        }
        Ok(out)
    }
}

/// Works out what gc does for `cluster` under `retention`. Reads only.
pub async fn plan(
    client: &Client,
    cluster: &str,
    retention: Retention,
    roots: &GcRoots,
    now: DateTime<Utc>,
) -> Result<GcPlan> {
    let all = records::list_all_required(client).await?;
    let mine = records::of_cluster(&all, cluster);
    let selection = select(&mine, &retention, now);
    let retired: BTreeSet<&str> = selection.retired.iter().map(|r| r.name.as_str()).collect();
    let existing: BTreeSet<String> = all.iter().map(|r| r.name_any()).collect();
    let clusters = activation_clusters(&all);
    let paths = crate::claims::record_paths(&all);
    let mut notes = Vec::new();

    // Kept records, current first, then newest first: the builds that still
    // count. A build that cannot be read blocks every deletion.
    let mut kept_records: Vec<&Activation> = mine
        .iter()
        .filter(|r| !retired.contains(r.name_any().as_str()))
        .copied()
        .collect();
    kept_records.sort_by_key(|r| {
        (
            Some(r.name_any()) != selection.current,
            std::cmp::Reverse(r.sequence().unwrap_or(0)),
        )
    });
    let mut resources = Resources::new(client.clone());
    let KeptBuilds {
        builds: kept_builds,
        unreadable,
        kinds,
    } = if selection.retired.is_empty() {
        KeptBuilds::default()
    } else {
        kept_builds(&kept_records, &mine, &mut resources, &mut notes).await?
    };
    let live = if kinds.is_empty() {
        Default::default()
    } else {
        list_kinds(
            client,
            kinds.into_values().collect(),
            Some(&kix_api::labels::managed_selector()),
        )
        .await?
    };

    let owned = live
        .values()
        .filter(|l| {
            l.owned
                && l.activations
                    .iter()
                    .any(|a| belongs_to(a, cluster, &clusters))
        })
        .count() as u32;
    let mut objects = Vec::new();
    for l in live.values().filter(|l| l.owned) {
        let gone: BTreeSet<&String> = l
            .activations
            .iter()
            .filter(|a| belongs_to(a, cluster, &clusters))
            .filter(|a| retired.contains(a.as_str()) || !existing.contains(*a))
            .collect();
        if !gone.iter().any(|a| retired.contains(a.as_str())) {
            continue;
        }
        // Anyone who may write the object may write its claim: it is the
        // retired records' only when one of their builds has it.
        if !gone
            .iter()
            .any(|a| crate::claims::holds(a, &l.key, &paths, &BTreeSet::new()))
        {
            notes.push(format!(
                "{} left as it is: {}",
                l.key,
                crate::claims::unfounded_note(&gone.iter().copied().collect::<Vec<_>>())
            ));
            continue;
        }
        let remaining: BTreeSet<String> = l
            .activations
            .iter()
            .filter(|a| !gone.contains(a))
            .cloned()
            .collect();
        objects.push(gc_object(l, &remaining, &kept_builds, &unreadable));
    }
    // Deletions in reverse apply order, like prune.
    objects.sort_by(|a, b| {
        let rank = |o: &GcObject| kix_manifest::kind_rank(o.object.group(), &o.object.kind);
        rank(b).cmp(&rank(a)).then_with(|| a.object.cmp(&b.object))
    });

    let Roots {
        orphaned_roots,
        unrooted,
        kept_paths,
    } = roots_of(roots, cluster, &existing, &kept_records, &mut notes);
    let mut kept = selection.kept;
    kept.sort_by_key(|n| Activation::sequence_in(n, cluster).unwrap_or(0));
    Ok(GcPlan {
        cluster: cluster.to_string(),
        current: selection.current,
        retention,
        kept,
        retired: selection.retired,
        objects,
        orphaned_roots,
        unrooted,
        notes,
        owned,
        kept_paths,
    })
}

/// The builds of the kept records, by record, and the kinds to list.
#[derive(Default)]
struct KeptBuilds {
    builds: Vec<(String, BTreeMap<ObjectKey, Desired>)>,
    /// Kept records whose build cannot be read: no object is deleted.
    unreadable: Vec<String>,
    kinds: BTreeMap<(String, String), (ApiResource, bool)>,
}

/// Reads the kept records' builds and the kinds every record of the
/// cluster (`mine`) lists.
async fn kept_builds(
    kept_records: &[&Activation],
    mine: &[&Activation],
    resources: &mut Resources,
    notes: &mut Vec<String>,
) -> Result<KeptBuilds> {
    let mut kept = KeptBuilds::default();
    for record in kept_records {
        let name = record.name_any();
        match read_desired(&record.spec.source.path, resources).await {
            Ok(desired) => {
                for d in desired.values() {
                    if d.resource.served == Served::Yes {
                        kept.kinds.insert(
                            (d.resource.api.group.clone(), d.key.kind.clone()),
                            (d.resource.api.clone(), d.resource.namespaced),
                        );
                    }
                }
                kept.builds.push((name, desired));
            }
            Err(err) => {
                notes.push(format!(
                    "the build of kept record {name} ({}) cannot be read: {err}; no object is deleted",
                    record.spec.source.path
                ));
                kept.unreadable.push(name);
            }
        }
    }
    for record in mine {
        for kind in record.status.iter().flat_map(|s| &s.kinds) {
            let Some(GroupVersionKind { api_version, kind }) = GroupVersionKind::parse(kind) else {
                continue;
            };
            if let Some(r) = resources.get(api_version, kind).await?
                && r.served == Served::Yes
            {
                kept.kinds.insert(
                    (r.api.group.clone(), kind.to_string()),
                    (r.api, r.namespaced),
                );
            }
        }
    }
    Ok(kept)
}

/// What gc does to the live object `l`, named by `remaining` records once
/// the retired ones go.
fn gc_object(
    l: &crate::live::Live,
    remaining: &BTreeSet<String>,
    kept_builds: &[(String, BTreeMap<ObjectKey, Desired>)],
    unreadable: &[String],
) -> GcObject {
    let holder = kept_builds
        .iter()
        .find_map(|(name, desired)| desired.get(&l.key).map(|d| (name, d)));
    let mut object = GcObject {
        object: ObjectRef::new(
            l.api_version().to_string(),
            l.key.kind.clone(),
            l.key.namespace.clone(),
            l.key.name.clone(),
        ),
        action: GcAction::Keep,
        activations: l.activations.iter().cloned().collect(),
        after: vec![],
        destructive: false,
        note: None,
        resource: (*l.resource).clone(),
        desired: None,
    };
    match holder {
        Some((name, d)) if l.digest.as_deref() == Some(d.digest.as_str()) => {
            let mut after = remaining.clone();
            after.insert(name.clone());
            object.action = GcAction::Repoint;
            object.after = after.into_iter().collect();
            object.note = Some(format!("the build of {name} has it"));
            object.desired = Some(d.clone());
        }
        Some((name, _)) => {
            object.note = Some(format!(
                "the build of {name} has it, but it changed since kix applied it: annotation left as is"
            ));
        }
        None if !remaining.is_empty() => {
            object.note = Some(format!(
                "still named by {}",
                remaining.iter().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
        None if l.keep.is_some() => {
            object.note = l.keep.map(str::to_string);
        }
        None if !unreadable.is_empty() => {
            object.note = Some(format!(
                "not deleted: the build of {} cannot be read to check it",
                unreadable.join(", ")
            ));
        }
        None => {
            object.action = GcAction::Delete;
            object.destructive = is_destructive(&l.key);
        }
    }
    object
}

/// The GC roots gc reports: roots of records that no longer exist, kept
/// records without a root, and the kept records' store paths.
struct Roots {
    orphaned_roots: Vec<String>,
    unrooted: Vec<String>,
    kept_paths: BTreeMap<String, String>,
}

fn roots_of(
    roots: &GcRoots,
    cluster: &str,
    existing: &BTreeSet<String>,
    kept_records: &[&Activation],
    notes: &mut Vec<String>,
) -> Roots {
    let rooted: BTreeSet<String> = match roots.list(cluster) {
        Ok(list) => list.into_iter().map(|r| r.activation).collect(),
        Err(err) => {
            notes.push(format!("cannot list the GC roots: {err}"));
            BTreeSet::new()
        }
    };
    let orphaned_roots = rooted
        .iter()
        .filter(|a| !existing.contains(*a))
        .cloned()
        .collect();
    let mut kept_paths = BTreeMap::new();
    let mut unrooted = Vec::new();
    for record in kept_records {
        let name = record.name_any();
        kept_paths.insert(name.clone(), record.spec.source.path.clone());
        if !rooted.contains(&name) && std::path::Path::new(&record.spec.source.path).exists() {
            unrooted.push(name);
        }
    }
    unrooted.sort();
    Roots {
        orphaned_roots,
        unrooted,
        kept_paths,
    }
}

/// The desired objects of the build at `path`, by key.
async fn read_desired(
    path: &str,
    resources: &mut Resources,
) -> Result<BTreeMap<ObjectKey, Desired>> {
    let build = kix_manifest::read_tree(
        std::path::Path::new(path),
        &kix_manifest::ReadOptions::default(),
    )?;
    Ok(desired_objects(&build, resources, Shapes::Skipped)
        .await?
        .into_iter()
        .map(|d| (d.key.clone(), d))
        .collect())
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Failure {
    pub name: String,
    pub reason: String,
}

/// What `kix gc` did.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GcReport {
    pub deleted_objects: Vec<ObjectRef>,
    pub repointed_objects: Vec<ObjectRef>,
    pub failed_objects: Vec<Failure>,
    pub deleted_records: Vec<String>,
    /// Records that could not be deleted, with the reason.
    pub failed_records: Vec<Failure>,
    pub removed_roots: Vec<String>,
    pub added_roots: Vec<String>,
    pub root_errors: Vec<Failure>,
}

impl GcReport {
    pub fn is_success(&self) -> bool {
        self.failed_objects.is_empty()
            && self.failed_records.is_empty()
            && self.root_errors.is_empty()
    }
}

/// Carries out `plan`, holding the cluster's deploy Lease as `holder`,
/// acting as `account` (the records' account; see
/// [`LeaseOptions::for_account`]).
pub async fn execute(
    client: &Client,
    plan: &GcPlan,
    roots: &GcRoots,
    holder: &str,
    account: Option<&kix_api::ServiceAccountRef>,
) -> Result<GcReport> {
    let lease = DeployLease::acquire(
        client.clone(),
        &plan.cluster,
        holder,
        LeaseOptions::default().for_account(account),
    )
    .await?;
    let result = match plan.again(client, roots).await {
        Ok(now) => execute_held(client, &now, roots).await,
        Err(err) => Err(err),
    };
    lease.release().await;
    result
}

async fn execute_held(client: &Client, plan: &GcPlan, roots: &GcRoots) -> Result<GcReport> {
    let mut report = GcReport::default();
    // Records whose objects are not settled stay (with the reason).
    let mut blocked: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for o in &plan.objects {
        let result = match o.action {
            GcAction::Keep => continue,
            GcAction::Delete => {
                let api: Api<DynamicObject> = match &o.object.namespace {
                    Some(ns) => Api::namespaced_with(client.clone(), ns, &o.resource),
                    None => Api::all_with(client.clone(), &o.resource),
                };
                let params = DeleteParams {
                    propagation_policy: Some(PropagationPolicy::Background),
                    ..Default::default()
                };
                match api.delete(&o.object.name, &params).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                    Err(e) => Err(e.to_string()),
                }
            }
            GcAction::Repoint => match &o.desired {
                Some(d) => {
                    let after: BTreeSet<String> = o.after.iter().cloned().collect();
                    let manifest = applied_manifest(d, &after);
                    api_for(client, d)
                        .patch(
                            &d.key.name,
                            &PatchParams::apply(&kix_api::field_manager(&d.cluster)),
                            &Patch::Apply(&manifest),
                        )
                        .await
                        .map(|_| ())
                        .map_err(|e| d.scrub_error(e).to_string())
                }
                None => Err("no manifest to re-apply".to_string()),
            },
        };
        match result {
            Ok(()) if o.action == GcAction::Delete => report.deleted_objects.push(o.object.clone()),
            Ok(()) => report.repointed_objects.push(o.object.clone()),
            Err(reason) => {
                for name in &o.activations {
                    blocked
                        .entry(name.clone())
                        .or_default()
                        .push(o.object.to_string());
                }
                report.failed_objects.push(Failure {
                    name: o.object.to_string(),
                    reason,
                });
            }
        }
    }
    for retired in &plan.retired {
        if let Some(objects) = blocked.get(&retired.name) {
            report.failed_records.push(Failure {
                name: retired.name.clone(),
                reason: format!(
                    "objects it names could not be released: {}",
                    objects.join(", ")
                ),
            });
            continue;
        }
        match records::delete(client, &retired.name).await {
            Ok(RecordDeletion::Deleted | RecordDeletion::NotFound) => {
                report.deleted_records.push(retired.name.clone());
                remove_root(roots, &plan.cluster, &retired.name, &mut report);
            }
            Ok(RecordDeletion::Pending { finalizers }) => report.failed_records.push(Failure {
                name: retired.name.clone(),
                reason: format!(
                    "deletion is waiting for finalizers {}; its GC root stays until it is gone",
                    finalizers.join(", ")
                ),
            }),
            Err(err) => report.failed_records.push(Failure {
                name: retired.name.clone(),
                reason: err.to_string(),
            }),
        }
    }
    for name in &plan.orphaned_roots {
        remove_root(roots, &plan.cluster, name, &mut report);
    }
    for name in &plan.unrooted {
        let Some(path) = plan.kept_paths.get(name) else {
            continue;
        };
        let (roots, cluster, link_name, path) = (
            roots.clone(),
            plan.cluster.clone(),
            name.clone(),
            path.clone(),
        );
        let name = name.clone();
        let added = tokio::task::spawn_blocking(move || {
            let store_path = kix_manifest::StorePath::parse(&path).map_err(|e| e.to_string())?;
            if !kix_nix::is_valid(&store_path).map_err(|e| e.to_string())? {
                return Ok(false);
            }
            roots
                .add(&cluster, &link_name, &store_path)
                .map(|_| true)
                .map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| EngineError::Other(format!("the GC root task failed: {e}")))?;
        match added {
            Ok(true) => report.added_roots.push(name),
            Ok(false) => {}
            Err(reason) => report.root_errors.push(Failure { name, reason }),
        }
    }
    Ok(report)
}

fn remove_root(roots: &GcRoots, cluster: &str, name: &str, report: &mut GcReport) {
    match roots.remove(cluster, name) {
        Ok(true) => report.removed_roots.push(name.to_string()),
        Ok(false) => {}
        Err(err) => report.root_errors.push(Failure {
            name: name.to_string(),
            reason: err.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use kix_api::{ActivationSpec, ActivationStatus, Counts, Engine, Receipt, Source};

    fn record(cluster: &str, seq: u64, phase: Phase, days_ago: i64) -> Activation {
        let now = Utc
            .with_ymd_and_hms(2025, 6, 1, 0, 0, 0)
            .single()
            .expect("time");
        let mut r = Activation::new_record(
            seq,
            ActivationSpec {
                cluster: cluster.into(),
                source: Source {
                    path: format!("/nix/store/{seq:0>32}-x"),
                    flake: None,
                    revision: None,
                    cache: None,
                    signed_by: None,
                },
                receipt: Receipt {
                    user: "u".into(),
                    host: "h".into(),
                    kix_version: "0".into(),
                    time: now - chrono::Duration::days(days_ago),
                    plan_digest: String::new(),
                    counts: Counts::default(),
                    accepted: Default::default(),
                    rollback_from: None,
                    accepted_deletions: None,
                    saved_plan: false,
                },
                engine: Engine::Local,
                service_account: None,
            },
        );
        r.status = Some(ActivationStatus {
            phase: Some(phase),
            ..Default::default()
        });
        r
    }

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2025, 6, 1, 0, 0, 0)
            .single()
            .expect("time")
    }

    fn retention(keep: u32, max_age: Option<&str>) -> Retention {
        Retention::resolve(
            Some(keep),
            max_age.map(|a| parse_age(a).expect("age")),
            None,
        )
        .expect("retention")
    }

    fn names(selection: &Selection) -> (Vec<&str>, Vec<&str>) {
        (
            selection.kept.iter().map(String::as_str).collect(),
            selection.retired.iter().map(|r| r.name.as_str()).collect(),
        )
    }

    use Phase::{Active, Applying, Degraded, Failed, Superseded};

    #[test]
    fn keeps_the_newest_superseded_and_the_current() {
        let rs: Vec<Activation> = (1..=6)
            .map(|i| {
                record(
                    "p",
                    i,
                    if i == 6 { Active } else { Superseded },
                    10 - i as i64,
                )
            })
            .collect();
        let refs: Vec<&Activation> = rs.iter().collect();
        let s = select(&refs, &retention(2, None), now());
        assert_eq!(s.current.as_deref(), Some("p-6"));
        assert_eq!(
            names(&s),
            (vec!["p-4", "p-5", "p-6"], vec!["p-1", "p-2", "p-3"])
        );
        assert_eq!(s.retired[0].reasons, ["beyond keep 2"]);
        let s = select(&refs, &retention(0, None), now());
        assert_eq!(names(&s).0, ["p-6"]);
        let s = select(&refs, &retention(10, None), now());
        assert!(s.retired.is_empty());
    }

    #[test]
    fn failed_records_go_with_the_superseded_window() {
        // 1 Sup, 2 Failed, 3 Sup, 4 Sup, 5 Active, 6 Failed (newer than current).
        let rs = [
            record("p", 1, Superseded, 9),
            record("p", 2, Failed, 8),
            record("p", 3, Superseded, 7),
            record("p", 4, Superseded, 6),
            record("p", 5, Active, 5),
            record("p", 6, Failed, 4),
        ];
        let refs: Vec<&Activation> = rs.iter().collect();
        let s = select(&refs, &retention(2, None), now());
        assert_eq!(
            names(&s),
            (vec!["p-3", "p-4", "p-5", "p-6"], vec!["p-1", "p-2"])
        );
        let s = select(&refs, &retention(3, None), now());
        assert_eq!(names(&s).1, Vec::<&str>::new());
        let s = select(&refs, &retention(0, None), now());
        assert_eq!(
            names(&s),
            (vec!["p-5", "p-6"], vec!["p-1", "p-2", "p-3", "p-4"])
        );
    }

    #[test]
    fn max_age_retires_old_superseded_and_failed_only() {
        let rs = [
            record("p", 1, Superseded, 40),
            record("p", 2, Failed, 35),
            record("p", 3, Superseded, 20),
            record("p", 4, Degraded, 31),
            record("p", 5, Applying, 50),
        ];
        let refs: Vec<&Activation> = rs.iter().collect();
        let s = select(&refs, &retention(5, Some("30d")), now());
        // p-5 (Applying) is the current one: newest neither Superseded nor Failed.
        assert_eq!(s.current.as_deref(), Some("p-5"));
        assert_eq!(names(&s), (vec!["p-3", "p-4", "p-5"], vec!["p-1", "p-2"]));
        assert_eq!(s.retired[0].reasons, ["older than 30d"]);
        // Both rules: union.
        let s = select(&refs, &retention(0, Some("30d")), now());
        assert_eq!(s.retired[0].reasons, ["beyond keep 0", "older than 30d"]);
        assert_eq!(names(&s).1, ["p-1", "p-2", "p-3"]);
    }

    #[test]
    fn never_retires_the_current_even_when_old() {
        let rs = [record("p", 1, Active, 400)];
        let refs: Vec<&Activation> = rs.iter().collect();
        let s = select(&refs, &retention(0, Some("1d")), now());
        assert_eq!(names(&s), (vec!["p-1"], vec![]));
    }

    #[test]
    fn retention_sources() {
        let settings = Settings {
            keep: Some(2),
            max_age: Some("12h".into()),
            ..Default::default()
        };
        let r = Retention::resolve(None, None, Some(&settings)).expect("ok");
        assert_eq!((r.keep, r.keep_from), (2, "build"));
        assert_eq!(r.max_age, Some(MaxAge(Duration::from_secs(43_200))));
        let r = Retention::resolve(Some(7), None, Some(&settings)).expect("ok");
        assert_eq!(
            (r.keep, r.keep_from, r.max_age_from),
            (7, "flag", Some("build"))
        );
        let r = Retention::resolve(None, None, None).expect("ok");
        assert_eq!(
            (r.keep, r.keep_from, r.max_age),
            (DEFAULT_KEEP, "default", None)
        );
        let bad = Settings {
            max_age: Some("soon".into()),
            ..Default::default()
        };
        assert!(Retention::resolve(None, None, Some(&bad)).is_err());
    }

    #[test]
    fn ages() {
        assert_eq!(parse_age("30d"), Ok(Duration::from_secs(30 * 86_400)));
        assert_eq!(parse_age("1d12h"), Ok(Duration::from_secs(129_600)));
        assert_eq!(parse_age("2w"), Ok(Duration::from_secs(1_209_600)));
        assert_eq!(parse_age("90m"), Ok(Duration::from_secs(5400)));
        for bad in ["", "d", "10", "10x", "-1d", "1.5d"] {
            assert!(parse_age(bad).is_err(), "{bad}");
        }
        assert_eq!(format_age(Duration::from_secs(129_600)), "1d12h");
        assert_eq!(format_age(Duration::from_secs(0)), "0s");
    }
}

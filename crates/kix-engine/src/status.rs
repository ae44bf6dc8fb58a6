//! `kix status` and `kix history`: what a Kix cluster runs, read from its
//! records, its current build and the live cluster. Reads only; needs no
//! operator.
//!
//! Health of each object of the current build: Ready, Progressing, Degraded
//! (kstatus, [`crate::health`]), Missing (in the build, not live), Drifted
//! (live, but its digest annotation is not the build's, or a field the build
//! sets is no longer kix's field manager's). Live objects of the cluster that
//! the build does not have are listed too, marked `extra`. One LIST per kind,
//! with kix's label selector, unpaged and judged as it arrives (metadata only
//! for the kinds judged by it); an object found drifted there is read whole.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures::future::{RemoteHandle, try_join_all};
use futures::{FutureExt, StreamExt, TryStreamExt, stream};
use kix_api::{
    ANNOTATION_ACTIVATIONS, ANNOTATION_DIGEST, Activation, Counts, Engine, LABEL_OWNER,
    LABEL_PACKAGE, ObjectRef, Phase, Progress, owner_value,
};
use kix_manifest::{KeyMap, KeySet, ObjectKey};
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::ApiResource;
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::{Semaphore, mpsc};

use crate::desired::{Desired, Shapes, desired_objects};
use crate::error::{EngineError, Result};
use crate::health::{Health, RuleRef, Rules};
use crate::list_stream;
use crate::live::{KixAnnotations, KixLabels, Picked, activation_clusters, belongs_to};
use crate::ownership;
use crate::records;
use crate::resources::Resources;

/// One Activation record, as `status` and `history` show it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordSummary {
    pub name: String,
    pub sequence: Option<u64>,
    pub phase: Option<Phase>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flake: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    pub user: String,
    pub host: String,
    pub time: DateTime<Utc>,
    pub kix_version: String,
    pub engine: Engine,
    pub counts: Counts,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollback_from: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
    /// The cluster's current activation.
    pub current: bool,
}

impl RecordSummary {
    pub fn new(record: &Activation, current: bool) -> RecordSummary {
        let status = record.status.as_ref();
        let receipt = &record.spec.receipt;
        RecordSummary {
            name: record.name_any(),
            sequence: record.sequence(),
            phase: record.phase(),
            message: status.and_then(|s| s.message.clone()),
            path: record.spec.source.path.clone(),
            flake: record.spec.source.flake.clone(),
            revision: record.spec.source.revision.clone(),
            user: receipt.user.clone(),
            host: receipt.host.clone(),
            time: receipt.time,
            kix_version: receipt.kix_version.clone(),
            engine: record.spec.engine,
            counts: receipt.counts,
            rollback_from: receipt.rollback_from.clone(),
            progress: status.and_then(|s| s.progress),
            current,
        }
    }
}

/// The activations of `cluster`, newest first.
pub fn history(records: &[Activation], cluster: &str) -> Vec<RecordSummary> {
    let current = records::current(records, cluster).map(|r| r.name_any());
    records::of_cluster(records, cluster)
        .into_iter()
        .rev()
        .map(|r| RecordSummary::new(r, Some(r.name_any()) == current))
        .collect()
}

/// An object's health as `kix status` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum HealthState {
    Ready,
    Progressing,
    Degraded,
    Missing,
    Drifted,
    /// Not in the build, its DELETE accepted, still there (finalizers).
    Deleting,
}

impl HealthState {
    pub fn as_str(self) -> &'static str {
        match self {
            HealthState::Ready => "Ready",
            HealthState::Progressing => "Progressing",
            HealthState::Degraded => "Degraded",
            HealthState::Missing => "Missing",
            HealthState::Drifted => "Drifted",
            HealthState::Deleting => "Deleting",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectStatus {
    pub object: ObjectRef,
    pub health: HealthState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The CEL health rule that judged it (a built-in one, or the build's
    /// naming its file); none for kstatus.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// Live and owned by this Kix cluster, but not in the current build.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub extra: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HealthCounts {
    #[serde(rename = "Ready")]
    pub ready: u32,
    #[serde(rename = "Progressing")]
    pub progressing: u32,
    #[serde(rename = "Degraded")]
    pub degraded: u32,
    #[serde(rename = "Missing")]
    pub missing: u32,
    #[serde(rename = "Drifted")]
    pub drifted: u32,
    #[serde(rename = "Deleting", skip_serializing_if = "is_zero")]
    pub deleting: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl HealthCounts {
    fn add(&mut self, state: HealthState) {
        match state {
            HealthState::Ready => self.ready += 1,
            HealthState::Progressing => self.progressing += 1,
            HealthState::Degraded => self.degraded += 1,
            HealthState::Missing => self.missing += 1,
            HealthState::Drifted => self.drifted += 1,
            HealthState::Deleting => self.deleting += 1,
        }
    }

    pub fn total(&self) -> u32 {
        self.ready + self.progressing + self.degraded + self.missing + self.drifted + self.deleting
    }

    /// Everything Ready.
    pub fn all_ready(&self) -> bool {
        self.total() == self.ready
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PackageStatus {
    pub name: String,
    /// From the build; unknown when the build could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    pub counts: HealthCounts,
    pub objects: Vec<ObjectStatus>,
}

/// Whether the current build could be read.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase", tag = "state")]
pub enum BuildState {
    /// No current activation: nothing to read.
    None,
    Read,
    /// Only live objects are shown.
    Unreadable {
        reason: String,
    },
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceSummary {
    pub name: String,
    pub package: String,
    pub version: String,
    pub activation: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<kix_api::PackagePhase>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<String>,
}

/// What `kix status` shows.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub cluster: String,
    pub current: Option<RecordSummary>,
    /// The newest record, when it is not the current one (a deploy that
    /// failed, or one still Pending or Applying: the current record is the
    /// applied one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latest: Option<RecordSummary>,
    pub build: BuildState,
    pub counts: HealthCounts,
    /// In the build's apply order, then packages only live objects name.
    pub packages: Vec<PackageStatus>,
    pub package_instances: Vec<InstanceSummary>,
}

/// How many LISTs run at once.
const LIST_CONCURRENCY: usize = 8;

/// Which objects are the cluster's: those claiming one of its records,
/// and, when its current build lacks them, only when a build of the
/// records they claim has them (anyone may write a claim).
struct Claims<'a> {
    cluster: &'a str,
    clusters: BTreeMap<String, String>,
    paths: BTreeMap<String, String>,
}

impl<'a> Claims<'a> {
    fn of(cluster: &'a str, all: &[Activation]) -> Claims<'a> {
        Claims {
            cluster,
            clusters: activation_clusters(all),
            paths: crate::claims::record_paths(all),
        }
    }

    fn hold(&self, key: &ObjectKey, activations: &BTreeSet<String>, in_build: bool) -> bool {
        let mut claimed = activations
            .iter()
            .filter(|a| belongs_to(a, self.cluster, &self.clusters))
            .peekable();
        claimed.peek().is_some()
            && (in_build
                || claimed.any(|a| crate::claims::holds(a, key, &self.paths, &BTreeSet::new())))
    }
}

/// Reads the status of `cluster`.
pub async fn status(client: &Client, cluster: &str) -> Result<Status> {
    let all = records::list_all_required(client).await?;
    let mine = records::of_cluster(&all, cluster);
    let current = records::applied(&all, cluster);
    let latest = mine
        .last()
        .filter(|r| Some(r.name_any()) != current.map(|c| c.name_any()))
        .map(|r| RecordSummary::new(r, false));
    let claims = Claims::of(cluster, &all);
    let completed_jobs = crate::health::completed::of_cluster(&all, cluster);
    // Read meanwhile: it was a round trip after the judging.
    let (instances, package_instances) = {
        let (client, cluster) = (client.clone(), cluster.to_string());
        async move { records::package_instances(&client, &cluster).await }.remote_handle()
    };
    tokio::spawn(instances);

    // The kinds this cluster's records name are listed from now on, their
    // pages fetched ahead (a bounded number) while the build is read.
    let mut resources = Resources::new(client.clone());
    let lister = Lister::new(client, cluster, &all);
    let mut listings: BTreeMap<(String, String), Listing> =
        crate::plan::recorded_kinds(&mine, &mut resources)
            .await?
            .into_iter()
            .map(|(key, (api, namespaced))| (key, lister.start(api, namespaced)))
            .collect();

    let CurrentBuild {
        state: build_state,
        rules,
        packages: build_packages,
        desired,
    } = match current {
        Some(current) => read_current_build(current, &mut resources).await,
        None => CurrentBuild::none(),
    };

    // And the build's kinds; a kind the build reads through another
    // version than the records is listed through the build's.
    for ((group, kind), d) in crate::plan::served_kinds(&desired) {
        let (key, r) = ((group.to_string(), kind.to_string()), &d.resource);
        if listings.get(&key).is_none_or(|l| l.resource != r.api) {
            listings.insert(key, lister.start(r.api.clone(), r.namespaced));
        }
    }
    // Each live object is judged as its LIST page arrives and only the
    // verdict is kept: holding every full object (managedFields and all)
    // until the end took most of the memory at 50,000 objects.
    let by_key: KeyMap<&ObjectKey, &Desired> = desired.iter().map(|d| (&d.key, d)).collect();
    let manager = desired
        .first()
        .map(|d| kix_api::field_manager(&d.cluster))
        .unwrap_or_default();
    let judge = |item: &Item| -> Option<Judged> {
        let l = item.seen();
        if !l.owned || !claims.hold(&l.key, &l.activations, by_key.contains_key(&l.key)) {
            return None;
        }
        let verdict = match by_key.get(&l.key) {
            Some(d) => desired_health(d, &l, item, &manager, &rules),
            None => Ok(item
                .deleting_health()
                .unwrap_or_else(|| live_health(&item.judged_view(&rules), &rules))),
        };
        Some(Judged {
            key: l.key,
            api_version: l.api_version,
            package: l.package,
            reread: verdict
                .is_err()
                .then(|| (item.resource.clone(), item.namespaced)),
            verdict: verdict.unwrap_or(Verdict::of(HealthState::Drifted, None)),
        })
    };
    let judged = try_join_all(listings.into_values().map(|l| l.judged(&judge)))
        .await?
        .into_iter()
        .flatten()
        .collect::<Vec<_>>();
    let judged = judged_whole(client, judged, &judge).await?;
    let mine_live: KeyMap<&ObjectKey, &Judged> = judged.iter().map(|l| (&l.key, l)).collect();

    let packages = by_package(
        &desired,
        &mine_live,
        &completed_jobs,
        &build_packages,
        matches!(build_state, BuildState::Read),
    );
    let mut counts = HealthCounts::default();
    for p in &packages {
        for o in &p.objects {
            counts.add(o.health);
        }
    }
    let package_instances = package_instances
        .await?
        .iter()
        .map(InstanceSummary::of)
        .collect();
    drop(mine_live);
    crate::drop_later((judged, desired));
    Ok(Status {
        cluster: cluster.to_string(),
        current: current.map(|c| RecordSummary::new(c, true)),
        latest,
        build: build_state,
        counts,
        packages,
        package_instances,
    })
}

impl InstanceSummary {
    fn of(p: &kix_api::PackageInstance) -> InstanceSummary {
        InstanceSummary {
            name: p.name_any(),
            package: p.spec.package.clone(),
            version: p.spec.version.clone(),
            activation: p.spec.activation.clone(),
            phase: p.status.as_ref().and_then(|s| s.phase),
            health: p.status.as_ref().and_then(|s| s.health.clone()),
        }
    }
}

/// The current record's build as status reads it: whether it could be
/// read, its health rules, its packages and desired objects.
struct CurrentBuild {
    state: BuildState,
    rules: Rules,
    /// (name, version) of each package.
    packages: Vec<(String, String)>,
    desired: Vec<Desired>,
}

impl CurrentBuild {
    fn none() -> CurrentBuild {
        CurrentBuild {
            state: BuildState::None,
            rules: Rules::builtin(),
            packages: Vec::new(),
            desired: Vec::new(),
        }
    }
}

/// Reads the build of `current`; a build that cannot be read says why.
async fn read_current_build(current: &Activation, resources: &mut Resources) -> CurrentBuild {
    let mut read = CurrentBuild::none();
    let path = &current.spec.source.path;
    match kix_manifest::read_tree(
        std::path::Path::new(path),
        &kix_manifest::ReadOptions::default(),
    )
    .map_err(EngineError::from)
    {
        Ok(build) => match desired_objects(&build, resources, Shapes::Made).await {
            Ok(d) => {
                read.desired = d;
                // The reader compiled them: they compile.
                read.rules = build.health_rules().unwrap_or_default();
                read.packages = build
                    .packages
                    .iter()
                    .map(|p| (p.name.clone(), p.version.clone()))
                    .collect();
                read.state = BuildState::Read;
                // Freed meanwhile: ~0.1 s at 50,000 objects.
                crate::drop_later(build);
            }
            Err(err) => {
                read.state = BuildState::Unreadable {
                    reason: err.to_string(),
                };
            }
        },
        Err(err) => {
            read.state = BuildState::Unreadable {
                reason: format!("{path}: {err}"),
            };
        }
    }
    read
}

/// The objects by package: the build's (Missing when not live; a finished
/// Job removed after it ran is Ready), then the live ones the build lacks
/// (`extra` when the build was read).
fn by_package(
    desired: &[Desired],
    mine_live: &KeyMap<&ObjectKey, &Judged>,
    completed_jobs: &crate::health::completed::CompletedJobs,
    build_packages: &[(String, String)],
    have_build: bool,
) -> Vec<PackageStatus> {
    let mut packages: Vec<PackageStatus> = build_packages
        .iter()
        .map(|(name, version)| PackageStatus {
            name: name.clone(),
            version: Some(version.clone()),
            counts: HealthCounts::default(),
            objects: vec![],
        })
        .collect();
    let push = |packages: &mut Vec<PackageStatus>, package: &str, status: ObjectStatus| {
        let index = match packages.iter().position(|p| p.name == package) {
            Some(i) => i,
            None => {
                packages.push(PackageStatus {
                    name: package.to_string(),
                    version: None,
                    counts: HealthCounts::default(),
                    objects: vec![],
                });
                packages.len() - 1
            }
        };
        packages[index].counts.add(status.health);
        packages[index].objects.push(status);
    };
    let mut in_build = KeySet::default();
    for d in desired {
        in_build.insert(&d.key);
        let object = ObjectRef::new(
            d.api_version.clone(),
            d.key.kind.clone(),
            d.key.namespace.clone(),
            d.key.name.clone(),
        );
        let verdict = match mine_live.get(&d.key) {
            // Removed after it finished (its TTL): it ran for this build.
            None if crate::gates::ran_once(completed_jobs, &d.key, &d.digest) => Verdict::of(
                HealthState::Ready,
                Some("completed; removed after it finished".into()),
            ),
            None => Verdict::of(HealthState::Missing, None),
            Some(l) => l.verdict.clone(),
        };
        push(
            &mut packages,
            &d.package,
            ObjectStatus {
                object,
                health: verdict.state,
                reason: verdict.reason,
                rule: verdict.rule,
                extra: false,
            },
        );
    }
    let mut extras: Vec<&&Judged> = mine_live
        .values()
        .filter(|l| !in_build.contains(&l.key))
        .collect();
    extras.sort_by(|a, b| a.package.cmp(&b.package).then_with(|| a.key.cmp(&b.key)));
    for l in extras {
        let Verdict {
            state,
            reason,
            rule,
        } = l.verdict.clone();
        push(
            &mut packages,
            l.package.as_deref().unwrap_or("(no package label)"),
            ObjectStatus {
                object: ObjectRef::new(
                    l.api_version.clone(),
                    l.key.kind.clone(),
                    l.key.namespace.clone(),
                    l.key.name.clone(),
                ),
                health: state,
                reason,
                rule,
                extra: have_build,
            },
        );
    }
    packages
}

/// Drifted before anything else: a drifted object's health says little
/// about the build. A field is drifted when kix's field manager no longer
/// owns it ([`crate::ownership::drifted_fields`]); the digest of an object
/// several Kix clusters share is the one that applied it last.
fn desired_health(
    d: &Desired,
    l: &Seen,
    item: &Item,
    manager: &str,
    rules: &Rules,
) -> std::result::Result<Verdict, ReadWhole> {
    let shared = l.activations.len() > 1;
    if l.digest.as_deref() != Some(d.digest.as_str()) && !shared {
        return Ok(Verdict::of(
            HealthState::Drifted,
            Some("its digest is not the build's: another build or a person changed it".into()),
        ));
    }
    // Most objects: kix owns all it applied, which its own managedFields
    // entry answers. Only a drifted one is read whole, to say who
    // changed what.
    let fields = if item.owned.owns(d, item.kix_fields(manager)) {
        vec![]
    } else if item.partial {
        return Err(ReadWhole);
    } else {
        ownership::drifted_fields(&d.manifest(), &item.whole(), manager)
    };
    if !fields.is_empty() {
        let shown: Vec<String> = fields.iter().take(3).map(ToString::to_string).collect();
        let more = if fields.len() > 3 {
            format!(" and {} more", fields.len() - 3)
        } else {
            String::new()
        };
        return Ok(Verdict::of(
            HealthState::Drifted,
            Some(format!(
                "changed since kix applied it: {}{more}",
                shown.join(", ")
            )),
        ));
    }
    Ok(live_health(&item.judged_view(rules), rules))
}

/// A drifted object seen only by its metadata: what drifted is said from
/// the whole object ([`judged_whole`]).
struct ReadWhole;

/// The objects a metadata-only listing found drifted, each read whole (a
/// GET each: drift is the exception) and judged again; an object gone
/// meanwhile is no longer live.
async fn judged_whole(
    client: &Client,
    judged: Vec<Judged>,
    judge: &(dyn Fn(&Item) -> Option<Judged> + Sync),
) -> Result<Vec<Judged>> {
    if judged.iter().all(|j| j.reread.is_none()) {
        return Ok(judged);
    }
    let (reread, mut out): (Vec<Judged>, Vec<Judged>) =
        judged.into_iter().partition(|j| j.reread.is_some());
    let read = stream::iter(reread.into_iter().filter_map(|j| {
        let (resource, namespaced) = j.reread?;
        let client = client.clone();
        Some(async move {
            let api: Api<DynamicObject> = match &j.key.namespace {
                Some(ns) if namespaced => Api::namespaced_with(client, ns, &resource),
                _ => Api::all_with(client, &resource),
            };
            let object = api
                .get_opt(&j.key.name)
                .await
                .map_err(|source| EngineError::Object {
                    action: "reading",
                    key: j.key.clone(),
                    source,
                })?;
            let text = object
                .map(|o| serde_json::value::to_raw_value(&o))
                .transpose()
                .map_err(|e| EngineError::Other(format!("{}: {e}", j.key)))?;
            Ok::<_, EngineError>(text.map(|t| (t, resource, namespaced)))
        })
    }))
    .buffer_unordered(LIST_CONCURRENCY)
    .try_collect::<Vec<_>>()
    .await?;
    let owned = Owned::default();
    for (text, resource, namespaced) in read.into_iter().flatten() {
        let item = Item::read(&text, &resource, namespaced, false, &owned)
            .map_err(|e| EngineError::Other(format!("reading {}: {e}", resource.kind)))?;
        out.extend(judge(&item));
    }
    Ok(out)
}

/// A status row's health, its reason, and the CEL rule that judged it.
#[derive(Clone, Debug)]
struct Verdict {
    state: HealthState,
    reason: Option<String>,
    rule: Option<String>,
}

impl Verdict {
    fn of(state: HealthState, reason: Option<String>) -> Verdict {
        Verdict {
            state,
            reason,
            rule: None,
        }
    }
}

fn live_health(value: &Value, rules: &Rules) -> Verdict {
    let judged = rules.judge(value);
    let (state, reason) = match judged.health {
        Health::Ready => (HealthState::Ready, None),
        Health::Progressing { reason } => (HealthState::Progressing, Some(reason)),
        Health::Degraded { reason } => (HealthState::Degraded, Some(reason)),
    };
    Verdict {
        state,
        reason,
        rule: (judged.rule != RuleRef::Kstatus).then(|| judged.rule.to_string()),
    }
}

/// What a live object kix labelled says of itself.
struct Seen {
    key: ObjectKey,
    api_version: String,
    owned: bool,
    digest: Option<String>,
    activations: std::collections::BTreeSet<String>,
    package: Option<String>,
}

/// One listed object, read lean: its metadata typed (kix's labels and
/// annotations, the managers without their field sets), its spec and
/// status left as text until health reads them, and its whole text for
/// the rare object found drifted. A `Value` of every full object, built
/// and then freed, was most of `kix status`'s time at 50,000 objects.
struct Item<'a> {
    resource: &'a ApiResource,
    owned: &'a Owned,
    namespaced: bool,
    /// Read by a metadata-only LIST: its text lacks the payload.
    partial: bool,
    text: &'a RawValue,
    lean: Listed<'a>,
}

#[derive(serde::Deserialize)]
struct Listed<'a> {
    #[serde(borrow)]
    metadata: ListedMeta<'a>,
    #[serde(borrow)]
    spec: Option<&'a RawValue>,
    #[serde(borrow)]
    status: Option<&'a RawValue>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListedMeta<'a> {
    name: Option<String>,
    namespace: Option<String>,
    labels: Option<Picked<KixLabels>>,
    annotations: Option<Picked<KixAnnotations>>,
    creation_timestamp: Option<String>,
    deletion_timestamp: Option<String>,
    generation: Option<i64>,
    finalizers: Option<Vec<String>>,
    #[serde(borrow)]
    managed_fields: Option<Vec<ListedManager<'a>>>,
}

type FieldSet = serde_json::Map<String, Value>;

/// Whether kix still owns all it applied, answered once per shape of
/// manifest ([`ownership::skeleton`]) and text of kix's field set: the
/// objects of a page are a handful of shapes, and parsing and walking
/// each one was a third of `kix status` at 50,000 objects.
#[derive(Default)]
struct Owned(RefCell<HashMap<usize, HashMap<Box<str>, bool>>>);

impl Owned {
    fn owns(&self, d: &Desired, fields: Option<&str>) -> bool {
        let set = |t: &str| serde_json::from_str::<FieldSet>(t).unwrap_or_default();
        let Some(shape) = &d.shape else {
            return ownership::owns_manifest(&d.manifest(), fields.map(set).as_ref());
        };
        // A shape by its address: shapes are shared, and the build's
        // objects outlive this memo. No field set is spelled "".
        let shape = Arc::as_ptr(shape).cast::<u8>() as usize;
        let text = fields.unwrap_or_default();
        if let Some(&owned) = self.0.borrow().get(&shape).and_then(|m| m.get(text)) {
            return owned;
        }
        let owned = ownership::owns_manifest(&d.manifest(), fields.map(set).as_ref());
        let mut known = self.0.borrow_mut();
        known.entry(shape).or_default().insert(text.into(), owned);
        owned
    }
}

/// A managedFields entry, its field set as text.
#[derive(serde::Deserialize)]
struct ListedManager<'a> {
    manager: Option<String>,
    operation: Option<String>,
    subresource: Option<String>,
    #[serde(borrow, rename = "fieldsV1")]
    fields: Option<&'a RawValue>,
}

impl<'a> Item<'a> {
    fn read(
        text: &'a RawValue,
        resource: &'a ApiResource,
        namespaced: bool,
        partial: bool,
        owned: &'a Owned,
    ) -> serde_json::Result<Item<'a>> {
        Ok(Item {
            resource,
            owned,
            namespaced,
            partial,
            text,
            lean: serde_json::from_str(text.get())?,
        })
    }

    fn seen(&self) -> Seen {
        let meta = &self.lean.metadata;
        let key = ObjectKey {
            group: self.resource.group.clone(),
            kind: self.resource.kind.clone(),
            namespace: meta.namespace.clone().filter(|_| self.namespaced),
            name: meta.name.clone().unwrap_or_default(),
        };
        let label = |k| meta.labels.as_ref().and_then(|l| l.get(k));
        let annotation = |k| meta.annotations.as_ref().and_then(|a| a.get(k));
        Seen {
            owned: label(LABEL_OWNER).is_some_and(|v| {
                v == owner_value(&key.group, &key.kind, key.namespace.as_deref(), &key.name)
            }),
            digest: annotation(ANNOTATION_DIGEST).map(str::to_string),
            activations: annotation(ANNOTATION_ACTIVATIONS)
                .map(kix_api::labels::parse_activations)
                .unwrap_or_default(),
            package: label(LABEL_PACKAGE).map(str::to_string),
            api_version: self.resource.api_version.clone(),
            key,
        }
    }

    /// What `rules` judge of the object: the whole object for a kind a CEL
    /// rule judges (it may read any field: labels, annotations, ...; such
    /// kinds are few), else the lean [`Item::health_view`].
    fn judged_view(&self, rules: &Rules) -> Value {
        if !self.partial
            && rules.has_cel_rule(&self.resource.group, &self.resource.kind)
            && let Ok(Value::Object(mut whole)) = serde_json::from_str(self.text.get())
        {
            // A LIST's items of built-in kinds come without their type.
            whole.insert(
                "apiVersion".into(),
                self.resource.api_version.clone().into(),
            );
            whole.insert("kind".into(), self.resource.kind.clone().into());
            return Value::Object(whole);
        }
        self.health_view()
    }

    /// What kstatus reads of an object: its type, name, metadata's
    /// timestamps and generation, spec and status.
    fn health_view(&self) -> Value {
        let meta = &self.lean.metadata;
        let mut metadata = serde_json::Map::new();
        let fields = [
            ("name", meta.name.clone().map(Value::from)),
            ("namespace", meta.namespace.clone().map(Value::from)),
            (
                "creationTimestamp",
                meta.creation_timestamp.clone().map(Value::from),
            ),
            (
                "deletionTimestamp",
                meta.deletion_timestamp.clone().map(Value::from),
            ),
            ("generation", meta.generation.map(Value::from)),
        ];
        for (name, value) in fields {
            if let Some(value) = value {
                metadata.insert(name.into(), value);
            }
        }
        let mut view = serde_json::Map::new();
        view.insert(
            "apiVersion".into(),
            self.resource.api_version.clone().into(),
        );
        view.insert("kind".into(), self.resource.kind.clone().into());
        view.insert("metadata".into(), Value::Object(metadata));
        for (name, text) in [("spec", self.lean.spec), ("status", self.lean.status)] {
            if let Some(value) = text.and_then(|t| serde_json::from_str(t.get()).ok()) {
                view.insert(name.into(), value);
            }
        }
        Value::Object(view)
    }

    /// The field set of kix's Apply entry (see [`ownership::kix_manager`]),
    /// as text; None when it has none.
    fn kix_fields(&self, manager: &str) -> Option<&'a str> {
        let entries = self
            .lean
            .metadata
            .managed_fields
            .as_deref()
            .unwrap_or_default();
        fn text(s: &Option<String>) -> &str {
            s.as_deref().unwrap_or_default()
        }
        let kix = ownership::kix_manager(
            entries
                .iter()
                .map(|e| (text(&e.manager), text(&e.operation))),
            manager,
        );
        let entry = entries.iter().find(|e| {
            text(&e.manager) == kix
                && text(&e.operation) == "Apply"
                && text(&e.subresource).is_empty()
        })?;
        Some(entry.fields.map_or("{}", RawValue::get))
    }

    /// The whole object, apiVersion and kind added (list items carry none).
    fn whole(&self) -> Value {
        let mut value: Value = serde_json::from_str(self.text.get()).unwrap_or(Value::Null);
        if let Some(map) = value.as_object_mut() {
            map.insert(
                "apiVersion".into(),
                self.resource.api_version.clone().into(),
            );
            map.insert("kind".into(), self.resource.kind.clone().into());
        }
        value
    }

    /// Deleting, with its finalizers and how long it has waited, when it
    /// has a deletionTimestamp.
    fn deleting_health(&self) -> Option<Verdict> {
        let meta = &self.lean.metadata;
        let finalizers = meta.finalizers.clone().unwrap_or_default();
        let deletion = crate::live::Deletion::of(meta.deletion_timestamp.as_deref(), &finalizers)?;
        let waited = deletion
            .waited()
            .map(|w| format!(" for {w}"))
            .unwrap_or_default();
        Some(Verdict::of(
            HealthState::Deleting,
            Some(format!("{}{waited}", deletion.describe())),
        ))
    }
}

/// A live object of this Kix cluster, judged.
struct Judged {
    key: ObjectKey,
    api_version: String,
    package: Option<String>,
    /// Set when it must be read whole to be judged ([`ReadWhole`]).
    reread: Option<(ApiResource, bool)>,
    verdict: Verdict,
}

/// Objects per batch judged at once (a batch of 2,000 ConfigMaps is ~4 MB).
const PAGE: usize = 2_000;

/// The items of a LIST page, as text.
#[derive(serde::Deserialize)]
struct Page<'a> {
    /// `null` when the list is empty.
    #[serde(borrow)]
    items: Option<Vec<&'a RawValue>>,
}

/// Batches a listing reads ahead before they are judged: bounds the memory
/// held while the build is read.
const PAGES_AHEAD: usize = 8;

/// One kind's LIST, cluster-wide, kix's label selector, full objects,
/// fetched on a task of its own; dropping it stops the task.
struct Listing {
    resource: ApiResource,
    namespaced: bool,
    /// Listed as metadata only ([`crate::health::judged_by_metadata`]).
    metadata_only: bool,
    /// Each page's text, in order.
    pages: mpsc::Receiver<Result<String>>,
    _fetching: RemoteHandle<()>,
}

/// Starts the LISTs of one Kix cluster's objects, a bounded number at once.
struct Lister {
    client: Client,
    /// The Kix cluster's own label once all its objects carry it (as its
    /// plans list): kix's label alone picks every Kix cluster's objects.
    selector: Arc<str>,
    permits: Arc<Semaphore>,
}

impl Lister {
    fn new(client: &Client, cluster: &str, records: &[Activation]) -> Lister {
        let labelled = records::objects_labelled(records, cluster);
        Lister {
            client: client.clone(),
            selector: crate::plan::objects_selector(cluster, labelled).into(),
            permits: Arc::new(Semaphore::new(LIST_CONCURRENCY)),
        }
    }

    /// Starts fetching the pages of one kind's objects.
    fn start(&self, resource: ApiResource, namespaced: bool) -> Listing {
        let (pages, receiver) = mpsc::channel(PAGES_AHEAD);
        let metadata_only = crate::health::judged_by_metadata(&resource.group, &resource.kind);
        let (client, r) = (self.client.clone(), resource.clone());
        let (permits, selector) = (Arc::clone(&self.permits), Arc::clone(&self.selector));
        let (fetching, handle) = async move {
            // One permit for the whole LIST, read as it arrives.
            let _permit = permits.acquire().await;
            let kind = r.kind.clone();
            let body = match open_list(&client, &r, &selector, metadata_only).await {
                Ok(Some(body)) => body,
                // Not served: no objects.
                Ok(None) => return,
                Err(err) => {
                    let _ = pages.send(Err(err)).await;
                    return;
                }
            };
            if let Err(err) = list_stream::cut_items(body, PAGE, &pages).await {
                let err = EngineError::List {
                    kind,
                    source: kube::Error::ReadEvents(err),
                };
                let _ = pages.send(Err(err)).await;
            }
        }
        .remote_handle();
        tokio::spawn(fetching);
        Listing {
            resource,
            namespaced,
            metadata_only,
            pages: receiver,
            _fetching: handle,
        }
    }
}

impl Listing {
    /// Each object handed to `judge` as its page is read, and dropped.
    async fn judged(
        mut self,
        judge: &(dyn Fn(&Item) -> Option<Judged> + Sync),
    ) -> Result<Vec<Judged>> {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut out = Vec::new();
        while let Some(first) = self.pages.recv().await {
            // The pages fetched meanwhile are judged side by side: at 50,000
            // objects status waits on judging, not on the apiserver.
            let mut batch = vec![first?];
            while batch.len() < threads
                && let Ok(page) = self.pages.try_recv()
            {
                batch.push(page?);
            }
            let pages: Vec<Result<Vec<Judged>>> = std::thread::scope(|scope| {
                let running: Vec<_> = batch
                    .iter()
                    .map(|text| scope.spawn(|| self.judge_page(text, judge)))
                    .collect();
                running
                    .into_iter()
                    .map(|t| t.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                    .collect()
            });
            for page in pages {
                out.extend(page?);
            }
        }
        Ok(out)
    }

    fn judge_page(
        &self,
        text: &str,
        judge: &(dyn Fn(&Item) -> Option<Judged> + Sync),
    ) -> Result<Vec<Judged>> {
        let list_error = |e| EngineError::List {
            kind: self.resource.kind.clone(),
            source: kube::Error::SerdeError(e),
        };
        let page: Page = serde_json::from_str(text).map_err(list_error)?;
        let mut out = Vec::new();
        let owned = Owned::default();
        for text in page.items.unwrap_or_default() {
            let item = Item::read(
                text,
                &self.resource,
                self.namespaced,
                self.metadata_only,
                &owned,
            )
            .map_err(list_error)?;
            out.extend(judge(&item));
        }
        Ok(out)
    }
}

/// The LIST of `resource` with kix's label selector, unpaged, its body to
/// be read as it arrives; None when the kind is not served (404).
async fn open_list(
    client: &Client,
    resource: &ApiResource,
    selector: &str,
    metadata_only: bool,
) -> Result<Option<impl futures::AsyncBufRead + Unpin + use<>>> {
    let params = ListParams::default().labels(selector);
    let list_error = |source| EngineError::List {
        kind: resource.kind.clone(),
        source,
    };
    let url = DynamicObject::url_path(resource, None);
    let request = if metadata_only {
        kube::core::Request::new(url).list_metadata(&params)
    } else {
        kube::core::Request::new(url).list(&params)
    }
    .map_err(|e| list_error(kube::Error::BuildRequest(e)))?;
    match client.request_stream(request).await {
        Ok(body) => Ok(Some(Box::pin(body))),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
        Err(source) => Err(list_error(source)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::health;
    use serde_json::json;

    fn resource(api_version: &str, kind: &str) -> ApiResource {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: api_version.into(),
            kind: kind.into(),
            plural: format!("{}s", kind.to_lowercase()),
        }
    }

    /// `object` as a LIST returns it: without apiVersion and kind.
    fn listed(object: &Value) -> Box<RawValue> {
        let mut item = object.clone();
        let map = item.as_object_mut().expect("an object");
        map.remove("apiVersion");
        map.remove("kind");
        RawValue::from_string(item.to_string()).expect("JSON")
    }

    fn with<'a>(
        object: &Value,
        text: &'a RawValue,
        r: &'a ApiResource,
        owned: &'a Owned,
    ) -> Item<'a> {
        Item::read(
            text,
            r,
            object["metadata"]["namespace"].is_string(),
            false,
            owned,
        )
        .expect("reads")
    }

    #[test]
    fn the_lean_view_judges_health_as_the_whole_object_does() {
        let memo = Owned::default();
        let meta = |extra: Value| {
            let mut m = json!({"name": "o", "namespace": "n", "uid": "u", "resourceVersion": "7",
                "labels": {"app": "x"}, "annotations": {"note": "\"quoted\" \u{e9}"},
                "managedFields": [{"manager": "kix/a", "operation": "Apply", "fieldsV1": {"f:data": {}}}]});
            for (k, v) in extra.as_object().expect("map") {
                m[k] = v.clone();
            }
            m
        };
        let cond =
            |t: &str, s: &str| json!({"type": t, "status": s, "reason": "R", "message": "M"});
        let corpus = [
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(json!({})), "data": {"a": "b"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "b"},
                "metadata": meta(json!({"deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["x.io/hold"]}))}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta(json!({"generation": 3})),
                "spec": {"replicas": 2}, "status": {"observedGeneration": 2}}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta(json!({"generation": 2})),
                "spec": {"replicas": 2}, "status": {"observedGeneration": 2, "replicas": 2,
                    "updatedReplicas": 2, "readyReplicas": 1, "availableReplicas": 1}}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta(json!({"generation": 2})),
                "spec": {"replicas": 1}, "status": {"observedGeneration": 2, "replicas": 1,
                    "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1}}),
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": meta(json!({"creationTimestamp": "2020-01-01T00:00:00Z"})),
                "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Pending",
                    "conditions": [cond("PodScheduled", "False")]}}),
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta(json!({})),
                "status": {"conditions": [cond("Failed", "True")]}}),
            json!({"apiVersion": "v1", "kind": "Service", "metadata": meta(json!({})),
                "spec": {"type": "LoadBalancer"}, "status": {"loadBalancer": {}}}),
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": meta(json!({})),
                "status": {"conditions": [cond("Ready", "False")]}}),
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": meta(json!({})),
                "status": {"conditions": [cond("Stalled", "True")]}}),
        ];
        for object in corpus {
            let r = resource(
                object["apiVersion"].as_str().expect("v"),
                object["kind"].as_str().expect("k"),
            );
            let text = listed(&object);
            let item = with(&object, &text, &r, &memo);
            assert_eq!(health(&item.health_view()), health(&object), "{object:#}");
            assert_eq!(item.whole(), object);
        }
    }

    #[test]
    fn kix_field_set_agrees_with_the_drift_of_the_whole_object() {
        // One memo for every case, as for the objects of one page.
        let memo = Owned::default();
        let manifest = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "o", "namespace": "n", "labels": {"app": "x"},
                "annotations": {"kix.run/digest": "d"}},
            "data": {"x": "1", "y": "2"}});
        let all =
            json!({"f:data": {"f:x": {}, "f:y": {}}, "f:metadata": {"f:labels": {"f:app": {}}}});
        let no_y = json!({"f:data": {"f:x": {}}, "f:metadata": {"f:labels": {"f:app": {}}}});
        let entry = |manager: &str, operation: &str, fields: &Value| json!({"manager": manager, "operation": operation, "fieldsV1": fields});
        let cases = [
            (json!([entry("kix/a", "Apply", &all)]), true),
            (json!([entry("kix", "Apply", &all)]), true),
            (
                json!([entry("kix", "Apply", &all), entry("kix/a", "Apply", &no_y)]),
                false,
            ),
            (
                json!([
                    entry("kix/a", "Apply", &no_y),
                    entry("kubectl", "Update", &json!({"f:data": {"f:y": {}}}))
                ]),
                false,
            ),
            (json!([entry("kix/a", "Apply", &no_y)]), false),
            (json!([entry("kix/a", "Update", &all)]), false),
            (
                json!([{"manager": "kix/a", "operation": "Apply", "subresource": "status", "fieldsV1": all}]),
                false,
            ),
            (json!([{"manager": "kix/a", "operation": "Apply"}]), false),
            (json!([]), false),
        ];
        for (entries, owned) in cases {
            let mut object = manifest.clone();
            object["metadata"]["managedFields"] = entries;
            object["data"]["y"] = json!("changed");
            let r = resource("v1", "ConfigMap");
            let text = listed(&object);
            let item = with(&object, &text, &r, &memo);
            let set = item
                .kix_fields("kix/a")
                .map(|t| serde_json::from_str::<FieldSet>(t).expect("a field set"));
            let fast = ownership::owns_manifest(&manifest, set.as_ref());
            let whole = ownership::drifted_fields(&manifest, &item.whole(), "kix/a");
            assert_eq!(fast, owned, "{object:#}");
            assert_eq!(fast, whole.is_empty(), "{object:#}: {whole:?}");
        }
    }

    #[test]
    fn kix_labels_and_annotations_are_read_with_escapes() {
        let r = resource("v1", "ConfigMap");
        let owner = owner_value("", "ConfigMap", Some("n"), "o");
        let text = format!(
            r#"{{"metadata": {{"name": "o", "namespace": "n", "labels": {{"{LABEL_OWNER}": "{owner}",
            "{LABEL_PACKAGE}": "p\u0031", "other": null}}, "annotations": {{"{ANNOTATION_DIGEST}": "d\"q"}}}}}}"#
        );
        let text = RawValue::from_string(text).expect("JSON");
        let owned = Owned::default();
        let seen = Item::read(&text, &r, true, true, &owned)
            .expect("reads")
            .seen();
        assert!(seen.owned);
        assert_eq!(seen.package.as_deref(), Some("p1"));
        assert_eq!(seen.digest.as_deref(), Some("d\"q"));
        assert_eq!(seen.key.namespace.as_deref(), Some("n"));
    }
}

//! The reconciler of Activation records with `engine: operator`.
//!
//! For the current record of a Kix cluster: validate the store path, apply
//! the build with the engine (the same one `kix deploy` uses), settle the
//! phase, supersede the previous record. While it is Active or Degraded, keep
//! it applied: re-apply drift, re-create deleted objects, prune. A deleted
//! record's finalizer releases its objects and reports what it could not.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;
use k8s_openapi::api::core::v1::ObjectReference;
use kix_api::{Activation, Drift, FINALIZER, FailedDeletion, Phase};
use kix_engine::budget::DeletionConsent;
use kix_engine::deploy::{DeployOptions, OnError, ReceiptInfo};
use kix_engine::gates::{self, Refusal};
use kix_engine::plan::PlanOptions;
use kix_manifest::StorePath;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::{Client, Resource, ResourceExt};
use tracing::{info, instrument, warn};

use crate::metrics::Metrics;

/// Why a reconcile failed; the variant is the metric label.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("engine: {0}")]
    Engine(#[from] kix_engine::EngineError),
    #[error("finalizer: {0}")]
    Finalizer(String),
    #[error("objects could not be released: {0}")]
    Release(String),
}

impl ReconcileError {
    pub fn reason(&self) -> &'static str {
        match self {
            ReconcileError::Engine(_) => "engine",
            ReconcileError::Finalizer(_) => "finalizer",
            ReconcileError::Release(_) => "release",
        }
    }
}

pub struct Context {
    pub client: Client,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    pub resync: Duration,
    pub holder: String,
    pub lease_namespace: String,
    /// Kix clusters this operator manages; empty: all.
    pub clusters: BTreeSet<String>,
    pub allow: gates::AllowList,
    /// Kix cluster → its current operator record; record → cluster. Lets the
    /// watches on owned objects find the record to reconcile.
    pub current: Mutex<BTreeMap<String, String>>,
    /// Kinds (apiVersion/Kind) the current records contain: the watches to run.
    pub kinds: Mutex<BTreeSet<String>>,
    /// Objects another manager keeps changing back, and their backoff.
    pub fights: Mutex<crate::fights::Fights>,
    /// Record → the CRD refusal last published for it as an Event: the
    /// cached record can lag behind the condition written for it.
    pub crd_refusals: Mutex<BTreeMap<String, String>>,
    /// Record → the objects its watches saw change since it was last
    /// planned, and when it was last planned whole.
    pub touched: Mutex<BTreeMap<String, Touched>>,
    /// Starts a reconcile of a record (the applied one, when a new build
    /// failed and it is current again).
    pub trigger:
        tokio::sync::mpsc::UnboundedSender<kube::runtime::reflector::ObjectRef<Activation>>,
    /// Whom each record acts as ([`crate::tenant`]).
    pub tenants: crate::tenant::Tenants,
    /// Every Activation record as the operator's watch last saw it: what a
    /// reconcile reads of the records, instead of listing them all.
    pub records: kube::runtime::reflector::Store<Activation>,
    /// The turns of Active records' full re-checks ([`crate::upkeep`]).
    pub upkeep: crate::upkeep::Upkeep,
    /// Fetches and verifies builds, in the operator's store.
    pub fetcher: Arc<kix_nix::Fetcher>,
    /// With `--shards` above 1: the shards this replica acts on now
    /// ([`crate::shards`]); None: every record (the leader's).
    pub shards: Option<Arc<crate::shards::ShardSet>>,
    /// With `--alerts`: this term's notifications ([`crate::notify`]).
    pub notifier: Option<Arc<crate::notify::Notifier>>,
}

/// The objects of a record the watches saw change, since its last plan.
#[derive(Debug, Default)]
pub struct Touched {
    pub objects: BTreeSet<kix_manifest::ObjectKey>,
    /// When the record was last planned whole (all objects read).
    pub planned_whole: Option<Instant>,
    /// What the record's build declares: an object claiming the record
    /// that is not in it is not the record's ([`kix_engine::claims`]).
    pub inventory: Option<Arc<kix_engine::claims::Inventory>>,
    /// Planned whole at its next reconcile, without waiting for its turn:
    /// it is current again after a newer build failed, or its last
    /// reconcile failed.
    pub whole_now: bool,
}

/// Most objects a repair reads one by one; past this, one LIST per kind.
const SCOPED_MAX: usize = 64;

/// The objects to plan for the upkeep of `record`: only those the watches
/// saw change, unless a whole plan is needed (a new build, none since the
/// operator started, a failed reconcile, a full re-check's turn), too many
/// changed, or objects wait on finalizers (the record lists them all: a
/// whole plan reports them). None: plan everything.
fn scope(
    ctx: &Context,
    record: &Activation,
    fresh: bool,
) -> Option<BTreeSet<kix_manifest::ObjectKey>> {
    let mut touched = ctx.touched.lock().ok()?;
    let entry = touched.entry(record.name_any()).or_default();
    let objects = std::mem::take(&mut entry.objects);
    // A repair stays a repair when a full re-check is due too: that one
    // waits for its own turn ([`upkeep_turn`]).
    let recent = !std::mem::take(&mut entry.whole_now) && entry.planned_whole.is_some();
    let deleting = record
        .status
        .as_ref()
        .is_some_and(|s| !s.deleting.is_empty());
    if !fresh && recent && !deleting && !objects.is_empty() && objects.len() <= SCOPED_MAX {
        info!(
            objects = objects.len(),
            "planning the objects the watches saw change"
        );
        return Some(objects);
    }
    entry.planned_whole = Some(Instant::now());
    ctx.upkeep.forget(&record.name_any());
    None
}

/// Whether an applied record's reconcile plans now. A new or changed
/// record and a repair (objects the watches saw change) do; the full
/// re-check of an idle Active record waits for its turn ([`crate::upkeep`]),
/// and one not due yet waits until it is. Err: requeue after that long.
/// A record not seen since the operator started (its build not read yet)
/// is read first, so the watches route its objects' changes to it.
fn upkeep_turn(
    ctx: &Context,
    record: &Activation,
    fresh: bool,
) -> Result<Option<crate::upkeep::Turn>, Duration> {
    let deleting = record
        .status
        .as_ref()
        .is_some_and(|s| !s.deleting.is_empty());
    if fresh || record.phase() != Some(Phase::Active) || deleting {
        return Ok(None);
    }
    let planned_whole = {
        let Ok(touched) = ctx.touched.lock() else {
            return Ok(None);
        };
        match touched.get(&record.name_any()) {
            Some(t) if t.inventory.is_some() && t.objects.is_empty() && !t.whole_now => {
                t.planned_whole
            }
            _ => return Ok(None),
        }
    };
    if let Some(left) = ctx.upkeep.not_due(planned_whole) {
        return Err(left.max(Duration::from_secs(1)));
    }
    match ctx.upkeep.turn(&record.name_any()) {
        crate::upkeep::Turn::Later(wait) => {
            ctx.metrics.upkeep_deferred();
            Err(wait)
        }
        now => {
            ctx.metrics.upkeep_ran();
            info!("full re-check");
            Ok(Some(now))
        }
    }
}

/// When to look at `record` again: when its next full re-check is due,
/// spread a little.
fn next_look(ctx: &Context, record: &str) -> Action {
    let planned_whole = ctx
        .touched
        .lock()
        .ok()
        .and_then(|t| t.get(record).and_then(|t| t.planned_whole));
    let left = ctx.upkeep.not_due(planned_whole).unwrap_or(ctx.resync);
    Action::requeue(crate::upkeep::jitter(left, 0.1).max(Duration::from_secs(1)))
}

#[instrument(skip(record, ctx), fields(activation = %record.name_any()))]
pub async fn reconcile(
    record: Arc<Activation>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    if !record.is_operator()
        || !(ctx.clusters.is_empty() || ctx.clusters.contains(record.cluster_name()))
    {
        return Ok(Action::await_change());
    }
    let Some(set) = ctx.shards.as_ref() else {
        return reconcile_record(record, &ctx).await;
    };
    let shard = match crate::shard::shard_of(&record, set.count()) {
        Ok(shard) => shard,
        // Said on the record by the holder of its Kix cluster's hash shard
        // only, so one replica writes it.
        Err(bad) if set.holds(bad.fallback) => return refuse_shard(&ctx, &record, &bad).await,
        Err(_) => return Ok(Action::await_change()),
    };
    // Another replica's record: it reconciles it. Taking the shard
    // reconciles all its records again ([`crate::shards`]).
    let Some(_running) = set.enter(shard) else {
        return Ok(Action::await_change());
    };
    tokio::select! {
        done = reconcile_record(record, &ctx) => done,
        () = set.lost(shard) => {
            warn!(shard, "stopped: this replica no longer holds the record's shard");
            Ok(Action::await_change())
        }
    }
}

/// A record whose `kix.run/shard` label names no shard: said on it (once)
/// and as an Event; nothing else is done until the label changes.
async fn refuse_shard(
    ctx: &Context,
    record: &Activation,
    bad: &crate::shard::BadShard,
) -> Result<Action, ReconcileError> {
    let message = bad.to_string();
    let said = record.status.as_ref().and_then(|s| s.message.as_deref());
    if said != Some(message.as_str()) {
        warn!("{message}");
        kix_engine::records::update_status(&ctx.client, &record.name_any(), |status| {
            status.phase.get_or_insert(Phase::Pending);
            status.message = Some(message.clone());
        })
        .await?;
        event(ctx, record, EventType::Warning, "BadShard", message).await;
    }
    Ok(Action::await_change())
}

/// The reconcile of a record this replica acts on.
async fn reconcile_record(
    record: Arc<Activation>,
    ctx: &Arc<Context>,
) -> Result<Action, ReconcileError> {
    let ctx = ctx.clone();
    let started = Instant::now();
    let _in_flight = ctx.metrics.started();
    let api: Api<Activation> = Api::all(ctx.client.clone());
    let result = finalizer(&api, FINALIZER, record, |event| async {
        match event {
            Finalizer::Apply(record) => match acting_on(record.clone(), &ctx).await {
                // The record's account may not do what applying it needs:
                // said on the record, not retried in a loop.
                Err(ReconcileError::Engine(err)) if err.is_forbidden() => {
                    let message = format!("the apiserver refused a request: {err}");
                    fail(&ctx, &record, message).await
                }
                other => other,
            },
            Finalizer::Cleanup(record) => cleanup(record, &ctx).await,
        }
    })
    .await;
    ctx.metrics.reconciled(started.elapsed());
    result.map_err(|e| match e {
        kube::runtime::finalizer::Error::ApplyFailed(e)
        | kube::runtime::finalizer::Error::CleanupFailed(e) => e,
        other => ReconcileError::Finalizer(other.to_string()),
    })
}

/// [`apply`], a panic in it ending the record Failed ([`crate::faults`]).
async fn acting_on(record: Arc<Activation>, ctx: &Context) -> Result<Action, ReconcileError> {
    use futures::FutureExt;
    let acting = std::panic::AssertUnwindSafe(apply(record.clone(), ctx));
    match acting.catch_unwind().await {
        Ok(outcome) => outcome,
        Err(payload) => {
            let message = crate::faults::failed("acting on this record", payload.as_ref());
            fail(ctx, &record, message).await
        }
    }
}

pub fn error_policy(record: Arc<Activation>, error: &ReconcileError, ctx: Arc<Context>) -> Action {
    ctx.metrics.error(error.reason());
    // What the failed reconcile took from the watches is read again whole.
    if let Ok(mut touched) = ctx.touched.lock() {
        touched.entry(record.name_any()).or_default().whole_now = true;
    }
    warn!("reconcile failed: {error}");
    Action::requeue(Duration::from_secs(5))
}

pub(crate) async fn event(
    ctx: &Context,
    record: &Activation,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let reference: ObjectReference = record.object_ref(&());
    let ev = KubeEvent {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(err) = ctx.recorder.publish(&ev, &reference).await {
        warn!("could not publish event: {err}");
    }
}

async fn fail(
    ctx: &Context,
    record: &Activation,
    message: String,
) -> Result<Action, ReconcileError> {
    warn!("{message}");
    kix_engine::records::update_status(&ctx.client, &record.name_any(), |status| {
        status.phase = Some(Phase::Failed);
        status.message = Some(message.clone());
        status.observed_generation = record.metadata.generation;
    })
    .await?;
    event(ctx, record, EventType::Warning, "Failed", message).await;
    Ok(Action::await_change())
}

/// The record cannot proceed yet: say why on it (once per reason), so the
/// waiting CLI shows it, and try again shortly.
async fn waiting(
    ctx: &Context,
    record: &Activation,
    message: String,
) -> Result<Action, ReconcileError> {
    let said = record.status.as_ref().and_then(|s| s.message.as_deref());
    if said != Some(message.as_str()) {
        info!("{message}");
        kix_engine::records::update_status(&ctx.client, &record.name_any(), |status| {
            status.phase.get_or_insert(Phase::Pending);
            status.message = Some(message.clone());
        })
        .await?;
        event(ctx, record, EventType::Normal, "Waiting", message).await;
    }
    Ok(Action::requeue(Duration::from_secs(5)))
}

async fn apply(record: Arc<Activation>, ctx: &Context) -> Result<Action, ReconcileError> {
    let name = record.name_any();
    let cluster = record.cluster_name().to_string();
    let phase = record.phase_or_pending();
    let spec_changed =
        record.status.as_ref().and_then(|s| s.observed_generation) != record.metadata.generation;

    // Only the newest operator record of a cluster is acted on; the
    // records are read from the operator's watch, not listed.
    let all = cluster_records(ctx, &cluster);
    if newer_record(&all, &cluster, &record) {
        if matches!(phase, Phase::Pending | Phase::Applying) {
            let msg = "a newer activation took over".to_string();
            kix_engine::records::set_phase(&ctx.client, &record, Phase::Superseded, Some(msg))
                .await?;
        }
        return Ok(Action::await_change());
    }
    if phase == Phase::Superseded || (phase == Phase::Failed && !spec_changed) {
        return Ok(Action::await_change());
    }
    let fresh = matches!(phase, Phase::Pending | Phase::Applying | Phase::Failed) || spec_changed;
    let turn = match upkeep_turn(ctx, &record, fresh) {
        Ok(turn) => turn,
        Err(later) => return Ok(Action::requeue(later)),
    };
    let Prepared {
        path,
        build,
        acting,
        turn: _turn,
    } = match prepare(ctx, &record, fresh, turn).await {
        Ok(prepared) => prepared,
        Err(end) => return end,
    };
    let client = &acting.client;
    // Upkeep: what the watches saw change, each object read by name; the
    // resync reads everything.
    let mut plan = operator_plan(ctx, &record, client, &build, &path, fresh).await?;
    let receipt = &record.spec.receipt;
    // A saved plan runs only as saved: checked now and again under the
    // Lease. A resumed apply (Applying) was checked when it began.
    let exact =
        (receipt.saved_plan && phase == Phase::Pending).then(|| receipt.plan_digest.clone());
    let deletions = DeletionConsent::from_receipt(receipt.accepted_deletions);
    if let Some(stop) = ask_gates(ctx, &record, &plan, exact.as_deref(), fresh).await? {
        return Ok(stop);
    }
    // Only a record that passed its checks becomes the one owned objects'
    // changes are routed to: a failed new build leaves the applied record
    // current and reconciled.
    ctx.current
        .lock()
        .map(|mut m| m.insert(cluster.clone(), name.clone()))
        .ok();
    // The record that was applied: current again if this new build fails.
    let applied = applied_before(&all, &cluster, &record);
    let crds_refused = if fresh {
        None
    } else {
        // Held CRDs first: leaving them is not a correction the fights count.
        let held = crate::guard::hold_refused_crds(ctx, &record, &mut plan).await;
        crate::fights::before_correcting(ctx, &record, &mut plan).await;
        held
    };
    if !fresh && !plan.has_changes() {
        crate::guard::settle_quiet(ctx, &record, &plan, crds_refused.as_deref()).await?;
        return Ok(next_look(ctx, &name));
    }
    let drifted =
        plan.counts.create + plan.counts.update + plan.counts.delete + plan.counts.replace;
    let options = deploy_options(ctx, &name, fresh, deletions, exact, acting.account.as_ref());
    if fresh {
        let applying = format!("applying {path}");
        event(ctx, &record, EventType::Normal, "Applying", applying).await;
    }
    let outcome = match kix_engine::deploy::deploy(client, &build, plan, &options).await {
        Ok(outcome) => outcome,
        Err(kix_engine::EngineError::Lease(kix_engine::lease::LeaseError::Held {
            holder,
            lease,
            ..
        })) if matches!(phase, Phase::Pending | Phase::Applying) => {
            let message = format!(
                "waiting: the deploy Lease {lease} of Kix cluster {cluster:?} is held by {holder}"
            );
            return waiting(ctx, &record, message).await;
        }
        // The re-plan under the Lease is not what was confirmed: nothing
        // was changed; the applied record stays current.
        Err(
            err @ (kix_engine::EngineError::Moved(_) | kix_engine::EngineError::Unconfirmed(_)),
        ) if fresh => {
            restore_current(ctx, &cluster, applied.as_deref());
            return fail(ctx, &record, err.to_string()).await;
        }
        // The record's account may not write what the build holds: refused
        // before any change, each object named; retrying would not help.
        Err(err @ kix_engine::EngineError::NoPermission(_)) => {
            if fresh {
                restore_current(ctx, &cluster, applied.as_deref());
            }
            return fail(ctx, &record, err.to_string()).await;
        }
        Err(err) => return Err(err.into()),
    };
    if fresh && outcome.phase == Phase::Failed {
        restore_current(ctx, &cluster, applied.as_deref());
    }
    let settled = Settled {
        fresh,
        drifted,
        crds_refused: crds_refused.as_deref(),
    };
    record_outcome(ctx, &record, &outcome, &settled).await
}

/// What a reconcile acts with: the record's build, whom it acts as, and
/// the turn of its full re-check, if it is one.
struct Prepared {
    path: StorePath,
    build: kix_manifest::Build,
    acting: kix_engine::client::Acting,
    turn: Option<crate::upkeep::Turn>,
}

/// Reads the record's build and whom it acts as, and routes its objects'
/// changes to it. A record not seen since the operator started waits for
/// its full re-check's turn after that. Err: how the reconcile ends.
async fn prepare(
    ctx: &Context,
    record: &Activation,
    fresh: bool,
    turn: Option<crate::upkeep::Turn>,
) -> Result<Prepared, Result<Action, ReconcileError>> {
    let (name, cluster) = (record.name_any(), record.cluster_name().to_string());
    let (path, build) = match read_build(ctx, record, &cluster).await {
        Ok(read) => read,
        Err(message) => return Err(fail(ctx, record, message).await),
    };
    // Every request for the record from here on acts as its account.
    let acting = match ctx.tenants.for_record(record).and_then(|acting| {
        gates::build_account(&build, acting.account.as_ref())
            .map(|()| acting)
            .map_err(|refusal| refusal.to_string())
    }) {
        Ok(acting) => acting,
        Err(reason) => return Err(fail(ctx, record, reason).await),
    };
    crate::faults::inject(crate::faults::Point::Acting, &cluster);
    watch_kinds(ctx, &build);
    if let Some(notifier) = &ctx.notifier {
        notifier.note_build(path.as_str(), &build);
    }
    let first_look = crate::triggers::note_build(ctx, &name, path.as_str(), &build);
    let mut prepared = Prepared {
        path,
        build,
        acting,
        turn,
    };
    if first_look && !fresh && record.phase() == Some(Phase::Active) {
        ctx.current.lock().map(|mut m| m.insert(cluster, name)).ok();
        match upkeep_turn(ctx, record, fresh) {
            Ok(turn) => prepared.turn = turn,
            Err(later) => return Err(Ok(Action::requeue(later))),
        }
    }
    Ok(prepared)
}

/// The build's kinds, for the watches on owned objects.
fn watch_kinds(ctx: &Context, build: &kix_manifest::Build) {
    if let Ok(mut kinds) = ctx.kinds.lock() {
        for object in build.objects() {
            kinds.insert(
                kix_manifest::GroupVersionKind::new(&object.api_version, &object.key.kind)
                    .to_string(),
            );
        }
    }
}

/// The records of Kix cluster `cluster`, as the operator's watch last saw
/// them.
fn cluster_records(ctx: &Context, cluster: &str) -> Vec<Activation> {
    ctx.records
        .state_filter(|r| r.cluster_name() == cluster)
        .into_iter()
        .map(|r| (*r).clone())
        .collect()
}

/// Whether a newer operator record of the cluster (not Failed) exists:
/// only the newest is acted on.
fn newer_record(all: &[Activation], cluster: &str, record: &Activation) -> bool {
    kix_engine::records::of_cluster(all, cluster)
        .into_iter()
        .any(|r| {
            r.is_operator() && r.sequence() > record.sequence() && r.phase() != Some(Phase::Failed)
        })
}

/// The operator record applied before `record` (Active or Degraded):
/// current again if `record`'s new build fails.
fn applied_before(all: &[Activation], cluster: &str, record: &Activation) -> Option<String> {
    kix_engine::records::of_cluster(all, cluster)
        .into_iter()
        .rev()
        .find(|r| {
            r.is_operator()
                && r.sequence() < record.sequence()
                && matches!(r.phase(), Some(Phase::Active | Phase::Degraded))
        })
        .map(ResourceExt::name_any)
}

/// The gates the record's plan passes before any change: what the user
/// confirmed, a saved plan's digest, stored CRD versions, the deletion
/// budget. Some: the record failed (a fresh build) or is held (upkeep over
/// the budget), with what the reconcile returns.
async fn ask_gates(
    ctx: &Context,
    record: &Activation,
    plan: &kix_engine::plan::Plan,
    exact: Option<&str>,
    fresh: bool,
) -> Result<Option<Action>, ReconcileError> {
    let receipt = &record.spec.receipt;
    // What the user confirmed is what happens: a destructive action the
    // record does not accept changes nothing.
    if fresh && let Err(unconfirmed) = gates::confirmed(&receipt.accepted, plan) {
        return fail(ctx, record, unconfirmed.to_string()).await.map(Some);
    }
    if let Some(saved) = exact
        && let Err(moved) =
            gates::saved_plan(saved, plan, || counts_moved(&receipt.counts, &plan.counts))
    {
        return fail(ctx, record, moved.to_string()).await.map(Some);
    }
    // A stored CRD version the build removes: the apiserver would refuse it
    // midway through the apply; the record fails before any change.
    if fresh && let Err(Refusal::CrdStoredVersions(refused)) = gates::crd_stored_versions(plan) {
        let why = kix_engine::deploy::joined(&refused);
        return fail(ctx, record, format!("nothing was changed: {why}"))
            .await
            .map(Some);
    }
    let deletions = DeletionConsent::from_receipt(receipt.accepted_deletions);
    if let Err(Refusal::DeletionBudget(check)) =
        gates::deletion_budget(&plan.deletion_budget, deletions)
    {
        if fresh {
            let why = check.explain();
            return fail(ctx, record, format!("nothing was changed: the plan {why}"))
                .await
                .map(Some);
        }
        crate::guard::hold_for_budget(ctx, record, plan).await?;
        return Ok(Some(next_look(ctx, &record.name_any())));
    }
    Ok(None)
}

/// The record's build: its store path checked (syntax), then fetched and
/// verified ([`kix_nix::Fetcher::obtain`]: valid in the operator's store
/// or fetched from its substituters, rooted for the record, and with
/// trusted keys configured, accepted only when signed by one), read from
/// that store, of the record's Kix cluster, its encrypted Secrets
/// decrypted, inside the allow-list. Nothing outside it is read or run.
/// Err: why the record fails.
async fn read_build(
    ctx: &Context,
    record: &Activation,
    cluster: &str,
) -> Result<(StorePath, kix_manifest::Build), String> {
    let path = match StorePath::parse(&record.spec.source.path) {
        Ok(path) => path,
        Err(err) => return Err(format!("invalid store path: {err}")),
    };
    let (fetcher, checked) = (ctx.fetcher.clone(), path.clone());
    let (cluster_name, name) = (cluster.to_owned(), record.name_any());
    let obtained =
        tokio::task::spawn_blocking(move || fetcher.obtain(&checked, &cluster_name, &name)).await;
    let physical = match obtained {
        Ok(Ok(physical)) => physical,
        Ok(Err(err @ kix_nix::FetchError::Nix(_))) => {
            return Err(format!("store path {path} is not available: {err}"));
        }
        Ok(Err(err)) => return Err(err.to_string()),
        Err(err) => return Err(format!("checking {path}: {err}")),
    };
    // Read off the async workers (a large tree takes a while); a panic in
    // the reader fails this record only.
    let allow = ctx.allow.clone();
    let store_dir = ctx.fetcher.store().store_dir();
    let (read_path, cluster_name) = (path.clone(), cluster.to_owned());
    let read = move || read_checked(&read_path, &physical, &store_dir, &cluster_name, &allow);
    match tokio::task::spawn_blocking(read).await {
        Ok(read) => read.map(|build| (path, build)),
        Err(err) if err.is_panic() => {
            let reading = format!("reading {path}");
            Err(crate::faults::failed(&reading, err.into_panic().as_ref()))
        }
        Err(err) => Err(format!("reading {path}: {err}")),
    }
}

/// Reads the build at `path` (its files at `physical`, inside the store
/// directory `store_dir`): of Kix cluster `cluster`, its encrypted Secrets
/// decrypted, inside the allow-list.
fn read_checked(
    path: &StorePath,
    physical: &std::path::Path,
    store_dir: &std::path::Path,
    cluster: &str,
    allow: &gates::AllowList,
) -> Result<kix_manifest::Build, String> {
    crate::faults::inject(crate::faults::Point::Reading, cluster);
    // Only the keys bound to the record's cluster (or shared): a file of
    // another tenant's, copied or linked into this build, is refused.
    let options = kix_manifest::ReadOptions {
        store_dir: store_dir.to_path_buf(),
        age_identities: kix_manifest::secrets::age_identities_for(cluster),
        ..kix_manifest::ReadOptions::default()
    };
    let build = match kix_manifest::read_tree(physical, &options) {
        Ok(build) if build.cluster == cluster => build,
        Ok(build) => {
            return Err(format!(
                "{path} is a build of Kix cluster {:?}, not {cluster:?}",
                build.cluster
            ));
        }
        Err(err) => return Err(format!("reading {path}: {err}")),
    };
    // Encrypted Secrets this operator has no key for: nothing is applied
    // (the build would prune them), and the record says which file.
    if let Some(secret) = build.secrets.first().filter(|_| !build.secrets_decrypted) {
        let err = kix_manifest::TreeError::Secret {
            file: secret.file.clone(),
            reason: kix_manifest::secrets::kix_sops::Reason::NoIdentities,
        };
        return Err(format!("reading {path}: {err}"));
    }
    gates::allow_list(&build, allow).map_err(|refusal| refusal.to_string())?;
    Ok(build)
}

/// The operator's plan of `build` for `record`: what the watches saw
/// change (upkeep) or everything (a fresh build, the resync); planned again
/// whole when an object waits on finalizers, so the record lists them all.
async fn operator_plan(
    ctx: &Context,
    record: &Activation,
    client: &kube::Client,
    build: &kix_manifest::Build,
    path: &StorePath,
    fresh: bool,
) -> Result<kix_engine::plan::Plan, kix_engine::EngineError> {
    let name = record.name_any();
    let only = scope(ctx, record, fresh);
    let plan_options = PlanOptions {
        reconcile: !fresh,
        force_conflicts: true,
        // Other Kix clusters' fields are theirs: a conflict with one fails
        // the deploy, naming both clusters, instead of flipping the field.
        yield_to_kix_clusters: true,
        prune: true,
        activation: Some(name.clone()),
        only,
    };
    let mut plan = plan_with_records(ctx, client, build, path, &plan_options).await?;
    if plan_options.only.is_some() && !kix_engine::prune::deleting_in(&plan).is_empty() {
        // An object waits on finalizers: the record lists them all.
        let whole = PlanOptions {
            only: None,
            ..plan_options
        };
        plan = plan_with_records(ctx, client, build, path, &whole).await?;
    }
    Ok(plan)
}

/// The engine's plan, with the records of every Kix cluster (claims name
/// them) from the operator's watch instead of a LIST of them all.
async fn plan_with_records(
    ctx: &Context,
    client: &kube::Client,
    build: &kix_manifest::Build,
    path: &StorePath,
    options: &PlanOptions,
) -> Result<kix_engine::plan::Plan, kix_engine::EngineError> {
    use kix_engine::plan::{Prefetched, plan_prefetched};
    let all: Vec<Activation> = ctx.records.state().iter().map(|r| (**r).clone()).collect();
    let prefetched = Prefetched::with_records(client, &build.cluster, options, all).await?;
    plan_prefetched(client, build, path.as_str(), options, prefetched).await
}

/// What the engine runs the record's deploy with: the operator's settings,
/// the record's consents.
fn deploy_options(
    ctx: &Context,
    name: &str,
    fresh: bool,
    deletions: DeletionConsent,
    exact: Option<String>,
    account: Option<&kix_api::ServiceAccountRef>,
) -> DeployOptions {
    DeployOptions {
        engine: kix_api::Engine::Operator,
        accept_migrations: true,
        deletions,
        force_conflicts: true,
        yield_to_kix_clusters: true,
        allow_empty: true,
        // A new build that cannot be applied fails (the applied record stays
        // current); an unhealthy one is applied and ends Degraded. Drift
        // correction of the applied record goes on past a refused object.
        on_error: if fresh {
            OnError::ContinueUnhealthy
        } else {
            OnError::Continue
        },
        exact_digest: exact,
        upkeep: !fresh,
        record: Some(name.to_string()),
        holder: ctx.holder.clone(),
        // The account acting for the record holds the deploy Lease in its
        // namespace (a default account too, for a build naming none).
        lease: kix_engine::lease::LeaseOptions {
            namespace: ctx.lease_namespace.clone(),
            ..Default::default()
        }
        .for_account(account),
        receipt: ReceiptInfo {
            user: "kix-operator".into(),
            host: ctx.holder.clone(),
            ..Default::default()
        },
        ..DeployOptions::default()
    }
}

/// How a run of the engine ended for the record: its fresh build or its
/// upkeep, the objects that had drifted, the CRD upgrades held.
struct Settled<'a> {
    fresh: bool,
    drifted: u32,
    crds_refused: Option<&'a str>,
}

/// Writes what the deploy did on the record (observed generation,
/// conditions, drift counts, objects being deleted) and its Event.
async fn record_outcome(
    ctx: &Context,
    record: &Activation,
    outcome: &kix_engine::deploy::DeployOutcome,
    settled: &Settled<'_>,
) -> Result<Action, ReconcileError> {
    let (name, fresh, drifted) = (record.name_any(), settled.fresh, settled.drifted);
    let fight = crate::fights::condition_message(ctx);
    // Only what was done counts as corrected: an object still being deleted
    // is neither pruned nor drift.
    let corrected = outcome.applied + outcome.pruned;
    let now = Utc::now();
    let written = kix_engine::records::update_status(&ctx.client, &name, |status| {
        status.observed_generation = record.metadata.generation;
        crate::guard::clear_budget(status);
        let refused = settled.crds_refused;
        crate::guard::set_condition(status, crate::guard::CONDITION_CRD_UPGRADE_REFUSED, refused);
        let fight = fight.as_deref();
        crate::guard::set_condition(status, crate::fights::CONDITION_DRIFT_FIGHT, fight);
        if !fresh && corrected > 0 {
            let drift = status.drift.get_or_insert_with(Drift::default);
            drift.detected += drifted;
            drift.corrected += corrected;
            drift.last_corrected = Some(now);
        }
    })
    .await?;
    if !fresh && corrected > 0 {
        ctx.metrics.drift_corrected(u64::from(corrected));
        info!(objects = drifted, "corrected drift");
    }
    let before = record
        .status
        .as_ref()
        .map(|s| s.deleting.clone())
        .unwrap_or_default();
    let after = written.status.map(|s| s.deleting).unwrap_or_default();
    crate::guard::report_deleting(ctx, record, &before, &after).await;
    let (type_, reason) = match outcome.phase {
        Phase::Active if fresh => (EventType::Normal, "Active"),
        Phase::Active if corrected > 0 => (EventType::Normal, "DriftCorrected"),
        Phase::Active => return Ok(next_look(ctx, &name)),
        _ => (EventType::Warning, outcome.phase.as_str()),
    };
    event(ctx, record, type_, reason, outcome.message.clone()).await;
    Ok(next_look(ctx, &name))
}

/// A new build failed: owned objects' changes go to the record that was
/// applied again, and it is reconciled now (it restores what the failed
/// apply changed), not at the next resync.
fn restore_current(ctx: &Context, cluster: &str, applied: Option<&str>) {
    if let Ok(mut current) = ctx.current.lock() {
        match applied {
            Some(name) => current.insert(cluster.to_string(), name.to_string()),
            None => current.remove(cluster),
        };
    }
    if let Some(name) = applied {
        info!("the new build failed; {name} stays current");
        if let Ok(mut touched) = ctx.touched.lock() {
            touched.entry(name.to_string()).or_default().whole_now = true;
        }
        let _ = ctx
            .trigger
            .send(kube::runtime::reflector::ObjectRef::new(name));
    }
}

/// What moved between a saved plan's counts and a re-plan's, one line per
/// action whose count differs.
fn counts_moved(saved: &kix_api::Counts, now: &kix_engine::plan::Counts) -> Vec<String> {
    let pairs = [
        ("create", saved.create, now.create),
        ("update", saved.update, now.update),
        ("delete", saved.delete, now.delete),
        ("replace", saved.replace, now.replace),
        ("adopt", saved.adopt, now.adopt),
    ];
    let mut lines: Vec<String> = pairs
        .iter()
        .filter(|(_, a, b)| a != b)
        .map(|(what, a, b)| format!("{b} to {what}, {a} in the saved plan"))
        .collect();
    if lines.is_empty() {
        lines.push("the same counts, but the actions or their content differ".to_string());
    }
    lines
}

async fn cleanup(record: Arc<Activation>, ctx: &Context) -> Result<Action, ReconcileError> {
    let name = record.name_any();
    // The finalizer deletes only what the record's account may delete.
    let acting = match ctx.tenants.for_record(&record) {
        Ok(acting) => acting,
        Err(reason) => {
            // Never acted for (refused): nothing of it to delete.
            let note = format!("objects not released: {reason}");
            event(ctx, &record, EventType::Warning, "NotReleased", note).await;
            return Ok(Action::await_change());
        }
    };
    let report =
        kix_engine::retire::release_objects(&acting.client, &record, &BTreeSet::new()).await?;
    if !report.ignored.is_empty() {
        // Objects that claim the record but are not its: said once (the
        // finalizer does not retry for them), never deleted.
        let lines: Vec<String> = report
            .ignored
            .iter()
            .map(|(o, r)| format!("{o}: {r}"))
            .collect();
        let note = format!("left as they are: {}", kix_engine::deploy::joined(&lines));
        event(ctx, &record, EventType::Warning, "ClaimIgnored", note).await;
    }
    if !report.failed.is_empty() {
        // Reported on the record and as an event; the finalizer stays and
        // retries, so a deletion never hangs silently.
        let reasons: Vec<String> = report
            .failed
            .iter()
            .map(|(o, r)| format!("{o}: {r}"))
            .collect();
        let summary = kix_engine::deploy::joined(&reasons);
        let message = format!("cannot delete {} objects: {summary}", report.failed.len());
        kix_engine::records::update_status(&ctx.client, &name, |status| {
            // Listed up to a limit, counted all: the record stays small
            // however many objects the finalizer could not delete.
            status.set_failed_deletions(report.failed.iter().map(|(object, reason)| {
                FailedDeletion {
                    object: object.clone(),
                    reason: reason.clone(),
                }
            }));
            status.message = Some(message.clone());
        })
        .await?;
        event(
            ctx,
            &record,
            EventType::Warning,
            "DeleteFailed",
            summary.clone(),
        )
        .await;
        return Err(ReconcileError::Release(summary));
    }
    if let Err(err) = kix_nix::GcRoots::from_env().remove(record.cluster_name(), &name) {
        warn!("could not remove the GC root of {name}: {err}");
    }
    collect_store(ctx).await;
    info!(
        deleted = report.deleted.len(),
        kept = report.repointed.len() + report.trimmed.len() + report.kept.len(),
        "released objects"
    );
    Ok(Action::await_change())
}

/// A record was retired: its build, and whatever else no record's GC root
/// keeps, leaves a store of the operator's own (the host's store is left
/// to its owner). A failure is logged; the next retirement tries again.
async fn collect_store(ctx: &Context) {
    let fetcher = ctx.fetcher.clone();
    match tokio::task::spawn_blocking(move || fetcher.collect()).await {
        Ok(Ok(Some(collected))) => {
            ctx.metrics
                .store_freed(collected.paths as u64, collected.bytes);
            info!(
                paths = collected.paths,
                bytes = collected.bytes,
                "deleted from the operator's store what no record names"
            );
        }
        Ok(Ok(None)) => {}
        Ok(Err(err)) => {
            ctx.metrics.error("store_gc");
            warn!("collecting the operator's store failed: {err}");
        }
        Err(err) => warn!("collecting the operator's store failed: {err}"),
    }
}

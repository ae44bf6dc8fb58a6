//! Executing a plan: record → apply → wait → prune → settle.
//!
//! Order, decided in [`crate::order`]: CRDs (until Established), Namespaces,
//! then packages in dependency order, kinds ranked inside a package, bounded
//! parallel server-side applies inside each rank. A package starts when its dependencies are healthy.
//! Prune runs only after apply and health succeeded; the set it deletes is
//! written into the Activation first.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kix_api::{Activation, ActivationSpec, Engine, Phase, Progress, Receipt, Source};
use kix_manifest::{Build, ObjectKey};
use kube::{Client, ResourceExt};
use serde::Serialize;
use tokio::sync::mpsc::UnboundedSender;
use tracing::{info, warn};

use crate::changes::{ChangeSet, MESSAGES_LISTED};
use crate::desired::Desired;
use crate::error::{EngineError, Result};
use crate::gates::Refusal;
use crate::lease::{DeployLease, LeaseOptions};
use crate::order::{Group, Order, Step};
use crate::plan_object::{Action, PlannedObject};
use crate::plan_value::Plan;
use crate::records;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    #[default]
    Abort,
    Continue,
    Rollback,
    /// An object the apiserver refuses (or a failed migration) stops the
    /// deploy and ends it Failed, so the record that was current stays
    /// current; a group that does not become healthy does not stop the
    /// others and ends it Degraded. The operator's first apply of a record.
    #[serde(rename = "continue-unhealthy")]
    ContinueUnhealthy,
}

impl OnError {
    /// Whether a group that failed stops the deploy; `refused`: an object of
    /// it was refused (not only unhealthy).
    fn stops(self, refused: bool) -> bool {
        match self {
            OnError::Continue => false,
            OnError::ContinueUnhealthy => refused,
            OnError::Abort | OnError::Rollback => true,
        }
    }
}

pub use crate::events::Event;
pub use crate::prune::PruneMode;

/// Who deploys from where; recorded in the Activation's receipt.
#[derive(Debug, Clone, Default)]
pub struct ReceiptInfo {
    pub user: String,
    pub host: String,
    pub flake: Option<String>,
    pub revision: Option<String>,
    pub rollback_from: Option<String>,
    /// The binary cache the build was published to, and the name of the
    /// key that signed it there (`spec.source.cache`, `signedBy`).
    pub cache: Option<String>,
    pub signed_by: Option<String>,
}

impl ReceiptInfo {
    /// The local user and host.
    pub fn local() -> ReceiptInfo {
        let user = std::env::var("USER")
            .or_else(|_| std::env::var("LOGNAME"))
            .unwrap_or_else(|_| "unknown".into());
        let host = std::fs::read_to_string("/etc/hostname")
            .map(|h| h.trim().to_string())
            .ok()
            .filter(|h| !h.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| "unknown".into());
        ReceiptInfo {
            user,
            host,
            ..Default::default()
        }
    }
}

#[derive(Debug, Clone)]
pub struct DeployOptions {
    pub timeout: Duration,
    pub on_error: OnError,
    pub prune: bool,
    pub prune_mode: PruneMode,
    pub force_conflicts: bool,
    /// Never take a field another Kix cluster set, even with
    /// `force_conflicts` (the operator).
    pub yield_to_kix_clusters: bool,
    pub accept_migrations: bool,
    /// Consent to delete more than the deletion budget allows.
    pub deletions: crate::budget::DeletionConsent,
    pub allow_empty: bool,
    pub current_activation: Option<String>,
    pub engine: Engine,
    pub receipt: ReceiptInfo,
    /// Server-side applies in flight at once inside an order group.
    pub concurrency: usize,
    pub lease: LeaseOptions,
    /// Lease holder identity (user@host pid N, or the operator's pod).
    pub holder: String,
    pub events: Option<UnboundedSender<Event>>,
    /// Apply as this existing record instead of creating one (the operator
    /// acting on a record the CLI wrote).
    pub record: Option<String>,
    /// Re-plan against the live state once the Lease is held, and run that
    /// plan if its destructive actions are the confirmed plan's (or fewer).
    /// Set when time passed since planning (an interactive confirmation, a
    /// saved plan); the plan is re-made anyway when another deploy recorded
    /// an activation since.
    pub replan: bool,
    /// Run only a plan with this digest (a saved plan, `kix deploy --plan`):
    /// the re-plan made under the Lease right before acting must have it;
    /// otherwise nothing changes ([`crate::seal::Moved`]).
    pub exact_digest: Option<String>,
    /// The record is applied already and this run corrects drift (the
    /// operator's upkeep of an Active or Degraded record): its phase stays
    /// as it is until the run ends, so it never reads Applying. A process
    /// dying midway leaves it applied, not a stale Applying record that the
    /// next deploy would mark Failed.
    pub upkeep: bool,
    /// Labels and annotations on the record the deploy creates (a fleet
    /// names its rollout there).
    pub record_meta: records::RecordMeta,
}

impl DeployOptions {
    /// What the user consented to, as the gates read it.
    pub fn consents(&self) -> crate::gates::Consents {
        crate::gates::Consents {
            current_activation: self.current_activation.clone(),
            force_conflicts: self.force_conflicts,
            yield_to_kix_clusters: self.yield_to_kix_clusters,
            accept_migrations: self.accept_migrations,
            allow_empty: self.allow_empty,
            prune: self.prune,
            deletions: self.deletions,
        }
    }
}

impl Default for DeployOptions {
    fn default() -> Self {
        let receipt = ReceiptInfo::local();
        DeployOptions {
            timeout: Duration::from_secs(300),
            on_error: OnError::Abort,
            prune: true,
            prune_mode: PruneMode::Background,
            force_conflicts: false,
            yield_to_kix_clusters: false,
            accept_migrations: false,
            deletions: crate::budget::DeletionConsent::Budget,
            allow_empty: false,
            current_activation: None,
            engine: Engine::Local,
            holder: format!(
                "{}@{} pid {}",
                receipt.user,
                receipt.host,
                std::process::id()
            ),
            receipt,
            concurrency: 32,
            lease: LeaseOptions::default(),
            events: None,
            record: None,
            replan: false,
            exact_digest: None,
            upkeep: false,
            record_meta: records::RecordMeta::default(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeployOutcome {
    pub activation: Option<String>,
    pub phase: Phase,
    pub message: String,
    pub applied: u32,
    /// Objects of the build the deploy left as they were.
    pub unchanged: u32,
    pub pruned: u32,
    pub failed: u32,
    /// Objects the build dropped that still exist, being deleted (held by
    /// finalizers): never counted as pruned. At most
    /// [`kix_api::DELETING_LISTED`]; `deleting_total` counts them all.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub deleting: Vec<kix_api::DeletingObject>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deleting_total: Option<u32>,
    /// The migrations' actions that ran, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub migrated: Vec<crate::changes::Migrated>,
    /// Nothing to do: the build is current and nothing drifted; no request
    /// that writes was made.
    pub no_op: bool,
    /// Set when `--on-error rollback` restored the previous build.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rolled_back_to: Option<String>,
}

impl DeployOutcome {
    pub fn is_success(&self) -> bool {
        self.phase == Phase::Active
    }
}

pub(crate) fn emit(options: &DeployOptions, event: Event) {
    crate::events::emit(&options.events, event);
}

/// Refusals that must happen before any change.
pub fn check_plan(plan: &Plan, build: &Build, options: &DeployOptions) -> Result<()> {
    crate::gates::deploy(plan, build.object_count(), &options.consents())?;
    Ok(())
}

/// Deploys `plan` (computed from `build`). With `on_error: rollback`, a failed
/// deploy re-applies the previous activation's build.
pub async fn deploy(
    client: &Client,
    build: &Build,
    plan: Plan,
    options: &DeployOptions,
) -> Result<DeployOutcome> {
    check_plan(&plan, build, options)?;
    // A plan made before another deploy recorded an activation is stale:
    // neither its "nothing to do" nor its actions are trusted.
    let moved = records_moved(client, &plan, options).await?;
    if !moved && let Some(outcome) = no_op(&plan, options) {
        crate::drop_later(plan);
        return Ok(outcome);
    }
    // Before any change: the build's GC root can be written (a user without
    // a roots directory of their own is told what to do).
    if kix_manifest::StorePath::parse(&plan.store_path).is_ok() {
        kix_nix::GcRoots::from_env().check_writable(&plan.cluster)?;
    }
    // The account the build acts as holds the Lease in its namespace.
    let account = crate::plan_value::declared_account(&build.settings);
    let lease = DeployLease::acquire(
        client.clone(),
        &plan.cluster,
        &options.holder,
        options.lease.clone().for_account(account.as_ref()),
    )
    .await?;
    let result = match resealed(client, build, plan, options, moved).await {
        Ok(plan) => match no_op(&plan, options) {
            Some(outcome) => Ok((outcome, plan)),
            None => run(client, build, &plan, options, &lease)
                .await
                .map(|outcome| (outcome, plan)),
        },
        Err(err) => Err(err),
    };
    lease.release().await;
    let (outcome, plan) = result?;
    if outcome.phase == Phase::Failed
        && options.on_error == OnError::Rollback
        && let Some((prev_name, prev_path)) =
            last_applied(client, &plan.cluster, outcome.activation.as_deref()).await?
    {
        warn!(activation = %prev_name, "deploy failed; rolling back to {prev_path}");
        let rolled = Box::pin(rollback_to(
            client,
            &prev_path,
            outcome.activation.clone(),
            &undo_consent(&plan, options),
            options,
        ))
        .await?;
        return Ok(DeployOutcome {
            rolled_back_to: Some(prev_name),
            message: format!("{}; rolled back: {}", outcome.message, rolled.message),
            ..outcome
        });
    }
    Ok(outcome)
}

/// The outcome of a plan with nothing to do: the build is current, Active,
/// and nothing drifted.
fn no_op(plan: &Plan, options: &DeployOptions) -> Option<DeployOutcome> {
    let current = !plan.has_changes()
        && plan.current_path.as_deref() == Some(plan.store_path.as_str())
        && plan.current_phase == Some(Phase::Active)
        && (options.record.is_none() || options.record == plan.current_activation);
    let mut waiting = kix_api::ActivationStatus::default();
    crate::prune::set_deleting(&mut waiting, crate::prune::deleting_in(plan));
    current.then(|| DeployOutcome {
        deleting: waiting.deleting,
        deleting_total: waiting.deleting_total,
        message: format!(
            "nothing to do: {} is current and up to date",
            plan.current_activation.as_deref().unwrap_or("?")
        ),
        activation: plan.current_activation.clone(),
        phase: Phase::Active,
        applied: 0,
        unchanged: plan.counts.unchanged,
        pruned: 0,
        failed: 0,
        migrated: Vec::new(),
        no_op: true,
        rolled_back_to: None,
    })
}

/// Whether another deploy recorded an activation of the cluster since `plan`
/// was made (its current record or its next name changed). The operator
/// acts on an existing record it has just planned for: never.
async fn records_moved(client: &Client, plan: &Plan, options: &DeployOptions) -> Result<bool> {
    if options.record.is_some() {
        return Ok(false);
    }
    let all = records::list_all(client).await?;
    let current = records::current(&all, &plan.cluster).and_then(|c| c.metadata.name.clone());
    let next = Activation::name_for(&plan.cluster, records::next_sequence(&all, &plan.cluster));
    Ok(current != plan.current_activation || next != plan.activation)
}

/// The plan to run, decided while holding the Lease: `plan` itself, or a
/// re-plan against the live state when time passed since it was made
/// (`options.replan`) or the records `moved`. A re-plan with a destructive
/// action the confirmed plan did not have changes nothing.
async fn resealed(
    client: &Client,
    build: &Build,
    plan: Plan,
    options: &DeployOptions,
    moved: bool,
) -> Result<Plan> {
    if !options.replan && !moved && options.exact_digest.is_none() {
        return Ok(plan);
    }
    let confirmed = crate::seal::Destructive::of(&plan).accepted();
    let saved_actions = options
        .exact_digest
        .as_ref()
        .map(|_| crate::seal::Moved::actions_of(&plan));
    let mut plan_options = plan.options.clone();
    plan_options.activation = options.record.clone();
    let store_path = plan.store_path.clone();
    // Two whole plans side by side were a rollback's peak memory.
    drop(plan);
    let replanned = crate::plan::plan(client, build, &store_path, &plan_options).await?;
    if let (Some(saved), Some(actions)) = (&options.exact_digest, &saved_actions) {
        crate::gates::saved_plan(saved, &replanned, || {
            crate::seal::Moved::changes(actions, &replanned)
        })?;
    }
    crate::gates::confirmed(&confirmed, &replanned)?;
    check_plan(&replanned, build, options)?;
    Ok(replanned)
}

/// The newest record of `cluster` other than `except` whose build was applied
/// (Active or Degraded), with its store path: the target of `--on-error
/// rollback`. Read after the failed run, so a record an interrupted deploy
/// left Pending or Applying (which the run marked Failed) is never chosen.
async fn last_applied(
    client: &Client,
    cluster: &str,
    except: Option<&str>,
) -> Result<Option<(String, String)>> {
    let all = records::list_all(client).await?;
    Ok(records::of_cluster(&all, cluster)
        .into_iter()
        .rev()
        .filter(|r| r.metadata.name.as_deref() != except)
        .find(|r| matches!(r.phase(), Some(Phase::Active | Phase::Degraded)))
        .map(|r| (r.name_any(), r.spec.source.path.clone())))
}

/// What `--on-error rollback` consents to for the failed deploy of `failed`:
/// deleting the objects it created; with `--accept-migrations`, also the
/// replaces, adoptions and migrations the rollback's plan holds.
fn undo_consent(failed: &Plan, options: &DeployOptions) -> crate::seal::Consented {
    crate::seal::Consented {
        deletions: failed
            .objects()
            .filter(|o| o.action == Action::Create)
            .map(|o| o.key.clone())
            .collect(),
        others: options.accept_migrations,
    }
}

/// Re-applies the build at `store_path` as a new activation whose receipt
/// names `failed` as the rollback origin. Its plan's destructive actions must
/// be within `consent`; otherwise nothing changes.
pub async fn rollback_to(
    client: &Client,
    store_path: &str,
    from: Option<String>,
    consent: &crate::seal::Consented,
    options: &DeployOptions,
) -> Result<DeployOutcome> {
    let build = kix_manifest::read_tree(
        std::path::Path::new(store_path),
        &kix_manifest::ReadOptions::default(),
    )?;
    let mut options = options.clone();
    options.on_error = OnError::Abort;
    options.accept_migrations = true;
    // Undoing the failed deploy deletes what it created: consented with it.
    options.deletions = crate::budget::DeletionConsent::Any;
    options.current_activation = None;
    options.receipt.rollback_from = from;
    options.record = None;
    // Its own plan, not the saved one of the deploy it undoes.
    options.exact_digest = None;
    let plan = crate::plan::plan(
        client,
        &build,
        store_path,
        &crate::plan_object::PlanOptions {
            prune: options.prune,
            force_conflicts: true,
            yield_to_kix_clusters: options.yield_to_kix_clusters,
            reconcile: false,
            activation: None,
            only: None,
        },
    )
    .await?;
    crate::gates::consented(consent, &plan)?;
    options.replan = false;
    Box::pin(deploy(client, &build, plan, &options)).await
}

/// The spec of the record a deploy of `plan` writes: source and receipt.
pub fn activation_spec(plan: &Plan, options: &DeployOptions) -> ActivationSpec {
    let counts = &plan.counts;
    ActivationSpec {
        cluster: plan.cluster.clone(),
        source: Source {
            path: plan.store_path.clone(),
            flake: options.receipt.flake.clone(),
            // The build's own (its kix.json), unless the front end names one.
            revision: options
                .receipt
                .revision
                .clone()
                .or_else(|| plan.revision.clone()),
            cache: options.receipt.cache.clone(),
            signed_by: options.receipt.signed_by.clone(),
        },
        receipt: Receipt {
            user: options.receipt.user.clone(),
            host: options.receipt.host.clone(),
            kix_version: env!("CARGO_PKG_VERSION").to_string(),
            time: chrono::Utc::now(),
            plan_digest: plan.digest.clone(),
            counts: kix_api::Counts {
                create: counts.create,
                update: counts.update,
                unchanged: counts.unchanged,
                delete: counts.delete,
                replace: counts.replace,
                adopt: counts.adopt,
            },
            accepted: crate::seal::Destructive::of(plan).accepted(),
            rollback_from: options.receipt.rollback_from.clone(),
            accepted_deletions: options.deletions.recorded(&plan.deletion_budget),
            saved_plan: options.exact_digest.is_some(),
        },
        engine: options.engine,
        service_account: plan.service_account.clone(),
    }
}

/// Executes `plan` holding `lease`. Stages: kix's CRDs → the record → the
/// apply waves → prune → the final phase.
async fn run(
    client: &Client,
    build: &Build,
    plan: &Plan,
    options: &DeployOptions,
    lease: &DeployLease,
) -> Result<DeployOutcome> {
    if plan.kix_crds != records::CrdState::Current {
        info!("installing kix CRDs");
        records::install_crds(client).await?;
    }
    fail_interrupted(client, plan, options).await?;
    let (name, mut status) = start_record(client, build, plan, options).await?;
    let mut packages = crate::packages::PackageRecords::start(client, plan, build, &name).await?;
    let started = Instant::now();
    let run = Run {
        client,
        build,
        plan,
        options,
        name,
        deadline: started + options.timeout,
        // The reader compiled them already; this cannot fail for a read tree.
        rules: build
            .health_rules()
            .map_err(|e| kix_manifest::TreeError::HealthRule(Box::new(e)))?,
        watches: crate::watch_hub::WatchHub::new(),
    };
    let mut changes = ChangeSet::default();
    let waves = apply_waves(&run, lease, &mut status, &mut packages, &mut changes).await?;
    // Jobs that completed are not run again for this manifest.
    let seen = &changes.completed_jobs;
    let remembered =
        crate::health::completed::remember(client, plan, &run.name, waves.healthy, seen);
    if let Err(error) = remembered.await {
        warn!(%error, "cannot remember the completed Jobs on {}", run.name);
    }
    let mut waves = waves;
    if waves.healthy && options.prune {
        waves.healthy = prune_stage(&run, &mut status, &mut packages, &mut changes).await?;
    }
    finish(&run, waves, status, changes, &mut packages, started).await
}

/// Prune, with the delete hooks of the packages the build drops around it
/// ([`crate::delete_hooks`]): `pre-delete` before, `post-delete` after.
/// Nothing of a package whose `pre-delete` hook failed is pruned. Returns
/// false when a delete hook failed.
async fn prune_stage<'p>(
    run: &Run<'p>,
    status: &mut kix_api::ActivationStatus,
    packages: &mut crate::packages::PackageRecords,
    changes: &mut ChangeSet<'p>,
) -> Result<bool> {
    let (client, plan, options) = (run.client, run.plan, run.options);
    packages.removing(run.build).await?;
    let removed = crate::delete_hooks::of_plan(plan, run.build);
    let mut stopped: BTreeMap<String, String> = BTreeMap::new();
    for package in &removed {
        let mark = changes.messages.len();
        if !delete_hooks(run, plan, package, crate::hooks::Phase::Pre, changes).await {
            stopped.insert(package.name.clone(), joined(&changes.messages[mark..]));
        }
    }
    let work: Vec<&PlannedObject> = crate::prune::work(plan)
        .into_iter()
        .filter(|o| !stopped.contains_key(&o.package))
        .collect();
    if !work.is_empty() {
        status.set_pending_prune(crate::prune::pending(&work));
        records::update_status(client, &run.name, |latest| {
            records::take_run_fields(latest, status)
        })
        .await?;
    }
    let prune_options = crate::prune::PruneOptions {
        mode: options.prune_mode,
        concurrency: options.concurrency,
        events: &options.events,
    };
    changes.merge(crate::prune::prune(client, plan, work, &prune_options).await?);
    let mut ok = stopped.is_empty();
    for package in removed.iter().filter(|p| !stopped.contains_key(&p.name)) {
        ok &= delete_hooks(run, plan, package, crate::hooks::Phase::Post, changes).await;
    }
    changes.record(status);
    packages.removed(&status.failed_deletions, &stopped).await?;
    Ok(ok)
}

/// One phase of the delete hooks of `package`, as the plan lists them.
async fn delete_hooks<'p>(
    run: &Run<'p>,
    plan: &'p Plan,
    package: &'p crate::plan_object::PackagePlan,
    phase: crate::hooks::Phase,
    changes: &mut ChangeSet<'p>,
) -> bool {
    let planned: BTreeMap<&ObjectKey, &PlannedObject> =
        package.objects.iter().map(|o| (&o.key, o)).collect();
    let hooks = crate::delete_hooks::desired_of_package(plan, package);
    let stage = run.apply_stage();
    crate::apply::run_delete_hooks(&stage, &package.name, &hooks, &planned, phase, changes).await
}

/// One deploy under way: what the stages of [`run`] read.
struct Run<'a> {
    client: &'a Client,
    build: &'a Build,
    plan: &'a Plan,
    options: &'a DeployOptions,
    /// The Activation record.
    name: String,
    /// When waiting for health (and for migrations' deletions) ends.
    deadline: Instant,
    /// The build's health rules, then the built-in library.
    rules: crate::health::Rules,
    /// One watch per kind and namespace for every group's health wait.
    watches: crate::watch_hub::WatchHub,
}

impl Run<'_> {
    /// The migrations stage's settings.
    fn migration_stage(&self) -> crate::migrations::MigrationStage<'_> {
        crate::migrations::MigrationStage {
            client: self.client,
            events: &self.options.events,
            deadline: self.deadline,
        }
    }

    /// The apply stage's settings: what it reads of this deploy.
    fn apply_stage(&self) -> crate::apply::ApplyStage<'_> {
        crate::apply::ApplyStage {
            client: self.client,
            events: &self.options.events,
            concurrency: self.options.concurrency,
            continue_on_error: self.options.on_error == OnError::Continue,
            timeout: self.options.timeout,
            force_conflicts: self.options.force_conflicts,
            yield_to_kix_clusters: self.options.yield_to_kix_clusters,
            deadline: self.deadline,
            rules: &self.rules,
            watches: &self.watches,
        }
    }
}

/// How the apply waves ended.
struct Waves {
    /// Every group applied and healthy.
    healthy: bool,
    /// A group failed and `--on-error` is not `continue`: later waves did
    /// not run.
    aborted: bool,
}

/// Holding the lease, any record of this cluster still Pending or Applying
/// was left by a deploy that died: it never finished.
async fn fail_interrupted(client: &Client, plan: &Plan, options: &DeployOptions) -> Result<()> {
    let all = records::list_cluster(client, &plan.cluster).await?;
    for stale in records::of_cluster(&all, &plan.cluster) {
        let is_this = options.record.is_some() && stale.metadata.name == options.record;
        if !is_this && matches!(stale.phase_or_pending(), Phase::Pending | Phase::Applying) {
            records::set_phase(
                client,
                stale,
                Phase::Failed,
                Some("interrupted: the deploy ended before it settled".into()),
            )
            .await?;
        }
    }
    Ok(())
}

/// The record the deploy writes (created, or the operator's existing one),
/// its build kept alive by a GC root, its status Applying.
async fn start_record(
    client: &Client,
    build: &Build,
    plan: &Plan,
    options: &DeployOptions,
) -> Result<(String, kix_api::ActivationStatus)> {
    let sequence = Activation::sequence_in(&plan.activation, &plan.cluster).unwrap_or(1);
    let spec = activation_spec(plan, options);
    let record = match &options.record {
        Some(existing) => {
            kube::Api::<Activation>::all(client.clone())
                .get(existing)
                .await?
        }
        None => {
            records::create_with_meta(
                client,
                sequence,
                spec,
                plan.kinds.clone(),
                &options.record_meta,
            )
            .await?
        }
    };
    let name = record.name_any();
    emit(
        options,
        Event::Recorded {
            activation: name.clone(),
        },
    );
    // Keep the build alive in the Nix store until the record is retired.
    if let Ok(path) = kix_manifest::StorePath::parse(&plan.store_path)
        && let Err(err) = kix_nix::GcRoots::from_env().add(&plan.cluster, &name, &path)
    {
        warn!("could not add a Nix GC root for {path}: {err}");
    }
    // The run goes on from the status as written, not the copy it was given.
    let written = records::update_status(client, &name, |status| {
        if !options.upkeep {
            status.phase = Some(Phase::Applying);
            // A reason it had to wait (the operator's) no longer holds.
            status.message = None;
        }
        status.kinds = plan.kinds.clone();
        // Listed by its label, every object of the cluster has it, and
        // every object this deploy writes gets it.
        if plan.labelled {
            records::say_objects_labelled(status, &plan.cluster);
        }
        status.objects = Some(build.object_count() as u32);
        status.progress = Some(Progress {
            total: build.object_count() as u32,
            ..Default::default()
        });
    })
    .await?;
    Ok((name, written.status.unwrap_or_default()))
}

/// Applies the groups wave by wave ([`crate::order`]); the groups of one
/// wave apply and wait for health concurrently, one semaphore bounding the
/// applies in flight across them. The record's progress is written after
/// each wave.
async fn apply_waves<'p>(
    run: &Run<'p>,
    lease: &DeployLease,
    status: &mut kix_api::ActivationStatus,
    packages: &mut crate::packages::PackageRecords,
    changes: &mut ChangeSet<'p>,
) -> Result<Waves> {
    let planned: BTreeMap<&ObjectKey, &PlannedObject> = run
        .plan
        .packages
        .iter()
        .flat_map(|p| &p.objects)
        .map(|o| (&o.key, o))
        .collect();
    let order = Order::of(&run.build.packages, &run.plan.desired);
    let mut failed_groups: BTreeSet<Group> = BTreeSet::new();
    let mut aborted = false;
    let permits = tokio::sync::Semaphore::new(run.options.concurrency.max(1));
    for wave in &order.waves {
        if aborted {
            break;
        }
        let runnable = runnable(run.options, &order, wave, &mut failed_groups, changes);
        if runnable.is_empty() {
            continue;
        }
        lease.check().map_err(EngineError::Lease)?;
        let results = apply_wave(run, &order, &runnable, packages, &planned, &permits).await?;
        for (i, ok, group_changes) in results {
            let group = &order.steps[i].group;
            let refused = group_changes.failed > 0;
            let mark = changes.messages.len();
            let result = crate::packages::GroupResult {
                ok,
                failed: group_changes.failed,
                healthy: group_changes.healthy,
            };
            changes.merge(group_changes);
            packages
                .finish(run.plan, group, result, &changes.messages[mark..])
                .await?;
            if !ok {
                failed_groups.insert(group.clone());
                if run.options.on_error.stops(refused) {
                    aborted = true;
                }
            }
        }
        changes.record(status);
        records::update_status(run.client, &run.name, |latest| {
            records::take_run_fields(latest, status)
        })
        .await?;
    }
    Ok(Waves {
        healthy: failed_groups.is_empty(),
        aborted,
    })
}

/// The groups of `wave` that run: a group whose dependency is not healthy
/// is skipped (and counts as not healthy for its own dependents).
fn runnable(
    options: &DeployOptions,
    order: &Order<'_, Desired>,
    wave: &[usize],
    failed_groups: &mut BTreeSet<Group>,
    changes: &mut ChangeSet<'_>,
) -> Vec<usize> {
    let mut runnable = Vec::new();
    for &i in wave {
        let Step {
            group, depends_on, ..
        } = &order.steps[i];
        if let Some(dep) = depends_on.iter().find(|d| failed_groups.contains(*d)) {
            emit(
                options,
                Event::Skipped {
                    group: group.clone(),
                    reason: format!("{dep} is not healthy"),
                },
            );
            failed_groups.insert(group.clone());
            changes
                .messages
                .push(format!("{group} skipped: {dep} is not healthy"));
            continue;
        }
        runnable.push(i);
    }
    runnable
}

/// One wave: each package's record, then its crossed migrations, in order;
/// then the objects of the whole wave at once. Returns, per group, whether
/// it is healthy and what happened.
async fn apply_wave<'p>(
    run: &Run<'p>,
    order: &Order<'p, Desired>,
    runnable: &[usize],
    packages: &mut crate::packages::PackageRecords,
    planned: &BTreeMap<&'p ObjectKey, &'p PlannedObject>,
    permits: &tokio::sync::Semaphore,
) -> Result<Vec<(usize, bool, ChangeSet<'p>)>> {
    let migrations = run.migration_stage();
    let mut migrated = Vec::with_capacity(runnable.len());
    for &i in runnable {
        let group = &order.steps[i].group;
        packages.begin(run.plan, group).await?;
        migrated.push(crate::migrations::run_group(&migrations, run.plan, group).await);
    }
    let stage = run.apply_stage();
    let stage = &stage;
    let mut applies = Vec::with_capacity(runnable.len());
    for (&i, mut group_changes) in runnable.iter().zip(migrated) {
        let Step { group, objects, .. } = &order.steps[i];
        applies.push(async move {
            // A failed migration: the package is not applied.
            if group_changes.failed > 0 {
                return (i, false, group_changes);
            }
            let (ok, applied) =
                crate::apply::apply_group(stage, group, objects, planned, permits).await;
            group_changes.merge(applied);
            (i, ok, group_changes)
        });
    }
    Ok(futures::future::join_all(applies).await)
}

/// The final phase: Failed when aborted, Degraded when a group is not
/// healthy or a deletion failed, else Active; written with its message,
/// older records superseded.
async fn finish(
    run: &Run<'_>,
    waves: Waves,
    mut status: kix_api::ActivationStatus,
    changes: ChangeSet<'_>,
    packages: &mut crate::packages::PackageRecords,
    started: Instant,
) -> Result<DeployOutcome> {
    let name = &run.name;
    let phase = if waves.aborted {
        Phase::Failed
    } else if !waves.healthy || !status.failed_deletions.is_empty() {
        Phase::Degraded
    } else {
        Phase::Active
    };
    let message = summary(&changes, &status, started.elapsed());
    packages
        .settle(&format!("{name} ended {phase} before reaching the package"))
        .await?;
    status.phase = Some(phase);
    status.message = Some(message.clone());
    status.clear_pending_prune();
    if let Some(p) = status.progress.as_mut() {
        p.pruned = changes.pruned();
    }
    // Listed wide (an older kix's objects), every object of the cluster
    // is labelled now if all was applied and pruned (a scoped plan read
    // only some).
    let whole = run.plan.labelled || run.plan.options.only.is_none();
    let labelled = phase == Phase::Active && run.options.prune && whole;
    records::update_status(run.client, name, |latest| {
        records::take_run_fields(latest, &status);
        if labelled {
            records::say_objects_labelled(latest, &run.plan.cluster);
        }
    })
    .await?;
    if matches!(phase, Phase::Active | Phase::Degraded) {
        supersede_older(run.client, &run.plan.cluster, name).await?;
    }
    emit(
        run.options,
        Event::Finished {
            activation: name.clone(),
            phase,
            message: message.clone(),
        },
    );
    Ok(DeployOutcome {
        activation: Some(name.clone()),
        phase,
        message,
        applied: changes.applied(),
        unchanged: changes.unchanged.len() as u32,
        pruned: changes.pruned(),
        failed: changes.failed,
        deleting: status.deleting.clone(),
        deleting_total: status.deleting_total,
        migrated: changes.migrated,
        no_op: false,
        rolled_back_to: None,
    })
}

/// The record's message: the counts, or what went wrong.
fn summary(changes: &ChangeSet, status: &kix_api::ActivationStatus, elapsed: Duration) -> String {
    let deleting = status.deleting_count();
    if changes.messages.is_empty() && deleting == 0 {
        format!(
            "{} objects applied, {} pruned in {:.1}s",
            changes.applied(),
            changes.pruned(),
            elapsed.as_secs_f64()
        )
    } else if changes.messages.is_empty() {
        format!(
            "{} objects applied, {} pruned, {deleting} being deleted (waiting for finalizers) in {:.1}s",
            changes.applied(),
            changes.pruned(),
            elapsed.as_secs_f64()
        )
    } else {
        joined(&changes.messages)
    }
}

/// The messages joined with `; `, at most [`MESSAGES_LISTED`] of them, then
/// how many more.
pub fn joined(messages: &[String]) -> String {
    let mut text = messages
        .iter()
        .take(MESSAGES_LISTED)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join("; ");
    if messages.len() > MESSAGES_LISTED {
        text.push_str(&format!("; and {} more", messages.len() - MESSAGES_LISTED));
    }
    text
}

/// Marks every older record of the cluster that is not already Superseded.
pub async fn supersede_older(client: &Client, cluster: &str, current: &str) -> Result<()> {
    let all = records::list_cluster(client, cluster).await?;
    let current_seq = Activation::sequence_in(current, cluster).unwrap_or(0);
    for record in records::of_cluster(&all, cluster) {
        let older = record.sequence().is_some_and(|s| s < current_seq);
        if older && matches!(record.phase(), Some(Phase::Active | Phase::Degraded)) {
            records::set_phase(
                client,
                record,
                Phase::Superseded,
                Some(format!("superseded by {current}")),
            )
            .await?;
        }
    }
    Ok(())
}

impl Refusal {
    /// The refusal as the engine reports it (the same words every executor
    /// has always printed).
    pub fn into_error(self) -> EngineError {
        match self {
            Refusal::NotCurrent {
                cluster,
                expected,
                found,
            } => EngineError::NotCurrent {
                cluster,
                expected,
                found,
            },
            Refusal::NoPermission(objects) => EngineError::NoPermission(objects.join("; ")),
            Refusal::Conflicts(objects) => EngineError::Conflicts(objects.join(", ")),
            Refusal::CrdStoredVersions(refused) => {
                EngineError::CrdStoredVersion(refused.join("; "))
            }
            Refusal::NeedsAcceptance(actions) => EngineError::NeedsAcceptance(actions.join("; ")),
            Refusal::EmptyBuild { cluster } => EngineError::EmptyBuild(cluster),
            Refusal::DeletionBudget(check) => EngineError::DeletionBudget(check.explain()),
        }
    }
}

impl From<Refusal> for EngineError {
    fn from(refusal: Refusal) -> Self {
        refusal.into_error()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run where thousands of objects failed must not write a message (and
    /// a record, and an Event) that grows with them.
    #[test]
    fn joined_messages_name_the_first_messages_and_counts_the_rest() {
        let messages: Vec<String> = (0..25_000)
            .map(|i| format!("could not prune ConfigMap apps/cm-{i}: forbidden"))
            .collect();
        let text = joined(&messages);
        assert!(text.starts_with("could not prune ConfigMap apps/cm-0: forbidden; "));
        assert!(text.ends_with("; and 24990 more"), "{text}");
        assert_eq!(text.matches("could not prune").count(), MESSAGES_LISTED);
        assert_eq!(
            joined(&messages[..2]),
            format!("{}; {}", messages[0], messages[1])
        );
        assert_eq!(joined(&[]), "");
    }
}

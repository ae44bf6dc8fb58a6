//! The apply stage of a deploy, one group at a time: server-side apply
//! rank by rank (bounded parallel), then the wait for health. It returns
//! what it did ([`ChangeSet`]) and reads only its own settings
//! ([`ApplyStage`]), never the deploy's options or state.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use kix_manifest::ObjectKey;
use kube::Client;
use kube::api::{DeleteParams, PropagationPolicy};

use crate::changes::ChangeSet;
use crate::desired::Desired;
use crate::events::{Event, Events, emit};
use crate::order::Group;
use crate::ownership;
use crate::plan::{api_for, applied_manifest};
use crate::plan_object::{Action, PlannedObject};
use crate::wait::{Applied, WaitOptions, WaitTarget, wait_healthy};

/// What the apply stage reads: its own settings, made by the deploy.
pub(crate) struct ApplyStage<'a> {
    pub client: &'a Client,
    pub events: &'a Events,
    /// Applies in flight at once inside a rank.
    pub concurrency: usize,
    /// A failed apply does not stop the group's other applies
    /// (`--on-error continue`).
    pub continue_on_error: bool,
    /// How long a replace waits for the object to go; the wait's timeout
    /// as the reasons name it.
    pub timeout: Duration,
    pub force_conflicts: bool,
    pub yield_to_kix_clusters: bool,
    /// When waiting for health ends.
    pub deadline: Instant,
    /// The build's health rules, then the built-in library.
    pub rules: &'a crate::health::Rules,
    /// The deploy's shared watches, for the health waits.
    pub watches: &'a crate::watch_hub::WatchHub,
}

/// Applies one group (rank by rank, bounded parallel; `permits` bounds the
/// applies in flight across the groups of a wave) and waits for it to be
/// healthy. Returns false when an object failed or did not become healthy,
/// with what happened to the group's objects (those left unchanged too).
pub(crate) async fn apply_group<'p>(
    stage: &ApplyStage<'_>,
    group: &Group,
    objects: &[&'p Desired],
    planned: &BTreeMap<&'p ObjectKey, &'p PlannedObject>,
    permits: &tokio::sync::Semaphore,
) -> (bool, ChangeSet<'p>) {
    // Helm hooks: the pre phase, the package's other objects, the post
    // phase, each hook weight applied and waited for before the next.
    let split = crate::hooks::split(objects, planned);
    let mut changes = ChangeSet {
        unchanged: split.skipped,
        ..ChangeSet::default()
    };
    if !run_phase(stage, group, &split.pre, planned, permits, &mut changes).await {
        return (false, changes);
    }
    let work = group_work(&split.main, planned);
    let (ok, applied) = apply_and_wait(stage, group, work.writes, work.to_wait, permits).await;
    changes.merge(applied);
    changes.unchanged.extend(work.unchanged);
    if !ok {
        return (false, changes);
    }
    let ok = run_phase(stage, group, &split.post, planned, permits, &mut changes).await;
    (ok, changes)
}

/// One phase of the delete hooks of `package`, a package the build drops
/// ([`crate::delete_hooks`]): `pre-delete` before its objects are pruned,
/// `post-delete` after. Returns false when a hook failed.
pub(crate) async fn run_delete_hooks<'p>(
    stage: &ApplyStage<'_>,
    package: &str,
    hooks: &[&'p Desired],
    planned: &BTreeMap<&'p ObjectKey, &'p PlannedObject>,
    phase: crate::hooks::Phase,
    changes: &mut ChangeSet<'p>,
) -> bool {
    let group = Group::Package(package.to_owned());
    let split = crate::hooks::split(hooks, planned);
    let batches = match phase {
        crate::hooks::Phase::Pre => &split.pre,
        crate::hooks::Phase::Post => &split.post,
    };
    let permits = tokio::sync::Semaphore::new(stage.concurrency.max(1));
    run_phase(stage, &group, batches, planned, &permits, changes).await
}

/// A hook phase, weight by weight. Once all of it succeeded, its
/// `hook-succeeded` hooks are deleted (as Helm does: a later weight may
/// need an earlier one, say a Job its ServiceAccount).
async fn run_phase<'p>(
    stage: &ApplyStage<'_>,
    group: &Group,
    batches: &[crate::hooks::Batch<'p>],
    planned: &BTreeMap<&'p ObjectKey, &'p PlannedObject>,
    permits: &tokio::sync::Semaphore,
    changes: &mut ChangeSet<'p>,
) -> bool {
    for batch in batches {
        if !run_hooks(stage, group, batch, planned, permits, changes).await {
            return false;
        }
    }
    for d in batches.iter().flat_map(|b| &b.objects) {
        delete_by_policy(stage, d, true).await;
    }
    true
}

/// One weight of a hook phase: applied and waited for; when it failed, its
/// `hook-failed` objects that did not succeed deleted. A hook that failed
/// fails the group, named with its event, before anything after it.
async fn run_hooks<'p>(
    stage: &ApplyStage<'_>,
    group: &Group,
    batch: &crate::hooks::Batch<'p>,
    planned: &BTreeMap<&'p ObjectKey, &'p PlannedObject>,
    permits: &tokio::sync::Semaphore,
    changes: &mut ChangeSet<'p>,
) -> bool {
    let work = group_work(&batch.objects, planned);
    let (ok, mut ran) = apply_and_wait(stage, group, work.writes, work.to_wait, permits).await;
    ran.unchanged.extend(work.unchanged);
    let done: Vec<&Desired> = batch
        .objects
        .iter()
        .copied()
        .filter(|d| ok || ran.completed_jobs.contains(&crate::hooks::entry(&d.key)))
        .collect();
    if ok {
        // Succeeded: remembered with its digest, as a completed Job is.
        for d in &done {
            let entry = crate::hooks::entry(&d.key);
            if !ran.completed_jobs.contains(&entry) {
                ran.completed_jobs.push(entry);
            }
        }
    } else {
        let failed: Vec<&Desired> = batch
            .objects
            .iter()
            .copied()
            .filter(|d| !done.iter().any(|s| s.key == d.key))
            .collect();
        for d in &failed {
            delete_by_policy(stage, d, false).await;
        }
        let failed: Vec<String> = failed
            .iter()
            .map(|d| crate::hooks::describe(batch.event, &d.key))
            .collect();
        ran.failed += 1;
        ran.messages.insert(
            0,
            format!(
                "{group}: {} failed; {}",
                failed.join(", "),
                crate::hooks::after_failure(batch.event)
            ),
        );
    }
    changes.merge(ran);
    ok
}

/// `helm.sh/hook-delete-policy` after a hook ran: `hook-succeeded` deletes
/// it when it succeeded, `hook-failed` when it failed (its Pods with it).
/// A delete that fails is only logged: the hook's outcome stands.
async fn delete_by_policy(stage: &ApplyStage<'_>, d: &Desired, succeeded: bool) {
    use kix_manifest::helm::DeletePolicy;
    let Some(hook) = d.hook.as_deref() else {
        return;
    };
    let policy = if succeeded {
        DeletePolicy::HookSucceeded
    } else {
        DeletePolicy::HookFailed
    };
    if !hook.delete.contains(&policy) {
        return;
    }
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..Default::default()
    };
    match api_for(stage.client, d).delete(&d.key.name, &params).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(error) => tracing::warn!(%error, "cannot delete Helm hook {}", d.key),
    }
}

async fn apply_and_wait<'p>(
    stage: &ApplyStage<'_>,
    group: &Group,
    writes: Vec<(&'p Desired, &'p PlannedObject)>,
    mut to_wait: Vec<WaitTarget>,
    permits: &tokio::sync::Semaphore,
) -> (bool, ChangeSet<'p>) {
    if writes.is_empty() && to_wait.is_empty() {
        return (true, ChangeSet::default());
    }
    // A group with nothing to write reports only when it is not healthy.
    let quiet = writes.is_empty();
    if !quiet {
        emit(
            stage.events,
            Event::GroupStarted {
                group: group.clone(),
                objects: writes.len(),
            },
        );
    }
    let started = Instant::now();
    let (ranks, mut changes) = apply_ranks(stage, group, writes, permits).await;
    let mut applied = HashMap::new();
    let ok = match ranks {
        Ranks::Stopped => return (false, changes),
        Ranks::Done { ok, unready } => {
            for (target, version) in unready {
                if let Some(version) = version {
                    applied.insert(target.clone(), version);
                }
                to_wait.push(target);
            }
            ok
        }
    };
    if !to_wait.is_empty() {
        let (healthy, waited) = wait_group(stage, group, to_wait, applied, quiet).await;
        changes.merge(waited);
        if !healthy {
            return (false, changes);
        }
    }
    if ok && !quiet {
        emit(
            stage.events,
            Event::Healthy {
                group: group.clone(),
                elapsed_ms: started.elapsed().as_millis() as u64,
            },
        );
    }
    (ok, changes)
}

/// What a group's apply does with its objects, sorted in one pass.
struct GroupWork<'a> {
    writes: Vec<(&'a Desired, &'a PlannedObject)>,
    /// Unchanged objects, not written, waited for all the same: the rerun
    /// of a build whose deploy failed, or was killed before its wait ended,
    /// must not find the group healthy unchecked.
    to_wait: Vec<WaitTarget>,
    unchanged: Vec<&'a ObjectKey>,
}

fn group_work<'a>(
    objects: &[&'a Desired],
    planned: &BTreeMap<&ObjectKey, &'a PlannedObject>,
) -> GroupWork<'a> {
    let mut work = GroupWork {
        writes: Vec::new(),
        to_wait: Vec::new(),
        unchanged: Vec::new(),
    };
    for &d in objects {
        let Some(&p) = planned.get(&d.key) else {
            continue;
        };
        if p.action != Action::Unchanged {
            work.writes.push((d, p));
            continue;
        }
        work.unchanged.push(&d.key);
        // A completed Job left alone may be gone: nothing to wait for.
        let completed = crate::health::completed::is_completed(p.action, p.note.as_deref());
        if !completed && !has_no_health(&d.key) {
            work.to_wait.push(wait_target(d));
        }
    }
    work
}

fn wait_target(d: &Desired) -> WaitTarget {
    WaitTarget {
        resource: d.resource.api.clone(),
        namespace: d.key.namespace.clone(),
        name: d.key.name.clone(),
    }
}

/// How a group's applies ended.
enum Ranks {
    /// An apply failed and `--on-error` is not `continue`.
    Stopped,
    /// Every rank was applied; `ok` is false when an apply failed.
    /// `unready`: applied objects not healthy yet, with what the apply
    /// returned (the wait judges them by it should they vanish).
    Done {
        ok: bool,
        unready: Vec<(WaitTarget, Option<Applied>)>,
    },
}

/// Applies a group's writes rank by rank, bounded parallel inside a rank,
/// a [`crate::order::chunks`] chunk at a time.
async fn apply_ranks<'p>(
    stage: &ApplyStage<'_>,
    group: &Group,
    writes: Vec<(&'p Desired, &'p PlannedObject)>,
    permits: &tokio::sync::Semaphore,
) -> (Ranks, ChangeSet<'p>) {
    let mut changes = ChangeSet::default();
    let mut ok = true;
    let mut unready = Vec::new();
    for chunk in crate::order::chunks(crate::order::apply_batches(writes, |(d, _)| d.rank)) {
        let mut applies = Vec::with_capacity(chunk.len());
        for (d, p) in chunk {
            applies.push(apply_tagged(stage, d, p, permits));
        }
        let results: Vec<_> = stream::iter(applies)
            .buffer_unordered(stage.concurrency.max(1))
            .collect()
            .await;
        for (d, p, result) in results {
            match result {
                Ok((ready, version)) => {
                    if p.action == Action::Create {
                        changes.created.push(&d.key);
                    } else {
                        changes.configured.push(&d.key);
                    }
                    emit(
                        stage.events,
                        Event::Applied {
                            group: group.clone(),
                            key: d.key.to_string(),
                            action: p.action,
                        },
                    );
                    if ready {
                        changes.healthy += 1;
                    } else {
                        unready.push((wait_target(d), version));
                    }
                }
                Err(error) => {
                    ok = false;
                    changes.failed += 1;
                    changes.messages.push(format!("{}: {error}", d.key));
                    emit(
                        stage.events,
                        Event::ApplyFailed {
                            group: group.clone(),
                            key: d.key.to_string(),
                            error,
                        },
                    );
                    if !stage.continue_on_error {
                        return (Ranks::Stopped, changes);
                    }
                }
            }
        }
    }
    (Ranks::Done { ok, unready }, changes)
}

/// Waits until the group's objects are healthy, up to `deadline`; false
/// (with the reasons) when one is degraded or the time ran out. Returns
/// how many it found healthy and why the others are not.
async fn wait_group(
    stage: &ApplyStage<'_>,
    group: &Group,
    to_wait: Vec<WaitTarget>,
    applied: HashMap<WaitTarget, Applied>,
    quiet: bool,
) -> (bool, ChangeSet<'static>) {
    let mut changes = ChangeSet::default();
    let (client, deadline) = (stage.client, stage.deadline);
    if !quiet {
        emit(
            stage.events,
            Event::Waiting {
                group: group.clone(),
                pending: to_wait.iter().map(target_name).collect(),
            },
        );
    }
    let timeout = deadline.saturating_duration_since(Instant::now());
    let wait_options = WaitOptions {
        timeout,
        fail_fast_on_degraded: true,
        rules: stage.rules.clone(),
        applied,
        watches: Some(stage.watches.clone()),
        ..WaitOptions::default()
    };
    match wait_healthy(client.clone(), to_wait, wait_options).await {
        Ok(report) if report.is_success() => {
            changes.healthy += report.ready.len() as u32;
            changes.completed_jobs = completed_jobs(&report);
            (true, changes)
        }
        Ok(report) => {
            changes.healthy += report.ready.len() as u32;
            changes.completed_jobs = completed_jobs(&report);
            let reasons = unhealthy_reasons(&report, stage.timeout);
            let shown = reasons.len().min(crate::changes::MESSAGES_LISTED);
            let mut message = format!("{group}: {}", reasons[..shown].join(", "));
            if reasons.len() > shown {
                message.push_str(&format!(" and {} more", reasons.len() - shown));
            }
            changes.messages.push(message);
            emit(
                stage.events,
                Event::Unhealthy {
                    group: group.clone(),
                    reasons,
                },
            );
            (false, changes)
        }
        Err(err) => {
            changes
                .messages
                .push(format!("{group}: waiting failed: {err}"));
            (false, changes)
        }
    }
}

/// The Jobs a wait found complete (whether removed since or not), as the
/// record remembers them.
fn completed_jobs(report: &crate::wait::WaitReport) -> Vec<String> {
    let job = kix_manifest::group_kind::JOB;
    report
        .ready
        .iter()
        .filter(|t| t.resource.group == job.group && t.resource.kind == job.kind)
        .map(|t| format!("{}/{}", t.namespace.as_deref().unwrap_or_default(), t.name))
        .collect()
}

/// Why a group is not healthy: the time ran out, objects degraded or not
/// ready, each named.
fn unhealthy_reasons(report: &crate::wait::WaitReport, timeout: Duration) -> Vec<String> {
    let mut reasons: Vec<String> = report
        .degraded
        .iter()
        .map(|(t, r)| format!("{} degraded: {r}", target_name(t)))
        .chain(
            report
                .not_ready
                .iter()
                .map(|(t, r)| format!("{} not healthy: {r}", target_name(t))),
        )
        .collect();
    if report.timed_out {
        reasons.insert(0, format!("timed out after {}s", timeout.as_secs()));
    }
    reasons
}

/// Kinds without a status: always healthy, never waited for.
fn has_no_health(key: &ObjectKey) -> bool {
    use kix_manifest::group_kind::{CONFIG_MAP, GroupKind, SECRET, SERVICE_ACCOUNT};
    const RBAC: &str = "rbac.authorization.k8s.io";
    matches!(
        key.group_kind(),
        CONFIG_MAP
            | SECRET
            | SERVICE_ACCOUNT
            | GroupKind {
                group: RBAC,
                kind: "Role" | "RoleBinding" | "ClusterRole" | "ClusterRoleBinding"
            }
    )
}

fn target_name(t: &WaitTarget) -> String {
    match &t.namespace {
        Some(ns) => format!("{} {ns}/{}", t.resource.kind, t.name),
        None => format!("{} {}", t.resource.kind, t.name),
    }
}

async fn apply_tagged<'a>(
    stage: &ApplyStage<'_>,
    d: &'a Desired,
    p: &'a PlannedObject,
    permits: &tokio::sync::Semaphore,
) -> (
    &'a Desired,
    &'a PlannedObject,
    std::result::Result<(bool, Option<Applied>), String>,
) {
    // Held for the apply: bounds the applies in flight across groups.
    let _permit = permits.acquire().await;
    // Only whether it is ready, its uid and its version are kept: the
    // applied object (managedFields and all) is dropped here, not held
    // until its whole batch is applied.
    // Judged by the build's rules too: an object kstatus calls ready may
    // not be by its rule, and is then waited for.
    let ready = apply_one(stage, d, p).await.map(|applied| {
        let ready = stage.rules.judge(&applied).health.is_ready();
        (ready, Applied::of(&applied))
    });
    (d, p, ready)
}

/// One server-side apply (or delete-then-create for a replace).
async fn apply_one(
    stage: &ApplyStage<'_>,
    d: &Desired,
    p: &PlannedObject,
) -> std::result::Result<serde_json::Value, String> {
    let client = stage.client;
    let api = api_for(client, d);
    // A hook created anew (`before-hook-creation`, Helm's default): its
    // previous object goes first, so its run never collides with it.
    let recreated_hook = p.action == Action::Create
        && d.hook.as_deref().is_some_and(|h| {
            h.delete
                .contains(&kix_manifest::helm::DeletePolicy::BeforeHookCreation)
        });
    if p.action == Action::Replace || recreated_hook {
        delete_for_replace(&api, &d.key.name, stage.timeout).await?;
    }
    // Planned while it was being deleted: created once it is gone.
    if p.action == Action::Create && p.deletion.is_some() {
        wait_gone(&api, &d.key.name, stage.timeout).await?;
    }
    // A conflict reaches the apply only when the user forced it.
    let force = stage.force_conflicts || p.action == Action::Conflict;
    let takeover = ownership::takeover(p, force, stage.yield_to_kix_clusters);
    let manifest = applied_manifest(d, &p.activations);
    let manager = kix_api::field_manager(&d.cluster);
    if !d.handed_off.is_empty() && p.action != Action::Create {
        ownership::hand_over(&api, &manifest, &d.handed_off, &manager)
            .await
            .map_err(|e| {
                let e = d.scrub_error(e);
                format!("handing fields over: {}", crate::error::api_message(&e))
            })?;
    }
    let (applied, _) = ownership::apply(
        client,
        &api,
        &d.key.name,
        &manifest,
        &manager,
        takeover,
        false,
    )
    .await;
    // The apiserver may quote a value it refuses.
    let applied = applied.map_err(|e| crate::error::api_message(&d.scrub_error(e)))?;
    let object = match applied {
        ownership::Applied::Object(object) => object,
        ownership::Applied::Conflicts(contested) => {
            let fields: Vec<String> = contested
                .iter()
                .map(|c| d.scrub(&c.describe(&d.cluster)))
                .collect();
            return Err(format!("conflict: {}", fields.join("; ")));
        }
    };
    if p.legacy == ownership::Legacy::TakeOverAndRelease {
        ownership::release_legacy(&api, &manifest)
            .await
            .map_err(|e| {
                format!(
                    "releasing field manager kix: {}",
                    crate::error::api_message(&d.scrub_error(e))
                )
            })?;
    }
    Ok(serde_json::to_value(object).unwrap_or_default())
}

/// The first half of a replace: deletes the object and waits until it is
/// gone (finalizers and dependents included) before it is created again.
async fn delete_for_replace(
    api: &kube::Api<kube::api::DynamicObject>,
    name: &str,
    timeout: Duration,
) -> std::result::Result<(), String> {
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Foreground),
        ..Default::default()
    };
    match api.delete(name, &params).await {
        Ok(_) | Err(kube::Error::Api(_)) => {}
        Err(e) => return Err(crate::error::api_message(&e)),
    }
    wait_gone(api, name, timeout).await
}

/// Waits (a watch) until the object `name` is gone, up to `timeout`.
async fn wait_gone(
    api: &kube::Api<kube::api::DynamicObject>,
    name: &str,
    timeout: Duration,
) -> std::result::Result<(), String> {
    let gone = kube::runtime::wait::await_condition(
        api.clone(),
        name,
        |obj: Option<&kube::api::DynamicObject>| obj.is_none(),
    );
    if tokio::time::timeout(timeout, gone).await.is_err() {
        return Err(format!(
            "still being deleted after {}s; not re-created",
            timeout.as_secs()
        ));
    }
    Ok(())
}

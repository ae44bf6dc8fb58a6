//! The prune stage of a deploy: deleting what the build no longer has.
//!
//! Before the first deletion the Activation says how many objects go and
//! names the first few (`pendingPrune`, `pendingPruneTotal`): a count, so
//! the record stays small however many objects the prune deletes. Nothing
//! resumes from it: an interrupted prune is planned again from the objects'
//! own labels and annotations. Objects go in reverse apply order, rank by
//! rank, bounded parallel inside a rank.

use futures::{StreamExt, stream};
use kix_api::{ActivationStatus, DELETING_LISTED, DeletingObject, FailedDeletion, ObjectRef};
use kube::Client;
use kube::api::{DeleteParams, Patch, PatchParams, PropagationPolicy};

use crate::deploy::{DeployOptions, Event, PruneMode, RunState, emit};
use crate::error::Result;
use crate::live::Deletion;
use crate::plan::{Action, Plan, PlannedObject};
use crate::records;

pub(crate) async fn prune(
    client: &Client,
    plan: &Plan,
    options: &DeployOptions,
    name: &str,
    status: &mut kix_api::ActivationStatus,
    state: &mut RunState,
) -> Result<()> {
    // Objects already being deleted are waited for, never sent DELETE again.
    let mut deleting = deleting_in(plan);
    let work: Vec<&PlannedObject> = plan
        .prune
        .iter()
        .filter(|o| {
            o.action == Action::Delete || o.note.as_deref() == Some(crate::plan::NOTE_SHARED)
        })
        .collect();
    if work.is_empty() {
        set_deleting(status, deleting);
        return Ok(());
    }
    // Written before the first deletion, for a reader of the record (a rerun
    // plans again from the objects).
    status.set_pending_prune(
        work.iter()
            .filter(|o| o.action == Action::Delete)
            .map(|o| object_ref(o)),
    );
    records::set_status(client, name, status).await?;
    let mut resources = crate::resources::Resources::new(client.clone());
    let propagation = match options.prune_mode {
        PruneMode::Background => PropagationPolicy::Background,
        PruneMode::Foreground => PropagationPolicy::Foreground,
        PruneMode::Orphan => PropagationPolicy::Orphan,
    };
    // Resolve the kinds first (cached discovery), then delete rank by rank
    // (work is in reverse apply order), each rank bounded-parallel like the
    // applies.
    let mut resolved: Vec<(&PlannedObject, kube::Api<kube::api::DynamicObject>)> =
        Vec::with_capacity(work.len());
    for o in work {
        let Some(resource) = resources.get(&o.api_version, &o.key.kind).await? else {
            continue;
        };
        let api: kube::Api<kube::api::DynamicObject> = match &o.key.namespace {
            Some(ns) => kube::Api::namespaced_with(client.clone(), ns, &resource.api),
            None => kube::Api::all_with(client.clone(), &resource.api),
        };
        resolved.push((o, api));
    }
    let batches = crate::order::prune_batches(resolved, |(o, _)| &o.key);
    for chunk in crate::order::chunks(batches) {
        let mut deletions = Vec::with_capacity(chunk.len());
        for (o, api) in chunk {
            deletions.push(prune_one(o, api, propagation.clone(), &plan.cluster));
        }
        let results: Vec<(&PlannedObject, std::result::Result<Pruned, String>)> =
            stream::iter(deletions)
                .buffer_unordered(options.concurrency.max(1))
                .collect()
                .await;
        for (o, result) in results {
            match result {
                Ok(Pruned::Deleting(deletion)) => {
                    emit(
                        options,
                        Event::PruneDeleting {
                            key: o.key.to_string(),
                            finalizers: deletion.finalizers.clone(),
                        },
                    );
                    deleting.push(deleting_object(o, deletion));
                }
                Ok(Pruned::Gone) => {
                    if o.action == Action::Delete {
                        state.pruned += 1;
                    }
                    emit(
                        options,
                        Event::Pruned {
                            key: o.key.to_string(),
                            action: o.action,
                        },
                    );
                }
                Err(error) => {
                    status.push_failed_deletion(FailedDeletion {
                        object: object_ref(o),
                        reason: error.clone(),
                    });
                    state
                        .messages
                        .push(format!("could not prune {}: {error}", o.key));
                    emit(
                        options,
                        Event::PruneFailed {
                            key: o.key.to_string(),
                            error,
                        },
                    );
                }
            }
        }
    }
    set_deleting(status, deleting);
    Ok(())
}

/// What became of one pruned object.
#[derive(Debug)]
enum Pruned {
    /// Deleted (or, for a shared object, this cluster's entry removed).
    Gone,
    /// The DELETE was accepted but the object stays until its finalizers
    /// (or its grace period, or a Namespace's contents) are done.
    Deleting(Deletion),
}

fn object_ref(o: &PlannedObject) -> ObjectRef {
    ObjectRef::new(
        o.api_version.clone(),
        o.key.kind.clone(),
        o.key.namespace.clone(),
        o.key.name.clone(),
    )
}

fn deleting_object(o: &PlannedObject, deletion: Deletion) -> DeletingObject {
    DeletingObject {
        object: object_ref(o),
        finalizers: deletion.finalizers,
        since: deletion.since,
    }
}

/// Records the objects being deleted on the record's status, at most
/// [`DELETING_LISTED`] of them (the total beside): the record stays small
/// however many objects wait. Returns whether the status changed.
pub fn set_deleting(status: &mut ActivationStatus, mut deleting: Vec<DeletingObject>) -> bool {
    deleting.sort();
    let total = deleting.len();
    deleting.truncate(DELETING_LISTED);
    let total = (total > DELETING_LISTED).then_some(total as u32);
    let changed = status.deleting != deleting || status.deleting_total != total;
    status.deleting = deleting;
    status.deleting_total = total;
    changed
}

/// The objects a plan finds being deleted (its `deleting` prune entries).
pub fn deleting_in(plan: &Plan) -> Vec<DeletingObject> {
    plan.prune
        .iter()
        .filter_map(|o| Some(deleting_object(o, o.deletion.clone()?)))
        .collect()
}

/// The deletion state in an object's metadata.
fn deletion_of(meta: &kube::api::ObjectMeta) -> Option<Deletion> {
    let since = serde_json::to_value(meta.deletion_timestamp.as_ref()?).ok()?;
    Deletion::of(
        since.as_str(),
        meta.finalizers.as_deref().unwrap_or_default(),
    )
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

/// One deletion (or, for a shared object, the removal of this cluster's entry).
async fn prune_one<'a>(
    o: &'a PlannedObject,
    api: kube::Api<kube::api::DynamicObject>,
    propagation: PropagationPolicy,
    cluster: &str,
) -> (&'a PlannedObject, std::result::Result<Pruned, String>) {
    let result = if o.action == Action::Delete {
        let params = DeleteParams {
            propagation_policy: Some(propagation),
            ..Default::default()
        };
        match api.delete(&o.key.name, &params).await {
            // The apiserver returns the object when it still exists (with
            // its deletionTimestamp), a Status when it is gone; some kinds
            // return the deleted object itself, without a deletionTimestamp.
            Ok(response) => Ok(response
                .left()
                .and_then(|object| deletion_of(&object.metadata))
                .map_or(Pruned::Gone, Pruned::Deleting)),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(Pruned::Gone),
            Err(e) => Err(crate::error::api_message(&e)),
        }
    } else {
        // Shared: only this cluster's entry leaves the annotation.
        let patch = serde_json::json!({"metadata": {"annotations": {
            kix_api::ANNOTATION_ACTIVATIONS: kix_api::labels::format_activations(&o.activations)
        }}});
        let params = PatchParams {
            field_manager: Some(kix_api::field_manager(cluster)),
            ..Default::default()
        };
        api.patch(&o.key.name, &params, &Patch::Merge(&patch))
            .await
            .map(|_| Pruned::Gone)
            .map_err(|e| crate::error::api_message(&e))
    };
    (o, result)
}

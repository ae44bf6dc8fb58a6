//! The prune stage of a deploy: deleting what the build no longer has.
//!
//! Before the first deletion the deploy writes on the Activation how many
//! objects go and names the first few ([`pending`]: `pendingPrune`,
//! `pendingPruneTotal`): a count, so the record stays small however many
//! objects the prune deletes. The stage itself writes no record: it
//! returns what it did ([`ChangeSet`]). Nothing
//! resumes from it: an interrupted prune is planned again from the objects'
//! own labels and annotations. Objects go in reverse apply order, rank by
//! rank, bounded parallel inside a rank.

use futures::{StreamExt, stream};
use kix_api::{DeletingObject, FailedDeletion, ObjectRef};
use kube::Client;
use kube::api::{DeleteParams, Patch, PatchParams, PropagationPolicy};
use serde::Serialize;

use crate::changes::ChangeSet;
use crate::error::Result;
use crate::events::{Event, Events, emit};
use crate::live::Deletion;
use crate::plan_object::{Action, PlannedObject};
use crate::plan_value::Plan;

/// How a prune deletes: its own settings, not the deploy's.
pub(crate) struct PruneOptions<'a> {
    pub mode: PruneMode,
    /// Deletions in flight at once inside a rank.
    pub concurrency: usize,
    pub events: &'a Events,
}

/// The objects of `plan` a prune acts on: its deletions, and the shared
/// objects whose activations entry goes.
pub fn work(plan: &Plan) -> Vec<&PlannedObject> {
    plan.prune
        .iter()
        .filter(|o| {
            o.action == Action::Delete || o.note.as_deref() == Some(crate::plan_object::NOTE_SHARED)
        })
        .collect()
}

/// The record's `pendingPrune`: what `work` deletes, written before the
/// first deletion for a reader of the record (a rerun plans again from the
/// objects).
pub fn pending(work: &[&PlannedObject]) -> impl Iterator<Item = ObjectRef> {
    work.iter()
        .filter(|o| o.action == Action::Delete)
        .map(|o| object_ref(o))
        .collect::<Vec<_>>()
        .into_iter()
}

/// Deletes `work` (from [`work`]) in reverse apply order, rank by rank,
/// bounded parallel inside a rank. Returns what it did: the objects
/// deleted, those held by finalizers (the plan's own included), those it
/// could not delete.
pub(crate) async fn prune<'p>(
    client: &Client,
    plan: &'p Plan,
    work: Vec<&'p PlannedObject>,
    options: &PruneOptions<'_>,
) -> Result<ChangeSet<'p>> {
    // Objects already being deleted are waited for, never sent DELETE again.
    let mut changes = ChangeSet {
        held: Some(deleting_in(plan)),
        ..ChangeSet::default()
    };
    if work.is_empty() {
        return Ok(changes);
    }
    let mut resources = crate::resources::Resources::new(client.clone());
    let propagation = match options.mode {
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
            record_one(&mut changes, o, result, options.events);
        }
    }
    Ok(changes)
}

/// What became of `o`, into `changes` and the events.
fn record_one<'p>(
    changes: &mut ChangeSet<'p>,
    o: &'p PlannedObject,
    result: std::result::Result<Pruned, String>,
    events: &Events,
) {
    match result {
        Ok(Pruned::Deleting(deletion)) => {
            emit(
                events,
                Event::PruneDeleting {
                    key: o.key.to_string(),
                    finalizers: deletion.finalizers.clone(),
                },
            );
            changes
                .held
                .get_or_insert_with(Vec::new)
                .push(deleting_object(o, deletion));
        }
        Ok(Pruned::Gone) => {
            if o.action == Action::Delete {
                changes.deleted.push(&o.key);
            }
            emit(
                events,
                Event::Pruned {
                    key: o.key.to_string(),
                    action: o.action,
                },
            );
        }
        Err(error) => {
            changes.failed_deletions.push(FailedDeletion {
                object: object_ref(o),
                reason: error.clone(),
            });
            changes
                .messages
                .push(format!("could not prune {}: {error}", o.key));
            emit(
                events,
                Event::PruneFailed {
                    key: o.key.to_string(),
                    error,
                },
            );
        }
    }
}

/// How a prune deletes: what happens to an object's dependents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PruneMode {
    #[default]
    Background,
    Foreground,
    Orphan,
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

pub use crate::changes::set_deleting;

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

pub use crate::live::human_duration;

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
        // Shared: only this cluster's entry leaves the annotation, and its
        // label the object.
        let patch = serde_json::json!({"metadata": {
            "annotations": {
                kix_api::ANNOTATION_ACTIVATIONS: kix_api::labels::format_activations(&o.activations)
            },
            "labels": {kix_api::labels::cluster_label(cluster): null},
        }});
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

//! The prune stage of a deploy: deleting what the build no longer has.
//!
//! The set to delete is written into the Activation (`pendingPrune`) before
//! the first deletion, so an interrupted prune resumes with it. Objects go in
//! reverse apply order, rank by rank, bounded parallel inside a rank.

use futures::{StreamExt, stream};
use kix_api::{FailedDeletion, ObjectRef};
use kube::Client;
use kube::api::{DeleteParams, Patch, PatchParams, PropagationPolicy};

use crate::deploy::{DeployOptions, Event, PruneMode, RunState, emit};
use crate::error::Result;
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
    let work: Vec<&PlannedObject> = plan
        .prune
        .iter()
        .filter(|o| {
            o.action == Action::Delete || o.note.as_deref() == Some(crate::plan::NOTE_SHARED)
        })
        .collect();
    if work.is_empty() {
        return Ok(());
    }
    // Written before the first deletion: an interrupted prune resumes with it.
    status.pending_prune = work
        .iter()
        .filter(|o| o.action == Action::Delete)
        .map(|o| {
            ObjectRef::new(
                o.api_version.clone(),
                o.key.kind.clone(),
                o.key.namespace.clone(),
                o.key.name.clone(),
            )
        })
        .collect();
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
    let mut resolved: Vec<(&PlannedObject, kube::Api<kube::api::DynamicObject>, u8)> =
        Vec::with_capacity(work.len());
    for o in work {
        let Some(resource) = resources.get(&o.api_version, &o.key.kind).await? else {
            continue;
        };
        let api: kube::Api<kube::api::DynamicObject> = match &o.key.namespace {
            Some(ns) => kube::Api::namespaced_with(client.clone(), ns, &resource.api),
            None => kube::Api::all_with(client.clone(), &resource.api),
        };
        let rank = kix_manifest::kind_rank(&o.key.group, &o.key.kind);
        resolved.push((o, api, rank));
    }
    let mut batches: Vec<Vec<(&PlannedObject, kube::Api<kube::api::DynamicObject>)>> = Vec::new();
    let mut last_rank = None;
    for (o, api, rank) in resolved {
        if last_rank != Some(rank) {
            batches.push(Vec::new());
            last_rank = Some(rank);
        }
        if let Some(batch) = batches.last_mut() {
            batch.push((o, api));
        }
    }
    for batch in batches {
        let mut deletions = Vec::with_capacity(batch.len());
        for (o, api) in batch {
            deletions.push(prune_one(o, api, propagation.clone(), &plan.cluster));
        }
        let results: Vec<(&PlannedObject, std::result::Result<(), String>)> =
            stream::iter(deletions)
                .buffer_unordered(options.concurrency.max(1))
                .collect()
                .await;
        for (o, result) in results {
            match result {
                Ok(()) => {
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
                    status.failed_deletions.push(FailedDeletion {
                        object: ObjectRef::new(
                            o.api_version.clone(),
                            o.key.kind.clone(),
                            o.key.namespace.clone(),
                            o.key.name.clone(),
                        ),
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
    Ok(())
}

/// One deletion (or, for a shared object, the removal of this cluster's entry).
async fn prune_one<'a>(
    o: &'a PlannedObject,
    api: kube::Api<kube::api::DynamicObject>,
    propagation: PropagationPolicy,
    cluster: &str,
) -> (&'a PlannedObject, std::result::Result<(), String>) {
    let result = if o.action == Action::Delete {
        let params = DeleteParams {
            propagation_policy: Some(propagation),
            ..Default::default()
        };
        match api.delete(&o.key.name, &params).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
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
            .map(|_| ())
            .map_err(|e| crate::error::api_message(&e))
    };
    (o, result)
}

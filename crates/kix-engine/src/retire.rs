//! Releasing the objects of an Activation record that goes away (the
//! operator's finalizer, `kix gc`): each object that names the record in its
//! activations annotation is
//!
//! - kept when annotated `kix.run/prune: disabled`;
//! - re-pointed at the cluster's current record when the current build still
//!   contains it (unchanged objects keep naming the record that last wrote them);
//! - trimmed (only this cluster's entries leave the annotation) when another
//!   Kix cluster's build contains it;
//! - deleted otherwise.
//!
//! An object that cannot be changed or deleted is reported with the reason,
//! never skipped silently. An object whose claim on the record does not
//! hold (the record's build does not have it, [`crate::claims`]) is not the
//! record's: it is reported as ignored and left untouched.

use std::collections::BTreeSet;

use kix_api::{ANNOTATION_ACTIVATIONS, Activation, ObjectRef, Phase};
use kix_manifest::{GroupVersionKind, ObjectKey};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PropagationPolicy};
use kube::{Client, ResourceExt};
use serde::Serialize;

use crate::error::{Result, api_message};
use crate::live::{activation_clusters, belongs_to, list_kinds, list_kinds_in};
use crate::records;
use crate::resources::{Resources, Served};

#[derive(Debug, Default, Clone, Serialize)]
pub struct RetireReport {
    pub deleted: Vec<ObjectRef>,
    pub repointed: Vec<ObjectRef>,
    pub trimmed: Vec<ObjectRef>,
    pub kept: Vec<ObjectRef>,
    /// Objects that could not be released, with the reason.
    pub failed: Vec<(ObjectRef, String)>,
    /// Objects that claim the record but are not its (its build does not
    /// have them, or its account may not touch them and its build could not
    /// be read to tell): left as they are, with the reason.
    pub ignored: Vec<(ObjectRef, String)>,
}

/// Releases the objects of `record`. `retiring` names every record going
/// away in the same run (gc retires several): none of them counts as keeping
/// an object.
pub async fn release_objects(
    client: &Client,
    record: &Activation,
    retiring: &BTreeSet<String>,
) -> Result<RetireReport> {
    let name = record.name_any();
    let cluster = record.cluster_name().to_string();
    let all = records::list_all(client).await?;
    let clusters = activation_clusters(&all);
    let mut resources = Resources::new(client.clone());
    let (current, current_keys) =
        current_build(&all, &cluster, &name, retiring, &mut resources).await?;
    let kinds = recorded_kinds(record, &mut resources).await?;
    let selector = kix_api::labels::managed_selector();
    let live = match list_kinds(client, kinds.clone(), Some(&selector)).await {
        // A tenant bounded to its namespaces: the record's objects are in
        // its build's namespaces.
        Err(err) if err.is_forbidden() => {
            let namespaces = build_namespaces(record);
            list_kinds_in(client, kinds, Some(&selector), &namespaces).await?
        }
        listed => listed?,
    };
    // A claim counts only when the record's build has the object: anyone
    // who may write an object may write its annotation.
    let inventory = crate::claims::of_path(&record.spec.source.path);
    let mut report = RetireReport::default();
    let mut mine = Vec::new();
    for l in live
        .values()
        .filter(|l| l.owned && l.activations.contains(&name))
    {
        match &inventory {
            Some(inventory) if !inventory.declares(&l.key) => {
                let why =
                    format!("claims {name} (kix.run/activations), whose build does not have it");
                report.ignored.push((object_ref(l), why));
            }
            _ => mine.push(l),
        }
    }
    // Dependents before what they live in (reverse apply order).
    mine.sort_by(|a, b| {
        let ra = kix_manifest::kind_rank(&a.key.group, &a.key.kind);
        let rb = kix_manifest::kind_rank(&b.key.group, &b.key.kind);
        rb.cmp(&ra).then_with(|| a.key.cmp(&b.key))
    });
    for l in mine {
        let released = Released {
            record: &name,
            cluster: &cluster,
            clusters: &clusters,
            repoint_to: current.filter(|_| current_keys.contains(&l.key)),
            verified: inventory.is_some(),
        };
        release_one(client, l, &released, &mut report).await;
    }
    Ok(report)
}

/// The cluster's current record (not one going away) and the keys of its
/// build: an object it has stays, its annotation pointed at it.
async fn current_build<'a>(
    all: &'a [Activation],
    cluster: &str,
    name: &str,
    retiring: &BTreeSet<String>,
    resources: &mut Resources,
) -> Result<(Option<&'a Activation>, BTreeSet<ObjectKey>)> {
    let current = records::of_cluster(all, cluster)
        .into_iter()
        .rev()
        .filter(|r| r.metadata.deletion_timestamp.is_none())
        .filter(|r| !retiring.contains(&r.name_any()) && r.name_any() != name)
        .find(|r| matches!(r.phase(), Some(Phase::Active | Phase::Degraded)));
    let Some(current) = current else {
        return Ok((None, BTreeSet::new()));
    };
    let build = kix_manifest::read_tree(
        std::path::Path::new(&current.spec.source.path),
        &kix_manifest::ReadOptions::default(),
    )?;
    let keys = crate::desired::desired_objects(&build, resources, crate::desired::Shapes::Skipped)
        .await?
        .into_iter()
        .map(|d| d.key)
        .collect();
    Ok((Some(current), keys))
}

/// The namespaces of `record`'s build's objects (none when the build cannot
/// be read: only what may be listed cluster-wide is then released).
fn build_namespaces(record: &Activation) -> Vec<String> {
    let path = std::path::Path::new(&record.spec.source.path);
    let Ok(build) = kix_manifest::read_tree(path, &kix_manifest::ReadOptions::default()) else {
        return Vec::new();
    };
    let namespaces: BTreeSet<String> = build
        .objects()
        .filter_map(|o| o.key.namespace.clone())
        .chain(build.packages.iter().filter_map(|p| p.namespace.clone()))
        .collect();
    namespaces.into_iter().collect()
}

/// The served kinds `record` lists, to find its objects.
async fn recorded_kinds(
    record: &Activation,
    resources: &mut Resources,
) -> Result<Vec<(kube::discovery::ApiResource, bool)>> {
    let mut kinds = Vec::new();
    for kind in record.status.iter().flat_map(|s| &s.kinds) {
        let Some(GroupVersionKind { api_version, kind }) = GroupVersionKind::parse(kind) else {
            continue;
        };
        if let Some(r) = resources.get(api_version, kind).await?
            && r.served == Served::Yes
        {
            kinds.push((r.api, r.namespaced));
        }
    }
    Ok(kinds)
}

/// What releasing one object of a record needs to know.
struct Released<'a> {
    /// The record going away.
    record: &'a str,
    cluster: &'a str,
    clusters: &'a std::collections::BTreeMap<String, String>,
    /// The cluster's current record, when its build has the object.
    repoint_to: Option<&'a Activation>,
    /// Whether the record's build was read and has the object. When it
    /// could not be read, an object its account may not touch is left.
    verified: bool,
}

fn object_ref(l: &crate::live::Live) -> ObjectRef {
    ObjectRef::new(
        l.api_version().to_string(),
        l.key.kind.clone(),
        l.key.namespace.clone(),
        l.key.name.clone(),
    )
}

/// Releases `l`: kept (prune disabled), pointed at the current record,
/// left to other Kix clusters, or deleted; into `report`.
async fn release_one(
    client: &Client,
    l: &crate::live::Live,
    released: &Released<'_>,
    report: &mut RetireReport,
) {
    let (name, cluster) = (released.record, released.cluster);
    let reference = object_ref(l);
    let api: Api<DynamicObject> = match &l.key.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &*l.resource),
        None => Api::all_with(client.clone(), &*l.resource),
    };
    let others: BTreeSet<String> = l
        .activations
        .iter()
        .filter(|a| !belongs_to(a, cluster, released.clusters))
        .cloned()
        .collect();
    let annotate = |value: BTreeSet<String>| {
        // Left to other Kix clusters, it loses this cluster's label.
        let still_mine = value
            .iter()
            .any(|a| belongs_to(a, cluster, released.clusters));
        let label = still_mine.then_some(kix_api::labels::CLUSTER_LABEL_VALUE);
        let patch = serde_json::json!({"metadata": {
            "annotations": {ANNOTATION_ACTIVATIONS: kix_api::labels::format_activations(&value)},
            "labels": {kix_api::labels::cluster_label(cluster): label},
        }});
        let api = api.clone();
        let name = l.key.name.clone();
        let manager = kix_api::field_manager(cluster);
        async move {
            api.patch(
                &name,
                &PatchParams {
                    field_manager: Some(manager),
                    ..Default::default()
                },
                &Patch::Merge(&patch),
            )
            .await
            .map(|_| ())
        }
    };
    let result = if l.keep.is_some() {
        report.kept.push(reference.clone());
        Ok(())
    } else if let Some(current) = released.repoint_to {
        let mut value: BTreeSet<String> = l
            .activations
            .iter()
            .filter(|a| *a != name)
            .cloned()
            .collect();
        value.insert(current.name_any());
        let r = annotate(value).await;
        if r.is_ok() {
            report.repointed.push(reference.clone());
        }
        r
    } else if !others.is_empty() {
        let r = annotate(others).await;
        if r.is_ok() {
            report.trimmed.push(reference.clone());
        }
        r
    } else {
        let params = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..Default::default()
        };
        match api.delete(&l.key.name, &params).await {
            Ok(_) => {
                report.deleted.push(reference.clone());
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e),
        }
    };
    match result {
        Ok(()) => {}
        Err(kube::Error::Api(s)) if s.code == 403 && !released.verified => {
            let why = format!(
                "not known to be {name}'s (its build could not be read), and its account may not change it: {}",
                s.message
            );
            report.ignored.push((reference, why));
        }
        Err(err) => report.failed.push((reference, api_message(&err))),
    }
}

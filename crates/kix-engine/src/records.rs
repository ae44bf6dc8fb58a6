//! Activation records and kix's own CRDs: listing, creating, phases.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kix_api::{Activation, ActivationSpec, ActivationStatus, Phase, RECORDS_FIELD_MANAGER};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::error::{EngineError, Result};

/// Every Activation record (all Kix clusters), or none when the CRD is not
/// installed.
pub async fn list_all(client: &Client) -> Result<Vec<Activation>> {
    let api: Api<Activation> = Api::all(client.clone());
    match api.list(&ListParams::default()).await {
        Ok(list) => Ok(list.items),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(vec![]),
        // The kube error kept whole: callers tell an apiserver that does not
        // answer from one that refused (fleet's unreachable, the CLI's hint).
        Err(source) => Err(EngineError::List {
            kind: "activations".into(),
            source,
        }),
    }
}

/// The records of Kix cluster `cluster` (and any record without the
/// `kix.run/cluster` label, whose cluster is its spec's): two LISTs that
/// grow with this cluster's records, not with every Kix cluster's. Pass
/// the result through [`of_cluster`]. A name no label value can hold is
/// listed with every record.
pub async fn list_cluster(client: &Client, cluster: &str) -> Result<Vec<Activation>> {
    let label_value = cluster.len() <= 63
        && cluster.starts_with(|c: char| c.is_ascii_alphanumeric())
        && cluster.ends_with(|c: char| c.is_ascii_alphanumeric())
        && cluster
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !label_value {
        return list_all(client).await;
    }
    let api: Api<Activation> = Api::all(client.clone());
    let mut all = Vec::new();
    let labelled = kix_api::labels::cluster_selector(cluster);
    let unlabelled = format!("!{}", kix_api::labels::LABEL_CLUSTER);
    for selector in [labelled, unlabelled] {
        match api.list(&ListParams::default().labels(&selector)).await {
            Ok(list) => all.extend(list.items),
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(vec![]),
            Err(source) => {
                return Err(EngineError::List {
                    kind: format!("the activations of Kix cluster {cluster:?}"),
                    source,
                });
            }
        }
    }
    Ok(all)
}

/// The records of one Kix cluster, oldest first (by sequence).
pub fn of_cluster<'a>(records: &'a [Activation], cluster: &str) -> Vec<&'a Activation> {
    let mut mine: Vec<&Activation> = records
        .iter()
        .filter(|r| r.cluster_name() == cluster)
        .collect();
    mine.sort_by_key(|r| r.sequence().unwrap_or(0));
    mine
}

/// The cluster's current activation: the newest record that is neither
/// Superseded nor Failed (a Failed deploy never took effect as a whole).
pub fn current<'a>(records: &'a [Activation], cluster: &str) -> Option<&'a Activation> {
    of_cluster(records, cluster)
        .into_iter()
        .rev()
        .find(|r| !matches!(r.phase(), Some(Phase::Superseded | Phase::Failed)))
}

/// Whether every object of `cluster` carries its Kix cluster's label
/// ([`kix_api::labels::cluster_label`]), so a plan lists by it: the newest
/// record a deploy started (any phase past Pending) says so
/// ([`kix_api::labels::CONDITION_OBJECTS_LABELLED`]), or no deploy of the
/// cluster started yet. A record an older kix applied does not say so: the
/// next plan lists every object kix manages, and its deploy labels them.
pub fn objects_labelled(records: &[Activation], cluster: &str) -> bool {
    of_cluster(records, cluster)
        .into_iter()
        .rev()
        .find(|r| !matches!(r.phase(), None | Some(Phase::Pending)))
        .is_none_or(|r| {
            r.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == kix_api::labels::CONDITION_OBJECTS_LABELLED)
            })
        })
}

/// Says on `status` that every object of `cluster` carries its label
/// ([`objects_labelled`]).
pub fn say_objects_labelled(status: &mut kix_api::ActivationStatus, cluster: &str) {
    let type_ = kix_api::labels::CONDITION_OBJECTS_LABELLED;
    if status.conditions.iter().any(|c| c.type_ == type_) {
        return;
    }
    let label = kix_api::labels::cluster_label(cluster);
    status.conditions.push(Condition {
        type_: type_.to_string(),
        status: "True".into(),
        reason: "Labelled".into(),
        message: format!("every object of Kix cluster {cluster} carries the label {label}"),
        last_transition_time: Time(k8s_openapi::jiff::Timestamp::now()),
        observed_generation: None,
    });
}

/// The cluster's applied activation: the newest record that is Active or
/// Degraded, the one whose build is live. A newer record still Pending or
/// Applying is not it yet.
pub fn applied<'a>(records: &'a [Activation], cluster: &str) -> Option<&'a Activation> {
    of_cluster(records, cluster)
        .into_iter()
        .rev()
        .find(|r| r.phase().is_some_and(Phase::is_applied))
}

/// Whether `record` was applied and then replaced by `applied` (the
/// cluster's applied record): Superseded, or Active or Degraded and older
/// than it. The newer deploy marks it Superseded moments after it settles,
/// so a rollback right after a deploy finds it either way.
pub fn was_replaced(record: &Activation, applied: Option<&Activation>) -> bool {
    match record.phase() {
        Some(Phase::Superseded) => true,
        Some(phase) if phase.is_applied() => applied
            .and_then(Activation::sequence)
            .is_some_and(|newer| record.sequence().is_some_and(|seq| seq < newer)),
        _ => false,
    }
}

/// The next free sequence number of a cluster.
pub fn next_sequence(records: &[Activation], cluster: &str) -> u64 {
    of_cluster(records, cluster)
        .iter()
        .filter_map(|r| r.sequence())
        .max()
        .map_or(1, |n| n + 1)
}

/// Does the apiserver have kix's CRDs in the version this kix writes?
pub async fn crds_status(client: &Client) -> Result<CrdState> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut state = CrdState::Current;
    for crd in kix_api::crds() {
        let name = crd.name_any();
        match api.get_opt(&name).await? {
            None => return Ok(CrdState::Missing),
            Some(live) => {
                if kix_api::crd_digest(&live) != kix_api::crd_digest(&crd) {
                    state = CrdState::Outdated;
                }
            }
        }
    }
    Ok(state)
}

pub use crate::plan_value::CrdState;

/// Installs or upgrades kix's CRDs and waits until they are Established.
pub async fn install_crds(client: &Client) -> Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(RECORDS_FIELD_MANAGER).force();
    for crd in kix_api::crds() {
        let name = crd.name_any();
        api.patch(&name, &params, &Patch::Apply(&crd)).await?;
        let established = kube::runtime::wait::await_condition(
            api.clone(),
            &name,
            kube::runtime::wait::conditions::is_crd_established(),
        );
        tokio::time::timeout(std::time::Duration::from_secs(60), established)
            .await
            .map_err(|_| {
                EngineError::Records(format!("CRD {name} did not become Established in 60s"))
            })?
            .map_err(|e| EngineError::Records(format!("waiting for CRD {name}: {e}")))?;
    }
    Ok(())
}

/// Labels and annotations a writer puts on the records it creates (a
/// fleet's rollout, the NixOS host that declared it), beside kix's own
/// labels, which they never replace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordMeta {
    pub labels: std::collections::BTreeMap<String, String>,
    pub annotations: std::collections::BTreeMap<String, String>,
}

impl RecordMeta {
    pub fn apply_to(&self, record: &mut Activation) {
        for (key, value) in &self.labels {
            record
                .labels_mut()
                .entry(key.clone())
                .or_insert_with(|| value.clone());
        }
        if !self.annotations.is_empty() {
            record.annotations_mut().extend(self.annotations.clone());
        }
    }
}

/// Creates the record `<cluster>-<sequence>` in phase Pending.
pub async fn create(
    client: &Client,
    sequence: u64,
    spec: ActivationSpec,
    kinds: Vec<String>,
) -> Result<Activation> {
    create_with_meta(client, sequence, spec, kinds, &RecordMeta::default()).await
}

/// [`create`], with the writer's labels and annotations on the record.
pub async fn create_with_meta(
    client: &Client,
    sequence: u64,
    spec: ActivationSpec,
    kinds: Vec<String>,
    meta: &RecordMeta,
) -> Result<Activation> {
    let api: Api<Activation> = Api::all(client.clone());
    let mut record = Activation::new_record(sequence, spec);
    meta.apply_to(&mut record);
    let created = api.create(&PostParams::default(), &record).await;
    let created = match created {
        Ok(created) => created,
        Err(kube::Error::Api(status)) if status.code == 409 => {
            return Err(name_taken(client, &record.name_any(), record.cluster_name()).await);
        }
        Err(other) => {
            return Err(EngineError::Records(format!(
                "creating activation {}: {other}",
                record.name_any()
            )));
        }
    };
    // The operator may have written it already (a reason it waits).
    update_status(client, &created.name_any(), |status| {
        status.phase.get_or_insert(Phase::Pending);
        status.kinds = kinds.clone();
    })
    .await
}

/// Why the record `name` of Kix cluster `cluster` could not be created
/// because the name is taken: another deploy of the cluster raced this one,
/// or a record of another Kix cluster holds the name (made before kix's
/// admission policy refused such names). Named either way: kix never
/// numbers past a record it cannot tell is its own.
pub async fn name_taken(client: &Client, name: &str, cluster: &str) -> EngineError {
    let api: Api<Activation> = Api::all(client.clone());
    let holder = api.get_opt(name).await.ok().flatten();
    match holder.as_ref().map(Activation::cluster_name) {
        Some(other) if other != cluster => EngineError::Records(squatted(name, cluster, other)),
        _ => EngineError::Records(format!(
            "activation {name} already exists: another deploy of this Kix cluster raced this one"
        )),
    }
}

/// The message for a record name of `cluster` held by a record of `other`.
pub fn squatted(name: &str, cluster: &str, other: &str) -> String {
    format!(
        "activation {name} is Kix cluster {cluster:?}'s next record name, but a record of \
         Kix cluster {other:?} holds it (its kix.run/cluster label or spec.cluster); nothing \
         was changed. Only the platform can remove it: `kubectl delete activation {name}`"
    )
}

/// How many times [`update_status`] reads the record again when it changed
/// between the read and the write, before it gives up saying so.
const STATUS_WRITE_TRIES: usize = 10;

/// The one writer of a record's status. `change` is applied to the status
/// the record has now, read fresh, never to a copy read earlier: a field
/// another step wrote since is kept. The write carries the record's
/// resourceVersion, so a write in between is a conflict, and the change is
/// applied again to what that write left. Nothing is sent when the change
/// changes nothing (a write wakes every watcher of the record). Returns the
/// record as it is after.
pub async fn update_status(
    client: &Client,
    name: &str,
    mut change: impl FnMut(&mut ActivationStatus),
) -> Result<Activation> {
    let api: Api<Activation> = Api::all(client.clone());
    let failed = |e: kube::Error| EngineError::Records(format!("updating activation {name}: {e}"));
    for _ in 0..STATUS_WRITE_TRIES {
        let latest = api.get(name).await.map_err(failed)?;
        let mut status = latest.status.clone().unwrap_or_default();
        change(&mut status);
        let status = as_written(&status);
        if latest.status.as_ref() == Some(&status) {
            return Ok(latest);
        }
        let patch = status_patch(&status, latest.resource_version());
        match api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(written) => return Ok(written),
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(failed(e)),
        }
    }
    Err(EngineError::Records(format!(
        "updating activation {name}: it changed {STATUS_WRITE_TRIES} times while kix wrote          its status"
    )))
}

/// A merge patch that makes the record's status `status` if the record is
/// still at `resource_version`. A merge patch keeps what it does not name,
/// so every status field `status` leaves out (an emptied pendingPrune, a
/// cleared message) is set to null.
fn status_patch(status: &ActivationStatus, resource_version: Option<String>) -> serde_json::Value {
    let mut value = serde_json::to_value(status).unwrap_or_else(|_| json!({}));
    if let Some(map) = value.as_object_mut() {
        for field in status_fields() {
            map.entry(field.clone()).or_insert(serde_json::Value::Null);
        }
    }
    json!({ "metadata": { "resourceVersion": resource_version }, "status": value })
}

/// Copies onto `latest` what a deploy run owns of a record's status: its
/// phase and message, progress, objects and kinds, the prune's and the
/// deletions' lists. Conditions other than Ready, drift counts and the
/// observed generation are the operator's, and stay as `latest` has them.
pub fn take_run_fields(latest: &mut ActivationStatus, run: &ActivationStatus) {
    latest.phase = run.phase;
    latest.message = run.message.clone();
    latest.progress = run.progress;
    latest.pending_prune = run.pending_prune.clone();
    latest.pending_prune_total = run.pending_prune_total;
    latest.objects = run.objects;
    latest.kinds = run.kinds.clone();
    latest.failed_deletions = run.failed_deletions.clone();
    latest.failed_deletions_total = run.failed_deletions_total;
    latest.deleting = run.deleting.clone();
    latest.deleting_total = run.deleting_total;
}

/// `status` as a record keeps it: bounded in size whatever the object count
/// ([`ActivationStatus::bound`]), with its Ready condition following its
/// phase.
pub fn as_written(status: &ActivationStatus) -> ActivationStatus {
    let mut status = with_ready_condition(status);
    status.bound();
    status
}

/// `status` with its Ready condition following its phase; other conditions
/// are kept, and Ready keeps its lastTransitionTime unless it changed.
pub fn with_ready_condition(status: &ActivationStatus) -> ActivationStatus {
    let mut status = status.clone();
    let Some(phase) = status.phase else {
        return status;
    };
    let mut ready = ready_condition(phase, status.message.as_deref());
    if let Some(old) = status
        .conditions
        .iter()
        .find(|c| c.type_ == kix_api::CONDITION_READY)
        && old.status == ready.status
        && old.reason == ready.reason
    {
        ready.last_transition_time = old.last_transition_time.clone();
    }
    status
        .conditions
        .retain(|c| c.type_ != kix_api::CONDITION_READY);
    status.conditions.insert(0, ready);
    status
}

/// The fields of an Activation's status, from the schema of its CRD.
fn status_fields() -> &'static [String] {
    static FIELDS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    FIELDS.get_or_init(|| {
        use kube::CustomResourceExt;
        Activation::crd()
            .spec
            .versions
            .iter()
            .filter_map(|v| v.schema.as_ref()?.open_api_v3_schema.as_ref())
            .filter_map(|schema| schema.properties.as_ref()?.get("status"))
            .filter_map(|status| status.properties.as_ref())
            .flat_map(|props| props.keys().cloned())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect()
    })
}

/// Moves a record to `phase` with a message, keeping the rest of its status.
pub async fn set_phase(
    client: &Client,
    record: &Activation,
    phase: Phase,
    message: Option<String>,
) -> Result<Activation> {
    update_status(client, &record.name_any(), |status| {
        status.phase = Some(phase);
        status.message = message.clone();
    })
    .await
}

fn ready_condition(phase: Phase, message: Option<&str>) -> Condition {
    let (status, reason) = match phase {
        Phase::Active => ("True", "Applied"),
        Phase::Pending => ("False", "Pending"),
        Phase::Applying => ("False", "Applying"),
        Phase::Degraded => ("False", "Degraded"),
        Phase::Failed => ("False", "Failed"),
        Phase::Superseded => ("False", "Superseded"),
    };
    Condition {
        type_: kix_api::CONDITION_READY.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: message.unwrap_or(phase.as_str()).to_string(),
        last_transition_time: Time(k8s_openapi::jiff::Timestamp::now()),
        observed_generation: None,
    }
}

/// Every Activation record (all Kix clusters). Unlike [`list_all`], a missing
/// CRD is an error: for the commands that only read records (`status`,
/// `history`, `rollback`, `gc`), "no CRD" means kix never deployed here.
pub async fn list_all_required(client: &Client) -> Result<Vec<Activation>> {
    let api: Api<Activation> = Api::all(client.clone());
    match api.list(&ListParams::default()).await {
        Ok(list) => Ok(list.items),
        Err(kube::Error::Api(status)) if status.code == 404 => Err(EngineError::Records(format!(
            "{CRDS_MISSING}: listing activations.kix.run answered 404 Not Found"
        ))),
        // The kube error kept whole: callers tell an apiserver that does not
        // answer from one that refused (fleet's unreachable, the CLI's hint).
        Err(source) => Err(EngineError::List {
            kind: "activations".into(),
            source,
        }),
    }
}

/// The words [`list_all_required`] uses when kix's CRDs are not installed
/// (the CLI's hint looks for them).
pub const CRDS_MISSING: &str = "kix's CRDs are not installed in this cluster";

/// What deleting a record did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase", tag = "result")]
pub enum RecordDeletion {
    Deleted,
    /// The record was already gone.
    NotFound,
    /// The record still exists, waiting for these finalizers.
    Pending {
        finalizers: Vec<String>,
    },
}

/// Deletes the Activation record `name`.
pub async fn delete(client: &Client, name: &str) -> Result<RecordDeletion> {
    let api: Api<Activation> = Api::all(client.clone());
    match api.delete(name, &kube::api::DeleteParams::default()).await {
        // Left: the object still exists (finalizers pending); Right: gone.
        Ok(either) => match either.left() {
            Some(still) if !still.finalizers().is_empty() => Ok(RecordDeletion::Pending {
                finalizers: still.finalizers().to_vec(),
            }),
            _ => Ok(RecordDeletion::Deleted),
        },
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(RecordDeletion::NotFound),
        Err(err) => Err(EngineError::Records(format!(
            "deleting activation {name}: {err}"
        ))),
    }
}

/// The PackageInstance records of a Kix cluster (none when the CRD is not
/// installed), sorted by name.
pub async fn package_instances(
    client: &Client,
    cluster: &str,
) -> Result<Vec<kix_api::PackageInstance>> {
    let api: Api<kix_api::PackageInstance> = Api::all(client.clone());
    let params = ListParams::default().labels(&kix_api::labels::cluster_selector(cluster));
    match api.list(&params).await {
        Ok(list) => {
            let mut items = list.items;
            items.sort_by_key(|p| p.name_any());
            Ok(items)
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(vec![]),
        Err(err) => Err(EngineError::Records(format!(
            "listing packageinstances: {err}"
        ))),
    }
}

/// When a record was made: its receipt time.
pub fn recorded_at(record: &Activation) -> chrono::DateTime<chrono::Utc> {
    record.spec.receipt.time
}

/// Whether the apiserver serves Activation records (kix's CRDs installed).
pub async fn crds_installed(client: &Client) -> Result<bool> {
    let api: Api<Activation> = Api::all(client.clone());
    match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        // The kube error kept whole: callers tell an apiserver that does not
        // answer from one that refused (fleet's unreachable, the CLI's hint).
        Err(source) => Err(EngineError::List {
            kind: "activations".into(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(seq: u64, phase: Phase) -> Activation {
        kix_testkit::records::activation("c", seq, "/nix/store/x", phase)
    }

    #[test]
    fn a_record_older_than_the_applied_one_was_replaced_before_it_is_marked_so() {
        let applied = record(3, Phase::Active);
        for (older, replaced) in [
            (Phase::Superseded, true),
            (Phase::Active, true),
            (Phase::Degraded, true),
            (Phase::Failed, false),
            (Phase::Pending, false),
        ] {
            assert_eq!(
                was_replaced(&record(2, older), Some(&applied)),
                replaced,
                "{older:?}"
            );
        }
        assert!(!was_replaced(&applied, Some(&applied)), "the applied one");
        assert!(!was_replaced(&record(4, Phase::Active), Some(&applied)));
        assert!(!was_replaced(&record(2, Phase::Active), None));
        assert!(was_replaced(&record(2, Phase::Superseded), None));
    }

    #[test]
    fn status_fields_come_from_the_crd_schema() {
        let fields = status_fields();
        for field in [
            "phase",
            "message",
            "pendingPrune",
            "failedDeletions",
            "kinds",
        ] {
            assert!(fields.iter().any(|f| f == field), "{field}: {fields:?}");
        }
    }
}

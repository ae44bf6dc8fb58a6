//! Jobs run once per build: a Job kix applied that completed is
//! remembered on the Activation record (annotation
//! [`ANNOTATION_COMPLETED_JOBS`], each Job's digest), so that a Job the TTL
//! controller removed after it finished is neither created again (plan:
//! unchanged, note [`NOTE_COMPLETED`]) nor waited for, and counts as
//! healthy. A changed Job (another digest) runs again, as Helm and Argo CD
//! run hooks once per release.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use kix_api::Activation;
use kix_manifest::ObjectKey;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};

use crate::plan_object::Action;
use crate::plan_value::Plan;

/// On an Activation record: `{"<namespace>/<name>": "<digest>"}` of the
/// build's Jobs that completed.
pub const ANNOTATION_COMPLETED_JOBS: &str = "kix.run/completed-jobs";

/// The plan's note on a completed Job it leaves alone.
pub const NOTE_COMPLETED: &str = "completed";

pub use crate::gates::CompletedJobs;

pub fn is_job(key: &ObjectKey) -> bool {
    key.group_kind() == kix_manifest::group_kind::JOB
}

/// What a record remembers (nothing when it has no or a garbled annotation).
pub fn of_record(record: &Activation) -> Option<CompletedJobs> {
    let text = record
        .metadata
        .annotations
        .as_ref()?
        .get(ANNOTATION_COMPLETED_JOBS)?;
    serde_json::from_str(text).ok()
}

/// What the newest record of the cluster that remembers anything remembers
/// (the record a deploy or the operator is applying has not written it yet).
pub fn of_cluster(records: &[Activation], cluster: &str) -> CompletedJobs {
    crate::records::of_cluster(records, cluster)
        .into_iter()
        .rev()
        .find_map(of_record)
        .unwrap_or_default()
}

/// Whether the plan leaves this object alone as a completed Job.
pub fn is_completed(action: Action, note: Option<&str>) -> bool {
    action == Action::Unchanged && note == Some(NOTE_COMPLETED)
}

/// After a deploy's waves: remembers on `record` the plan's Jobs that
/// completed: those left alone as completed, every Job but a suspended one
/// when every group became healthy (a healthy Job is a complete one, which
/// its TTL may already have removed), else those a wait saw complete
/// (`seen_complete`, entries `namespace/name`) and those found Complete now.
/// Writes nothing for a build without Jobs, or when the record already
/// says the same.
pub async fn remember(
    client: &Client,
    plan: &Plan,
    record: &str,
    all_healthy: bool,
    seen_complete: &[String],
) -> Result<(), kube::Error> {
    let hooks: std::collections::BTreeSet<&ObjectKey> = plan
        .desired
        .iter()
        .filter(|d| d.hook.is_some())
        .map(|d| &d.key)
        .collect();
    let planned: BTreeMap<&ObjectKey, (Action, Option<&str>)> = plan
        .packages
        .iter()
        .flat_map(|p| &p.objects)
        .filter(|p| is_job(&p.key) || hooks.contains(&p.key))
        .map(|p| (&p.key, (p.action, p.note.as_deref())))
        .collect();
    if planned.is_empty() {
        return Ok(());
    }
    let mut completed = CompletedJobs::new();
    let remembered = plan.desired.iter().filter(|d| planned.contains_key(&d.key));
    for d in remembered {
        let left_alone = planned
            .get(&d.key)
            .is_some_and(|(action, note)| is_completed(*action, *note));
        let seen = seen_complete.contains(&crate::gates::run_entry(&d.key));
        // A hook succeeded when its phase saw it so: one the deploy did not
        // run (another event's) is not remembered as run.
        let done = if d.hook.is_some() {
            left_alone || seen
        } else {
            let suspended =
                d.manifest().pointer("/spec/suspend") == Some(&serde_json::Value::Bool(true));
            left_alone
                || (all_healthy && !suspended)
                || (!all_healthy && (seen || job_complete(client, &d.key).await?))
        };
        if done {
            completed.insert(crate::gates::run_entry(&d.key), d.digest.clone());
        }
    }
    let records: Api<Activation> = Api::all(client.clone());
    let current = records.get_opt(record).await?;
    if current.as_ref().and_then(of_record).as_ref() == Some(&completed) {
        return Ok(());
    }
    let text = serde_json::to_string(&completed).unwrap_or_default();
    let patch = serde_json::json!({"metadata": {"annotations": {ANNOTATION_COMPLETED_JOBS: text}}});
    records
        .patch(record, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Whether the live Job has `Complete=True`.
async fn job_complete(client: &Client, key: &ObjectKey) -> Result<bool, kube::Error> {
    let api: Api<Job> = match &key.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::default_namespaced(client.clone()),
    };
    let job = api.get_opt(&key.name).await?;
    Ok(job
        .and_then(|j| j.status)
        .and_then(|s| s.conditions)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Complete" && c.status == "True")
        }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_record_that_remembers_is_read() {
        let record = |seq: u64, completed: Option<&str>| {
            let spec = kix_api::ActivationSpec {
                cluster: "c".into(),
                source: kix_api::Source {
                    path: format!("/nix/store/{seq:0>32}-x"),
                    flake: None,
                    revision: None,
                    cache: None,
                    signed_by: None,
                },
                receipt: kix_api::Receipt {
                    user: "u".into(),
                    host: "h".into(),
                    kix_version: "0".into(),
                    time: chrono::DateTime::UNIX_EPOCH,
                    plan_digest: String::new(),
                    counts: kix_api::Counts::default(),
                    accepted: Default::default(),
                    rollback_from: None,
                    accepted_deletions: None,
                    saved_plan: false,
                },
                engine: kix_api::Engine::Local,
                service_account: None,
            };
            let mut r = Activation::new_record(seq, spec);
            if let Some(text) = completed {
                r.metadata.annotations =
                    Some([(ANNOTATION_COMPLETED_JOBS.to_owned(), text.to_owned())].into());
            }
            r
        };
        let records = vec![
            record(1, Some(r#"{"web/create":"old"}"#)),
            record(2, Some(r#"{"web/create":"new"}"#)),
            record(3, None),
        ];
        assert_eq!(
            of_cluster(&records, "c")
                .get("web/create")
                .map(String::as_str),
            Some("new")
        );
        assert!(of_cluster(&records, "other").is_empty());
    }
}

//! Deletions that cannot hurt, as a user meets them: `kix deploy --yes` of a
//! build that drops most objects refuses before any DELETE and says how to
//! proceed; an object a foreign finalizer holds is shown as deleting by the
//! deploy and `kix status`; through the operator it is counted once, never
//! deleted in a loop, reported on the record and in Events, and gone from
//! the record when its finalizer is removed; the operator holds a prune over
//! the deletion budget while Active.

mod cli_support;
mod common;

use std::time::{Duration, Instant};

use cli_support::Kix;
use kix_api::Activation;
use kix_testkit::audit;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

const HOLD: &str = "example.com/hold";

fn configmaps(names: impl IntoIterator<Item = String>) -> String {
    names
        .into_iter()
        .map(|n| cli_support::configmap(&n, "1"))
        .collect()
}

fn numbered(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("cm-{i:02}")).collect()
}

/// DELETE requests on ConfigMaps of `namespace` since `mark`, by anyone.
fn configmap_deletes(mark: audit::Mark, namespace: &str) -> Vec<audit::Request> {
    audit::since(mark)
        .expect("audit log")
        .into_iter()
        .filter(|r| {
            r.verb == "delete"
                && r.resource == "configmaps"
                && r.namespace.as_deref() == Some(namespace)
        })
        .collect()
}

fn cms(kix: &Kix) -> Api<DynamicObject> {
    Api::namespaced_with(
        kix.env.client.clone(),
        kix.ns(),
        &kube::discovery::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
    )
}

async fn set_finalizers(kix: &Kix, name: &str, finalizers: serde_json::Value) {
    let patch = json!({"metadata": {"finalizers": finalizers}});
    cms(kix)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch finalizers");
}

#[tokio::test]
async fn deploy_yes_of_a_build_dropping_39_of_40_objects_refuses_and_says_how_to_proceed() {
    let kix = Kix::new("cli-budget").await;
    let all = kix.tree("all", &configmaps(numbered(40)), json!({}));
    kix.deploy(&all, &[]).ok();

    let one = kix.tree("one", &configmaps(numbered(1)), json!({}));
    let mark = audit::mark().expect("mark");
    let run = kix.deploy(&one, &[]).code(1);
    assert!(
        run.stdout.contains("deletion budget exceeded"),
        "the plan says so up front:\n{}",
        run.stdout
    );
    assert!(
        run.stderr.contains("--max-deletions 39"),
        "the error says how to proceed:\n{}",
        run.stderr
    );
    assert!(configmap_deletes(mark, kix.ns()).is_empty());
    assert_eq!(kix.records().await.len(), 1, "no record was written");

    // `kix plan` shows the same, and changes nothing.
    let run = kix
        .kix(&[
            "plan",
            kix.cluster(),
            "--path",
            one.to_str().expect("utf-8"),
        ])
        .ok();
    assert!(
        run.stdout.contains("deletion budget exceeded"),
        "{}",
        run.stdout
    );

    let run = kix.deploy(&one, &["--max-deletions", "39"]).ok();
    assert!(run.stdout.contains("39 pruned"), "{}", run.stdout);
    assert_eq!(configmap_deletes(mark, kix.ns()).len(), 39);
    let records = kix.records().await;
    assert_eq!(
        records.last().map(|r| r.spec.receipt.accepted_deletions),
        Some(Some(39))
    );
}

#[tokio::test]
async fn deploy_and_status_show_an_object_a_foreign_finalizer_holds_as_deleting() {
    let kix = Kix::new("cli-held").await;
    let both = kix.tree(
        "both",
        &configmaps(["keep".into(), "held".into()]),
        json!({}),
    );
    kix.deploy(&both, &[]).ok();
    set_finalizers(&kix, "held", json!([HOLD])).await;

    let keep = kix.tree("keep", &configmaps(["keep".into()]), json!({}));
    let run = kix.deploy(&keep, &[]).ok();
    assert!(
        run.stdout.contains("0 pruned, 1 being deleted"),
        "{}\n{}",
        run.stdout,
        run.stderr
    );
    let run = kix.kix(&["status", kix.cluster()]).ok();
    assert!(
        run.stdout.contains("Deleting") && run.stdout.contains(HOLD),
        "status shows it with its finalizer:\n{}",
        run.stdout
    );
    let run = kix
        .kix(&[
            "plan",
            kix.cluster(),
            "--path",
            keep.to_str().expect("utf-8"),
        ])
        .ok();
    assert!(
        run.stdout.contains("deleting") && run.stdout.contains("waits for example.com/hold"),
        "{}",
        run.stdout
    );
    set_finalizers(&kix, "held", serde_json::Value::Null).await;
}

/// Requests of `operator` since `mark` (its User-Agent names its pid).
fn operator_requests(operator: &common::Operator, mark: audit::Mark) -> Vec<audit::Request> {
    let pid = format!("-{}", operator.child.id());
    audit::since(mark)
        .expect("audit log")
        .into_iter()
        .filter(|r| r.user_agent.starts_with("kix-operator/") && r.user_agent.ends_with(&pid))
        .collect()
}

fn start_operator(kix: &Kix) -> common::Operator {
    common::Operator::start(
        &kix_testkit::kubeconfig_path(),
        &[kix.cluster()],
        kix.ns(),
        &kix_testkit::unique_name("lease"),
        kix.dir.path().join("operator.log"),
        None,
    )
}

fn deploy_operator(kix: &Kix, tree: &std::path::Path, extra: &[&str]) -> cli_support::Run {
    let path = tree.to_str().expect("utf-8");
    let mut args = vec![
        "deploy",
        kix.cluster(),
        "--path",
        path,
        "--operator",
        "--yes",
    ];
    args.extend_from_slice(extra);
    kix.kix(&args)
}

async fn events_of(kix: &Kix, record: &str, reason: &str) -> Vec<String> {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::all(kix.env.client.clone());
    api.list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(record))
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.note)
        .collect()
}

async fn record(kix: &Kix, name: &str) -> Activation {
    Api::<Activation>::all(kix.env.client.clone())
        .get(name)
        .await
        .expect("record")
}

#[tokio::test]
async fn the_operator_counts_an_object_held_by_a_foreign_finalizer_once_and_does_not_loop() {
    let kix = Kix::new("op-held").await;
    let operator = start_operator(&kix);
    let both = kix.tree(
        "both",
        &configmaps(["keep".into(), "held".into()]),
        json!({}),
    );
    deploy_operator(&kix, &both, &[]).ok();
    set_finalizers(&kix, "held", json!([HOLD])).await;

    let keep = kix.tree("keep", &configmaps(["keep".into()]), json!({}));
    let mark = audit::mark().expect("mark");
    deploy_operator(&kix, &keep, &[]).ok();
    let name = kix.name(2);

    // Quiet: over 30 s (three resyncs of the test operator), no DELETE
    // again, no status patch, and a bounded request rate. The loop this
    // replaces patched the status 4.5 times a second.
    let settled = Instant::now();
    let quiet = audit::mark().expect("mark");
    tokio::time::sleep(Duration::from_secs(30)).await;
    let requests = operator_requests(&operator, quiet);
    let status_patches = requests
        .iter()
        .filter(|r| r.resource == "activations" && r.is_write())
        .count();
    let deletes = configmap_deletes(mark, kix.ns());
    let rate = requests.len() as f64 / settled.elapsed().as_secs_f64();
    eprintln!(
        "operator idle with a held object: {} requests in {:.0}s ({rate:.2}/s), {status_patches} record writes",
        requests.len(),
        settled.elapsed().as_secs_f64()
    );
    assert_eq!(deletes.len(), 1, "one DELETE, never repeated");
    assert_eq!(status_patches, 0, "no status write without a change");
    assert!(rate <= 2.0, "{rate:.2} requests/s");

    let status = record(&kix, &name).await.status.expect("status");
    assert_eq!(status.progress.map(|p| p.pruned), Some(0), "not pruned");
    assert_eq!(status.deleting.len(), 1, "{status:?}");
    assert_eq!(status.deleting[0].object.name, "held");
    assert_eq!(status.deleting[0].finalizers, [HOLD]);
    assert!(status.drift.is_none_or(|d| d.corrected == 0), "not drift");
    let deleting = events_of(&kix, &name, "Deleting").await;
    assert_eq!(deleting.len(), 1, "{deleting:?}");
    assert!(deleting[0].contains(HOLD), "{deleting:?}");

    // The finalizer removed: gone, and the record's set empties.
    set_finalizers(&kix, "held", serde_json::Value::Null).await;
    common::poll(
        "the record's deleting set empties",
        Duration::from_secs(30),
        Duration::from_millis(500),
        || async {
            record(&kix, &name)
                .await
                .status
                .is_some_and(|s| s.deleting.is_empty())
                .then_some(())
        },
    )
    .await;
    assert_eq!(events_of(&kix, &name, "Deleted").await.len(), 1);
}

/// A ConfigMap labelled and annotated as `record`'s, as a restore from a
/// backup brings back objects a build has since dropped.
fn restored(kix: &Kix, name: &str, record: &str) -> DynamicObject {
    let owner = kix_api::owner_value("", "ConfigMap", Some(kix.ns()), name);
    // As the first build's deploy labelled it: a plan lists the Kix
    // cluster's objects by this label.
    let cluster_label = kix_api::labels::cluster_label(kix.cluster());
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "labels": {
                kix_api::LABEL_MANAGED_BY: kix_api::MANAGED_BY_VALUE,
                kix_api::LABEL_OWNER: owner,
                kix_api::LABEL_PACKAGE: "web",
                cluster_label: kix_api::labels::CLUSTER_LABEL_VALUE,
            },
            "annotations": {kix_api::ANNOTATION_ACTIVATIONS: record},
        },
        "data": {"v": "restored"},
    }))
    .expect("object")
}

#[tokio::test]
async fn the_operator_holds_a_prune_over_the_deletion_budget_while_active() {
    let kix = Kix::new("op-budget").await;
    let operator = start_operator(&kix);
    // The 20 were the first build's; the second dropped them.
    let all = std::iter::once("keep".to_string()).chain(numbered(20));
    let twenty_one = kix.tree("all", &configmaps(all), json!({}));
    deploy_operator(&kix, &twenty_one, &[]).ok();
    let one = kix.tree("one", &configmaps(["keep".into()]), json!({}));
    deploy_operator(&kix, &one, &["--accept-deletions"]).ok();
    // The current record accepted no deletion.
    let changed = kix.tree("changed", &cli_support::configmap("keep", "2"), json!({}));
    deploy_operator(&kix, &changed, &[]).ok();
    let name = kix.name(3);

    // Restored from a backup while the operator is down (so it meets all
    // 20 at once), claiming the record whose build had them.
    drop(operator);
    let mark = audit::mark().expect("mark");
    for n in numbered(20) {
        cms(&kix)
            .create(&PostParams::default(), &restored(&kix, &n, &kix.name(1)))
            .await
            .expect("create");
    }
    let _operator = start_operator(&kix);
    common::poll(
        "the record's DeletionBudgetExceeded condition",
        Duration::from_secs(40),
        Duration::from_millis(500),
        || async {
            let status = record(&kix, &name).await.status?;
            status
                .conditions
                .iter()
                .find(|c| c.type_ == "DeletionBudgetExceeded")
                .map(|c| c.message.clone())
        },
    )
    .await;
    let events = events_of(&kix, &name, "DeletionBudgetExceeded").await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(events[0].contains("deletes 20 of the 21"), "{events:?}");
    // It waits: nothing deleted, over a resync.
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert!(configmap_deletes(mark, kix.ns()).is_empty());
    assert_eq!(
        events_of(&kix, &name, "DeletionBudgetExceeded").await.len(),
        1
    );

    // With consent (a new deploy accepting the deletions), they go.
    let run = deploy_operator(&kix, &one, &[]);
    assert_eq!(
        run.code,
        Some(1),
        "refused without consent:\n{}",
        run.stderr
    );
    deploy_operator(&kix, &one, &["--accept-deletions"]).ok();
    assert_eq!(configmap_deletes(mark, kix.ns()).len(), 20);
    let accepted = record(&kix, &kix.name(4))
        .await
        .spec
        .receipt
        .accepted_deletions;
    assert_eq!(accepted, Some(20));
}

#[tokio::test]
async fn the_operator_backs_off_a_drift_fight_and_names_the_other_field_manager() {
    let kix = Kix::new("op-fight").await;
    let operator = start_operator(&kix);
    let tree = kix.tree("fought", &configmaps(["fought".into()]), json!({}));
    deploy_operator(&kix, &tree, &[]).ok();
    let name = kix.name(1);

    // Another controller sets the value back every half second for 30 s.
    let mark = audit::mark().expect("mark");
    let params = PatchParams {
        field_manager: Some("fighter".into()),
        ..PatchParams::default()
    };
    let started = Instant::now();
    let mut rounds = 0;
    while started.elapsed() < Duration::from_secs(30) {
        let patch = json!({"data": {"v": format!("theirs-{rounds}")}});
        cms(&kix)
            .patch("fought", &params, &Patch::Merge(&patch))
            .await
            .expect("fight");
        rounds += 1;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let corrections = operator_requests(&operator, mark)
        .into_iter()
        .filter(|r| {
            // A correction ends in a forced apply (the unforced one before
            // it is refused: the fighter holds the field).
            r.verb == "patch"
                && r.resource == "configmaps"
                && r.name.as_deref() == Some("fought")
                && !r.dry_run
                && r.uri.contains("force=true")
        })
        .count();
    eprintln!("{rounds} changes by the fighter, {corrections} corrections by the operator");
    assert!(
        corrections >= 3,
        "it corrected before backing off: {corrections}"
    );
    assert!(
        corrections <= 5,
        "backed off after 3 corrections (one every 60 s at most after that), not {corrections} of {rounds}"
    );
    let status = record(&kix, &name).await.status.expect("status");
    let fight = status
        .conditions
        .iter()
        .find(|c| c.type_ == "DriftFight")
        .unwrap_or_else(|| panic!("a DriftFight condition: {:?}", status.conditions));
    assert!(
        fight.message.contains("fought") && fight.message.contains("\"fighter\""),
        "{}",
        fight.message
    );
    let events = events_of(&kix, &name, "DriftFight").await;
    assert!(
        events.iter().any(|e| e.contains("\"fighter\"")),
        "{events:?}"
    );
}

#[tokio::test]
async fn gc_refuses_a_mass_deletion_before_deleting_anything() {
    let kix = Kix::new("gc-budget").await;
    let all = kix.tree("all", &configmaps(numbered(40)), json!({}));
    kix.deploy(&all, &[]).ok();
    // Not pruned: the 39 objects stay, named only by the first record.
    let one = kix.tree("one", &configmaps(numbered(1)), json!({}));
    kix.deploy(&one, &["--prune=false"]).ok();

    let mark = audit::mark().expect("mark");
    let run = kix
        .kix(&["gc", kix.cluster(), "--keep", "0", "--yes"])
        .code(1);
    assert!(
        run.stderr.contains("deletion budget") && run.stderr.contains("--max-deletions 39"),
        "{}",
        run.stderr
    );
    assert!(configmap_deletes(mark, kix.ns()).is_empty());
    assert_eq!(kix.records().await.len(), 2, "no record retired");

    kix.kix(&[
        "gc",
        kix.cluster(),
        "--keep",
        "0",
        "--yes",
        "--max-deletions",
        "39",
    ])
    .ok();
    assert_eq!(configmap_deletes(mark, kix.ns()).len(), 39);
}

/// A rollback is a deploy of an older build: the deletions it plans are
/// weighed against the budget, in both modes, before anything changes.
#[tokio::test]
async fn rollback_over_the_deletion_budget_refuses_in_both_modes() {
    let kix = Kix::new("rb-budget").await;
    let one = kix.tree("one", &configmaps(numbered(1)), json!({}));
    kix.deploy(&one, &[]).ok();
    let all = kix.tree("all", &configmaps(numbered(40)), json!({}));
    kix.deploy(&all, &[]).ok();

    let mark = audit::mark().expect("mark");
    for mode in [&[][..], &["--operator"][..]] {
        let mut args = vec!["rollback", kix.cluster(), "--yes"];
        args.extend_from_slice(mode);
        let run = kix.kix(&args).code(1);
        assert!(
            run.stderr.contains("deletion budget") && run.stderr.contains("--max-deletions 39"),
            "{mode:?}: {}",
            run.stderr
        );
    }
    assert!(configmap_deletes(mark, kix.ns()).is_empty());
    assert_eq!(kix.records().await.len(), 2, "no record written");

    kix.kix(&["rollback", kix.cluster(), "--yes", "--max-deletions", "39"])
        .ok();
    assert_eq!(configmap_deletes(mark, kix.ns()).len(), 39);
}

/// `gc --operator` weighs the objects the records' finalizers would delete
/// against the budget before it deletes a record.
#[tokio::test]
async fn gc_through_the_operator_refuses_a_mass_deletion_before_deleting_a_record() {
    let kix = Kix::new("gc-op-budget").await;
    let all = kix.tree("all", &configmaps(numbered(40)), json!({}));
    kix.deploy(&all, &[]).ok();
    let one = kix.tree("one", &configmaps(numbered(1)), json!({}));
    kix.deploy(&one, &["--prune=false"]).ok();

    let mark = audit::mark().expect("mark");
    let run = kix
        .kix(&["gc", kix.cluster(), "--keep", "0", "--yes", "--operator"])
        .code(1);
    assert!(
        run.stderr.contains("deletion budget") && run.stderr.contains("--max-deletions 39"),
        "{}",
        run.stderr
    );
    assert!(configmap_deletes(mark, kix.ns()).is_empty());
    let activation_deletes = audit::since(mark)
        .expect("audit log")
        .into_iter()
        .filter(|r| {
            r.verb == "delete"
                && r.resource == "activations"
                && r.name
                    .as_deref()
                    .is_some_and(|n| n.starts_with(&format!("{}-", kix.cluster())))
        })
        .count();
    assert_eq!(activation_deletes, 0, "a record was deleted");
    assert_eq!(kix.records().await.len(), 2, "no record retired");
}

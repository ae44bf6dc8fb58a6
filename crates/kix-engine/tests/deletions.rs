//! Deletions that cannot hurt, against the real control plane: the deletion
//! budget refuses a mass deletion before any DELETE; an object a foreign
//! finalizer holds is "deleting" (never counted as pruned, never deleted
//! again) until it is gone; a deletion an admission policy denies is kept
//! with its reason and retried; a PVC held by `kubernetes.io/pvc-protection`.

mod common;

use std::time::Duration;

use common::*;
use kix_api::Phase;
use kix_engine::EngineError;
use kix_engine::budget::DeletionConsent;
use kix_engine::deploy::DeployOptions;
use kix_engine::plan::{Action, PlanOptions};
use kix_testkit::audit;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

const HOLD: &str = "example.com/hold";

fn prune() -> PlanOptions {
    PlanOptions {
        prune: true,
        ..PlanOptions::default()
    }
}

fn configmaps(count: usize) -> Vec<String> {
    (0..count)
        .map(|i| configmap(&format!("cm-{i:02}"), &[("v", "1")]))
        .collect()
}

/// The same tree as [`Kit::simple`] with `settings` in its kix.json.
fn with_settings(kit: &Kit, resources: &[String], settings: serde_json::Value) -> Built {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().join("kix-test-build");
    write_tree(&root, kit.cluster(), kit.ns(), &[Pkg::new("a", resources)]);
    std::fs::write(
        root.join("kix.json"),
        json!({"format": 1, "cluster": kit.cluster(), "packages": ["a"], "settings": settings})
            .to_string(),
    )
    .expect("kix.json");
    let path = kix_nix::add_to_store(&root).expect("nix-store --add");
    let build = kix_manifest::read_tree(
        std::path::Path::new(path.as_str()),
        &kix_manifest::ReadOptions::default(),
    )
    .expect("read tree");
    Built {
        path: path.to_string(),
        build,
    }
}

fn deletes(requests: &[audit::Request]) -> Vec<&audit::Request> {
    requests
        .iter()
        .filter(|r| r.verb == "delete" && !r.dry_run)
        .collect()
}

/// Adds a finalizer no controller will remove (another manager's write).
async fn hold(kit: &Kit, name: &str) {
    let api: Api<DynamicObject> = Api::namespaced_with(
        kit.env.client.clone(),
        kit.ns(),
        &resource("v1", "ConfigMap"),
    );
    let patch = json!({"metadata": {"finalizers": [HOLD]}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("add finalizer");
}

async fn release(kit: &Kit, name: &str) {
    let api: Api<DynamicObject> = Api::namespaced_with(
        kit.env.client.clone(),
        kit.ns(),
        &resource("v1", "ConfigMap"),
    );
    let patch = json!({"metadata": {"finalizers": null}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("remove finalizer");
}

#[tokio::test]
async fn a_build_dropping_39_of_40_objects_is_refused_before_any_deletion() {
    let kit = Kit::new("budget-refused").await;
    kit.deploy(&kit.simple(&configmaps(40))).await;

    let dropped = kit.simple(&configmaps(1));
    let plan = kit.plan(&dropped, &prune()).await;
    assert_eq!(plan.counts.delete, 39);
    let check = plan.deletion_budget;
    assert!(check.is_exceeded(), "{check:?}");
    assert_eq!((check.owned, check.allowed), (40, 10), "{check:?}");

    // The default: refused, nothing written, no DELETE sent.
    let mark = audit::mark().expect("mark");
    let err = expect_err(kit.try_deploy(&dropped, &kit.options()).await);
    assert!(
        matches!(&err, EngineError::DeletionBudget(m) if m.contains("--max-deletions 39")),
        "{err}"
    );
    let writes = kit.writes(mark);
    assert!(writes.is_empty(), "writes:\n{}", describe(&writes));
    assert!(kit.get("v1", "ConfigMap", "cm-39").await.is_some());

    // Consent below the plan's count is not consent.
    let mut options = kit.options();
    options.deletions = DeletionConsent::UpTo(38);
    let err = expect_err(kit.try_deploy(&dropped, &options).await);
    assert!(matches!(err, EngineError::DeletionBudget(_)), "{err}");
    assert!(deletes(&kit.requests(mark)).is_empty());

    // With consent: deleted, and the record says what was accepted.
    options.deletions = DeletionConsent::UpTo(39);
    let outcome = kit.deploy_opts(&dropped, &options).await;
    assert_eq!(outcome.pruned, 39, "{outcome:?}");
    let record = kit
        .record(outcome.activation.as_deref().expect("record"))
        .await;
    assert_eq!(record.spec.receipt.accepted_deletions, Some(39));
    kit.cleanup().await;
}

#[tokio::test]
async fn the_budget_is_a_setting_and_small_deletions_need_no_consent() {
    let kit = Kit::new("budget-settings").await;
    kit.deploy(&kit.simple(&configmaps(40))).await;
    // 10 of 40: within the default floor.
    let outcome = kit.deploy(&kit.simple(&configmaps(30))).await;
    assert_eq!(outcome.pruned, 10, "{outcome:?}");
    let record = kit.record(outcome.activation.as_deref().expect("r")).await;
    assert_eq!(record.spec.receipt.accepted_deletions, None);

    // A cluster that allows everything: 29 of 30 without a flag.
    let open = with_settings(
        &kit,
        &configmaps(1),
        json!({"deletionBudget": {"percent": 100, "floor": 0}}),
    );
    assert!(
        !kit.plan(&open, &prune())
            .await
            .deletion_budget
            .is_exceeded()
    );
    let outcome = kit.deploy(&open).await;
    assert_eq!(outcome.pruned, 29, "{outcome:?}");

    // A strict one: a single deletion needs consent.
    let strict_keep = with_settings(
        &kit,
        &configmaps(1),
        json!({"deletionBudget": {"percent": 0, "floor": 0}}),
    );
    kit.deploy_opts(&strict_keep, &kit.options()).await;
    let strict = with_settings(
        &kit,
        &[],
        json!({"deletionBudget": {"percent": 0, "floor": 0}}),
    );
    let mut options = kit.options();
    options.allow_empty = true;
    let err = expect_err(kit.try_deploy(&strict, &options).await);
    assert!(matches!(err, EngineError::DeletionBudget(_)), "{err}");
    kit.cleanup().await;
}

#[test]
fn a_bad_budget_setting_names_the_file_and_the_setting() {
    for (settings, expected) in [
        (
            json!({"deletionBudget": {"percent": 101}}),
            "settings.deletionBudget.percent must be an integer from 0 to 100",
        ),
        (
            json!({"deletionBudget": {"percent": -1}}),
            "settings.deletionBudget.percent",
        ),
        (
            json!({"deletionBudget": {"floor": "ten"}}),
            "settings.deletionBudget.floor",
        ),
        (
            json!({"deletionBudget": {"share": 5}}),
            "unknown field \"share\"",
        ),
        (
            json!({"deletionBudget": 5}),
            "settings.deletionBudget must be an object",
        ),
    ] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("t");
        write_tree(&root, "c", "ns", &[Pkg::new("a", &[])]);
        std::fs::write(
            root.join("kix.json"),
            json!({"format": 1, "cluster": "c", "packages": ["a"], "settings": settings})
                .to_string(),
        )
        .expect("kix.json");
        let options = kix_manifest::ReadOptions {
            store_dir: tmp.path().to_path_buf(),
            ..kix_manifest::ReadOptions::default()
        };
        let err = kix_manifest::read_tree(&root, &options)
            .expect_err("a bad deletionBudget is refused")
            .to_string();
        assert!(
            err.contains("kix.json") && err.contains(expected),
            "{settings}: {err}"
        );
    }
}

#[tokio::test]
async fn an_object_held_by_a_foreign_finalizer_is_deleting_not_pruned_nor_deleted_again() {
    let kit = Kit::new("held").await;
    kit.deploy(&kit.simple(&[
        configmap("keep", &[("v", "1")]),
        configmap("held", &[("v", "1")]),
    ]))
    .await;
    hold(&kit, "held").await;

    let dropped = kit.simple(&[configmap("keep", &[("v", "1")])]);
    let mark = audit::mark().expect("mark");
    let outcome = kit.deploy(&dropped).await;
    assert_eq!(outcome.pruned, 0, "held is not pruned: {outcome:?}");
    assert_eq!(outcome.deleting.len(), 1, "{outcome:?}");
    assert_eq!(outcome.deleting[0].object.name, "held");
    assert_eq!(outcome.deleting[0].finalizers, [HOLD]);
    assert!(outcome.deleting[0].since.is_some());
    assert!(outcome.message.contains("1 being deleted"), "{outcome:?}");
    assert_eq!(deletes(&kit.requests(mark)).len(), 1);
    let record = kit.record(outcome.activation.as_deref().expect("r")).await;
    let status = record.status.clone().expect("status");
    assert_eq!(status.deleting, outcome.deleting, "the record lists it");
    assert_eq!(status.progress.map(|p| p.pruned), Some(0));

    // Planned again: "deleting", with its finalizer; no change to make, no
    // DELETE sent again, however often.
    for _ in 0..3 {
        let plan = kit.plan(&dropped, &prune()).await;
        let held = plan
            .prune
            .iter()
            .find(|o| o.key.name == "held")
            .expect("held is planned");
        assert_eq!(held.action, Action::Deleting);
        assert_eq!(
            held.deletion.as_ref().map(|d| d.finalizers.clone()),
            Some(vec![HOLD.to_string()])
        );
        assert_eq!(plan.counts.delete, 0);
        assert!(!plan.has_changes());
        let mark = audit::mark().expect("mark");
        let again = kit.deploy(&dropped).await;
        assert!(again.no_op, "{again:?}");
        assert_eq!(again.deleting.len(), 1, "still shown: {again:?}");
        let writes = kit.writes(mark);
        assert!(writes.is_empty(), "{}", describe(&writes));
    }

    // Its finalizer removed: gone, and the plan no longer has it.
    release(&kit, "held").await;
    eventually("held is gone", Duration::from_secs(20), || async {
        kit.get("v1", "ConfigMap", "held")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    let plan = kit.plan(&dropped, &prune()).await;
    assert!(plan.prune.is_empty(), "{:?}", plan.prune);
    kit.cleanup().await;
}

/// A ValidatingAdmissionPolicy (CEL, no webhook server) that denies the
/// DELETE of ConfigMaps labelled `kix-test/guarded` in `namespace`.
async fn deny_deletes(kit: &Kit, name: &str) {
    let policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["DELETE"], "resources": ["configmaps"]
            }]},
            "validations": [{
                "expression": "!has(oldObject.metadata.labels) || !('kix-test/guarded' in oldObject.metadata.labels)",
                "message": "guarded ConfigMaps are not deleted"
            }]
        }
    });
    let binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {
                "kubernetes.io/metadata.name": kit.ns()
            }}}
        }
    });
    for (kind, object) in [
        ("ValidatingAdmissionPolicy", policy),
        ("ValidatingAdmissionPolicyBinding", binding),
    ] {
        let api: Api<DynamicObject> = Api::all_with(
            kit.env.client.clone(),
            &resource("admissionregistration.k8s.io/v1", kind),
        );
        let object: DynamicObject = serde_json::from_value(object).expect("object");
        api.create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("create {kind}: {e}"));
    }
}

async fn allow_deletes(kit: &Kit, name: &str) {
    for kind in [
        "ValidatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicy",
    ] {
        let api: Api<DynamicObject> = Api::all_with(
            kit.env.client.clone(),
            &resource("admissionregistration.k8s.io/v1", kind),
        );
        let _ = api.delete(name, &Default::default()).await;
    }
}

#[tokio::test]
async fn a_deletion_denied_by_an_admission_policy_is_kept_with_its_reason_and_retried() {
    let kit = Kit::new("denied").await;
    let guarded = yaml(&json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "guarded", "labels": {"kix-test/guarded": "yes"}},
        "data": {"v": "1"}}));
    kit.deploy(&kit.simple(&[configmap("keep", &[("v", "1")]), guarded]))
        .await;
    let policy = kix_testkit::unique_name("kix-deny");
    deny_deletes(&kit, &policy).await;
    // The policy takes effect when the apiserver's informer has it: probe
    // with an object of our own until its DELETE is denied.
    let probe: Api<DynamicObject> = Api::namespaced_with(
        kit.env.client.clone(),
        kit.ns(),
        &resource("v1", "ConfigMap"),
    );
    eventually(
        "the policy denies deletes",
        Duration::from_secs(30),
        || async {
            let object: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "probe", "labels": {"kix-test/guarded": "yes"}}
            }))
            .expect("probe");
            let _ = probe.create(&PostParams::default(), &object).await;
            probe
                .delete("probe", &Default::default())
                .await
                .is_err()
                .then_some(())
        },
    )
    .await;

    let dropped = kit.simple(&[configmap("keep", &[("v", "1")])]);
    for attempt in 0..2 {
        let mark = audit::mark().expect("mark");
        let outcome = kit
            .try_deploy(&dropped, &kit.options())
            .await
            .expect("deploy");
        assert_eq!(
            outcome.phase,
            Phase::Degraded,
            "attempt {attempt}: {outcome:?}"
        );
        assert_eq!(outcome.pruned, 0, "{outcome:?}");
        let record = kit.record(outcome.activation.as_deref().expect("r")).await;
        let failed = record.status.expect("status").failed_deletions;
        assert_eq!(failed.len(), 1, "{failed:?}");
        assert_eq!(failed[0].object.name, "guarded");
        assert!(
            failed[0]
                .reason
                .contains("guarded ConfigMaps are not deleted"),
            "the policy's message is the reason: {failed:?}"
        );
        // Retried: the next deploy sends the DELETE again, once.
        let requests = kit.requests(mark);
        let sent: Vec<_> = deletes(&requests)
            .into_iter()
            .filter(|r| r.name.as_deref() == Some("guarded"))
            .collect();
        assert_eq!(sent.len(), 1, "attempt {attempt}");
    }

    allow_deletes(&kit, &policy).await;
    eventually(
        "the retried deletion succeeds",
        Duration::from_secs(30),
        || async {
            let outcome = kit.try_deploy(&dropped, &kit.options()).await.ok()?;
            (outcome.phase == Phase::Active && outcome.pruned == 1).then_some(())
        },
    )
    .await;
    assert!(kit.get("v1", "ConfigMap", "guarded").await.is_none());
    kit.cleanup().await;
}

#[tokio::test]
async fn a_pvc_in_use_is_deleting_behind_pvc_protection_until_its_pod_is_gone() {
    let kit = Kit::new("pvc-held").await;
    let pv_name = format!("{}-pv", kit.ns());
    let class = format!("{}-manual", kit.ns());
    let pv = yaml(&json!({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv_name},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "storageClassName": class, "hostPath": {"path": "/tmp/kix-test-pv"},
            "persistentVolumeReclaimPolicy": "Retain"}
    }));
    let pvc = yaml(&json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
            "volumeName": pv_name, "resources": {"requests": {"storage": "1Gi"}}}
    }));
    let keep = configmap("keep", &[("v", "1")]);
    kit.deploy(&kit.simple(&[keep.clone(), pv.clone(), pvc]))
        .await;
    // A Pod of someone else's uses the claim, bound to a node so the
    // pvc-protection controller counts it as a user.
    let pods: Api<DynamicObject> =
        Api::namespaced_with(kit.env.client.clone(), kit.ns(), &resource("v1", "Pod"));
    let pod: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "user"},
        "spec": {
            "nodeName": "kwok-node-0",
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "c", "image": "example.invalid/c:1",
                "volumeMounts": [{"name": "d", "mountPath": "/d"}]}],
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]
        }
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("pod");
    eventually(
        "the claim has kubernetes.io/pvc-protection",
        Duration::from_secs(30),
        || async {
            let pvc = kit.get("v1", "PersistentVolumeClaim", "data").await?;
            pvc["metadata"]["finalizers"]
                .as_array()?
                .iter()
                .any(|f| f == "kubernetes.io/pvc-protection")
                .then_some(())
        },
    )
    .await;

    // Deleting a PVC keeps its gate.
    let dropped = kit.simple(&[keep, pv]);
    let err = expect_err(kit.try_deploy(&dropped, &kit.options()).await);
    assert!(matches!(err, EngineError::NeedsAcceptance(_)), "{err}");
    let mut options = kit.options();
    options.accept_migrations = true;
    let outcome = kit.deploy_opts(&dropped, &options).await;
    assert_eq!(outcome.pruned, 0, "{outcome:?}");
    assert_eq!(outcome.deleting.len(), 1, "{outcome:?}");
    assert_eq!(
        outcome.deleting[0].finalizers,
        ["kubernetes.io/pvc-protection"]
    );
    let plan = kit.plan(&dropped, &prune()).await;
    assert_eq!(plan.counts.deleting, 1);
    assert!(!plan.has_changes());

    pods.delete("user", &kube::api::DeleteParams::default().grace_period(0))
        .await
        .expect("delete pod");
    eventually(
        "the claim is gone once its pod is",
        Duration::from_secs(60),
        || async {
            kit.get("v1", "PersistentVolumeClaim", "data")
                .await
                .is_none()
                .then_some(())
        },
    )
    .await;
    let pvs: Api<DynamicObject> =
        Api::all_with(kit.env.client.clone(), &resource("v1", "PersistentVolume"));
    let _ = pvs.delete(&pv_name, &Default::default()).await;
    kit.cleanup().await;
}

/// A build deployed again while the Namespace its previous prune deleted is
/// still terminating (a rollback right after a prune): nothing can be
/// written into that namespace until it is gone. The plan says so (the
/// Namespace and its objects are created again once it is gone); the
/// deploy waits for it, then creates them, and ends Active.
#[tokio::test]
async fn a_build_deployed_while_its_namespace_terminates_waits_and_creates_it_again() {
    let mut kit = Kit::new("ns-again").await;
    let extra = kit.extra_ns("x");
    let with = kit.simple(&[
        namespace(&extra),
        configmap_in(&extra, "inside", &[("v", "1")]),
        configmap("outside", &[("v", "1")]),
    ]);
    kit.deploy(&with).await;
    let inside: Api<DynamicObject> =
        Api::namespaced_with(kit.env.client.clone(), &extra, &resource("v1", "ConfigMap"));
    let patch = json!({"metadata": {"finalizers": [HOLD]}});
    inside
        .patch("inside", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("add finalizer");
    let without = kit.simple(&[configmap("outside", &[("v", "1")])]);
    let accepted = DeployOptions {
        accept_migrations: true,
        ..kit.options()
    };
    kit.deploy_opts(&without, &accepted).await;
    let namespaces: Api<DynamicObject> =
        Api::all_with(kit.env.client.clone(), &resource("v1", "Namespace"));
    let terminating = namespaces
        .get(&extra)
        .await
        .expect("namespace")
        .metadata
        .deletion_timestamp;
    assert!(terminating.is_some(), "the pruned namespace terminates");

    let plan = kit.plan(&with, &prune()).await;
    let again: Vec<_> = plan
        .objects()
        .filter(|o| o.key.name == extra || o.key.name == "inside")
        .collect();
    assert_eq!(again.len(), 2);
    for o in &again {
        assert_eq!(o.action, Action::Create, "{o:?}");
        assert!(
            o.note.as_deref().is_some_and(
                |n| n.contains("being deleted") && n.contains("created again once it is gone")
            ),
            "{o:?}"
        );
    }

    let client = kit.env.client.clone();
    let options = kit.options();
    let built = with.clone();
    let deploy = tokio::spawn(async move {
        let plan = try_plan(&client, &built, &prune()).await?;
        kix_engine::deploy::deploy(&client, &built.build, plan, &options).await
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!deploy.is_finished(), "the deploy waits for the namespace");
    let patch = json!({"metadata": {"finalizers": null}});
    inside
        .patch("inside", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("remove finalizer");
    let outcome = tokio::time::timeout(Duration::from_secs(90), deploy)
        .await
        .expect("the deploy ended within 90 s")
        .expect("join")
        .expect("deploy");
    assert_eq!(outcome.phase, Phase::Active, "{outcome:?}");
    let ns = namespaces.get(&extra).await.expect("namespace again");
    assert!(ns.metadata.deletion_timestamp.is_none());
    assert!(inside.get_opt("inside").await.expect("get").is_some());
    kit.cleanup().await;
}

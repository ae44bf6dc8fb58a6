//! Field ownership against the real control plane: one server-side apply
//! field manager per Kix cluster (conflicts between clusters, shared fields),
//! the take-over from the single `kix` manager of earlier versions, declared
//! handoffs to other managers, and drift decided from what the server says
//! kix owns.

mod common;

use common::*;
use kix_engine::plan::{Action, PlanOptions};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

fn reconcile() -> PlanOptions {
    PlanOptions {
        reconcile: true,
        prune: true,
        ..PlanOptions::default()
    }
}

fn pruning() -> PlanOptions {
    PlanOptions {
        prune: true,
        ..PlanOptions::default()
    }
}

fn configmaps(kit: &Kit) -> Api<DynamicObject> {
    Api::namespaced_with(
        kit.env.client.clone(),
        kit.ns(),
        &resource("v1", "ConfigMap"),
    )
}

/// `(manager, operation)` of every managedFields entry of `live`.
fn managers(live: &Value) -> Vec<(String, String)> {
    live["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            (
                m["manager"].as_str().unwrap_or_default().to_string(),
                m["operation"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn applies_as(live: &Value, manager: &str) -> bool {
    managers(live)
        .iter()
        .any(|(m, op)| m == manager && op == "Apply")
}

#[tokio::test]
async fn two_kix_clusters_setting_one_field_differently_conflict() {
    let kit = Kit::new("own-conflict").await;
    let a = kit.cluster().to_string();
    let b = format!("{a}-b");
    let shared = |level: &str| configmap("shared", &[("level", level), ("common", "x")]);
    kit.deploy(&kit.build(&[Pkg::new("a", &[shared("info")])]))
        .await;

    let built_b = kit.build_for(&b, &[Pkg::new("a", &[shared("debug")])]);
    let plan = kit.plan(&built_b, &pruning()).await;
    let object = plan
        .objects()
        .find(|o| o.key.name == "shared")
        .expect("planned");
    assert_eq!(object.action, Action::Conflict, "{object:#?}");
    let fields = object.fields.join("; ");
    for expected in ["data.level", &format!("\"{a}\""), &format!("\"{b}\"")] {
        assert!(fields.contains(expected), "{expected} not in {fields}");
    }
    assert!(!fields.contains("data.common"), "{fields}");

    // Refused without --force-conflicts, nothing changed.
    let err = expect_err(kit.try_deploy(&built_b, &kit.options()).await);
    let message = err.to_string();
    assert!(
        message.contains("data.level") && message.contains(&a) && message.contains(&b),
        "{message}"
    );
    assert_eq!(
        kit.cm_value("shared", "level").await.as_deref(),
        Some("info")
    );

    // Forced, B takes the field; then A's plan shows the conflict the other way.
    let mut forced = kit.options();
    forced.force_conflicts = true;
    kit.deploy_opts(&built_b, &forced).await;
    assert_eq!(
        kit.cm_value("shared", "level").await.as_deref(),
        Some("debug")
    );
    let plan_a = kit
        .plan(
            &kit.build(&[Pkg::new("a", &[shared("info")])]),
            &reconcile(),
        )
        .await;
    let object = plan_a
        .objects()
        .find(|o| o.key.name == "shared")
        .expect("planned");
    assert_eq!(object.action, Action::Conflict, "{object:#?}");
    cleanup_cluster(&kit.env.client, &b).await;
    kit.cleanup().await;
}

#[tokio::test]
async fn two_kix_clusters_share_identical_fields_and_keep_their_own() {
    let kit = Kit::new("own-shared").await;
    let a = kit.cluster().to_string();
    let b = format!("{a}-b");
    let built_a = kit.build(&[Pkg::new(
        "a",
        &[configmap("shared", &[("common", "x"), ("from-a", "1")])],
    )]);
    let built_b = kit.build_for(
        &b,
        &[Pkg::new(
            "a",
            &[configmap("shared", &[("common", "x"), ("from-b", "2")])],
        )],
    );
    kit.deploy(&built_a).await;
    let plan = kit.plan(&built_b, &pruning()).await;
    assert!(plan.conflicts().is_empty(), "{:?}", plan.conflicts());
    kit.deploy(&built_b).await;
    // Each cluster's fields stay: no flip, on the second deploy of A either.
    for _ in 0..2 {
        let live = kit.get("v1", "ConfigMap", "shared").await.expect("shared");
        assert_eq!(
            live["data"],
            json!({"common": "x", "from-a": "1", "from-b": "2"}),
            "{live:#}"
        );
        assert!(applies_as(&live, &format!("kix/{a}")), "{live:#}");
        assert!(applies_as(&live, &format!("kix/{b}")), "{live:#}");
        // Nothing of A's build differs: no write (the clusters never
        // rewrite the object in turn for the digest each puts on it).
        let again = kit.deploy(&built_a).await;
        assert!(again.no_op, "{again:?}");
    }
    // Neither sees drift in the other's fields.
    for built in [&built_a, &built_b] {
        let plan = kit.plan(built, &reconcile()).await;
        let shared = plan
            .objects()
            .find(|o| o.key.name == "shared")
            .expect("planned");
        assert!(!shared.is_drift(), "{shared:#?}");
        assert_ne!(shared.action, Action::Conflict, "{shared:#?}");
    }
    cleanup_cluster(&kit.env.client, &b).await;
    kit.cleanup().await;
}

/// The package label is kix's bookkeeping, like the digest: two Kix
/// clusters declaring one Namespace in packages of different names share it
/// (found by the NixOS bootstrap test: the operator's own cluster and the
/// user's both declare the operator's Namespace).
#[tokio::test]
async fn two_kix_clusters_share_an_object_from_packages_of_different_names() {
    let kit = Kit::new("own-pkgs").await;
    let a = kit.cluster().to_string();
    let b = format!("{a}-b");
    let built_a = kit.build(&[Pkg::new("base", &[configmap("shared", &[("k", "v")])])]);
    let built_b = kit.build_for(
        &b,
        &[Pkg::new("operator", &[configmap("shared", &[("k", "v")])])],
    );
    kit.deploy(&built_a).await;
    let plan = kit.plan(&built_b, &pruning()).await;
    assert!(plan.conflicts().is_empty(), "{:?}", plan.conflicts());
    let deployed = kit.deploy(&built_b).await;
    assert!(deployed.is_success(), "{deployed:?}");
    // Neither rewrites it for the other's package label.
    for built in [&built_a, &built_b] {
        let again = kit.deploy(built).await;
        assert!(again.no_op, "{again:?}");
    }
    let live = kit.get("v1", "ConfigMap", "shared").await.expect("shared");
    assert_eq!(live["data"], json!({"k": "v"}), "{live:#}");
    cleanup_cluster(&kit.env.client, &b).await;
    kit.cleanup().await;
}

#[tokio::test]
async fn a_change_by_another_manager_is_drift_named_after_it() {
    let kit = Kit::new("own-drift-named").await;
    let built = kit.simple(&[configmap("cfg", &[("x", "1"), ("y", "1")])]);
    kit.deploy(&built).await;
    configmaps(&kit)
        .patch(
            "cfg",
            &PatchParams {
                field_manager: Some("kubectl-edit".into()),
                ..Default::default()
            },
            &Patch::Merge(&json!({"metadata": {"labels": {"team": "other"}},
                "data": {"x": "edited", "extra": "added"}})),
        )
        .await
        .expect("out-of-band edit");

    let plan = kit.plan(&built, &reconcile()).await;
    let cfg = plan
        .objects()
        .find(|o| o.key.name == "cfg")
        .expect("planned");
    assert!(cfg.is_drift(), "{cfg:#?}");
    let note = cfg.note.clone().unwrap_or_default();
    assert!(
        note.contains("data.x") && note.contains("kubectl-edit"),
        "{note}"
    );
    // What the other manager added and kix never set is not drift.
    assert!(!note.contains("extra") && !note.contains("team"), "{note}");

    let status = kix_engine::status::status(&kit.client, kit.cluster())
        .await
        .expect("status");
    let object = status
        .packages
        .iter()
        .flat_map(|p| &p.objects)
        .find(|o| o.object.name == "cfg")
        .expect("cfg in status");
    assert_eq!(
        object.health,
        kix_engine::status::HealthState::Drifted,
        "{object:#?}"
    );
    let reason = object.reason.clone().unwrap_or_default();
    assert!(
        reason.contains("data.x") && reason.contains("kubectl-edit"),
        "{reason}"
    );
    kit.cleanup().await;
}

/// A Deployment laid out like the HPA examples: its Pods need no toleration.
fn scaled_deployment(name: &str, replicas: Option<u32>) -> String {
    let mut spec = json!({
        "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}}, "spec": {
            "containers": [{"name": "main", "image": "example.invalid/app:1",
                "resources": {"requests": {"cpu": "100m"}}}]}},
    });
    if let Some(replicas) = replicas {
        spec["replicas"] = json!(replicas);
    }
    yaml(&json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name}, "spec": spec}))
}

/// An autoscaler's write: `spec.replicas` through the scale subresource, as
/// the HorizontalPodAutoscaler controller does.
async fn autoscale(kit: &Kit, name: &str, replicas: u32) {
    let api: Api<DynamicObject> = Api::namespaced_with(
        kit.env.client.clone(),
        kit.ns(),
        &resource("apps/v1", "Deployment"),
    );
    api.patch_scale(
        name,
        &PatchParams {
            field_manager: Some("horizontal-pod-autoscaler".into()),
            ..Default::default()
        },
        &Patch::Merge(&json!({"spec": {"replicas": replicas}})),
    )
    .await
    .expect("scale");
}

#[tokio::test]
async fn handed_off_replicas_are_neither_applied_nor_drift() {
    let kit = Kit::new("own-handoff").await;
    let built = kit.build(&[Pkg::new("a", &[scaled_deployment("web", Some(1))])
        .handoff(&[json!({"kind": "Deployment", "fields": ["spec.replicas"]})])]);
    kit.deploy(&built).await;
    let live = kit.get("apps/v1", "Deployment", "web").await.expect("web");
    let mine = live["metadata"]["managedFields"]
        .as_array()
        .expect("managedFields")
        .iter()
        .find(|m| m["manager"] == format!("kix/{}", kit.cluster()))
        .cloned()
        .expect("kix's entry");
    assert!(
        mine["fieldsV1"]["f:spec"].get("f:replicas").is_none(),
        "kix applied a handed-off field: {mine:#}"
    );

    autoscale(&kit, "web", 3).await;
    let plan = kit.plan(&built, &reconcile()).await;
    let web = plan
        .objects()
        .find(|o| o.key.name == "web")
        .expect("planned");
    assert_eq!(web.action, Action::Unchanged, "{web:#?}");
    let shown = serde_json::to_value(&plan).expect("json");
    assert_eq!(
        shown["packages"][0]["handoff"],
        json!(["Deployment spec.replicas"]),
        "the plan shows the handoff once: {shown:#}"
    );
    let outcome = kit
        .try_deploy_with(&built, true, &kit.options())
        .await
        .expect("reconcile deploy");
    assert!(outcome.no_op, "{outcome:?}");
    let live = kit.get("apps/v1", "Deployment", "web").await.expect("web");
    assert_eq!(live["spec"]["replicas"], 3, "reverted: {live:#}");

    let status = kix_engine::status::status(&kit.client, kit.cluster())
        .await
        .expect("status");
    let object = status
        .packages
        .iter()
        .flat_map(|p| &p.objects)
        .find(|o| o.object.name == "web")
        .expect("web");
    assert_ne!(
        object.health,
        kix_engine::status::HealthState::Drifted,
        "{object:#?}"
    );
    kit.cleanup().await;
}

#[tokio::test]
async fn a_field_kix_set_keeps_its_value_when_it_is_handed_off() {
    // The build set replicas; the next one hands them to an autoscaler that
    // has not written them yet: they must not fall back to the default (1).
    let kit = Kit::new("own-handover").await;
    kit.deploy(&kit.simple(&[scaled_deployment("web", Some(2))]))
        .await;
    let handed = kit.build(&[Pkg::new("a", &[scaled_deployment("web", None)])
        .handoff(&[json!({"kind": "Deployment", "fields": ["spec.replicas"]})])]);
    let plan = kit.plan(&handed, &pruning()).await;
    let web = plan
        .objects()
        .find(|o| o.key.name == "web")
        .expect("planned");
    assert!(
        !web.changes.iter().any(|c| c.path == "spec.replicas"),
        "{web:#?}"
    );
    kit.deploy(&handed).await;
    let live = kit.get("apps/v1", "Deployment", "web").await.expect("web");
    assert_eq!(live["spec"]["replicas"], 2, "{live:#}");
    assert!(
        !applies_as(&live, &format!("kix/{}", kit.cluster())) || {
            let mine =
                kix_engine::ownership::owned_fields(&live, &format!("kix/{}", kit.cluster()));
            mine.is_some_and(|f| f["f:spec"].get("f:replicas").is_none())
        }
    );
    // The autoscaler's first write ends the hand-over manager.
    autoscale(&kit, "web", 3).await;
    let live = kit.get("apps/v1", "Deployment", "web").await.expect("web");
    assert_eq!(live["spec"]["replicas"], 3);
    assert!(
        !managers(&live).iter().any(|(m, _)| m == "kix-handover"),
        "{live:#}"
    );
    let plan = kit.plan(&handed, &reconcile()).await;
    assert!(!plan.has_changes(), "{:#?}", plan.packages);
    kit.cleanup().await;
}

#[tokio::test]
async fn replicas_kix_sets_are_drift_when_an_autoscaler_changes_them() {
    // Without a handoff, the autoscaler's change is drift kix names.
    let kit = Kit::new("own-replicas").await;
    let built = kit.simple(&[scaled_deployment("web", Some(1))]);
    kit.deploy(&built).await;
    autoscale(&kit, "web", 2).await;
    let plan = kit.plan(&built, &reconcile()).await;
    let web = plan
        .objects()
        .find(|o| o.key.name == "web")
        .expect("planned");
    let note = web.note.clone().unwrap_or_default();
    assert!(
        web.is_drift()
            && note.contains("spec.replicas")
            && note.contains("horizontal-pod-autoscaler"),
        "{web:#?}"
    );
    kit.cleanup().await;
}

// ---------------------------------------------------------------- migration

/// Turns what this engine applied into what kix 0.x left: every object
/// applied by the single field manager `kix` (the same manifest, with force,
/// as that engine did), and the Kix cluster's own manager gone (an empty
/// apply releases its fields; `kix` co-owns them, so they stay).
async fn make_legacy(kit: &Kit, built: &Built, cluster: &str) {
    let plan = kit.plan(built, &PlanOptions::default()).await;
    for d in &plan.desired {
        let api = kix_engine::plan::api_for(&kit.env.client, d);
        let live = api.get(&d.key.name).await.expect("live");
        let activations = kix_api::labels::parse_activations(
            live.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(kix_api::ANNOTATION_ACTIVATIONS))
                .map(String::as_str)
                .unwrap_or_default(),
        );
        let manifest = kix_engine::plan::applied_manifest(d, &activations);
        api.patch(
            &d.key.name,
            &PatchParams::apply("kix").force(),
            &Patch::Apply(&manifest),
        )
        .await
        .expect("legacy apply");
        let empty = json!({"apiVersion": d.api_version, "kind": d.key.kind,
            "metadata": {"name": d.key.name, "namespace": d.key.namespace}});
        api.patch(
            &d.key.name,
            &PatchParams::apply(&format!("kix/{cluster}")),
            &Patch::Apply(&empty),
        )
        .await
        .expect("release the new manager");
        let live = serde_json::to_value(api.get(&d.key.name).await.expect("live")).expect("json");
        assert!(applies_as(&live, "kix"), "{live:#}");
        assert!(!applies_as(&live, &format!("kix/{cluster}")), "{live:#}");
    }
}

#[tokio::test]
async fn objects_of_the_single_kix_manager_are_taken_over_without_loss() {
    let kit = Kit::new("own-migrate").await;
    let v1 = kit.simple(&[
        configmap("cfg", &[("x", "1"), ("dropped", "1")]),
        configmap("same", &[("k", "v")]),
    ]);
    kit.deploy(&v1).await;
    make_legacy(&kit, &v1, kit.cluster()).await;

    // The next deploy of the same build takes over (a write per object),
    // with no conflict and no field lost.
    let plan = kit.plan(&v1, &pruning()).await;
    assert!(plan.conflicts().is_empty(), "{:?}", plan.conflicts());
    let same = plan
        .objects()
        .find(|o| o.key.name == "same")
        .expect("planned");
    assert_eq!(same.action, Action::Update, "{same:#?}");
    kit.deploy(&v1).await;
    let live = kit.get("v1", "ConfigMap", "same").await.expect("same");
    assert_eq!(live["data"], json!({"k": "v"}), "{live:#}");
    assert!(!applies_as(&live, "kix"), "{live:#}");
    assert!(
        applies_as(&live, &format!("kix/{}", kit.cluster())),
        "{live:#}"
    );
    let again = kit.deploy(&v1).await;
    assert!(again.no_op, "{again:?}");

    // A build that drops a field: the take-over removes it, as kix 0.x did.
    make_legacy(&kit, &v1, kit.cluster()).await;
    let v2 = kit.simple(&[
        configmap("cfg", &[("x", "2")]),
        configmap("same", &[("k", "v")]),
    ]);
    kit.deploy(&v2).await;
    let live = kit.get("v1", "ConfigMap", "cfg").await.expect("cfg");
    assert_eq!(live["data"], json!({"x": "2"}), "{live:#}");
    assert_eq!(
        managers(&live)
            .iter()
            .filter(|(_, op)| op == "Apply")
            .map(|(m, _)| m.as_str())
            .collect::<Vec<_>>(),
        [format!("kix/{}", kit.cluster())],
        "{live:#}"
    );
    let clean = kit.plan(&v2, &reconcile()).await;
    assert!(!clean.has_changes(), "{:#?}", clean.packages);
    kit.cleanup().await;
}

#[tokio::test]
async fn a_shared_object_keeps_every_clusters_fields_through_the_take_over() {
    let kit = Kit::new("own-migrate-shared").await;
    let a = kit.cluster().to_string();
    let b = format!("{a}-b");
    let shared = configmap("shared", &[("common", "x")]);
    let built_a = kit.build(&[Pkg::new("a", std::slice::from_ref(&shared))]);
    let built_b = kit.build_for(&b, &[Pkg::new("a", &[shared])]);
    kit.deploy(&built_a).await;
    kit.deploy(&built_b).await;
    make_legacy(&kit, &built_a, &a).await;
    make_legacy(&kit, &built_b, &b).await;

    // A takes over; `kix` keeps its entry while B has not.
    let plan = kit.plan(&built_a, &pruning()).await;
    assert!(plan.conflicts().is_empty(), "{:?}", plan.conflicts());
    kit.deploy(&built_a).await;
    let live = kit.get("v1", "ConfigMap", "shared").await.expect("shared");
    assert_eq!(live["data"], json!({"common": "x"}), "{live:#}");
    assert!(applies_as(&live, "kix") && applies_as(&live, &format!("kix/{a}")));

    // B takes over too: now the single manager is gone, nothing lost.
    let plan = kit.plan(&built_b, &pruning()).await;
    assert!(plan.conflicts().is_empty(), "{:?}", plan.conflicts());
    kit.deploy(&built_b).await;
    let live = kit.get("v1", "ConfigMap", "shared").await.expect("shared");
    assert_eq!(live["data"], json!({"common": "x"}), "{live:#}");
    assert!(!applies_as(&live, "kix"), "{live:#}");
    assert!(applies_as(&live, &format!("kix/{a}")) && applies_as(&live, &format!("kix/{b}")));
    cleanup_cluster(&kit.env.client, &b).await;
    kit.cleanup().await;
}

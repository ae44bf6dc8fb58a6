//! CRD upgrades against the real control plane: a build that drops a stored
//! version or stops serving it is destructive, shown with its object count
//! and refused without `--accept-migrations` before any write (a stored
//! version's removal is refused even with it: the apiserver would refuse
//! it); schema changes and new versions are shown per version as field diffs
//! and deploy without consent. Also what a Namespace or CRD deletion takes
//! with it.

mod common;

use common::*;
use kix_engine::EngineError;
use kix_engine::crd_upgrade::Hazard;
use kix_engine::plan::{Action, Plan, PlanOptions, PlannedObject};
use kix_testkit::audit;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};

fn prune() -> PlanOptions {
    PlanOptions {
        prune: true,
        ..PlanOptions::default()
    }
}

/// A CRD `widgets.<group>` with `versions`: (name, served, storage, spec
/// properties).
fn crd(name: &str, group: &str, versions: &[(&str, bool, bool, Value)]) -> String {
    let versions: Vec<Value> = versions
        .iter()
        .map(|(v, served, storage, props)| {
            json!({"name": v, "served": served, "storage": storage,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": props}}}}})
        })
        .collect();
    yaml(&kix_testkit::widget_crd(name, group, &versions))
}

fn widgets(kit: &Kit, group: &str, version: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        kit.env.client.clone(),
        kit.ns(),
        &resource(&format!("{group}/{version}"), "Widget"),
    )
}

/// Creates `n` Widgets through `version`, outside the build (a controller's
/// or a user's objects, stored in the storage version of the time).
async fn create_widgets(kit: &Kit, group: &str, version: &str, n: usize) {
    let api = widgets(kit, group, version);
    for i in 0..n {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{group}/{version}"), "kind": "Widget",
            "metadata": {"name": format!("w{i}")}, "spec": {"replicas": 1}
        }))
        .expect("widget");
        api.create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("create widget w{i}: {e}"));
    }
}

async fn live_crd(kit: &Kit, name: &str) -> Value {
    kit.get_in(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        None,
        name,
    )
    .await
    .unwrap_or_else(|| panic!("CRD {name}"))
}

fn find<'a>(plan: &'a Plan, kind: &str, name: &str) -> &'a PlannedObject {
    plan.objects()
        .find(|o| o.key.kind == kind && o.key.name == name)
        .unwrap_or_else(|| panic!("{kind} {name} not in the plan: {plan:#?}"))
}

fn accepting(kit: &Kit) -> kix_engine::deploy::DeployOptions {
    let mut options = kit.options();
    options.accept_migrations = true;
    options
}

/// A deploy of `built` with `options` fails, writes nothing and leaves the
/// CRD as it was; its error.
async fn refused(
    kit: &Kit,
    built: &Built,
    options: &kix_engine::deploy::DeployOptions,
    crd_name: &str,
) -> EngineError {
    let before = live_crd(kit, crd_name).await;
    let mark = audit::mark().expect("mark");
    let err = expect_err(kit.try_deploy(built, options).await);
    let writes = kit.writes(mark);
    assert!(writes.is_empty(), "nothing changed:\n{}", describe(&writes));
    let after = live_crd(kit, crd_name).await;
    assert_eq!(
        before["metadata"]["resourceVersion"], after["metadata"]["resourceVersion"],
        "the CRD is unchanged"
    );
    assert_eq!(before["spec"]["versions"], after["spec"]["versions"]);
    err
}

#[tokio::test]
async fn dropping_a_stored_version_is_destructive_and_refused_before_any_write() {
    let mut kit = Kit::new("crd-drop").await;
    let group = format!("{}.example.com", kit.ns());
    let name = format!("widgets.{group}");
    kit.crds.push(name.clone());
    let props = json!({"replicas": {"type": "integer"}});
    let first = kit.simple(&[crd(
        &name,
        &group,
        &[("v1alpha1", true, true, props.clone())],
    )]);
    kit.deploy(&first).await;
    create_widgets(&kit, &group, "v1alpha1", 3).await;

    let second = kit.simple(&[crd(&name, &group, &[("v1", true, true, props)])]);
    let mark = audit::mark().expect("mark");
    let plan = kit.plan(&second, &prune()).await;
    assert!(kit.writes(mark).is_empty(), "planning writes nothing");
    assert_eq!(
        find(&plan, "CustomResourceDefinition", &name).action,
        Action::Update
    );
    let upgrade = plan.crd_upgrades.first().expect("the CRD's upgrade");
    assert_eq!(upgrade.stored_versions, ["v1alpha1"]);
    assert_eq!(upgrade.objects, Some(3), "{upgrade:#?}");
    assert_eq!(upgrade.destructive.len(), 1, "{upgrade:#?}");
    assert_eq!(upgrade.destructive[0].version, "v1alpha1");
    assert_eq!(upgrade.destructive[0].hazard, Hazard::Removed);
    let changes: Vec<String> = upgrade.changes.iter().map(ToString::to_string).collect();
    assert_eq!(changes, ["v1: added", "v1alpha1: removed"]);
    let accept = plan.needs_acceptance();
    assert!(
        accept
            .iter()
            .any(|a| a.contains(&name) && a.contains("v1alpha1") && a.contains("3 ")),
        "{accept:?}"
    );
    let json = serde_json::to_value(&plan).expect("json");
    assert_eq!(
        json["crdUpgrades"][0]["destructive"][0],
        json!({"version": "v1alpha1", "hazard": "removed"}),
        "{:#}",
        json["crdUpgrades"]
    );

    // Refused before any write, with or without consent: the apiserver would
    // refuse it midway through the deploy.
    for options in [kit.options(), accepting(&kit)] {
        let err = refused(&kit, &second, &options, &name).await;
        assert!(matches!(err, EngineError::CrdStoredVersion(_)), "{err}");
        let text = err.to_string();
        for needle in [
            name.as_str(),
            "v1alpha1",
            "storedVersions",
            "3 ",
            "nothing was changed",
        ] {
            assert!(text.contains(needle), "{needle:?} in: {text}");
        }
    }
    assert_eq!(kit.records().await.len(), 1);
    assert_eq!(
        widgets(&kit, &group, "v1alpha1")
            .list(&Default::default())
            .await
            .expect("list")
            .items
            .len(),
        3
    );
    kit.cleanup().await;
}

#[tokio::test]
async fn not_serving_a_stored_version_needs_acceptance_which_the_record_keeps() {
    let mut kit = Kit::new("crd-unserve").await;
    let group = format!("{}.example.com", kit.ns());
    let name = format!("widgets.{group}");
    kit.crds.push(name.clone());
    let props = json!({"replicas": {"type": "integer"}});
    let first = kit.simple(&[crd(
        &name,
        &group,
        &[
            ("v1alpha1", true, true, props.clone()),
            ("v1", true, false, props.clone()),
        ],
    )]);
    kit.deploy(&first).await;
    create_widgets(&kit, &group, "v1alpha1", 2).await;

    let second = kit.simple(&[crd(
        &name,
        &group,
        &[
            ("v1alpha1", false, false, props.clone()),
            ("v1", true, true, props),
        ],
    )]);
    let plan = kit.plan(&second, &prune()).await;
    let upgrade = plan.crd_upgrades.first().expect("the CRD's upgrade");
    assert_eq!(upgrade.objects, Some(2), "{upgrade:#?}");
    assert_eq!(upgrade.destructive.len(), 1, "{upgrade:#?}");
    assert_eq!(upgrade.destructive[0].hazard, Hazard::NotServed);
    let changes: Vec<String> = upgrade.changes.iter().map(ToString::to_string).collect();
    assert_eq!(
        changes,
        [
            "v1: storage false → true",
            "v1alpha1: served true → false",
            "v1alpha1: storage true → false",
        ]
    );

    let err = refused(&kit, &second, &kit.options(), &name).await;
    assert!(matches!(err, EngineError::NeedsAcceptance(_)), "{err}");
    let text = err.to_string();
    assert!(
        text.contains(&name) && text.contains("stop serving stored version v1alpha1"),
        "{text}"
    );
    assert!(text.contains("2 "), "the object count: {text}");

    let outcome = kit.deploy_opts(&second, &accepting(&kit)).await;
    let record = kit
        .record(outcome.activation.as_deref().expect("record"))
        .await;
    let accepted = &record.spec.receipt.accepted;
    assert_eq!(accepted.crd_versions, 1, "{accepted:?}");
    assert!(
        accepted
            .actions
            .iter()
            .any(|a| a.starts_with("stop serving stored version v1alpha1 of") && a.contains(&name)),
        "{accepted:?}"
    );
    let live = live_crd(&kit, &name).await;
    assert_eq!(live["spec"]["versions"][0]["name"], "v1alpha1");
    assert_eq!(live["spec"]["versions"][0]["served"], false);
    kit.cleanup().await;
}

#[tokio::test]
async fn schema_changes_and_added_versions_are_field_diffs_not_destructive() {
    let mut kit = Kit::new("crd-schema").await;
    let group = format!("{}.example.com", kit.ns());
    let name = format!("widgets.{group}");
    kit.crds.push(name.clone());
    let first = kit.simple(&[crd(
        &name,
        &group,
        &[(
            "v1",
            true,
            true,
            json!({"replicas": {"type": "integer"}, "size": {"type": "string"}}),
        )],
    )]);
    kit.deploy(&first).await;
    create_widgets(&kit, &group, "v1", 1).await;

    let props =
        json!({"replicas": {"type": "string"}, "color": {"type": "string", "maxLength": 10}});
    let second = kit.simple(&[crd(&name, &group, &[("v1", true, true, props.clone())])]);
    let plan = kit.plan(&second, &prune()).await;
    let crd_object = find(&plan, "CustomResourceDefinition", &name);
    assert_eq!(crd_object.action, Action::Update);
    assert!(
        crd_object
            .changes
            .iter()
            .all(|c| !c.path.starts_with("spec.versions")),
        "the field diff replaces the generic one: {:#?}",
        crd_object.changes
    );
    let upgrade = plan.crd_upgrades.first().expect("the CRD's upgrade");
    let changes: Vec<String> = upgrade.changes.iter().map(ToString::to_string).collect();
    assert_eq!(
        changes,
        [
            "v1: spec.color: added (string)",
            "v1: spec.replicas: type integer → string",
            "v1: spec.size: removed",
        ]
    );
    assert!(upgrade.destructive.is_empty(), "{upgrade:#?}");
    assert_eq!(upgrade.objects, None, "counted only when destructive");
    assert!(plan.needs_acceptance().is_empty());
    let json = serde_json::to_value(&plan).expect("json");
    assert_eq!(
        json["crdUpgrades"][0]["changes"][1],
        json!({"version": "v1", "path": "spec.replicas", "change": "type integer → string"})
    );
    kit.deploy(&second).await;

    let third = kit.simple(&[crd(
        &name,
        &group,
        &[
            ("v1", true, true, props.clone()),
            ("v2", true, false, props),
        ],
    )]);
    let plan = kit.plan(&third, &prune()).await;
    let changes: Vec<String> = plan.crd_upgrades[0]
        .changes
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(changes, ["v2: added"]);
    assert!(plan.crd_upgrades[0].destructive.is_empty());
    assert!(plan.needs_acceptance().is_empty());
    kit.deploy(&third).await;
    assert_eq!(
        live_crd(&kit, &name).await["spec"]["versions"][1]["name"],
        "v2"
    );
    kit.cleanup().await;
}

#[tokio::test]
async fn a_namespace_or_crd_deletion_counts_what_it_takes_with_it() {
    let mut kit = Kit::new("crd-contents").await;
    let extra = kit.extra_ns("data");
    let group = format!("{}.example.com", kit.ns());
    let name = format!("widgets.{group}");
    kit.crds.push(name.clone());
    let keep = configmap("keep", &[("k", "v")]);
    let first = kit.simple(&[
        crd(&name, &group, &[("v1", true, true, json!({}))]),
        namespace(&extra),
        configmap_in(&extra, "in-build", &[("k", "v")]),
        keep.clone(),
    ]);
    kit.deploy(&first).await;
    create_widgets(&kit, &group, "v1", 2).await;

    let second = kit.simple(std::slice::from_ref(&keep));
    let taken = |plan: &Plan, kind: &str, name: &str| {
        let o = find(plan, kind, name);
        assert_eq!(o.action, Action::Delete);
        o.takes_with_it
            .unwrap_or_else(|| panic!("{kind} {name} has a count: {o:#?}"))
    };
    let plan = kit.plan(&second, &prune()).await;
    assert_eq!(taken(&plan, "CustomResourceDefinition", &name), 2);
    let before = taken(&plan, "Namespace", &extra);
    // The build's ConfigMap, and whatever the control plane puts in a
    // namespace (its default ServiceAccount, the root CA ConfigMap).
    assert!(before >= 1, "{before}");
    let accept = plan.needs_acceptance();
    assert!(
        accept
            .iter()
            .any(|a| a.contains(&name) && a.contains("takes 2 objects with it")),
        "{accept:?}"
    );

    // Three more objects in the namespace, outside the build: counted too.
    let cms: Api<DynamicObject> =
        Api::namespaced_with(kit.env.client.clone(), &extra, &resource("v1", "ConfigMap"));
    for i in 0..3 {
        let cm: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("other-{i}")}
        }))
        .expect("cm");
        cms.create(&PostParams::default(), &cm)
            .await
            .expect("create");
    }
    create_widgets_more(&kit, &group).await;
    let plan = kit.plan(&second, &prune()).await;
    assert_eq!(taken(&plan, "Namespace", &extra), before + 3);
    assert_eq!(taken(&plan, "CustomResourceDefinition", &name), 3);
    kit.cleanup().await;
}

/// One more Widget, `w-more`.
async fn create_widgets_more(kit: &Kit, group: &str) {
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1"), "kind": "Widget",
        "metadata": {"name": "w-more"}, "spec": {}
    }))
    .expect("widget");
    widgets(kit, group, "v1")
        .create(&PostParams::default(), &obj)
        .await
        .expect("create widget");
}

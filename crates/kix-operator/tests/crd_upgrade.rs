//! CRD upgrades through the operator (a process, against the real control
//! plane): a new record whose build stops serving a stored CRD version is
//! applied only when its receipt accepts that, and one whose build removes a
//! stored version fails with nothing changed, saying what to do.

mod support;

use std::path::Path;
use std::time::Duration;

use kix_api::{Activation, Phase};
use kix_testkit::TestEnv;
use kube::api::{Api, DynamicObject, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use support::*;

/// A CRD `widgets.<group>` with `versions`: (name, served, storage).
fn crd(name: &str, group: &str, versions: &[(&str, bool, bool)]) -> String {
    let versions: Vec<Value> = versions
        .iter()
        .map(|(v, served, storage)| {
            json!({"name": v, "served": served, "storage": storage,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}})
        })
        .collect();
    let crd = kix_testkit::widget_crd(name, group, &versions);
    format!("---\n{crd}\n")
}

fn crds(env: &TestEnv) -> Api<DynamicObject> {
    kix_testkit::crd_api(&env.client)
}

/// The Widgets of the test's namespace through `version`, and a Widget
/// `w0` to create through it.
fn widget_w0(env: &TestEnv, group: &str, version: &str) -> (Api<DynamicObject>, DynamicObject) {
    let api = Api::namespaced_with(
        env.client.clone(),
        &env.namespace,
        &ApiResource {
            group: group.to_string(),
            version: version.into(),
            api_version: format!("{group}/{version}"),
            kind: "Widget".into(),
            plural: "widgets".into(),
        },
    );
    let widget = serde_json::from_value(json!({
        "apiVersion": format!("{group}/{version}"), "kind": "Widget",
        "metadata": {"name": "w0"}, "spec": {}
    }))
    .expect("widget");
    (api, widget)
}

async fn record(env: &TestEnv, n: u64) -> Option<Activation> {
    Api::<Activation>::all(env.client.clone())
        .get_opt(&Activation::name_for(&env.cluster, n))
        .await
        .expect("get record")
}

/// The store path of `root`'s build (`kix plan --out` adds it to the store).
fn store_path(cluster: &str, root: &Path, dir: &Path) -> String {
    let file = dir.join(format!("{}.json", kix_testkit::unique_name("plan")));
    let out = kix(&[
        "plan",
        cluster,
        "--path",
        root.to_str().expect("utf8"),
        "--out",
        file.to_str().expect("utf8"),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let plan: Value =
        serde_json::from_str(&std::fs::read_to_string(file).expect("plan file")).expect("json");
    plan["storePath"].as_str().expect("storePath").to_string()
}

/// A record written by hand with `accepted` as its receipt's acceptance.
async fn write_record(env: &TestEnv, n: u64, path: &str, accepted: Value) {
    let spec: kix_api::ActivationSpec = serde_json::from_value(json!({
        "cluster": env.cluster, "engine": "operator",
        "source": {"path": path},
        "receipt": {"user": "t", "host": "t", "kixVersion": "0",
            "time": "2026-01-01T00:00:00Z", "planDigest": "x", "accepted": accepted}
    }))
    .expect("spec");
    Api::<Activation>::all(env.client.clone())
        .create(&PostParams::default(), &Activation::new_record(n, spec))
        .await
        .expect("create record");
}

async fn failed_message(env: &TestEnv, n: u64) -> String {
    wait_until(
        &format!("record {n} Failed"),
        Duration::from_secs(60),
        || async { record(env, n).await.and_then(|r| r.phase()) == Some(Phase::Failed) },
    )
    .await;
    record(env, n)
        .await
        .and_then(|r| r.status)
        .and_then(|s| s.message)
        .unwrap_or_default()
}

#[tokio::test]
async fn the_operator_needs_consent_for_a_stored_version_and_refuses_its_removal() {
    let env = TestEnv::new("op-crd").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    let _op = Operator::start(
        &env,
        &[&env.cluster],
        &kix_testkit::unique_name("lease"),
        dir.path(),
    );
    let group = format!("{}.example.com", env.namespace);
    let name = format!("widgets.{group}");
    let tree_of = |versions: &[(&str, bool, bool)]| {
        tree(
            dir.path(),
            &env.cluster,
            &env.namespace,
            &crd(&name, &group, versions),
        )
    };
    let v1 = tree_of(&[("v1alpha1", true, true), ("v1", true, false)]);
    let out = deploy_operator(&env.cluster, &v1);
    assert!(out.status.success(), "{}", text(&out));
    let (widgets, widget) = widget_w0(&env, &group, "v1alpha1");
    widgets
        .create(&PostParams::default(), &widget)
        .await
        .expect("create widget");

    // Not serving v1alpha1, which holds the Widget: a record that accepts
    // nothing fails, with nothing changed.
    let unserve = tree_of(&[("v1alpha1", false, false), ("v1", true, true)]);
    let path = store_path(&env.cluster, &unserve, dir.path());
    write_record(&env, 2, &path, json!({})).await;
    let message = failed_message(&env, 2).await;
    assert!(
        message.contains("not confirmed")
            && message.contains(&format!("stop serving stored version v1alpha1 of CustomResourceDefinition.apiextensions.k8s.io/{name}")),
        "{message}"
    );
    let live = crds(&env).get(&name).await.expect("crd");
    assert_eq!(
        live.data["spec"]["versions"][0]["served"], true,
        "unchanged"
    );

    // Through `kix deploy --operator --accept-migrations`: accepted, applied.
    let out = kix(&[
        "deploy",
        &env.cluster,
        "--path",
        unserve.to_str().expect("utf8"),
        "--operator",
        "--yes",
        "--accept-migrations",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let third = record(&env, 3).await.expect("record 3");
    assert_eq!(third.phase(), Some(Phase::Active), "{:?}", third.status);
    assert_eq!(third.spec.receipt.accepted.crd_versions, 1);
    let live = crds(&env).get(&name).await.expect("crd");
    assert_eq!(live.data["spec"]["versions"][0]["served"], false);

    // Removing it while stored: even a record that accepts it fails, with
    // nothing changed and the steps that make the removal possible.
    let removed = tree_of(&[("v1", true, true)]);
    let path = store_path(&env.cluster, &removed, dir.path());
    let action = format!(
        "drop stored version v1alpha1 of CustomResourceDefinition.apiextensions.k8s.io/{name}"
    );
    write_record(
        &env,
        4,
        &path,
        json!({"digest": "x", "crdVersions": 1, "actions": [action]}),
    )
    .await;
    let message = failed_message(&env, 4).await;
    assert!(
        message.contains("nothing was changed")
            && message.contains("removes version v1alpha1")
            && message.contains("status.storedVersions"),
        "{message}"
    );
    let live = crds(&env).get(&name).await.expect("crd");
    assert_eq!(live.data["spec"]["versions"][0]["name"], "v1alpha1");
    let _ = crds(&env).delete(&name, &Default::default()).await;
}

/// The live CRD of an applied record gains a version that objects are then
/// stored in (someone edited it): the build would remove a stored version,
/// which the apiserver refuses. The operator leaves that CRD as it is, keeps
/// the rest applied, and says so: a condition and an Event, neither written
/// nor published again while nothing changes.
#[tokio::test]
async fn an_applied_record_leaves_a_crd_it_cannot_apply_and_keeps_the_rest() {
    let env = TestEnv::new("op-crd-hold").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    let _op = Operator::start(
        &env,
        &[&env.cluster],
        &kix_testkit::unique_name("lease"),
        dir.path(),
    );
    let group = format!("{}.example.com", env.namespace);
    let name = format!("widgets.{group}");
    let yaml = format!(
        "{}{}",
        crd(&name, &group, &[("v1", true, true)]),
        configmap("settings", "hello")
    );
    let root = tree(dir.path(), &env.cluster, &env.namespace, &yaml);
    let out = deploy_operator(&env.cluster, &root);
    assert!(out.status.success(), "{}", text(&out));

    // Someone adds v2 as the storage version and stores a Widget in it.
    let patch = json!({"spec": {"versions": [
        {"name": "v1", "served": true, "storage": false,
            "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
        {"name": "v2", "served": true, "storage": true,
            "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
    ]}});
    crds(&env)
        .patch(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .expect("add v2");
    let (widgets, widget) = widget_w0(&env, &group, "v2");
    wait_until("v2 served", Duration::from_secs(30), || async {
        widgets
            .create(&PostParams::default(), &widget)
            .await
            .is_ok()
    })
    .await;

    let records: Api<Activation> = Api::all(env.client.clone());
    let first = Activation::name_for(&env.cluster, 1);
    let condition = || async {
        records
            .get(&first)
            .await
            .ok()
            .and_then(|r| r.status)
            .and_then(|s| {
                s.conditions
                    .into_iter()
                    .find(|c| c.type_ == "CrdUpgradeRefused")
            })
            .map(|c| c.message)
    };
    wait_until(
        "the CrdUpgradeRefused condition on the applied record",
        Duration::from_secs(60),
        || async { condition().await.is_some() },
    )
    .await;
    let message = condition().await.unwrap_or_default();
    assert!(
        message.contains("removes version v2") && message.contains("status.storedVersions"),
        "{message}"
    );
    let live = crds(&env).get(&name).await.expect("crd");
    assert_eq!(
        live.data["spec"]["versions"][1]["name"], "v2",
        "the CRD is left as it is"
    );

    // The rest is still kept applied.
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(env.client.clone(), &env.namespace);
    let tamper = json!({"data": {"value": "tampered"}});
    cms.patch(
        "settings",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&tamper),
    )
    .await
    .expect("tamper");
    wait_until(
        "the edited ConfigMap restored while the CRD is held",
        Duration::from_secs(30),
        || async { cm_value(&cms, "settings").await.as_deref() == Some("hello") },
    )
    .await;

    // Quiet: while nothing changes, the record is not rewritten and the
    // refusal is not published again. (It can be published twice before
    // that: the operator may correct the CRD once before the Widget is
    // stored in v2, and v2 is then a refusal anew.)
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(env.client.clone(), "default");
    let published = || async {
        let items = events
            .list(&Default::default())
            .await
            .expect("events")
            .items;
        let refusals: Vec<_> = items
            .into_iter()
            .filter(|e| {
                e.reason.as_deref() == Some("CrdUpgradeRefused")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(first.as_str())
            })
            .collect();
        let times: i32 = refusals
            .iter()
            .map(|e| e.series.as_ref().map_or(1, |s| s.count))
            .sum();
        times
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    let version = records
        .get(&first)
        .await
        .expect("record")
        .metadata
        .resource_version;
    let before = published().await;
    assert!(before >= 1, "the refusal was published");
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(
        records
            .get(&first)
            .await
            .expect("record")
            .metadata
            .resource_version,
        version,
        "the held CRD rewrote the record"
    );
    assert_eq!(published().await, before, "the refusal was published again");
    let _ = widgets.delete("w0", &Default::default()).await;
    let _ = crds(&env).delete(&name, &Default::default()).await;
}

//! CRD upgrades as a user meets them: `kix plan` shows a CRD's changes per
//! version (text and `--output json`), and `kix deploy` of a build that
//! removes a stored version exits 1 before any change, naming the CRD, the
//! version and what to do, even with `--accept-migrations`.

mod cli_support;

use cli_support::Kix;
use kube::api::{Api, DynamicObject, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};

/// A CRD `widgets.<group>` with `versions`: (name, served, storage, type of
/// `spec.replicas`).
fn crd(name: &str, group: &str, versions: &[(&str, bool, bool, &str)]) -> String {
    let versions: Vec<Value> = versions
        .iter()
        .map(|(v, served, storage, replicas)| {
            json!({"name": v, "served": served, "storage": storage,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "replicas": {"type": replicas}}}}}}})
        })
        .collect();
    let crd = kix_testkit::widget_crd(name, group, &versions);
    format!("---\n{crd}\n")
}

fn crds(kix: &Kix) -> Api<DynamicObject> {
    kix_testkit::crd_api(&kix.env.client)
}

#[tokio::test]
async fn plan_shows_a_crds_changes_and_deploy_refuses_removing_a_stored_version() {
    let kix = Kix::new("cli-crd").await;
    let group = format!("{}.example.com", kix.ns());
    let name = format!("widgets.{group}");
    let first = kix.tree(
        "first",
        &crd(&name, &group, &[("v1alpha1", true, true, "integer")]),
        json!({}),
    );
    kix.deploy(&first, &[]).ok();
    let widgets: Api<DynamicObject> = Api::namespaced_with(
        kix.env.client.clone(),
        kix.ns(),
        &ApiResource {
            group: group.clone(),
            version: "v1alpha1".into(),
            api_version: format!("{group}/v1alpha1"),
            kind: "Widget".into(),
            plural: "widgets".into(),
        },
    );
    for i in 0..2 {
        let w: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{group}/v1alpha1"), "kind": "Widget",
            "metadata": {"name": format!("w{i}")}, "spec": {"replicas": 1}
        }))
        .expect("widget");
        widgets
            .create(&PostParams::default(), &w)
            .await
            .expect("create widget");
    }

    // A schema change and a new version: shown per version, not destructive.
    let schema = kix.tree(
        "schema",
        &crd(
            &name,
            &group,
            &[
                ("v1alpha1", true, true, "string"),
                ("v1", true, false, "string"),
            ],
        ),
        json!({}),
    );
    let path = schema.to_str().expect("utf-8");
    let text = kix
        .kix(&["plan", kix.cluster(), "--path", path])
        .ok()
        .stdout;
    for line in [
        "      v1: added\n",
        "      v1alpha1: spec.replicas: type integer → string\n",
    ] {
        assert!(text.contains(line), "{line:?} in:\n{text}");
    }
    assert!(!text.contains("destructive"), "{text}");
    let plan = kix
        .kix(&["plan", kix.cluster(), "--path", path, "--output", "json"])
        .ok()
        .json();
    assert_eq!(
        plan["crdUpgrades"][0]["changes"],
        json!([
            {"version": "v1", "change": "added"},
            {"version": "v1alpha1", "path": "spec.replicas", "change": "type integer → string"},
        ]),
        "{:#}",
        plan["crdUpgrades"]
    );
    assert_eq!(
        plan["crdUpgrades"][0]["storedVersions"],
        json!(["v1alpha1"])
    );

    // Removing the stored version: shown, and refused before any change.
    let dropped = kix.tree(
        "dropped",
        &crd(&name, &group, &[("v1", true, true, "string")]),
        json!({}),
    );
    let path = dropped.to_str().expect("utf-8");
    let text = kix
        .kix(&["plan", kix.cluster(), "--path", path])
        .ok()
        .stdout;
    assert!(text.contains("      v1alpha1: removed\n"), "{text}");
    assert!(
        text.contains("CRD upgrade refused: CustomResourceDefinition.apiextensions.k8s.io/")
            && text.contains("2 widgets.")
            && text.contains("(2 widgets.")
            && text.contains("refused: see below"),
        "{text}"
    );
    let before = crds(&kix).get(&name).await.expect("crd");
    let run = kix.deploy(&dropped, &["--accept-migrations"]).code(1);
    for needle in [
        name.as_str(),
        "removes version v1alpha1",
        "status.storedVersions",
        "nothing was changed",
        r#"{"status":{"storedVersions":["v1"]}}"#,
    ] {
        assert!(
            run.stderr.contains(needle),
            "{needle:?} in:\n{}",
            run.stderr
        );
    }
    let after = crds(&kix).get(&name).await.expect("crd");
    assert_eq!(
        before.metadata.resource_version, after.metadata.resource_version,
        "the CRD is unchanged"
    );
    assert_eq!(kix.records().await.len(), 1, "no record written");
    let _ = crds(&kix).delete(&name, &Default::default()).await;
}

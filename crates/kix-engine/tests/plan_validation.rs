//! The plan's server-side dry-run (strict field validation) rejects unknown
//! fields, and the server's warnings are in the plan.
//!
//! Server-side apply refuses fields outside the schema whatever the
//! `fieldValidation` directive (its typed patch is built from the schema);
//! the dry-run asks for `Strict` so that stays true for every check it makes.

mod common;

use common::*;
use kix_engine::plan::{Action, PlanOptions};
use serde_json::json;

#[tokio::test]
async fn an_unknown_field_fails_the_plan_naming_object_and_field() {
    let kit = Kit::new("plan-strict").await;
    let typo = yaml(&json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "typo"},
        "dat": {"k": "v"},
    }));
    let built = kit.simple(&[typo]);
    let error = try_plan(&kit.client, &built, &PlanOptions::default())
        .await
        .expect_err("an unknown field is an error");
    let text = format!("{error:#}");
    assert!(
        text.contains("ConfigMap plan-strict-") && text.contains("/typo"),
        "{text}"
    );
    assert!(
        text.contains(".dat: field not declared in schema"),
        "{text}"
    );
    kit.cleanup().await;
}

#[tokio::test]
async fn the_servers_warnings_are_in_the_plan() {
    let kit = Kit::new("plan-warnings").await;
    let deprecated = deployment_with(
        "old-selector",
        true,
        &json!({"template": {
            "metadata": {"labels": {"app": "old-selector"}},
            "spec": {
                "containers": [{"name": "main", "image": "example.invalid/app:1"}],
                "nodeSelector": {"beta.kubernetes.io/os": "linux"},
            },
        }}),
    );
    let built = kit.simple(&[deprecated, configmap("plain", &[("k", "v")])]);
    let plan = kit.plan(&built, &PlanOptions::default()).await;
    let object = |name: &str| {
        plan.objects()
            .find(|o| o.key.name == name)
            .unwrap_or_else(|| panic!("{name} not in the plan"))
    };
    let deployment = object("old-selector");
    assert_eq!(deployment.action, Action::Create);
    assert_eq!(
        deployment.warnings,
        vec![
            "spec.template.spec.nodeSelector[beta.kubernetes.io/os]: deprecated since v1.14; use \"kubernetes.io/os\" instead"
                .to_owned()
        ]
    );
    assert!(object("plain").warnings.is_empty());
    let json = serde_json::to_value(&plan).expect("plan JSON");
    let in_json = json["packages"][0]["objects"]
        .as_array()
        .expect("objects")
        .iter()
        .find(|o| o["key"]["name"] == "old-selector")
        .expect("in JSON");
    assert_eq!(in_json["warnings"].as_array().map(Vec::len), Some(1));
    kit.cleanup().await;
}

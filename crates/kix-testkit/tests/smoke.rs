//! The control plane works end to end: server-side apply of a Namespace, a
//! ConfigMap and a Deployment, and the Deployment becomes Available on the KWOK
//! nodes (which needs the apiserver, etcd, the controller-manager, the
//! scheduler and KWOK all running). The Deployment is an ordinary one, as a
//! user brings it: no tolerations, so the fake nodes must be Ready and
//! untainted.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node};
use kix_testkit::TestEnv;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};

#[tokio::test]
async fn server_side_apply_and_deployment_becomes_available() {
    let env = TestEnv::new("smoke").await.expect("control plane");
    let ssa = PatchParams::apply("kix-smoke");
    let ns = format!("{}-app", env.namespace);

    let namespaces: Api<Namespace> = Api::all(env.client.clone());
    let namespace: Namespace = serde_json::from_value(
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
    )
    .expect("namespace");
    namespaces
        .patch(&ns, &ssa, &Patch::Apply(&namespace))
        .await
        .expect("apply namespace");

    let configmaps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &ns);
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings"}, "data": {"greeting": "hello"}
    }))
    .expect("configmap");
    configmaps
        .patch("settings", &ssa, &Patch::Apply(&cm))
        .await
        .expect("apply configmap");
    assert_eq!(
        configmaps
            .get("settings")
            .await
            .expect("get")
            .data
            .expect("data")["greeting"],
        "hello"
    );

    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), &ns);
    let deploy: Deployment = serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [{"name": "web", "image": "example.invalid/web:1"}]
                }
            }
        }
    }))
    .expect("deployment");
    deployments
        .patch("web", &ssa, &Patch::Apply(&deploy))
        .await
        .expect("apply deployment");

    let available = await_condition(
        deployments.clone(),
        "web",
        conditions::is_deployment_completed(),
    );
    let done = tokio::time::timeout(Duration::from_secs(90), available).await;
    let deploy = deployments.get("web").await.expect("get deployment");
    let status = deploy.status.unwrap_or_default();
    assert!(
        done.is_ok() && status.available_replicas == Some(2),
        "Deployment web never became Available (status {status:?}); needs controller-manager, scheduler and KWOK"
    );
    kix_testkit::delete_namespace(&env.client, &ns)
        .await
        .expect("cleanup");
}

#[tokio::test]
async fn the_fake_nodes_are_ready_and_untainted() {
    let client = kix_testkit::client().await.expect("control plane");
    let nodes: Api<Node> = Api::all(client);
    let nodes = nodes
        .list(&ListParams::default().labels("type=kwok"))
        .await
        .expect("list nodes")
        .items;
    assert_eq!(nodes.len(), 2, "the control plane has two KWOK nodes");
    for node in nodes {
        let name = node.metadata.name.clone().unwrap_or_default();
        let spec = node.spec.unwrap_or_default();
        assert_eq!(
            spec.taints.unwrap_or_default(),
            vec![],
            "node {name} is tainted: Pods without tolerations would not schedule there (`checks/control-plane up` takes the not-ready taint off)"
        );
        let ready = node
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "Ready");
        assert_eq!(
            ready.as_ref().map(|c| c.status.as_str()),
            Some("True"),
            "node {name} is not Ready: {ready:?}"
        );
    }
}

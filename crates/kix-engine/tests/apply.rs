//! Apply against the real control plane: ownership labels and annotations,
//! order (CRDs and Namespaces first, packages by dependency once healthy), the
//! digest fast path (an unchanged redeploy writes nothing), and reconcile.

mod common;

use std::time::Duration;

use common::*;
use kix_engine::deploy::Event;
use kix_engine::order::Group;
use kix_testkit::audit;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::json;

#[tokio::test]
async fn applied_objects_carry_ownership_labels_and_annotations() {
    let kit = Kit::new("apply-labels").await;
    let built = kit.build(&[
        Pkg::new("base", &[configmap("cfg", &[("k", "v")])]),
        Pkg::new("web", &[deployment("web", true)]).depends_on(&["base"]),
    ]);
    let outcome = kit.deploy(&built).await;
    let activation = outcome.activation.clone().expect("activation");
    assert_eq!(activation, format!("{}-1", kit.cluster()));

    for (api_version, kind, group, name, package) in [
        ("v1", "ConfigMap", "", "cfg", "base"),
        ("apps/v1", "Deployment", "apps", "web", "web"),
    ] {
        let live = kit.get(api_version, kind, name).await.expect("applied");
        let labels = &live["metadata"]["labels"];
        let annotations = &live["metadata"]["annotations"];
        assert_eq!(labels["app.kubernetes.io/managed-by"], "kix", "{live:#}");
        assert_eq!(labels["kix.run/package"], package, "{live:#}");
        assert_eq!(
            labels["kix.run/owner"],
            kix_api::owner_value(group, kind, Some(kit.ns()), name),
            "{live:#}"
        );
        let digest = annotations["kix.run/digest"].as_str().expect("digest");
        assert_eq!(digest.len(), 64, "a sha256 digest: {digest}");
        assert_eq!(
            annotations["kix.run/activations"],
            activation.as_str(),
            "{live:#}"
        );
        // Applied by the Kix cluster's own field manager with server-side apply.
        assert!(
            live["metadata"]["managedFields"]
                .as_array()
                .expect("managedFields")
                .iter()
                .any(|m| m["manager"] == format!("kix/{}", kit.cluster())
                    && m["operation"] == "Apply"),
            "{live:#}"
        );
    }
    // The digest is what the plan expects (the fast path).
    let plan = kit.plan(&built, &Default::default()).await;
    for d in &plan.desired {
        let live = kit
            .get(&d.api_version, &d.key.kind, &d.key.name)
            .await
            .expect("live");
        assert_eq!(
            live["metadata"]["annotations"]["kix.run/digest"],
            d.digest.as_str()
        );
    }
    kit.cleanup().await;
}

#[tokio::test]
async fn order_crds_namespaces_then_packages_by_dependency_once_healthy() {
    let mut kit = Kit::new("apply-order").await;
    let extra = kit.extra_ns("x");
    // kix.json lists b first although b depends on a; the Namespace lives in b.
    let built = kit.build(&[
        Pkg::new("b", &[configmap("b-cfg", &[("k", "v")]), namespace(&extra)]).depends_on(&["a"]),
        Pkg::new(
            "a",
            &[
                deployment("a-web", true),
                configmap_in(&extra, "a-cfg", &[("k", "v")]),
            ],
        ),
    ]);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut options = kit.options();
    options.events = Some(tx);
    let mark = audit::mark().expect("mark");
    kit.deploy_opts(&built, &options).await;
    drop(options);
    let mut events = vec![];
    while let Ok(e) = rx.try_recv() {
        events.push(e);
    }
    let requests: Vec<_> = kit.writes(mark);
    let at = |resource: &str, name: &str| {
        position(&requests, |r| {
            r.resource == resource && r.name.as_deref() == Some(name)
        })
        .unwrap_or_else(|| panic!("no write of {resource} {name}:\n{}", describe(&requests)))
    };
    let ns_at = at("namespaces", &extra);
    let a_web = at("deployments", "a-web");
    let a_cfg = at("configmaps", "a-cfg");
    let b_cfg = at("configmaps", "b-cfg");
    assert!(
        ns_at < a_cfg && ns_at < a_web,
        "Namespace first:\n{}",
        describe(&requests)
    );
    assert!(
        a_cfg < a_web,
        "ConfigMaps before workloads:\n{}",
        describe(&requests)
    );
    assert!(
        a_web < b_cfg,
        "package a before b:\n{}",
        describe(&requests)
    );

    // b started only once a was healthy.
    let healthy_a = events
        .iter()
        .position(
            |e| matches!(e, Event::Healthy { group, .. } if *group == Group::Package("a".into())),
        )
        .unwrap_or_else(|| panic!("package a never healthy: {events:#?}"));
    let applied_b = events
        .iter()
        .position(|e| matches!(e, Event::Applied { key, .. } if key.contains("b-cfg")))
        .unwrap_or_else(|| panic!("b-cfg never applied: {events:#?}"));
    assert!(healthy_a < applied_b, "{events:#?}");
    let live = kit
        .get("apps/v1", "Deployment", "a-web")
        .await
        .expect("a-web");
    assert!(
        live["status"]["availableReplicas"].as_i64().unwrap_or(0) >= 1,
        "a-web is Available: {live:#}"
    );
    kit.cleanup().await;
}

/// Packages that do not depend on each other deploy together (one wave);
/// a dependent waits for its dependency's health.
#[tokio::test]
async fn independent_packages_deploy_together_and_dependents_wait() {
    let kit = Kit::new("apply-waves").await;
    let built = kit.build(&[
        Pkg::new("a", &[deployment("a-web", true)]),
        Pkg::new("b", &[configmap("b-cfg", &[("k", "v")])]),
        Pkg::new("c", &[configmap("c-cfg", &[("k", "v")])]).depends_on(&["a"]),
    ]);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut options = kit.options();
    options.events = Some(tx);
    kit.deploy_opts(&built, &options).await;
    drop(options);
    let mut events = vec![];
    while let Ok(e) = rx.try_recv() {
        events.push(e);
    }
    let position = |what: &str, found: &dyn Fn(&Event) -> bool| {
        events
            .iter()
            .position(found)
            .unwrap_or_else(|| panic!("{what} not seen: {events:#?}"))
    };
    let healthy_a = position(
        "package a healthy",
        &|e| matches!(e, Event::Healthy { group, .. } if *group == Group::Package("a".into())),
    );
    let applied_b = position(
        "b-cfg applied",
        &|e| matches!(e, Event::Applied { group, key, .. } if *group == Group::Package("b".into()) && key.contains("b-cfg")),
    );
    let applied_c = position(
        "c-cfg applied",
        &|e| matches!(e, Event::Applied { group, key, .. } if *group == Group::Package("c".into()) && key.contains("c-cfg")),
    );
    // The Deployment takes the controllers a while; b does not wait for it.
    assert!(applied_b < healthy_a, "b applies beside a: {events:#?}");
    assert!(healthy_a < applied_c, "c waits for a: {events:#?}");
    kit.cleanup().await;
}

#[tokio::test]
async fn an_unchanged_redeploy_makes_no_write_request() {
    let mut kit = Kit::new("apply-noop").await;
    let extra = kit.extra_ns("noop");
    let built = kit.build(&[
        Pkg::new(
            "a",
            &[
                namespace(&extra),
                configmap("cfg", &[("k", "v")]),
                deployment("web", true),
            ],
        ),
        Pkg::new("b", &[configmap("b-cfg", &[("k", "v")])]).depends_on(&["a"]),
    ]);
    let first = kit.deploy(&built).await;
    assert!(!first.no_op);

    let mark = audit::mark().expect("mark");
    let second = kit.deploy(&built).await;
    let requests = kit.requests(mark);
    let writes: Vec<_> = requests.iter().filter(|r| r.is_write()).cloned().collect();
    assert!(
        writes.is_empty(),
        "an unchanged redeploy wrote:\n{}",
        describe(&writes)
    );
    assert!(second.no_op, "{second:?}");
    assert_eq!((second.applied, second.unchanged), (0, 4), "{second:?}");
    assert_eq!(second.activation, first.activation);
    assert!(
        !requests.iter().any(|r| r.resource == "leases"),
        "not even the lease is touched:\n{}",
        describe(&requests)
    );
    assert_eq!(kit.records().await.len(), 1, "no new record");
    kit.cleanup().await;
}

#[tokio::test]
async fn a_redeploy_with_one_change_writes_only_that_object() {
    let kit = Kit::new("apply-one").await;
    let objects = |v: &str| {
        vec![
            configmap("one", &[("k", "1")]),
            configmap("two", &[("k", v)]),
            configmap("three", &[("k", "3")]),
            deployment("web", true),
        ]
    };
    kit.deploy(&kit.simple(&objects("2"))).await;
    let changed = kit.simple(&objects("2-changed"));
    let mark = audit::mark().expect("mark");
    let outcome = kit.deploy(&changed).await;
    assert!(!outcome.no_op);
    assert_eq!((outcome.applied, outcome.unchanged), (1, 3), "{outcome:?}");
    let writes = kit.writes(mark);
    let objects: Vec<_> = writes
        .iter()
        .filter(|r| {
            !matches!(
                r.resource.as_str(),
                "activations" | "packageinstances" | "leases"
            )
        })
        .collect();
    assert_eq!(
        objects
            .iter()
            .map(|r| (r.resource.as_str(), r.name.as_deref().unwrap_or("")))
            .collect::<Vec<_>>(),
        [("configmaps", "two")],
        "writes:\n{}",
        describe(&writes)
    );
    assert_eq!(kit.cm_value("two", "k").await.as_deref(), Some("2-changed"));
    let live = kit.get("v1", "ConfigMap", "two").await.expect("two");
    assert_eq!(
        live["metadata"]["annotations"]["kix.run/activations"],
        format!("{}-2", kit.cluster())
    );
    kit.cleanup().await;
}

#[tokio::test]
async fn reconcile_reapplies_out_of_band_edits_the_digest_fast_path_does_not() {
    let kit = Kit::new("apply-reconcile").await;
    let built = kit.simple(&[
        configmap("cfg", &[("x", "1"), ("y", "1")]),
        configmap("untouched", &[("k", "v")]),
    ]);
    kit.deploy(&built).await;

    // Someone edits the object (like `kubectl edit`: a merge patch by another
    // field manager).
    let cms: Api<DynamicObject> = Api::namespaced_with(
        kit.env.client.clone(),
        kit.ns(),
        &resource("v1", "ConfigMap"),
    );
    let edit = PatchParams {
        field_manager: Some("kubectl-edit".into()),
        ..Default::default()
    };
    cms.patch(
        "cfg",
        &edit,
        &Patch::Merge(&json!({"data": {"x": "edited", "extra": "added"}})),
    )
    .await
    .expect("out-of-band edit");

    // The plain redeploy trusts the digest: nothing to do.
    let plain = kit.deploy(&built).await;
    assert!(plain.no_op, "{plain:?}");
    assert_eq!(kit.cm_value("cfg", "x").await.as_deref(), Some("edited"));

    // Reconcile compares with the live state and re-applies the drift.
    let plan = kit
        .plan(
            &built,
            &kix_engine::plan::PlanOptions {
                reconcile: true,
                prune: true,
                ..Default::default()
            },
        )
        .await;
    let cfg = plan
        .objects()
        .find(|o| o.key.name == "cfg")
        .expect("cfg planned");
    assert_eq!(cfg.action, kix_engine::plan::Action::Update, "{cfg:#?}");
    assert!(
        cfg.changes.iter().any(|c| c.path == "data.x"),
        "{:#?}",
        cfg.changes
    );
    let untouched = plan
        .objects()
        .find(|o| o.key.name == "untouched")
        .expect("planned");
    assert_eq!(untouched.action, kix_engine::plan::Action::Unchanged);

    let mark = audit::mark().expect("mark");
    let outcome = kit
        .try_deploy_with(&built, true, &kit.options())
        .await
        .unwrap_or_else(|e| panic!("reconcile deploy: {e}"));
    assert_eq!(outcome.phase, kix_api::Phase::Active, "{outcome:?}");
    assert_eq!(kit.cm_value("cfg", "x").await.as_deref(), Some("1"));
    let writes = kit.writes(mark);
    assert!(
        !writes
            .iter()
            .any(|r| r.name.as_deref() == Some("untouched")),
        "undrifted objects are not rewritten:\n{}",
        describe(&writes)
    );

    // Converged: reconcile finds nothing more.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let again = kit
        .try_deploy_with(&built, true, &kit.options())
        .await
        .expect("second reconcile");
    assert!(again.no_op, "{again:?}");
    kit.cleanup().await;
}

#[tokio::test]
async fn reconcile_finds_no_drift_in_what_it_just_applied() {
    let kit = Kit::new("apply-reconcile-clean").await;
    // Fields the apiserver defaults or normalises: quantities, ports,
    // Secret stringData (stored as data), an int-or-string targetPort.
    let built = kit.simple(&[
        deployment_with(
            "web",
            true,
            &json!({"template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                "containers": [{"name": "main", "image": "example.invalid/app:1",
                    "ports": [{"containerPort": 8080}],
                    "resources": {"requests": {"cpu": "0.5", "memory": "1Gi"},
                                  "limits": {"cpu": "1000m"}}}]}}}),
        ),
        yaml(
            &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}}),
        ),
        yaml(
            &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"},
            "stringData": {"password": "s3cret"}, "data": {"raw": "cmF3"}}),
        ),
    ]);
    kit.deploy(&built).await;
    let plan = kit
        .plan(
            &built,
            &kix_engine::plan::PlanOptions {
                reconcile: true,
                prune: true,
                ..Default::default()
            },
        )
        .await;
    let drifted: Vec<_> = plan
        .objects()
        .filter(|o| o.action != kix_engine::plan::Action::Unchanged)
        .map(|o| (o.key.to_string(), o.note.clone()))
        .collect();
    assert!(drifted.is_empty(), "false drift: {drifted:#?}");
    let mark = audit::mark().expect("mark");
    let outcome = kit
        .try_deploy_with(&built, true, &kit.options())
        .await
        .expect("reconcile deploy");
    assert!(outcome.no_op, "{outcome:?}");
    let writes = kit.writes(mark);
    assert!(writes.is_empty(), "{}", describe(&writes));
    kit.cleanup().await;
}

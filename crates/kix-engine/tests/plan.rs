//! The plan against the real control plane: every action (create, update with
//! a field-level diff, unchanged, delete, replace, adopt, conflict), Secret
//! redaction, a custom resource whose CRD is in the same build, and what the
//! plan costs the apiserver (no writes, one LIST per kind).

mod common;

use std::collections::BTreeMap;

use common::*;
use kix_engine::EngineError;
use kix_engine::plan::{Action, Plan, PlanOptions, PlannedObject};
use kix_testkit::audit;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

fn prune() -> PlanOptions {
    PlanOptions {
        prune: true,
        ..PlanOptions::default()
    }
}

fn find<'a>(plan: &'a Plan, kind: &str, name: &str) -> &'a PlannedObject {
    plan.objects()
        .find(|o| o.key.kind == kind && o.key.name == name)
        .unwrap_or_else(|| panic!("{kind} {name} not in the plan: {plan:#?}"))
}

#[tokio::test]
async fn create_update_unchanged_delete_with_field_diff_and_no_writes() {
    let kit = Kit::new("plan-actions").await;
    let first = kit.simple(&[
        configmap("changed", &[("x", "1"), ("same", "s")]),
        configmap("same", &[("k", "v")]),
        configmap("dropped", &[("k", "v")]),
    ]);
    let plan = kit.plan(&first, &prune()).await;
    for name in ["changed", "same", "dropped"] {
        assert_eq!(find(&plan, "ConfigMap", name).action, Action::Create);
    }
    assert_eq!(plan.counts.create, 3);
    assert!(plan.has_changes());
    kit.deploy(&first).await;

    let second = kit.simple(&[
        configmap("changed", &[("x", "2"), ("same", "s")]),
        configmap("same", &[("k", "v")]),
        configmap("new", &[("k", "v")]),
    ]);
    let mark = audit::mark().expect("audit mark");
    let plan = kit.plan(&second, &prune()).await;
    let writes = kit.writes(mark);
    assert!(writes.is_empty(), "plan wrote:\n{}", describe(&writes));
    // The live object the diff starts from is read at the version the LIST
    // saw (from the apiserver's cache), not with a read from etcd.
    let reads: Vec<_> = kit
        .requests(mark)
        .into_iter()
        .filter(|r| r.verb == "get" && r.name.as_deref() == Some("changed"))
        .collect();
    assert!(
        !reads.is_empty() && reads.iter().all(|r| r.uri.contains("resourceVersion=")),
        "{reads:#?}"
    );

    let changed = find(&plan, "ConfigMap", "changed");
    assert_eq!(changed.action, Action::Update);
    let data_changes: Vec<_> = changed
        .changes
        .iter()
        .filter(|c| c.path.starts_with("data"))
        .collect();
    assert_eq!(data_changes.len(), 1, "{:#?}", changed.changes);
    assert_eq!(data_changes[0].path, "data.x");
    assert_eq!(data_changes[0].old, Some(json!("1")));
    assert_eq!(data_changes[0].new, Some(json!("2")));
    assert_eq!(find(&plan, "ConfigMap", "same").action, Action::Unchanged);
    assert_eq!(find(&plan, "ConfigMap", "new").action, Action::Create);
    let dropped = find(&plan, "ConfigMap", "dropped");
    assert_eq!(dropped.action, Action::Delete);
    assert!(!dropped.destructive);
    assert!(plan.prune.iter().any(|o| o.key.name == "dropped"));
    assert_eq!(
        (
            plan.counts.create,
            plan.counts.update,
            plan.counts.unchanged,
            plan.counts.delete
        ),
        (1, 1, 1, 1)
    );

    // Without prune, the dropped object is not planned at all.
    let plan = kit.plan(&second, &PlanOptions::default()).await;
    assert!(plan.prune.is_empty(), "{:#?}", plan.prune);

    // Once deployed, the same build plans no change.
    kit.deploy(&second).await;
    let plan = kit.plan(&second, &prune()).await;
    assert!(!plan.has_changes(), "{plan:#?}");
    assert!(plan.objects().all(|o| o.action == Action::Unchanged));
    kit.cleanup().await;
}

#[tokio::test]
async fn immutable_field_plans_a_replace_naming_the_field() {
    let kit = Kit::new("plan-replace").await;
    let first = kit.simple(&[deployment_with(
        "web",
        true,
        &json!({"selector": {"matchLabels": {"app": "web"}}}),
    )]);
    kit.deploy(&first).await;
    let uid = kit
        .get("apps/v1", "Deployment", "web")
        .await
        .expect("deployed")["metadata"]["uid"]
        .clone();

    // A different selector (and matching template labels): immutable.
    let second = kit.simple(&[yaml(&json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web", "tier": "front"}},
            "template": {
                "metadata": {"labels": {"app": "web", "tier": "front"}},
                "spec": {"containers": [{"name": "main", "image": "example.invalid/app:1"}]}
            }
        }
    }))]);
    let mark = audit::mark().expect("mark");
    let plan = kit.plan(&second, &prune()).await;
    let web = find(&plan, "Deployment", "web");
    assert_eq!(web.action, Action::Replace, "{web:#?}");
    assert!(
        web.fields.iter().any(|f| f.contains("spec.selector")),
        "the field path is named: {:?}",
        web.fields
    );
    assert_eq!(plan.counts.replace, 1);
    assert!(
        plan.needs_acceptance()
            .iter()
            .any(|a| a.contains("replace") && a.contains("spec.selector")),
        "{:?}",
        plan.needs_acceptance()
    );

    // Refused without --accept-migrations, before any change.
    let err = expect_err(kit.try_deploy(&second, &kit.options()).await);
    assert!(matches!(err, EngineError::NeedsAcceptance(_)), "{err}");
    assert!(err.to_string().contains("spec.selector"), "{err}");
    let writes = kit.writes(mark);
    assert!(
        writes.is_empty(),
        "refused deploy wrote:\n{}",
        describe(&writes)
    );

    let mut options = kit.options();
    options.accept_migrations = true;
    kit.deploy_opts(&second, &options).await;
    let live = kit
        .get("apps/v1", "Deployment", "web")
        .await
        .expect("replaced");
    assert_ne!(live["metadata"]["uid"], uid, "replaced means a new object");
    assert_eq!(live["spec"]["selector"]["matchLabels"]["tier"], "front");
    let record = kit.records().await.pop().expect("record");
    assert!(
        record
            .spec
            .receipt
            .accepted
            .actions
            .iter()
            .any(|m| m.contains("replace")),
        "{:?}",
        record.spec.receipt
    );
    kit.cleanup().await;
}

#[tokio::test]
async fn an_unlabelled_object_is_adopted_after_acceptance() {
    let kit = Kit::new("plan-adopt").await;
    let cms: Api<DynamicObject> = Api::namespaced_with(
        kit.env.client.clone(),
        kit.ns(),
        &resource("v1", "ConfigMap"),
    );
    let existing: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "legacy", "labels": {"team": "x"}},
        "data": {"x": "old", "other": "kept?"}
    }))
    .expect("cm");
    cms.create(&PostParams::default(), &existing)
        .await
        .expect("create unlabelled");

    let built = kit.simple(&[configmap("legacy", &[("x", "new")])]);
    let plan = kit.plan(&built, &prune()).await;
    let legacy = find(&plan, "ConfigMap", "legacy");
    assert_eq!(legacy.action, Action::Adopt, "{legacy:#?}");
    assert!(
        legacy.changes.iter().any(|c| c.path == "data.x"
            && c.old == Some(json!("old"))
            && c.new == Some(json!("new"))),
        "{:#?}",
        legacy.changes
    );
    assert_eq!(plan.counts.adopt, 1);

    let err = expect_err(kit.try_deploy(&built, &kit.options()).await);
    assert!(matches!(err, EngineError::NeedsAcceptance(_)), "{err}");
    assert_eq!(kit.cm_value("legacy", "x").await.as_deref(), Some("old"));
    assert!(kit.records().await.is_empty(), "nothing recorded");

    let mut options = kit.options();
    options.accept_migrations = true;
    kit.deploy_opts(&built, &options).await;
    let live = kit.get("v1", "ConfigMap", "legacy").await.expect("cm");
    assert_eq!(live["data"]["x"], "new");
    assert_eq!(
        live["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "kix"
    );
    assert_eq!(
        live["metadata"]["labels"]["kix.run/owner"],
        kix_api::owner_value("", "ConfigMap", Some(kit.ns()), "legacy")
    );
    // Now owned: the next plan of the same build changes nothing.
    let plan = kit.plan(&built, &prune()).await;
    assert_eq!(find(&plan, "ConfigMap", "legacy").action, Action::Unchanged);
    kit.cleanup().await;
}

#[tokio::test]
async fn a_field_of_another_manager_is_a_conflict_until_forced() {
    let kit = Kit::new("plan-conflict").await;
    let first = kit.simple(&[configmap("shared", &[("x", "1"), ("y", "1")])]);
    kit.deploy(&first).await;

    // Another field manager takes data.x with server-side apply.
    let cms: Api<DynamicObject> = Api::namespaced_with(
        kit.env.client.clone(),
        kit.ns(),
        &resource("v1", "ConfigMap"),
    );
    let theirs = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "shared"}, "data": {"x": "theirs"}});
    cms.patch(
        "shared",
        &PatchParams::apply("other").force(),
        &Patch::Apply(&theirs),
    )
    .await
    .expect("other manager applies data.x");

    let second = kit.simple(&[configmap("shared", &[("x", "2"), ("y", "2")])]);
    let mark = audit::mark().expect("mark");
    let plan = kit.plan(&second, &prune()).await;
    let shared = find(&plan, "ConfigMap", "shared");
    assert_eq!(shared.action, Action::Conflict, "{shared:#?}");
    let fields = shared.fields.join(" ");
    assert!(
        fields.contains("other") && fields.contains("data.x"),
        "names the manager and the field: {fields}"
    );
    assert_eq!(plan.conflicts().len(), 1);

    let err = expect_err(kit.try_deploy(&second, &kit.options()).await);
    assert!(matches!(err, EngineError::Conflicts(_)), "{err}");
    let writes = kit.writes(mark);
    assert!(
        writes.is_empty(),
        "refused deploy wrote:\n{}",
        describe(&writes)
    );
    assert_eq!(kit.cm_value("shared", "x").await.as_deref(), Some("theirs"));
    assert_eq!(kit.cm_value("shared", "y").await.as_deref(), Some("1"));

    let mut options = kit.options();
    options.force_conflicts = true;
    let plan = kit
        .plan(
            &second,
            &PlanOptions {
                force_conflicts: true,
                prune: true,
                ..Default::default()
            },
        )
        .await;
    assert_eq!(find(&plan, "ConfigMap", "shared").action, Action::Update);
    kit.deploy_opts(&second, &options).await;
    assert_eq!(kit.cm_value("shared", "x").await.as_deref(), Some("2"));
    assert_eq!(kit.cm_value("shared", "y").await.as_deref(), Some("2"));
    let live = kit.get("v1", "ConfigMap", "shared").await.expect("cm");
    let managers: BTreeMap<String, String> = live["metadata"]["managedFields"]
        .as_array()
        .expect("managedFields")
        .iter()
        .map(|m| {
            (
                m["manager"].as_str().unwrap_or_default().to_string(),
                m["fieldsV1"].to_string(),
            )
        })
        .collect();
    assert!(
        managers[&format!("kix/{}", kit.cluster())].contains("f:x"),
        "kix owns data.x: {managers:?}"
    );
    assert!(
        !managers.get("other").is_some_and(|f| f.contains("f:x")),
        "the other manager lost data.x: {managers:?}"
    );
    kit.cleanup().await;
}

#[tokio::test]
async fn secret_values_never_appear_in_the_plan() {
    let kit = Kit::new("plan-secret").await;
    // base64 of "hunter2-old" and "hunter2-new"
    let old_b64 = "aHVudGVyMi1vbGQ=";
    let new_b64 = "aHVudGVyMi1uZXc=";
    let secret = |data: serde_json::Value| {
        yaml(
            &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"},
            "type": "Opaque", "data": data}),
        )
    };
    let first = kit.simple(&[secret(json!({"password": old_b64}))]);
    kit.deploy(&first).await;

    // Adoption of an existing unlabelled Secret shows its diff too.
    let secrets: Api<DynamicObject> =
        Api::namespaced_with(kit.env.client.clone(), kit.ns(), &resource("v1", "Secret"));
    let unlabelled: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "legacy"},
        "stringData": {"key": "legacy-plaintext-value"}
    }))
    .expect("secret");
    secrets
        .create(&PostParams::default(), &unlabelled)
        .await
        .expect("create secret");
    // Update: the value changes and a stringData key appears; adopt: new value.
    let second = kit.simple(&[
        yaml(&json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "creds"}, "type": "Opaque",
            "data": {"password": new_b64}, "stringData": {"token": "plaintext-token-value"}})),
        yaml(&json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "legacy"}, "stringData": {"key": "adopted-plaintext-value"}})),
    ]);
    let plan = kit.plan(&second, &prune()).await;
    let creds = find(&plan, "Secret", "creds");
    assert_eq!(creds.action, Action::Update);
    assert!(
        creds.changes.iter().any(|c| c.path.starts_with("data")),
        "the change is shown (redacted): {:#?}",
        creds.changes
    );
    assert_eq!(find(&plan, "Secret", "legacy").action, Action::Adopt);
    let text = serde_json::to_string(&plan).expect("plan json");
    let debug = format!("{plan:?}")
        .split("desired:")
        .next()
        .unwrap_or_default()
        .to_string();
    for secret_text in [
        old_b64,
        new_b64,
        "hunter2",
        "plaintext-token-value",
        "cGxhaW50ZXh0LXRva2VuLXZhbHVl", // base64 of the token
        "legacy-plaintext-value",
        "bGVnYWN5LXBsYWludGV4dC12YWx1ZQ==",
        "adopted-plaintext-value",
        "YWRvcHRlZC1wbGFpbnRleHQtdmFsdWU=",
    ] {
        assert!(
            !text.contains(secret_text),
            "{secret_text} in plan JSON: {text}"
        );
        assert!(
            !debug.contains(secret_text),
            "{secret_text} in the plan's objects: {debug}"
        );
    }
    assert!(text.contains(kix_engine::diff::REDACTED), "{text}");
    kit.cleanup().await;
}

#[tokio::test]
async fn a_custom_resource_whose_crd_is_in_the_build_plans_and_deploys() {
    let mut kit = Kit::new("plan-crd").await;
    let group = format!("{}.example.com", kit.ns());
    let crd_name = format!("widgets.{group}");
    kit.crds.push(crd_name.clone());
    let crd = yaml(&json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": crd_name},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}}}}]
        }
    }));
    let widget = |size: i64| {
        yaml(
            &json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
            "metadata": {"name": "w1"}, "spec": {"size": size}}),
        )
    };
    // The CRD sits in the last package: it is still applied first.
    let first = kit.build(&[
        Pkg::new("app", &[widget(1), configmap("cfg", &[("k", "v")])]),
        Pkg::new("crds", std::slice::from_ref(&crd)),
    ]);
    let mark = audit::mark().expect("mark");
    let plan = kit.plan(&first, &prune()).await;
    assert!(kit.writes(mark).is_empty());
    assert_eq!(
        find(&plan, "CustomResourceDefinition", &crd_name).action,
        Action::Create
    );
    let w = find(&plan, "Widget", "w1");
    assert_eq!(w.action, Action::Create);
    assert_eq!(w.key.namespace.as_deref(), Some(kit.ns()));

    let mark = audit::mark().expect("mark");
    kit.deploy(&first).await;
    let requests = kit.requests(mark);
    let crd_at = position(&requests, |r| {
        r.is_write()
            && r.resource == "customresourcedefinitions"
            && r.name.as_deref() == Some(crd_name.as_str())
    })
    .expect("CRD applied");
    let widget_at =
        position(&requests, |r| r.is_write() && r.resource == "widgets").expect("widget applied");
    assert!(
        crd_at < widget_at,
        "CRD before its resource:\n{}",
        describe(&requests)
    );
    let live = kit
        .get_in(&format!("{group}/v1"), "Widget", Some(kit.ns()), "w1")
        .await
        .expect("widget exists");
    assert_eq!(live["spec"]["size"], 1);
    let crd_live = kit
        .get_in(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            None,
            &crd_name,
        )
        .await
        .expect("crd");
    assert!(
        crd_live["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Established" && c["status"] == "True"),
        "{crd_live:#}"
    );

    // With the CRD installed, the custom resource is diffed like any object.
    let second = kit.build(&[
        Pkg::new("app", &[widget(2), configmap("cfg", &[("k", "v")])]),
        Pkg::new("crds", &[crd]),
    ]);
    let plan = kit.plan(&second, &prune()).await;
    let w = find(&plan, "Widget", "w1");
    assert_eq!(w.action, Action::Update);
    assert!(
        w.changes.iter().any(|c| c.path == "spec.size"),
        "{:#?}",
        w.changes
    );
    assert_eq!(
        find(&plan, "CustomResourceDefinition", &crd_name).action,
        Action::Unchanged
    );
    kit.deploy(&second).await;
    assert_eq!(
        kit.get_in(&format!("{group}/v1"), "Widget", Some(kit.ns()), "w1")
            .await
            .expect("w")["spec"]["size"],
        2
    );
    kit.cleanup().await;
}

#[tokio::test]
async fn one_list_per_kind_and_no_get_per_object() {
    let kit = Kit::new("plan-lists").await;
    let cms: Vec<String> = (0..50)
        .map(|i| configmap(&format!("cm-{i:02}"), &[("i", &i.to_string())]))
        .collect();
    let built = kit.simple(&cms);

    // All new.
    let mark = audit::mark().expect("mark");
    let plan = kit.plan(&built, &prune()).await;
    assert_eq!(plan.counts.create, 50);
    check_requests(&kit, mark, "planning 50 new ConfigMaps");

    kit.deploy(&built).await;
    // All unchanged.
    let mark = audit::mark().expect("mark");
    let plan = kit.plan(&built, &prune()).await;
    assert_eq!(plan.counts.unchanged, 50, "{:?}", plan.counts);
    check_requests(&kit, mark, "planning 50 unchanged ConfigMaps");
    let dry_runs = kit.requests(mark).into_iter().filter(|r| r.dry_run).count();
    assert_eq!(dry_runs, 0, "unchanged objects are not dry-run");

    // Reconcile mode: still one LIST per kind, not one GET per object.
    let mark = audit::mark().expect("mark");
    let plan = kit
        .plan(
            &built,
            &PlanOptions {
                reconcile: true,
                prune: true,
                ..Default::default()
            },
        )
        .await;
    assert_eq!(plan.counts.unchanged, 50, "{:?}", plan.counts);
    check_requests(&kit, mark, "planning 50 ConfigMaps with reconcile");
    kit.cleanup().await;
}

fn check_requests(kit: &Kit, mark: audit::Mark, what: &str) {
    // Reconcile mode's LIST of whole objects is paged: another kix test's
    // thousands of ConfigMaps on the shared control plane make more pages
    // of one LIST, not more LISTs.
    let requests: Vec<_> = kit
        .requests(mark)
        .into_iter()
        .filter(|r| !r.is_next_page())
        .collect();
    let mut lists: BTreeMap<String, usize> = BTreeMap::new();
    for r in requests.iter().filter(|r| r.verb == "list") {
        *lists.entry(r.resource.clone()).or_default() += 1;
    }
    assert!(
        lists.values().all(|n| *n <= 2),
        "{what}: more than two LISTs of a kind: {lists:?}\n{}",
        describe(&requests)
    );
    let cm_gets = requests
        .iter()
        .filter(|r| r.verb == "get" && r.resource == "configmaps")
        .count();
    assert_eq!(
        cm_gets,
        0,
        "{what}: GET per object:\n{}",
        describe(&requests)
    );
    let writes: Vec<_> = requests.iter().filter(|r| r.is_write()).cloned().collect();
    assert!(writes.is_empty(), "{what}: writes:\n{}", describe(&writes));
    // Besides the dry-runs of changed objects, a handful of requests whatever
    // the number of objects.
    let other = requests.iter().filter(|r| !r.dry_run).count();
    assert!(
        other < 15,
        "{what}: {other} requests:\n{}",
        describe(&requests)
    );
}

#[tokio::test]
async fn a_kind_the_build_moves_to_another_version_is_listed_and_pruned_through_it() {
    // The kinds the records name are listed while the build is read; a kind
    // the build now names through another version is listed again through
    // that one.
    let mut kit = Kit::new("plan-version").await;
    let group = format!("{}.example.com", kit.ns());
    let crd_name = format!("gadgets.{group}");
    kit.crds.push(crd_name.clone());
    let schema = json!({"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}}});
    let crd = yaml(&json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": crd_name},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {"kind": "Gadget", "plural": "gadgets", "singular": "gadget", "listKind": "GadgetList"},
            "versions": [
                {"name": "v1beta1", "served": true, "storage": false, "schema": schema},
                {"name": "v1", "served": true, "storage": true, "schema": schema}]
        }
    }));
    let gadget = |version: &str, name: &str| {
        yaml(
            &json!({"apiVersion": format!("{group}/{version}"), "kind": "Gadget",
            "metadata": {"name": name}, "spec": {"size": 1}}),
        )
    };
    let first = kit.build(&[
        Pkg::new("app", &[gadget("v1beta1", "g1"), gadget("v1beta1", "g2")]),
        Pkg::new("crds", std::slice::from_ref(&crd)),
    ]);
    kit.deploy(&first).await;
    let second = kit.build(&[
        Pkg::new("app", &[gadget("v1", "g1")]),
        Pkg::new("crds", &[crd]),
    ]);
    let plan = kit.plan(&second, &prune()).await;
    let g1: Vec<_> = plan
        .packages
        .iter()
        .flat_map(|p| &p.objects)
        .chain(&plan.prune)
        .filter(|o| o.key.kind == "Gadget" && o.key.name == "g1")
        .collect();
    assert_eq!(g1.len(), 1, "g1 planned once: {g1:#?}");
    assert_eq!(g1[0].api_version, format!("{group}/v1"));
    let g2: Vec<_> = plan.prune.iter().filter(|o| o.key.name == "g2").collect();
    assert_eq!(g2.len(), 1, "g2 pruned: {:#?}", plan.prune);
    assert_eq!(g2[0].action, Action::Delete);
    assert_eq!(
        g2[0].api_version,
        format!("{group}/v1"),
        "pruned through the build's version"
    );
    kit.cleanup().await;
}

#[tokio::test]
async fn a_scoped_plan_reads_and_plans_only_the_objects_named() {
    // The operator's repair: the objects its watches saw change are read by
    // name; the rest of the build is taken as unchanged, unread.
    let kit = Kit::new("plan-only").await;
    let built = kit.simple(&[
        configmap("edited", &[("x", "1")]),
        configmap("unnamed", &[("x", "1")]),
        configmap("deleted", &[("x", "1")]),
    ]);
    kit.deploy(&built).await;
    let cms: Api<DynamicObject> = Api::namespaced_with(
        kit.env.client.clone(),
        kit.ns(),
        &resource("v1", "ConfigMap"),
    );
    let edit = PatchParams {
        field_manager: Some("kubectl-edit".into()),
        ..Default::default()
    };
    for name in ["edited", "unnamed"] {
        cms.patch(name, &edit, &Patch::Merge(&json!({"data": {"x": "2"}})))
            .await
            .expect("out-of-band edit");
    }
    cms.delete("deleted", &Default::default())
        .await
        .expect("delete");
    let key = |name: &str| kix_manifest::ObjectKey {
        group: String::new(),
        kind: "ConfigMap".into(),
        namespace: Some(kit.ns().to_string()),
        name: name.into(),
    };
    let only = [key("edited"), key("deleted"), key("never-built")];
    let options = PlanOptions {
        reconcile: true,
        prune: true,
        only: Some(only.into_iter().collect()),
        ..Default::default()
    };
    let mark = audit::mark().expect("mark");
    let plan = kit.plan(&built, &options).await;
    assert_eq!(find(&plan, "ConfigMap", "edited").action, Action::Update);
    assert_eq!(find(&plan, "ConfigMap", "deleted").action, Action::Create);
    assert_eq!(
        find(&plan, "ConfigMap", "unnamed").action,
        Action::Unchanged,
        "not named: not read"
    );
    assert!(plan.prune.is_empty(), "{:#?}", plan.prune);
    assert_eq!(plan.kinds, vec!["v1/ConfigMap".to_string()]);
    // No LIST of every ConfigMap: each named one is read by name.
    let requests = kit.requests(mark);
    let cm_reads: Vec<_> = requests
        .iter()
        .filter(|r| r.resource == "configmaps" && matches!(r.verb.as_str(), "list" | "get"))
        .collect();
    assert!(
        cm_reads
            .iter()
            .all(|r| r.name.is_some() || r.uri.contains("fieldSelector=metadata.name")),
        "{}",
        describe(&requests)
    );
    assert!(kit.writes(mark).is_empty(), "{}", describe(&requests));

    // The whole plan finds the edit of the object not named.
    let whole = PlanOptions {
        only: None,
        ..options
    };
    let plan = kit.plan(&built, &whole).await;
    assert_eq!(find(&plan, "ConfigMap", "unnamed").action, Action::Update);
    kit.cleanup().await;
}

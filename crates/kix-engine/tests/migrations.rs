//! Migrations and the PackageInstance lifecycle against the real control
//! plane: replaces forced by immutable fields (StatefulSet selector, Service
//! clusterIP, Job template), adoption of an existing ConfigMap (plain and by a
//! declared migration), a version jump that crosses two migrations in order,
//! refused deploys that write nothing, and the phases of PackageInstance
//! records (Pending, Installing, Upgrading, Ready, Failed, Removing, deleted).

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use futures::StreamExt;
use kix_api::{PackageInstance, PackagePhase, Phase};
use kix_engine::EngineError;
use kix_engine::plan::{Action, Plan, PlanOptions, PlannedObject};
use kix_manifest::ActionKind;
use kix_testkit::audit;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};

// ---------------------------------------------------------------- helpers

/// One package of a test build, with a version and migrations.
struct P {
    name: &'static str,
    version: &'static str,
    migrations: Value,
    resources: Vec<String>,
}

fn pkg(name: &'static str, version: &'static str, resources: Vec<String>) -> P {
    P {
        name,
        version,
        migrations: json!([]),
        resources,
    }
}

impl P {
    fn migrations(mut self, migrations: Value) -> P {
        self.migrations = migrations;
        self
    }
}

/// Writes the tree (packages in the test's namespace), adds it to the store
/// and reads it back.
fn build(kit: &Kit, packages: &[P]) -> Built {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().join("kix-migrations-test");
    std::fs::create_dir_all(&root).expect("mkdir");
    let names: Vec<&str> = packages.iter().map(|p| p.name).collect();
    std::fs::write(
        root.join("kix.json"),
        json!({"format": 1, "cluster": kit.cluster(), "packages": names, "settings": {}})
            .to_string(),
    )
    .expect("kix.json");
    for p in packages {
        let dir = root.join("packages").join(p.name);
        std::fs::create_dir_all(dir.join("resources")).expect("mkdir");
        std::fs::write(
            dir.join("package.json"),
            json!({"name": p.name, "version": p.version, "dependsOn": [], "namespace": kit.ns(),
                   "migrations": p.migrations})
            .to_string(),
        )
        .expect("package.json");
        for (i, yaml) in p.resources.iter().enumerate() {
            std::fs::write(dir.join("resources").join(format!("{i:03}.yaml")), yaml)
                .expect("resource");
        }
    }
    let path = kix_nix::add_to_store(&root).expect("nix-store --add");
    let build = kix_manifest::read_tree(
        std::path::Path::new(path.as_str()),
        &kix_manifest::ReadOptions::default(),
    )
    .unwrap_or_else(|e| panic!("reading {path}: {e}"));
    Built {
        path: path.to_string(),
        build,
    }
}

fn plan_options() -> PlanOptions {
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

fn accepting(kit: &Kit) -> kix_engine::deploy::DeployOptions {
    let mut options = kit.options();
    options.accept_migrations = true;
    options
}

async fn instance(kit: &Kit, package: &str) -> Option<PackageInstance> {
    Api::<PackageInstance>::all(kit.env.client.clone())
        .get_opt(&PackageInstance::name_for(kit.cluster(), package))
        .await
        .expect("get packageinstance")
}

async fn delete_instances(kit: &Kit) {
    let api: Api<PackageInstance> = Api::all(kit.env.client.clone());
    let _ = api
        .delete_collection(
            &Default::default(),
            &ListParams::default().labels(&kix_api::labels::cluster_selector(kit.cluster())),
        )
        .await;
}

async fn done(kit: Kit) {
    delete_instances(&kit).await;
    kit.cleanup().await;
}

fn uid(obj: &Value) -> String {
    obj["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The kix CRDs, so records can be watched before the first deploy.
async fn ensure_crds(client: &Client) {
    if kix_engine::records::crds_status(client)
        .await
        .expect("crds status")
        != kix_engine::records::CrdState::Current
    {
        kix_engine::records::install_crds(client)
            .await
            .expect("install crds");
    }
}

/// Watches objects (from the moment it returns) and keeps what `pick` makes
/// of each event (`None` for deletions).
struct Recorder<T> {
    seen: Arc<Mutex<Vec<T>>>,
    task: tokio::task::JoinHandle<()>,
}

impl<T: Clone + Send + 'static> Recorder<T> {
    async fn start<K>(
        api: Api<K>,
        config: watcher::Config,
        pick: fn(Option<&K>) -> Option<T>,
    ) -> Self
    where
        K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let out = seen.clone();
        let task = tokio::spawn(async move {
            let mut ready = Some(ready_tx);
            let mut stream = watcher(api, config).boxed();
            while let Some(event) = stream.next().await {
                let picked = match event {
                    Ok(watcher::Event::InitDone) => {
                        if let Some(tx) = ready.take() {
                            let _ = tx.send(());
                        }
                        continue;
                    }
                    Ok(watcher::Event::Apply(obj)) => pick(Some(&obj)),
                    Ok(watcher::Event::Delete(_)) => pick(None),
                    Ok(_) => continue,
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                };
                if let Some(p) = picked {
                    out.lock().expect("lock").push(p);
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(30), ready_rx)
            .await
            .expect("the watch was not established within 30 s")
            .expect("watch task");
        Recorder { seen, task }
    }

    /// Everything seen so far (after a short settle).
    async fn take(&self) -> Vec<T> {
        tokio::time::sleep(Duration::from_millis(700)).await;
        std::mem::take(&mut *self.seen.lock().expect("lock"))
    }
}

impl<T> Drop for Recorder<T> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Consecutive duplicates removed.
fn dedup<T: PartialEq>(mut v: Vec<T>) -> Vec<T> {
    v.dedup();
    v
}

fn statefulset(name: &str, app: &str) -> String {
    yaml(&json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app}},
                "spec": {"containers": [{"name": "main", "image": "example.invalid/db:1"}]}
            }
        }
    }))
}

fn service(name: &str, ip: &str) -> String {
    yaml(&json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"clusterIP": ip, "ports": [{"port": 80, "targetPort": 8080}], "selector": {"app": name}}
    }))
}

fn job(name: &str, image: &str) -> String {
    yaml(&json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {
            "suspend": true,
            "template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "main", "image": image}]}}
        }
    }))
}

/// Two cluster IPs no Service uses, from the static band at the bottom of the
/// service range (10.0.0.0/24), which the apiserver allocates from last.
async fn free_cluster_ips(client: &Client) -> (String, String) {
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::all(client.clone());
    let used: Vec<String> = services
        .list(&ListParams::default())
        .await
        .expect("list services")
        .items
        .into_iter()
        .filter_map(|s| s.spec?.cluster_ip)
        .collect();
    let start = std::process::id() % 14;
    let mut free = (0..14u32)
        .map(|i| format!("10.0.0.{}", 2 + (start + i) % 14))
        .filter(|ip| !used.contains(ip));
    let a = free.next().expect("a free cluster IP");
    let b = free.next().expect("a second free cluster IP");
    (a, b)
}

// ---------------------------------------------------------------- immutable fields

#[tokio::test]
async fn statefulset_selector_change_is_refused_then_recreated() {
    let kit = Kit::new("mig-sts").await;
    let v1 = build(&kit, &[pkg("db", "1.0.0", vec![statefulset("db", "db")])]);
    kit.deploy(&v1).await;
    let before = kit
        .get("apps/v1", "StatefulSet", "db")
        .await
        .expect("deployed");

    let v2 = build(&kit, &[pkg("db", "1.0.1", vec![statefulset("db", "db2")])]);
    let plan = kit.plan(&v2, &plan_options()).await;
    let sts = find(&plan, "StatefulSet", "db");
    assert_eq!(sts.action, Action::Replace, "{sts:#?}");
    assert_eq!(sts.fields, ["spec.selector.matchLabels.app"], "{sts:#?}");
    assert!(
        sts.note
            .as_deref()
            .is_some_and(|n| n.contains("Forbidden: updates to statefulset spec")),
        "{sts:#?}"
    );

    // Refused: the error names the object and the field; nothing is written.
    let mark = audit::mark().expect("mark");
    let err = expect_err(kit.try_deploy(&v2, &kit.options()).await);
    assert!(matches!(err, EngineError::NeedsAcceptance(_)), "{err}");
    let text = err.to_string();
    assert!(
        text.contains(&format!(
            "replace StatefulSet.apps {}/db (spec.selector.matchLabels.app)",
            kit.ns()
        )),
        "{text}"
    );
    let writes = kit.writes(mark);
    assert!(
        writes.is_empty(),
        "a refused deploy wrote:\n{}",
        describe(&writes)
    );
    let still = kit
        .get("apps/v1", "StatefulSet", "db")
        .await
        .expect("still there");
    assert_eq!(uid(&still), uid(&before));
    assert_eq!(
        still["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );

    // Accepted: deleted, then created with the new selector.
    kit.deploy_opts(&v2, &accepting(&kit)).await;
    let after = kit
        .get("apps/v1", "StatefulSet", "db")
        .await
        .expect("recreated");
    assert_ne!(uid(&after), uid(&before), "recreated means a new object");
    assert_eq!(after["spec"]["selector"]["matchLabels"]["app"], "db2");
    let record = kit.records().await.pop().expect("record");
    assert!(
        record
            .spec
            .receipt
            .accepted
            .actions
            .iter()
            .any(|m| m.starts_with("replace StatefulSet") && m.ends_with("/db")),
        "{:?}",
        record.spec.receipt.accepted
    );
    let pi = instance(&kit, "db").await.expect("record");
    assert_eq!(pi.spec.version, "1.0.1");
    assert_eq!(pi.phase(), Some(PackagePhase::Ready));
    done(kit).await;
}

#[tokio::test]
async fn service_cluster_ip_change_is_a_replace() {
    let kit = Kit::new("mig-svc").await;
    let (ip1, ip2) = free_cluster_ips(&kit.env.client).await;
    let v1 = build(&kit, &[pkg("net", "1.0.0", vec![service("web", &ip1)])]);
    kit.deploy(&v1).await;
    let before = kit.get("v1", "Service", "web").await.expect("deployed");
    assert_eq!(before["spec"]["clusterIP"], ip1.as_str());

    let v2 = build(&kit, &[pkg("net", "1.0.0", vec![service("web", &ip2)])]);
    let plan = kit.plan(&v2, &plan_options()).await;
    let svc = find(&plan, "Service", "web");
    assert_eq!(svc.action, Action::Replace, "{svc:#?}");
    assert!(
        svc.fields.iter().any(|f| f.starts_with("spec.clusterIP")),
        "{svc:#?}"
    );
    assert!(
        svc.note
            .as_deref()
            .is_some_and(|n| n.contains("may not change once set")),
        "{svc:#?}"
    );

    let mark = audit::mark().expect("mark");
    let err = expect_err(kit.try_deploy(&v2, &kit.options()).await);
    assert!(
        err.to_string().contains("Service") && err.to_string().contains("spec.clusterIP"),
        "{err}"
    );
    assert!(kit.writes(mark).is_empty());

    kit.deploy_opts(&v2, &accepting(&kit)).await;
    let after = kit.get("v1", "Service", "web").await.expect("recreated");
    assert_ne!(uid(&after), uid(&before));
    assert_eq!(after["spec"]["clusterIP"], ip2.as_str());
    done(kit).await;
}

#[tokio::test]
async fn job_template_change_is_a_replace() {
    let kit = Kit::new("mig-job").await;
    let v1 = build(
        &kit,
        &[pkg(
            "batch",
            "1.0.0",
            vec![job("migrate", "example.invalid/m:1")],
        )],
    );
    kit.deploy(&v1).await;
    let before = kit
        .get("batch/v1", "Job", "migrate")
        .await
        .expect("deployed");

    let v2 = build(
        &kit,
        &[pkg(
            "batch",
            "1.0.0",
            vec![job("migrate", "example.invalid/m:2")],
        )],
    );
    let plan = kit.plan(&v2, &plan_options()).await;
    let j = find(&plan, "Job", "migrate");
    assert_eq!(j.action, Action::Replace, "{j:#?}");
    assert_eq!(
        j.fields,
        ["spec.template.spec.containers[0].image"],
        "{j:#?}"
    );
    assert!(
        j.note
            .as_deref()
            .is_some_and(|n| n.contains("field is immutable")),
        "{j:#?}"
    );

    let mark = audit::mark().expect("mark");
    let err = expect_err(kit.try_deploy(&v2, &kit.options()).await);
    assert!(
        err.to_string()
            .contains("spec.template.spec.containers[0].image"),
        "{err}"
    );
    assert!(kit.writes(mark).is_empty());

    kit.deploy_opts(&v2, &accepting(&kit)).await;
    let after = kit
        .get("batch/v1", "Job", "migrate")
        .await
        .expect("recreated");
    assert_ne!(uid(&after), uid(&before));
    assert_eq!(
        after["spec"]["template"]["spec"]["containers"][0]["image"],
        "example.invalid/m:2"
    );
    done(kit).await;
}

// ---------------------------------------------------------------- adoption

async fn create_unlabelled_configmap(kit: &Kit, name: &str, value: &str) -> Value {
    let api = Api::<DynamicObject>::namespaced_with(
        kit.env.client.clone(),
        kit.ns(),
        &resource("v1", "ConfigMap"),
    );
    let cm: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": kit.ns(), "labels": {"made-by": "hand"}},
        "data": {"v": value}
    }))
    .expect("configmap");
    let created = api
        .create(&PostParams::default(), &cm)
        .await
        .expect("create by hand");
    serde_json::to_value(created).expect("json")
}

#[tokio::test]
async fn adopting_an_existing_configmap_needs_acceptance_and_keeps_the_object() {
    let kit = Kit::new("mig-adopt").await;
    let before = create_unlabelled_configmap(&kit, "legacy", "hand").await;
    let v1 = build(
        &kit,
        &[pkg(
            "app",
            "1.0.0",
            vec![configmap("legacy", &[("v", "build")])],
        )],
    );
    let plan = kit.plan(&v1, &plan_options()).await;
    let legacy = find(&plan, "ConfigMap", "legacy");
    assert_eq!(legacy.action, Action::Adopt, "{legacy:#?}");
    assert!(
        legacy.changes.iter().any(|c| c.path == "data.v"),
        "{legacy:#?}"
    );

    let mark = audit::mark().expect("mark");
    let err = expect_err(kit.try_deploy(&v1, &kit.options()).await);
    assert!(
        err.to_string()
            .contains(&format!("adopt ConfigMap {}/legacy", kit.ns())),
        "{err}"
    );
    assert!(kit.writes(mark).is_empty());
    let unchanged = kit
        .get("v1", "ConfigMap", "legacy")
        .await
        .expect("still there");
    assert_eq!(
        unchanged["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );

    kit.deploy_opts(&v1, &accepting(&kit)).await;
    let after = kit.get("v1", "ConfigMap", "legacy").await.expect("adopted");
    assert_eq!(uid(&after), uid(&before), "adoption keeps the object");
    assert_eq!(after["data"]["v"], "build");
    assert_eq!(
        after["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "kix"
    );
    assert_eq!(after["metadata"]["labels"]["kix.run/package"], "app");
    assert!(after["metadata"]["labels"]["kix.run/owner"].is_string());
    // The next plan sees it as kix's own and unchanged.
    let plan = kit.plan(&v1, &plan_options()).await;
    assert_eq!(find(&plan, "ConfigMap", "legacy").action, Action::Unchanged);
    done(kit).await;
}

#[tokio::test]
async fn a_migration_adopts_without_changing_the_object_first() {
    let kit = Kit::new("mig-adopt-decl").await;
    let v1 = build(
        &kit,
        &[pkg("app", "1.0.0", vec![configmap("base", &[("v", "1")])])],
    );
    kit.deploy(&v1).await;
    let before = create_unlabelled_configmap(&kit, "legacy", "hand").await;

    let v2 = build(
        &kit,
        &[pkg(
            "app",
            "2.0.0",
            vec![configmap("base", &[("v", "1")]), configmap("legacy", &[("v", "build")])],
        )
        .migrations(json!([{"from": "1.0.0", "to": "2.0.0", "description": "take over the hand-made legacy config",
            "actions": [{"action": "adopt", "object": {"kind": "ConfigMap", "name": "legacy"}}]}]))],
    );
    let plan = kit.plan(&v2, &plan_options()).await;
    assert_eq!(plan.migrations.len(), 1, "{:#?}", plan.migrations);
    let m = &plan.migrations[0];
    assert_eq!(
        (m.package.as_str(), m.installed.as_str(), m.version.as_str()),
        ("app", "1.0.0", "2.0.0")
    );
    assert_eq!(
        m.actions[0].object.to_string(),
        format!("ConfigMap {}/legacy", kit.ns())
    );
    assert!(
        plan.needs_acceptance().contains(&format!(
            "migration app 1.0.0 -> 2.0.0: adopt ConfigMap {}/legacy",
            kit.ns()
        )),
        "{:?}",
        plan.needs_acceptance()
    );
    assert!(plan.has_changes());

    let mark = audit::mark().expect("mark");
    let err = expect_err(kit.try_deploy(&v2, &kit.options()).await);
    assert!(
        err.to_string().contains("migration app 1.0.0 -> 2.0.0"),
        "{err}"
    );
    assert!(kit.writes(mark).is_empty());

    // Watch the ConfigMap: kix's labels arrive while the content is still the
    // hand-made one; the apply then writes the build's content.
    let cms = Api::<DynamicObject>::namespaced_with(
        kit.env.client.clone(),
        kit.ns(),
        &resource("v1", "ConfigMap"),
    );
    let recorder = Recorder::start(
        cms,
        watcher::Config::default().fields("metadata.name=legacy"),
        |o: Option<&DynamicObject>| {
            let o = o?;
            let owned = o
                .metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key("kix.run/owner"));
            Some((
                owned,
                o.data["data"]["v"].as_str().unwrap_or_default().to_string(),
            ))
        },
    )
    .await;
    let mark = audit::mark().expect("mark");
    kit.deploy_opts(&v2, &accepting(&kit)).await;
    let seen = dedup(recorder.take().await);
    let owned_with_old = seen.iter().position(|(owned, v)| *owned && v == "hand");
    let owned_with_new = seen.iter().position(|(owned, v)| *owned && v == "build");
    assert!(
        matches!((owned_with_old, owned_with_new), (Some(a), Some(b)) if a < b),
        "labels first, content second: {seen:?}"
    );
    let writes = kit.writes(mark);
    let on_legacy: Vec<&str> = writes
        .iter()
        .filter(|r| r.resource == "configmaps" && r.name.as_deref() == Some("legacy"))
        .map(|r| r.verb.as_str())
        .collect();
    assert_eq!(on_legacy, ["patch", "patch"], "{}", describe(&writes));
    let after = kit.get("v1", "ConfigMap", "legacy").await.expect("adopted");
    assert_eq!(uid(&after), uid(&before));
    assert_eq!(
        after["metadata"]["labels"]["made-by"], "hand",
        "labels of others stay"
    );
    let pi = instance(&kit, "app").await.expect("record");
    assert_eq!(
        (pi.spec.version.as_str(), pi.phase()),
        ("2.0.0", Some(PackagePhase::Ready))
    );
    done(kit).await;
}

// ---------------------------------------------------------------- version jumps

#[tokio::test]
async fn a_version_jump_crosses_two_migrations_in_order() {
    let kit = Kit::new("mig-jump").await;
    let objects = |v: &str| {
        vec![
            configmap("first", &[("v", v)]),
            configmap("second", &[("v", v)]),
            configmap("other", &[("v", "same")]),
        ]
    };
    let v1 = build(&kit, &[pkg("db", "1.0.0", objects("1"))]);
    kit.deploy(&v1).await;
    let first = uid(&kit.get("v1", "ConfigMap", "first").await.expect("first"));
    let second = uid(&kit.get("v1", "ConfigMap", "second").await.expect("second"));
    let other = uid(&kit.get("v1", "ConfigMap", "other").await.expect("other"));

    // Declared out of order; `first` is unchanged in the build, so only the
    // migration makes it a replace.
    let mut v3_objects = objects("1");
    v3_objects[1] = configmap("second", &[("v", "3")]);
    let v3 = build(
        &kit,
        &[pkg("db", "3.0.0", v3_objects).migrations(json!([
            {"from": "2.0.0", "to": "3.0.0", "description": "second moves",
             "actions": [{"action": "recreate", "object": {"kind": "ConfigMap", "name": "second"}}]},
            {"from": "1.0.0", "to": "2.0.0", "description": "first moves",
             "actions": [{"action": "recreate", "object": {"apiVersion": "v1", "kind": "ConfigMap", "name": "first"}},
                         {"action": "delete", "object": {"kind": "ConfigMap", "name": "gone-already"}}]},
        ]))],
    );
    let plan = kit.plan(&v3, &plan_options()).await;
    let labels: Vec<String> = plan.migrations.iter().map(|m| m.label()).collect();
    assert_eq!(labels, ["1.0.0 -> 2.0.0", "2.0.0 -> 3.0.0"]);
    let f = find(&plan, "ConfigMap", "first");
    assert_eq!(f.action, Action::Replace, "{f:#?}");
    assert!(
        f.note
            .as_deref()
            .is_some_and(|n| n.contains("recreate by migration 1.0.0 -> 2.0.0")),
        "{f:#?}"
    );
    assert_eq!(find(&plan, "ConfigMap", "second").action, Action::Replace);
    assert_eq!(find(&plan, "ConfigMap", "other").action, Action::Unchanged);
    let accept = plan.needs_acceptance();
    assert!(
        accept[0].starts_with("migration db 1.0.0 -> 2.0.0: recreate ConfigMap"),
        "{accept:?}"
    );
    assert!(
        accept[1].starts_with("migration db 2.0.0 -> 3.0.0: recreate ConfigMap"),
        "{accept:?}"
    );

    let mark = audit::mark().expect("mark");
    let err = expect_err(kit.try_deploy(&v3, &kit.options()).await);
    assert!(matches!(err, EngineError::NeedsAcceptance(_)), "{err}");
    assert!(
        kit.writes(mark).is_empty(),
        "a refused deploy writes nothing"
    );

    let mark = audit::mark().expect("mark");
    let outcome = kit.deploy_opts(&v3, &accepting(&kit)).await;
    // The migrations stage says what it did, in the order it did it.
    let ns = kit.ns();
    let migrated: Vec<(ActionKind, String, bool)> = outcome
        .migrated
        .iter()
        .map(|m| (m.action, m.object.clone(), m.outcome.starts_with("deleted")))
        .collect();
    assert_eq!(
        migrated,
        [
            (ActionKind::Recreate, format!("ConfigMap {ns}/first"), true),
            (
                ActionKind::Delete,
                format!("ConfigMap {ns}/gone-already"),
                false
            ),
            (ActionKind::Recreate, format!("ConfigMap {ns}/second"), true),
        ],
        "{:#?}",
        outcome.migrated
    );
    assert_eq!(
        outcome.migrated[1].outcome, "not found, nothing to delete",
        "{:#?}",
        outcome.migrated
    );
    let writes = kit.writes(mark);
    let delete_of = |name: &str| {
        position(&writes, |r| {
            r.verb == "delete" && r.resource == "configmaps" && r.name.as_deref() == Some(name)
        })
        .unwrap_or_else(|| panic!("no delete of {name}:\n{}", describe(&writes)))
    };
    let apply_of = |name: &str| {
        position(&writes, |r| {
            r.verb == "patch" && r.resource == "configmaps" && r.name.as_deref() == Some(name)
        })
        .unwrap_or_else(|| panic!("no apply of {name}:\n{}", describe(&writes)))
    };
    assert!(
        delete_of("first") < delete_of("second"),
        "1 -> 2 before 2 -> 3:\n{}",
        describe(&writes)
    );
    assert!(
        delete_of("second") < apply_of("first"),
        "migrations before the apply:\n{}",
        describe(&writes)
    );
    assert!(delete_of("gone-already") < delete_of("second"));
    assert_ne!(
        uid(&kit.get("v1", "ConfigMap", "first").await.expect("first")),
        first
    );
    assert_ne!(
        uid(&kit.get("v1", "ConfigMap", "second").await.expect("second")),
        second
    );
    assert_eq!(
        uid(&kit.get("v1", "ConfigMap", "other").await.expect("other")),
        other
    );
    let record = kit.records().await.pop().expect("record");
    assert!(
        record
            .spec
            .receipt
            .accepted
            .actions
            .iter()
            .any(|m| m.starts_with("migration db 2.0.0 -> 3.0.0")),
        "{:?}",
        record.spec.receipt
    );

    // Installed 3.0.0 now: the same build crosses nothing.
    let plan = kit.plan(&v3, &plan_options()).await;
    assert!(plan.migrations.is_empty(), "{:#?}", plan.migrations);
    assert!(plan.needs_acceptance().is_empty());
    done(kit).await;
}

// ---------------------------------------------------------------- PackageInstance lifecycle

type Seen = (String, String, Option<String>);

/// (package, version, phase) of each write that set a phase.
fn phase_of(pi: Option<&PackageInstance>) -> Option<Seen> {
    let pi = pi?;
    Some((
        pi.spec.package.clone(),
        pi.spec.version.clone(),
        Some(pi.phase()?.to_string()),
    ))
}

fn phases(seen: &[Seen], package: &str) -> Vec<String> {
    dedup(
        seen.iter()
            .filter(|(p, _, _)| p == package)
            .map(|(_, _, phase)| phase.clone().unwrap_or_else(|| "-".into()))
            .collect(),
    )
}

#[tokio::test]
async fn package_instances_follow_install_upgrade_failure_and_removal() {
    let kit = Kit::new("mig-phases").await;
    ensure_crds(&kit.env.client).await;
    let records: Api<PackageInstance> = Api::all(kit.env.client.clone());
    let selector = kix_api::labels::cluster_selector(kit.cluster());
    let recorder = Recorder::start(
        records.clone(),
        watcher::Config::default().labels(&selector),
        phase_of,
    )
    .await;
    let deleted: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(vec![]));
    let deletions = {
        let deleted = deleted.clone();
        let mut stream = watcher(
            records.clone(),
            watcher::Config::default().labels(&selector),
        )
        .boxed();
        tokio::spawn(async move {
            while let Some(event) = stream.next().await {
                if let Ok(watcher::Event::Delete(pi)) = event {
                    deleted.lock().expect("lock").push(pi.spec.package.clone());
                }
            }
        })
    };

    // First deploy: both packages Pending → Installing → Ready.
    let v1 = build(
        &kit,
        &[
            pkg(
                "a",
                "1.0.0",
                vec![
                    configmap("a1", &[("v", "1")]),
                    configmap("a2", &[("v", "1")]),
                ],
            ),
            pkg("b", "1.0.0", vec![configmap("b1", &[("v", "1")])]),
        ],
    );
    let first = kit.deploy(&v1).await.activation.expect("activation");
    let seen = recorder.take().await;
    assert_eq!(
        phases(&seen, "a"),
        ["Pending", "Installing", "Ready"],
        "{seen:?}"
    );
    assert_eq!(
        phases(&seen, "b"),
        ["Pending", "Installing", "Ready"],
        "{seen:?}"
    );
    let a = instance(&kit, "a").await.expect("a");
    assert_eq!(
        a.metadata.name.as_deref(),
        Some(format!("{}.a", kit.cluster()).as_str())
    );
    assert_eq!(
        (a.spec.version.as_str(), a.spec.activation.as_str()),
        ("1.0.0", first.as_str())
    );
    let status = a.status.clone().unwrap_or_default();
    assert_eq!((status.resources, status.ready), (Some(2), Some(2)));
    assert_eq!(status.health.as_deref(), Some("Ready"));
    let condition = |pi: &PackageInstance, t: &str| {
        pi.status
            .iter()
            .flat_map(|s| &s.conditions)
            .find(|c| c.type_ == t)
            .map(|c| c.status.clone())
    };
    assert_eq!(condition(&a, "Ready").as_deref(), Some("True"));
    assert_eq!(condition(&a, "Installed").as_deref(), Some("True"));

    // Version change of a: Upgrading → Ready at 2.0.0; b untouched.
    let v2 = build(
        &kit,
        &[
            pkg(
                "a",
                "2.0.0",
                vec![
                    configmap("a1", &[("v", "2")]),
                    configmap("a2", &[("v", "1")]),
                ],
            ),
            pkg("b", "1.0.0", vec![configmap("b1", &[("v", "1")])]),
        ],
    );
    let second = kit.deploy(&v2).await.activation.expect("activation");
    let seen = recorder.take().await;
    assert_eq!(phases(&seen, "a"), ["Upgrading", "Ready"], "{seen:?}");
    assert!(
        phases(&seen, "b").is_empty(),
        "b has nothing to do: {seen:?}"
    );
    assert!(seen.iter().any(|(p, v, _)| p == "a" && v == "2.0.0"));
    let a = instance(&kit, "a").await.expect("a");
    assert_eq!(
        (a.spec.version.as_str(), a.spec.activation.as_str()),
        ("2.0.0", second.as_str())
    );
    let b = instance(&kit, "b").await.expect("b");
    assert_eq!(
        (b.spec.version.as_str(), b.spec.activation.as_str()),
        ("1.0.0", first.as_str())
    );

    // The build drops b: Removing, its objects pruned, the record deleted.
    let v3 = build(
        &kit,
        &[pkg(
            "a",
            "2.0.0",
            vec![
                configmap("a1", &[("v", "2")]),
                configmap("a2", &[("v", "1")]),
            ],
        )],
    );
    kit.deploy(&v3).await;
    let seen = recorder.take().await;
    assert_eq!(phases(&seen, "b"), ["Removing"], "{seen:?}");
    assert_eq!(*deleted.lock().expect("lock"), ["b"]);
    assert!(instance(&kit, "b").await.is_none());
    assert!(
        kit.get("v1", "ConfigMap", "b1").await.is_none(),
        "b's objects pruned"
    );

    // An upgrade whose migration fails: a recreate blocked by a finalizer
    // times out; the package is Failed and keeps 2.0.0 as installed.
    let cms = Api::<DynamicObject>::namespaced_with(
        kit.env.client.clone(),
        kit.ns(),
        &resource("v1", "ConfigMap"),
    );
    cms.patch(
        "a2",
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"finalizers": ["kix.run/test-blocks-deletion"]}})),
    )
    .await
    .expect("add finalizer");
    let v4 = build(
        &kit,
        &[pkg("a", "3.0.0", vec![configmap("a1", &[("v", "3")]), configmap("a2", &[("v", "1")])]).migrations(json!([
            {"from": "2.0.0", "to": "3.0.0", "actions": [{"action": "recreate", "object": {"kind": "ConfigMap", "name": "a2"}}]}
        ]))],
    );
    let mut options = accepting(&kit);
    options.timeout = Duration::from_secs(4);
    let outcome = kit.try_deploy(&v4, &options).await.expect("deploy runs");
    assert_eq!(outcome.phase, Phase::Failed, "{outcome:?}");
    assert!(
        outcome.message.contains("still being deleted"),
        "{outcome:?}"
    );
    let seen = recorder.take().await;
    assert_eq!(phases(&seen, "a"), ["Upgrading", "Failed"], "{seen:?}");
    let a = instance(&kit, "a").await.expect("a");
    assert_eq!(
        a.spec.version, "2.0.0",
        "a failed upgrade keeps the installed version"
    );
    let message = a
        .status
        .clone()
        .unwrap_or_default()
        .message
        .unwrap_or_default();
    assert!(
        message.contains("upgrade 2.0.0 -> 3.0.0 failed"),
        "{message}"
    );
    assert_eq!(
        kit.cm_value("a1", "v").await.as_deref(),
        Some("2"),
        "nothing of a was applied"
    );

    // Unblocked, the same build crosses the migration again and succeeds.
    cms.patch(
        "a2",
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("remove finalizer");
    let plan = kit.plan(&v4, &plan_options()).await;
    assert_eq!(
        plan.migrations
            .iter()
            .map(|m| m.label())
            .collect::<Vec<_>>(),
        ["2.0.0 -> 3.0.0"]
    );
    kit.deploy_opts(&v4, &accepting(&kit)).await;
    let a = instance(&kit, "a").await.expect("a");
    assert_eq!(
        (a.spec.version.as_str(), a.phase()),
        ("3.0.0", Some(PackagePhase::Ready))
    );
    assert_eq!(kit.cm_value("a1", "v").await.as_deref(), Some("3"));

    // Back to 2.0.0 (a rollback): a downgrade crosses no migration.
    let plan = kit.plan(&v3, &plan_options()).await;
    assert!(plan.migrations.is_empty(), "{:#?}", plan.migrations);
    recorder.take().await;
    kit.deploy(&v3).await;
    let seen = recorder.take().await;
    assert_eq!(phases(&seen, "a"), ["Upgrading", "Ready"], "{seen:?}");
    let a = instance(&kit, "a").await.expect("a");
    assert_eq!(a.spec.version, "2.0.0");
    deletions.abort();
    drop(recorder);
    done(kit).await;
}

// ---------------------------------------------------------------- a failed migration

/// A migration whose object never goes (held by a finalizer) fails its
/// package: the record is Failed naming the migration and the object, the
/// package's objects are not applied, and the outcome counts one failure.
#[tokio::test]
async fn a_migration_that_cannot_finish_fails_its_package_and_applies_nothing_of_it() {
    const HOLD: &str = "kix.test/hold-migration";
    let kit = Kit::new("mig-held").await;
    let v1 = build(
        &kit,
        &[pkg(
            "app",
            "1.0.0",
            vec![
                configmap("held", &[("v", "1")]),
                configmap("other", &[("v", "1")]),
            ],
        )],
    );
    kit.deploy(&v1).await;
    let cms = Api::<DynamicObject>::namespaced_with(
        kit.env.client.clone(),
        kit.ns(),
        &resource("v1", "ConfigMap"),
    );
    let hold = |finalizers: Value| json!({"metadata": {"finalizers": finalizers}});
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(hold(json!([HOLD]))),
    )
    .await
    .expect("finalizer on held");

    let v2 = build(
        &kit,
        &[pkg(
            "app",
            "2.0.0",
            vec![
                configmap("held", &[("v", "1")]),
                configmap("other", &[("v", "2")]),
            ],
        )
        .migrations(
            json!([{"from": "1.0.0", "to": "2.0.0", "description": "held moves",
            "actions": [{"action": "recreate", "object": {"kind": "ConfigMap", "name": "held"}}]}]),
        )],
    );
    let mut options = accepting(&kit);
    options.timeout = Duration::from_secs(3);
    let outcome = kit
        .try_deploy(&v2, &options)
        .await
        .expect("a deploy that ran");
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(hold(Value::Null)),
    )
    .await
    .expect("finalizer off held");
    assert_eq!(outcome.phase, Phase::Failed, "{outcome:#?}");
    assert_eq!((outcome.failed, outcome.applied), (1, 0), "{outcome:#?}");
    assert!(outcome.migrated.is_empty(), "{outcome:#?}");
    assert!(
        outcome.message.contains(&format!(
            "ConfigMap {}/held: migration 1.0.0 -> 2.0.0 of package app: recreate failed: still being deleted",
            kit.ns()
        )),
        "{}",
        outcome.message
    );
    let other = kit.get("v1", "ConfigMap", "other").await.expect("other");
    assert_eq!(other["data"]["v"], "1", "the package was not applied");
    done(kit).await;
}

//! Prune against the real control plane: what the build dropped is deleted
//! after apply and health, recorded first; the exceptions (prune disabled,
//! not owned, another Kix cluster's build); `prune: false`; orphan mode; the
//! empty build; destructive deletions gated by acceptance.

mod common;

use std::time::Duration;

use common::*;
use futures::StreamExt;
use kix_api::Activation;
use kix_engine::EngineError;
use kix_engine::deploy::PruneMode;
use kix_engine::plan::{Action, NOTE_PRUNE_DISABLED, NOTE_SHARED, PlanOptions};
use kix_testkit::audit;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};

fn prune() -> PlanOptions {
    PlanOptions {
        prune: true,
        ..PlanOptions::default()
    }
}

/// Watches the Activation `name`, collecting every version seen until the
/// task is aborted.
fn watch_record(
    client: kube::Client,
    name: String,
) -> (
    tokio::task::JoinHandle<()>,
    std::sync::Arc<std::sync::Mutex<Vec<Activation>>>,
) {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let out = seen.clone();
    let handle = tokio::spawn(async move {
        let api: Api<Activation> = Api::all(client);
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let mut stream = watcher::watcher(api, config).boxed();
        while let Some(event) = stream.next().await {
            if let Ok(watcher::Event::Apply(obj) | watcher::Event::InitApply(obj)) = event {
                out.lock().expect("lock").push(obj);
            }
        }
    });
    (handle, seen)
}

#[tokio::test]
async fn a_dropped_object_is_deleted_after_apply_and_health_recorded_first() {
    let kit = Kit::new("prune-basic").await;
    kit.deploy(&kit.simple(&[
        configmap("keep", &[("v", "1")]),
        configmap("gone", &[("v", "1")]),
    ]))
    .await;

    let second = kit.simple(&[configmap("keep", &[("v", "2")]), deployment("web", true)]);
    let plan = kit.plan(&second, &prune()).await;
    let (watch, seen) = watch_record(kit.env.client.clone(), plan.activation.clone());
    // Let the watch start before the record exists.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mark = audit::mark().expect("mark");
    let outcome = kit
        .try_deploy(&second, &kit.options())
        .await
        .expect("deploy");
    assert_eq!(outcome.phase, kix_api::Phase::Active, "{outcome:?}");
    assert_eq!(outcome.pruned, 1, "{outcome:?}");
    assert!(kit.get("v1", "ConfigMap", "gone").await.is_none(), "pruned");
    assert!(kit.get("v1", "ConfigMap", "keep").await.is_some());

    // Order: the applies and the health wait, the record naming the set, then
    // the delete.
    let requests = kit.requests(mark);
    let delete_at = position(&requests, |r| {
        r.verb == "delete" && r.name.as_deref() == Some("gone")
    })
    .unwrap_or_else(|| panic!("no delete:\n{}", describe(&requests)));
    let web_at = position(&requests, |r| {
        r.is_write() && r.resource == "deployments" && r.name.as_deref() == Some("web")
    })
    .expect("web applied");
    let keep_at = position(&requests, |r| {
        r.is_write() && r.name.as_deref() == Some("keep")
    })
    .expect("keep applied");
    assert!(
        web_at < delete_at && keep_at < delete_at,
        "{}",
        describe(&requests)
    );
    let record_write_before_delete = requests[web_at..delete_at]
        .iter()
        .any(|r| r.resource == "activations" && r.is_write());
    assert!(record_write_before_delete, "{}", describe(&requests));
    // The wait (a watch of the Deployment) happened before the delete.
    let wait_at = requests
        .iter()
        .position(|r| r.resource == "deployments" && matches!(r.verb.as_str(), "watch" | "list"))
        .expect("waited on the Deployment");
    assert!(wait_at < delete_at, "{}", describe(&requests));

    tokio::time::sleep(Duration::from_millis(500)).await;
    watch.abort();
    let versions = seen.lock().expect("lock").clone();
    let gone_ref = |r: &Activation| {
        r.status.as_ref().is_some_and(|s| {
            s.pending_prune.iter().any(|o| o.name == "gone") && s.pending_prune_count() == 1
        })
    };
    assert!(
        versions.iter().any(gone_ref),
        "status.pendingPrune named the object before it was deleted: {versions:#?}"
    );
    let last = kit.record(&plan.activation).await;
    let status = last.status.clone().expect("status");
    assert!(
        status.pending_prune.is_empty() && status.pending_prune_total.is_none(),
        "pendingPrune is cleared at the end: {status:#?}"
    );
    assert_eq!(status.progress.map(|p| p.pruned), Some(1));
    kit.cleanup().await;
}

#[tokio::test]
async fn prune_disabled_and_unowned_objects_are_kept() {
    let kit = Kit::new("prune-keep").await;
    let first_name = kit
        .deploy(&kit.simple(&[
            configmap("stays", &[("k", "v")]),
            configmap("disabled", &[("k", "v")]),
            configmap("anchor", &[("k", "v")]),
        ]))
        .await
        .activation
        .expect("activation");

    // A user disables pruning of one object.
    let cms: Api<DynamicObject> = Api::namespaced_with(
        kit.env.client.clone(),
        kit.ns(),
        &resource("v1", "ConfigMap"),
    );
    cms.patch(
        "disabled",
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"annotations": {"kix.run/prune": "disabled"}}})),
    )
    .await
    .expect("annotate");
    // A controller copied kix's labels (and annotations) from `anchor` onto a
    // child: the owner label names anchor, not the child.
    let anchor = kit.get("v1", "ConfigMap", "anchor").await.expect("anchor");
    let child: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {
            "name": "child",
            "labels": anchor["metadata"]["labels"],
            "annotations": anchor["metadata"]["annotations"],
        },
        "data": {"k": "v"}
    }))
    .expect("child");
    cms.create(&PostParams::default(), &child)
        .await
        .expect("child");
    assert_eq!(
        kit.get("v1", "ConfigMap", "child").await.expect("child")["metadata"]["annotations"]["kix.run/activations"],
        first_name.as_str()
    );

    // The next build drops everything but `stays`.
    let second = kit.simple(&[configmap("stays", &[("k", "v")])]);
    let plan = kit.plan(&second, &prune()).await;
    let disabled = plan
        .prune
        .iter()
        .find(|o| o.key.name == "disabled")
        .expect("disabled is planned");
    assert_eq!(disabled.action, Action::Keep);
    assert_eq!(disabled.note.as_deref(), Some(NOTE_PRUNE_DISABLED));
    assert!(
        !plan.objects().any(|o| o.key.name == "child"),
        "an object whose owner label names another object is not kix's: {:#?}",
        plan.prune
    );
    let anchor_plan = plan
        .prune
        .iter()
        .find(|o| o.key.name == "anchor")
        .expect("anchor");
    assert_eq!(anchor_plan.action, Action::Delete);

    kit.deploy(&second).await;
    assert!(kit.get("v1", "ConfigMap", "anchor").await.is_none());
    assert!(kit.get("v1", "ConfigMap", "disabled").await.is_some());
    assert!(kit.get("v1", "ConfigMap", "child").await.is_some());

    // Even an empty build with allow_empty leaves them alone.
    let mut options = kit.options();
    options.allow_empty = true;
    kit.deploy_opts(&kit.simple(&[]), &options).await;
    assert!(kit.get("v1", "ConfigMap", "stays").await.is_none());
    assert!(kit.get("v1", "ConfigMap", "disabled").await.is_some());
    assert!(kit.get("v1", "ConfigMap", "child").await.is_some());
    kit.cleanup().await;
}

#[tokio::test]
async fn prune_false_deletes_nothing() {
    let kit = Kit::new("prune-off").await;
    kit.deploy(&kit.simple(&[
        configmap("one", &[("k", "v")]),
        configmap("two", &[("k", "v")]),
    ]))
    .await;
    let second = kit.simple(&[configmap("one", &[("k", "w")])]);
    let plan = kit.plan(&second, &PlanOptions::default()).await;
    assert!(plan.prune.is_empty());
    let mut options = kit.options();
    options.prune = false;
    let mark = audit::mark().expect("mark");
    let outcome = kit.deploy_opts(&second, &options).await;
    assert_eq!(outcome.pruned, 0);
    assert!(
        !kit.writes(mark).iter().any(|r| r.verb == "delete"),
        "no delete"
    );
    assert!(kit.get("v1", "ConfigMap", "two").await.is_some());
    assert_eq!(kit.cm_value("one", "k").await.as_deref(), Some("w"));
    kit.cleanup().await;
}

#[tokio::test]
async fn orphan_mode_leaves_the_replicaset_behind() {
    let kit = Kit::new("prune-orphan").await;
    kit.deploy(&kit.simple(&[
        deployment("orphaned", true),
        configmap("cfg", &[("k", "v")]),
    ]))
    .await;
    let rs_api: Api<DynamicObject> = Api::namespaced_with(
        kit.env.client.clone(),
        kit.ns(),
        &resource("apps/v1", "ReplicaSet"),
    );
    let selector = ListParams::default().labels("app=orphaned");
    let rs = eventually("the ReplicaSet", Duration::from_secs(30), || async {
        rs_api
            .list(&selector)
            .await
            .ok()
            .and_then(|l| l.items.into_iter().next())
    })
    .await;
    let rs_name = rs.metadata.name.clone().expect("name");
    // The ReplicaSet carries the pod template's labels, not kix's owner value.
    assert_ne!(
        rs.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("kix.run/owner"))
            .map(String::as_str),
        Some(kix_api::owner_value("apps", "ReplicaSet", Some(kit.ns()), &rs_name).as_str())
    );

    let mut options = kit.options();
    options.prune_mode = PruneMode::Orphan;
    let outcome = kit
        .deploy_opts(&kit.simple(&[configmap("cfg", &[("k", "v")])]), &options)
        .await;
    // Orphan propagation puts the `orphan` finalizer on it: deleting (until
    // the garbage collector has released the ReplicaSet) or already gone.
    assert_eq!(
        outcome.pruned + outcome.deleting.len() as u32,
        1,
        "{outcome:?}"
    );
    eventually(
        "the Deployment deleted",
        Duration::from_secs(30),
        || async {
            kit.get("apps/v1", "Deployment", "orphaned")
                .await
                .is_none()
                .then_some(())
        },
    )
    .await;
    // Orphaned: it stays, without an owner reference to the Deployment.
    let rs = eventually(
        "the orphaned ReplicaSet released",
        Duration::from_secs(30),
        || async {
            let rs = kit.get("apps/v1", "ReplicaSet", &rs_name).await?;
            rs["metadata"]["ownerReferences"]
                .as_array()
                .is_none_or(|o| o.is_empty())
                .then_some(rs)
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        kit.get("apps/v1", "ReplicaSet", &rs_name).await.is_some(),
        "the ReplicaSet stays: {rs:#}"
    );
    kit.cleanup().await;
}

#[tokio::test]
async fn an_empty_build_refuses_to_prune_everything_unless_allowed() {
    let kit = Kit::new("prune-empty").await;
    kit.deploy(&kit.simple(&[configmap("cfg", &[("k", "v")])]))
        .await;
    let empty = kit.build(&[]);
    assert_eq!(empty.build.object_count(), 0);

    let mark = audit::mark().expect("mark");
    let err = expect_err(kit.try_deploy(&empty, &kit.options()).await);
    assert!(matches!(err, EngineError::EmptyBuild(_)), "{err}");
    let writes = kit.writes(mark);
    assert!(writes.is_empty(), "{}", describe(&writes));
    assert!(kit.get("v1", "ConfigMap", "cfg").await.is_some());
    // A package without resources is an empty build too.
    let err = expect_err(kit.try_deploy(&kit.simple(&[]), &kit.options()).await);
    assert!(matches!(err, EngineError::EmptyBuild(_)), "{err}");

    let mut options = kit.options();
    options.allow_empty = true;
    let outcome = kit.deploy_opts(&empty, &options).await;
    assert_eq!(outcome.pruned, 1);
    assert!(kit.get("v1", "ConfigMap", "cfg").await.is_none());
    kit.cleanup().await;
}

#[tokio::test]
async fn destructive_deletions_need_acceptance() {
    let mut kit = Kit::new("prune-destructive").await;
    let extra = kit.extra_ns("data");
    let group = format!("{}.example.com", kit.ns());
    let crd_name = format!("gadgets.{group}");
    kit.crds.push(crd_name.clone());
    let pv_name = format!("{}-pv", kit.ns());
    let class = format!("{}-manual", kit.ns());
    let crd = yaml(&json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": crd_name},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"kind": "Gadget", "plural": "gadgets"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    }));
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
    let keep = configmap("keep", &[("k", "v")]);
    let first = kit.simple(&[crd, namespace(&extra), pv.clone(), pvc, keep.clone()]);
    kit.deploy(&first).await;
    assert!(
        kit.get("v1", "PersistentVolumeClaim", "data")
            .await
            .is_some()
    );

    let second = kit.simple(&[pv, keep]);
    let plan = kit.plan(&second, &prune()).await;
    for (kind, name) in [
        ("CustomResourceDefinition", crd_name.as_str()),
        ("Namespace", extra.as_str()),
        ("PersistentVolumeClaim", "data"),
    ] {
        let o = plan
            .prune
            .iter()
            .find(|o| o.key.kind == kind && o.key.name == name)
            .unwrap_or_else(|| panic!("{kind} {name} not planned: {:#?}", plan.prune));
        assert_eq!(o.action, Action::Delete);
        assert!(o.destructive, "{o:#?}");
    }
    let accept = plan.needs_acceptance();
    assert_eq!(accept.len(), 3, "{accept:?}");

    let mark = audit::mark().expect("mark");
    let err = expect_err(kit.try_deploy(&second, &kit.options()).await);
    assert!(matches!(err, EngineError::NeedsAcceptance(_)), "{err}");
    assert!(err.to_string().contains("destructive"), "{err}");
    let writes = kit.writes(mark);
    assert!(writes.is_empty(), "nothing changed:\n{}", describe(&writes));
    assert_eq!(kit.records().await.len(), 1);

    let mut options = kit.options();
    options.accept_migrations = true;
    let outcome = kit.deploy_opts(&second, &options).await;
    // Each of them has a finalizer (the CRD's cleanup, the Namespace's
    // contents, pvc-protection): deleting, not yet gone, when the DELETE
    // returns; counted as pruned only when it was gone by then.
    assert_eq!(
        outcome.pruned + outcome.deleting.len() as u32,
        3,
        "{outcome:?}"
    );
    eventually(
        "the destructive deletions",
        Duration::from_secs(60),
        || async {
            let crd = kit
                .get_in(
                    "apiextensions.k8s.io/v1",
                    "CustomResourceDefinition",
                    None,
                    &crd_name,
                )
                .await;
            let ns = kit.get_in("v1", "Namespace", None, &extra).await;
            let ns_gone = ns.is_none_or(|ns| ns["metadata"]["deletionTimestamp"].is_string());
            let pvc = kit.get("v1", "PersistentVolumeClaim", "data").await;
            let pvc_gone = pvc.is_none_or(|p| p["metadata"]["deletionTimestamp"].is_string());
            (crd.is_none() && ns_gone && pvc_gone).then_some(())
        },
    )
    .await;
    // Cleanup of the cluster-scoped PV the build still has.
    let pvs: Api<DynamicObject> =
        Api::all_with(kit.env.client.clone(), &resource("v1", "PersistentVolume"));
    let mut options = kit.options();
    options.allow_empty = true;
    options.accept_migrations = true;
    let _ = kit.try_deploy(&kit.build(&[]), &options).await;
    let _ = pvs.delete(&pv_name, &Default::default()).await;
    kit.cleanup().await;
}

#[tokio::test]
async fn two_kix_clusters_share_a_namespace() {
    let mut kit = Kit::new("prune-shared").await;
    let shared = kit.extra_ns("shared");
    let cluster_a = kit.cluster().to_string();
    let cluster_b = format!("{cluster_a}-b");
    let ns_doc = namespace(&shared);
    let tree = |cluster: &str, with_ns: bool, cm: &str| {
        let mut resources = vec![configmap(cm, &[("k", "v")])];
        if with_ns {
            resources.push(ns_doc.clone());
        }
        kit.build_for(cluster, &[Pkg::new("shared", &resources)])
    };

    let a1 = kit
        .deploy(&tree(&cluster_a, true, "from-a"))
        .await
        .activation
        .expect("a");
    let b1 = kit
        .deploy(&tree(&cluster_b, true, "from-b"))
        .await
        .activation
        .expect("b");
    assert_eq!(b1, format!("{cluster_b}-1"));
    let annotation = |ns: serde_json::Value| {
        kix_api::labels::parse_activations(
            ns["metadata"]["annotations"]["kix.run/activations"]
                .as_str()
                .unwrap_or_default(),
        )
    };
    let live = kit
        .get_in("v1", "Namespace", None, &shared)
        .await
        .expect("ns");
    assert_eq!(
        annotation(live),
        [a1.clone(), b1.clone()].into_iter().collect(),
        "both clusters' activations"
    );

    // A drops it: kept, only A's entry removed. Not destructive: nothing
    // is deleted.
    let a_without = tree(&cluster_a, false, "from-a");
    let plan = kit.plan(&a_without, &prune()).await;
    let planned = plan
        .prune
        .iter()
        .find(|o| o.key.name == shared)
        .expect("planned");
    assert_eq!(planned.action, Action::Keep);
    assert_eq!(planned.note.as_deref(), Some(NOTE_SHARED));
    let outcome = kit.deploy(&a_without).await;
    assert_eq!(outcome.pruned, 0);
    let live = kit
        .get_in("v1", "Namespace", None, &shared)
        .await
        .expect("the shared namespace stays");
    assert!(live["metadata"]["deletionTimestamp"].is_null());
    assert_eq!(annotation(live), [b1.clone()].into_iter().collect());
    // A is done with it: its next plan does not mention it.
    let plan = kit.plan(&a_without, &prune()).await;
    assert!(!plan.objects().any(|o| o.key.name == shared), "{plan:#?}");
    assert!(!plan.has_changes(), "{plan:#?}");

    // B changes the Namespace afterwards: still B's, no conflict.
    let labelled = yaml(&json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": shared, "labels": {"team": "b"}}}));
    let b2 = kit.build_for(
        &cluster_b,
        &[Pkg::new(
            "shared",
            &[configmap("from-b", &[("k", "v")]), labelled],
        )],
    );
    kit.deploy(&b2).await;
    let live = kit
        .get_in("v1", "Namespace", None, &shared)
        .await
        .expect("ns");
    assert_eq!(live["metadata"]["labels"]["team"], "b");

    // B drops it too: deleted (destructive, so accepted).
    let mut options = kit.options();
    options.accept_migrations = true;
    let outcome = kit
        .deploy_opts(&tree(&cluster_b, false, "from-b"), &options)
        .await;
    // A Namespace empties itself first: deleting, not yet pruned.
    assert_eq!(outcome.pruned, 0, "{outcome:?}");
    assert_eq!(outcome.deleting.len(), 1, "{outcome:?}");
    eventually("the namespace deleted", Duration::from_secs(60), || async {
        let ns = kit.get_in("v1", "Namespace", None, &shared).await;
        ns.is_none_or(|ns| ns["metadata"]["deletionTimestamp"].is_string())
            .then_some(())
    })
    .await;
    cleanup_cluster(&kit.env.client, &cluster_b).await;
    kit.cleanup().await;
}

#[tokio::test]
async fn deletions_run_in_reverse_apply_order() {
    let kit = Kit::new("prune-order").await;
    let sa = yaml(
        &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "runner"}}),
    );
    let svc = yaml(
        &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}),
    );
    kit.deploy(&kit.build(&[
        Pkg::new("base", &[sa, configmap("cfg", &[("k", "v")])]),
        Pkg::new("app", &[deployment("web", true), svc]).depends_on(&["base"]),
    ]))
    .await;
    let mut options = kit.options();
    options.allow_empty = true;
    let mark = audit::mark().expect("mark");
    let outcome = kit.deploy_opts(&kit.build(&[]), &options).await;
    assert_eq!(outcome.pruned, 4, "{outcome:?}");
    let deletes: Vec<String> = kit
        .writes(mark)
        .into_iter()
        .filter(|r| r.verb == "delete")
        .map(|r| r.resource)
        .collect();
    let at = |resource: &str| {
        deletes
            .iter()
            .position(|r| r == resource)
            .unwrap_or_else(|| panic!("{resource} not deleted: {deletes:?}"))
    };
    assert!(at("deployments") < at("services"), "{deletes:?}");
    assert!(at("services") < at("configmaps"), "{deletes:?}");
    assert!(at("services") < at("serviceaccounts"), "{deletes:?}");
    kit.cleanup().await;
}

/// etcd refuses a request over 1.5 MiB (`--max-request-bytes`, the control
/// plane's default too).
const ETCD_REQUEST_LIMIT: usize = 1024 * 1024 + 512 * 1024;

/// A prune whose set, listed in the record the way kix once listed it
/// (every object in `status.pendingPrune`), would not fit in etcd: at 50,000
/// objects with half pruned the record could not be written, the deploy was
/// left Applying and every rerun failed. The prune succeeds, the record ends
/// Active, every dropped object is gone, and no version of the record grows
/// beyond 64 KiB.
#[tokio::test]
async fn a_prune_set_too_large_for_one_etcd_request_prunes_and_the_record_stays_small() {
    let mut kit = Kit::new("prune-huge").await;
    // A namespace name as long as Kubernetes allows (63), names near the
    // limit of 253: each entry of an old-style list as large as it gets.
    let prefix = kit.ns().to_string();
    let ns = kit.extra_ns(&"n".repeat(63 - prefix.len() - 1));
    assert_eq!(ns.len(), 63, "{ns}");
    const N: usize = 4_500;
    let name = |i: usize| format!("{i:05}-{}", "x".repeat(247));
    let cm = |name: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": ns}, "data": {"k": "v"}})
    };
    let old_style: Vec<kix_api::ObjectRef> = (0..N)
        .map(|i| kix_api::ObjectRef::new("v1", "ConfigMap", Some(ns.clone()), name(i)))
        .collect();
    let old_size = serde_json::to_vec(&json!({ "pendingPrune": old_style }))
        .expect("json")
        .len();
    assert!(
        old_size > ETCD_REQUEST_LIMIT,
        "the prune set listed is {old_size} bytes: no longer beyond etcd's limit, the test proves nothing"
    );
    // One file of many documents: a tree of 4,500 files would only be slower.
    let docs = |objects: &mut dyn Iterator<Item = Value>| {
        objects
            .map(|o| yaml(&o))
            .collect::<Vec<_>>()
            .join("\n---\n")
    };
    let full = kit.build(&[Pkg::new(
        "a",
        &[
            namespace(&ns),
            docs(&mut std::iter::once(cm("keep")).chain((0..N).map(|i| cm(&name(i))))),
        ],
    )]);
    let started = std::time::Instant::now();
    let first = kit.deploy(&full).await;
    assert_eq!(first.applied as usize, N + 2, "{first:?}");
    eprintln!("deployed {} objects in {:?}", N + 2, started.elapsed());

    let small = kit.build(&[Pkg::new("a", &[namespace(&ns), yaml(&cm("keep"))])]);
    let plan = kit.plan(&small, &prune()).await;
    assert_eq!(plan.counts.delete as usize, N, "{:?}", plan.counts);
    let (watch, seen) = watch_record(kit.env.client.clone(), plan.activation.clone());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut options = kit.options();
    // A mass deletion on purpose.
    options.deletions = kix_engine::budget::DeletionConsent::Any;
    let started = std::time::Instant::now();
    let outcome = kit.try_deploy(&small, &options).await.expect("deploy");
    eprintln!("pruned {N} objects in {:?}", started.elapsed());
    assert_eq!(outcome.phase, kix_api::Phase::Active, "{outcome:?}");
    assert_eq!(outcome.pruned as usize, N, "{outcome:?}");

    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(kit.env.client.clone(), &ns);
    let left: Vec<String> = cms
        .list_metadata(&ListParams::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .filter_map(|m| m.metadata.name)
        .filter(|name| name != "kube-root-ca.crt")
        .collect();
    assert_eq!(left, ["keep"], "every dropped object is gone");

    tokio::time::sleep(Duration::from_millis(500)).await;
    watch.abort();
    let versions = seen.lock().expect("lock").clone();
    let size = |r: &Activation| serde_json::to_vec(r).map_or(0, |v| v.len());
    let largest = versions.iter().map(size).max().unwrap_or(0);
    assert!(
        largest < 64 * 1024,
        "a version of the record is {largest} bytes"
    );
    // The prune was announced, by count, before the deletions.
    assert!(
        versions.iter().any(
            |r| r
                .status
                .as_ref()
                .is_some_and(|s| s.pending_prune_count() as usize == N
                    && s.pending_prune.len() <= kix_api::PENDING_PRUNE_LISTED
                    && !s.pending_prune.is_empty())
        ),
        "no version of the record said {N} objects were being pruned: {:#?}",
        versions.iter().map(|r| &r.status).collect::<Vec<_>>()
    );
    let last = kit.record(&plan.activation).await;
    assert_eq!(
        last.phase(),
        Some(kix_api::Phase::Active),
        "{:?}",
        last.status
    );
    let status = last.status.clone().expect("status");
    assert_eq!(status.pending_prune_count(), 0, "{status:#?}");
    assert_eq!(status.progress.map(|p| p.pruned as usize), Some(N));
    assert!(
        size(&last) < 64 * 1024,
        "the record is {} bytes",
        size(&last)
    );
    kit.cleanup().await;
}

/// A build made on another machine (a CI runner) is not in this store: its
/// record still names it. What it left in the namespaces this build
/// declares is pruned; the claim of an object elsewhere does not hold
/// (#43: an object's claim counts only for the Kix cluster that owns its
/// namespace).
#[tokio::test]
async fn what_a_build_made_elsewhere_left_in_the_builds_namespaces_is_pruned() {
    let kit = Kit::new("prune-elsewhere").await;
    let first = kit
        .deploy(&kit.simple(&[
            configmap("keep", &[("v", "1")]),
            configmap("gone", &[("v", "1")]),
        ]))
        .await;
    let first = first.activation.expect("record");
    // The record of a build this machine never had.
    let api: Api<Activation> = Api::all(kit.client.clone());
    let elsewhere = "/nix/store/00000000000000000000000000000000-built-elsewhere";
    let moved = json!({ "spec": { "source": { "path": elsewhere } } });
    api.patch(&first, &PatchParams::default(), &Patch::Merge(&moved))
        .await
        .expect("the record names a build made elsewhere");

    let second = kit.simple(&[configmap("keep", &[("v", "2")])]);
    let plan = kit.plan(&second, &prune()).await;
    let gone = plan
        .prune
        .iter()
        .find(|o| o.key.name == "gone")
        .unwrap_or_else(|| panic!("the plan does not list `gone`: {:?}", plan.prune));
    assert_eq!(gone.action, Action::Delete, "{gone:?}");
    let outcome = kit.deploy(&second).await;
    assert_eq!(outcome.pruned, 1, "{outcome:?}");
    assert!(kit.get("v1", "ConfigMap", "gone").await.is_none(), "pruned");
}

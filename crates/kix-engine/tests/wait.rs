//! Waiting for health against the real control plane (`checks/control-plane
//! up`; KWOK nodes run the Pods).

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kix_engine::health::Health;
use kix_engine::wait::{NOT_FOUND, WaitEvent, WaitOptions, WaitTarget, wait_healthy};
use kix_testkit::{TestEnv, audit};
use kube::Resource;
use kube::api::{Api, DeleteParams, PostParams};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

async fn create<K>(env: &TestEnv, manifest: Value) -> K
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let object: K = serde_json::from_value(manifest).expect("valid manifest");
    Api::<K>::namespaced(env.client.clone(), &env.namespace)
        .create(&PostParams::default(), &object)
        .await
        .expect("create")
}

fn config_map(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})
}

fn pod_spec(extra: Value) -> Value {
    let mut spec = json!({
        "containers": [{"name": "main", "image": "registry.invalid/kix-test:1"}],
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    spec
}

fn deployment(name: &str, replicas: i32, pod_extra: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec(pod_extra)},
        },
    })
}

fn unschedulable() -> Value {
    json!({"nodeSelector": {"kix.run/no-such-node": "true"}})
}

fn options(timeout: Duration) -> WaitOptions {
    WaitOptions {
        timeout,
        ..WaitOptions::default()
    }
}

fn target<K: Resource<DynamicType = ()>>(env: &TestEnv, name: &str) -> WaitTarget {
    WaitTarget::of::<K>(Some(&env.namespace), name)
}

#[tokio::test]
async fn a_config_map_is_ready_at_once() {
    let env = TestEnv::new("wait-cm").await.expect("test env");
    create::<ConfigMap>(&env, config_map("settings")).await;
    let started = Instant::now();
    let report = wait_healthy(
        env.client.clone(),
        vec![target::<ConfigMap>(&env, "settings")],
        options(Duration::from_secs(30)),
    )
    .await
    .expect("wait");
    assert!(report.is_success(), "{report}");
    assert!(!report.timed_out);
    assert_eq!(report.ready, vec![target::<ConfigMap>(&env, "settings")]);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_deployment_job_and_namespace_become_ready() {
    let env = TestEnv::new("wait-rollout").await.expect("test env");
    create::<Deployment>(&env, deployment("web", 2, json!({}))).await;
    create::<Job>(
        &env,
        json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "migrate"},
            "spec": {"backoffLimit": 0, "template": {"spec": pod_spec(json!({"restartPolicy": "Never"}))}},
        }),
    )
    .await;
    create::<ConfigMap>(&env, config_map("settings")).await;

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let targets = vec![
        target::<Deployment>(&env, "web"),
        target::<Job>(&env, "migrate"),
        target::<ConfigMap>(&env, "settings"),
        WaitTarget::of::<Namespace>(None, &env.namespace),
    ];
    let report = wait_healthy(
        env.client.clone(),
        targets.clone(),
        WaitOptions {
            events: Some(tx),
            ..options(Duration::from_secs(90))
        },
    )
    .await
    .expect("wait");
    assert!(report.is_success(), "{report}");
    assert_eq!(report.ready, targets);

    let deployment: Deployment = Api::namespaced(env.client.clone(), &env.namespace)
        .get("web")
        .await
        .expect("get");
    let status = deployment.status.expect("status");
    assert_eq!(status.ready_replicas, Some(2));
    let job: Job = Api::namespaced(env.client.clone(), &env.namespace)
        .get("migrate")
        .await
        .expect("get");
    assert_eq!(job.status.expect("status").succeeded, Some(1));

    // Progress events: every target ends Ready, the last event per target.
    let mut events: Vec<WaitEvent> = Vec::new();
    while let Ok(event) = rx.try_recv() {
        events.push(event);
    }
    for t in &targets {
        let last = events
            .iter()
            .rev()
            .find(|e| &e.target == t)
            .expect("an event per target");
        assert_eq!(last.health, Health::Ready, "{t}");
    }
}

#[tokio::test]
async fn an_unschedulable_deployment_times_out_naming_it() {
    let env = TestEnv::new("wait-timeout").await.expect("test env");
    create::<Deployment>(&env, deployment("stuck", 2, unschedulable())).await;
    create::<ConfigMap>(&env, config_map("fine")).await;

    let started = Instant::now();
    let report = wait_healthy(
        env.client.clone(),
        vec![
            target::<Deployment>(&env, "stuck"),
            target::<ConfigMap>(&env, "fine"),
            target::<ConfigMap>(&env, "never-created"),
        ],
        options(Duration::from_secs(3)),
    )
    .await
    .expect("wait");
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_secs(3) && elapsed < Duration::from_secs(8),
        "{elapsed:?}"
    );
    assert!(report.timed_out);
    assert!(!report.is_success());
    assert_eq!(report.ready, vec![target::<ConfigMap>(&env, "fine")]);
    assert!(report.degraded.is_empty(), "{report}");
    assert_eq!(report.not_ready.len(), 2, "{report}");
    let (stuck, reason) = &report.not_ready[0];
    assert_eq!(stuck, &target::<Deployment>(&env, "stuck"));
    assert!(reason.contains("replicas"), "{reason}");
    assert_eq!(
        report.not_ready[1],
        (
            target::<ConfigMap>(&env, "never-created"),
            NOT_FOUND.to_owned()
        )
    );
    let text = report.to_string();
    eprintln!("{text}");
    assert!(
        text.contains(&format!("Deployment {}/stuck: ", env.namespace)),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "ConfigMap {}/never-created: not found",
            env.namespace
        )),
        "{text}"
    );
}

#[tokio::test]
async fn fail_fast_stops_at_a_degraded_object() {
    let env = TestEnv::new("wait-degraded").await.expect("test env");
    let mut manifest = deployment("hopeless", 1, unschedulable());
    manifest["spec"]["progressDeadlineSeconds"] = json!(1);
    create::<Deployment>(&env, manifest).await;

    let started = Instant::now();
    let report = wait_healthy(
        env.client.clone(),
        vec![target::<Deployment>(&env, "hopeless")],
        WaitOptions {
            fail_fast_on_degraded: true,
            ..options(Duration::from_secs(60))
        },
    )
    .await
    .expect("wait");
    assert!(!report.timed_out, "{report}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(report.degraded.len(), 1, "{report}");
    assert!(
        report.degraded[0].1.contains("progress deadline exceeded"),
        "{report}"
    );
}

#[tokio::test]
async fn an_object_deleted_while_waiting_is_not_found() {
    let env = TestEnv::new("wait-deleted").await.expect("test env");
    create::<Deployment>(&env, deployment("doomed", 1, unschedulable())).await;
    let doomed = target::<Deployment>(&env, "doomed");

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let wait = tokio::spawn(wait_healthy(
        env.client.clone(),
        vec![doomed.clone()],
        WaitOptions {
            events: Some(tx),
            ..options(Duration::from_secs(6))
        },
    ));
    // Seen first (progressing on its replicas), then deleted.
    let first = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .expect("no progress event for Deployment doomed within 5 s")
        .expect("an event");
    assert_eq!(first.target, doomed);
    assert!(first.health.is_progressing(), "{:?}", first.health);
    Api::<Deployment>::namespaced(env.client.clone(), &env.namespace)
        .delete("doomed", &DeleteParams::background())
        .await
        .expect("delete");

    let report = wait.await.expect("task").expect("wait");
    assert!(report.timed_out);
    assert_eq!(
        report.not_ready,
        vec![(doomed.clone(), NOT_FOUND.to_owned())]
    );
    let mut last = first.health;
    while let Ok(event) = rx.try_recv() {
        last = event.health;
    }
    assert_eq!(
        last,
        Health::Progressing {
            reason: NOT_FOUND.to_owned()
        }
    );
}

#[tokio::test]
async fn two_hundred_config_maps_take_one_watch_not_two_hundred() {
    let env = TestEnv::new("wait-many").await.expect("test env");
    let names: Vec<String> = (0..200).map(|i| format!("cm-{i:03}")).collect();
    let config_maps = Api::<ConfigMap>::namespaced(env.client.clone(), &env.namespace);
    futures::stream::iter(names.iter().map(|name| {
        let object: ConfigMap = serde_json::from_value(config_map(name)).expect("valid manifest");
        let config_maps = config_maps.clone();
        async move {
            config_maps
                .create(&PostParams::default(), &object)
                .await
                .map(drop)
        }
    }))
    .buffer_unordered(16)
    .try_collect::<Vec<()>>()
    .await
    .expect("create config maps");

    let mark = audit::mark().expect("audit mark");
    let started = Instant::now();
    let targets: Vec<WaitTarget> = names.iter().map(|n| target::<ConfigMap>(&env, n)).collect();
    let report = wait_healthy(
        env.client.clone(),
        targets,
        options(Duration::from_secs(30)),
    )
    .await
    .expect("wait");
    let elapsed = started.elapsed();
    assert!(report.is_success(), "{report}");
    assert_eq!(report.ready.len(), 200);
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");

    // A watch is audited when it ends; give the apiserver a moment.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let reads: Vec<_> = audit::since(mark)
        .expect("audit log")
        .into_iter()
        .filter(|r| r.namespace.as_deref() == Some(env.namespace.as_str()))
        .filter(|r| matches!(r.verb.as_str(), "get" | "list" | "watch"))
        .collect();
    eprintln!("reads of the wait: {reads:?}");
    assert!(!reads.is_empty(), "the wait must show up in the audit log");
    assert!(
        reads.iter().all(|r| r.verb != "get"),
        "no per-object GETs: {reads:?}"
    );
    assert!(
        reads.len() <= 4,
        "one list/watch for the group, got {}: {reads:?}",
        reads.len()
    );
}

//! A Job is judged by its outcome, however soon it disappears: an object
//! the caller applied and that is deleted while waited for (a TTL, a Helm
//! hook delete policy, a person) is never waited for until the timeout.
//! Against the real control plane (`checks/control-plane up`): its Job
//! controller runs the Jobs, KWOK completes their Pods.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use kix_engine::health::Health;
use kix_engine::wait::{
    Applied, DELETED_UNFINISHED, DELETED_WHILE_WAITING, WaitOptions, WaitReport, WaitTarget,
    wait_healthy,
};
use kix_testkit::TestEnv;
use kube::Resource;
use kube::api::{Api, DeleteParams, PostParams};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// Creates `manifest` in the test's namespace; the target and what the
/// create returned, as a deploy's apply would hand them to the wait.
async fn create<K>(env: &TestEnv, manifest: Value) -> (WaitTarget, Applied)
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let object: K = serde_json::from_value(manifest).expect("valid manifest");
    let created = Api::<K>::namespaced(env.client.clone(), &env.namespace)
        .create(&PostParams::default(), &object)
        .await
        .expect("create");
    let name = created.meta().name.clone().expect("a name");
    let applied = Applied::of(&serde_json::to_value(&created).expect("json")).expect("uid");
    (WaitTarget::of::<K>(Some(&env.namespace), &name), applied)
}

/// A Job; `pod` is merged into its Pod spec, `spec` into its own.
fn job(name: &str, spec: Value, pod: Value) -> Value {
    let mut pod_spec = json!({
        "restartPolicy": "Never",
        "containers": [{"name": "main", "image": "registry.invalid/kix-test:1"}],
    });
    merge(&mut pod_spec, pod);
    let mut job_spec = json!({"backoffLimit": 0, "template": {"spec": pod_spec}});
    merge(&mut job_spec, spec);
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": job_spec})
}

fn merge(into: &mut Value, extra: Value) {
    if let (Some(into), Some(extra)) = (into.as_object_mut(), extra.as_object()) {
        into.extend(extra.clone());
    }
}

/// A Deployment Available only `seconds` after its Pod is Ready: the slow
/// neighbour that keeps a wait going.
fn slow_deployment(name: &str, seconds: u32) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {
            "replicas": 1, "minReadySeconds": seconds,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {
                "containers": [{"name": "main", "image": "registry.invalid/kix-test:1"}]}},
        },
    })
}

fn unschedulable() -> Value {
    json!({"nodeSelector": {"kix.run/no-such-node": "true"}})
}

fn options(timeout: Duration, applied: &[&(WaitTarget, Applied)]) -> WaitOptions {
    WaitOptions {
        timeout,
        applied: applied
            .iter()
            .map(|(t, a)| (t.clone(), a.clone()))
            .collect::<HashMap<_, _>>(),
        ..WaitOptions::default()
    }
}

/// Polls until `check` of the Job `name` (None: gone) holds, up to 60 s.
async fn until_job(env: &TestEnv, name: &str, what: &str, check: impl Fn(Option<&Job>) -> bool) {
    let api = Api::<Job>::namespaced(env.client.clone(), &env.namespace);
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let job = api.get_opt(name).await.expect("get job");
        if check(job.as_ref()) {
            return;
        }
        assert!(Instant::now() < until, "Job {name} never {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn has_condition(job: Option<&Job>, type_: &str) -> bool {
    job.and_then(|j| j.status.as_ref()?.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

async fn delete_job(env: &TestEnv, name: &str) {
    Api::<Job>::namespaced(env.client.clone(), &env.namespace)
        .delete(name, &DeleteParams::foreground())
        .await
        .expect("delete job");
}

fn reason_of(report: &WaitReport, target: &WaitTarget) -> Option<String> {
    report
        .degraded
        .iter()
        .find(|(t, _)| t == target)
        .map(|(_, r)| r.clone())
}

/// ingress-nginx's admission Jobs: TTL 0, so the TTL controller removes
/// them as soon as they finished, while a slow neighbour is still waited
/// for, or before the wait even began.
#[tokio::test]
async fn ttl_zero_jobs_beside_a_slow_neighbour_count_as_complete() {
    let env = TestEnv::new("vanish-ttl").await.expect("test env");
    let ttl = json!({"ttlSecondsAfterFinished": 0});
    let early = create::<Job>(&env, job("early", ttl.clone(), json!({}))).await;
    // Gone before the wait begins: only its history tells how it ended.
    until_job(&env, "early", "was removed", |j| j.is_none()).await;
    let late = create::<Job>(&env, job("late", ttl, json!({}))).await;
    let slow = create::<Deployment>(&env, slow_deployment("slow", 15)).await;

    let started = Instant::now();
    let targets = vec![early.0.clone(), late.0.clone(), slow.0.clone()];
    let report = wait_healthy(
        env.client.clone(),
        targets.clone(),
        options(Duration::from_secs(120), &[&early, &late, &slow]),
    )
    .await
    .expect("wait");
    assert!(report.is_success(), "{report}");
    assert_eq!(report.ready, targets);
    // Bound: the neighbour's 15 s, far below the timeout.
    assert!(
        started.elapsed() < Duration::from_secs(90),
        "took {:?}",
        started.elapsed()
    );
    until_job(&env, "late", "was removed", |j| j.is_none()).await;
}

/// Helm's `hook-succeeded`: the hook Job is deleted as soon as it is
/// complete, while the wait is under way.
#[tokio::test]
async fn a_hook_job_deleted_once_it_succeeded_counts_as_complete() {
    let env = TestEnv::new("vanish-succeeded").await.expect("test env");
    let hook = create::<Job>(&env, job("hook", json!({}), json!({}))).await;
    let slow = create::<Deployment>(&env, slow_deployment("slow", 10)).await;
    let targets = vec![hook.0.clone(), slow.0.clone()];
    let wait = tokio::spawn(wait_healthy(
        env.client.clone(),
        targets.clone(),
        options(Duration::from_secs(120), &[&hook, &slow]),
    ));
    until_job(&env, "hook", "completed", |j| has_condition(j, "Complete")).await;
    delete_job(&env, "hook").await;
    let report = wait.await.expect("task").expect("wait");
    assert!(report.is_success(), "{report}");
    assert_eq!(report.ready, targets);
}

/// Helm's `hook-failed`: the hook Job is deleted as soon as it failed (here
/// before the wait began); the wait reports the failure, not `not found`.
#[tokio::test]
async fn a_hook_job_deleted_once_it_failed_is_degraded_by_its_failure() {
    let env = TestEnv::new("vanish-failed").await.expect("test env");
    // Its Pod is never scheduled; the deadline fails the Job after 2 s.
    let hook = create::<Job>(
        &env,
        job("hook", json!({"activeDeadlineSeconds": 2}), unschedulable()),
    )
    .await;
    until_job(&env, "hook", "failed", |j| has_condition(j, "Failed")).await;
    delete_job(&env, "hook").await;
    until_job(&env, "hook", "was removed", |j| j.is_none()).await;

    let started = Instant::now();
    let report = wait_healthy(
        env.client.clone(),
        vec![hook.0.clone()],
        options(Duration::from_secs(120), &[&hook]),
    )
    .await
    .expect("wait");
    assert!(!report.timed_out, "{report}");
    let reason = reason_of(&report, &hook.0).unwrap_or_else(|| panic!("{report}"));
    assert!(reason.starts_with("job failed"), "{reason}");
    assert!(
        reason.contains("longer than specified deadline"),
        "{reason}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
}

/// A person deletes a Job that has not finished, mid-wait: reported once,
/// at once, as deleted with no outcome, not waited for until the timeout
/// (the default wait, not failing fast, ends too).
#[tokio::test]
async fn a_job_deleted_by_hand_before_it_finished_is_reported_at_once() {
    let env = TestEnv::new("vanish-by-hand").await.expect("test env");
    let stuck = create::<Job>(&env, job("stuck", json!({}), unschedulable())).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let wait = tokio::spawn(wait_healthy(
        env.client.clone(),
        vec![stuck.0.clone()],
        WaitOptions {
            events: Some(tx),
            ..options(Duration::from_secs(120), &[&stuck])
        },
    ));
    let first = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("no event for Job stuck within 10 s")
        .expect("an event");
    assert!(first.health.is_progressing(), "{:?}", first.health);
    let started = Instant::now();
    delete_job(&env, "stuck").await;
    let report = wait.await.expect("task").expect("wait");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
    assert!(!report.timed_out, "{report}");
    assert_eq!(
        reason_of(&report, &stuck.0).as_deref(),
        Some(DELETED_UNFINISHED)
    );
    // Reported once: one Degraded event, the last.
    let mut degraded = Vec::new();
    while let Ok(event) = rx.try_recv() {
        if let Health::Degraded { reason } = event.health {
            degraded.push(reason);
        }
    }
    assert_eq!(degraded, vec![DELETED_UNFINISHED.to_owned()]);
}

/// Any other kind deleted while waited for is not coming back: Degraded at
/// once, not `not found` until the timeout.
#[tokio::test]
async fn a_deployment_deleted_while_waited_for_is_degraded_at_once() {
    let env = TestEnv::new("vanish-deployment").await.expect("test env");
    let slow = create::<Deployment>(&env, slow_deployment("slow", 60)).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let wait = tokio::spawn(wait_healthy(
        env.client.clone(),
        vec![slow.0.clone()],
        WaitOptions {
            events: Some(tx),
            ..options(Duration::from_secs(120), &[&slow])
        },
    ));
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("no event for Deployment slow within 10 s");
    Api::<Deployment>::namespaced(env.client.clone(), &env.namespace)
        .delete("slow", &DeleteParams::background())
        .await
        .expect("delete");
    let report = wait.await.expect("task").expect("wait");
    assert!(!report.timed_out, "{report}");
    assert_eq!(
        reason_of(&report, &slow.0).as_deref(),
        Some(DELETED_WHILE_WAITING)
    );
}

//! The operator as a process against the real control plane, driven by
//! `kix deploy --operator` as users drive it. Each test runs its own operator
//! that manages only the test's Kix clusters, with its own leader lease.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kix_api::{Activation, Phase};
use kix_testkit::TestEnv;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use support::*;

#[tokio::test]
async fn deploy_through_the_operator_then_drift_is_corrected() {
    let env = TestEnv::new("op-drift").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    let op = Operator::start(
        &env,
        &[&env.cluster],
        &kix_testkit::unique_name("lease"),
        dir.path(),
    );
    let root = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &configmap("settings", "hello"),
    );

    let out = deploy_operator(&env.cluster, &root);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(": Active"),
        "{}",
        text(&out)
    );
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    assert_eq!(cm_value(&cms, "settings").await.as_deref(), Some("hello"));
    let records: Api<Activation> = Api::all(env.client.clone());
    let name = format!("{}-1", env.cluster);
    // Every phase the applied record is written with from now on: upkeep
    // keeps it Active (never Applying, which a later deploy would take for
    // a dead apply).
    let phases = PhaseLog::follow(&records, &name).await;

    // Edited by someone else: restored.
    let patch = serde_json::json!({"data": {"value": "tampered"}});
    cms.patch("settings", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("tamper");
    let took = wait_until(
        "edited object restored",
        Duration::from_secs(20),
        || async { cm_value(&cms, "settings").await.as_deref() == Some("hello") },
    )
    .await;
    eprintln!("drift correction after an edit took {took:?}");

    // Deleted: re-created.
    cms.delete("settings", &DeleteParams::default())
        .await
        .expect("delete");
    let took = wait_until(
        "deleted object re-created",
        Duration::from_secs(20),
        || async { cm_value(&cms, "settings").await.as_deref() == Some("hello") },
    )
    .await;
    eprintln!("re-creating a deleted object took {took:?}");

    // The record counts both corrections (written right after each one).
    wait_until(
        "drift counted on the record",
        Duration::from_secs(10),
        || async {
            let record = records.get(&name).await.expect("record");
            record
                .status
                .and_then(|s| s.drift)
                .is_some_and(|d| d.corrected >= 2 && d.last_corrected.is_some())
        },
    )
    .await;
    let seen = phases.stop();
    assert!(!seen.is_empty(), "no write of {name} was seen");
    assert!(
        seen.iter().all(|p| *p == Some(Phase::Active)),
        "{name} left Active while its drift was corrected: {seen:?}"
    );
    // Within the resync interval, a repair reads only what its watches saw
    // change, not every object of the build.
    assert!(
        op.log()
            .contains("planning the objects the watches saw change"),
        "no scoped repair:\n{}",
        op.log()
    );
}

#[tokio::test]
async fn a_bad_store_path_ends_failed_with_its_message() {
    let env = TestEnv::new("op-badpath").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    let _op = Operator::start(
        &env,
        &[&env.cluster],
        &kix_testkit::unique_name("lease"),
        dir.path(),
    );
    let records: Api<Activation> = Api::all(env.client.clone());
    for (i, path) in [
        "/nix/store/../etc/passwd",
        "/tmp/not-in-the-store",
        "/nix/store/00000000000000000000000000000000-x;rm -rf $HOME",
        "/nix/store/0000000000000000000000000000000a-missing",
    ]
    .iter()
    .enumerate()
    {
        let spec: kix_api::ActivationSpec = serde_json::from_value(serde_json::json!({
            "cluster": env.cluster, "engine": "operator",
            "source": {"path": path},
            "receipt": {"user": "t", "host": "t", "kixVersion": "0", "time": "2026-01-01T00:00:00Z", "planDigest": "x"}
        }))
        .expect("spec");
        let record = Activation::new_record(i as u64 + 1, spec);
        let name = kube::ResourceExt::name_any(&record);
        records
            .create(&PostParams::default(), &record)
            .await
            .expect("create");
        wait_until(
            &format!("{path} ends Failed"),
            Duration::from_secs(20),
            || async {
                records.get(&name).await.ok().and_then(|r| r.phase()) == Some(Phase::Failed)
            },
        )
        .await;
        let message = records
            .get(&name)
            .await
            .expect("get")
            .status
            .and_then(|s| s.message)
            .unwrap_or_default();
        assert!(!message.is_empty(), "{path}: Failed without a message");
        eprintln!("{path}: {message}");
        if i < 3 {
            assert!(message.contains("invalid store path"), "{path}: {message}");
        } else {
            assert!(message.contains("not available"), "{path}: {message}");
        }
    }
}

#[tokio::test]
async fn the_finalizer_keeps_what_another_clusters_build_contains() {
    let mut env = TestEnv::new("op-shared").await.expect("env");
    let other = format!("{}-b", env.cluster);
    let dir = tempfile::tempdir().expect("tmp");
    let _op = Operator::start(
        &env,
        &[&env.cluster, &other],
        &kix_testkit::unique_name("lease"),
        dir.path(),
    );
    let shared = configmap("shared", "same");
    let mine = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &format!("{shared}{}", configmap("only-a", "a")),
    );
    let theirs = tree(dir.path(), &other, &env.namespace, &shared);
    for (cluster, root) in [(&env.cluster, &mine), (&other, &theirs)] {
        let out = deploy_operator(cluster, root);
        assert!(out.status.success(), "{}", text(&out));
    }
    env.extra_namespaces.push(env.namespace.clone());
    let records: Api<Activation> = Api::all(env.client.clone());
    records
        .delete(&format!("{}-1", env.cluster), &DeleteParams::default())
        .await
        .expect("delete record");
    wait_until(
        "record deleted by its finalizer",
        Duration::from_secs(30),
        || async {
            records
                .get_opt(&format!("{}-1", env.cluster))
                .await
                .ok()
                .flatten()
                .is_none()
        },
    )
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    assert!(
        cms.get_opt("only-a").await.expect("get").is_none(),
        "only-a must be deleted with its record"
    );
    let kept = cms
        .get_opt("shared")
        .await
        .expect("get")
        .expect("shared must be kept: the other cluster's build has it");
    let annotation =
        kept.metadata.annotations.unwrap_or_default()[kix_api::ANNOTATION_ACTIVATIONS].clone();
    assert_eq!(
        annotation,
        format!("{other}-1"),
        "only the other cluster's entry remains"
    );
}

#[tokio::test]
async fn a_newer_activation_takes_over_while_a_deploy_waits() {
    let env = TestEnv::new("op-takeover").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    // No operator runs for this cluster: the record stays Pending, as when the
    // operator is slow, and a newer record supersedes it.
    let root = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &configmap("settings", "v1"),
    );
    let deploy = spawn_operator_deploy(&env.cluster, &root);
    let records: Api<Activation> = Api::all(env.client.clone());
    let first = format!("{}-1", env.cluster);
    wait_until("first record written", Duration::from_secs(60), || async {
        records.get_opt(&first).await.ok().flatten().is_some()
    })
    .await;
    let _op = Operator::start(
        &env,
        &[&env.cluster],
        &kix_testkit::unique_name("lease"),
        dir.path(),
    );
    // The operator supersedes the older Pending record once a newer one exists.
    let mut newer = records.get(&first).await.expect("get");
    newer.metadata = kube::api::ObjectMeta {
        name: Some(format!("{}-2", env.cluster)),
        labels: newer.metadata.labels.clone(),
        ..Default::default()
    };
    newer.status = None;
    records
        .create(&PostParams::default(), &newer)
        .await
        .expect("newer record");
    let out = tokio::task::spawn_blocking(move || deploy.wait_with_output())
        .await
        .expect("join")
        .expect("wait");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("a newer activation took over"),
        "{}",
        text(&out)
    );
}

#[tokio::test]
async fn two_replicas_only_one_leads_and_a_killed_leader_is_replaced() {
    let env = TestEnv::new("op-leader").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    let lease = kix_testkit::unique_name("lease");
    let mut ops = vec![
        Operator::start(&env, &[&env.cluster], &lease, dir.path()),
        Operator::start(&env, &[&env.cluster], &lease, dir.path()),
    ];
    let leading = |ops: &Vec<Operator>| -> Vec<usize> {
        (0..ops.len())
            .filter(|i| ops[*i].metric("kix_operator_leader") == Some(1.0))
            .collect()
    };
    let started = Instant::now();
    while leading(&ops).len() != 1 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no single leader among the operator replicas within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Stays at exactly one for a while.
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(leading(&ops).len(), 1, "exactly one replica leads");
    }
    let leader = leading(&ops)[0];
    ops[leader].kill();
    let standby = 1 - leader;
    let started = Instant::now();
    while ops[standby].metric("kix_operator_leader") != Some(1.0) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the standby did not take over within 30 s of the leader's kill"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The new leader applies: a deploy through it succeeds.
    let root = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &configmap("settings", "v1"),
    );
    let out = deploy_operator(&env.cluster, &root);
    assert!(out.status.success(), "{}", text(&out));
}

#[tokio::test]
async fn an_operator_killed_mid_apply_converges_after_restart() {
    let env = TestEnv::new("op-kill").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    let lease = kix_testkit::unique_name("lease");
    let yaml: String = (0..300)
        .map(|i| configmap(&format!("cm-{i}"), "v1"))
        .collect();
    let root = tree(dir.path(), &env.cluster, &env.namespace, &yaml);
    let records: Api<Activation> = Api::all(env.client.clone());
    let name = format!("{}-1", env.cluster);

    let mut op = Operator::start(&env, &[&env.cluster], &lease, dir.path());
    let deploy = spawn_operator_deploy(&env.cluster, &root);
    // Kill the operator as soon as it is applying.
    wait_until("record Applying", Duration::from_secs(60), || async {
        records
            .get_opt(&name)
            .await
            .ok()
            .flatten()
            .and_then(|r| r.phase())
            == Some(Phase::Applying)
    })
    .await;
    op.kill();
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    let before = cms
        .list(&Default::default())
        .await
        .expect("list")
        .items
        .len();
    eprintln!("{before} objects applied when the operator was killed");

    let _op = Operator::start(&env, &[&env.cluster], &lease, dir.path());
    let out = tokio::task::spawn_blocking(move || deploy.wait_with_output())
        .await
        .expect("join")
        .expect("wait");
    assert!(out.status.success(), "{}", text(&out));
    let record = records.get(&name).await.expect("record");
    assert_eq!(record.phase(), Some(Phase::Active));
    let names: std::collections::BTreeSet<String> = cms
        .list(&Default::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    for i in 0..300 {
        assert!(
            names.contains(&format!("cm-{i}")),
            "cm-{i} missing after the restart"
        );
    }
}

#[tokio::test]
async fn least_privilege_allow_list_refuses_other_namespaces_and_kinds() {
    let env = TestEnv::new("op-allow").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    // Killed when dropped, also when an assertion below fails.
    let _op = Operator::start_with(
        &env,
        &[&env.cluster],
        &kix_testkit::unique_name("lease"),
        dir.path(),
        &[
            "--allow-namespace",
            &env.namespace,
            "--allow-kind",
            "ConfigMap",
        ],
    );
    let records: Api<Activation> = Api::all(env.client.clone());
    // Allowed: a ConfigMap in the allowed namespace.
    let ok = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &configmap("allowed", "v"),
    );
    let out = deploy_operator(&env.cluster, &ok);
    assert!(out.status.success(), "{}", text(&out));
    // Refused: a ConfigMap in a namespace outside the allow-list.
    let bad_yaml = format!(
        "{}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: elsewhere, namespace: kube-public}}\ndata: {{a: b}}\n",
        configmap("allowed", "v2")
    );
    let bad = tree(dir.path(), &env.cluster, &env.namespace, &bad_yaml);
    let out = deploy_operator(&env.cluster, &bad);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let record = records
        .get(&format!("{}-2", env.cluster))
        .await
        .expect("record");
    assert_eq!(record.phase(), Some(Phase::Failed));
    let message = record.status.and_then(|s| s.message).unwrap_or_default();
    assert!(
        message.contains("kube-public") && message.contains("not allowed"),
        "{message}"
    );
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "kube-public");
    assert!(
        cms.get_opt("elsewhere").await.expect("get").is_none(),
        "nothing outside the allow-list is applied"
    );
}

#[tokio::test]
async fn rollback_and_gc_through_the_operator() {
    let env = TestEnv::new("op-rollback").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    let _op = Operator::start(
        &env,
        &[&env.cluster],
        &kix_testkit::unique_name("lease"),
        dir.path(),
    );
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    let records: Api<Activation> = Api::all(env.client.clone());
    let v1 = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &format!(
            "{}{}",
            configmap("settings", "v1"),
            configmap("only-v1", "x")
        ),
    );
    let v2 = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &configmap("settings", "v2"),
    );
    for root in [&v1, &v2] {
        let out = deploy_operator(&env.cluster, root);
        assert!(out.status.success(), "{}", text(&out));
    }
    assert_eq!(cm_value(&cms, "settings").await.as_deref(), Some("v2"));
    assert!(
        cms.get_opt("only-v1").await.expect("get").is_none(),
        "pruned by the operator"
    );
    // The operator supersedes record 1 just after it settles record 2, when
    // the CLI has returned; the rollback needs it Superseded.
    let first = Activation::name_for(&env.cluster, 1);
    let mut phase = None;
    for _ in 0..100 {
        phase = records.get(&first).await.ok().and_then(|r| r.phase());
        if phase == Some(Phase::Superseded) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(phase, Some(Phase::Superseded), "{first} after 20 s");

    // Rollback: a new operator record (3) for record 1's build.
    let out = kix(&[
        "rollback",
        &env.cluster,
        "--operator",
        "--yes",
        "--timeout",
        "9s",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--timeout has no effect in operator mode"),
        "{}",
        text(&out)
    );
    let current = records
        .get(&format!("{}-3", env.cluster))
        .await
        .expect("record");
    let first = records
        .get(&format!("{}-1", env.cluster))
        .await
        .expect("record");
    assert_eq!(current.spec.source.path, first.spec.source.path);
    assert_eq!(
        current.spec.receipt.rollback_from.as_deref(),
        Some(format!("{}-2", env.cluster).as_str())
    );
    assert_eq!(current.phase(), Some(Phase::Active));
    assert_eq!(cm_value(&cms, "settings").await.as_deref(), Some("v1"));
    assert_eq!(
        cm_value(&cms, "only-v1").await.as_deref(),
        Some("x"),
        "re-created by the rollback"
    );

    // gc: record 1 is Superseded and retired with --keep 0; its finalizer
    // keeps what the current build has.
    let out = kix(&["gc", &env.cluster, "--operator", "--keep", "0", "--yes"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        records
            .get_opt(&format!("{}-1", env.cluster))
            .await
            .expect("get")
            .is_none()
    );
    assert_eq!(
        cm_value(&cms, "settings").await.as_deref(),
        Some("v1"),
        "the current build keeps its objects"
    );
}

#[tokio::test]
async fn objects_that_cannot_be_deleted_are_reported_and_gc_exits_1() {
    let env = TestEnv::new("op-stuck").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    let _op = Operator::start(
        &env,
        &[&env.cluster],
        &kix_testkit::unique_name("lease"),
        dir.path(),
    );
    let records: Api<Activation> = Api::all(env.client.clone());
    let v1 = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &format!(
            "{}{}",
            configmap("keep", "v1"),
            configmap("undeletable", "v1")
        ),
    );
    let v2 = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &configmap("keep", "v2"),
    );
    let out = deploy_operator(&env.cluster, &v1);
    assert!(out.status.success(), "{}", text(&out));

    // An admission policy refuses to delete ConfigMaps in the test namespace,
    // as a webhook or a missing permission would.
    let policy = kix_testkit::unique_name("no-delete");
    let objects = serde_json::json!([
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy", "metadata": {"name": policy},
         "spec": {"failurePolicy": "Fail",
                  "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["DELETE"], "resources": ["configmaps"]}]},
                  "validations": [{"expression": format!("oldObject.metadata.namespace != '{}'", env.namespace), "message": "protected by the test"}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": policy},
         "spec": {"policyName": policy, "validationActions": ["Deny"]}}
    ]);
    let file = dir.path().join("policy.json");
    std::fs::write(
        &file,
        serde_json::json!({"apiVersion": "v1", "kind": "List", "items": objects}).to_string(),
    )
    .expect("write");
    env.kubectl(&["apply", "-f", file.to_str().expect("utf8")])
        .expect("policy");
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    wait_until(
        "the policy is enforced",
        Duration::from_secs(20),
        || async {
            let probe = ConfigMap {
                metadata: kube::api::ObjectMeta {
                    name: Some("probe".into()),
                    ..Default::default()
                },
                ..Default::default()
            };
            let _ = cms.create(&PostParams::default(), &probe).await;
            cms.delete("probe", &DeleteParams::default()).await.is_err()
        },
    )
    .await;

    // The operator cannot prune `undeletable`: the record ends Degraded with
    // the object and the reason, and deploy --operator exits 1.
    let out = deploy_operator(&env.cluster, &v2);
    assert_eq!(
        out.status.code(),
        Some(1),
        "Degraded exits 1: {}",
        text(&out)
    );
    // The CLI prints the record's reasons, not only the phase.
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!(
            "not deleted: ConfigMap {}/undeletable",
            env.namespace
        )),
        "{}",
        text(&out)
    );
    let second = records
        .get(&format!("{}-2", env.cluster))
        .await
        .expect("record");
    assert_eq!(second.phase(), Some(Phase::Degraded));
    let status = second.status.expect("status");
    assert!(
        status
            .failed_deletions
            .iter()
            .any(|f| f.object.name == "undeletable" && f.reason.contains("protected by the test")),
        "{:?}",
        status.failed_deletions
    );

    // gc retires record 1, whose finalizer cannot delete `undeletable` either:
    // reported on the record, and gc exits 1 naming it (3 s wait, not 300 s).
    let out = kix_env(
        &["gc", &env.cluster, "--operator", "--keep", "0", "--yes"],
        &[("KIX_GC_WAIT_SECONDS", "3")],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("{}-1", env.cluster)) && stderr.contains("protected by the test"),
        "{}",
        text(&out)
    );

    // Lift the policy: the finalizer finishes by itself.
    for kind in [
        "validatingadmissionpolicybinding",
        "validatingadmissionpolicy",
    ] {
        env.kubectl(&["delete", kind, &policy])
            .expect("remove policy");
    }
    let name = format!("{}-1", env.cluster);
    wait_until(
        "record deleted once the object can go",
        Duration::from_secs(60),
        || async { records.get_opt(&name).await.ok().flatten().is_none() },
    )
    .await;
    assert!(cms.get_opt("undeletable").await.expect("get").is_none());
}

// ---------------------------------------------------------------- field ownership

/// Adds `handoff` rules to the package of a [`tree`].
fn hand_off(root: &Path, rules: serde_json::Value) {
    let file = root.join("packages/web/package.json");
    let mut package: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("read")).expect("json");
    package["handoff"] = rules;
    std::fs::write(&file, package.to_string()).expect("write");
}

fn configmap_data(name: &str, data: &[(&str, &str)]) -> String {
    let data: serde_json::Map<String, serde_json::Value> = data
        .iter()
        .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
        .collect();
    serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name}, "data": data})
    .to_string()
        + "\n"
}

#[tokio::test]
async fn two_kix_clusters_share_an_object_through_the_operator_and_never_flip_it() {
    let env = TestEnv::new("op-own-shared").await.expect("env");
    let other = format!("{}-b", env.cluster);
    let dir = tempfile::tempdir().expect("tmp");
    let _op = Operator::start(
        &env,
        &[&env.cluster, &other],
        &kix_testkit::unique_name("lease"),
        dir.path(),
    );
    let mine = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &configmap_data("shared", &[("common", "x"), ("from-a", "1")]),
    );
    let theirs = tree(
        dir.path(),
        &other,
        &env.namespace,
        &configmap_data("shared", &[("common", "x"), ("from-b", "2")]),
    );
    for (cluster, root) in [(&env.cluster, &mine), (&other, &theirs)] {
        let out = deploy_operator(cluster, root);
        assert!(out.status.success(), "{}", text(&out));
    }
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    let data = |cm: &ConfigMap| cm.data.clone().unwrap_or_default();
    let live = cms.get("shared").await.expect("shared");
    assert_eq!(
        data(&live).into_iter().collect::<Vec<_>>(),
        [
            ("common".to_string(), "x".to_string()),
            ("from-a".to_string(), "1".to_string()),
            ("from-b".to_string(), "2".to_string())
        ]
    );
    // Both clusters' operators keep it applied without writing it in turn.
    let version = live.metadata.resource_version.clone();
    tokio::time::sleep(Duration::from_secs(6)).await;
    let later = cms.get("shared").await.expect("shared");
    assert_eq!(
        later.metadata.resource_version, version,
        "rewritten while nothing changed: {later:?}"
    );

    // A build of B that sets A's field to another value is refused, naming
    // both clusters and the field; nothing changes.
    let conflicting = tree(
        dir.path(),
        &other,
        &env.namespace,
        &configmap_data("shared", &[("common", "y"), ("from-b", "2")]),
    );
    let out = deploy_operator(&other, &conflicting);
    assert!(!out.status.success(), "{}", text(&out));
    let message = text(&out);
    assert!(
        message.contains("data.common")
            && message.contains(&env.cluster)
            && message.contains(&other),
        "{message}"
    );
    assert_eq!(
        data(&cms.get("shared").await.expect("shared"))["common"],
        "x"
    );
    let records: Api<Activation> = Api::all(env.client.clone());
    assert!(
        records
            .get_opt(&format!("{other}-2"))
            .await
            .expect("get")
            .is_none(),
        "a refused deploy writes no record"
    );
    for cluster in [&env.cluster, &other] {
        let _ = records
            .delete(&format!("{cluster}-1"), &DeleteParams::default())
            .await;
    }
}

#[tokio::test]
async fn drift_correction_leaves_handed_off_fields_to_their_manager() {
    let env = TestEnv::new("op-own-handoff").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    let _op = Operator::start(
        &env,
        &[&env.cluster],
        &kix_testkit::unique_name("lease"),
        dir.path(),
    );
    let deployment = serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "main", "image": "example.invalid/app:1"}]}}}});
    let root = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &format!("{deployment}\n---\n{}", configmap("settings", "hello")),
    );
    hand_off(
        &root,
        serde_json::json!([{"kind": "Deployment", "fields": ["spec.replicas"]}]),
    );
    let out = deploy_operator(&env.cluster, &root);
    assert!(out.status.success(), "{}", text(&out));

    // An autoscaler scales the Deployment; someone edits the ConfigMap.
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(env.client.clone(), &env.namespace);
    deployments
        .patch_scale(
            "web",
            &PatchParams {
                field_manager: Some("horizontal-pod-autoscaler".into()),
                ..Default::default()
            },
            &Patch::Merge(&serde_json::json!({"spec": {"replicas": 2}})),
        )
        .await
        .expect("scale");
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    let patch = serde_json::json!({"data": {"value": "tampered"}});
    cms.patch("settings", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("tamper");
    // The operator corrects the ConfigMap, and leaves the replicas alone.
    wait_until(
        "edited ConfigMap restored",
        Duration::from_secs(20),
        || async { cm_value(&cms, "settings").await.as_deref() == Some("hello") },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let web = deployments.get("web").await.expect("web");
    assert_eq!(
        web.spec.and_then(|s| s.replicas),
        Some(2),
        "handed-off replicas reverted"
    );
    let records: Api<Activation> = Api::all(env.client.clone());
    let _ = records
        .delete(&format!("{}-1", env.cluster), &DeleteParams::default())
        .await;
}

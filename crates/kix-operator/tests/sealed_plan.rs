//! What you confirm is what happens: the plan a user reads and confirms is
//! the one every executor runs, through the CLI and through the operator (a
//! process, against the real control plane). Each test is one observation
//! of issue 16 or one rule of the sealed plan.

mod support;

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kix_api::{Activation, Engine, Phase};
use kix_testkit::TestEnv;
use kube::api::{Api, Patch, PatchParams, PostParams};
use support::*;

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn path_arg(root: &Path) -> &str {
    root.to_str().expect("utf8")
}

async fn record(env: &TestEnv, n: u64) -> Option<Activation> {
    Api::<Activation>::all(env.client.clone())
        .get_opt(&Activation::name_for(&env.cluster, n))
        .await
        .expect("get record")
}

async fn start(env: &TestEnv, dir: &Path) -> Operator {
    Operator::start(
        env,
        &[&env.cluster],
        &kix_testkit::unique_name("lease"),
        dir,
    )
}

/// The store path `kix plan --out` names for a tree (the build is added to
/// the store), and the saved plan document.
fn saved_plan(cluster: &str, root: &Path, file: &Path) -> serde_json::Value {
    let out = kix(&[
        "plan",
        cluster,
        "--path",
        path_arg(root),
        "--out",
        file.to_str().expect("utf8"),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    serde_json::from_str(&std::fs::read_to_string(file).expect("plan file")).expect("json")
}

/// A record written by hand (as another tool or an older kix would), with
/// nothing accepted.
async fn write_record(env: &TestEnv, n: u64, path: &str) -> Activation {
    let spec: kix_api::ActivationSpec = serde_json::from_value(serde_json::json!({
        "cluster": env.cluster, "engine": "operator",
        "source": {"path": path},
        "receipt": {"user": "t", "host": "t", "kixVersion": "0", "time": "2026-01-01T00:00:00Z", "planDigest": "x"}
    }))
    .expect("spec");
    Api::<Activation>::all(env.client.clone())
        .create(&PostParams::default(), &Activation::new_record(n, spec))
        .await
        .expect("create record")
}

async fn wait_phase(env: &TestEnv, n: u64, phase: Phase) -> Activation {
    let name = Activation::name_for(&env.cluster, n);
    wait_until(
        &format!("{name} {phase}"),
        Duration::from_secs(60),
        || async { record(env, n).await.and_then(|r| r.phase()) == Some(phase) },
    )
    .await;
    record(env, n).await.expect("record")
}

#[tokio::test]
async fn local_engine_flags_do_not_shape_the_operator_plan() {
    let env = TestEnv::new("seal-flags").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    let _op = start(&env, dir.path()).await;
    let both = format!("{}{}", configmap("a", "one"), configmap("b", "one"));
    let v1 = tree(dir.path(), &env.cluster, &env.namespace, &both);
    let v2 = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &configmap("a", "one"),
    );
    let out = deploy_operator(&env.cluster, &v1);
    assert!(out.status.success(), "{}", text(&out));

    let out = kix(&[
        "deploy",
        &env.cluster,
        "--path",
        path_arg(&v2),
        "--operator",
        "--yes",
        "--prune=false",
        "--reconcile",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    // The plan shown is the operator's: it prunes b.
    assert!(stdout(&out).contains("1 to delete"), "{}", text(&out));
    for flag in ["--prune", "--reconcile"] {
        assert!(
            stderr(&out).contains(&format!("{flag} has no effect in operator mode")),
            "{}",
            text(&out)
        );
    }
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    assert!(cms.get_opt("b").await.expect("get").is_none(), "pruned");
    let second = record(&env, 2).await.expect("record 2");
    let accepted = &second.spec.receipt.accepted;
    assert_eq!(accepted.deletions, 1, "{accepted:?}");
    assert_eq!(
        accepted.actions,
        [format!("delete ConfigMap {}/b", env.namespace)]
    );
}

#[tokio::test]
async fn an_unconfirmed_destructive_action_changes_nothing_and_the_applied_record_stays() {
    let env = TestEnv::new("seal-unconfirmed").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    let _op = start(&env, dir.path()).await;
    let both = format!("{}{}", configmap("a", "one"), configmap("b", "one"));
    let v1 = tree(dir.path(), &env.cluster, &env.namespace, &both);
    let v2 = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &configmap("a", "two"),
    );
    let out = deploy_operator(&env.cluster, &v1);
    assert!(out.status.success(), "{}", text(&out));
    let plan = saved_plan(&env.cluster, &v2, &dir.path().join("v2.json"));

    // A record that accepts nothing, for a build whose plan deletes b.
    write_record(&env, 2, plan["storePath"].as_str().expect("storePath")).await;
    let failed = wait_phase(&env, 2, Phase::Failed).await;
    let message = failed.status.and_then(|s| s.message).unwrap_or_default();
    assert!(
        message.contains("not confirmed")
            && message.contains(&format!("delete ConfigMap {}/b", env.namespace)),
        "{message}"
    );
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    assert_eq!(
        cm_value(&cms, "a").await.as_deref(),
        Some("one"),
        "not applied"
    );
    assert!(
        cms.get_opt("b").await.expect("get").is_some(),
        "not deleted"
    );

    // Record 1 is still current and still kept applied.
    let out = kix(&["status", &env.cluster, "--operator"]);
    assert!(
        stdout(&out).contains(&format!("current activation: {}-1 (Active)", env.cluster)),
        "{}",
        text(&out)
    );
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(&serde_json::json!({"data": {"value": "edited"}})),
    )
    .await
    .expect("edit");
    wait_until("the edit reverted", Duration::from_secs(20), || async {
        cm_value(&cms, "a").await.as_deref() == Some("one")
    })
    .await;
}

#[tokio::test]
async fn rollback_through_the_operator_plans_and_needs_accept_migrations() {
    let env = TestEnv::new("seal-rollback").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    let _op = start(&env, dir.path()).await;
    let extra = kix_testkit::unique_name("seal-extra-ns");
    let v1 = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &configmap("settings", "v1"),
    );
    let v2 = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &format!(
            "{}---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: {extra}}}\n",
            configmap("settings", "v2")
        ),
    );
    for root in [&v1, &v2] {
        let out = deploy_operator(&env.cluster, root);
        assert!(out.status.success(), "{}", text(&out));
    }
    let namespaces: Api<Namespace> = Api::all(env.client.clone());
    let terminating = || async {
        namespaces
            .get_opt(&extra)
            .await
            .expect("get")
            .is_none_or(|ns| ns.metadata.deletion_timestamp.is_some())
    };

    // The rollback's plan deletes the Namespace: shown, and refused
    // without --accept-migrations, before anything changes.
    let out = kix(&["rollback", &env.cluster, "--operator", "--yes"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stdout(&out).contains(&extra),
        "the plan is shown: {}",
        text(&out)
    );
    assert!(
        stderr(&out).contains("--accept-migrations"),
        "{}",
        text(&out)
    );
    assert!(!terminating().await, "the Namespace is untouched");
    assert!(record(&env, 3).await.is_none(), "no record written");

    let out = kix(&[
        "rollback",
        &env.cluster,
        "--operator",
        "--yes",
        "--accept-migrations",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let third = record(&env, 3).await.expect("a new record");
    let first = record(&env, 1).await.expect("record 1");
    let second = record(&env, 2).await.expect("record 2");
    assert_eq!(third.spec.engine, Engine::Operator);
    assert_eq!(third.spec.source.path, first.spec.source.path);
    assert_eq!(
        third.spec.receipt.rollback_from.as_deref(),
        Some(second.metadata.name.as_deref().expect("name")),
        "rollbackFrom names the record that was current"
    );
    assert!(
        third
            .spec
            .receipt
            .accepted
            .actions
            .contains(&format!("delete Namespace/{extra}")),
        "{:?}",
        third.spec.receipt.accepted
    );
    assert_ne!(
        second.spec.source.path, first.spec.source.path,
        "record 2 is not rewritten"
    );
    assert_eq!(third.phase(), Some(Phase::Active));
    assert_eq!(second.phase(), Some(Phase::Superseded));
    assert!(terminating().await, "the accepted deletion happened");
}

#[tokio::test]
async fn status_reads_the_active_record_and_shows_a_newer_pending_one() {
    let env = TestEnv::new("seal-status").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    let mut op = start(&env, dir.path()).await;
    let v1 = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &configmap("a", "one"),
    );
    let out = deploy_operator(&env.cluster, &v1);
    assert!(out.status.success(), "{}", text(&out));
    op.kill();
    let first = record(&env, 1).await.expect("record 1");
    write_record(&env, 2, &first.spec.source.path).await;

    let out = kix(&["status", &env.cluster, "--operator"]);
    assert!(out.status.success(), "{}", text(&out));
    let shown = stdout(&out);
    assert!(
        shown.contains(&format!("current activation: {}-1 (Active)", env.cluster)),
        "{shown}"
    );
    assert!(
        shown.contains(&format!("latest activation: {}-2 (Pending)", env.cluster)),
        "{shown}"
    );
}

#[tokio::test]
async fn a_rollback_to_a_missing_build_or_a_failed_build_leaves_the_cluster_protected() {
    let env = TestEnv::new("seal-missing").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    let _op = start(&env, dir.path()).await;
    let v1 = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &configmap("a", "v1"),
    );
    let v2 = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &configmap("a", "v2"),
    );
    for root in [&v1, &v2] {
        let out = deploy_operator(&env.cluster, root);
        assert!(out.status.success(), "{}", text(&out));
    }
    // Record 1's build is gone from the store.
    let missing = "/nix/store/0000000000000000000000000000000a-missing";
    Api::<Activation>::all(env.client.clone())
        .patch(
            &Activation::name_for(&env.cluster, 1),
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"spec": {"source": {"path": missing}}})),
        )
        .await
        .expect("patch record 1");

    let out = kix(&["rollback", &env.cluster, "--operator", "--yes"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("no longer in the Nix store")
            && stderr(&out).contains("nothing was changed"),
        "{}",
        text(&out)
    );
    assert!(record(&env, 3).await.is_none(), "no record written");
    assert_eq!(
        record(&env, 2).await.and_then(|r| r.phase()),
        Some(Phase::Active)
    );

    // The operator fails a new record on a missing build: record 2 stays
    // current and keeps being reconciled.
    write_record(&env, 3, missing).await;
    wait_phase(&env, 3, Phase::Failed).await;
    let out = kix(&["status", &env.cluster, "--operator"]);
    assert!(
        stdout(&out).contains(&format!("current activation: {}-2 (Active)", env.cluster)),
        "{}",
        text(&out)
    );
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(&serde_json::json!({"data": {"value": "edited"}})),
    )
    .await
    .expect("edit");
    wait_until("the edit reverted", Duration::from_secs(20), || async {
        cm_value(&cms, "a").await.as_deref() == Some("v2")
    })
    .await;
}

#[tokio::test]
async fn rollback_through_the_operator_over_local_records_writes_an_operator_record() {
    let env = TestEnv::new("seal-local").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    let _op = start(&env, dir.path()).await;
    let v1 = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &configmap("a", "v1"),
    );
    let v2 = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &configmap("a", "v2"),
    );
    for root in [&v1, &v2] {
        let out = kix(&["deploy", &env.cluster, "--path", path_arg(root), "--yes"]);
        assert!(out.status.success(), "{}", text(&out));
    }
    let second_before = record(&env, 2).await.expect("record 2");

    let out = kix(&["rollback", &env.cluster, "--operator", "--yes"]);
    assert!(out.status.success(), "{}", text(&out));
    let second = record(&env, 2).await.expect("record 2");
    let third = record(&env, 3).await.expect("record 3");
    assert_eq!(
        second.spec, second_before.spec,
        "the local record is not rewritten"
    );
    assert_eq!(second.phase(), Some(Phase::Superseded));
    assert_eq!(third.spec.engine, Engine::Operator);
    assert_eq!(third.phase(), Some(Phase::Active));
    assert_eq!(
        third.spec.receipt.rollback_from.as_deref(),
        second.metadata.name.as_deref()
    );
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    assert_eq!(cm_value(&cms, "a").await.as_deref(), Some("v1"));
}

#[tokio::test]
async fn gc_reports_deleted_only_when_the_objects_are_gone() {
    let env = TestEnv::new("seal-gc").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    let _op = start(&env, dir.path()).await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    let both = format!("{}{}", configmap("keep", "one"), configmap("held", "one"));
    let v1 = tree(dir.path(), &env.cluster, &env.namespace, &both);
    let v2 = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &configmap("keep", "two"),
    );
    let out = deploy_operator(&env.cluster, &v1);
    assert!(out.status.success(), "{}", text(&out));
    let hold = serde_json::json!({"metadata": {"finalizers": ["kix.test/hold"]}});
    cms.patch("held", &PatchParams::default(), &Patch::Merge(&hold))
        .await
        .expect("finalizer");
    let _ = deploy_operator(&env.cluster, &v2);

    let out = kix_env(
        &["gc", &env.cluster, "--operator", "--keep", "0", "--yes"],
        &[("KIX_GC_WAIT_SECONDS", "3")],
    );
    let released = cms
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"metadata": {"finalizers": null}})),
        )
        .await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains(&format!("ConfigMap {}/held", env.namespace))
            && stderr(&out).contains("held by finalizers kix.test/hold"),
        "{}",
        text(&out)
    );
    assert!(
        !stdout(&out).contains(&format!("deleted {}-1", env.cluster)),
        "{}",
        text(&out)
    );
    released.expect("finalizer removed");
}

#[tokio::test]
async fn gc_through_the_operator_releases_the_objects_of_local_records() {
    let env = TestEnv::new("seal-gc-local").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    let _op = start(&env, dir.path()).await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    let both = format!("{}{}", configmap("keep", "one"), configmap("old", "one"));
    let v1 = tree(dir.path(), &env.cluster, &env.namespace, &both);
    let v2 = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &configmap("keep", "two"),
    );
    let out = kix(&["deploy", &env.cluster, "--path", path_arg(&v1), "--yes"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = kix(&[
        "deploy",
        &env.cluster,
        "--path",
        path_arg(&v2),
        "--yes",
        "--prune=false",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        cms.get_opt("old").await.expect("get").is_some(),
        "not pruned"
    );

    let out = kix_env(
        &["gc", &env.cluster, "--operator", "--keep", "0", "--yes"],
        &[("KIX_GC_WAIT_SECONDS", "10")],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stdout(&out).contains(&format!("deleted {}-1", env.cluster)),
        "{}",
        text(&out)
    );
    assert!(
        cms.get_opt("old").await.expect("get").is_none(),
        "released by the CLI"
    );
    assert_eq!(cm_value(&cms, "keep").await.as_deref(), Some("two"));
}

#[tokio::test]
async fn the_cli_shows_why_the_operator_cannot_proceed() {
    let env = TestEnv::new("seal-lease").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    let _op = start(&env, dir.path()).await;
    let v1 = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &configmap("a", "one"),
    );
    // Someone else holds the cluster's deploy Lease.
    let lease = kix_engine::lease::lease_name(&env.cluster);
    let now = chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string();
    let file = dir.path().join("lease.json");
    std::fs::write(
        &file,
        serde_json::json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": lease, "namespace": env.namespace},
            "spec": {"holderIdentity": "someone-else", "leaseDurationSeconds": 600,
                     "acquireTime": now, "renewTime": now}})
        .to_string(),
    )
    .expect("write");
    env.kubectl(&["apply", "-f", file.to_str().expect("utf8")])
        .expect("lease");

    let deploy = spawn_operator_deploy(&env.cluster, &v1);
    wait_until(
        "the record says the Lease is held",
        Duration::from_secs(60),
        || async {
            record(&env, 1)
                .await
                .and_then(|r| r.status?.message)
                .is_some_and(|m| m.contains("held by someone-else"))
        },
    )
    .await;
    // Held for more than two of the CLI's 2 s polls, so it sees the reason.
    tokio::time::sleep(Duration::from_secs(5)).await;
    env.kubectl(&["delete", "lease", &lease, "-n", &env.namespace])
        .expect("release");
    let out = deploy.wait_with_output().expect("deploy");
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stderr(&out).contains("Pending — waiting: the deploy Lease")
            && stderr(&out).contains("held by someone-else"),
        "{}",
        text(&out)
    );
}

#[tokio::test]
async fn a_saved_plan_runs_only_while_it_is_what_a_deploy_would_do() {
    let env = TestEnv::new("seal-saved").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    let _op = start(&env, dir.path()).await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    let both = format!("{}{}", configmap("a", "one"), configmap("b", "one"));
    let v1 = tree(dir.path(), &env.cluster, &env.namespace, &both);
    let v2 = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &configmap("a", "two"),
    );
    let file = |n: &str| dir.path().join(n);
    let arg = |p: &Path| p.to_str().expect("utf8").to_string();

    let saved = saved_plan(&env.cluster, &v1, &file("p1.json"));
    assert_eq!(saved["cluster"], env.cluster.as_str());
    assert!(saved["digest"].as_str().is_some_and(|d| !d.is_empty()));
    let out = kix(&["deploy", &env.cluster, "--plan", &arg(&file("p1.json"))]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(cm_value(&cms, "a").await.as_deref(), Some("one"));
    assert_eq!(
        record(&env, 1)
            .await
            .expect("record")
            .spec
            .receipt
            .plan_digest,
        saved["digest"].as_str().expect("digest")
    );

    // Saved: update a, delete b. Then b goes out of band: the plan moved.
    saved_plan(&env.cluster, &v2, &file("p2.json"));
    cms.delete("b", &Default::default())
        .await
        .expect("delete b");
    let out = kix(&["deploy", &env.cluster, "--plan", &arg(&file("p2.json"))]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains(&format!("- delete v1 ConfigMap {}/b", env.namespace))
            && stderr(&out).contains("nothing was changed"),
        "{}",
        text(&out)
    );
    assert_eq!(
        cm_value(&cms, "a").await.as_deref(),
        Some("one"),
        "unchanged"
    );
    assert!(record(&env, 2).await.is_none(), "no record written");

    // A plan for another Kix cluster is refused.
    let out = kix(&[
        "deploy",
        "another-cluster",
        "--plan",
        &arg(&file("p2.json")),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("is a plan of Kix cluster"),
        "{}",
        text(&out)
    );

    // Planned again as the operator will, run through the operator.
    let out = kix(&[
        "plan",
        &env.cluster,
        "--path",
        path_arg(&v2),
        "--operator",
        "--out",
        &arg(&file("p3.json")),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file("p3.json")).expect("read"))
            .expect("json");
    let out = kix(&[
        "deploy",
        &env.cluster,
        "--plan",
        &arg(&file("p3.json")),
        "--operator",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(cm_value(&cms, "a").await.as_deref(), Some("two"));
    let second = record(&env, 2).await.expect("record 2");
    assert_eq!(second.spec.engine, Engine::Operator);
    assert_eq!(
        second.spec.receipt.plan_digest,
        saved["digest"].as_str().expect("digest")
    );
}

#[tokio::test]
async fn a_bad_saved_plan_is_refused_naming_the_file() {
    let env = TestEnv::new("seal-badplan").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    let cases = [
        ("not-json.json", "{".to_string(), "not a kix plan (JSON)"),
        (
            "no-digest.json",
            serde_json::json!({"cluster": env.cluster, "storePath": "/nix/store/x", "options": {}})
                .to_string(),
            "no \"digest\" field",
        ),
        (
            "gone.json",
            serde_json::json!({"cluster": env.cluster, "digest": "d", "options": {},
                "storePath": "/nix/store/0000000000000000000000000000000a-missing"})
            .to_string(),
            "no longer in the Nix store",
        ),
    ];
    for (name, content, expected) in cases {
        let file = dir.path().join(name);
        std::fs::write(&file, content).expect("write");
        let out = kix(&[
            "deploy",
            &env.cluster,
            "--plan",
            file.to_str().expect("utf8"),
        ]);
        assert_eq!(out.status.code(), Some(1), "{name}: {}", text(&out));
        assert!(
            stderr(&out).contains(expected)
                && (stderr(&out).contains(name) || expected.contains("Nix store")),
            "{name}: {}",
            text(&out)
        );
    }
    assert!(record(&env, 1).await.is_none(), "nothing recorded");
}

/// `kix <args>` in the background (killed if the test fails first).
fn spawn_kix(args: &[&str]) -> BackgroundDeploy {
    let child = kix_command(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn kix");
    BackgroundDeploy(Some(child))
}

async fn set_phase(env: &TestEnv, n: u64, phase: Phase) {
    Api::<Activation>::all(env.client.clone())
        .patch_status(
            &Activation::name_for(&env.cluster, n),
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"status": {"phase": phase}})),
        )
        .await
        .expect("patch status");
}

fn configmaps(prefix: &str, n: usize) -> String {
    (0..n)
        .map(|i| configmap(&format!("{prefix}{i}"), "one"))
        .collect()
}

async fn count_configmaps(cms: &Api<ConfigMap>, prefix: &str) -> usize {
    cms.list(&Default::default())
        .await
        .expect("list")
        .items
        .iter()
        .filter(|c| {
            c.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(prefix))
        })
        .count()
}

#[tokio::test]
async fn a_saved_plan_runs_with_the_options_it_was_planned_with() {
    let env = TestEnv::new("seal-options").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    let both = format!("{}{}", configmap("a", "one"), configmap("b", "one"));
    let v1 = tree(dir.path(), &env.cluster, &env.namespace, &both);
    let v2 = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &configmap("a", "two"),
    );
    let out = kix(&["deploy", &env.cluster, "--path", path_arg(&v1), "--yes"]);
    assert!(out.status.success(), "{}", text(&out));
    // Another tool owns a's value: only --force-conflicts takes it.
    let theirs = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a"}, "data": {"value": "theirs"}});
    cms.patch(
        "a",
        &PatchParams::apply("other-tool").force(),
        &Patch::Apply(&theirs),
    )
    .await
    .expect("other manager");
    let file = |n: &str| dir.path().join(n);
    let arg = |p: &Path| p.to_str().expect("utf8").to_string();

    // Saved with --force-conflicts --prune=false: run without the flags, it
    // takes the field and deletes nothing.
    let out = kix(&[
        "plan",
        &env.cluster,
        "--path",
        path_arg(&v2),
        "--force-conflicts",
        "--prune=false",
        "--out",
        &arg(&file("forced.json")),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let out = kix(&["deploy", &env.cluster, "--plan", &arg(&file("forced.json"))]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(cm_value(&cms, "a").await.as_deref(), Some("two"));
    assert!(cms.get_opt("b").await.expect("get").is_some(), "not pruned");

    // Saved with pruning: a flag that says otherwise is refused, naming it.
    let saved = saved_plan(&env.cluster, &v2, &file("pruning.json"));
    assert_eq!(saved["executor"], "local");
    let out = kix(&[
        "deploy",
        &env.cluster,
        "--plan",
        &arg(&file("pruning.json")),
        "--prune=false",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("--prune=false (the plan has --prune=true)")
            && stderr(&out).contains("nothing was changed"),
        "{}",
        text(&out)
    );
    assert!(cms.get_opt("b").await.expect("get").is_some(), "unchanged");
    assert!(record(&env, 3).await.is_none(), "no record written");
    let out = kix(&[
        "deploy",
        &env.cluster,
        "--plan",
        &arg(&file("pruning.json")),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        cms.get_opt("b").await.expect("get").is_none(),
        "the saved deletion"
    );
}

#[tokio::test]
async fn an_operator_plan_is_saved_and_runs_only_through_the_operator() {
    let env = TestEnv::new("seal-opplan").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    let _op = start(&env, dir.path()).await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    let both = format!("{}{}", configmap("a", "one"), configmap("b", "one"));
    let v1 = tree(dir.path(), &env.cluster, &env.namespace, &both);
    let v2 = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &configmap("a", "two"),
    );
    let out = deploy_operator(&env.cluster, &v1);
    assert!(out.status.success(), "{}", text(&out));
    let file = |n: &str| dir.path().join(n);
    let arg = |p: &Path| p.to_str().expect("utf8").to_string();

    // The operator's plan: it prunes whatever --prune says.
    let out = kix(&[
        "plan",
        &env.cluster,
        "--path",
        path_arg(&v2),
        "--operator",
        "--prune=false",
        "--out",
        &arg(&file("operator.json")),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(stdout(&out).contains("1 to delete"), "{}", text(&out));
    assert!(
        stderr(&out).contains("--prune has no effect in operator mode"),
        "{}",
        text(&out)
    );
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file("operator.json")).expect("read"))
            .expect("json");
    assert_eq!(saved["executor"], "operator");
    let out = kix(&[
        "plan",
        &env.cluster,
        "--path",
        path_arg(&v2),
        "--prune=false",
        "--out",
        &arg(&file("local.json")),
    ]);
    assert!(out.status.success(), "{}", text(&out));

    // Each runs only with the executor it was made for.
    let out = kix(&[
        "deploy",
        &env.cluster,
        "--plan",
        &arg(&file("local.json")),
        "--operator",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("is a plan for the local engine")
            && stderr(&out).contains("--operator --out"),
        "{}",
        text(&out)
    );
    let out = kix(&[
        "deploy",
        &env.cluster,
        "--plan",
        &arg(&file("operator.json")),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("is the operator's plan"),
        "{}",
        text(&out)
    );
    assert!(record(&env, 2).await.is_none(), "no record written");

    let out = kix(&[
        "deploy",
        &env.cluster,
        "--plan",
        &arg(&file("operator.json")),
        "--operator",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(cm_value(&cms, "a").await.as_deref(), Some("two"));
    assert!(
        cms.get_opt("b").await.expect("get").is_none(),
        "pruned as saved"
    );
    let second = record(&env, 2).await.expect("record 2");
    assert!(second.spec.receipt.saved_plan, "{:?}", second.spec.receipt);
    assert_eq!(
        second.spec.receipt.plan_digest,
        saved["digest"].as_str().expect("digest")
    );
}

#[tokio::test]
async fn the_operator_runs_a_saved_plan_only_while_its_plan_has_the_saved_digest() {
    let env = TestEnv::new("seal-opmoved").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    let mut op = start(&env, dir.path()).await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    let both = format!("{}{}", configmap("a", "one"), configmap("b", "one"));
    let v1 = tree(dir.path(), &env.cluster, &env.namespace, &both);
    let v2 = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &configmap("a", "two"),
    );
    let out = deploy_operator(&env.cluster, &v1);
    assert!(out.status.success(), "{}", text(&out));
    let file = dir.path().join("operator.json");
    let out = kix(&[
        "plan",
        &env.cluster,
        "--path",
        path_arg(&v2),
        "--operator",
        "--out",
        file.to_str().expect("utf8"),
    ]);
    assert!(out.status.success(), "{}", text(&out));

    // The record is written while the operator is down; then b goes out of
    // band: the operator's plan is no longer the saved one.
    op.kill();
    let deploy = spawn_kix(&[
        "deploy",
        &env.cluster,
        "--plan",
        file.to_str().expect("utf8"),
        "--operator",
    ]);
    wait_until("record 2 is written", Duration::from_secs(60), || async {
        record(&env, 2).await.is_some()
    })
    .await;
    cms.delete("b", &Default::default())
        .await
        .expect("delete b");
    let _op = start(&env, dir.path()).await;
    let out = deploy.wait_with_output().expect("deploy");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("no longer the saved plan")
            && stderr(&out).contains("0 to delete, 1 in the saved plan"),
        "{}",
        text(&out)
    );
    assert_eq!(
        cm_value(&cms, "a").await.as_deref(),
        Some("one"),
        "unchanged"
    );
    assert_eq!(
        record(&env, 2).await.and_then(|r| r.phase()),
        Some(Phase::Failed)
    );
    assert_eq!(
        record(&env, 1).await.and_then(|r| r.phase()),
        Some(Phase::Active),
        "the applied record stays current"
    );
}

#[tokio::test]
async fn an_interrupted_prune_of_more_than_a_listed_number_of_deletions_resumes() {
    let env = TestEnv::new("seal-many").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    let mut op = start(&env, dir.path()).await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    let many = kix_api::Accepted::MAX_LISTED + 20;
    let v1 = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &format!("{}{}", configmap("keep", "one"), configmaps("c", many)),
    );
    let v2 = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &configmap("keep", "one"),
    );
    let out = deploy_operator(&env.cluster, &v1);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(count_configmaps(&cms, "c").await, many);

    // The record of v2 accepts its deletions by digest and counts only.
    op.kill();
    let root = path_arg(&v2).to_string();
    let deploy = spawn_kix(&[
        "deploy",
        &env.cluster,
        "--path",
        &root,
        "--operator",
        "--yes",
        "--accept-deletions",
    ]);
    wait_until("record 2 is written", Duration::from_secs(60), || async {
        record(&env, 2).await.is_some()
    })
    .await;
    let accepted = record(&env, 2).await.expect("record").spec.receipt.accepted;
    assert!(accepted.actions.is_empty(), "{accepted:?}");
    assert_eq!(accepted.deletions as usize, many);

    // An operator stopped mid-prune: some deletions done, the record Applying.
    for i in 0..30 {
        cms.delete(&format!("c{i}"), &Default::default())
            .await
            .expect("delete");
    }
    set_phase(&env, 2, Phase::Applying).await;
    let _op = start(&env, dir.path()).await;
    let out = deploy.wait_with_output().expect("deploy");
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stderr(&out).contains(&format!("{}-2: Active", env.cluster)),
        "{}",
        text(&out)
    );
    assert_eq!(count_configmaps(&cms, "c").await, 0, "the prune finished");
    assert_eq!(cm_value(&cms, "keep").await.as_deref(), Some("one"));
}

#[tokio::test]
async fn a_new_build_the_apiserver_refuses_fails_and_the_applied_record_stays_current() {
    let env = TestEnv::new("seal-refused").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    let _op = start(&env, dir.path()).await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    let v1 = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &configmap("a", "one"),
    );
    let out = deploy_operator(&env.cluster, &v1);
    assert!(out.status.success(), "{}", text(&out));
    // In a Namespace the build creates, so no dry-run sees it before the
    // apply: a data key the apiserver refuses.
    let extra = kix_testkit::unique_name("seal-refused-ns");
    let v2 = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &format!(
            "{}---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: {extra}}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: bad, namespace: {extra}}}\ndata: {{\"not a key!\": x}}\n",
            configmap("a", "two")
        ),
    );
    let out = deploy_operator(&env.cluster, &v2);
    let _ = env.kubectl(&["delete", "namespace", &extra, "--wait=false"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains(&format!("{}-2 failed", env.cluster))
            && stderr(&out).contains("ConfigMap")
            && stderr(&out).contains("bad"),
        "{}",
        text(&out)
    );
    assert_eq!(
        record(&env, 2).await.and_then(|r| r.phase()),
        Some(Phase::Failed)
    );
    assert_eq!(
        record(&env, 1).await.and_then(|r| r.phase()),
        Some(Phase::Active),
        "not superseded"
    );
    let out = kix(&["status", &env.cluster, "--operator"]);
    assert!(
        stdout(&out).contains(&format!("current activation: {}-1 (Active)", env.cluster)),
        "{}",
        text(&out)
    );
    // The applied record is reconciled: what the failed apply changed goes back.
    wait_until("a is v1's again", Duration::from_secs(20), || async {
        cm_value(&cms, "a").await.as_deref() == Some("one")
    })
    .await;
}

#[tokio::test]
async fn an_unhealthy_new_build_ends_degraded_with_its_reasons_and_takes_over() {
    let env = TestEnv::new("seal-unhealthy").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    let _op = start(&env, dir.path()).await;
    let v1 = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &configmap("a", "one"),
    );
    let out = deploy_operator(&env.cluster, &v1);
    assert!(out.status.success(), "{}", text(&out));
    // A Pod no node can take: Degraded once it stays unschedulable.
    let pod = "---\napiVersion: v1\nkind: Pod\nmetadata: {name: nowhere}\nspec:\n  nodeSelector: {kix-test: nowhere}\n  containers: [{name: app, image: \"example.invalid/app:1\"}]\n";
    let v2 = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &format!("{}{pod}", configmap("a", "two")),
    );
    let out = deploy_operator(&env.cluster, &v2);
    assert_eq!(
        out.status.code(),
        Some(1),
        "Degraded exits 1: {}",
        text(&out)
    );
    assert!(
        stdout(&out).contains(&format!("{}-2: Degraded", env.cluster))
            && stderr(&out).contains("reason: package web: ")
            && stderr(&out).contains(&format!("Pod {}/nowhere", env.namespace)),
        "{}",
        text(&out)
    );
    // The operator supersedes the older record just after it settles the
    // new one, which is when the CLI returns: give it a moment.
    let mut phase = None;
    for _ in 0..100 {
        phase = record(&env, 1).await.and_then(|r| r.phase());
        if phase == Some(Phase::Superseded) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        phase,
        Some(Phase::Superseded),
        "a Degraded build is applied: it takes over (waited 20 s)"
    );
}

#[tokio::test]
async fn deploy_through_the_operator_shows_the_objects_still_being_deleted() {
    let env = TestEnv::new("seal-deleting").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    let _op = start(&env, dir.path()).await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    let both = format!("{}{}", configmap("a", "one"), configmap("held", "one"));
    let v1 = tree(dir.path(), &env.cluster, &env.namespace, &both);
    let v2 = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &configmap("a", "one"),
    );
    let out = deploy_operator(&env.cluster, &v1);
    assert!(out.status.success(), "{}", text(&out));
    let hold = serde_json::json!({"metadata": {"finalizers": ["kix.test/hold"]}});
    cms.patch("held", &PatchParams::default(), &Patch::Merge(&hold))
        .await
        .expect("finalizer");
    let out = deploy_operator(&env.cluster, &v2);
    let released = cms
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"metadata": {"finalizers": null}})),
        )
        .await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stderr(&out).contains(&format!(
            "deleting ConfigMap {}/held (waits for kix.test/hold) since ",
            env.namespace
        )),
        "{}",
        text(&out)
    );
    released.expect("finalizer removed");
}

#[tokio::test]
async fn rollback_from_names_the_applied_record_not_a_newer_pending_one() {
    let env = TestEnv::new("seal-from").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    let v1 = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &configmap("a", "v1"),
    );
    let v2 = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &configmap("a", "v2"),
    );
    for root in [&v1, &v2] {
        let out = kix(&["deploy", &env.cluster, "--path", path_arg(root), "--yes"]);
        assert!(out.status.success(), "{}", text(&out));
    }
    // A newer record nobody acts on (no operator runs), still Pending.
    let second = record(&env, 2).await.expect("record 2");
    write_record(&env, 3, &second.spec.source.path).await;

    let out = kix(&["rollback", &env.cluster, "--yes"]);
    assert!(out.status.success(), "{}", text(&out));
    let fourth = record(&env, 4).await.expect("record 4");
    assert_eq!(
        fourth.spec.receipt.rollback_from.as_deref(),
        Some(format!("{}-2", env.cluster).as_str()),
        "the record that was applied"
    );
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    assert_eq!(cm_value(&cms, "a").await.as_deref(), Some("v1"));
}

#[tokio::test]
async fn rollback_through_the_operator_needs_yes_without_a_terminal() {
    let env = TestEnv::new("seal-rbyes").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    let _op = start(&env, dir.path()).await;
    let v1 = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &configmap("a", "v1"),
    );
    let v2 = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &configmap("a", "v2"),
    );
    for root in [&v1, &v2] {
        let out = deploy_operator(&env.cluster, root);
        assert!(out.status.success(), "{}", text(&out));
    }
    let out = kix(&["rollback", &env.cluster, "--operator"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("confirmation needed and stdin is not a terminal"),
        "{}",
        text(&out)
    );
    assert!(record(&env, 3).await.is_none(), "nothing recorded");
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    assert_eq!(cm_value(&cms, "a").await.as_deref(), Some("v2"));
}

#[tokio::test]
async fn status_shows_a_newer_applying_record_on_its_own_line() {
    let env = TestEnv::new("seal-applying").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    let mut op = start(&env, dir.path()).await;
    let v1 = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &configmap("a", "one"),
    );
    let out = deploy_operator(&env.cluster, &v1);
    assert!(out.status.success(), "{}", text(&out));
    op.kill();
    let first = record(&env, 1).await.expect("record 1");
    write_record(&env, 2, &first.spec.source.path).await;
    set_phase(&env, 2, Phase::Applying).await;

    let out = kix(&["status", &env.cluster, "--operator"]);
    assert!(out.status.success(), "{}", text(&out));
    let shown = stdout(&out);
    assert!(
        shown.contains(&format!("current activation: {}-1 (Active)", env.cluster)),
        "{shown}"
    );
    assert!(
        shown.contains(&format!("latest activation: {}-2 (Applying)", env.cluster)),
        "{shown}"
    );
}

#[tokio::test]
async fn local_gc_names_an_object_held_by_a_finalizer_and_exits_1() {
    let env = TestEnv::new("seal-gc-held").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    let both = format!("{}{}", configmap("keep", "one"), configmap("held", "one"));
    let v1 = tree(dir.path(), &env.cluster, &env.namespace, &both);
    let v2 = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &configmap("keep", "two"),
    );
    let out = kix(&["deploy", &env.cluster, "--path", path_arg(&v1), "--yes"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = kix(&[
        "deploy",
        &env.cluster,
        "--path",
        path_arg(&v2),
        "--yes",
        "--prune=false",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let hold = serde_json::json!({"metadata": {"finalizers": ["kix.test/hold"]}});
    cms.patch("held", &PatchParams::default(), &Patch::Merge(&hold))
        .await
        .expect("finalizer");

    let out = kix_env(
        &["gc", &env.cluster, "--keep", "0", "--yes"],
        &[("KIX_GC_WAIT_SECONDS", "3")],
    );
    let released = cms
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"metadata": {"finalizers": null}})),
        )
        .await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stdout(&out).contains(&format!(
            "not gone: ConfigMap {}/held (Terminating, held by finalizers kix.test/hold)",
            env.namespace
        )),
        "{}",
        text(&out)
    );
    released.expect("finalizer removed");
}

#[tokio::test]
async fn the_local_engine_flags_do_not_change_the_operator_plan_shown() {
    let env = TestEnv::new("seal-flags2").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    let both = format!("{}{}", configmap("a", "one"), configmap("b", "one"));
    let v1 = tree(dir.path(), &env.cluster, &env.namespace, &both);
    let v2 = tree(
        dir.path(),
        &env.cluster,
        &env.namespace,
        &configmap("a", "two"),
    );
    let out = kix(&["deploy", &env.cluster, "--path", path_arg(&v1), "--yes"]);
    assert!(out.status.success(), "{}", text(&out));
    // Another manager owns a's value: --force-conflicts changes a local plan.
    let theirs = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a"}, "data": {"value": "theirs"}});
    cms.patch(
        "a",
        &PatchParams::apply("other-tool").force(),
        &Patch::Apply(&theirs),
    )
    .await
    .expect("other manager");
    let digest = |extra: &[&str]| {
        let mut args: Vec<&str> = vec![
            "deploy",
            &env.cluster,
            "--path",
            path_arg(&v2),
            "--operator",
            "--dry-run",
            "-o",
            "json",
        ];
        args.extend_from_slice(extra);
        let out = kix(&args);
        assert!(out.status.success(), "{}", text(&out));
        let plan: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        (plan["digest"].as_str().expect("digest").to_string(), out)
    };
    let (plain, _) = digest(&[]);
    let (flagged, out) = digest(&[
        "--prune-mode",
        "orphan",
        "--force-conflicts",
        "--on-error",
        "continue",
    ]);
    assert_eq!(plain, flagged, "{}", text(&out));
    for flag in ["--prune-mode", "--force-conflicts", "--on-error"] {
        assert!(
            stderr(&out).contains(&format!("{flag} has no effect in operator mode")),
            "{}",
            text(&out)
        );
    }
    let local = kix(&["plan", &env.cluster, "--path", path_arg(&v2), "-o", "json"]);
    let local: serde_json::Value = serde_json::from_slice(&local.stdout).expect("json");
    assert_ne!(
        local["digest"].as_str(),
        Some(plain.as_str()),
        "the flags would change a local plan: the test can tell"
    );
}

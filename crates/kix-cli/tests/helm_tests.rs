//! `kix test CLUSTER` (#47, point 3): a build's Helm test hooks, never
//! deployed, run on demand against the live control plane. Each test Pod is
//! applied, waited for until it Succeeded or Failed, reported (a failure
//! with its container's termination), and deleted or kept as its
//! `helm.sh/hook-delete-policy` says; the exit status is 1 when one failed.
//!
//! KWOK runs the Pods on its fake nodes but only ever marks them Running
//! (its stages complete only Jobs' Pods), so this test plays the kubelet's
//! last part: once KWOK reports a test Pod Running, it writes the Pod's
//! final status (Succeeded, or Failed with a terminated container) through
//! the status subresource, as a kubelet would.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{Pkg, Run, add_to_store, write_tree};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

/// A test hook Pod as `helm template` writes it.
fn test_pod(name: &str, weight: i32, policy: Option<&str>) -> String {
    let policy = policy
        .map(|p| format!("\n    helm.sh/hook-delete-policy: {p}"))
        .unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  annotations:\n    helm.sh/hook: test\n    \
         helm.sh/hook-weight: \"{weight}\"{policy}\nspec:\n  restartPolicy: Never\n  \
         containers: [{{name: check, image: busybox, command: [wget, 'app:80']}}]\n"
    )
}

/// A test's ConfigMap (a script a test Pod would mount): only applied.
const TEST_SCRIPT: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app-test-script\n  annotations:\n    helm.sh/hook: test\n    helm.sh/hook-weight: \"-1\"\ndata: {check.sh: 'wget app:80'}\n";
const SETTINGS: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {k: v}\n";

/// How each test Pod ends: its container's exit code and message.
type Endings<'a> = &'a [(&'a str, i32, &'a str)];

/// The kubelet's last word on a Pod KWOK runs: once Running, the final
/// phase with the container terminated as `ending` says.
async fn finish_when_running(pods: &Api<Pod>, name: &str, code: i32, message: &str) -> bool {
    let Ok(Some(pod)) = pods.get_opt(name).await else {
        return false;
    };
    let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
    if !running || pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let now = chrono::Utc::now().to_rfc3339();
    let (phase, reason) = if code == 0 {
        ("Succeeded", "Completed")
    } else {
        ("Failed", "Error")
    };
    let status = json!({"status": {"phase": phase, "containerStatuses": [{
        "name": "check", "image": "busybox", "imageID": "", "ready": false, "restartCount": 0,
        "state": {"terminated": {"exitCode": code, "reason": reason, "message": message,
                                 "startedAt": now, "finishedAt": now}}}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap_or_else(|e| panic!("finishing Pod {name}: {e}"));
    true
}

/// Runs `kix ARGS` while playing the kubelet for each Pod of `endings`
/// (each finished once, in whatever order kix starts them). At most 120 s.
async fn kix_test(env: &kix_testkit::TestEnv, args: &[&str], endings: Endings<'_>) -> Run {
    let scratch = tempfile::tempdir().expect("tempdir");
    let mut cmd: tokio::process::Command = common::kix(
        &kix_testkit::kubeconfig_path(),
        &scratch.path().join("gcroots"),
    )
    .into();
    let child = cmd
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("kix runs");
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), &env.namespace);
    let mut pending: Vec<_> = endings.to_vec();
    let output = child.wait_with_output();
    tokio::pin!(output);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        tokio::select! {
            out = &mut output => return out.expect("kix's output").into(),
            () = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
        assert!(Instant::now() < deadline, "kix test ran for over 120 s");
        let mut left = Vec::new();
        for (name, code, message) in pending {
            if !finish_when_running(&pods, name, code, message).await {
                left.push((name, code, message));
            }
        }
        pending = left;
    }
}

fn tree(dir: &Path, env: &kix_testkit::TestEnv) -> String {
    let files = [
        ("settings.yaml", SETTINGS.to_owned()),
        ("test-script.yaml", TEST_SCRIPT.to_owned()),
        (
            "test-ok.yaml",
            test_pod("app-test-ok", 1, Some("hook-succeeded")),
        ),
        // No policy: Helm's default, before-hook-creation.
        ("test-bad.yaml", test_pod("app-test-bad", 2, None)),
    ];
    write_tree(
        dir,
        &env.cluster,
        &[Pkg {
            name: "app".into(),
            depends_on: vec![],
            namespace: env.namespace.clone(),
            files: (files.iter())
                .map(|(n, t)| ((*n).to_owned(), t.as_bytes().to_vec()))
                .collect(),
        }],
    );
    add_to_store(dir)
}

async fn pod(env: &kix_testkit::TestEnv, name: &str) -> Option<Pod> {
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), &env.namespace);
    pods.get_opt(name).await.expect("GET pod")
}

#[tokio::test]
async fn kix_test_runs_each_test_hook_and_reports_its_outcome() {
    let env = kix_testkit::TestEnv::new("helm-test").await.expect("env");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = tree(&dir.path().join("tree"), &env);
    let ns = &env.namespace;
    let args = ["test", &env.cluster, "--path", &path, "--timeout", "60s"];

    let first = kix_test(
        &env,
        &args,
        &[
            ("app-test-ok", 0, ""),
            ("app-test-bad", 3, "expected 200, got 503"),
        ],
    )
    .await;
    assert_eq!(first.code, Some(1), "a failed test fails the run: {first}");
    let lines: Vec<&str> = first.stdout.lines().collect();
    let starts = |prefix: String| {
        lines
            .iter()
            .position(|l| l.starts_with(&prefix))
            .unwrap_or_else(|| panic!("no line {prefix:?} in:\n{}", first.stdout))
    };
    // By weight: the script (-1), the passing Pod (1), the failing one (2).
    let script = starts(format!("PASS  ConfigMap {ns}/app-test-script (Applied, "));
    let ok = starts(format!("PASS  Pod {ns}/app-test-ok (Succeeded, "));
    let bad = starts(format!("FAIL  Pod {ns}/app-test-bad (Failed, "));
    assert!(
        script < ok && ok < bad,
        "in weight order:\n{}",
        first.stdout
    );
    assert!(
        lines[ok].ends_with("s, deleted by its hook-delete-policy)"),
        "{}",
        lines[ok]
    );
    assert_eq!(
        lines[bad + 1],
        "      container check: Error, exit code 3: expected 200, got 503",
        "the failure's reason:\n{}",
        first.stdout
    );
    assert_eq!(
        lines.last().copied(),
        Some(format!("Kix cluster {}: 3 test(s), 2 passed, 1 failed", env.cluster).as_str())
    );
    assert!(
        pod(&env, "app-test-ok").await.is_none(),
        "hook-succeeded: the passed Pod is deleted"
    );
    let kept = pod(&env, "app-test-bad")
        .await
        .expect("the failed Pod stays");
    let managers: Vec<String> = (kept.metadata.managed_fields.iter().flatten())
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(
        managers.contains(&kix_api::field_manager(&env.cluster)),
        "applied with the Kix cluster's field manager: {managers:?}"
    );
    let settings = env.kubectl(&["get", "configmap", "settings", "-n", ns]);
    assert!(
        settings.is_err(),
        "kix test deploys nothing else: {settings:?}"
    );

    // Again, all passing, as JSON: the failed Pod of the first run is
    // deleted before its new run (before-hook-creation).
    let mut json_args = args.to_vec();
    json_args.extend(["-o", "json"]);
    let second = kix_test(
        &env,
        &json_args,
        &[("app-test-ok", 0, ""), ("app-test-bad", 0, "")],
    )
    .await;
    assert_eq!(second.code, Some(0), "every test passed: {second}");
    let report: Value = serde_json::from_str(&second.stdout).expect("JSON");
    assert_eq!(
        (report["passed"].as_u64(), report["failed"].as_u64()),
        (Some(3), Some(0))
    );
    let verdicts: Vec<(&str, &str)> = (report["tests"].as_array().expect("tests").iter())
        .map(|t| {
            (
                t["object"].as_str().unwrap_or(""),
                t["phase"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        verdicts,
        [
            (
                format!("ConfigMap {ns}/app-test-script").as_str(),
                "Applied"
            ),
            (format!("Pod {ns}/app-test-ok").as_str(), "Succeeded"),
            (format!("Pod {ns}/app-test-bad").as_str(), "Succeeded"),
        ]
    );
    let rerun = pod(&env, "app-test-bad").await.expect("the new run's Pod");
    assert_ne!(
        rerun.metadata.uid, kept.metadata.uid,
        "before-hook-creation: the earlier Pod was deleted, this one created"
    );
}

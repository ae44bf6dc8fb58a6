//! The read-only commands work under read-only RBAC: a user who may only get,
//! list and watch can run `kix plan` (changes shown, the server's dry-run
//! skipped for lack of permission), `kix status` and `kix history`, and
//! `kix deploy` fails with the permission named and changes nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use kix_testkit::TestEnv;

fn kix(kubeconfig: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kix"))
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("NO_COLOR", "1")
        .env("KIX_OFFLINE", "1")
        .stdin(Stdio::null())
        .output()
        .expect("run kix")
}

fn text(out: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn tree(dir: &Path, cluster: &str, namespace: &str, value: &str) -> PathBuf {
    let root = dir.join(format!("tree-{value}"));
    std::fs::create_dir_all(root.join("packages/web/resources")).expect("mkdir");
    std::fs::write(
        root.join("kix.json"),
        serde_json::json!({"format": 1, "cluster": cluster, "packages": ["web"], "settings": {}})
            .to_string(),
    )
    .expect("kix.json");
    std::fs::write(
        root.join("packages/web/package.json"),
        serde_json::json!({"name": "web", "version": "1", "dependsOn": [], "namespace": namespace, "migrations": []})
            .to_string(),
    )
    .expect("package.json");
    std::fs::write(
        root.join("packages/web/resources/cm.yaml"),
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings}}\ndata: {{value: {value}}}\n"),
    )
    .expect("yaml");
    root
}

#[tokio::test]
async fn read_only_commands_work_under_read_only_rbac() {
    let env = TestEnv::new("readonly").await.expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    let admin = kix_testkit::kubeconfig_path();
    let v1 = tree(dir.path(), &env.cluster, &env.namespace, "one");
    let out = kix(
        &admin,
        &[
            "deploy",
            &env.cluster,
            "--path",
            v1.to_str().expect("utf8"),
            "--yes",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));

    let user = kix_testkit::unique_name("reader");
    let role = serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": user},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch"]}]
    });
    let binding = serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": user},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user},
        "subjects": [{"kind": "User", "name": user}]
    });
    for object in [role, binding] {
        let file = dir.path().join("rbac.json");
        std::fs::write(&file, object.to_string()).expect("write");
        env.kubectl(&["apply", "-f", file.to_str().expect("utf8")])
            .expect("rbac");
    }
    let reader = kix_testkit::kubeconfig_for_user(&user, dir.path()).expect("reader kubeconfig");

    // Unchanged build: plan works.
    let out = kix(
        &reader,
        &["plan", &env.cluster, "--path", v1.to_str().expect("utf8")],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 unchanged"),
        "{}",
        text(&out)
    );

    // Changed build: plan shows the update without the server's check.
    let v2 = tree(dir.path(), &env.cluster, &env.namespace, "two");
    let out = kix(
        &reader,
        &["plan", &env.cluster, "--path", v2.to_str().expect("utf8")],
    );
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("update") && stdout.contains("no permission"),
        "{}",
        text(&out)
    );

    for command in ["status", "history"] {
        let out = kix(&reader, &[command, &env.cluster]);
        assert!(
            out.status.success(),
            "kix {command} as a reader: {}",
            text(&out)
        );
    }

    // Deploy needs write permission: refused, nothing changed.
    let out = kix(
        &reader,
        &[
            "deploy",
            &env.cluster,
            "--path",
            v2.to_str().expect("utf8"),
            "--yes",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .to_lowercase()
            .contains("forbidden"),
        "{}",
        text(&out)
    );
    let value = env
        .kubectl(&[
            "get",
            "configmap",
            "settings",
            "-n",
            &env.namespace,
            "-o",
            "jsonpath={.data.value}",
        ])
        .expect("get");
    assert_eq!(value, "one");
}

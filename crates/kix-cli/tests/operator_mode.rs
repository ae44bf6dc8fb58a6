//! Operator mode on an apiserver without kix's CRDs (a private control plane,
//! so the shared one keeps its CRDs): the mutating `--operator` commands refuse
//! before changing anything, and `status --operator` reports no active
//! activation.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use kix_testkit::PrivateControlPlane;

fn kix(kubeconfig: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kix"))
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("NO_COLOR", "1")
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

#[test]
fn without_the_crd_operator_mode_changes_nothing_and_status_reports_no_activation() {
    let cp = PrivateControlPlane::start();
    let kubeconfig = cp.kubeconfig();
    let tree = tempfile::tempdir().expect("tmp");
    let root = tree.path().join("t");
    std::fs::create_dir_all(root.join("packages/web/resources")).expect("mkdir");
    std::fs::write(
        root.join("kix.json"),
        r#"{"format":1,"cluster":"nocrd","packages":["web"],"settings":{}}"#,
    )
    .expect("w");
    std::fs::write(
        root.join("packages/web/package.json"),
        r#"{"name":"web","version":"1","dependsOn":[],"namespace":"nocrd","migrations":[]}"#,
    )
    .expect("w");
    std::fs::write(
        root.join("packages/web/resources/all.yaml"),
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: nocrd}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: b}\n",
    )
    .expect("w");

    let out = kix(&kubeconfig, &["status", "nocrd", "--operator"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("no active activation"),
        "{}",
        text(&out)
    );

    let out = kix(
        &kubeconfig,
        &[
            "deploy",
            "nocrd",
            "--path",
            root.to_str().expect("utf8"),
            "--operator",
            "--yes",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not installed: nothing was changed"),
        "{}",
        text(&out)
    );

    for args in [
        ["rollback", "nocrd", "--operator", "--yes"],
        ["gc", "nocrd", "--operator", "--yes"],
    ] {
        let out = kix(&kubeconfig, &args);
        assert_eq!(
            out.status.code(),
            Some(1),
            "kix {}: {}",
            args.join(" "),
            text(&out)
        );
    }

    // Nothing was created: no namespace, no CRD.
    let kubectl = kix_testkit::kubectl();
    let out = Command::new(&kubectl)
        .args([
            "--kubeconfig",
            kubeconfig.to_str().expect("utf8"),
            "get",
            "namespace",
            "nocrd",
            "--ignore-not-found",
            "-o",
            "name",
        ])
        .output()
        .expect("kubectl");
    assert!(
        String::from_utf8_lossy(&out.stdout).trim().is_empty(),
        "the namespace must not exist"
    );
    let out = Command::new(&kubectl)
        .args([
            "--kubeconfig",
            kubeconfig.to_str().expect("utf8"),
            "get",
            "crd",
            "-o",
            "name",
        ])
        .output()
        .expect("kubectl");
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("kix.run"),
        "kix's CRDs must not be installed by --operator"
    );
}

//! The kube context a build's `kix.json` names is the cluster `kix plan` and
//! `kix deploy` read and write, though they start reading it while the tree
//! is still being read; a tree that cannot be read is reported as such,
//! whatever the cluster it names would have answered.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use kix_testkit::TestEnv;

/// A kubeconfig of two contexts: the control plane's (returned by name),
/// and the current one, "nowhere", whose server nothing listens on.
fn two_contexts(dir: &Path) -> (PathBuf, String) {
    kix_testkit::kubeconfig_with_unreachable_context(dir, "nowhere").expect("kubeconfig")
}

/// A tree of one ConfigMap in `namespace` whose `kix.json` names `context`,
/// plus `extra` resource files; added to the store.
fn tree(
    dir: &Path,
    cluster: &str,
    namespace: &str,
    context: &str,
    extra: &[(&str, &str)],
) -> String {
    let root = dir.join(format!("tree-{context}-{}", extra.len()));
    let mut files = vec![(
        "cm.yaml".to_string(),
        b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  a: \"1\"\n"
            .to_vec(),
    )];
    files.extend(
        extra
            .iter()
            .map(|(n, t)| (n.to_string(), t.as_bytes().to_vec())),
    );
    write_tree(
        &root,
        cluster,
        &[Pkg {
            name: "web".into(),
            depends_on: vec![],
            namespace: namespace.into(),
            files,
        }],
    );
    let kix_json = root.join("kix.json");
    let mut head: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&kix_json).expect("read")).expect("json");
    head["settings"]["context"] = context.into();
    std::fs::write(&kix_json, head.to_string()).expect("write");
    add_to_store(&root)
}

#[tokio::test]
async fn plan_and_deploy_use_the_context_the_build_names() {
    let env = TestEnv::new("context").await.expect("env");
    let dir = tempfile::tempdir().expect("tempdir");
    let (kubeconfig, good) = two_contexts(dir.path());
    let cluster = env.cluster.clone();
    let path = tree(dir.path(), &cluster, &env.namespace, &good, &[]);

    let plan = run(kix(&kubeconfig, dir.path()).args(["plan", &cluster, "--path", &path]));
    assert_eq!(plan.code, Some(0), "{plan}");
    assert!(plan.stdout.contains("settings"), "{plan}");
    let deploy =
        run(kix(&kubeconfig, dir.path()).args(["deploy", &cluster, "--path", &path, "--yes"]));
    assert_eq!(deploy.code, Some(0), "{deploy}");
    let applied = env
        .kubectl(&[
            "get",
            "configmap",
            "settings",
            "-n",
            &env.namespace,
            "-o",
            "name",
        ])
        .expect("kubectl");
    assert_eq!(applied.trim(), "configmap/settings");

    // The same build naming the context of no apiserver reaches none.
    let nowhere = tree(dir.path(), &cluster, &env.namespace, "nowhere", &[]);
    let plan = run(kix(&kubeconfig, dir.path()).args(["plan", &cluster, "--path", &nowhere]));
    assert_eq!(plan.code, Some(1), "{plan}");
    assert!(plan.stderr.contains("apiserver does not answer"), "{plan}");
}

#[tokio::test]
async fn a_tree_that_cannot_be_read_is_reported_before_the_cluster() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (kubeconfig, _) = two_contexts(dir.path());
    // kix.json reads, and names the context of no apiserver; a resource
    // file does not.
    let path = tree(
        dir.path(),
        "broken",
        "broken",
        "nowhere",
        &[("bad.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: [\n")],
    );
    for command in [&["plan"][..], &["deploy", "--yes"]] {
        let out = run(kix(&kubeconfig, dir.path())
            .args(command)
            .args(["broken", "--path", &path]));
        assert_eq!(out.code, Some(1), "{command:?}: {out}");
        assert!(out.stderr.contains("bad.yaml"), "{command:?}: {out}");
        assert!(
            !out.stderr.contains("does not answer"),
            "{command:?}: {out}"
        );
        assert!(!out.stderr.contains("Connect"), "{command:?}: {out}");
    }
}

//! Helm's annotations in a build (#47, point 3, first part): a chart's test
//! hooks (`helm.sh/hook: test`) are never deployed and `kix build` says so;
//! an object annotated `helm.sh/resource-policy: keep` is never pruned and
//! the plan says why; a hook annotation Helm would refuse is an error
//! naming the file. The manifests are what `helm template` writes.

mod common;

use std::path::Path;

use common::{Pkg, add_to_store, kix, run, write_tree};

const KEPT: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kept\n  annotations:\n    helm.sh/resource-policy: keep\ndata: {k: v}\n";
const SETTINGS: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {k: v}\n";
const TEST_HOOK: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: app-test-connection\n  annotations:\n    helm.sh/hook: test\nspec:\n  restartPolicy: Never\n  containers: [{name: wget, image: busybox, command: [wget, 'app:80']}]\n";

fn build(dir: &Path, cluster: &str, namespace: &str, files: &[(&str, &str)]) -> String {
    write_tree(
        dir,
        cluster,
        &[Pkg {
            name: "app".into(),
            depends_on: vec![],
            namespace: namespace.into(),
            files: files
                .iter()
                .map(|(name, text)| ((*name).to_owned(), text.as_bytes().to_vec()))
                .collect(),
        }],
    );
    add_to_store(dir)
}

#[tokio::test]
async fn test_hooks_are_not_deployed_and_kept_objects_are_not_pruned() {
    let env = kix_testkit::TestEnv::new("helm-ann").await.expect("env");
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = kix_testkit::kubeconfig_path();
    let gcroots = dir.path().join("gcroots");
    let v1 = build(
        &dir.path().join("v1"),
        &env.cluster,
        &env.namespace,
        &[
            ("settings.yaml", SETTINGS),
            ("kept.yaml", KEPT),
            ("test.yaml", TEST_HOOK),
        ],
    );
    let summary = run(kix(&kubeconfig, &gcroots).args(["validate", "--path", &v1]));
    assert_eq!(summary.code, Some(0), "{summary}");
    let deployed =
        run(kix(&kubeconfig, &gcroots).args(["deploy", &env.cluster, "--path", &v1, "--yes"]));
    assert_eq!(deployed.code, Some(0), "{deployed}");
    assert!(
        !deployed.stdout.contains("app-test-connection"),
        "the test hook is not planned: {deployed}"
    );
    let pod = env.kubectl(&["get", "pod", "app-test-connection", "-n", &env.namespace]);
    assert!(pod.is_err(), "the test hook was deployed: {pod:?}");

    // The next build drops `kept`: the plan keeps it, and says why.
    let v2 = build(
        &dir.path().join("v2"),
        &env.cluster,
        &env.namespace,
        &[("settings.yaml", SETTINGS), ("test.yaml", TEST_HOOK)],
    );
    let plan = run(kix(&kubeconfig, &gcroots).args(["plan", &env.cluster, "--path", &v2]));
    assert!(
        plan.stdout.contains("kept")
            && plan
                .stdout
                .contains("annotated helm.sh/resource-policy: keep"),
        "the plan says why it keeps it: {plan}"
    );
    let deployed =
        run(kix(&kubeconfig, &gcroots).args(["deploy", &env.cluster, "--path", &v2, "--yes"]));
    assert_eq!(deployed.code, Some(0), "{deployed}");
    env.kubectl(&["get", "configmap", "kept", "-n", &env.namespace])
        .expect("kept after the prune");
}

#[test]
fn a_hook_annotation_helm_would_refuse_names_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hook = "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: migrate\n  annotations:\n    helm.sh/hook: pre-instal\nspec: {template: {spec: {restartPolicy: Never, containers: [{name: m, image: busybox}]}}}\n";
    let root = dir.path().join("tree");
    write_tree(
        &root,
        "helm",
        &[Pkg {
            name: "app".into(),
            depends_on: vec![],
            namespace: "app".into(),
            files: vec![("hook.yaml".into(), hook.as_bytes().to_vec())],
        }],
    );
    let nowhere = dir.path().join("no-kubeconfig");
    let out = run(kix(&nowhere, &dir.path().join("gcroots")).args([
        "validate",
        "--path",
        root.to_str().expect("utf8"),
    ]));
    assert_eq!(out.code, Some(1), "{out}");
    assert!(
        out.stderr.contains("packages/app/resources/hook.yaml: document 1: Job.batch app/migrate: annotation helm.sh/hook: \"pre-instal\" is not one of pre-install"),
        "{out}"
    );
}

//! Field ownership through the `kix` binary: no false drift right after a
//! clean deploy of published-shaped manifests (tests/corpus), and a change by
//! another field manager reported with its name by `kix status` and
//! `kix plan --reconcile`.

mod cli_support;

use std::path::Path;

use cli_support::{Kix, configmap};
use serde_json::Value;

/// The corpus as one multi-document YAML file for `kix`'s tree, with the
/// names of cluster-scoped objects made unique to the test.
fn corpus(kix: &Kix) -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("corpus dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "{files:?}");
    files
        .iter()
        .map(|f| {
            std::fs::read_to_string(f)
                .expect("read corpus file")
                .replace("__PREFIX__", kix.cluster())
                .replace("__NAMESPACE__", kix.ns())
        })
        .collect::<Vec<_>>()
        .join("\n---\n")
}

fn status_objects(status: &Value) -> Vec<&Value> {
    status["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .flat_map(|p| p["objects"].as_array().expect("objects"))
        .collect()
}

fn planned_objects(plan: &Value) -> Vec<&Value> {
    plan["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .flat_map(|p| p["objects"].as_array().expect("objects"))
        .collect()
}

/// Cluster-scoped objects of the corpus (the namespace goes with the test).
fn delete_cluster_scoped(kix: &Kix) {
    for (kind, suffix) in [
        ("clusterrole", "cert-manager-controller-issuers"),
        ("clusterrolebinding", "cert-manager-controller-issuers"),
        ("priorityclass", "batch-low"),
        ("ingressclass", "nginx"),
    ] {
        let name = format!("{}-{suffix}", kix.cluster());
        let _ = kix_testkit::kubectl_output(&["delete", kind, &name, "--wait=false"]);
    }
}

#[tokio::test]
async fn published_manifests_show_no_drift_right_after_a_clean_deploy() {
    let kix = Kix::new("own-corpus").await;
    let tree = kix.tree("corpus", &corpus(&kix), serde_json::json!({}));
    kix.deploy(&tree, &[]).ok();

    let status = kix
        .kix(&["status", kix.cluster(), "-o", "json"])
        .ok()
        .json();
    let objects = status_objects(&status);
    assert_eq!(objects.len(), 27, "every object of the corpus: {status:#}");
    let drifted: Vec<String> = objects
        .iter()
        .filter(|o| o["health"] == "Drifted")
        .map(|o| format!("{}: {}", o["object"], o["reason"]))
        .collect();
    assert!(drifted.is_empty(), "false drift:\n{}", drifted.join("\n"));

    let path = tree.to_str().expect("utf-8");
    let plan = kix
        .kix(&[
            "plan",
            kix.cluster(),
            "--path",
            path,
            "--reconcile",
            "-o",
            "json",
        ])
        .ok()
        .json();
    let changed: Vec<String> = planned_objects(&plan)
        .iter()
        .filter(|o| o["action"] != "unchanged")
        .map(|o| format!("{} {}: {}", o["action"], o["key"], o["note"]))
        .collect();
    assert!(changed.is_empty(), "false drift:\n{}", changed.join("\n"));
    kix.kix(&[
        "plan",
        kix.cluster(),
        "--path",
        path,
        "--reconcile",
        "--exit-code",
    ])
    .ok();
    delete_cluster_scoped(&kix);
}

#[tokio::test]
async fn a_change_by_another_manager_is_reported_with_its_name() {
    let kix = Kix::new("own-named").await;
    let tree = kix.tree("v1", &configmap("alpha", "1"), serde_json::json!({}));
    kix.deploy(&tree, &[]).ok();
    kix.kubectl(&[
        "patch",
        "configmap",
        "-n",
        kix.ns(),
        "alpha",
        "--type=merge",
        "--field-manager=team-script",
        "-p",
        r#"{"data":{"v":"edited","extra":"added"}}"#,
    ]);
    let text = kix.kix(&["status", kix.cluster()]).ok().stdout;
    let expected = format!(
        "Drifted     ConfigMap {}/alpha: changed since kix applied it: data.v (changed by team-script)",
        kix.ns()
    );
    assert!(text.contains(&expected), "{expected:?} not in:\n{text}");
    let path = tree.to_str().expect("utf-8");
    let text = kix
        .kix(&["plan", kix.cluster(), "--path", path, "--reconcile"])
        .ok()
        .stdout;
    assert!(
        text.contains("data.v (changed by team-script)") && !text.contains("extra ("),
        "{text}"
    );
    // The reconcile deploy takes the field back, then nothing is drifted.
    kix.deploy(&tree, &["--reconcile"]).ok();
    assert_eq!(kix.configmap("alpha").expect("alpha")["data"]["v"], "1");
    let text = kix.kix(&["status", kix.cluster()]).ok().stdout;
    assert!(!text.contains("Drifted     ConfigMap"), "{text}");
}

//! `kix status` end to end: health per object (Ready, Missing, Drifted,
//! extra objects), the receipt, PackageInstances, and a current build that is
//! gone from the store.

mod cli_support;

use cli_support::{Kix, configmap, deployment, nix_delete, path_of};

fn object<'a>(status: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    status["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .flat_map(|p| p["objects"].as_array().expect("objects"))
        .find(|o| o["object"]["name"] == name)
        .unwrap_or_else(|| panic!("{name} not in {status:#}"))
}

#[tokio::test]
async fn status_shows_health_missing_drifted_and_extra_objects() {
    let kix = Kix::new("status").await;
    let objects = configmap("alpha", "1") + &configmap("beta", "1") + &deployment("web", true);
    let v1 = kix.tree(
        "v1",
        &(objects.clone() + &configmap("gamma", "1")),
        serde_json::json!({}),
    );
    let v2 = kix.tree("v2", &objects, serde_json::json!({}));
    kix.deploy(&v1, &[]).ok();
    kix.deploy(&v2, &["--prune=false"]).ok();

    let status = kix
        .kix(&["status", kix.cluster(), "-o", "json"])
        .ok()
        .json();
    assert_eq!(status["current"]["name"], kix.name(2));
    assert_eq!(status["current"]["phase"], "Active");
    assert_eq!(status["build"]["state"], "read");
    assert_eq!(object(&status, "alpha")["health"], "Ready");
    assert_eq!(object(&status, "web")["health"], "Ready");
    assert_eq!(object(&status, "gamma")["extra"], true);
    assert_eq!(status["counts"]["Ready"], 4);

    // Someone deletes one object and edits another.
    kix.kubectl(&["delete", "configmap", "-n", kix.ns(), "beta"]);
    kix.kubectl(&[
        "patch",
        "configmap",
        "-n",
        kix.ns(),
        "alpha",
        "--type=merge",
        "-p",
        r#"{"data":{"v":"edited"}}"#,
    ]);
    let status = kix
        .kix(&["status", kix.cluster(), "-o", "json"])
        .ok()
        .json();
    assert_eq!(object(&status, "beta")["health"], "Missing");
    assert_eq!(object(&status, "alpha")["health"], "Drifted");
    assert!(
        object(&status, "alpha")["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("data.v"),
        "{status:#}"
    );
    assert_eq!(status["counts"]["Missing"], 1);
    assert_eq!(status["counts"]["Drifted"], 1);

    // A PackageInstance record shows up.
    let instance = serde_json::json!({
        "apiVersion": "kix.run/v1alpha1", "kind": "PackageInstance",
        "metadata": {"name": format!("{}.web", kix.cluster()), "labels": {"kix.run/cluster": kix.cluster()}},
        "spec": {"cluster": kix.cluster(), "package": "web", "version": "1", "activation": kix.name(2)}
    });
    let file = kix.dir.path().join("instance.json");
    std::fs::write(&file, instance.to_string()).expect("write");
    kix.kubectl(&["apply", "-f", file.to_str().expect("path")]);

    let text = kix.kix(&["status", kix.cluster()]).ok().stdout;
    for expected in [
        format!("current activation: {} (Active)", kix.name(2)),
        "objects: 2 Ready, 0 Progressing, 0 Degraded, 1 Missing, 1 Drifted".to_string(),
        "package web 1 (2/4 Ready)".to_string(),
        format!("Missing     ConfigMap {}/beta", kix.ns()),
        format!(
            "Drifted     ConfigMap {}/alpha: changed since kix applied it: data.v",
            kix.ns()
        ),
        format!(
            "Ready       ConfigMap {}/gamma (not in the build)",
            kix.ns()
        ),
        "package instances:".to_string(),
        format!("{}.web", kix.cluster()),
    ] {
        assert!(text.contains(&expected), "{expected:?} not in:\n{text}");
    }
    let _ = kix.kubectl(&[
        "delete",
        "packageinstances.kix.run",
        &format!("{}.web", kix.cluster()),
    ]);

    // The current build is gone from the store: live objects only.
    let path = path_of(&kix.records().await[1]);
    std::fs::remove_file(kix.roots.join(kix.cluster()).join(kix.name(2))).expect("root");
    assert!(nix_delete(&path));
    let status = kix
        .kix(&["status", kix.cluster(), "-o", "json"])
        .ok()
        .json();
    assert_eq!(status["build"]["state"], "unreadable");
    assert_eq!(status["counts"]["Missing"], 0);
    assert_eq!(object(&status, "alpha")["health"], "Ready");
    let text = kix.kix(&["status", kix.cluster()]).ok().stdout;
    assert!(text.contains("cannot be read"), "{text}");
}

/// ConfigMaps and Secrets are listed as metadata only; what drifted on
/// one (changed, removed, or owned by no one, which only the whole object
/// tells from removed) is said as for any other kind.
#[tokio::test]
async fn status_says_what_drifted_on_objects_listed_as_metadata() {
    let kix = Kix::new("status-meta").await;
    let secret = "---\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: {token: YQ==}\n";
    let objects = ["a", "b", "c", "d"]
        .iter()
        .map(|name| configmap(name, "1"))
        .collect::<String>()
        + secret;
    let v1 = kix.tree("v1", &objects, serde_json::json!({}));
    kix.deploy(&v1, &[]).ok();

    let patch = |kind: &str, name: &str, how: &str, patch: &str| {
        kix.kubectl(&["patch", kind, "-n", kix.ns(), name, how, "-p", patch]);
    };
    patch(
        "configmap",
        "a",
        "--type=merge",
        r#"{"data":{"v":"edited"}}"#,
    );
    patch("configmap", "b", "--type=merge", r#"{"data":{"v":null}}"#);
    // c keeps data.v, but kix's entry no longer owns it (nor does anyone).
    let c = kix_testkit::kubectl_output(&[
        "get",
        "configmap",
        "-n",
        kix.ns(),
        "c",
        "-o",
        "json",
        "--show-managed-fields",
    ])
    .expect("reading c");
    let mut entries: serde_json::Value = serde_json::from_str::<serde_json::Value>(&c)
        .expect("JSON")["metadata"]["managedFields"]
        .clone();
    for entry in entries.as_array_mut().expect("entries") {
        entry["fieldsV1"]
            .as_object_mut()
            .expect("fields")
            .remove("f:data");
    }
    let unowned =
        serde_json::json!([{"op": "replace", "path": "/metadata/managedFields", "value": entries}]);
    patch("configmap", "c", "--type=json", &unowned.to_string());
    patch(
        "secret",
        "s",
        "--type=merge",
        r#"{"data":{"token":"Yg=="}}"#,
    );

    let status = kix
        .kix(&["status", kix.cluster(), "-o", "json"])
        .ok()
        .json();
    let reason = |name: &str| {
        let o = object(&status, name);
        assert_eq!(o["health"], "Drifted", "{name}: {status:#}");
        o["reason"].as_str().unwrap_or_default().to_string()
    };
    assert!(
        reason("a").contains("data.v (changed by kubectl-patch)"),
        "{status:#}"
    );
    assert!(reason("b").contains("data.v (removed)"), "{status:#}");
    assert_eq!(
        reason("c"),
        "changed since kix applied it: data.v (no field manager owns it)"
    );
    assert!(
        reason("s").contains("data.token (changed by kubectl-patch)"),
        "{status:#}"
    );
    assert_eq!(object(&status, "d")["health"], "Ready");
    assert_eq!(status["counts"]["Drifted"], 4);
}

#[tokio::test]
async fn status_of_a_cluster_without_activations() {
    let kix = Kix::new("status-none").await;
    // kix's CRDs are installed but no record is this cluster's (on a fresh
    // control plane this test ran before any deploy had installed them).
    let client = kix_testkit::client().await.expect("client");
    if kix_engine::records::crds_status(&client)
        .await
        .expect("CRDs")
        != kix_engine::records::CrdState::Current
    {
        kix_engine::records::install_crds(&client)
            .await
            .expect("installing kix's CRDs");
    }
    let run = kix.kix(&["status", kix.cluster()]).ok();
    assert!(
        run.stdout.contains("current activation: none"),
        "{}",
        run.stdout
    );
}

/// `kix status` of one Kix cluster reads that cluster's objects by its own
/// label, as its plans do, not every object kix manages: on a control plane
/// shared by many Kix clusters the latter grew with all of them (a fleet's
/// health checks of ten clusters of 1,000 objects each listed 10,000
/// ConfigMaps apiece).
#[tokio::test]
async fn status_lists_by_its_kix_clusters_own_label() {
    use kix_testkit::audit;
    let kix = Kix::new("status-label").await;
    let tree = kix.tree("v1", &configmap("alpha", "1"), serde_json::json!({}));
    kix.deploy(&tree, &[]).ok();
    let mark = audit::mark().expect("mark");
    let status = kix
        .kix(&["status", kix.cluster(), "-o", "json"])
        .ok()
        .json();
    assert_eq!(object(&status, "alpha")["health"], "Ready");
    let label = kix_api::labels::cluster_label(kix.cluster()).replace('/', "%2F");
    let lists: Vec<String> = audit::since(mark)
        .expect("audit log")
        .into_iter()
        .filter(|r| r.verb == "list" && r.resource == "configmaps" && !r.is_next_page())
        .map(|r| r.uri)
        .filter(|uri| uri.contains(&label))
        .collect();
    assert_eq!(
        lists.len(),
        1,
        "one LIST of ConfigMaps by {label}, the Kix cluster's label: {lists:#?}"
    );
}

/// A build made from a commit (`revision` in its kix.json, the flake's
/// `self.rev`): its record names the commit (which commit statuses are
/// set on), and status and plan -o json say it.
#[tokio::test]
async fn a_builds_revision_is_on_its_record_and_in_status() {
    let kix = Kix::new("status-rev").await;
    let sha = "0123456789abcdef0123456789abcdef01234567";
    let tree = kix.tree("v1", &configmap("alpha", "1"), serde_json::json!({}));
    let file = tree.join("kix.json");
    let mut head: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("kix.json")).expect("json");
    head["revision"] = sha.into();
    std::fs::write(&file, head.to_string()).expect("kix.json");
    let path = tree.to_str().expect("utf-8");
    let plan = kix
        .kix(&["plan", kix.cluster(), "--path", path, "-o", "json"])
        .ok()
        .json();
    assert_eq!(plan["revision"], sha, "{plan:#}");
    kix.deploy(&tree, &[]).ok();
    let records = kix.records().await;
    let record = records.last().expect("a record");
    assert_eq!(record.spec.source.revision.as_deref(), Some(sha));
    let status = kix
        .kix(&["status", kix.cluster(), "-o", "json"])
        .ok()
        .json();
    assert_eq!(status["current"]["revision"], sha, "{status:#}");
}

//! `kix status --all` on the shared control plane with two tenants, each a
//! Kix cluster acting as its namespace's ServiceAccount and deployed for
//! real: each team's person (who may act as its own account, as
//! docs/operator.md's "Several teams, one operator" grants) sees its own
//! Kix cluster and not the other's; the admin sees both.

mod common;

use std::path::Path;

use common::tenancy;
use serde_json::{Value, json};

/// A person of the team of `namespace`: may list kix's records (the
/// cluster-wide grant every tenant has) and act as `namespace/kix`;
/// nothing else. Their kubeconfig.
fn person(env: &kix_testkit::TestEnv, namespace: &str, dir: &Path) -> std::path::PathBuf {
    let user = kix_testkit::unique_name("status-all-person");
    let subject = json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user});
    let rbac = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": user},
         "rules": [{"apiGroups": ["kix.run"], "resources": ["activations", "packageinstances"],
                    "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": user},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user},
         "subjects": [subject]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": user, "namespace": namespace},
         "rules": [{"apiGroups": [""], "resources": ["serviceaccounts"],
                    "resourceNames": ["kix"], "verbs": ["impersonate"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": user, "namespace": namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": user},
         "subjects": [subject]}
    ]});
    let file = dir.join(format!("{user}.json"));
    std::fs::write(&file, rbac.to_string()).expect("rbac file");
    env.kubectl(&["apply", "-f", file.to_str().expect("utf-8")])
        .expect("the person's RBAC");
    kix_testkit::kubeconfig_for_user(&user, dir).expect("the person's kubeconfig")
}

/// `kix status --all -o json` as `kubeconfig`: the rows, by Kix cluster.
fn rows(kubeconfig: &Path, gcroots: &Path) -> Vec<Value> {
    let run = common::run(common::kix(kubeconfig, gcroots).args(["status", "--all", "-o", "json"]));
    assert_eq!(run.code, Some(0), "kix status --all: {run}");
    serde_json::from_str::<Vec<Value>>(&run.stdout).expect("a JSON array")
}

fn names(rows: &[Value]) -> Vec<&str> {
    rows.iter().filter_map(|r| r["cluster"].as_str()).collect()
}

#[tokio::test]
async fn each_tenant_sees_its_own_kix_clusters_and_the_admin_sees_both() {
    let mut env = kix_testkit::TestEnv::new("status-all").await.expect("env");
    tenancy::install_crds(&env);
    let (ns_a, ns_b) = (
        env.namespace.clone(),
        env.namespace("b").await.expect("ns b"),
    );
    let (cluster_a, cluster_b) = (env.cluster.clone(), format!("{}-b", env.cluster));
    let dir = tempfile::tempdir().expect("tempdir");
    let gcroots = dir.path().join("gcroots");
    let admin = kix_testkit::kubeconfig_path();
    let mut paths = Vec::new();
    for (cluster, ns) in [(&cluster_a, &ns_a), (&cluster_b, &ns_b)] {
        tenancy::apply_rbac(&env, ns);
        let path = tenancy::tree(&dir.path().join(cluster), cluster, ns, None);
        let run = common::run(
            common::kix(&admin, &gcroots).args(["deploy", cluster, "--path", &path, "--yes"]),
        );
        assert_eq!(run.code, Some(0), "deploying {cluster}: {run}");
        paths.push(path);
    }

    let everyone = rows(&admin, &gcroots);
    let seen = names(&everyone);
    assert!(
        seen.contains(&cluster_a.as_str()) && seen.contains(&cluster_b.as_str()),
        "the admin sees both tenants: {seen:?}"
    );
    let row = everyone
        .iter()
        .find(|r| r["cluster"] == cluster_a.as_str())
        .expect("tenant a's row");
    assert_eq!(row["phase"], "Active", "{row}");
    assert_eq!(row["activation"], format!("{cluster_a}-1"), "{row}");
    assert_eq!(row["storePath"], paths[0].as_str(), "{row}");
    assert_eq!(row["serviceAccount"], format!("{ns_a}/kix"), "{row}");
    assert_eq!(row["health"]["ready"], true, "{row}");
    assert_eq!(
        row["packages"],
        json!([{"name": "web", "version": "1"}]),
        "{row}"
    );
    assert!(row["since"].is_string(), "{row}");

    for (ns, mine, theirs) in [
        (&ns_a, &cluster_a, &cluster_b),
        (&ns_b, &cluster_b, &cluster_a),
    ] {
        let kubeconfig = person(&env, ns, dir.path());
        let seen = rows(&kubeconfig, &gcroots);
        let seen = names(&seen);
        assert!(seen.contains(&mine.as_str()), "{mine} is theirs: {seen:?}");
        assert!(
            !seen.contains(&theirs.as_str()),
            "{theirs} is another team's: {seen:?}"
        );
        let text = common::run(common::kix(&kubeconfig, &gcroots).args(["status", "--all", "-v"]));
        assert_eq!(text.code, Some(0), "{text}");
        let line_of = |cluster: &str| {
            text.stdout
                .lines()
                .find(|l| l.split_whitespace().next() == Some(cluster))
                .map(str::to_string)
        };
        let line = line_of(mine).unwrap_or_else(|| panic!("a line for {mine}: {text}"));
        assert!(line.contains("Active") && line.contains("Ready"), "{line}");
        assert_eq!(line_of(theirs), None, "{text}");
        assert!(
            text.stderr.contains(&format!(
                "skipped Kix cluster {theirs}: it acts as ServiceAccount"
            )),
            "-v names what was skipped: {text}"
        );
    }
}

#[test]
fn status_needs_a_cluster_or_all() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = common::run(
        common::kix(&dir.path().join("none"), &dir.path().join("gcroots")).args(["status"]),
    );
    assert_eq!(run.code, Some(2), "a usage error: {run}");
}

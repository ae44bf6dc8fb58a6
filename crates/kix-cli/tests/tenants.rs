//! Who may write kix's records: the admission policy `kix crds --tenants`
//! prints, enforced by a real apiserver (a private control plane: the policy
//! is cluster-wide and would judge every other test's records).
//!
//! Subjects are impersonated with the admin's credentials (`kubectl --as`),
//! so each request reaches admission as that user with those groups.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::tenancy::{install_crds, writes_as};
use kix_testkit::PrivateControlPlane;
use serde_json::{Value, json};

const TENANTS: &str = r#"{
  "platform": {"users": ["system:serviceaccount:kix-system:kix-operator"], "groups": ["system:masters"]},
  "clusters": {
    "team-a": {"groups": ["team-a"], "serviceAccount": {"namespace": "team-a", "name": "kix"}},
    "team-b": {"users": ["bob"], "serviceAccount": {"namespace": "team-b", "name": "kix"}}
  }
}"#;

/// Grants the tenants' users full RBAC on kix's records, so what refuses
/// them below is the admission policy alone.
const RBAC: &str = r#"{"apiVersion": "v1", "kind": "List", "items": [
 {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
  "metadata": {"name": "kix-records"},
  "rules": [{"apiGroups": ["kix.run"], "resources": ["*"], "verbs": ["*"]}]},
 {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
  "metadata": {"name": "kix-records"},
  "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kix-records"},
  "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "team-a"},
               {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "team-b"},
               {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"},
               {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bob"},
               {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "mallory"}]}
]}"#;

/// Who runs a kubectl command.
#[derive(Clone, Copy)]
enum As {
    Admin,
    /// alice, in group team-a (a writer of team-a).
    Alice,
    /// bob, no group (a writer of team-b by name).
    Bob,
    /// mallory, in group team-b-readers (a writer of nothing).
    Mallory,
}

fn kubectl(cp: &PrivateControlPlane, who: As, args: &[&str], stdin: Option<&str>) -> Output {
    let mut cmd = Command::new(kix_testkit::kubectl());
    cmd.arg("--kubeconfig").arg(cp.kubeconfig());
    match who {
        As::Admin => {}
        As::Alice => {
            cmd.args(["--as", "alice", "--as-group", "team-a"]);
        }
        As::Bob => {
            cmd.args(["--as", "bob"]);
        }
        As::Mallory => {
            cmd.args(["--as", "mallory", "--as-group", "team-b-readers"]);
        }
    }
    cmd.args(args).stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("kubectl runs");
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        use std::io::Write;
        pipe.write_all(text.as_bytes())
            .expect("writing kubectl's stdin");
    }
    child.wait_with_output().expect("kubectl finishes")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn record(name: &str, label: Option<&str>, cluster: &str, account: Option<(&str, &str)>) -> String {
    let mut labels = json!({"app.kubernetes.io/managed-by": "kix"});
    if let Some(label) = label {
        labels["kix.run/cluster"] = json!(label);
    }
    let mut spec = json!({
        "cluster": cluster,
        "engine": "operator",
        "source": {"path": "/nix/store/0123456789abcdfghijklmnpqrsvwxyz-kix-test"},
        "receipt": {"user": "u", "host": "h", "kixVersion": "0.1.0",
                    "time": "2026-01-02T03:04:05Z", "planDigest": "sha256:00"},
    });
    if let Some((namespace, name)) = account {
        spec["serviceAccount"] = json!({"namespace": namespace, "name": name});
    }
    json!({"apiVersion": "kix.run/v1alpha1", "kind": "Activation",
           "metadata": {"name": name, "labels": labels}, "spec": spec})
    .to_string()
}

fn create(cp: &PrivateControlPlane, who: As, object: &str) -> Output {
    kubectl(cp, who, &["create", "-f", "-"], Some(object))
}

fn assert_refused(out: &Output, what: &str, says: &str) {
    let err = stderr(out);
    assert!(!out.status.success(), "{what} was allowed");
    assert!(
        err.contains("ValidatingAdmissionPolicy") && err.contains(says),
        "{what}: refused, but not by kix's policy saying {says:?}:\n{err}"
    );
}

fn assert_allowed(out: &Output, what: &str) {
    assert!(out.status.success(), "{what} was refused:\n{}", stderr(out));
}

/// Installs the CRDs and the policy exactly as a platform would:
/// `kix crds --tenants FILE | kubectl apply -f -`.
fn install(cp: &PrivateControlPlane, dir: &Path) {
    let tenants = dir.join("tenants.json");
    std::fs::write(&tenants, TENANTS).expect("writing tenants.json");
    let out = Command::new(common::kix_bin())
        .args(["crds", "--tenants"])
        .arg(&tenants)
        .output()
        .expect("kix crds runs");
    assert!(out.status.success(), "kix crds --tenants: {}", stderr(&out));
    let yaml = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        yaml.contains("kind: ValidatingAdmissionPolicyBinding"),
        "{yaml}"
    );
    assert_allowed(
        &kubectl(cp, As::Admin, &["apply", "-f", "-"], Some(&yaml)),
        "applying kix crds --tenants",
    );
    assert_allowed(
        &kubectl(cp, As::Admin, &["apply", "-f", "-"], Some(RBAC)),
        "applying the tenants' RBAC",
    );
    assert_allowed(
        &kubectl(
            cp,
            As::Admin,
            &[
                "wait",
                "--for=condition=Established",
                "crd/activations.kix.run",
                "--timeout=60s",
            ],
            None,
        ),
        "waiting for the Activation CRD",
    );
}

/// The apiserver loads a new policy asynchronously: create a record that
/// the policy refuses until it is refused (each try under a new name, so a
/// try that got through before the policy was loaded changes nothing).
fn wait_for_policy(cp: &PrivateControlPlane) {
    let started = Instant::now();
    for n in 0.. {
        let probe = record(
            &format!("probe-{n}"),
            Some("team-b"),
            "team-b",
            Some(("team-b", "kix")),
        );
        let out = create(cp, As::Mallory, &probe);
        if stderr(&out).contains("ValidatingAdmissionPolicy") {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the apiserver did not enforce kix's admission policy within 60 s (last answer: {})",
            stderr(&out)
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[tokio::test]
async fn only_a_kix_clusters_declared_writers_write_its_records_and_none_moves_one() {
    let cp = PrivateControlPlane::start();
    let dir = tempfile::tempdir().expect("tempdir");
    install(&cp, dir.path());
    // The CRDs `kix crds` prints carry the digest kix installs them with: a
    // tenant's first deploy does not install them again (it may not).
    let client = common::client_for(&cp.kubeconfig()).await;
    assert_eq!(
        kix_engine::records::crds_status(&client)
            .await
            .expect("reading the CRDs"),
        kix_engine::records::CrdState::Current,
        "the CRDs kix crds printed are current for kix"
    );
    wait_for_policy(&cp);

    // A writer of team-a writes team-a's record, naming team-a's account.
    assert_allowed(
        &create(
            &cp,
            As::Alice,
            &record(
                "team-a-1",
                Some("team-a"),
                "team-a",
                Some(("team-a", "kix")),
            ),
        ),
        "alice creating a team-a record",
    );
    // ... but not another Kix cluster's, by label or by spec.cluster alone.
    assert_refused(
        &create(
            &cp,
            As::Alice,
            &record(
                "team-b-1",
                Some("team-b"),
                "team-b",
                Some(("team-b", "kix")),
            ),
        ),
        "alice creating a team-b record",
        "alice may not create the kix records of Kix cluster team-b",
    );
    assert_refused(
        &create(
            &cp,
            As::Alice,
            &record("team-b-2", None, "team-b", Some(("team-b", "kix"))),
        ),
        "alice creating an unlabelled record with spec.cluster team-b",
        "Kix cluster team-b",
    );
    // A label wins over spec.cluster for kix, so it does for the policy.
    assert_refused(
        &create(
            &cp,
            As::Alice,
            &record(
                "team-b-3",
                Some("team-b"),
                "team-a",
                Some(("team-a", "kix")),
            ),
        ),
        "alice creating a record labelled team-b with spec.cluster team-a",
        "Kix cluster team-b",
    );
    // A record naming another account than the declared one.
    assert_refused(
        &create(
            &cp,
            As::Alice,
            &record(
                "team-a-2",
                Some("team-a"),
                "team-a",
                Some(("team-b", "kix")),
            ),
        ),
        "alice creating a team-a record acting as team-b/kix",
        "must name the ServiceAccount the platform declares for it, not team-b/kix",
    );
    assert_refused(
        &create(
            &cp,
            As::Alice,
            &record("team-a-3", Some("team-a"), "team-a", None),
        ),
        "alice creating a team-a record naming no account",
        "not (none)",
    );
    // An undeclared Kix cluster has no writers but the platform.
    assert_refused(
        &create(
            &cp,
            As::Mallory,
            &record("other-1", Some("other"), "other", None),
        ),
        "mallory creating a record of an undeclared Kix cluster",
        "Kix cluster other",
    );

    // No one moves a record: not its writer (who writes no team-b record,
    // nor one acting as team-b's account), not even the platform.
    let relabel = [
        "label",
        "--overwrite",
        "activation/team-a-1",
        "kix.run/cluster=team-b",
    ];
    let repoint = [
        "patch",
        "activation/team-a-1",
        "--type=merge",
        "-p",
        r#"{"spec":{"serviceAccount":{"namespace":"team-b","name":"kix"}}}"#,
    ];
    assert_refused(
        &kubectl(&cp, As::Alice, &relabel, None),
        "alice relabelling team-a's record to team-b",
        "alice may not update the kix records of Kix cluster team-b",
    );
    assert_refused(
        &kubectl(&cp, As::Alice, &repoint, None),
        "alice pointing team-a's record at team-b's account",
        "not team-b/kix",
    );
    assert_refused(
        &kubectl(&cp, As::Admin, &relabel, None),
        "the admin relabelling team-a's record to team-b",
        "cannot move to another Kix cluster",
    );
    assert_refused(
        &kubectl(&cp, As::Admin, &repoint, None),
        "the admin pointing team-a's record at team-b's account",
        "cannot move to another Kix cluster or ServiceAccount",
    );
    // Another team may neither change nor delete it.
    assert_refused(
        &kubectl(
            &cp,
            As::Bob,
            &["annotate", "activation/team-a-1", "x=y"],
            None,
        ),
        "bob annotating team-a's record",
        "bob may not update the kix records of Kix cluster team-a",
    );
    assert_refused(
        &kubectl(
            &cp,
            As::Bob,
            &["delete", "activation/team-a-1", "--wait=false"],
            None,
        ),
        "bob deleting team-a's record",
        "bob may not delete the kix records of Kix cluster team-a",
    );
    // Its writers may change what does not move it, and delete it.
    assert_allowed(
        &kubectl(
            &cp,
            As::Alice,
            &["annotate", "activation/team-a-1", "x=y"],
            None,
        ),
        "alice annotating her record",
    );
    assert_allowed(
        &kubectl(
            &cp,
            As::Alice,
            &["delete", "activation/team-a-1", "--wait=false"],
            None,
        ),
        "alice deleting her record",
    );
    // bob is team-b's writer by name.
    assert_allowed(
        &create(
            &cp,
            As::Bob,
            &record(
                "team-b-9",
                Some("team-b"),
                "team-b",
                Some(("team-b", "kix")),
            ),
        ),
        "bob creating a team-b record",
    );
    let listed = kubectl(&cp, As::Admin, &["get", "activations", "-o", "json"], None);
    let names: Vec<String> = serde_json::from_slice::<Value>(&listed.stdout)
        .ok()
        .and_then(|v| v["items"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_owned))
        .filter(|n| !n.starts_with("probe-"))
        .collect();
    assert_eq!(names, ["team-b-9"], "records left: only what was allowed");
}

/// Applies a tenant's RBAC (`doc`, written to `file`) as the admin.
fn apply_rbac(env: &kix_testkit::TestEnv, file: &std::path::Path, doc: &str) {
    std::fs::write(file, doc).expect("rbac");
    env.kubectl(&["apply", "-f", file.to_str().expect("utf8")])
        .expect("tenant RBAC");
}

/// A tenant's account: it writes ConfigMaps in its namespace and kix's
/// records, the deploy Lease, and reads what a plan reads; nothing else.
fn tenant_rbac(namespace: &str, account: &str) -> String {
    tenant_rbac_reading(namespace, account, &["configmaps"])
}

/// [`tenant_rbac`], reading cluster-wide only the `kinds` given besides
/// namespaces, ClusterRoleBindings and CRDs.
fn tenant_rbac_reading(namespace: &str, account: &str, kinds: &[&str]) -> String {
    let sa = json!({"kind": "ServiceAccount", "name": account, "namespace": namespace});
    let role = |kind: &str, name: &str, ns: Option<&str>, rules: Value| {
        let mut meta = json!({"name": name});
        if let Some(ns) = ns {
            meta["namespace"] = json!(ns);
        }
        let binding_kind = format!("{kind}Binding");
        vec![
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta, "rules": rules}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": binding_kind, "metadata": meta,
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
                   "subjects": [sa]}),
        ]
    };
    let mut items = vec![json!({"apiVersion": "v1", "kind": "ServiceAccount",
                                "metadata": {"name": account, "namespace": namespace}})];
    // Its deploy Leases in its own namespace, none anywhere else.
    items.extend(role(
        "Role",
        "kix-tenant",
        Some(namespace),
        json!([
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["*"]}]),
    ));
    items.extend(role("ClusterRole", &format!("kix-tenant-{namespace}"), None, json!([
        {"apiGroups": ["kix.run"], "resources": ["*"], "verbs": ["*"]},
        {"apiGroups": ["", "rbac.authorization.k8s.io", "apiextensions.k8s.io"],
         "resources": kinds.iter().copied().chain(["namespaces", "clusterrolebindings", "customresourcedefinitions"]).collect::<Vec<_>>(),
         "verbs": ["get", "list", "watch"]}])));
    json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string()
}

fn tenant_tree(root: &Path, cluster: &str, namespace: &str, extra: Option<&str>) -> String {
    let mut files = vec![(
        "cm.yaml".to_string(),
        b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {value: one}\n"
            .to_vec(),
    )];
    if let Some(extra) = extra {
        files.push(("extra.yaml".to_string(), extra.as_bytes().to_vec()));
    }
    common::write_tree(
        root,
        cluster,
        &[common::Pkg {
            name: "web".into(),
            depends_on: vec![],
            namespace: namespace.into(),
            files,
        }],
    );
    let kix_json = root.join("kix.json");
    let mut head: Value =
        serde_json::from_str(&std::fs::read_to_string(&kix_json).expect("kix.json")).expect("json");
    head["settings"]["serviceAccount"] = json!({"namespace": namespace, "name": "kix"});
    std::fs::write(&kix_json, head.to_string()).expect("kix.json");
    common::add_to_store(root)
}

const CLUSTER_ADMIN_BINDING: &str = "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: tenant-takes-over}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}\nsubjects: [{kind: User, name: mallory, apiGroup: rbac.authorization.k8s.io}]\n";

/// A build that names a ServiceAccount is deployed by the CLI acting as
/// that account: its writes are the account's in the audit log, the record
/// names it, and a build reaching past its rights changes nothing.
#[tokio::test]
async fn a_local_deploy_acts_as_the_account_its_build_names() {
    let env = kix_testkit::TestEnv::new("tenant-cli").await.expect("env");
    install_crds(&env);
    let dir = tempfile::tempdir().expect("tempdir");
    apply_rbac(
        &env,
        &dir.path().join("rbac.json"),
        &tenant_rbac(&env.namespace, "kix"),
    );
    let user = format!("system:serviceaccount:{}:kix", env.namespace);
    let admin = kix_testkit::kubeconfig_path();
    let gcroots = dir.path().join("gcroots");
    let cp_dir = kix_testkit::control_plane_dir();

    let good = tenant_tree(&dir.path().join("good"), &env.cluster, &env.namespace, None);
    let mark = common::audit_mark(&cp_dir);
    let run = common::run(common::kix(&admin, &gcroots).args([
        "deploy",
        &env.cluster,
        "--path",
        &good,
        "--yes",
    ]));
    assert_eq!(run.code, Some(0), "deploy as the tenant: {run}");
    let writes = writes_as(mark, &user);
    assert!(
        writes
            .iter()
            .any(|(w, code)| w == "patch configmaps/settings" && *code < 300),
        "the ConfigMap was written acting as {user}: {writes:?}"
    );
    let records = common::records(&env.client, &env.cluster).await;
    assert_eq!(
        records
            .last()
            .and_then(|r| r.spec.service_account.as_ref())
            .map(ToString::to_string),
        Some(format!("{}/kix", env.namespace)),
        "the record names the account"
    );

    // The same build plus a ClusterRoleBinding to cluster-admin: refused
    // before any write, naming what the account may not do.
    let bad = tenant_tree(
        &dir.path().join("bad"),
        &env.cluster,
        &env.namespace,
        Some(CLUSTER_ADMIN_BINDING),
    );
    let mark = common::audit_mark(&cp_dir);
    let run = common::run(common::kix(&admin, &gcroots).args([
        "deploy",
        &env.cluster,
        "--path",
        &bad,
        "--yes",
    ]));
    assert_eq!(
        run.code,
        Some(1),
        "a tenant's cluster-admin binding was deployed: {run}"
    );
    let text = run.to_string();
    assert!(
        text.contains("clusterrolebindings") && text.contains(&user),
        "the error names the kind and the account: {text}"
    );
    let writes = writes_as(mark, &user);
    assert!(
        writes.is_empty(),
        "no write acting as the tenant: {writes:?}"
    );
    let bindings = env
        .kubectl(&[
            "get",
            "clusterrolebinding",
            "tenant-takes-over",
            "--ignore-not-found",
            "-o",
            "name",
        ])
        .expect("kubectl");
    assert!(bindings.trim().is_empty(), "the binding exists: {bindings}");
}

/// The value of ConfigMap `settings` in `namespace`.
fn settings_value(env: &kix_testkit::TestEnv, namespace: &str) -> String {
    env.kubectl(&[
        "get",
        "configmap",
        "settings",
        "-n",
        namespace,
        "-o",
        "jsonpath={.data.value}",
    ])
    .expect("kubectl")
}

fn deploy_operator(gcroots: &Path, cluster: &str, path: &str) -> common::Run {
    common::run(common::kix(&kix_testkit::kubeconfig_path(), gcroots).args([
        "deploy",
        cluster,
        "--operator",
        "--path",
        path,
        "--yes",
    ]))
}

/// The message of record `name` once it settled, asserting it is Failed.
async fn failed_with(client: &kube::Client, name: &str) -> String {
    let refused = common::settled(client, name).await;
    let message = refused
        .status
        .as_ref()
        .and_then(|s| s.message.clone())
        .unwrap_or_default();
    assert_eq!(refused.phase(), Some(kix_api::Phase::Failed), "{message}");
    message
}

/// Two tenants on one operator running with `--require-service-account`:
/// each record is applied acting as its account, a build reaching into the
/// other tenant's namespace is refused with no write, a record naming no
/// account changes nothing, and deleting a record deletes only what its
/// account may delete.
#[tokio::test]
async fn the_operator_acts_for_each_record_as_its_account() {
    let mut env = kix_testkit::TestEnv::new("tenant-op").await.expect("env");
    install_crds(&env);
    let (ns_a, ns_b) = (
        env.namespace.clone(),
        env.namespace("b").await.expect("ns b"),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    for ns in [&ns_a, &ns_b] {
        apply_rbac(
            &env,
            &dir.path().join(format!("rbac-{ns}.json")),
            &tenant_rbac(ns, "kix"),
        );
    }
    let (cluster_a, cluster_b) = (env.cluster.clone(), kix_testkit::unique_name("c-tenant-b"));
    let cluster_none = kix_testkit::unique_name("c-tenant-none");
    let (user_a, user_b) = (
        format!("system:serviceaccount:{ns_a}:kix"),
        format!("system:serviceaccount:{ns_b}:kix"),
    );
    let gcroots = dir.path().join("gcroots");
    let _operator = common::Operator::start_with(
        &kix_testkit::kubeconfig_path(),
        &[&cluster_a, &cluster_b, &cluster_none],
        // The leader Lease: no tenant may write there (each takes its deploy
        // Lease in its own namespace).
        "kube-system",
        &kix_testkit::unique_name("lease"),
        dir.path().join("operator.log"),
        None,
        &["--require-service-account"],
    );
    let cp_dir = kix_testkit::control_plane_dir();

    // Each tenant deploys through the operator, which writes as its account.
    let mark = common::audit_mark(&cp_dir);
    let build_b = tenant_tree(&dir.path().join("b"), &cluster_b, &ns_b, None);
    let run = deploy_operator(&gcroots, &cluster_b, &build_b);
    assert_eq!(run.code, Some(0), "tenant b deploys: {run}");
    let build_a = tenant_tree(&dir.path().join("a1"), &cluster_a, &ns_a, None);
    let run = deploy_operator(&gcroots, &cluster_a, &build_a);
    assert_eq!(run.code, Some(0), "tenant a deploys: {run}");
    for (user, what) in [(&user_a, "a"), (&user_b, "b")] {
        let writes = writes_as(mark, user);
        assert!(
            writes
                .iter()
                .any(|(w, code)| w == "patch configmaps/settings" && *code < 300),
            "tenant {what}'s ConfigMap written acting as {user}: {writes:?}"
        );
    }
    let applied_a = common::records(&env.client, &cluster_a).await;
    let applied_a = applied_a.last().expect("a's record").clone();

    // A record of tenant a's whose build reaches into b's namespace.
    let reaching = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings, namespace: {ns_b}}}\ndata: {{value: taken}}\n"
    );
    let build_a2 = tenant_tree(&dir.path().join("a2"), &cluster_a, &ns_a, Some(&reaching));
    let mut spec = applied_a.spec.clone();
    spec.source.path = build_a2.clone();
    let mark = common::audit_mark(&cp_dir);
    let name = common::write_record(&env.client, &cluster_a, spec).await;
    let message = failed_with(&env.client, &name).await;
    assert!(
        message.contains(&format!("ConfigMap {ns_b}/settings")) && message.contains("cannot patch"),
        "the refusal names the object and the verb: {message}"
    );
    let writes: Vec<_> = writes_as(mark, &user_a)
        .into_iter()
        .filter(|(w, _)| w.contains("configmaps"))
        .collect();
    assert!(
        writes.is_empty(),
        "no ConfigMap written acting as tenant a: {writes:?}"
    );
    assert_eq!(
        settings_value(&env, &ns_b),
        "one",
        "tenant b's ConfigMap is untouched"
    );

    // A record of tenant a's pointing at a build that acts as b's account:
    // a record cannot borrow another team's account through a build.
    let borrowing = tenant_tree(&dir.path().join("a3"), &cluster_a, &ns_b, None);
    let mut spec = applied_a.spec.clone();
    spec.source.path = borrowing;
    let mark = common::audit_mark(&cp_dir);
    let name = common::write_record(&env.client, &cluster_a, spec).await;
    let message = failed_with(&env.client, &name).await;
    assert!(
        message.contains(&format!(
            "the build acts as ServiceAccount {ns_b}/kix, the record as {ns_a}/kix: nothing was changed"
        )),
        "{message}"
    );
    let writes: Vec<_> = writes_as(mark, &user_b)
        .into_iter()
        .chain(writes_as(mark, &user_a))
        .filter(|(w, _)| w.contains("configmaps"))
        .collect();
    assert!(writes.is_empty(), "no ConfigMap written for it: {writes:?}");

    // A record naming no account: refused under --require-service-account.
    let build_none = {
        let root = dir.path().join("none");
        common::write_tree(
            &root,
            &cluster_none,
            &[common::Pkg {
                name: "web".into(),
                depends_on: vec![],
                namespace: ns_a.clone(),
                files: vec![(
                    "cm.yaml".into(),
                    b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: unowned}\n".to_vec(),
                )],
            }],
        );
        common::add_to_store(&root)
    };
    let mut spec = applied_a.spec.clone();
    spec.cluster = cluster_none.clone();
    spec.source.path = build_none;
    spec.service_account = None;
    let name = common::write_record(&env.client, &cluster_none, spec).await;
    let message = failed_with(&env.client, &name).await;
    assert!(message.contains("--require-service-account"), "{message}");
    let unowned = env
        .kubectl(&[
            "get",
            "configmap",
            "unowned",
            "-n",
            &ns_a,
            "--ignore-not-found",
            "-o",
            "name",
        ])
        .expect("kubectl");
    assert!(
        unowned.trim().is_empty(),
        "nothing applied for it: {unowned}"
    );

    // Deleting tenant a's records deletes a's ConfigMap acting as a, and
    // nothing of b's.
    let mark = common::audit_mark(&cp_dir);
    let api: kube::Api<kix_api::Activation> = kube::Api::all(env.client.clone());
    for record in common::records(&env.client, &cluster_a).await {
        let name = kube::ResourceExt::name_any(&record);
        api.delete(&name, &Default::default())
            .await
            .expect("deleting a's record");
    }
    common::poll(
        "tenant a's records to be gone",
        Duration::from_secs(60),
        Duration::from_millis(300),
        || {
            let client = env.client.clone();
            let cluster = cluster_a.clone();
            async move {
                common::records(&client, &cluster)
                    .await
                    .is_empty()
                    .then_some(())
            }
        },
    )
    .await;
    let deletes = writes_as(mark, &user_a);
    assert!(
        deletes
            .iter()
            .any(|(w, code)| w == "delete configmaps/settings" && *code < 300),
        "a's ConfigMap deleted acting as a: {deletes:?}"
    );
    assert_eq!(
        settings_value(&env, &ns_b),
        "one",
        "tenant b's ConfigMap is untouched"
    );
}

/// A prune the tenant's account may not perform is kept as a failed
/// deletion on the record, named with the apiserver's words, and not
/// retried in a loop by the operator.
#[tokio::test]
async fn a_prune_the_tenant_may_not_perform_is_a_named_failed_deletion_not_a_loop() {
    let env = kix_testkit::TestEnv::new("tenant-prune")
        .await
        .expect("env");
    install_crds(&env);
    let dir = tempfile::tempdir().expect("tempdir");
    apply_rbac(
        &env,
        &dir.path().join("rbac.json"),
        &tenant_rbac(&env.namespace, "kix"),
    );
    let user = format!("system:serviceaccount:{}:kix", env.namespace);
    let gcroots = dir.path().join("gcroots");
    let _operator = common::Operator::start_with(
        &kix_testkit::kubeconfig_path(),
        &[&env.cluster],
        "kube-system",
        &kix_testkit::unique_name("lease"),
        dir.path().join("operator.log"),
        None,
        &["--require-service-account"],
    );
    let extra = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: dropped}\ndata: {value: x}\n";
    let v1 = tenant_tree(
        &dir.path().join("v1"),
        &env.cluster,
        &env.namespace,
        Some(extra),
    );
    let run = deploy_operator(&gcroots, &env.cluster, &v1);
    assert_eq!(run.code, Some(0), "first deploy: {run}");

    // The platform takes the right to delete ConfigMaps away.
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "kix-tenant", "namespace": env.namespace},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                   "verbs": ["get", "list", "watch", "create", "update", "patch"]},
                  {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["*"]}]});
    let file = dir.path().join("role.json");
    std::fs::write(&file, role.to_string()).expect("role");
    env.kubectl(&["apply", "-f", file.to_str().expect("utf8")])
        .expect("narrowing the tenant's Role");

    let v2 = tenant_tree(&dir.path().join("v2"), &env.cluster, &env.namespace, None);
    let mark = common::audit_mark(&kix_testkit::control_plane_dir());
    let run = deploy_operator(&gcroots, &env.cluster, &v2);
    assert_eq!(
        run.code,
        Some(1),
        "a deploy whose prune failed is Degraded: {run}"
    );
    let record = common::records(&env.client, &env.cluster)
        .await
        .pop()
        .expect("the record");
    let status = record.status.clone().unwrap_or_default();
    assert_eq!(record.phase(), Some(kix_api::Phase::Degraded), "{status:?}");
    let failed: Vec<String> = status
        .failed_deletions
        .iter()
        .map(|f| format!("{} {}: {}", f.object.kind, f.object.name, f.reason))
        .collect();
    assert!(
        failed.len() == 1
            && failed[0].starts_with("ConfigMap dropped")
            && failed[0].contains("cannot delete"),
        "the failed deletion is named with the apiserver's words: {failed:?}"
    );
    // Over the operator's resync (10 s in tests): at most one more try.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let tries = writes_as(mark, &user)
        .into_iter()
        .filter(|(w, _)| w == "delete configmaps/dropped")
        .count();
    assert!(
        (1..=3).contains(&tries),
        "deletions tried in 12 s after the first: {tries} (no hot loop)"
    );
    let still = env
        .kubectl(&[
            "get",
            "configmap",
            "dropped",
            "-n",
            &env.namespace,
            "-o",
            "name",
        ])
        .expect("the ConfigMap is still there");
    assert!(still.contains("dropped"), "{still}");
}

/// A tenant whose Roles hold only its namespace (no cluster-wide read of the
/// kinds its build holds) plans, deploys, redeploys as a no-op and prunes:
/// the plan lists in the build's namespaces what it may not list
/// cluster-wide.
#[tokio::test]
async fn a_tenant_bounded_to_its_namespace_plans_deploys_and_prunes() {
    let env = kix_testkit::TestEnv::new("tenant-ns").await.expect("env");
    install_crds(&env);
    let dir = tempfile::tempdir().expect("tempdir");
    apply_rbac(
        &env,
        &dir.path().join("rbac.json"),
        &tenant_rbac_reading(&env.namespace, "kix", &[]),
    );
    let admin = kix_testkit::kubeconfig_path();
    let gcroots = dir.path().join("gcroots");
    let deploy = |path: &str| {
        common::run(common::kix(&admin, &gcroots).args([
            "deploy",
            &env.cluster,
            "--path",
            path,
            "--yes",
        ]))
    };
    let extra = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: dropped}\ndata: {value: x}\n";
    let v1 = tenant_tree(
        &dir.path().join("v1"),
        &env.cluster,
        &env.namespace,
        Some(extra),
    );
    let run = deploy(&v1);
    assert_eq!(run.code, Some(0), "first deploy: {run}");
    let run = deploy(&v1);
    assert_eq!(run.code, Some(0), "redeploy: {run}");
    assert!(
        run.stdout.contains("nothing to do") || run.stdout.contains("2 unchanged"),
        "the redeploy sees its objects in its namespace: {run}"
    );
    let v2 = tenant_tree(&dir.path().join("v2"), &env.cluster, &env.namespace, None);
    let run = deploy(&v2);
    assert_eq!(run.code, Some(0), "deploy dropping a ConfigMap: {run}");
    let left = env
        .kubectl(&[
            "get",
            "configmap",
            "dropped",
            "-n",
            &env.namespace,
            "--ignore-not-found",
            "-o",
            "name",
        ])
        .expect("kubectl");
    assert!(
        left.trim().is_empty(),
        "pruned acting as the tenant: {left}"
    );
}

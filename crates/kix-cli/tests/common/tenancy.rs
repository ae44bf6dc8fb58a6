//! Tenants on the shared control plane: a tenant's ServiceAccount and its
//! RBAC, a build that acts as it, kix's CRDs installed as a platform does,
//! and the writes the audit log shows made acting as an account.

use std::path::Path;

use serde_json::{Value, json};

/// kix's CRDs on the shared control plane, as a platform installs them
/// before tenants deploy (a tenant's account may not install them).
pub fn install_crds(env: &kix_testkit::TestEnv) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("crds.yaml");
    std::fs::write(&file, kix_api::crds_yaml()).expect("crds.yaml");
    let file = file.to_str().expect("utf8");
    env.kubectl(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager",
        "kix",
        "-f",
        file,
    ])
    .expect("installing kix's CRDs");
    env.kubectl(&[
        "wait",
        "--for=condition=Established",
        "crd/activations.kix.run",
        "crd/packageinstances.kix.run",
        "--timeout=60s",
    ])
    .expect("kix's CRDs Established");
}

/// Applies tenant `namespace`'s RBAC ([`rbac`]) as the admin.
pub fn apply_rbac(env: &kix_testkit::TestEnv, namespace: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("rbac.json");
    std::fs::write(&file, rbac(namespace)).expect("rbac");
    env.kubectl(&["apply", "-f", file.to_str().expect("utf8")])
        .expect("tenant RBAC");
}

/// ServiceAccount `namespace/kix`: it writes ConfigMaps and its deploy
/// Leases in its namespace, kix's records, and reads what a plan reads
/// (ConfigMaps, Namespaces, ClusterRoleBindings, CRDs cluster-wide);
/// nothing else.
pub fn rbac(namespace: &str) -> String {
    let sa = json!({"kind": "ServiceAccount", "name": "kix", "namespace": namespace});
    let role = |kind: &str, name: &str, ns: Option<&str>, rules: Value| {
        let mut meta = json!({"name": name});
        if let Some(ns) = ns {
            meta["namespace"] = json!(ns);
        }
        vec![
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta, "rules": rules}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": format!("{kind}Binding"),
                   "metadata": meta,
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
                   "subjects": [sa]}),
        ]
    };
    let mut items = vec![json!({"apiVersion": "v1", "kind": "ServiceAccount",
                                "metadata": {"name": "kix", "namespace": namespace}})];
    // Its deploy Leases in its own namespace, none anywhere else.
    items.extend(role(
        "Role",
        "kix-tenant",
        Some(namespace),
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]},
               {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["*"]}]),
    ));
    items.extend(role(
        "ClusterRole",
        &format!("kix-tenant-{namespace}"),
        None,
        json!([
        {"apiGroups": ["kix.run"], "resources": ["*"], "verbs": ["*"]},
        {"apiGroups": ["", "rbac.authorization.k8s.io", "apiextensions.k8s.io"],
         "resources": ["configmaps", "namespaces", "clusterrolebindings", "customresourcedefinitions"],
         "verbs": ["get", "list", "watch"]}]),
    ));
    json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string()
}

/// The username the apiserver sees acting as `namespace/kix`.
pub fn user(namespace: &str) -> String {
    format!("system:serviceaccount:{namespace}:kix")
}

/// A build of Kix cluster `cluster` acting as `namespace/kix`: ConfigMap
/// `settings` in `namespace`, plus `extra` (a YAML document) when given;
/// added to the store.
pub fn tree(root: &Path, cluster: &str, namespace: &str, extra: Option<&str>) -> String {
    tree_with_rules(root, cluster, namespace, extra, &[])
}

/// [`tree`] with health rules `rules` in its package's `package.json`.
pub fn tree_with_rules(
    root: &Path,
    cluster: &str,
    namespace: &str,
    extra: Option<&str>,
    rules: &[Value],
) -> String {
    write(root, cluster, namespace, extra);
    edit_json(&root.join("kix.json"), |head| {
        head["settings"]["serviceAccount"] = json!({"namespace": namespace, "name": "kix"});
    });
    if !rules.is_empty() {
        edit_json(&root.join("packages/web/package.json"), |package| {
            package["health"] = json!(rules);
        });
    }
    super::add_to_store(root)
}

fn edit_json(file: &Path, edit: impl FnOnce(&mut Value)) {
    let mut value: Value =
        serde_json::from_str(&std::fs::read_to_string(file).expect("read")).expect("json");
    edit(&mut value);
    std::fs::write(file, value.to_string()).expect("write");
}

/// [`tree`] naming no ServiceAccount: deployed with the caller's rights.
pub fn tree_of_caller(root: &Path, cluster: &str, namespace: &str, extra: Option<&str>) -> String {
    write(root, cluster, namespace, extra);
    super::add_to_store(root)
}

fn write(root: &Path, cluster: &str, namespace: &str, extra: Option<&str>) {
    let mut files = vec![(
        "cm.yaml".to_string(),
        b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {value: one}\n"
            .to_vec(),
    )];
    if let Some(extra) = extra {
        files.push(("extra.yaml".to_string(), extra.as_bytes().to_vec()));
    }
    super::write_tree(
        root,
        cluster,
        &[super::Pkg {
            name: "web".into(),
            depends_on: vec![],
            namespace: namespace.into(),
            files,
        }],
    );
}

/// A ClusterRoleBinding `name` granting cluster-admin to mallory: what no
/// tenant may write.
pub fn cluster_admin_binding(name: &str) -> String {
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: {name}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}\nsubjects: [{{kind: User, name: mallory, apiGroup: rbac.authorization.k8s.io}}]\n"
    )
}

/// A ConfigMap `name` in `namespace` (another tenant's): a separate YAML
/// document.
pub fn config_map_in(namespace: &str, name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {namespace}}}\ndata: {{value: taken}}\n"
    )
}

/// Whether `kind/name` (in `namespace`, when given) exists, as the admin.
pub fn exists(env: &kix_testkit::TestEnv, kind: &str, name: &str, namespace: Option<&str>) -> bool {
    let mut args = vec!["get", kind, name, "--ignore-not-found", "-o", "name"];
    if let Some(ns) = namespace {
        args.extend(["-n", ns]);
    }
    !env.kubectl(&args).expect("kubectl get").trim().is_empty()
}

/// The writes (not dry runs) the audit log shows since `mark` made acting
/// as `user` (impersonated): `verb resource/name` and the response code.
pub fn writes_as(mark: u64, user: &str) -> Vec<(String, i64)> {
    use std::io::{BufRead, BufReader, Seek, SeekFrom};
    let log = super::audit_log(&kix_testkit::control_plane_dir());
    let mut file = std::fs::File::open(log).expect("audit log");
    file.seek(SeekFrom::Start(mark)).expect("seek");
    let mut out = Vec::new();
    for line in BufReader::new(file).lines() {
        let Ok(line) = line else { break };
        let Ok(event) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let verb = text(&event["verb"]);
        if event["stage"] != "ResponseComplete"
            || event["impersonatedUser"]["username"] != user
            || !matches!(verb.as_str(), "create" | "update" | "patch" | "delete")
            || text(&event["requestURI"]).contains("dryRun=All")
        {
            continue;
        }
        out.push((
            format!(
                "{verb} {}/{}",
                text(&event["objectRef"]["resource"]),
                text(&event["objectRef"]["name"])
            ),
            event["responseStatus"]["code"].as_i64().unwrap_or_default(),
        ));
    }
    out
}

/// The audit log's length now: what [`writes_as`] reads from.
pub fn audit_mark() -> u64 {
    super::audit_mark(&kix_testkit::control_plane_dir())
}

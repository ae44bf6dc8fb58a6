//! Hostile input, end to end: the real `kix` and `kix-operator` binaries
//! against the shared control plane. docs/reliability.md records what these
//! tests observed.
//!
//! - Every malformed tree of crates/kix-manifest/tests/fixtures/err/ given to
//!   `kix deploy --path` is rejected (exit 1, the file named) with no write
//!   request to the apiserver, counted in the audit log for a user of the
//!   test's own (a cluster-admin, so nothing but kix itself could stop a
//!   write).
//! - The reader's size limits hold end to end: a 20 MiB file, a 2 MiB object.
//! - Activation records whose `spec.source.path` is hostile are Failed by the
//!   operator with a message, and nothing runs on them: `nix-store` and `nix`
//!   are shims on the operator's PATH that log their arguments.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kix_api::{Activation, Phase};
use kix_testkit::TestEnv;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};

/// A user of the shared control plane with cluster-admin rights, its
/// requests told apart in the audit log by its name. The binding is deleted
/// when dropped.
struct Admin {
    user: String,
    kubeconfig: PathBuf,
    client: Client,
}

impl Admin {
    async fn new(env: &TestEnv, dir: &Path) -> Admin {
        let user = kix_testkit::unique_name("kix-hostile");
        let kubeconfig =
            kix_testkit::kubeconfig_for_user(&user, dir).expect("a kubeconfig for the user");
        let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": user, "labels": {kix_testkit::TEST_LABEL: "hostile"}},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }))
        .expect("binding");
        Api::<ClusterRoleBinding>::all(env.client.clone())
            .create(&PostParams::default(), &binding)
            .await
            .expect("bind cluster-admin");
        Admin {
            user,
            kubeconfig,
            client: env.client.clone(),
        }
    }

    /// The requests this user made since `mark` (after a moment, so the
    /// apiserver has logged the last responses).
    async fn requests_since(&self, mark: u64) -> Vec<Audited> {
        tokio::time::sleep(Duration::from_secs(1)).await;
        requests_of(&kix_testkit::control_plane_dir(), mark, &self.user)
    }

    async fn remove(self) {
        let _ = Api::<ClusterRoleBinding>::all(self.client.clone())
            .delete(&self.user, &DeleteParams::default())
            .await;
    }
}

/// The file (or symlink) an error message of the reader names: the link of
/// a symlink error, else the first path-like word (`kix.json`,
/// `packages/app/resources/cm.yaml`).
fn named_file(message: &str) -> Option<String> {
    if let Some(rest) = message.strip_prefix("symlink ") {
        return rest.split(" -> ").next().map(str::to_string);
    }
    message
        .split(|c: char| c.is_whitespace() || c == ':' || c == ',')
        .find(|w| {
            w.contains('/') || w.ends_with(".json") || w.ends_with(".yaml") || w.ends_with(".yml")
        })
        .map(str::to_string)
}

fn cluster_of(tree: &Path) -> String {
    std::fs::read_to_string(tree.join("kix.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v["cluster"].as_str().map(str::to_string))
        .filter(|c| c.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
        .unwrap_or_else(|| "hostile".into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_trees_and_oversized_files_are_rejected_before_any_write() {
    let env = TestEnv::new("hostile-trees").await.expect("control plane");
    let scratch = tempfile::tempdir().expect("tempdir");
    let admin = Admin::new(&env, scratch.path()).await;
    let gcroots = scratch.path().join("gcroots");
    let cp_dir = kix_testkit::control_plane_dir();

    // The audit log does see this user's writes: a good tree, deployed.
    let good = scratch.path().join("hostile-good");
    write_tree(
        &good,
        &env.cluster,
        &[Pkg {
            name: "web".into(),
            depends_on: vec![],
            namespace: env.namespace.clone(),
            files: vec![(
                "cm.yaml".into(),
                b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: good}\ndata: {a: b}\n".to_vec(),
            )],
        }],
    );
    let mark = audit_mark(&cp_dir);
    let out = run(kix(&admin.kubeconfig, &gcroots)
        .args(["deploy", &env.cluster, "--path"])
        .arg(&good)
        .arg("--yes"));
    assert_eq!(out.code, Some(0), "the good tree deploys: {out}");
    let writes = admin
        .requests_since(mark)
        .await
        .iter()
        .filter(|r| r.is_write())
        .count();
    assert!(writes > 0, "the audit log shows the good deploy's writes");

    // Malformed trees, and the size limits (16 MiB per file, 1 MiB per object).
    let fixtures = kix_testkit::repo_root().join("crates/kix-manifest/tests/fixtures/err");
    let mut cases: Vec<(String, PathBuf, String)> = std::fs::read_dir(&fixtures)
        .expect("fixtures")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_dir())
        .map(|p| {
            let expected = std::fs::read_to_string(p.join("expected-error.txt"))
                .expect("expected-error.txt")
                .trim()
                .to_string();
            (
                p.file_name().expect("name").to_string_lossy().into_owned(),
                p,
                expected,
            )
        })
        .collect();
    cases.sort();
    assert!(
        cases.len() >= 40,
        "the malformed-tree corpus: {} cases",
        cases.len()
    );
    let big_file = scratch.path().join("hostile-20mib-file");
    let content = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: big}}\ndata: {{a: \"{}\"}}\n",
        "x".repeat(20 * 1024 * 1024)
    );
    let size = content.len();
    write_tree(
        &big_file,
        &env.cluster,
        &[Pkg {
            name: "web".into(),
            depends_on: vec![],
            namespace: env.namespace.clone(),
            files: vec![("big.yaml".into(), content.into_bytes())],
        }],
    );
    cases.push((
        "file over 16 MiB".into(),
        big_file,
        format!("packages/web/resources/big.yaml: {size} bytes, more than the limit of 16777216 bytes per file"),
    ));
    let big_object = scratch.path().join("hostile-2mib-object");
    let filler = "x".repeat(2 * 1024 * 1024);
    write_tree(
        &big_object,
        &env.cluster,
        &[Pkg {
            name: "web".into(),
            depends_on: vec![],
            namespace: env.namespace.clone(),
            files: vec![("big.yaml".into(), format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: big}}\ndata: {{a: \"{filler}\"}}\n").into_bytes())],
        }],
    );
    cases.push((
        "object over 1 MiB".into(),
        big_object,
        format!("packages/web/resources/big.yaml: document 1 (line 1): object ConfigMap {}/big is more than 1048576 bytes as JSON", env.namespace),
    ));

    let mark = audit_mark(&cp_dir);
    let (mut verbatim, mut by_file) = (0, 0);
    for (name, tree, expected) in &cases {
        let out = run(kix(&admin.kubeconfig, &gcroots)
            .args(["deploy", &cluster_of(tree), "--path"])
            .arg(tree)
            .arg("--yes"));
        assert_eq!(out.code, Some(1), "{name}: rejected with exit 1: {out}");
        if out.stderr.contains(expected.as_str()) {
            verbatim += 1;
        } else {
            let file = named_file(expected)
                .unwrap_or_else(|| panic!("{name}: the message differs from {expected:?}: {out}"));
            assert!(
                out.stderr.contains(&file),
                "{name}: the error names {file}: {out}"
            );
            by_file += 1;
            eprintln!(
                "hostile tree {name}: the store copy is rejected differently, naming {file}: {}",
                error_line(&out.stderr)
            );
        }
    }
    let requests = admin.requests_since(mark).await;
    let writes: Vec<&Audited> = requests.iter().filter(|r| r.is_write()).collect();
    assert!(
        writes.is_empty(),
        "malformed trees made write requests: {writes:#?}"
    );
    eprintln!(
        "hostile trees: {} rejected with exit 1 ({} malformed trees of the corpus, a 20 MiB file, a 2 MiB object): {verbatim} with the reader's exact message, {by_file} naming the file differently once in the Nix store; {} requests to the apiserver (reads), 0 writes",
        cases.len(),
        cases.len() - 2,
        requests.len()
    );
    // Reads may be made: a plan's first reads of the cluster start while
    // the tree is read (dropped when it cannot be).
    let not_reads: Vec<&Audited> = requests.iter().filter(|r| !r.is_read()).collect();
    assert!(
        not_reads.is_empty(),
        "malformed trees made requests other than reads: {not_reads:#?}"
    );
    admin.remove().await;
    let _ = kix_testkit::delete_namespace(&env.client, &env.namespace).await;
}

/// A directory in the store that Nix has not registered (half-written, or
/// put there by hand), unique to this run: a store path name with a hash
/// of its own.
fn unregistered_store_dir(label: &str) -> PathBuf {
    const NIX_BASE32: &[u8] = b"0123456789abcdfghijklmnpqrsvwxyz";
    let unique = kix_testkit::unique_name(label);
    let hash: String = unique
        .bytes()
        .cycle()
        .zip(0u32..32)
        .map(|(b, i)| NIX_BASE32[((u32::from(b) * 7 + i * 13) % 32) as usize] as char)
        .collect();
    PathBuf::from(format!("/nix/store/{hash}-{unique}"))
}

/// Removes the directories when dropped (Nix does not know them: `nix-store
/// --delete` would refuse).
struct RemoveOnDrop(Vec<PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        for dir in &self.0 {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// `kix plan` and `kix deploy` refuse a store path Nix has not registered,
/// naming it, whatever its tree holds, and write nothing. Its validity is
/// checked beside the tree's read: the check's verdict comes first, also
/// over a tree that cannot be read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_path_nix_has_not_registered_is_refused_before_any_write() {
    let env = TestEnv::new("hostile-unregistered")
        .await
        .expect("control plane");
    let scratch = tempfile::tempdir().expect("tempdir");
    let admin = Admin::new(&env, scratch.path()).await;
    let gcroots = scratch.path().join("gcroots");
    let cp_dir = kix_testkit::control_plane_dir();
    let readable = unregistered_store_dir("kix-unregistered");
    let malformed = unregistered_store_dir("kix-unregistered-bad");
    let _cleanup = RemoveOnDrop(vec![readable.clone(), malformed.clone()]);
    let configmap =
        b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: unregistered}\ndata: {a: b}\n";
    for (dir, file) in [
        (&readable, configmap.to_vec()),
        (&malformed, b"kind: [unclosed\n".to_vec()),
    ] {
        write_tree(
            dir,
            &env.cluster,
            &[Pkg {
                name: "web".into(),
                depends_on: vec![],
                namespace: env.namespace.clone(),
                files: vec![("cm.yaml".into(), file)],
            }],
        );
    }

    let mark = audit_mark(&cp_dir);
    for dir in [&readable, &malformed] {
        for command in [&["plan"][..], &["deploy", "--yes"][..]] {
            let out = run(kix(&admin.kubeconfig, &gcroots)
                .arg(command[0])
                .arg(&env.cluster)
                .arg("--path")
                .arg(dir)
                .args(&command[1..]));
            assert_eq!(
                out.code,
                Some(1),
                "{command:?} {}: exit 1: {out}",
                dir.display()
            );
            assert!(
                out.stderr.contains(&format!(
                    "store path {} is not valid and could not be realised",
                    dir.display()
                )),
                "{command:?} {}: the error is the store's, naming the path: {out}",
                dir.display()
            );
        }
    }
    let requests = admin.requests_since(mark).await;
    let not_reads: Vec<&Audited> = requests.iter().filter(|r| !r.is_read()).collect();
    assert!(
        not_reads.is_empty(),
        "unregistered store paths made requests other than reads: {not_reads:#?}"
    );
    let applied = Api::<ConfigMap>::namespaced(env.client.clone(), &env.namespace)
        .get_opt("unregistered")
        .await
        .expect("read the ConfigMap");
    assert!(applied.is_none(), "nothing was applied: {applied:?}");
    admin.remove().await;
    let _ = kix_testkit::delete_namespace(&env.client, &env.namespace).await;
}

/// Shims for `nix-store` and `nix` that log their arguments to `log`, then
/// run the real command.
fn shims(dir: &Path, log: &Path) -> PathBuf {
    let bin = dir.join("shims");
    std::fs::create_dir_all(&bin).expect("mkdir");
    for tool in ["nix-store", "nix"] {
        let real = Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {tool}"))
            .output()
            .expect("sh");
        let real = String::from_utf8_lossy(&real.stdout).trim().to_string();
        assert!(!real.is_empty(), "{tool} is installed");
        let script = bin.join(tool);
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\nprintf '%s\\n' \"{tool} $*\" >> '{}'\nexec '{real}' \"$@\"\n",
                log.display()
            ),
        )
        .expect("shim");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    bin
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_store_paths_are_failed_by_the_operator_and_nothing_runs_on_them() {
    let env = TestEnv::new("hostile-op").await.expect("control plane");
    let scratch = tempfile::tempdir().expect("tempdir");
    let (cluster, ns) = (env.cluster.clone(), env.namespace.clone());
    let marker = PathBuf::from(format!("/tmp/{}", kix_testkit::unique_name("kix-pwned")));
    let hash = "0123456789abcdfghijklmnpqrsvwxyz";
    let cm = |name: &str| {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: {{a: b}}\n")
            .into_bytes()
    };
    let web = |files: Vec<(String, Vec<u8>)>| {
        vec![Pkg {
            name: "web".into(),
            depends_on: vec![],
            namespace: ns.clone(),
            files,
        }]
    };

    // A valid tree outside the store: the operator must not read it.
    let outside = scratch.path().join("hostile-outside");
    write_tree(
        &outside,
        &cluster,
        &web(vec![("cm.yaml".into(), cm("from-outside"))]),
    );
    // A store path holding a symlink that escapes the store.
    let escaping = scratch.path().join("hostile-escaping");
    write_tree(
        &escaping,
        &cluster,
        &web(vec![("cm.yaml".into(), cm("from-escaping"))]),
    );
    std::os::unix::fs::symlink(
        "/etc/passwd",
        escaping.join("packages/web/resources/passwd.yaml"),
    )
    .expect("symlink");
    let escaping = add_to_store(&escaping);
    // A store path over the reader's limits (a 20 MiB file).
    let huge = scratch.path().join("hostile-huge");
    let filler = "x".repeat(20 * 1024 * 1024);
    write_tree(
        &huge,
        &cluster,
        &web(vec![
            ("cm.yaml".into(), cm("from-huge")),
            ("big.yaml".into(), filler.into_bytes()),
        ]),
    );
    let huge = add_to_store(&huge);

    let m = marker.display();
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "parent directory",
            "/nix/store/../etc/passwd".into(),
            "invalid store path",
        ),
        (
            "parent inside",
            format!("/nix/store/{hash}-x/../../../etc"),
            "invalid store path",
        ),
        (
            "not in the store",
            outside.display().to_string(),
            "invalid store path",
        ),
        (
            "semicolon",
            format!("/nix/store/{hash}-x;touch {m}"),
            "invalid store path",
        ),
        (
            "command substitution",
            format!("/nix/store/{hash}-x$(touch {m})"),
            "invalid store path",
        ),
        (
            "backticks",
            format!("/nix/store/{hash}-x`touch {m}`"),
            "invalid store path",
        ),
        (
            "newline",
            format!("/nix/store/{hash}-x\ntouch {m}"),
            "invalid store path",
        ),
        (
            "pipe",
            format!("/nix/store/{hash}-x|touch {m}"),
            "invalid store path",
        ),
        (
            "symlink escaping the store",
            escaping.clone(),
            "resolves outside the Nix store",
        ),
        (
            "huge tree",
            huge.clone(),
            "more than the limit of 16777216 bytes per file",
        ),
    ];

    let log = scratch.path().join("nix-calls.log");
    std::fs::write(&log, "").expect("log");
    let shim_dir = shims(scratch.path(), &log);
    let _operator = Operator::start(
        &kix_testkit::kubeconfig_path(),
        &[&cluster],
        &ns,
        &kix_testkit::unique_name("lease"),
        scratch.path().join("operator.log"),
        Some(&shim_dir),
    );
    let records: Api<Activation> = Api::all(env.client.clone());
    for (i, (what, path, expected)) in cases.iter().enumerate() {
        let spec: kix_api::ActivationSpec = serde_json::from_value(serde_json::json!({
            "cluster": cluster, "engine": "operator", "source": {"path": path},
            "receipt": {"user": "t", "host": "t", "kixVersion": "0", "time": "2026-01-01T00:00:00Z", "planDigest": "x"}
        }))
        .expect("spec");
        let record = Activation::new_record(i as u64 + 1, spec);
        let name = kube::ResourceExt::name_any(&record);
        records
            .create(&PostParams::default(), &record)
            .await
            .expect("create the record");
        let record = poll(
            &format!("{what}: the record Failed"),
            Duration::from_secs(60),
            Duration::from_millis(100),
            || async {
                records
                    .get(&name)
                    .await
                    .ok()
                    .filter(|r| r.phase() == Some(Phase::Failed))
            },
        )
        .await;
        let message = record.status.and_then(|s| s.message).unwrap_or_default();
        assert!(
            message.contains(expected),
            "{what}: Failed with {message:?}, expected it to say {expected:?}"
        );
        eprintln!(
            "hostile path {what}: Failed: {}",
            message.replace('\n', "\\n")
        );
    }

    assert!(
        !marker.exists(),
        "{} was created: a hostile path ran a command",
        marker.display()
    );
    let calls = std::fs::read_to_string(&log).unwrap_or_default();
    let calls: Vec<&str> = calls.lines().filter(|l| !l.trim().is_empty()).collect();
    for call in &calls {
        assert!(
            call.contains(&escaping) || call.contains(&huge),
            "the operator ran Nix on something other than a valid store path: {call}"
        );
    }
    assert!(
        calls.iter().any(|c| c.contains(&escaping)),
        "the shims work: the valid escaping path was checked: {calls:?}"
    );
    let live = managed(&env.client, &ns).await.expect("list");
    assert!(
        live.is_empty(),
        "nothing was applied: {:?}",
        live.keys().collect::<Vec<_>>()
    );
    eprintln!(
        "hostile paths: {} records Failed with a message; {} Nix calls, all on the 2 syntactically valid store paths; {} not created; nothing applied",
        cases.len(),
        calls.len(),
        marker.display()
    );
    // The records carry the operator's finalizer: deleted while it runs.
    let selector =
        kube::api::ListParams::default().labels(&kix_api::labels::cluster_selector(&cluster));
    let _ = records
        .delete_collection(&DeleteParams::default(), &selector)
        .await;
    poll(
        "the records deleted",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || async {
            records
                .list_metadata(&selector)
                .await
                .ok()
                .filter(|l| l.items.is_empty())
                .map(|_| ())
        },
    )
    .await;
    let _ = kix_testkit::delete_namespace(&env.client, &ns).await;
}

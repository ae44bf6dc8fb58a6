//! The in-cluster install (#44, point 3): `kix.lib.mkOperatorInstall`, built
//! with the Nix library and nix/tests' host-tools builder, passes
//! `kix validate` and deploys with `kix deploy` on the real control plane:
//! the store's PersistentVolumeClaim is Bound, the Deployment's two replicas
//! are scheduled on a KWOK node, with the own-store, leader-election and
//! cache flags and the /healthz and /readyz probes. The real operator, run
//! with the Deployment's arguments as the install's ServiceAccount, becomes
//! ready and holds the leader Lease in kix-system.
//!
//! The install's objects have fixed names (Namespace kix-system, ClusterRoles
//! kix-operator and kix-operator-apply): this test owns them while it runs
//! and deletes them at the end. Its Kix cluster, PersistentVolume and
//! StorageClass name are its own.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{Run, poll, run};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use kix_testkit::TestEnv;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};

const IMAGE: &str = "kix-operator:install-test";
const CACHE: &str = "https://cache.example.org";
const CACHE_KEY: &str = "cache.example.org-1:rmMnRv4vnmd5pO7Wj9UmrJ7uzRDa3T+9G1xhLyEGmmY=";

/// A Nix file whose value is the install, as a user's flake would call it
/// (`more`: further arguments, `lets`: bindings they use).
fn nix_file(dir: &Path, cluster: &str, lets: &str, more: &str) -> PathBuf {
    let file = dir.join("install.nix");
    std::fs::write(
        &file,
        format!(
            r#"let
  kix = import {root}/nix {{ }};
  pkgs = import {root}/nix/tests/host-tools.nix {{ }};
  {lets}
in
kix.lib.mkOperatorInstall {{
  inherit pkgs;
  name = "{cluster}";
  image = "{IMAGE}";
  {more}
}}
"#,
            root = kix_testkit::repo_root().display(),
        ),
    )
    .expect("write install.nix");
    file
}

fn install_file(dir: &Path, cluster: &str, storage_class: &str) -> PathBuf {
    let more = format!(
        r#"storageClassName = "{storage_class}";
  storageSize = "1Gi";
  substituters = [ "{CACHE}" ];
  trustedPublicKeys = [ "{CACHE_KEY}" ];"#
    );
    nix_file(dir, cluster, "", &more)
}

/// A directory with bin/kix: the binary under test, for the build that
/// prints the admission policy.
fn kix_package(dir: &Path) -> PathBuf {
    let package = dir.join("kix-package");
    std::fs::create_dir_all(package.join("bin")).expect("mkdir");
    std::os::unix::fs::symlink(common::kix_bin(), package.join("bin/kix")).expect("symlink");
    package
}

fn read(path: &str, file: &str) -> String {
    std::fs::read_to_string(Path::new(path).join(file))
        .unwrap_or_else(|e| panic!("{path}/{file}: {e}"))
}

fn nix_build(file: &Path) -> String {
    let out = Command::new("nix-build")
        .args(["--no-out-link", "--option", "substituters", ""])
        .arg(file)
        .output()
        .expect("nix runs");
    assert!(
        out.status.success(),
        "nix build {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .trim()
        .to_owned()
}

/// A volume for the store's claim: the test control plane has no
/// provisioner, so the PersistentVolume controller binds it to this one.
async fn create_volume(client: &Client, name: &str) {
    let volume: PersistentVolume = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": name,
            "persistentVolumeReclaimPolicy": "Delete",
            "hostPath": {"path": format!("/tmp/{name}")},
        }
    }))
    .expect("volume");
    Api::<PersistentVolume>::all(client.clone())
        .create(&PostParams::default(), &volume)
        .await
        .expect("create the PersistentVolume");
}

/// kix-system from an earlier run that was interrupted is gone first.
async fn wait_until_gone(client: &Client) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    poll(
        "namespace kix-system gone",
        Duration::from_secs(120),
        Duration::from_secs(1),
        || {
            let namespaces = namespaces.clone();
            async move {
                match namespaces.get_opt("kix-system").await.expect("get") {
                    None => Some(()),
                    Some(_) => None,
                }
            }
        },
    )
    .await;
}

/// Deletes what the install created (and the test's volume and records).
async fn clean_up(client: &Client, cluster: &str, volume: &str) {
    let dp = DeleteParams::default();
    for (kind, name) in [
        ("clusterrolebinding", "kix-operator"),
        ("clusterrole", "kix-operator"),
        ("clusterrolebinding", "kix-operator-apply"),
        ("clusterrole", "kix-operator-apply"),
        ("namespace", "kix-system"),
    ] {
        let _ = kix_testkit::kubectl_output(&["delete", kind, name, "--ignore-not-found"]);
    }
    let selector = format!("kix.run/cluster={cluster}");
    let _ = kix_testkit::kubectl_output(&[
        "delete",
        "activations.kix.run,packageinstances.kix.run",
        "-l",
        &selector,
        "--ignore-not-found",
    ]);
    let _ = Api::<PersistentVolume>::all(client.clone())
        .delete(volume, &dp)
        .await;
}

fn assert_deployment(deployment: &Deployment) {
    let spec = deployment.spec.as_ref().expect("spec");
    assert_eq!(spec.replicas, Some(2), "two replicas");
    let pod = spec.template.spec.as_ref().expect("pod spec");
    assert_eq!(pod.service_account_name.as_deref(), Some("kix-operator"));
    let container = &pod.containers[0];
    assert_eq!(container.image.as_deref(), Some(IMAGE));
    let args = container.args.clone().unwrap_or_default();
    for arg in [
        "--store=local?root=/var/lib/kix",
        "--lease-namespace=kix-system",
        "--leader-lease=kix-operator",
        &format!("--substituter={CACHE}"),
        &format!("--trusted-public-key={CACHE_KEY}"),
    ] {
        assert!(args.iter().any(|a| a == arg), "{arg} in {args:?}");
    }
    let path = |probe: &Option<k8s_openapi::api::core::v1::Probe>| {
        probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .and_then(|h| h.path.clone())
    };
    assert_eq!(path(&container.liveness_probe).as_deref(), Some("/healthz"));
    assert_eq!(path(&container.readiness_probe).as_deref(), Some("/readyz"));
    let mounts = container.volume_mounts.clone().unwrap_or_default();
    assert!(
        mounts.iter().any(|m| m.mount_path == "/var/lib/kix"),
        "the store's volume at /var/lib/kix: {mounts:?}"
    );
    // No host store, no daemon socket.
    let volumes = pod.volumes.clone().unwrap_or_default();
    assert!(volumes.iter().all(|v| v.host_path.is_none()), "{volumes:?}");
}

/// The replicas' nodes: each a KWOK node, one node for both (the store's
/// ReadWriteOnce volume).
async fn assert_pods_on_kwok(client: &Client, cluster: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "kix-system");
    let selector = format!("app.kubernetes.io/instance={cluster}");
    let nodes: Vec<String> = poll(
        "two scheduled kix-operator pods",
        Duration::from_secs(60),
        Duration::from_secs(1),
        || {
            let pods = pods.clone();
            let selector = selector.clone();
            async move {
                let list = pods
                    .list(&ListParams::default().labels(&selector))
                    .await
                    .ok()?;
                let nodes: Vec<String> = list
                    .items
                    .iter()
                    .filter_map(|p| p.spec.as_ref()?.node_name.clone())
                    .collect();
                (nodes.len() == 2).then_some(nodes)
            }
        },
    )
    .await;
    let node_api: Api<Node> = Api::all(client.clone());
    for node in &nodes {
        let labels = node_api.get(node).await.expect("node").metadata.labels;
        assert_eq!(
            labels.unwrap_or_default().get("type").map(String::as_str),
            Some("kwok"),
            "pod on {node}, a KWOK node"
        );
    }
    assert_eq!(nodes[0], nodes[1], "both replicas on the store's node");
}

async fn check_deployed(client: Client, cluster: String, deploy: Run) {
    assert_eq!(deploy.code, Some(0), "{deploy}");
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "kix-system");
    let claim = claims
        .get("kix-operator-store")
        .await
        .expect("the store's claim");
    let phase = claim.status.and_then(|s| s.phase);
    assert_eq!(phase.as_deref(), Some("Bound"), "the store's claim");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "kix-system");
    assert_deployment(&deployments.get("kix-operator").await.expect("deployment"));
    assert_pods_on_kwok(&client, &cluster).await;
    operator_runs_as_installed(&client, &cluster).await;
}

/// The real operator, with the Deployment's arguments (the store under a
/// scratch directory instead of /var/lib/kix, a free port) and the
/// install's ServiceAccount's rights, becomes ready and holds the leader
/// Lease in kix-system: the manifests' flags are the binary's and the RBAC
/// is enough. It manages only a Kix cluster nobody else uses.
async fn operator_runs_as_installed(client: &Client, cluster: &str) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "kix-system");
    let deployment = deployments.get("kix-operator").await.expect("deployment");
    let container = &deployment
        .spec
        .expect("spec")
        .template
        .spec
        .expect("pod")
        .containers[0];
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    let args: Vec<String> = container
        .args
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|a| match a.as_str() {
            "--store=local?root=/var/lib/kix" => format!("--store=local?root={}", store.display()),
            "--metrics-addr=0.0.0.0:8080" => format!("--metrics-addr={port}"),
            _ => a,
        })
        .collect();
    let kubeconfig = kix_testkit::kubeconfig_for_user(
        "system:serviceaccount:kix-system:kix-operator",
        dir.path(),
    )
    .expect("the ServiceAccount's kubeconfig");
    let log = dir.path().join("operator.log");
    let mut child = Command::new(common::operator_bin())
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--cluster", &format!("{cluster}-none")])
        .args(&args)
        .env("POD_NAME", "install-test-replica")
        .env("KIX_LOG", "info")
        .stdin(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("start kix-operator");
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), "kix-system");
    let holder = poll(
        "the leader Lease kix-system/kix-operator held",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || {
            let leases = leases.clone();
            async move {
                let lease = leases.get_opt("kix-operator").await.ok()??;
                lease.spec?.holder_identity
            }
        },
    )
    .await;
    let ready = readyz(port);
    let _ = child.kill();
    let _ = child.wait();
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(holder, "install-test-replica", "{log}");
    assert!(ready.contains("200"), "/readyz: {ready}\n{log}");
    assert!(!log.contains("forbidden"), "{log}");
}

/// The status line of GET /readyz, polled up to 30 s.
fn readyz(addr: std::net::SocketAddr) -> String {
    use std::io::{Read, Write};
    let mut last = String::new();
    for _ in 0..60 {
        if let Ok(mut socket) = std::net::TcpStream::connect(addr) {
            let _ = socket.write_all(b"GET /readyz HTTP/1.0\r\n\r\n");
            let mut response = String::new();
            let _ = socket.read_to_string(&mut response);
            last = response.lines().next().unwrap_or_default().to_owned();
            if last.contains("200") {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    last
}

#[tokio::test]
async fn the_in_cluster_install_validates_and_deploys() {
    let env = TestEnv::new("install").await.expect("control plane");
    let cluster = env.cluster.clone();
    let volume = kix_testkit::unique_name("kix-install-store");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = nix_build(&install_file(dir.path(), &cluster, &volume));

    let validate = run(Command::new(common::kix_bin()).args(["validate", "--path", &path]));
    assert_eq!(validate.code, Some(0), "{validate}");
    assert!(validate.stdout.contains("valid"), "{validate}");

    wait_until_gone(&env.client).await;
    create_volume(&env.client, &volume).await;
    let gcroots = dir.path().join("gcroots");
    let deploy: Run = run(
        common::kix(&kix_testkit::kubeconfig_path(), &gcroots).args([
            "deploy",
            &cluster,
            "--path",
            &path,
            "--yes",
            "--timeout",
            "120s",
        ]),
    );
    // Checked on a task of its own, so a failure still cleans up.
    let outcome = tokio::spawn(check_deployed(env.client.clone(), cluster.clone(), deploy)).await;
    clean_up(&env.client, &cluster, &volume).await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic.into_panic());
    }
}

/// With `tenants` the install carries the admission policy `kix crds
/// --tenants` prints, impersonation of the tenant's account by name, Leases
/// in its namespace, and `--require-service-account`; it validates.
#[test]
fn the_install_with_tenants_has_the_admission_policy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = kix_testkit::unique_name("kix-install-tenants");
    let lets = r#"tenants = kix.lib.mkTenants {
    inherit pkgs;
    platform.users = [ "system:serviceaccount:kix-system:kix-operator" ];
    clusters.team-a = { groups = [ "team-a" ]; serviceAccount = { namespace = "team-a"; name = "kix"; }; };
  };"#;
    let more = format!(
        "inherit tenants;\n  kix = \"{}\";",
        kix_package(dir.path()).display()
    );
    let path = nix_build(&nix_file(dir.path(), &cluster, lets, &more));

    let validate = run(Command::new(common::kix_bin()).args(["validate", "--path", &path]));
    assert_eq!(validate.code, Some(0), "{validate}");
    let kix_json: serde_json::Value = serde_json::from_str(&read(&path, "kix.json")).expect("json");
    assert_eq!(
        kix_json["packages"],
        serde_json::json!(["rbac", "tenants", "operator"])
    );
    let policy = read(
        &path,
        "packages/tenants/resources/manifests/000-kix-tenants-policy.yaml",
    );
    assert!(
        policy.contains("kind: ValidatingAdmissionPolicyBinding") && policy.contains("team-a"),
        "{policy}"
    );
    let rbac: Vec<String> = std::fs::read_dir(Path::new(&path).join("packages/rbac/resources"))
        .expect("rbac resources")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    let file = |suffix: &str| {
        let name = rbac.iter().find(|n| n.ends_with(suffix));
        let name = name.unwrap_or_else(|| panic!("{suffix} in {rbac:?}"));
        read(&path, &format!("packages/rbac/resources/{name}"))
    };
    let impersonate = file("-role-kix-operator-impersonate.json");
    assert!(
        impersonate.contains(r#""resourceNames":["kix"]"#)
            && impersonate.contains(r#""namespace":"team-a""#),
        "{impersonate}"
    );
    file("-role-kix-tenant-leases.json");
    // As the module's tenantsOnly: the operator reads, the tenants write.
    assert!(
        !rbac.iter().any(|n| n.contains("kix-operator-apply")),
        "{rbac:?}"
    );
    let read_role = file("-clusterrole-kix-operator-read.json");
    assert!(
        read_role.contains(r#""verbs":["get","list","watch"]"#),
        "{read_role}"
    );
    let deployment = read(
        &path,
        "packages/operator/resources/001-deployment-kix-operator.json",
    );
    assert!(
        deployment.contains("--require-service-account"),
        "{deployment}"
    );
}

/// A cache without a key to trust it under is refused at evaluation, as
/// the operator would refuse `--substituter` without `--trusted-public-key`.
#[test]
fn substituters_without_keys_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = nix_file(
        dir.path(),
        "kix-operator",
        "",
        &format!(r#"substituters = [ "{CACHE}" ];"#),
    );
    let out = Command::new("nix-instantiate")
        .arg(&file)
        .output()
        .expect("nix-instantiate runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("kix.lib.mkOperatorInstall: substituters need trustedPublicKeys"),
        "{stderr}"
    );
}

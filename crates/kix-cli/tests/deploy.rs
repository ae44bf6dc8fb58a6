//! `kix plan` and `kix deploy` end to end: the real `kix` binary against the
//! real control plane (`checks/control-plane up`), builds given with `--path`
//! as plain directories (added to the Nix store by kix).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use kix_api::{Activation, Phase};
use kix_testkit::TestEnv;
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};

/// The `kix` binary with the control plane's kubeconfig, GC roots in a
/// scratch directory, stdin not a terminal.
fn kix(gcroots: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kix"));
    cmd.env_remove("KIX_LOG")
        .env("KUBECONFIG", kix_testkit::kubeconfig_path())
        .env("KIX_GCROOTS_DIR", gcroots)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    cmd
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\nstdout:\n{}\nstderr:\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

fn run(cmd: &mut Command) -> Run {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().expect("kix runs");
    Run {
        code: status.code(),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

/// One test: its namespace and Kix cluster, a scratch directory for trees
/// and GC roots.
struct Cli {
    env: TestEnv,
    scratch: tempfile::TempDir,
    trees: usize,
}

impl Cli {
    async fn new(name: &str) -> Cli {
        Cli {
            env: TestEnv::new(name).await.expect("control plane"),
            scratch: tempfile::tempdir().expect("tempdir"),
            trees: 0,
        }
    }

    fn gcroots(&self) -> PathBuf {
        self.scratch.path().join("gcroots")
    }

    /// Writes a one-package tree holding `resources`; returns its directory.
    fn tree(&mut self, resources: &[Value]) -> PathBuf {
        self.trees += 1;
        let root = self
            .scratch
            .path()
            .join(format!("tree{}", self.trees))
            .join("build");
        let pkg = root.join("packages/app");
        std::fs::create_dir_all(pkg.join("resources")).expect("mkdir");
        std::fs::write(
            root.join("kix.json"),
            json!({"format": 1, "cluster": self.env.cluster, "packages": ["app"], "settings": {}})
                .to_string(),
        )
        .expect("kix.json");
        std::fs::write(
            pkg.join("package.json"),
            json!({"name": "app", "version": "1.0.0", "dependsOn": [],
                   "namespace": self.env.namespace, "migrations": []})
            .to_string(),
        )
        .expect("package.json");
        for (i, r) in resources.iter().enumerate() {
            std::fs::write(pkg.join(format!("resources/{i:04}.json")), r.to_string())
                .expect("resource");
        }
        root
    }

    fn cmd(&self, verb: &str, tree: &Path, extra: &[&str]) -> Command {
        let mut cmd = kix(&self.gcroots());
        cmd.arg(verb)
            .arg(&self.env.cluster)
            .arg("--path")
            .arg(tree)
            .args(extra);
        cmd
    }

    fn plan(&self, tree: &Path, extra: &[&str]) -> Run {
        run(&mut self.cmd("plan", tree, extra))
    }

    fn deploy(&self, tree: &Path, extra: &[&str]) -> Run {
        run(&mut self.cmd("deploy", tree, extra))
    }

    fn spawn_deploy(&self, tree: &Path, extra: &[&str]) -> Child {
        let log =
            |name: &str| std::fs::File::create(self.scratch.path().join(name)).expect("log file");
        self.cmd("deploy", tree, extra)
            .stdout(log("spawned.stdout"))
            .stderr(log("spawned.stderr"))
            .spawn()
            .expect("spawn kix")
    }

    async fn records(&self) -> Vec<Activation> {
        let api: Api<Activation> = Api::all(self.env.client.clone());
        let mut items = match api
            .list(
                &ListParams::default()
                    .labels(&kix_api::labels::cluster_selector(&self.env.cluster)),
            )
            .await
        {
            Ok(list) => list.items,
            Err(kube::Error::Api(s)) if s.code == 404 => vec![],
            Err(e) => panic!("listing activations: {e}"),
        };
        items.sort_by_key(|r| r.sequence().unwrap_or(0));
        items
    }

    fn configmaps(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.env.client.clone(), &self.env.namespace, &cm_resource())
    }

    async fn cm(&self, name: &str) -> Option<Value> {
        self.configmaps()
            .get_opt(name)
            .await
            .expect("get configmap")
            .map(|o| serde_json::to_value(o).expect("json"))
    }

    /// Names of the ConfigMaps kix manages in the namespace.
    async fn managed_cms(&self) -> Vec<String> {
        self.configmaps()
            .list_metadata(&ListParams::default().labels("app.kubernetes.io/managed-by=kix"))
            .await
            .expect("list")
            .items
            .into_iter()
            .filter_map(|m| m.metadata.name)
            .collect()
    }

    async fn cleanup(self) {
        let api: Api<Activation> = Api::all(self.env.client.clone());
        let _ = api
            .delete_collection(
                &Default::default(),
                &ListParams::default()
                    .labels(&kix_api::labels::cluster_selector(&self.env.cluster)),
            )
            .await;
        let _ = kix_testkit::delete_namespace(&self.env.client, &self.env.namespace).await;
    }
}

fn cm_resource() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&())
}

fn configmap(name: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": value}})
}

/// A Deployment; `available: false` never becomes Available (no node
/// matches); `min_ready` delays Available by that many seconds.
fn deployment(name: &str, available: bool, min_ready: u32) -> Value {
    let mut pod = json!({
        "containers": [{"name": "main", "image": "example.invalid/app:1"}],
    });
    if !available {
        pod["nodeSelector"] = json!({"kix.run/test-no-such-node": "true"});
    }
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": 1, "minReadySeconds": min_ready,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod}}})
}

async fn poll<T, F, Fut>(what: &str, timeout: Duration, every: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(every).await;
    }
}

#[tokio::test]
async fn deploy_without_yes_on_a_non_terminal_changes_nothing() {
    let mut cli = Cli::new("cli-confirm").await;
    let tree = cli.tree(&[configmap("cfg", "1")]);
    let out = cli.deploy(&tree, &[]);
    assert_eq!(out.code, Some(1), "{out}");
    assert!(out.stderr.contains("--yes"), "{out}");
    assert!(out.stderr.contains("not a terminal"), "{out}");
    assert!(cli.records().await.is_empty(), "no record created");
    assert!(cli.cm("cfg").await.is_none(), "nothing applied");

    // --dry-run is the plan: exit 0, nothing changed.
    let out = cli.deploy(&tree, &["--dry-run"]);
    assert_eq!(out.code, Some(0), "{out}");
    assert!(out.stdout.contains("cfg"), "the plan is printed: {out}");
    assert!(cli.records().await.is_empty());
    assert!(cli.cm("cfg").await.is_none());

    let out = cli.deploy(&tree, &["--yes"]);
    assert_eq!(out.code, Some(0), "{out}");
    assert_eq!(cli.cm("cfg").await.expect("applied")["data"]["k"], "1");
    let records = cli.records().await;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].phase(), Some(Phase::Active));
    assert!(
        records[0].spec.source.path.starts_with("/nix/store/"),
        "the plain directory was added to the store: {}",
        records[0].spec.source.path
    );

    // Without --yes but with nothing to do: no question, exit 0.
    let out = cli.deploy(&tree, &[]);
    assert_eq!(out.code, Some(0), "{out}");
    assert_eq!(cli.records().await.len(), 1);
    cli.cleanup().await;
}

#[tokio::test]
async fn plan_json_and_exit_code() {
    let mut cli = Cli::new("cli-plan").await;
    let secret_value = "cli-plaintext-secret-value";
    let tree = cli.tree(&[
        configmap("cfg", "1"),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"},
               "stringData": {"password": secret_value}}),
    ]);
    let out = cli.plan(&tree, &["--output", "json"]);
    assert_eq!(out.code, Some(0), "{out}");
    let plan: Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(plan["cluster"], cli.env.cluster.as_str());
    let objects = plan["packages"][0]["objects"].as_array().expect("objects");
    let actions: Vec<(&str, &str)> = objects
        .iter()
        .map(|o| {
            (
                o["key"]["name"].as_str().unwrap_or_default(),
                o["action"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert!(actions.contains(&("cfg", "create")), "{actions:?}");
    assert!(actions.contains(&("creds", "create")), "{actions:?}");

    let out = cli.plan(&tree, &["--exit-code"]);
    assert_eq!(out.code, Some(3), "changes: exit 3\n{out}");
    assert!(cli.records().await.is_empty(), "plan changes nothing");

    assert_eq!(cli.deploy(&tree, &["--yes"]).code, Some(0));
    let out = cli.plan(&tree, &["--exit-code"]);
    assert_eq!(out.code, Some(0), "no changes: exit 0\n{out}");

    // A changed Secret: the text and JSON plans never show its value.
    let changed = cli.tree(&[
        configmap("cfg", "2"),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"},
               "stringData": {"password": format!("{secret_value}-new")}}),
    ]);
    let text = cli.plan(&changed, &["--exit-code"]);
    assert_eq!(text.code, Some(3), "{text}");
    let json_out = cli.plan(&changed, &["--output", "json"]);
    assert_eq!(json_out.code, Some(0), "{json_out}");
    for out in [&text, &json_out] {
        assert!(!out.stdout.contains(secret_value), "{out}");
        assert!(
            !out.stdout.contains("Y2xpLXBsYWludGV4dC1zZWNyZXQtdmFsdWU"),
            "{out}"
        );
        assert!(out.stdout.contains("creds"), "{out}");
    }
    assert!(
        text.stdout.contains("data.k"),
        "field-level diff shown: {text}"
    );
    cli.cleanup().await;
}

#[tokio::test]
async fn deploy_exits_0_on_success_and_1_at_the_timeout() {
    let mut cli = Cli::new("cli-timeout").await;
    let good = cli.tree(&[configmap("cfg", "1"), deployment("web", true, 0)]);
    let out = cli.deploy(&good, &["--yes"]);
    assert_eq!(out.code, Some(0), "{out}");

    let bad = cli.tree(&[configmap("cfg", "2"), deployment("stuck", false, 0)]);
    let started = Instant::now();
    let out = cli.deploy(&bad, &["--yes", "--timeout", "3s"]);
    assert_eq!(out.code, Some(1), "{out}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    let all = format!("{}{}", out.stdout, out.stderr);
    assert!(all.contains("stuck"), "the object is named: {out}");
    let records = cli.records().await;
    assert_eq!(
        records.last().and_then(Activation::phase),
        Some(Phase::Failed)
    );
    assert!(
        records.iter().all(|r| r.phase() != Some(Phase::Applying)),
        "no record left Applying"
    );
    cli.cleanup().await;
}

/// Waits until the deploy lease of the cluster is free, then reruns until
/// success; the first rerun must fail naming the killed holder.
async fn rerun_after_kill(cli: &Cli, tree: &Path, killed_pid: u32) -> Run {
    let out = cli.deploy(tree, &["--yes"]);
    assert_eq!(
        out.code,
        Some(1),
        "the dead client's lease is still held: {out}"
    );
    assert!(
        out.stderr.contains("is being deployed by")
            && out.stderr.contains(&format!("pid {killed_pid}")),
        "the holder is named: {out}"
    );
    let started = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let out = cli.deploy(tree, &["--yes"]);
        if out.code == Some(0) {
            return out;
        }
        assert!(out.stderr.contains("is being deployed by"), "{out}");
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the lease of the killed client never expired: {out}"
        );
    }
}

async fn assert_no_record_applying(cli: &Cli) {
    let records = cli.records().await;
    let phases: Vec<_> = records
        .iter()
        .map(|r| (r.metadata.name.clone().unwrap_or_default(), r.phase()))
        .collect();
    assert!(
        records
            .iter()
            .all(|r| !matches!(r.phase(), Some(Phase::Applying | Phase::Pending) | None)),
        "{phases:?}"
    );
    assert_eq!(
        records.last().and_then(Activation::phase),
        Some(Phase::Active),
        "{phases:?}"
    );
}

#[tokio::test]
async fn killed_during_the_wait_then_rerun_converges() {
    let mut cli = Cli::new("cli-kill-wait").await;
    // Available only 30 s after its Pod is ready: still not Available when the
    // killed client's lease expires, so the rerun must wait for it.
    let tree = cli.tree(&[configmap("cfg", "1"), deployment("slow", true, 30)]);
    let mut child = cli.spawn_deploy(&tree, &["--yes", "--timeout", "2m"]);
    let pid = child.id();
    let deployments: Api<DynamicObject> = Api::namespaced_with(
        cli.env.client.clone(),
        &cli.env.namespace,
        &ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&()),
    );
    poll(
        "the deploy to wait on the Deployment",
        Duration::from_secs(60),
        Duration::from_millis(100),
        || async {
            let applying = cli
                .records()
                .await
                .last()
                .is_some_and(|r| r.phase() == Some(Phase::Applying));
            let applied = deployments.get_opt("slow").await.ok().flatten().is_some();
            (applying && applied).then_some(())
        },
    )
    .await;
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    assert_eq!(
        cli.records().await.last().and_then(Activation::phase),
        Some(Phase::Applying),
        "killed before it settled"
    );

    let out = rerun_after_kill(&cli, &tree, pid).await;
    assert_eq!(out.code, Some(0), "{out}");
    assert_no_record_applying(&cli).await;
    let records = cli.records().await;
    assert_eq!(
        records[0].phase(),
        Some(Phase::Failed),
        "the killed deploy's record"
    );
    assert_eq!(cli.cm("cfg").await.expect("cfg")["data"]["k"], "1");
    let live = deployments.get("slow").await.expect("slow");
    let live = serde_json::to_value(live).expect("json");
    assert!(
        live["status"]["availableReplicas"].as_i64().unwrap_or(0) >= 1,
        "the rerun waited until it was Available: {live:#}"
    );
    cli.cleanup().await;
}

#[tokio::test]
async fn killed_during_apply_then_rerun_converges() {
    let mut cli = Cli::new("cli-kill-apply").await;
    const N: usize = 300;
    let objects: Vec<Value> = (0..N)
        .map(|i| configmap(&format!("cm-{i:03}"), "1"))
        .collect();
    let tree = cli.tree(&objects);
    let mut child = cli.spawn_deploy(&tree, &["--yes", "--concurrency", "1"]);
    let pid = child.id();
    poll(
        "the apply to start",
        Duration::from_secs(60),
        Duration::from_millis(20),
        || async { (cli.managed_cms().await.len() >= 5).then_some(()) },
    )
    .await;
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    let applied = cli.managed_cms().await.len();
    assert!(applied < N, "killed mid-apply ({applied} of {N} applied)");

    let out = rerun_after_kill(&cli, &tree, pid).await;
    assert_eq!(out.code, Some(0), "{out}");
    assert_no_record_applying(&cli).await;
    assert_eq!(
        cli.managed_cms().await.len(),
        N,
        "every object of the build exists"
    );
    // Converged: a plan finds nothing to do.
    let out = cli.plan(&tree, &["--exit-code"]);
    assert_eq!(out.code, Some(0), "{out}");
    cli.cleanup().await;
}

#[tokio::test]
async fn killed_during_prune_then_rerun_converges() {
    let mut cli = Cli::new("cli-kill-prune").await;
    const N: usize = 300;
    let objects: Vec<Value> = (0..N)
        .map(|i| configmap(&format!("cm-{i:03}"), "1"))
        .collect();
    let full = cli.tree(&objects);
    let out = cli.deploy(&full, &["--yes"]);
    assert_eq!(out.code, Some(0), "{out}");

    let small = cli.tree(&[configmap("cm-000", "1"), configmap("extra", "1")]);
    // A mass deletion on purpose: this cluster's deletion budget allows it.
    std::fs::write(
        small.join("kix.json"),
        json!({"format": 1, "cluster": cli.env.cluster, "packages": ["app"],
               "settings": {"deletionBudget": {"percent": 100}}})
        .to_string(),
    )
    .expect("kix.json");
    let mut child = cli.spawn_deploy(&small, &["--yes"]);
    let pid = child.id();
    poll(
        "the prune to start",
        Duration::from_secs(60),
        Duration::from_millis(20),
        || async {
            let n = cli.managed_cms().await.len();
            (n < N).then_some(())
        },
    )
    .await;
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    let left = cli.managed_cms().await.len();
    assert!(left > 2, "killed mid-prune ({left} left)");
    let records = cli.records().await;
    let killed = records.last().expect("record");
    assert_eq!(killed.phase(), Some(Phase::Applying));
    // Recorded before deleting: how many go, and the first few by name.
    let status = killed.status.clone().unwrap_or_default();
    assert_eq!(
        status.pending_prune_count() as usize,
        N - 1,
        "the prune set was recorded before deleting: {status:?}"
    );
    assert_eq!(
        status.pending_prune.len(),
        kix_api::PENDING_PRUNE_LISTED,
        "{status:?}"
    );

    let out = rerun_after_kill(&cli, &small, pid).await;
    assert_eq!(out.code, Some(0), "{out}");
    assert_no_record_applying(&cli).await;
    let mut left = cli.managed_cms().await;
    left.sort();
    assert_eq!(left, ["cm-000", "extra"], "the prune finished");
    let out = cli.plan(&small, &["--exit-code"]);
    assert_eq!(out.code, Some(0), "{out}");
    cli.cleanup().await;
}

//! What the operator tests share: the operator as a process, the `kix`
//! binary beside it, format-1 trees, and waiting on the control plane.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kix_testkit::TestEnv;
use kube::api::Api;

/// A running kix-operator, killed when dropped.
pub struct Operator {
    child: Child,
    pub metrics: u16,
    pub log: PathBuf,
}

impl Operator {
    pub fn start(env: &TestEnv, clusters: &[&str], lease: &str, log_dir: &Path) -> Operator {
        Operator::start_with(env, clusters, lease, log_dir, &[])
    }

    /// `start` with more arguments for the operator.
    pub fn start_with(
        env: &TestEnv,
        clusters: &[&str],
        lease: &str,
        log_dir: &Path,
        extra: &[&str],
    ) -> Operator {
        ensure_crds();
        let metrics = free_port();
        let log = log_dir.join(format!("operator-{metrics}.log"));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kix-operator"));
        cmd.arg("--kubeconfig")
            .arg(kix_testkit::kubeconfig_path())
            .args(["--metrics-addr", &format!("127.0.0.1:{metrics}")])
            .args(["--leader-lease", lease, "--lease-namespace", &env.namespace])
            .args([
                "--leader-lease-seconds",
                "4",
                "--resync-interval",
                "30s",
                "--log-format",
                "json",
            ])
            .env("KIX_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"));
        for c in clusters {
            cmd.args(["--cluster", c]);
        }
        cmd.args(extra);
        Operator {
            child: cmd.spawn().expect("start kix-operator"),
            metrics,
            log,
        }
    }

    pub fn metric(&self, name: &str) -> Option<f64> {
        let out = Command::new("curl")
            .args(["-sf", &format!("http://127.0.0.1:{}/metrics", self.metrics)])
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "---- operator log {} ----\n{}",
                self.log.display(),
                self.log()
            );
        }
        self.kill();
    }
}

/// kix's CRDs, installed as `kix deploy` installs them (once per test
/// binary): the operator and the `--operator` commands need them, and a
/// fresh control plane has none. Run on a thread of its own, since the
/// tests call `Operator::start` from inside their runtime.
fn ensure_crds() {
    static DONE: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    DONE.get_or_init(|| {
        std::thread::spawn(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async {
                let client = kix_testkit::client().await.expect("client");
                let state = kix_engine::records::crds_status(&client)
                    .await
                    .expect("reading kix's CRDs");
                if state != kix_engine::records::CrdState::Current {
                    kix_engine::records::install_crds(&client)
                        .await
                        .expect("installing kix's CRDs");
                }
            });
        })
        .join()
        .expect("installing kix's CRDs");
    });
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// A format-1 tree with one package `web` holding `yaml`, in a fresh temp dir.
pub fn tree(dir: &Path, cluster: &str, namespace: &str, yaml: &str) -> PathBuf {
    let root = dir.join(format!("tree-{}", kix_testkit::unique_name("t")));
    std::fs::create_dir_all(root.join("packages/web/resources")).expect("mkdir");
    std::fs::write(
        root.join("kix.json"),
        serde_json::json!({"format": 1, "cluster": cluster, "packages": ["web"], "settings": {}})
            .to_string(),
    )
    .expect("kix.json");
    std::fs::write(
        root.join("packages/web/package.json"),
        serde_json::json!({"name": "web", "version": "1", "dependsOn": [], "namespace": namespace, "migrations": []})
            .to_string(),
    )
    .expect("package.json");
    std::fs::write(root.join("packages/web/resources/objects.yaml"), yaml).expect("yaml");
    root
}

/// The `kix` binary beside `kix-operator` (`cargo test --workspace` builds both).
pub fn kix_bin() -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_kix-operator")).with_file_name("kix");
    assert!(
        bin.exists(),
        "{} is missing: build it with `cargo build -p kix-cli`",
        bin.display()
    );
    bin
}

/// `kix <args>` against the test control plane, no terminal.
pub fn kix_command(args: &[&str]) -> Command {
    let mut command = Command::new(kix_bin());
    command
        .args(args)
        .env("KUBECONFIG", kix_testkit::kubeconfig_path())
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    command
}

pub fn kix(args: &[&str]) -> Output {
    kix_command(args).output().expect("run kix")
}

/// `kix deploy <cluster> --path <root> --operator --yes`.
pub fn operator_deploy_command(cluster: &str, root: &Path) -> Command {
    let root = root.to_str().expect("utf8");
    kix_command(&["deploy", cluster, "--path", root, "--operator", "--yes"])
}

pub fn deploy_operator(cluster: &str, root: &Path) -> Output {
    operator_deploy_command(cluster, root)
        .output()
        .expect("run kix deploy")
}

/// The same deploy in the background.
/// A `kix deploy --operator` started in the background; killed when
/// dropped before it was waited for (a failed assertion must not leave it
/// polling for ten minutes).
pub struct BackgroundDeploy(pub Option<Child>);

impl BackgroundDeploy {
    pub fn wait_with_output(mut self) -> std::io::Result<Output> {
        self.0
            .take()
            .expect("not waited for yet")
            .wait_with_output()
    }
}

impl Drop for BackgroundDeploy {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub fn spawn_operator_deploy(cluster: &str, root: &Path) -> BackgroundDeploy {
    let child = operator_deploy_command(cluster, root)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn kix deploy");
    BackgroundDeploy(Some(child))
}

pub fn text(out: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

pub fn configmap(name: &str, value: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: {{value: {value}}}\n"
    )
}

pub async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut check: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while started.elapsed() < timeout {
        if check().await {
            return started.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: not after {timeout:?}");
}

pub async fn cm_value(api: &Api<ConfigMap>, name: &str) -> Option<String> {
    api.get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|c| c.data?.get("value").cloned())
}

pub fn kix_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(kix_bin());
    cmd.args(args)
        .env("KUBECONFIG", kix_testkit::kubeconfig_path())
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run kix")
}

/// Every phase one Activation record is written with, from the moment
/// [`PhaseLog::follow`] is called: a watch from the record's current
/// resourceVersion, so no write in between is missed however short.
pub struct PhaseLog {
    seen: std::sync::Arc<std::sync::Mutex<Vec<Option<kix_api::Phase>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl PhaseLog {
    pub async fn follow(records: &Api<kix_api::Activation>, name: &str) -> PhaseLog {
        use futures::StreamExt;
        let version = records
            .get(name)
            .await
            .expect("the record to follow")
            .metadata
            .resource_version
            .expect("resourceVersion");
        let params = kube::api::WatchParams::default().fields(&format!("metadata.name={name}"));
        let mut stream = records
            .watch(&params, &version)
            .await
            .expect("watch the record")
            .boxed();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        let task = tokio::spawn(async move {
            while let Some(event) = stream.next().await {
                if let Ok(kube::api::WatchEvent::Modified(record)) = event {
                    log.lock().expect("log").push(record.phase());
                }
            }
        });
        PhaseLog { seen, task }
    }

    /// The phases seen, in order.
    pub fn stop(self) -> Vec<Option<kix_api::Phase>> {
        self.task.abort();
        self.seen.lock().expect("log").clone()
    }
}

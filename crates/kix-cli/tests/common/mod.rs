//! Shared by the fault and hostile-input tests (`faults.rs`, `hostile.rs`):
//! the real `kix` and `kix-operator` binaries against a control plane (the
//! shared one of `checks/control-plane up`, or a private one a test starts
//! and stops itself), manifest trees added to the Nix store, the audit log
//! read per user, a seeded RNG.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use kix_api::{Activation, Phase};
use kube::api::{Api, DynamicObject, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::discovery::ApiResource;
use kube::{Client, Config};
use serde_json::Value;

pub mod nix_cache;
pub mod sops;
pub mod tenancy;

/// What a finished command printed.
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\nstdout:\n{}\nstderr:\n{}",
            self.code,
            tail(&self.stdout, 3000),
            self.stderr
        )
    }
}

impl From<Output> for Run {
    fn from(out: Output) -> Run {
        Run {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// The last `n` bytes of `text` (whole characters).
pub fn tail(text: &str, n: usize) -> &str {
    let mut start = text.len().saturating_sub(n);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// The most specific line of an error report: the last `caused by:` line,
/// else the first line that starts with `error`, else the last line.
pub fn error_line(text: &str) -> String {
    if let Some(cause) = text
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("caused by:"))
    {
        return cause.trim().to_string();
    }
    text.lines()
        .find(|l| l.trim_start().starts_with("error"))
        .or_else(|| text.lines().rev().find(|l| !l.trim().is_empty()))
        .unwrap_or_default()
        .trim()
        .to_string()
}

pub fn kix_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_kix"))
}

/// `kix-operator`, built beside `kix` by `cargo test --workspace` (or
/// `cargo build -p kix-operator`).
pub fn operator_bin() -> PathBuf {
    let bin = kix_bin().with_file_name("kix-operator");
    assert!(
        bin.exists(),
        "{} is missing: build it with `cargo build -p kix-operator` (checks/test builds the whole workspace)",
        bin.display()
    );
    bin
}

/// `kix` against `kubeconfig`, GC roots under `gcroots`, stdin not a
/// terminal, the short deploy Lease of the fault tests.
pub fn kix(kubeconfig: &Path, gcroots: &Path) -> Command {
    let mut cmd = Command::new(kix_bin());
    cmd.env_remove("KIX_LOG")
        .env("KUBECONFIG", kubeconfig)
        .env("KIX_GCROOTS_DIR", gcroots)
        .env("KIX_OFFLINE", "true")
        .env("KIX_LEASE_SECONDS", LEASE_SECONDS.to_string())
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    cmd
}

/// The deploy Lease duration the fault tests give `kix` (`KIX_LEASE_SECONDS`).
pub const LEASE_SECONDS: u64 = 3;

pub fn run(cmd: &mut Command) -> Run {
    cmd.output().expect("the command runs").into()
}

/// Polls `check` every `every` until it returns `Some`, or panics after
/// `timeout` naming `what`.
pub async fn poll<T, F, Fut>(what: &str, timeout: Duration, every: Duration, mut check: F) -> T
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

/// xorshift64*: a small seeded RNG, so a failing sequence of faults can be
/// replayed (`KIX_FAULT_SEED`).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..=max`.
    pub fn upto(&mut self, max: u64) -> u64 {
        self.next() % (max + 1)
    }

    pub fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
}

/// A client for the control plane whose admin kubeconfig is `kubeconfig`.
pub async fn client_for(kubeconfig: &Path) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig");
    Client::try_from(config).expect("client")
}

#[allow(unused_imports)]
pub use kix_testkit::PrivateControlPlane;

/// `nix-store --add <dir>`: the store path of a tree.
pub fn add_to_store(dir: &Path) -> String {
    let out = run(Command::new("nix-store").arg("--add").arg(dir));
    assert_eq!(
        out.code,
        Some(0),
        "nix-store --add {}: {out}",
        dir.display()
    );
    out.stdout.trim().to_string()
}

/// One package of a tree: name, dependencies, namespace, resource files.
pub struct Pkg {
    pub name: String,
    pub depends_on: Vec<String>,
    pub namespace: String,
    pub files: Vec<(String, Vec<u8>)>,
}

/// Writes a format-1 tree for Kix cluster `cluster` at `root`.
pub fn write_tree(root: &Path, cluster: &str, packages: &[Pkg]) {
    let names: Vec<&str> = packages.iter().map(|p| p.name.as_str()).collect();
    std::fs::create_dir_all(root).expect("mkdir");
    std::fs::write(
        root.join("kix.json"),
        serde_json::json!({"format": 1, "cluster": cluster, "packages": names, "settings": {}})
            .to_string(),
    )
    .expect("kix.json");
    for p in packages {
        let dir = root.join("packages").join(&p.name);
        std::fs::create_dir_all(dir.join("resources")).expect("mkdir");
        std::fs::write(
            dir.join("package.json"),
            serde_json::json!({"name": p.name, "version": "1", "dependsOn": p.depends_on,
                               "namespace": p.namespace, "migrations": []})
            .to_string(),
        )
        .expect("package.json");
        for (name, bytes) in &p.files {
            std::fs::write(dir.join("resources").join(name), bytes).expect("resource");
        }
    }
}

/// The records of Kix cluster `cluster`, oldest first.
pub async fn records(client: &Client, cluster: &str) -> Vec<Activation> {
    let api: Api<Activation> = Api::all(client.clone());
    let mut items = match api
        .list(&ListParams::default().labels(&kix_api::labels::cluster_selector(cluster)))
        .await
    {
        Ok(list) => list.items,
        Err(kube::Error::Api(s)) if s.code == 404 => vec![],
        Err(e) => panic!("listing activations: {e}"),
    };
    items.sort_by_key(|r| r.sequence().unwrap_or(0));
    items
}

/// `name: phase` of each record, for messages.
pub fn phases(records: &[Activation]) -> String {
    records
        .iter()
        .map(|r| {
            format!(
                "{}: {}",
                r.metadata.name.as_deref().unwrap_or("?"),
                r.phase().map(|p| p.as_str()).unwrap_or("-")
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// No record left Pending or Applying (or without a phase), and the newest
/// one is Active.
pub fn assert_settled(records: &[Activation], context: &str) {
    let unsettled: Vec<&Activation> = records
        .iter()
        .filter(|r| matches!(r.phase(), None | Some(Phase::Pending | Phase::Applying)))
        .collect();
    assert!(
        unsettled.is_empty(),
        "{context}: records left unsettled: {}",
        phases(records)
    );
    assert_eq!(
        records.last().and_then(Activation::phase),
        Some(Phase::Active),
        "{context}: the newest record is not Active: {}",
        phases(records)
    );
}

/// What a build should look like live: per `Kind/name`, the digest
/// annotation and the manifest kix applies (computed by the engine itself).
pub struct Expected {
    pub objects: BTreeMap<String, (String, Value)>,
}

impl Expected {
    pub async fn of(client: &Client, store_path: &str) -> Expected {
        let build =
            kix_manifest::read_tree(Path::new(store_path), &kix_manifest::ReadOptions::default())
                .expect("the build reads");
        let mut resources = kix_engine::resources::Resources::new(client.clone());
        let desired = kix_engine::desired::desired_objects(
            &build,
            &mut resources,
            kix_engine::desired::Shapes::Skipped,
        )
        .await
        .expect("desired objects");
        Expected {
            objects: desired
                .into_iter()
                .map(|d| {
                    (
                        format!("{}/{}", d.key.kind, d.key.name),
                        (d.digest.clone(), d.manifest()),
                    )
                })
                .collect(),
        }
    }
}

pub fn cm_resource() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&())
}

pub fn deployment_resource() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&())
}

/// The ConfigMaps and Deployments kix manages in `namespace`, by `Kind/name`.
pub async fn managed(
    client: &Client,
    namespace: &str,
) -> Result<BTreeMap<String, Value>, kube::Error> {
    let mut out = BTreeMap::new();
    for (kind, resource) in [
        ("ConfigMap", cm_resource()),
        ("Deployment", deployment_resource()),
    ] {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        let list = api
            .list(&ListParams::default().labels("app.kubernetes.io/managed-by=kix"))
            .await?;
        for obj in list.items {
            let name = obj.metadata.name.clone().unwrap_or_default();
            out.insert(
                format!("{kind}/{name}"),
                serde_json::to_value(obj).expect("json"),
            );
        }
    }
    Ok(out)
}

/// Compares the live objects kix manages in `namespace` with `expected`:
/// the same set (nothing missing, nothing that should have been pruned),
/// each with the build's digest annotation, `data` (ConfigMaps) and pod
/// template (Deployments). Returns the differences.
pub async fn differences(client: &Client, namespace: &str, expected: &Expected) -> Vec<String> {
    let live = managed(client, namespace)
        .await
        .expect("listing live objects");
    let mut out = Vec::new();
    for (key, (digest, manifest)) in &expected.objects {
        let Some(obj) = live.get(key) else {
            out.push(format!("{key} missing"));
            continue;
        };
        let annotations = &obj["metadata"]["annotations"];
        if annotations[kix_api::ANNOTATION_DIGEST].as_str() != Some(digest.as_str()) {
            out.push(format!(
                "{key}: digest {} instead of {digest}",
                annotations[kix_api::ANNOTATION_DIGEST]
            ));
        }
        if key.starts_with("ConfigMap/") && obj["data"] != manifest["data"] {
            out.push(format!(
                "{key}: data {} instead of {}",
                obj["data"], manifest["data"]
            ));
        }
        if key.starts_with("Deployment/") {
            let env = |v: &Value| v["spec"]["template"]["spec"]["containers"][0]["env"].clone();
            if env(obj) != env(manifest) {
                out.push(format!(
                    "{key}: env {} instead of {}",
                    env(obj),
                    env(manifest)
                ));
            }
        }
    }
    for key in live.keys() {
        if !expected.objects.contains_key(key) {
            out.push(format!("{key} should have been pruned"));
        }
    }
    out
}

/// Where the apiserver of the control plane in `cp_dir` writes its audit log.
pub fn audit_log(cp_dir: &Path) -> PathBuf {
    cp_dir.join("audit.log")
}

/// The audit log's current length (requests after it are read with
/// [`requests_of`]).
pub fn audit_mark(cp_dir: &Path) -> u64 {
    std::fs::metadata(audit_log(cp_dir))
        .expect("the audit log exists")
        .len()
}

/// One audited request of a user: verb, resource, name, whether a dry-run.
#[derive(Debug)]
pub struct Audited {
    pub verb: String,
    pub resource: String,
    pub name: String,
    pub dry_run: bool,
}

impl Audited {
    /// GET, LIST or WATCH.
    pub fn is_read(&self) -> bool {
        matches!(self.verb.as_str(), "get" | "list" | "watch")
    }

    pub fn is_write(&self) -> bool {
        !self.dry_run
            && matches!(
                self.verb.as_str(),
                "create" | "update" | "patch" | "delete" | "deletecollection"
            )
    }
}

/// The requests `user` made after `mark` (ResponseComplete stage, so each
/// request counts once).
pub fn requests_of(cp_dir: &Path, mark: u64, user: &str) -> Vec<Audited> {
    let mut file = std::fs::File::open(audit_log(cp_dir)).expect("audit log");
    file.seek(SeekFrom::Start(mark)).expect("seek");
    let mut out = Vec::new();
    for line in BufReader::new(file).lines() {
        let Ok(line) = line else { break };
        let Ok(event) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if event["stage"] != "ResponseComplete" || event["user"]["username"] != user {
            continue;
        }
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        out.push(Audited {
            verb: text(&event["verb"]),
            resource: text(&event["objectRef"]["resource"]),
            name: text(&event["objectRef"]["name"]),
            dry_run: text(&event["requestURI"]).contains("dryRun=All"),
        });
    }
    out
}

/// A running `kix-operator` (killed when dropped), its log in a file.
pub struct Operator {
    pub child: Child,
    pub log: PathBuf,
    /// Where it serves /metrics, /healthz and /readyz.
    pub http: std::net::SocketAddr,
}

impl Operator {
    /// Starts the operator for `clusters` against `kubeconfig`, its leader
    /// Lease `lease` in `namespace`; `path_prefix` is put before `$PATH`.
    pub fn start(
        kubeconfig: &Path,
        clusters: &[&str],
        namespace: &str,
        lease: &str,
        log: PathBuf,
        path_prefix: Option<&Path>,
    ) -> Operator {
        Operator::start_with(
            kubeconfig,
            clusters,
            namespace,
            lease,
            log,
            path_prefix,
            &[],
        )
    }

    /// [`Operator::start`] with more of the operator's flags.
    pub fn start_with(
        kubeconfig: &Path,
        clusters: &[&str],
        namespace: &str,
        lease: &str,
        log: PathBuf,
        path_prefix: Option<&Path>,
        flags: &[&str],
    ) -> Operator {
        Operator::start_with_env(
            kubeconfig,
            clusters,
            namespace,
            lease,
            log,
            path_prefix,
            flags,
            &[],
        )
    }

    /// [`Operator::start_with`] with more variables in its environment.
    #[allow(clippy::too_many_arguments)]
    pub fn start_with_env(
        kubeconfig: &Path,
        clusters: &[&str],
        namespace: &str,
        lease: &str,
        log: PathBuf,
        path_prefix: Option<&Path>,
        flags: &[&str],
        env: &[(&str, &str)],
    ) -> Operator {
        let http = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("addr");
        let mut cmd = Command::new(operator_bin());
        cmd.arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--metrics-addr", &http.to_string()])
            .args(["--leader-lease", lease, "--lease-namespace", namespace])
            .args(["--leader-lease-seconds", "4"])
            .env("KIX_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("operator log"));
        if let Some(prefix) = path_prefix {
            let path = std::env::var("PATH").unwrap_or_default();
            cmd.env("PATH", format!("{}:{path}", prefix.display()));
        }
        for c in clusters {
            cmd.args(["--cluster", c]);
        }
        // A test's own --resync-interval replaces the tests' 10s.
        if !flags.contains(&"--resync-interval") {
            cmd.args(["--resync-interval", "10s"]);
        }
        cmd.args(flags).envs(env.iter().copied());
        Operator {
            child: cmd.spawn().expect("start kix-operator"),
            log,
            http,
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its /metrics text.
    pub fn metrics(&self) -> String {
        use std::io::{Read, Write};
        let mut socket = std::net::TcpStream::connect(self.http).expect("connect");
        socket
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        write!(socket, "GET /metrics HTTP/1.0\r\n\r\n").expect("request");
        let mut text = String::new();
        socket.read_to_string(&mut text).expect("response");
        text
    }

    /// GET `path` of its HTTP endpoint: the status line, or why there was
    /// none within `within`.
    pub fn get(&self, path: &str, within: Duration) -> Result<String, String> {
        use std::io::{Read, Write};
        let mut socket = std::net::TcpStream::connect_timeout(&self.http, within)
            .map_err(|e| format!("connecting to {}: {e}", self.http))?;
        socket
            .set_read_timeout(Some(within))
            .map_err(|e| e.to_string())?;
        write!(socket, "GET {path} HTTP/1.0\r\n\r\n").map_err(|e| e.to_string())?;
        let mut response = String::new();
        socket
            .read_to_string(&mut response)
            .map_err(|e| format!("no answer to GET {path} within {within:?}: {e}"))?;
        Ok(response.lines().next().unwrap_or_default().to_owned())
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "---- operator log {} ----\n{}",
                self.log.display(),
                tail(&self.log(), 20_000)
            );
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The spec of an operator record of `cluster` for the build at `path`, as
/// `kix deploy --operator` writes one (the receipt made up).
pub fn operator_spec(cluster: &str, path: &str) -> kix_api::ActivationSpec {
    serde_json::from_value(serde_json::json!({
        "cluster": cluster, "engine": "operator", "source": {"path": path},
        "receipt": {"user": "t", "host": "t", "kixVersion": "0",
                    "time": "2026-01-01T00:00:00Z", "planDigest": "x"}
    }))
    .expect("an operator record's spec")
}

/// A record of `cluster` with `spec`, written as the admin (a platform
/// subject), as a tenant could have written it; its name.
pub async fn write_record(client: &Client, cluster: &str, spec: kix_api::ActivationSpec) -> String {
    let next = records(client, cluster)
        .await
        .iter()
        .filter_map(Activation::sequence)
        .max()
        .unwrap_or(0)
        + 1;
    let api: Api<Activation> = Api::all(client.clone());
    api.create(
        &kube::api::PostParams::default(),
        &Activation::new_record(next, spec),
    )
    .await
    .expect("creating the record");
    Activation::name_for(cluster, next)
}

/// Record `name` once it is Active or in a terminal phase.
pub async fn settled(client: &Client, name: &str) -> Activation {
    let api: Api<Activation> = Api::all(client.clone());
    poll(
        &format!("record {name} to be Active or reach a terminal phase"),
        Duration::from_secs(90),
        Duration::from_millis(200),
        || {
            let api = api.clone();
            async move {
                api.get(name)
                    .await
                    .ok()
                    .filter(|r| r.is_terminal() || r.phase() == Some(Phase::Active))
            }
        },
    )
    .await
}

/// Record `name` once settled, which must be Active (the status shown if not).
pub async fn active(client: &Client, name: &str) -> Activation {
    let record = settled(client, name).await;
    assert_eq!(
        record.phase(),
        Some(Phase::Active),
        "{name}: {:?}",
        record.status
    );
    record
}

//! Shared helpers of the engine's tests against the real control plane
//! (`checks/control-plane up`): manifest trees built from (package, YAML)
//! pairs and added to the Nix store, plan and deploy in one call, a client
//! whose User-Agent names the test so the audit log tells its requests apart
//! from everyone else's, and small readers of live objects.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use kix_api::Activation;
use kix_engine::deploy::{DeployOptions, DeployOutcome};
use kix_engine::lease::LeaseOptions;
use kix_engine::plan::{Plan, PlanOptions};
use kix_engine::{EngineError, Result};
use kix_manifest::{Build, ReadOptions};
use kix_testkit::TestEnv;
use kix_testkit::audit::{self, Mark, Request};
use kube::api::{Api, DynamicObject, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::discovery::ApiResource;
use kube::{Client, Config};
use serde_json::{Value, json};

/// One package of a test build.
#[derive(Clone, Debug)]
pub struct Pkg {
    pub name: String,
    pub depends_on: Vec<String>,
    /// `None`: the test's namespace.
    pub namespace: Option<String>,
    /// Resource files (each one YAML document or several).
    pub resources: Vec<String>,
    /// `handoff` of package.json (fields kix leaves to other managers).
    pub handoff: Vec<Value>,
}

impl Pkg {
    pub fn new(name: &str, resources: &[String]) -> Pkg {
        Pkg {
            name: name.to_string(),
            depends_on: vec![],
            namespace: None,
            resources: resources.to_vec(),
            handoff: vec![],
        }
    }

    pub fn handoff(mut self, rules: &[Value]) -> Pkg {
        self.handoff = rules.to_vec();
        self
    }

    pub fn depends_on(mut self, deps: &[&str]) -> Pkg {
        self.depends_on = deps.iter().map(|d| d.to_string()).collect();
        self
    }
}

/// A build in the Nix store.
#[derive(Clone, Debug)]
pub struct Built {
    pub path: String,
    pub build: Build,
}

/// One test: its [`TestEnv`] plus a client tagged with its own User-Agent.
pub struct Kit {
    pub env: TestEnv,
    /// Sends `User-Agent: <agent>`; every engine call of the test uses it.
    pub client: Client,
    pub agent: String,
    /// Namespaces the builds create (deleted by [`Kit::cleanup`]).
    pub owned_namespaces: Vec<String>,
    pub crds: Vec<String>,
}

/// A client of the control plane that sends `agent` as its User-Agent.
pub async fn tagged_client(agent: &str) -> Client {
    let kubeconfig = Kubeconfig::read_from(kix_testkit::kubeconfig_path())
        .expect("control plane kubeconfig (run checks/control-plane up)");
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig");
    config.headers.push((
        "user-agent".parse().expect("header name"),
        agent.parse().expect("header value"),
    ));
    Client::try_from(config).expect("client")
}

impl Kit {
    pub async fn new(test: &str) -> Kit {
        let env = TestEnv::new(test).await.expect("control plane test env");
        let agent = format!("kix-engine-test/{}", env.namespace);
        let client = tagged_client(&agent).await;
        Kit {
            env,
            client,
            agent,
            owned_namespaces: vec![],
            crds: vec![],
        }
    }

    pub fn ns(&self) -> &str {
        &self.env.namespace
    }

    pub fn cluster(&self) -> &str {
        &self.env.cluster
    }

    /// A namespace name unique to this test, for a Namespace object in a build.
    pub fn extra_ns(&mut self, suffix: &str) -> String {
        let name = format!("{}-{suffix}", self.env.namespace);
        self.owned_namespaces.push(name.clone());
        self.env.extra_namespaces.push(name.clone());
        name
    }

    /// Writes the tree of `packages` for this test's Kix cluster, adds it to
    /// the store and reads it back.
    pub fn build(&self, packages: &[Pkg]) -> Built {
        self.build_for(&self.env.cluster, packages)
    }

    /// The same for another Kix cluster name.
    pub fn build_for(&self, cluster: &str, packages: &[Pkg]) -> Built {
        build_tree(cluster, &self.env.namespace, packages)
    }

    /// One package `a` holding `resources`.
    pub fn simple(&self, resources: &[String]) -> Built {
        self.build(&[Pkg::new("a", resources)])
    }

    /// Default deploy options for tests: the Lease in the test's namespace, a
    /// holder unique to the call, a 60 s health timeout.
    pub fn options(&self) -> DeployOptions {
        DeployOptions {
            timeout: Duration::from_secs(60),
            lease: LeaseOptions {
                namespace: self.env.namespace.clone(),
                ..LeaseOptions::default()
            },
            holder: format!("{} {}", self.agent, kix_testkit::unique_name("holder")),
            ..DeployOptions::default()
        }
    }

    pub async fn plan(&self, built: &Built, options: &PlanOptions) -> Plan {
        try_plan(&self.client, built, options)
            .await
            .unwrap_or_else(|e| panic!("plan: {e}"))
    }

    /// Plan (with the matching plan options) and deploy.
    pub async fn try_deploy(
        &self,
        built: &Built,
        options: &DeployOptions,
    ) -> Result<DeployOutcome> {
        self.try_deploy_with(built, false, options).await
    }

    pub async fn try_deploy_with(
        &self,
        built: &Built,
        reconcile: bool,
        options: &DeployOptions,
    ) -> Result<DeployOutcome> {
        let plan_options = PlanOptions {
            reconcile,
            force_conflicts: options.force_conflicts,
            prune: options.prune,
            ..PlanOptions::default()
        };
        let plan = try_plan(&self.client, built, &plan_options).await?;
        kix_engine::deploy::deploy(&self.client, &built.build, plan, options).await
    }

    /// Deploys and asserts the outcome is Active.
    pub async fn deploy(&self, built: &Built) -> DeployOutcome {
        self.deploy_opts(built, &self.options()).await
    }

    pub async fn deploy_opts(&self, built: &Built, options: &DeployOptions) -> DeployOutcome {
        let outcome = self
            .try_deploy(built, options)
            .await
            .unwrap_or_else(|e| panic!("deploy of {}: {e}", built.path));
        assert_eq!(
            outcome.phase,
            kix_api::Phase::Active,
            "deploy of {}: {outcome:?}",
            built.path
        );
        outcome
    }

    /// The requests this test's client made since `mark`.
    pub fn requests(&self, mark: Mark) -> Vec<Request> {
        audit::since(mark)
            .expect("audit log")
            .into_iter()
            .filter(|r| r.user_agent == self.agent)
            .collect()
    }

    pub fn writes(&self, mark: Mark) -> Vec<Request> {
        self.requests(mark)
            .into_iter()
            .filter(Request::is_write)
            .collect()
    }

    /// This Kix cluster's records, oldest first.
    pub async fn records(&self) -> Vec<Activation> {
        records_of(&self.env.client, &self.env.cluster).await
    }

    pub async fn record(&self, name: &str) -> Activation {
        Api::<Activation>::all(self.env.client.clone())
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("activation {name}: {e}"))
    }

    /// A live object of the test namespace (None when it does not exist).
    pub async fn get(&self, api_version: &str, kind: &str, name: &str) -> Option<Value> {
        get_object(
            &self.env.client,
            api_version,
            kind,
            Some(&self.env.namespace),
            name,
        )
        .await
    }

    pub async fn get_in(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        get_object(&self.env.client, api_version, kind, namespace, name).await
    }

    /// `data.<key>` of a ConfigMap in the test namespace.
    pub async fn cm_value(&self, name: &str, key: &str) -> Option<String> {
        self.get("v1", "ConfigMap", name)
            .await
            .and_then(|cm| cm["data"][key].as_str().map(str::to_string))
    }

    /// Deletes what the test created outside its namespace (namespaces of
    /// builds, CRDs, records, GC roots) and its namespace. Only on success:
    /// a failed test leaves its state for inspection.
    pub async fn cleanup(self) {
        cleanup_cluster(&self.env.client, &self.env.cluster).await;
        for ns in self
            .owned_namespaces
            .iter()
            .chain(std::iter::once(&self.env.namespace))
        {
            let _ = kix_testkit::delete_namespace(&self.env.client, ns).await;
        }
        for crd in &self.crds {
            let api = Api::<DynamicObject>::all_with(
                self.env.client.clone(),
                &resource("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
            );
            let _ = api.delete(crd, &Default::default()).await;
        }
    }
}

/// Deletes the records and GC roots of a Kix cluster.
pub async fn cleanup_cluster(client: &Client, cluster: &str) {
    let api: Api<Activation> = Api::all(client.clone());
    let _ = api
        .delete_collection(
            &Default::default(),
            &ListParams::default().labels(&kix_api::labels::cluster_selector(cluster)),
        )
        .await;
    let _ = std::fs::remove_dir_all(kix_nix::GcRoots::from_env().dir().join(cluster));
}

pub async fn try_plan(client: &Client, built: &Built, options: &PlanOptions) -> Result<Plan> {
    kix_engine::plan::plan(client, &built.build, &built.path, options).await
}

pub async fn records_of(client: &Client, cluster: &str) -> Vec<Activation> {
    let api: Api<Activation> = Api::all(client.clone());
    let mut list = match api
        .list(&ListParams::default().labels(&kix_api::labels::cluster_selector(cluster)))
        .await
    {
        Ok(list) => list.items,
        Err(kube::Error::Api(s)) if s.code == 404 => vec![],
        Err(e) => panic!("listing activations: {e}"),
    };
    list.sort_by_key(|r| r.sequence().unwrap_or(0));
    list
}

/// The ApiResource of a built-in kind or a kind of the given group (plural
/// guessed the usual way: lowercase + s, y → ies).
pub fn resource(api_version: &str, kind: &str) -> ApiResource {
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    let lower = kind.to_ascii_lowercase();
    let plural = if let Some(stem) = lower.strip_suffix('y') {
        format!("{stem}ies")
    } else if lower.ends_with('s') {
        format!("{lower}es")
    } else {
        format!("{lower}s")
    };
    ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk(group, version, kind),
        &plural,
    )
}

pub async fn get_object(
    client: &Client,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) -> Option<Value> {
    let ar = resource(api_version, kind);
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    api.get_opt(name)
        .await
        .unwrap_or_else(|e| panic!("get {kind} {name}: {e}"))
        .map(|o| serde_json::to_value(o).expect("json"))
}

/// Writes a manifest tree for `cluster` into a temporary directory, adds it
/// to the Nix store and reads the store path back.
pub fn build_tree(cluster: &str, default_ns: &str, packages: &[Pkg]) -> Built {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().join("kix-test-build");
    write_tree(&root, cluster, default_ns, packages);
    let path = kix_nix::add_to_store(&root).expect("nix-store --add");
    let build = kix_manifest::read_tree(Path::new(path.as_str()), &ReadOptions::default())
        .unwrap_or_else(|e| panic!("reading {path}: {e}"));
    Built {
        path: path.to_string(),
        build,
    }
}

pub fn write_tree(root: &Path, cluster: &str, default_ns: &str, packages: &[Pkg]) {
    std::fs::create_dir_all(root).expect("mkdir");
    let names: Vec<&str> = packages.iter().map(|p| p.name.as_str()).collect();
    std::fs::write(
        root.join("kix.json"),
        serde_json::to_string_pretty(&json!({
            "format": 1, "cluster": cluster, "packages": names, "settings": {}
        }))
        .expect("json"),
    )
    .expect("write kix.json");
    for p in packages {
        let dir = root.join("packages").join(&p.name);
        std::fs::create_dir_all(dir.join("resources")).expect("mkdir");
        let mut package_json = json!({
            "name": p.name,
            "version": "1.0.0",
            "dependsOn": p.depends_on,
            "namespace": p.namespace.clone().unwrap_or_else(|| default_ns.to_string()),
            "migrations": [],
        });
        if !p.handoff.is_empty() {
            package_json["handoff"] = Value::Array(p.handoff.clone());
        }
        std::fs::write(
            dir.join("package.json"),
            serde_json::to_string_pretty(&package_json).expect("json"),
        )
        .expect("write package.json");
        for (i, yaml) in p.resources.iter().enumerate() {
            std::fs::write(dir.join("resources").join(format!("{i:03}.yaml")), yaml)
                .expect("write resource");
        }
    }
}

// ---- manifests ----

pub fn configmap(name: &str, data: &[(&str, &str)]) -> String {
    let data: BTreeMap<&str, &str> = data.iter().copied().collect();
    yaml(
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}),
    )
}

pub fn configmap_in(ns: &str, name: &str, data: &[(&str, &str)]) -> String {
    let data: BTreeMap<&str, &str> = data.iter().copied().collect();
    yaml(&json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns}, "data": data}))
}

pub fn namespace(name: &str) -> String {
    yaml(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}))
}

/// A Deployment; `available: false` pins it to a node that does not exist,
/// so it never becomes Available.
pub fn deployment(name: &str, available: bool) -> String {
    deployment_with(name, available, &json!({}))
}

/// A Deployment with extra `spec` fields merged in.
pub fn deployment_with(name: &str, available: bool, extra_spec: &Value) -> String {
    let mut pod_spec = json!({
        "containers": [{"name": "main", "image": "example.invalid/app:1"}],
    });
    if !available {
        pod_spec["nodeSelector"] = json!({"kix.run/test-no-such-node": "true"});
    }
    let mut spec = json!({
        "replicas": 1,
        "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec},
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
        for (k, v) in extra {
            spec.insert(k.clone(), v.clone());
        }
    }
    yaml(
        &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name}, "spec": spec}),
    )
}

pub fn yaml(value: &Value) -> String {
    // JSON is YAML.
    serde_json::to_string_pretty(value).expect("json")
}

/// Polls `check` every 200 ms until it returns Some, or panics after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
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
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Index of the first request matching `pred`, for ordering assertions.
pub fn position(requests: &[Request], pred: impl Fn(&Request) -> bool) -> Option<usize> {
    requests.iter().position(pred)
}

pub fn describe(requests: &[Request]) -> String {
    requests
        .iter()
        .map(|r| {
            format!(
                "{} {} {}/{}{}",
                r.verb,
                r.resource,
                r.namespace.as_deref().unwrap_or("-"),
                r.name.as_deref().unwrap_or("-"),
                if r.dry_run { " (dry-run)" } else { "" }
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

pub fn expect_err<T: std::fmt::Debug>(result: Result<T>) -> EngineError {
    match result {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e,
    }
}

/// The spec of a record of Kix cluster `cluster` for the build at `path`, as
/// a local deploy by `user` writes it (for records a test makes itself: a
/// deploy killed midway, a step writing the status).
pub fn record_spec(cluster: &str, path: &str, user: &str) -> kix_api::ActivationSpec {
    kix_api::ActivationSpec {
        cluster: cluster.to_string(),
        source: kix_api::Source {
            path: path.to_string(),
            flake: None,
            revision: None,
            cache: None,
            signed_by: None,
        },
        receipt: kix_api::Receipt {
            user: user.into(),
            host: "nowhere".into(),
            kix_version: "0".into(),
            time: chrono::Utc::now(),
            plan_digest: String::new(),
            counts: Default::default(),
            accepted: Default::default(),
            rollback_from: None,
            accepted_deletions: None,
            saved_plan: false,
        },
        engine: kix_api::Engine::Local,
        service_account: None,
    }
}

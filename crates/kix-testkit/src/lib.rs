//! Test kit: a client for the local control plane that `checks/control-plane up`
//! starts, and isolation per test (its own namespace and Kix cluster name).
//!
//! Tests that need the control plane are ordinary tests: when it is not running
//! they fail with a message saying how to start it, never skip.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

pub mod audit;
pub mod cache_server;
mod private;
pub mod records;

pub use private::PrivateControlPlane;

/// Label on every namespace the kit creates, with the test's name as value.
pub const TEST_LABEL: &str = "kix.run/test";

/// The repository root (the kit lives at crates/kix-testkit).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
}

/// The control plane's state directory: `$KIX_CP_DIR`, else `<repo>/.cp`.
pub fn control_plane_dir() -> PathBuf {
    std::env::var_os("KIX_CP_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".cp"))
}

/// The admin kubeconfig of the local control plane.
pub fn kubeconfig_path() -> PathBuf {
    control_plane_dir().join("admin.kubeconfig")
}

/// A copy of the admin kubeconfig in `dir` with a second context,
/// `unreachable`, whose server nothing listens on, made the current one.
/// Returns its path and the name of the control plane's context.
pub fn kubeconfig_with_unreachable_context(
    dir: &Path,
    unreachable: &str,
) -> Result<(PathBuf, String)> {
    let mut kubeconfig = Kubeconfig::read_from(kubeconfig_path())?;
    let (Some(cluster), Some(context)) = (kubeconfig.clusters.first(), kubeconfig.contexts.first())
    else {
        anyhow::bail!("the admin kubeconfig has no cluster or no context");
    };
    let (mut cluster, mut context) = (cluster.clone(), context.clone());
    let reachable = context.name.clone();
    cluster.name = format!("{unreachable}-cluster");
    if let Some(c) = cluster.cluster.as_mut() {
        c.server = Some("https://127.0.0.1:1".into());
    }
    context.name = unreachable.into();
    if let Some(c) = context.context.as_mut() {
        c.cluster = cluster.name.clone();
    }
    kubeconfig.clusters.push(cluster);
    kubeconfig.contexts.push(context);
    kubeconfig.current_context = Some(unreachable.into());
    let path = dir.join(format!("{unreachable}.kubeconfig"));
    std::fs::write(&path, serde_json::to_string(&kubeconfig)?)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok((path, reachable))
}

/// Where the component logs are, for failure messages.
pub fn logs_dir() -> PathBuf {
    control_plane_dir().join("logs")
}

/// The kubectl built beside the control plane (same version as the apiserver).
pub fn kubectl() -> PathBuf {
    let bin = control_plane_dir().join("bin");
    if bin.join("kubectl").exists() {
        return bin.join("kubectl");
    }
    PathBuf::from("kubectl")
}

/// A client for the local control plane, as its admin.
pub async fn client() -> Result<Client> {
    let path = kubeconfig_path();
    let kubeconfig = Kubeconfig::read_from(&path).with_context(|| {
        format!(
            "no control plane kubeconfig at {}: start it with `checks/control-plane up`",
            path.display()
        )
    })?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .context("loading the control plane kubeconfig")?;
    let client = Client::try_from(config)?;
    client.apiserver_version().await.with_context(|| {
        format!(
            "the control plane at {} does not answer: run `checks/control-plane up` (logs: {})",
            path.display(),
            logs_dir().display()
        )
    })?;
    Ok(client)
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A name unique to this process and call, valid as a namespace and label value.
pub fn unique_name(prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let pid = std::process::id();
    let prefix: String = prefix
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(30)
        .collect();
    format!("{}-{pid:x}-{n}", prefix.trim_matches('-'))
}

/// One test's slice of the control plane: a fresh namespace and a Kix cluster
/// name nobody else uses. When the test panics, the objects involved are
/// printed (namespace contents and the Kix cluster's records) with the path of
/// the component logs.
pub struct TestEnv {
    pub client: Client,
    pub name: String,
    pub namespace: String,
    pub cluster: String,
    /// Extra namespaces the test created, dumped on failure too.
    pub extra_namespaces: Vec<String>,
}

impl TestEnv {
    pub async fn new(test: &str) -> Result<TestEnv> {
        let client = client().await?;
        let namespace = unique_name(test);
        let cluster = unique_name(&format!("c-{test}"));
        create_namespace(&client, &namespace, test).await?;
        Ok(TestEnv {
            client,
            name: test.to_string(),
            namespace,
            cluster,
            extra_namespaces: vec![],
        })
    }

    /// Creates another labelled namespace owned by this test.
    pub async fn namespace(&mut self, suffix: &str) -> Result<String> {
        let ns = unique_name(&format!("{}-{suffix}", self.name));
        create_namespace(&self.client, &ns, &self.name).await?;
        self.extra_namespaces.push(ns.clone());
        Ok(ns)
    }

    /// `kubectl` against the control plane, for failure dumps and quick checks.
    pub fn kubectl(&self, args: &[&str]) -> Result<String> {
        kubectl_output(args)
    }

    fn dump(&self) {
        eprintln!(
            "---- state of test {} (component logs: {}) ----",
            self.name,
            logs_dir().display()
        );
        for ns in std::iter::once(&self.namespace).chain(&self.extra_namespaces) {
            if let Ok(out) = kubectl_output(&[
                "get",
                "all,configmaps,secrets,events",
                "-n",
                ns,
                "-o",
                "wide",
            ]) {
                eprintln!("# namespace {ns}\n{out}");
            }
        }
        let selector = format!("kix.run/cluster={}", self.cluster);
        for kind in ["activations.kix.run", "packageinstances.kix.run"] {
            if let Ok(out) = kubectl_output(&["get", kind, "-l", &selector, "-o", "yaml"]) {
                eprintln!("# {kind} of Kix cluster {}\n{out}", self.cluster);
            }
        }
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.dump();
        }
    }
}

async fn create_namespace(client: &Client, name: &str, test: &str) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {TEST_LABEL: test.chars().take(63).collect::<String>()}},
    }))?;
    namespaces
        .patch(name, &PatchParams::apply("kix-testkit"), &Patch::Apply(&ns))
        .await
        .with_context(|| format!("creating test namespace {name}"))?;
    Ok(())
}

/// Deletes a namespace without waiting (tests clean up what they can).
pub async fn delete_namespace(client: &Client, name: &str) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    match namespaces.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(err) => Err(err.into()),
    }
}

/// Runs kubectl with the control plane's kubeconfig and returns stdout.
pub fn kubectl_output(args: &[&str]) -> Result<String> {
    let out = Command::new(kubectl())
        .arg("--kubeconfig")
        .arg(kubeconfig_path())
        .args(args)
        .output()
        .context("running kubectl")?;
    if !out.status.success() {
        anyhow::bail!(
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A kubeconfig for `user` (a client certificate signed by the control
/// plane's CA, no groups), so tests can run commands under restricted RBAC.
/// The caller grants what the user may do.
pub fn kubeconfig_for_user(user: &str, dir: &Path) -> Result<PathBuf> {
    let pki = control_plane_dir().join("pki");
    let key = dir.join(format!("{user}.key"));
    let csr = dir.join(format!("{user}.csr"));
    let crt = dir.join(format!("{user}.crt"));
    let ext = dir.join("client.ext");
    std::fs::write(&ext, "extendedKeyUsage=clientAuth\n")?;
    let run = |args: &[&str]| -> Result<()> {
        let out = Command::new("openssl")
            .args(args)
            .output()
            .context("running openssl")?;
        anyhow::ensure!(
            out.status.success(),
            "openssl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    };
    let p = |p: &Path| p.to_string_lossy().into_owned();
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        &format!("/CN={user}"),
        "-keyout",
        &p(&key),
        "-out",
        &p(&csr),
    ])?;
    run(&[
        "x509",
        "-req",
        "-in",
        &p(&csr),
        "-CA",
        &p(&pki.join("ca.crt")),
        "-CAkey",
        &p(&pki.join("ca.key")),
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        &p(&ext),
        "-out",
        &p(&crt),
    ])?;
    let server = std::fs::read_to_string(control_plane_dir().join("server"))?
        .trim()
        .to_string();
    let b64 = |path: &Path| -> Result<String> {
        let out = Command::new("base64").arg("-w0").arg(path).output()?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let config = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kix-local\n  cluster:\n    server: {server}\n    certificate-authority-data: {}\nusers:\n- name: {user}\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: {user}\n  context: {{cluster: kix-local, user: {user}}}\ncurrent-context: {user}\n",
        b64(&pki.join("ca.crt"))?,
        b64(&crt)?,
        b64(&key)?,
    );
    let path = dir.join(format!("{user}.kubeconfig"));
    std::fs::write(&path, config)?;
    Ok(path)
}

/// A namespaced CustomResourceDefinition `name` of kind Widget in `group`
/// with these `versions` (each `{name, served, storage, schema}`): the CRD
/// the CRD-upgrade tests change version by version.
pub fn widget_crd(name: &str, group: &str, versions: &[serde_json::Value]) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget",
                "listKind": "WidgetList"},
            "versions": versions}
    })
}

/// The CustomResourceDefinitions, read raw (as kix reads them).
pub fn crd_api(client: &Client) -> kube::Api<kube::api::DynamicObject> {
    kube::Api::all_with(
        client.clone(),
        &kube::discovery::ApiResource {
            group: "apiextensions.k8s.io".into(),
            version: "v1".into(),
            api_version: "apiextensions.k8s.io/v1".into(),
            kind: "CustomResourceDefinition".into(),
            plural: "customresourcedefinitions".into(),
        },
    )
}

//! Shared by the CLI's end-to-end tests (rollback, gc, status, history,
//! cli): the real `kix` binary against the local control plane, with manifest
//! trees written per test and Nix GC roots in a directory of the test's own
//! under /nix/var/nix/gcroots (so they are real roots).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use kix_api::Activation;
use kix_testkit::TestEnv;
use kube::api::{Api, ListParams};

pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    #[track_caller]
    pub fn code(self, code: i32) -> Run {
        assert_eq!(
            self.code,
            Some(code),
            "expected exit {code}\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        self
    }

    #[track_caller]
    pub fn ok(self) -> Run {
        self.code(0)
    }

    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("{e}: {}", self.stdout))
    }
}

pub fn run(cmd: &mut Command) -> Run {
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

pub fn kix_bin() -> &'static str {
    env!("CARGO_BIN_EXE_kix")
}

/// One test's Kix cluster, namespace, GC roots and trees.
pub struct Kix {
    pub env: TestEnv,
    pub roots: PathBuf,
    pub dir: tempfile::TempDir,
}

impl Kix {
    pub async fn new(test: &str) -> Kix {
        let env = TestEnv::new(test).await.expect("test env");
        let roots = PathBuf::from(format!("/nix/var/nix/gcroots/kix-test-{}", env.cluster));
        Kix {
            env,
            roots,
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    pub fn cluster(&self) -> &str {
        &self.env.cluster
    }

    pub fn ns(&self) -> &str {
        &self.env.namespace
    }

    /// `kix` with the control plane's kubeconfig, this test's GC roots, no
    /// terminal on stdin, and default logging.
    pub fn cmd(&self) -> Command {
        let mut cmd = Command::new(kix_bin());
        cmd.env_remove("KIX_LOG")
            .env_remove("NO_COLOR")
            .env("KIX_OFFLINE", "true")
            .env("KUBECONFIG", kix_testkit::kubeconfig_path())
            .env("KIX_GCROOTS_DIR", &self.roots)
            .stdin(Stdio::null());
        cmd
    }

    pub fn kix(&self, args: &[&str]) -> Run {
        run(self.cmd().args(args))
    }

    /// Writes a manifest tree `name` with one package `web` in the test's
    /// namespace; `resources` is YAML. The cluster name makes it unique to
    /// this test, so its store path is too.
    pub fn tree(&self, name: &str, resources: &str, settings: serde_json::Value) -> PathBuf {
        let root = self.dir.path().join(name);
        let package = root.join("packages/web");
        std::fs::create_dir_all(package.join("resources")).expect("mkdir");
        std::fs::write(
            root.join("kix.json"),
            serde_json::json!({"format": 1, "cluster": self.cluster(), "packages": ["web"], "settings": settings})
                .to_string(),
        )
        .expect("kix.json");
        std::fs::write(
            package.join("package.json"),
            serde_json::json!({"name": "web", "version": "1", "dependsOn": [], "namespace": self.ns(), "migrations": []})
                .to_string(),
        )
        .expect("package.json");
        std::fs::write(package.join("resources/objects.yaml"), resources).expect("resources");
        root
    }

    /// `kix deploy --path <tree> --yes` plus `extra`; returns the run.
    pub fn deploy(&self, tree: &Path, extra: &[&str]) -> Run {
        let path = tree.to_str().expect("utf-8 path");
        let mut args = vec!["deploy", self.cluster(), "--path", path, "--yes"];
        args.extend_from_slice(extra);
        self.kix(&args)
    }

    /// The cluster's records, oldest first.
    pub async fn records(&self) -> Vec<Activation> {
        let api: Api<Activation> = Api::all(self.env.client.clone());
        let params = ListParams::default().labels(&format!("kix.run/cluster={}", self.cluster()));
        let mut items: Vec<Activation> = match api.list(&params).await {
            Ok(list) => list.items,
            // On a fresh control plane the CRDs come with the first deploy.
            Err(kube::Error::Api(status)) if status.code == 404 => vec![],
            Err(err) => panic!("list activations: {err}"),
        };
        items.sort_by_key(|r| r.sequence().unwrap_or(0));
        items
    }

    pub fn name(&self, sequence: u64) -> String {
        format!("{}-{sequence}", self.cluster())
    }

    pub fn kubectl(&self, args: &[&str]) -> String {
        kix_testkit::kubectl_output(args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The data of ConfigMap `name` in the test's namespace, or None.
    pub fn configmap(&self, name: &str) -> Option<serde_json::Value> {
        let out =
            kix_testkit::kubectl_output(&["get", "configmap", "-n", self.ns(), name, "-o", "json"])
                .ok()?;
        serde_json::from_str(&out).ok()
    }
}

impl Drop for Kix {
    fn drop(&mut self) {
        let selector = format!("kix.run/cluster={}", self.cluster());
        let _ = kix_testkit::kubectl_output(&[
            "delete",
            "activations.kix.run",
            "-l",
            &selector,
            "--wait=false",
        ]);
        let _ = kix_testkit::kubectl_output(&["delete", "namespace", self.ns(), "--wait=false"]);
        let _ = std::fs::remove_dir_all(&self.roots);
    }
}

/// The store path an activation record names.
pub fn path_of(record: &Activation) -> String {
    record.spec.source.path.clone()
}

/// `nix-store --delete PATH`: whether Nix deleted it (a live path is refused).
pub fn nix_delete(path: &str) -> bool {
    Command::new("nix-store")
        .args(["--delete", path])
        .output()
        .expect("nix-store runs")
        .status
        .success()
}

pub fn configmap(name: &str, data: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: {{v: \"{data}\"}}\n"
    )
}

/// A Deployment; `schedulable: false` gives it a node selector no node has,
/// so it never becomes Available.
pub fn deployment(name: &str, schedulable: bool) -> String {
    let placement = if schedulable {
        ""
    } else {
        "      nodeSelector: {kix-test: nowhere}\n"
    };
    format!(
        "---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}}}\nspec:\n  replicas: 1\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec:\n{placement}      containers: [{{name: app, image: \"example.invalid/app:1\"}}]\n"
    )
}

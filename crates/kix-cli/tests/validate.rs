//! `kix validate` and the check in `kix build`, end to end with the real
//! binary; `kix.lib.checkCluster` with real Nix (evaluation and build, and
//! `nix flake check` on a user's flake).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

fn kix() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kix"));
    cmd.env_remove("KIX_LOG")
        .env_remove("KIX_KUBERNETES_VERSION")
        .env("KIX_OFFLINE", "true");
    cmd
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn run_of(cmd: &mut Command) -> Run {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().expect("the command runs");
    Run {
        code: status.code(),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

impl Run {
    fn exits(self, code: i32) -> Run {
        assert_eq!(
            self.code,
            Some(code),
            "stdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        self
    }
}

const DEPLOYMENT: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: REPLICAS
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
        - name: web
          image: nginx:1.27
";

/// A tree in a temporary directory: one package `web` with `app.yaml`.
fn tree(settings: &str, manifest: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    std::fs::write(
        root.join("kix.json"),
        format!(
            r#"{{"format": 1, "cluster": "web", "packages": ["web"], "settings": {settings}}}"#
        ),
    )
    .expect("kix.json");
    std::fs::create_dir_all(root.join("packages/web/resources")).expect("mkdir");
    std::fs::write(
        root.join("packages/web/package.json"),
        r#"{"name": "web", "version": "1.0.0", "namespace": "web"}"#,
    )
    .expect("package.json");
    std::fs::write(root.join("packages/web/resources/app.yaml"), manifest).expect("app.yaml");
    dir
}

fn invalid_manifest() -> String {
    let typo = DEPLOYMENT.replace(
        "  replicas: REPLICAS\n",
        "  replicas: \"3\"\n  replica: 2\n",
    );
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: ok}}\n---\n{typo}")
}

#[test]
fn validate_path_reports_every_error_with_file_document_object_and_path() {
    let dir = tree("{}", &invalid_manifest());
    let run = run_of(kix().arg("validate").arg("--path").arg(dir.path())).exits(1);
    assert_eq!(
        run.stdout,
        "packages/web/resources/app.yaml:5 (document 2) Deployment.apps web/web: spec.replicas: expected integer, got string \"3\"\n\
         packages/web/resources/app.yaml:5 (document 2) Deployment.apps web/web: spec.replica: unknown field; did you mean spec.replicas?\n\
         error: 2 schema error(s) in 2 object(s) (Kubernetes v1.36.3)\n"
    );
}

#[test]
fn validate_path_of_a_valid_tree_succeeds() {
    let dir = tree("{}", &DEPLOYMENT.replace("REPLICAS", "3"));
    let run = run_of(kix().arg("validate").arg("--path").arg(dir.path())).exits(0);
    assert_eq!(
        run.stdout,
        "ok: 1 object(s) valid against Kubernetes v1.36.3\n"
    );
    // The cluster, when named, must be the build's.
    let run = run_of(kix().args(["validate", "other", "--path"]).arg(dir.path())).exits(1);
    assert!(
        run.stderr
            .contains("is the build of Kix cluster \"web\", not \"other\""),
        "{}",
        run.stderr
    );
}

#[test]
fn validate_json_output_lists_findings() {
    let dir = tree("{}", &invalid_manifest());
    let run = run_of(
        kix()
            .args(["validate", "-o", "json", "--path"])
            .arg(dir.path()),
    )
    .exits(1);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).expect("JSON");
    assert_eq!(report["kubernetesVersion"], "v1.36.3");
    assert_eq!(report["objects"], 2);
    let first = &report["findings"][0];
    assert_eq!(first["file"], "packages/web/resources/app.yaml");
    assert_eq!(first["document"], 2);
    assert_eq!(first["line"], 5);
    assert_eq!(first["object"], "Deployment.apps web/web");
    assert_eq!(first["path"], "spec.replicas");
    assert_eq!(first["message"], "expected integer, got string \"3\"");
}

#[test]
fn the_kubernetes_version_comes_from_the_flag_then_the_setting() {
    let valid = DEPLOYMENT.replace("REPLICAS", "3");
    let unsupported = "Kubernetes v1.20.0 is not supported for validation (supported: v1.36.3)";
    let dir = tree(r#"{"kubernetesVersion": "v1.20.0"}"#, &valid);
    let run = run_of(kix().arg("validate").arg("--path").arg(dir.path())).exits(1);
    assert!(run.stderr.contains(unsupported), "{}", run.stderr);
    let run = run_of(
        kix()
            .args(["validate", "--kubernetes-version", "v1.36", "--path"])
            .arg(dir.path()),
    )
    .exits(0);
    assert_eq!(
        run.stdout,
        "ok: 1 object(s) valid against Kubernetes v1.36.3\n"
    );
    let dir = tree("{}", &valid);
    let run = run_of(
        kix()
            .args(["validate", "--kubernetes-version", "v1.20.0", "--path"])
            .arg(dir.path()),
    )
    .exits(1);
    assert!(run.stderr.contains(unsupported), "{}", run.stderr);
}

fn check_cluster_file() -> PathBuf {
    repo_root().join("nix/tests/check-cluster.nix")
}

#[test]
fn kix_build_validates_unless_told_not_to() {
    let file = check_cluster_file();
    let build = |extra: &[&str]| {
        let mut cmd = kix();
        cmd.args(["build", "invalid", "--file"])
            .arg(&file)
            .args(["-A", "clusters.invalid"])
            .args(extra);
        run_of(&mut cmd)
    };
    let run = build(&[]).exits(1);
    assert!(run.stdout.starts_with("/nix/store/"), "{}", run.stdout);
    assert!(
        run.stderr.contains(
            " (document 1) Deployment.apps web/web: spec.replicas: expected integer, got string \"3\"\n"
        ),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(
            " (document 1) Service web/web: spec.type: unsupported value \"Loadbalancer\"; expected one of \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\"\n"
        ),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("error: 2 schema error(s) in 2 object(s) (Kubernetes v1.36.3) (--no-validate skips this check)"),
        "{}",
        run.stderr
    );
    build(&["--no-validate"]).exits(0);
    let run = build(&["-o", "json"]).exits(1);
    let summary: serde_json::Value = serde_json::from_str(&run.stdout).expect("JSON");
    assert_eq!(
        summary["validation"]["findings"].as_array().map(Vec::len),
        Some(2)
    );
}

/// A directory with bin/kix: the binary under test, for the Nix checks.
fn kix_package() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("bin")).expect("mkdir");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_kix"), dir.path().join("bin/kix"))
        .expect("symlink");
    dir
}

fn nix_build_check(attr: &str, kix_dir: &Path, sandboxed: bool) -> Run {
    let mut cmd = Command::new("nix");
    cmd.args([
        "--extra-experimental-features",
        "nix-command flakes",
        "--offline",
    ])
    .args(["--option", "substituters", ""]);
    if sandboxed {
        // As in a user's `nix flake check`: a sandbox, with the host tools
        // the host-tools builder needs and the kix under test.
        let exe = env!("CARGO_BIN_EXE_kix");
        let dir = kix_dir.display();
        let paths = format!("{} {dir}={dir} {exe}={exe}", host_tools_sandbox_paths());
        cmd.args([
            "--option",
            "sandbox",
            "true",
            "--option",
            "sandbox-fallback",
            "false",
        ])
        .args(["--option", "sandbox-paths", &paths]);
    }
    cmd.args(["build", "--no-link", "-L", "-f"])
        .arg(check_cluster_file())
        .arg("--argstr")
        .arg("kix")
        .arg(kix_dir)
        .arg(attr);
    run_of(&mut cmd)
}

fn host_tools_sandbox_paths() -> String {
    let out = Command::new("nix")
        .args(["--extra-experimental-features", "nix-command flakes"])
        .args(["eval", "--raw", "-f"])
        .arg(repo_root().join("nix/tests/host-tools.nix"))
        .arg("sandboxPaths")
        .output()
        .expect("nix eval runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn check_cluster_builds_for_a_valid_cluster_and_fails_with_kix_messages() {
    for sandboxed in [false, true] {
        // A new kix directory each time: new derivations, so kix really runs.
        let kix_dir = kix_package();
        nix_build_check("valid", kix_dir.path(), sandboxed).exits(0);
        let run = nix_build_check("invalid", kix_dir.path(), sandboxed).exits(1);
        for message in [
            "Deployment.apps web/web: spec.replicas: expected integer, got string \"3\"",
            "Service web/web: spec.type: unsupported value \"Loadbalancer\"",
            "error: 2 schema error(s) in 2 object(s) (Kubernetes v1.36.3)",
        ] {
            assert!(run.stderr.contains(message), "{message}:\n{}", run.stderr);
        }
        let run = nix_build_check("unsupportedVersion", kix_dir.path(), sandboxed).exits(1);
        assert!(
            run.stderr
                .contains("Kubernetes v1.20.0 is not supported for validation"),
            "{}",
            run.stderr
        );
    }
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

#[test]
fn nix_flake_check_fails_on_an_invalid_manifest() {
    let kix_dir = kix_package();
    let tmp = tempfile::tempdir().expect("tempdir");
    copy_dir(&repo_root().join("nix"), &tmp.path().join("nix"));
    let flake = tmp.path().join("nix/tests/check-flake");
    let system = Command::new("nix-instantiate")
        .args(["--eval", "--json", "-E", "builtins.currentSystem"])
        .output()
        .expect("nix-instantiate runs");
    std::fs::write(flake.join("system.nix"), &system.stdout).expect("system.nix");
    std::fs::write(flake.join("kix-path.nix"), format!("{:?}", kix_dir.path())).expect("kix-path");
    let flake_check = |broken: bool| {
        std::fs::write(flake.join("broken.nix"), broken.to_string()).expect("broken.nix");
        git(tmp.path(), &["init", "-q"]);
        git(tmp.path(), &["add", "-A"]);
        run_of(
            Command::new("nix")
                .args([
                    "--extra-experimental-features",
                    "nix-command flakes",
                    "--offline",
                ])
                .args(["--option", "substituters", ""])
                .args(["flake", "check", "-L"])
                .arg(&flake),
        )
    };
    flake_check(false).exits(0);
    // Nix exits 100 when a build fails.
    let run = flake_check(true).exits(100);
    assert!(
        run.stderr
            .contains("Deployment.apps web/web: spec.replicas: expected integer, got string \"3\""),
        "{}",
        run.stderr
    );
}

#[test]
fn validate_drops_what_only_the_api_server_sets_with_one_warning_per_file() {
    let dump = DEPLOYMENT.replace("REPLICAS", "3").replace(
        "  name: web\n",
        "  name: web\n  generation: 4\n  resourceVersion: \"812\"\n  uid: 0d1a6c3e-2b1f-4e55-9a7e-3c1f0b6d8e21\n",
    ) + "status:\n  replicas: 3\n  observedGeneration: 4\n";
    let dir = tree("{}", &dump);
    let run = run_of(kix().arg("validate").arg("--path").arg(dir.path())).exits(0);
    assert_eq!(
        run.stdout,
        "ok: 1 object(s) valid against Kubernetes v1.36.3\n"
    );
    assert_eq!(
        run.stderr.matches("warning: ").count(),
        1,
        "one warning for the file: {}",
        run.stderr
    );
    assert!(
        run.stderr.contains(
            "warning: packages/web/resources/app.yaml: dropped metadata.generation, \
             metadata.resourceVersion, metadata.uid, status, which only the API server sets"
        ),
        "{}",
        run.stderr
    );
}

#[test]
fn validate_refuses_a_health_rule_that_does_not_compile_naming_file_and_expression() {
    let dir = tree("{}", &DEPLOYMENT.replace("REPLICAS", "3"));
    std::fs::write(
        dir.path().join("kix.json"),
        r#"{"format": 1, "cluster": "web", "packages": ["web"],
            "health": [{"group": "example.com", "kind": "Widget", "failed": "status.phase =="}]}"#,
    )
    .expect("kix.json");
    let run = run_of(kix().arg("validate").arg("--path").arg(dir.path())).exits(1);
    assert!(
        run.stderr.contains(
            "kix.json health[0]: health rule for Widget.example.com: failed `status.phase ==` does not compile"
        ),
        "{}",
        run.stderr
    );
}

//! `kix build` end to end: the real `kix` binary, real Nix, the fixtures in
//! nix/tests/.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

fn clusters_file() -> PathBuf {
    repo_root().join("nix/tests/clusters.nix")
}

/// `kix` with offline builds (no substituter waits) and default logging.
fn kix() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kix"));
    cmd.env_remove("KIX_LOG").env("KIX_OFFLINE", "true");
    cmd
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
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

impl Run {
    fn ok(self) -> Run {
        assert_eq!(
            self.code,
            Some(0),
            "stdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        self
    }

    fn failed(self, code: i32) -> Run {
        assert_eq!(
            self.code,
            Some(code),
            "stdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        self
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("{e}: {}", self.stdout))
    }

    fn first_line(&self) -> &str {
        self.stdout.lines().next().unwrap_or_default()
    }
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

fn current_system() -> String {
    let out = Command::new("nix-instantiate")
        .args(["--eval", "--json", "-E", "builtins.currentSystem"])
        .output()
        .expect("nix-instantiate runs");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A copy of nix/ in a fresh Git repository, so the fixture flake at
/// `<repo>/nix/tests/flake` can import `../../lib.nix`: the source of a Git
/// flake is the whole repository, while a `path:` flake is copied alone (and
/// Nix 2.8 has no `?dir=` for `path:`). Returns the temp dir (keep it alive)
/// and the flake directory.
fn fixture_flake() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    copy_dir(&repo_root().join("nix"), &tmp.path().join("nix"));
    let flake = tmp.path().join("nix/tests/flake");
    std::fs::write(flake.join("system.nix"), current_system()).expect("system.nix");
    git(tmp.path(), &["init", "-q"]);
    git(tmp.path(), &["add", "-A"]);
    (tmp, flake)
}

fn is_store_path(s: &str) -> bool {
    kix_manifest::StorePath::parse(s).is_ok()
}

fn nix_store_delete(path: &str) {
    let out = Command::new("nix-store")
        .args(["--delete", path])
        .output()
        .expect("nix-store runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn builds_from_a_file() {
    let out = run(kix()
        .args(["build", "basic", "--file"])
        .arg(clusters_file())
        .args(["-A", "basic"]))
    .ok();
    let path = out.first_line();
    assert!(is_store_path(path), "{path}");
    assert!(path.ends_with("-kix-basic"), "{path}");
    assert!(
        out.stdout.contains("cluster basic: 3 packages, 11 objects"),
        "{}",
        out.stdout
    );
    // Packages in dependency order with version and object count.
    let db = out.stdout.find("db   15.4   3 objects").expect("db line");
    let api = out.stdout.find("api  0.3.1  2 objects").expect("api line");
    let web = out.stdout.find("web  1.2.0  6 objects").expect("web line");
    assert!(db < api && api < web, "{}", out.stdout);
    // Object counts per kind.
    assert!(
        out.stdout.contains("Deployment.apps                 2"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("ConfigMap                       4"),
        "{}",
        out.stdout
    );
}

#[test]
fn attr_defaults_to_kix_clusters_of_the_cluster() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("default.nix");
    std::fs::write(
        &file,
        format!(
            "{{ kixClusters.minimal = (import {} {{ }}).minimal; }}\n",
            clusters_file().display()
        ),
    )
    .expect("write");
    let out = run(kix().args(["build", "minimal", "--file"]).arg(&file)).ok();
    assert!(
        out.stdout.contains("cluster minimal: 1 package, 1 object"),
        "{}",
        out.stdout
    );
}

#[test]
fn json_output() {
    let out = run(kix()
        .args(["build", "basic", "--output", "json", "--file"])
        .arg(clusters_file())
        .args(["-A", "basic"]))
    .ok();
    let json = out.json();
    assert!(is_store_path(
        json["storePath"].as_str().expect("storePath")
    ));
    assert_eq!(json["cluster"], "basic");
    assert_eq!(
        json["packages"],
        serde_json::json!([
            {"name": "db", "version": "15.4", "objects": 3},
            {"name": "api", "version": "0.3.1", "objects": 2},
            {"name": "web", "version": "1.2.0", "objects": 6},
        ])
    );
    assert_eq!(
        json["kinds"],
        serde_json::json!({
            "ConfigMap": 4,
            "Deployment.apps": 2,
            "Namespace": 1,
            "Role.rbac.authorization.k8s.io": 1,
            "Service": 1,
            "ServiceAccount": 1,
            "StatefulSet.apps": 1,
        })
    );
}

#[test]
fn builds_the_fixture_flake() {
    let (_tmp, flake) = fixture_flake();
    let out = run(kix()
        .args(["build", "demo", "--output", "json", "--flake"])
        .arg(&flake))
    .ok();
    let json = out.json();
    assert_eq!(json["cluster"], "demo");
    assert!(
        json["storePath"]
            .as_str()
            .is_some_and(|p| is_store_path(p) && p.ends_with("-kix-demo")),
        "{json}"
    );
    assert_eq!(
        json["packages"],
        serde_json::json!([
            {"name": "monitoring", "version": "2.0.0", "objects": 1},
            {"name": "app", "version": "1.0.0", "objects": 3},
        ])
    );
}

#[test]
fn flake_defaults_to_the_current_directory() {
    let (_tmp, flake) = fixture_flake();
    let out = run(kix().args(["build", "demo"]).current_dir(&flake)).ok();
    assert!(
        out.stdout.contains("cluster demo: 2 packages, 4 objects"),
        "{}",
        out.stdout
    );
}

#[test]
fn refuses_a_build_of_another_cluster() {
    let (_tmp, flake) = fixture_flake();
    let out = run(kix().args(["build", "wrong", "--flake"]).arg(&flake)).failed(1);
    assert!(
        out.stderr
            .contains("is of Kix cluster \"not-wrong\", not \"wrong\""),
        "{}",
        out.stderr
    );
    assert!(out.stdout.is_empty(), "{}", out.stdout);

    let out = run(kix()
        .args(["build", "prod", "--file"])
        .arg(clusters_file())
        .args(["-A", "minimal"]))
    .failed(1);
    assert!(
        out.stderr
            .contains("is of Kix cluster \"minimal\", not \"prod\""),
        "{}",
        out.stderr
    );
}

#[test]
fn failing_evaluation_shows_nix_error() {
    let out = run(kix()
        .args(["build", "broken", "--quiet", "--file"])
        .arg(clusters_file())
        .args(["-A", "brokenDependency"]))
    .failed(1);
    assert!(
        out.stderr.contains(
            "kix.mkCluster: cluster \"broken\": package \"web\": depends on \"database\", which is not a package"
        ),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains(" build --no-link --json"),
        "names the command: {}",
        out.stderr
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn nix_progress_streams_to_stderr() {
    // Without --quiet, Nix's own stderr goes through as it comes, and on
    // failure is repeated in the error.
    let out = run(kix()
        .args(["build", "broken", "--file"])
        .arg(clusters_file())
        .args(["-A", "brokenResource"]))
    .failed(1);
    assert_eq!(
        out.stderr.matches("missing `metadata.name`").count(),
        2,
        "{}",
        out.stderr
    );
}

#[test]
fn missing_flake_output_shows_nix_error() {
    let (_tmp, flake) = fixture_flake();
    let out = run(kix().args(["build", "nope", "--flake"]).arg(&flake)).failed(1);
    assert!(out.stderr.contains("kixClusters.nope"), "{}", out.stderr);
}

#[test]
fn path_of_a_plain_directory_is_added_to_the_store() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let tree = tmp.path().join("handmade");
    let resources = tree.join("packages/app/resources");
    std::fs::create_dir_all(&resources).expect("mkdir");
    let nonce = format!("{}-{:?}", std::process::id(), std::time::SystemTime::now());
    std::fs::write(
        tree.join("kix.json"),
        r#"{"format":1,"cluster":"handmade","packages":["app"],"settings":{}}"#,
    )
    .expect("write");
    std::fs::write(
        tree.join("packages/app/package.json"),
        r#"{"name":"app","version":"7","dependsOn":[],"migrations":[]}"#,
    )
    .expect("write");
    std::fs::write(
        resources.join("cm.yaml"),
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  nonce: \"{nonce}\"\n"
        ),
    )
    .expect("write");

    let out = run(kix()
        .args(["build", "handmade", "-o", "json", "--path"])
        .arg(&tree))
    .ok();
    let json = out.json();
    let path = json["storePath"].as_str().expect("storePath").to_owned();
    assert!(is_store_path(&path), "{path}");
    assert!(path.ends_with("-handmade"), "{path}");
    assert_eq!(
        json["packages"],
        serde_json::json!([{"name": "app", "version": "7", "objects": 1}])
    );
    assert!(
        Path::new(&path)
            .join("packages/app/resources/cm.yaml")
            .is_file()
    );

    // The store path itself (and a symlink to it, like ./result) is used as
    // it is.
    let again = run(kix().args(["build", "handmade", "--path", &path])).ok();
    assert_eq!(again.first_line(), path);
    let link = tmp.path().join("result");
    std::os::unix::fs::symlink(&path, &link).expect("symlink");
    let via_link = run(kix().args(["build", "handmade", "--path"]).arg(&link)).ok();
    assert_eq!(via_link.first_line(), path);

    // Unique content that nothing roots: remove it again.
    nix_store_delete(&path);
}

#[test]
fn path_that_is_not_a_tree() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = run(kix().args(["build", "x", "--path"]).arg(tmp.path())).failed(1);
    assert!(out.stderr.contains("no kix.json"), "{}", out.stderr);
    let out = run(kix()
        .args(["build", "x", "--path"])
        .arg(tmp.path().join("missing")))
    .failed(1);
    assert!(out.stderr.contains("No such file"), "{}", out.stderr);
}

#[test]
fn without_nix_says_to_install_it() {
    let empty = tempfile::tempdir().expect("tempdir");
    let out = run(kix()
        .env("PATH", empty.path())
        .args(["build", "basic", "--file"])
        .arg(clusters_file()))
    .failed(1);
    assert!(
        out.stderr.contains("Nix is not installed"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("install Nix"), "{}", out.stderr);
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        vec!["build", "x", "--path", "/tmp", "--flake", "."],
        vec!["build", "x", "--path", "/tmp", "--file", "f.nix"],
        vec!["build", "x", "--flake", ".", "--file", "f.nix"],
        vec!["build", "x", "-A", "kixClusters.x"],
        vec!["build", "x", "--output", "yaml"],
        vec!["build"],
    ] {
        let out = run(kix().args(&args));
        assert_eq!(out.code, Some(2), "{args:?}: {}", out.stderr);
    }
}

#[test]
fn extra_nix_args_pass_through() {
    let salted = run(kix()
        .args(["build", "minimal", "--file"])
        .arg(clusters_file())
        .args(["-A", "minimal", "--", "--argstr", "salt", "from-kix-cli"]))
    .ok();
    let plain = run(kix()
        .args(["build", "minimal", "--file"])
        .arg(clusters_file())
        .args(["-A", "minimal"]))
    .ok();
    assert!(is_store_path(salted.first_line()));
    assert_ne!(plain.first_line(), salted.first_line());
}

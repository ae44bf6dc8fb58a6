//! Real Nix for the binary-cache tests (push, fetch): keys, a build made
//! with the Nix library and the host-tools builder, and what a `file://`
//! cache holds.

use std::path::{Path, PathBuf};
use std::process::Command;

use kix_testkit::TestEnv;

/// `nix ARGS`, which must succeed; its stdout.
pub fn nix(args: &[&str]) -> String {
    let out = Command::new("nix")
        .args(["--extra-experimental-features", "nix-command"])
        .args(args)
        .output()
        .expect("nix runs");
    assert!(
        out.status.success(),
        "nix {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// A secret key file named `name` in `dir`, and its public key.
pub fn key_pair(dir: &Path, name: &str) -> (PathBuf, String) {
    let secret = dir.join(format!("{name}.sec"));
    std::fs::write(
        &secret,
        nix(&["key", "generate-secret", "--key-name", name]),
    )
    .expect("key");
    let out = Command::new("nix")
        .args(["--extra-experimental-features", "nix-command"])
        .args(["key", "convert-secret-to-public"])
        .stdin(std::fs::File::open(&secret).expect("open"))
        .output()
        .expect("nix runs");
    let public = String::from_utf8(out.stdout).expect("utf-8");
    (secret, public.trim().to_owned())
}

/// A Nix file (`<cm>.nix` in `dir`) whose `kixClusters.<env's cluster>` is
/// one ConfigMap `cm` in the test's namespace naming two other store paths
/// (a closure of three input-addressed paths, which need signatures),
/// published to `cache_url`. Each call makes a new build.
pub fn cluster_file(
    dir: &Path,
    env: &TestEnv,
    cm: &str,
    cache_url: &str,
    public_key: &str,
) -> PathBuf {
    let root = kix_testkit::repo_root();
    let salt = kix_testkit::unique_name(cm);
    let file = dir.join(format!("{cm}.nix"));
    let text = format!(
        r#"let
  kix = import {root}/nix/default.nix {{ }};
  pkgs = import {root}/nix/tests/host-tools.nix {{ }};
  dep = name: pkgs.runCommand name {{ }} "echo {salt} > $out";
  a = dep "kix-{cm}-a";
  b = dep "kix-{cm}-b";
in {{
  kixClusters."{cluster}" = kix.lib.mkCluster {{
    inherit pkgs;
    name = "{cluster}";
    packages.app = {{
      version = "1";
      namespace = "{namespace}";
      resources = [ {{ apiVersion = "v1"; kind = "ConfigMap"; metadata.name = "{cm}"; data = {{ a = "${{a}}"; b = "${{b}}"; }}; }} ];
    }};
    settings.cache = {{ url = "{cache_url}"; publicKeys = [ "{public_key}" ]; }};
  }};
}}
"#,
        root = root.display(),
        cluster = env.cluster,
        namespace = env.namespace,
    );
    std::fs::write(&file, text).expect("write the cluster file");
    file
}

/// The build's store path, built in the host's store as kix builds it.
pub fn build_path(file: &Path, cluster: &str) -> String {
    let attr = format!("kixClusters.\"{cluster}\"");
    let file = file.to_str().expect("utf-8");
    let out = nix(&[
        "build",
        "--no-link",
        "--json",
        "--offline",
        "-f",
        file,
        &attr,
    ]);
    let built: serde_json::Value = serde_json::from_str(&out).expect("json");
    built[0]["outputs"]["out"]
        .as_str()
        .expect("out path")
        .to_owned()
}

/// `<hash>.narinfo`, a binary cache's file for `path`.
pub fn narinfo_name(path: &str) -> String {
    let base = path.trim_start_matches("/nix/store/");
    format!("{}.narinfo", &base[..32])
}

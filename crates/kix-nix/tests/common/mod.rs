//! Helpers shared by the kix-nix integration tests (real Nix, real store).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use kix_nix::{BuildOptions, StorePath};

/// The workspace root (where `nix/` is).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

pub fn nix_dir() -> PathBuf {
    repo_root().join("nix")
}

/// Offline, quiet builds: tests never wait on a substituter.
pub fn offline() -> BuildOptions {
    BuildOptions {
        show_progress: false,
        offline: true,
        extra_args: Vec::new(),
    }
}

/// A string no other test run has used: for store paths nobody else holds.
pub fn unique(tag: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!(
        "{tag}-{}-{nanos}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// A fresh store path of our own: a directory with unique content added to
/// the store.
pub fn fresh_store_path(tag: &str) -> StorePath {
    let dir = tempfile::tempdir().expect("tempdir");
    let sub = dir.path().join(format!("kix-test-{tag}"));
    std::fs::create_dir(&sub).expect("mkdir");
    std::fs::write(sub.join("content"), unique(tag)).expect("write");
    kix_nix::add_to_store(&sub).expect("nix-store --add")
}

/// `nix-store --delete <path>`: Ok(()) when deleted, Err(stderr) when Nix
/// refused (for example because the path is still alive).
pub fn nix_store_delete(path: &StorePath) -> Result<(), String> {
    let out = Command::new("nix-store")
        .arg("--delete")
        .arg(path.as_str())
        .output()
        .expect("nix-store runs");
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// `nix-instantiate` with the given arguments: (success, stdout, stderr).
pub fn nix_instantiate(args: &[&str]) -> (bool, String, String) {
    let out = Command::new("nix-instantiate")
        .args(args)
        .current_dir(repo_root())
        .output()
        .expect("nix-instantiate runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `nix ARGS` (stdin from `stdin`), which must succeed; its stdout.
pub fn nix(args: &[&str], stdin: Option<&Path>) -> String {
    let mut command = Command::new("nix");
    command
        .args(["--extra-experimental-features", "nix-command"])
        .args(args);
    if let Some(file) = stdin {
        command.stdin(std::fs::File::open(file).expect("open"));
    }
    let out = command.output().expect("nix runs");
    assert!(
        out.status.success(),
        "nix {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// A secret key file named `name` in `dir`, and its public key.
pub fn key_pair(dir: &Path, name: &str) -> (PathBuf, kix_manifest::PublicKey) {
    let secret = dir.join(format!("{name}.sec"));
    let text = nix(&["key", "generate-secret", "--key-name", name], None);
    std::fs::write(&secret, text).expect("key");
    let public = nix(&["key", "convert-secret-to-public"], Some(&secret));
    let public = kix_manifest::PublicKey::parse(public.trim()).expect("public key");
    (secret, public)
}

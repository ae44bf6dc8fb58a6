//! The real `sops` and `age-keygen` for the tests of encrypted Secrets
//! (`secrets_deploy.rs`, `secrets_redaction.rs`, `tenant_keys.rs`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Base64, as a Secret's `data` holds it.
pub fn encode(text: &str) -> String {
    let value = serde_json::to_value(k8s_openapi::ByteString(text.as_bytes().to_vec()));
    value
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .expect("base64")
}

/// `sops`, `age-keygen`: `$KIX_SOPS_BIN_DIR`, else checks/build-sops-age.
pub fn sops_bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KIX_SOPS_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let script = kix_testkit::repo_root().join("checks/build-sops-age");
    match Command::new(&script).output() {
        Ok(out) if out.status.success() => {
            PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        }
        other => panic!(
            "this test needs the real sops and age: run `checks/build-sops-age` and export \
             KIX_SOPS_BIN_DIR=<the directory it prints> (running it failed: {other:?})"
        ),
    }
}

/// An age key from `age-keygen`: its file and recipient.
pub struct Key {
    pub file: PathBuf,
    pub recipient: String,
}

/// A new age key in `dir/<name>`.
pub fn keygen(dir: &Path, name: &str) -> Key {
    let file = dir.join(name);
    let out = Command::new(sops_bin_dir().join("age-keygen"))
        .arg("-o")
        .arg(&file)
        .output()
        .expect("age-keygen runs");
    assert!(out.status.success(), "age-keygen: {out:?}");
    let text = std::fs::read_to_string(&file).expect("key file");
    let recipient = text
        .lines()
        .find_map(|l| l.strip_prefix("# public key: "))
        .expect("public key")
        .to_owned();
    Key { file, recipient }
}

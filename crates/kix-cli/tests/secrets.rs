//! Secrets in a build: plain Secrets with values are refused by
//! `kix validate` (and `kix build`) unless their package allows them;
//! SOPS-encrypted files (`packages/<p>/secrets/`) are read as opaque.

use std::path::Path;
use std::process::{Command, Output};

fn kix() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kix"));
    cmd.env_remove("KIX_LOG")
        .env_remove("KIX_KUBERNETES_VERSION")
        .env_remove("SOPS_AGE_KEY")
        .env_remove("SOPS_AGE_KEY_FILE")
        .env("KIX_OFFLINE", "true");
    cmd
}

fn run(cmd: &mut Command) -> (Option<i32>, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().expect("the command runs");
    (
        status.code(),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

const PLAIN: &str =
    "apiVersion: v1\nkind: Secret\nmetadata: {name: db}\nstringData: {password: plain-hunter2}\n";

/// A tree with package `db` (namespace `db`): `package_json` extra fields,
/// `files` relative to the package directory.
fn tree(package_extra: &str, files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |rel: &str, text: &str| {
        let path = dir.path().join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    };
    write(
        "kix.json",
        r#"{"format":1,"cluster":"secrets","packages":["db"]}"#,
    );
    write(
        "packages/db/package.json",
        &format!(r#"{{"name":"db","version":"1","namespace":"db"{package_extra}}}"#),
    );
    for (rel, text) in files {
        write(&format!("packages/db/{rel}"), text);
    }
    dir
}

#[test]
fn validate_refuses_a_plain_secret_naming_it_unless_the_package_allows_it() {
    let dir = tree("", &[("resources/db.yaml", PLAIN)]);
    let (code, _, stderr) = run(kix().arg("validate").arg("--path").arg(dir.path()));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("plain Secrets with values (Secret db/db)"),
        "{stderr}"
    );
    assert!(stderr.contains("allowPlaintextSecrets = true"), "{stderr}");
    assert!(!stderr.contains("plain-hunter2"), "{stderr}");

    let dir = tree(
        r#","allowPlaintextSecrets":true"#,
        &[("resources/db.yaml", PLAIN)],
    );
    let (code, stdout, stderr) = run(kix().arg("validate").arg("--path").arg(dir.path()));
    assert_eq!(code, Some(0), "{stdout}{stderr}");
}

#[test]
fn validate_reads_encrypted_files_as_opaque() {
    let encrypted = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../kix-sops/fuzz/seeds/whole.yaml"),
    )
    .expect("an encrypted file");
    let dir = tree("", &[("secrets/000-db.sops.yaml", &encrypted)]);
    let (code, stdout, stderr) = run(kix().arg("validate").arg("--path").arg(dir.path()));
    assert_eq!(code, Some(0), "{stdout}{stderr}");

    // A plain file where an encrypted one belongs is refused, naming it.
    let dir = tree("", &[("secrets/000-db.yaml", PLAIN)]);
    let (code, _, stderr) = run(kix().arg("validate").arg("--path").arg(dir.path()));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("packages/db/secrets/000-db.yaml: not a SOPS file"),
        "{stderr}"
    );
    assert!(!stderr.contains("plain-hunter2"), "{stderr}");
}

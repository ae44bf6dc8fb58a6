//! A package's `secrets/` (SOPS-encrypted files) and plain Secrets:
//! encrypted files are opaque to the reader, never objects; only their
//! metadata is checked. Plain Secrets are listed unless the package allows
//! them.

use std::fs;
use std::path::{Path, PathBuf};

use kix_manifest::{ReadOptions, TreeError, read_tree};

/// A file sops encrypted (to the kix-sops fuzz key, which protects nothing).
fn encrypted() -> String {
    let seed = Path::new(env!("CARGO_MANIFEST_DIR")).join("../kix-sops/fuzz/seeds/whole.yaml");
    fs::read_to_string(seed).expect("the kix-sops seed file")
}

fn tree(files: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().canonicalize().expect("canonical").join("build");
    for (rel, text) in files {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(path, text).expect("write");
    }
    (dir, root)
}

fn read(dir: &tempfile::TempDir, root: &Path) -> Result<kix_manifest::Build, TreeError> {
    let options = ReadOptions {
        store_dir: dir.path().canonicalize().expect("canonical"),
        ..ReadOptions::default()
    };
    read_tree(root, &options)
}

const KIX: &str = r#"{"format":1,"cluster":"test","packages":["app"]}"#;
const PLAIN_SECRET: &str =
    "apiVersion: v1\nkind: Secret\nmetadata: {name: db}\nstringData: {password: hunter2}\n";

#[test]
fn encrypted_files_are_listed_never_read_as_objects() {
    let text = encrypted();
    let (dir, root) = tree(&[
        ("kix.json", KIX),
        (
            "packages/app/package.json",
            r#"{"name":"app","version":"1"}"#,
        ),
        ("packages/app/secrets/000-db.sops.yaml", &text),
    ]);
    let build = read(&dir, &root).expect("reads");
    assert_eq!(build.object_count(), 0);
    assert_eq!(build.secrets.len(), 1);
    let secret = &build.secrets[0];
    assert_eq!(secret.package, "app");
    assert_eq!(
        secret.file,
        Path::new("packages/app/secrets/000-db.sops.yaml")
    );
    assert_eq!(secret.format(), kix_sops::Format::Yaml);
    assert_eq!(secret.recipients.len(), 1);
    assert!(secret.recipients[0].starts_with("age1"));
    assert!(build.plaintext_secrets().is_empty());
}

#[test]
fn a_plain_file_among_the_secrets_is_refused_naming_it() {
    let (dir, root) = tree(&[
        ("kix.json", KIX),
        (
            "packages/app/package.json",
            r#"{"name":"app","version":"1"}"#,
        ),
        ("packages/app/secrets/000-db.yaml", PLAIN_SECRET),
    ]);
    let err = read(&dir, &root).expect_err("refused");
    assert_eq!(
        err,
        TreeError::Secret {
            file: "packages/app/secrets/000-db.yaml".into(),
            reason: kix_sops::Reason::NotSops,
        }
    );
    assert!(!err.to_string().contains("hunter2"), "{err}");
}

#[test]
fn plain_secrets_are_listed_unless_the_package_allows_them() {
    let files = |package_json| {
        tree(&[
            ("kix.json", KIX),
            ("packages/app/package.json", package_json),
            ("packages/app/resources/db.yaml", PLAIN_SECRET),
        ])
    };
    let (dir, root) = files(r#"{"name":"app","version":"1"}"#);
    let build = read(&dir, &root).expect("reads");
    let plain: Vec<String> = build
        .plaintext_secrets()
        .iter()
        .map(|o| o.key.to_string())
        .collect();
    assert_eq!(plain, vec!["Secret/db".to_owned()]);

    // A Secret with no values (a token Secret the cluster fills) is not one.
    let (dir, root) = tree(&[
        ("kix.json", KIX),
        (
            "packages/app/package.json",
            r#"{"name":"app","version":"1"}"#,
        ),
        (
            "packages/app/resources/token.yaml",
            "apiVersion: v1\nkind: Secret\nmetadata: {name: t}\ntype: kubernetes.io/service-account-token\n",
        ),
    ]);
    assert!(
        read(&dir, &root)
            .expect("reads")
            .plaintext_secrets()
            .is_empty()
    );

    let (dir, root) = files(r#"{"name":"app","version":"1","allowPlaintextSecrets":true}"#);
    let build = read(&dir, &root).expect("reads");
    assert!(build.plaintext_secrets().is_empty());
    assert!(build.plaintext_secrets_allowed.contains("app"));
}

/// The kix-sops fuzz target's key (it protects nothing): tests/secrets/*
/// are encrypted to it.
fn fuzz_identities() -> kix_manifest::secrets::AgeIdentities {
    let source = fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../kix-sops/fuzz/fuzz_targets/sops_decrypt.rs"),
    )
    .expect("the fuzz target");
    let key = source
        .split('"')
        .find(|s| s.starts_with("AGE-SECRET-KEY-"))
        .expect("the fuzz key");
    let ids =
        kix_sops::Identities::parse(key, "fuzz key", kix_sops::Layout::OnePerLine).expect("parses");
    kix_manifest::secrets::AgeIdentities::new(ids)
}

fn encrypted_fixture(name: &str) -> String {
    fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/secrets")
            .join(name),
    )
    .expect("fixture")
}

fn read_with(
    dir: &tempfile::TempDir,
    root: &Path,
    ids: Option<kix_manifest::secrets::AgeIdentities>,
) -> Result<kix_manifest::Build, TreeError> {
    let options = ReadOptions {
        store_dir: dir.path().canonicalize().expect("canonical"),
        age_identities: ids,
        ..ReadOptions::default()
    };
    read_tree(root, &options)
}

#[test]
fn with_identities_the_secrets_become_objects_of_their_package() {
    let text = encrypted_fixture("db.sops.yaml");
    let (dir, root) = tree(&[
        ("kix.json", KIX),
        (
            "packages/app/package.json",
            r#"{"name":"app","version":"1","namespace":"apps"}"#,
        ),
        ("packages/app/secrets/000-db.sops.yaml", &text),
    ]);
    let build = read_with(&dir, &root, Some(fuzz_identities())).expect("reads");
    assert!(build.secrets_decrypted);
    let keys: Vec<String> = build.objects().map(|o| o.key.to_string()).collect();
    assert_eq!(keys, ["Secret apps/db", "Secret other/api"]);
    let db = build.objects().next().expect("db");
    assert!(kix_manifest::secrets::is_decrypted(db));
    assert_eq!(
        db.manifest()["stringData"]["password"],
        "manifest-test-password-91c3"
    );
    assert_eq!(db.document, 1);
    assert!(build.plaintext_secrets().is_empty());
    assert_eq!(build.secret_digest_keys.len(), 1);
    // Debug of the build never shows the digest key.
    assert!(format!("{:?}", build.secret_digest_keys).contains("redacted"));

    // Without identities: opaque.
    let build = read_with(&dir, &root, None).expect("reads");
    assert!(!build.secrets_decrypted);
    assert_eq!(build.object_count(), 0);
}

/// The fuzz key alone.
fn fuzz_key() -> kix_sops::Identities {
    let source = fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../kix-sops/fuzz/fuzz_targets/sops_decrypt.rs"),
    )
    .expect("the fuzz target");
    let key = source.split('"').find(|s| s.starts_with("AGE-SECRET-KEY-"));
    kix_sops::Identities::parse(
        key.expect("the fuzz key"),
        "k",
        kix_sops::Layout::OnePerLine,
    )
    .expect("parses")
}

/// A key bound to another Kix cluster is not used for a build of this one
/// (#43 point 3): the reader picks the keys of the cluster the build
/// declares, or of the record it acts for.
#[test]
fn a_key_ring_decrypts_a_build_with_its_clusters_keys_only() {
    use kix_manifest::secrets::AgeIdentities;
    let text = encrypted_fixture("db.sops.yaml");
    let (dir, root) = tree(&[
        ("kix.json", KIX),
        (
            "packages/app/package.json",
            r#"{"name":"app","version":"1","namespace":"apps"}"#,
        ),
        ("packages/app/secrets/000-db.sops.yaml", &text),
    ]);
    let mut ring = kix_sops::KeyRing::default();
    ring.bind("other", fuzz_key());
    let ring = AgeIdentities::ring(ring);
    // The build declares Kix cluster "test": the key of "other" is not its.
    let build = read_with(&dir, &root, Some(ring.clone())).expect("reads");
    assert!(!build.secrets_decrypted);
    assert_eq!(build.object_count(), 0);
    // Read for a record of "other": its keys only for a build of "other".
    let build = read_with(&dir, &root, ring.for_cluster("other")).expect("reads");
    assert!(!build.secrets_decrypted);
    assert!(ring.for_cluster("test").is_none());
    // Bound to "test": decrypted.
    let mut ring = kix_sops::KeyRing::default();
    ring.bind("test", fuzz_key());
    let build = read_with(&dir, &root, Some(AgeIdentities::ring(ring))).expect("reads");
    assert!(build.secrets_decrypted);
}

#[test]
fn a_decrypted_document_must_be_a_secret_and_unique() {
    let (dir, root) = tree(&[
        ("kix.json", KIX),
        (
            "packages/app/package.json",
            r#"{"name":"app","version":"1"}"#,
        ),
        (
            "packages/app/secrets/000-c.sops.yaml",
            &encrypted_fixture("configmap.sops.yaml"),
        ),
    ]);
    let err = read_with(&dir, &root, Some(fuzz_identities())).expect_err("refused");
    assert!(
        matches!(&err, TreeError::SecretContent { document: 1, .. }),
        "{err}"
    );
    assert!(!err.to_string().contains("ConfigMap c"), "{err}");

    let text = encrypted_fixture("db.sops.yaml");
    let (dir, root) = tree(&[
        ("kix.json", KIX),
        (
            "packages/app/package.json",
            r#"{"name":"app","version":"1"}"#,
        ),
        ("packages/app/secrets/000-db.sops.yaml", &text),
        ("packages/app/secrets/001-again.sops.yaml", &text),
    ]);
    let err = read_with(&dir, &root, Some(fuzz_identities())).expect_err("refused");
    assert!(err.to_string().contains("001-again.sops.yaml"), "{err}");
    assert!(!err.to_string().contains("manifest-test-password"), "{err}");
}

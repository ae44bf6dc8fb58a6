//! The corpus: every `invalid/<case>.yaml` gives exactly the findings of
//! `invalid/<case>.err`; every `valid/<case>.yaml` gives none, and no object
//! of it goes unchecked for want of a schema. Each file is the only
//! resource file of a one-package build. `KIX_BLESS=1` rewrites the `.err`
//! files (review the diff).

use std::fs;
use std::path::{Path, PathBuf};

use kix_manifest::{Build, ReadOptions};
use kix_validate::{Report, Unchecked, validate_build};

fn corpus(dir: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(dir);
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .expect("corpus directory")
        .map(|e| e.expect("corpus entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no cases in {}", dir.display());
    files
}

/// A one-package tree holding `manifest` as packages/app/resources/<name>.
fn build_of(manifest: &Path) -> (tempfile::TempDir, Build) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    fs::write(
        root.join("kix.json"),
        r#"{"format": 1, "cluster": "corpus", "packages": ["app"]}"#,
    )
    .expect("kix.json");
    let resources = root.join("packages/app/resources");
    fs::create_dir_all(&resources).expect("resources");
    fs::write(
        root.join("packages/app/package.json"),
        r#"{"name": "app", "version": "1.0.0"}"#,
    )
    .expect("package.json");
    let name = manifest.file_name().expect("file name");
    fs::copy(manifest, resources.join(name)).expect("copy manifest");
    let options = ReadOptions {
        // The root must be inside the "store": its parent directory.
        store_dir: root.canonicalize().expect("canonical root").join(".."),
        ..ReadOptions::default()
    };
    let build = kix_manifest::read_tree(root, &options)
        .unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
    (dir, build)
}

fn report_of(manifest: &Path) -> Report {
    let (_dir, build) = build_of(manifest);
    validate_build(&build, None).expect("the default version is supported")
}

fn text(report: &Report) -> String {
    report.findings.iter().map(|f| format!("{f}\n")).collect()
}

#[test]
fn invalid_manifests_give_their_exact_messages() {
    let mut failures = Vec::new();
    for case in corpus("invalid") {
        let found = text(&report_of(&case));
        let expected_file = case.with_extension("err");
        if std::env::var_os("KIX_BLESS").is_some() {
            fs::write(&expected_file, &found).expect("bless");
            continue;
        }
        let expected = fs::read_to_string(&expected_file)
            .unwrap_or_else(|e| panic!("{}: {e}", expected_file.display()));
        assert!(
            !expected.is_empty(),
            "{}: an invalid case expects findings",
            case.display()
        );
        if found != expected {
            failures.push(format!(
                "{}:\n--- expected\n{expected}--- found\n{found}",
                case.display()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn valid_manifests_give_no_findings_and_are_all_checked() {
    for case in corpus("valid") {
        let report = report_of(&case);
        assert_eq!(text(&report), "", "{}", case.display());
        let unknown: Vec<&Unchecked> = report
            .unchecked
            .iter()
            .filter(|u| matches!(u, Unchecked::UnknownKind { .. }))
            .collect();
        assert!(unknown.is_empty(), "{}: {unknown:?}", case.display());
        assert!(report.objects > 0);
    }
}

#[test]
fn cel_rules_are_listed_as_not_checked() {
    let case = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/valid/certificates-crd.yaml");
    let report = report_of(&case);
    assert!(
        report.unchecked.contains(&Unchecked::CelRules {
            crd: "certificates.pki.corpus.kix.test".into(),
            rules: 1,
            objects: 2,
        }),
        "{:?}",
        report.unchecked
    );
}

#[test]
fn kinds_without_a_schema_are_listed_not_failed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("foreign.yaml");
    fs::write(
        &file,
        "apiVersion: monitoring.example.com/v1\nkind: Probe\nmetadata: {name: p}\nspec: {anything: 1}\n",
    )
    .expect("write");
    let report = report_of(&file);
    assert!(report.is_valid());
    assert_eq!(
        report.unchecked,
        vec![Unchecked::UnknownKind {
            kind: "Probe.monitoring.example.com (monitoring.example.com/v1)".into(),
            objects: 1
        }]
    );
}

#[test]
fn unsupported_kubernetes_version_is_a_clear_error() {
    let case = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/valid/web-app.yaml");
    let (_dir, build) = build_of(&case);
    let error = validate_build(&build, Some("v1.20.0")).expect_err("not supported");
    assert_eq!(
        error.to_string(),
        "Kubernetes v1.20.0 is not supported for validation (supported: v1.36.3); generate its schemas with crates/kix-validate/gen/gen-schemas v1.20.0, or skip validation"
    );
    // The minor release names its supported patch release.
    let report = validate_build(&build, Some("1.36")).expect("v1.36 is v1.36.3");
    assert_eq!(report.kubernetes_version, "v1.36.3");
}

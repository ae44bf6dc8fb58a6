//! Golden tests over the fixture trees.
//!
//! * `tests/fixtures/ok/<case>/` is a tree that reads; `expected.json` beside
//!   its `kix.json` is the listing of what was read.
//! * `tests/fixtures/err/<case>/` is a tree that is rejected;
//!   `expected-error.txt` holds the exact message.
//!
//! Run with `UPDATE_GOLDEN=1` to rewrite the expected files from what the
//! reader does now (then review the diff).
//!
//! The store directory for every case is `tests/fixtures/` itself, so a
//! symlink that leaves `tests/fixtures/` escapes the "store".

use std::fs;
use std::path::{Path, PathBuf};

use kix_manifest::{Build, ReadOptions, read_tree};
use serde_json::{Value, json};

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn options() -> ReadOptions {
    ReadOptions {
        store_dir: fixtures_dir()
            .canonicalize()
            .expect("fixtures directory exists"),
        ..ReadOptions::default()
    }
}

fn cases(kind: &str) -> Vec<PathBuf> {
    let mut cases: Vec<PathBuf> = fs::read_dir(fixtures_dir().join(kind))
        .expect("fixture directory")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.is_dir())
        .collect();
    cases.sort();
    cases
}

fn update() -> bool {
    std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1")
}

/// What `expected.json` records of a build: everything but the root path.
fn listing(build: &Build) -> Value {
    let packages: Vec<Value> = build
        .packages
        .iter()
        .map(|p| {
            let objects: Vec<Value> = p
                .objects
                .iter()
                .map(|o| {
                    assert_eq!(o.package, p.name);
                    json!({
                        "key": o.key.to_string(),
                        "source": o.source,
                        "manifest": o.manifest(),
                    })
                })
                .collect();
            json!({
                "name": p.name,
                "version": p.version,
                "dependsOn": p.depends_on,
                "namespace": p.namespace,
                "migrations": p.migrations,
                "objects": objects,
            })
        })
        .collect();
    json!({
        "cluster": build.cluster,
        "format": build.format,
        "settings": build.settings,
        "objectCount": build.object_count(),
        "summary": build.summary(),
        "packages": packages,
    })
}

fn case_name(case: &Path) -> String {
    case.file_name()
        .expect("case name")
        .to_string_lossy()
        .into_owned()
}

#[test]
fn ok_cases_match_expected_listing() {
    let cases = cases("ok");
    assert!(cases.len() >= 10, "ok cases missing: {cases:?}");
    let mut failures = Vec::new();
    for case in &cases {
        let name = case_name(case);
        let build = match read_tree(case, &options()) {
            Ok(build) => build,
            Err(e) => {
                failures.push(format!("{name}: unexpected error: {e}"));
                continue;
            }
        };
        assert_eq!(build.root, case.canonicalize().expect("case exists"));
        let actual = serde_json::to_string_pretty(&listing(&build)).expect("json") + "\n";
        let expected_path = case.join("expected.json");
        if update() {
            fs::write(&expected_path, &actual).expect("write expected.json");
            continue;
        }
        match fs::read_to_string(&expected_path) {
            Ok(expected) if expected == actual => {}
            Ok(expected) => failures.push(format!(
                "{name}: listing differs from expected.json\n--- expected\n{expected}\n--- actual\n{actual}"
            )),
            Err(e) => failures.push(format!("{name}: no expected.json ({e})")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn err_cases_match_expected_error() {
    let cases = cases("err");
    assert!(cases.len() >= 30, "err cases missing: {cases:?}");
    let mut failures = Vec::new();
    for case in &cases {
        let name = case_name(case);
        let actual = match read_tree(case, &options()) {
            Ok(build) => {
                failures.push(format!(
                    "{name}: read without error ({} objects)",
                    build.object_count()
                ));
                continue;
            }
            Err(e) => e.to_string(),
        };
        let expected_path = case.join("expected-error.txt");
        if update() {
            fs::write(&expected_path, format!("{actual}\n")).expect("write expected-error.txt");
            continue;
        }
        match fs::read_to_string(&expected_path) {
            Ok(expected) if expected.trim_end_matches('\n') == actual => {}
            Ok(expected) => failures.push(format!(
                "{name}:\n  expected: {}\n  actual:   {actual}",
                expected.trim_end_matches('\n')
            )),
            Err(e) => failures.push(format!("{name}: no expected-error.txt ({e})")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Reading is deterministic: the same tree gives the same build.
#[test]
fn reading_twice_gives_the_same_build() {
    for case in cases("ok") {
        let a = read_tree(&case, &options()).expect("reads");
        let b = read_tree(&case, &options()).expect("reads");
        assert_eq!(a, b, "{}", case.display());
    }
}

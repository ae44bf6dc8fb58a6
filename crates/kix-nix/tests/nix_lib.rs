//! The kix Nix library (nix/lib.nix) with real Nix: evaluation tests, error
//! messages, and fixture clusters built with `nix build` and read back by the
//! kix-manifest reader.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{nix_dir, nix_instantiate, offline};
use kix_nix::{BuildError, BuildSource, NixError, StorePath};

fn clusters_file() -> std::path::PathBuf {
    nix_dir().join("tests/clusters.nix")
}

fn build_fixture(attr: &str) -> StorePath {
    let source = BuildSource::File {
        file: clusters_file(),
        attr: attr.to_owned(),
    };
    kix_nix::build(&source, &offline()).unwrap_or_else(|e| panic!("building {attr}: {e}"))
}

#[test]
fn eval_tests_pass() {
    let (ok, stdout, stderr) =
        nix_instantiate(&["--eval", "--strict", "--json", "nix/tests/eval.nix"]);
    assert!(ok, "nix/tests/eval.nix failed:\n{stderr}");
    let result: serde_json::Value = serde_json::from_str(&stdout).expect("JSON result");
    assert_eq!(result["failed"], serde_json::json!([]), "{stdout}");
    assert!(
        result["passed"].as_u64().expect("a count") >= 60,
        "{stdout}"
    );
}

#[test]
fn rejected_declarations_name_what_is_wrong() {
    let (ok, stdout, stderr) = nix_instantiate(&[
        "--eval",
        "--json",
        "--strict",
        "-E",
        "builtins.mapAttrs (n: c: c.expect) (import ./nix/tests/throws.nix { })",
    ]);
    assert!(ok, "{stderr}");
    let cases: BTreeMap<String, Vec<String>> = serde_json::from_str(&stdout).expect("cases");
    assert!(cases.len() >= 30, "{cases:?}");
    let mut failures = Vec::new();
    for (name, expected) in &cases {
        let expr = format!("builtins.seq (import ./nix/tests/throws.nix {{ }}).{name}.value true");
        let (ok, _, stderr) = nix_instantiate(&["--eval", "-E", &expr]);
        if ok {
            failures.push(format!("{name}: evaluated without error"));
            continue;
        }
        if !stderr.contains("kix.mkCluster: ") {
            failures.push(format!("{name}: not a kix.mkCluster error:\n{stderr}"));
        }
        for part in expected {
            if !stderr.contains(part.as_str()) {
                failures.push(format!("{name}: message lacks {part:?}:\n{stderr}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every file of a tree, relative, with symlinks reported as such.
fn files(root: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .expect("read_dir")
            .map(|e| e.expect("entry").path())
            .collect();
        entries.sort();
        for path in entries {
            let rel = path
                .strip_prefix(root)
                .expect("inside")
                .to_string_lossy()
                .into_owned();
            let meta = std::fs::symlink_metadata(&path).expect("metadata");
            if meta.file_type().is_symlink() {
                out.push(format!("{rel} (symlink)"));
            } else if meta.is_dir() {
                walk(root, &path, out);
            } else {
                out.push(rel);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out
}

#[test]
fn basic_cluster_builds_the_format_1_tree() {
    let path = build_fixture("basic");
    assert_eq!(path.name(), "kix-basic");
    assert_eq!(
        files(path.as_path()),
        [
            "kix.json",
            "packages/api/package.json",
            "packages/api/resources/manifests/000-chart-rendered/chart/templates/deployment.yaml",
            "packages/api/resources/manifests/000-chart-rendered/chart/templates/role.yaml",
            "packages/db/package.json",
            "packages/db/resources/000-list-items.json",
            "packages/db/resources/001-statefulset-db.json",
            "packages/web/package.json",
            "packages/web/resources/000-namespace-web.json",
            "packages/web/resources/001-configmap-web-config.json",
            "packages/web/resources/manifests/000-web.yaml",
            "packages/web/resources/manifests/001-manifests-dir/config.yaml",
            "packages/web/resources/manifests/001-manifests-dir/sub/account.json",
        ],
        "no symlinks: the symlink in the chart output was followed"
    );
    let kix_json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(path.as_path().join("kix.json")).expect("kix.json"),
    )
    .expect("JSON");
    assert_eq!(
        kix_json,
        serde_json::json!({
            "format": 1,
            "cluster": "basic",
            "packages": ["db", "api", "web"],
            "settings": {"keep": 5, "maxAge": "30d", "context": "kind-basic", "note": "passed through"}
        })
    );
}

#[test]
fn basic_cluster_reads_back() {
    let path = build_fixture("basic");
    let build = kix_nix::read_build(&path).expect("the reader accepts the tree");
    assert_eq!(build.cluster, "basic");
    assert_eq!(build.format, 1);
    assert_eq!(build.root, path.to_path_buf());
    assert_eq!(build.settings.keep, Some(5));
    assert_eq!(build.settings.max_age.as_deref(), Some("30d"));
    assert_eq!(build.settings.context.as_deref(), Some("kind-basic"));
    assert_eq!(
        build.settings.extra.get("note"),
        Some(&serde_json::json!("passed through"))
    );

    let packages: Vec<_> = build
        .packages
        .iter()
        .map(|p| (p.name.as_str(), p.version.as_str(), p.objects.len()))
        .collect();
    assert_eq!(
        packages,
        [("db", "15.4", 3), ("api", "0.3.1", 2), ("web", "1.2.0", 6)]
    );

    let web = build.package("web").expect("web");
    assert_eq!(web.depends_on, ["api"]);
    assert_eq!(web.namespace.as_deref(), Some("web"));
    assert_eq!(web.migrations.len(), 1);
    assert_eq!(web.migrations[0].from, "1.1.0");
    assert_eq!(web.migrations[0].to, "1.2.0");
    // The handoff reaches the reader, which checked it covers the Deployment.
    assert_eq!(
        web.handoff
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["Deployment web spec.replicas"]
    );
    let mut web_objects: Vec<String> = web.objects.iter().map(|o| o.key.to_string()).collect();
    web_objects.sort();
    let mut expected = vec![
        "ConfigMap web/dir-config",
        "ConfigMap web/web-config",
        "Deployment.apps web/web",
        "Namespace/web",
        "Service web/web",
        "ServiceAccount web/dir-account",
    ];
    expected.sort();
    assert_eq!(web_objects, expected);

    let summary = build.summary();
    assert_eq!(
        summary.by_kind,
        BTreeMap::from(
            [
                ("ConfigMap", 4),
                ("Deployment.apps", 2),
                ("Namespace", 1),
                ("Role.rbac.authorization.k8s.io", 1),
                ("Service", 1),
                ("ServiceAccount", 1),
                ("StatefulSet.apps", 1),
            ]
            .map(|(k, v)| (k.to_owned(), v))
        )
    );
}

#[test]
fn other_fixtures_read_back() {
    let minimal = kix_nix::read_build(&build_fixture("minimal")).expect("minimal");
    assert_eq!(minimal.cluster, "minimal");
    assert_eq!(minimal.object_count(), 1);
    assert_eq!(minimal.settings, Default::default());

    let empty = kix_nix::read_build(&build_fixture("empty")).expect("empty");
    assert_eq!(empty.cluster, "empty");
    assert!(empty.packages.is_empty());

    let list = kix_nix::read_build(&build_fixture("listForm")).expect("list form");
    assert_eq!(list.cluster, "list-form");
    let names: Vec<_> = list.packages.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["first", "second"]);
}

#[test]
fn build_and_read_checks_the_cluster() {
    let source = BuildSource::file(clusters_file(), Some("minimal".into()), "minimal");
    let (path, build) = kix_nix::build_and_read(&source, "minimal", &offline()).expect("builds");
    assert_eq!(build.cluster, "minimal");
    assert_eq!(build.root, path.to_path_buf());

    let err = kix_nix::build_and_read(&source, "prod", &offline()).expect_err("wrong cluster");
    match &err {
        BuildError::ClusterMismatch {
            expected, found, ..
        } => {
            assert_eq!(expected, "prod");
            assert_eq!(found, "minimal");
        }
        other => panic!("unexpected {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("\"prod\"") && text.contains("\"minimal\""),
        "{text}"
    );
}

#[test]
fn failed_evaluation_carries_nix_stderr() {
    let source = BuildSource::File {
        file: clusters_file(),
        attr: "brokenDependency".into(),
    };
    let err = kix_nix::build(&source, &offline()).expect_err("evaluation fails");
    match &err {
        NixError::CommandFailed {
            command, stderr, ..
        } => {
            assert!(command.starts_with("nix "), "{command}");
            assert!(command.contains("brokenDependency"), "{command}");
            assert!(
                stderr.contains("depends on \"database\", which is not a package"),
                "{stderr}"
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(err.to_string().contains("depends on \"database\""));
}

#[test]
fn missing_attribute_is_a_nix_error() {
    let source = BuildSource::file(clusters_file(), None, "nope");
    let err = kix_nix::build(&source, &offline()).expect_err("no such attribute");
    let text = err.to_string();
    assert!(text.contains("kixClusters"), "{text}");
}

#[test]
fn a_salted_build_is_a_new_store_path() {
    // `--argstr salt` reaches the file's function: extra args pass through.
    let source = BuildSource::File {
        file: clusters_file(),
        attr: "minimal".into(),
    };
    let mut options = offline();
    options.extra_args = ["--argstr", "salt", &common::unique("salt")]
        .map(Into::into)
        .to_vec();
    let salted = kix_nix::build(&source, &options).expect("builds");
    let plain = kix_nix::build(&source, &offline()).expect("builds");
    assert_ne!(salted, plain);
    let build = kix_nix::read_build(&salted).expect("reads");
    assert_eq!(build.cluster, "minimal");
    // Nothing roots the salted path: remove it again.
    common::nix_store_delete(&salted).expect("delete");
}

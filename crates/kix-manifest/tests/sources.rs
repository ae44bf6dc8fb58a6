//! `source` in `package.json`: the chart or overlay a package came from is
//! read into `Build::sources`; a tree without it reads as before; a bad one
//! is refused naming its file.

use std::fs;
use std::path::{Path, PathBuf};

use kix_manifest::{PackageSource, ReadOptions, TreeError, read_tree};

fn tree(packages: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().canonicalize().expect("canonical").join("build");
    let names: Vec<String> = packages.iter().map(|(n, _)| format!("{n:?}")).collect();
    write(
        &root,
        "kix.json",
        &format!(
            r#"{{"format":1,"cluster":"test","packages":[{}]}}"#,
            names.join(",")
        ),
    );
    for (name, json) in packages {
        write(&root, &format!("packages/{name}/package.json"), json);
        write(
            &root,
            &format!("packages/{name}/resources/cm.yaml"),
            &format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: ns\n"
            ),
        );
    }
    (dir, root)
}

fn write(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    fs::write(path, text).expect("write");
}

fn read(dir: &tempfile::TempDir, root: &Path) -> Result<kix_manifest::Build, TreeError> {
    let options = ReadOptions {
        store_dir: dir.path().canonicalize().expect("canonical"),
        ..ReadOptions::default()
    };
    read_tree(root, &options)
}

#[test]
fn sources_are_read_per_package_and_older_trees_have_none() {
    let (dir, root) = tree(&[
        (
            "certs",
            r#"{"name":"certs","version":"1","source":{"helm":{"chart":"cert-manager","version":"v1.16.2","repo":"https://charts.jetstack.io"}}}"#,
        ),
        (
            "worker",
            r#"{"name":"worker","version":"1","source":{"kustomize":{"path":"k8s/overlays/prod"}}}"#,
        ),
        ("plain", r#"{"name":"plain","version":"1"}"#),
    ]);
    let build = read(&dir, &root).expect("a tree with sources reads");
    let shown: Vec<(String, String)> = build
        .sources
        .iter()
        .map(|(p, s)| (p.clone(), s.to_string()))
        .collect();
    assert_eq!(
        shown,
        [
            (
                "certs".to_owned(),
                "Helm chart cert-manager v1.16.2 (https://charts.jetstack.io)".to_owned()
            ),
            (
                "worker".to_owned(),
                "Kustomize overlay k8s/overlays/prod".to_owned()
            ),
        ]
    );
    assert!(matches!(
        build.sources.get("certs"),
        Some(PackageSource::Helm(h)) if h.chart.as_str() == "cert-manager"
    ));
    assert_eq!(build.object_count(), 3, "the objects are read as before");
}

#[test]
fn a_bad_source_is_refused_naming_its_package_json() {
    let (dir, root) = tree(&[(
        "web",
        r#"{"name":"web","version":"1","source":{"helm":{"chart":"web"}}}"#,
    )]);
    let error = read(&dir, &root).expect_err("a chart without version");
    let text = error.to_string();
    assert!(
        text.contains("packages/web/package.json") && text.contains("missing field `version`"),
        "{text}"
    );
}

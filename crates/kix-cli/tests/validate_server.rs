//! The kix-validate corpus (crates/kix-validate/tests/{invalid,valid}) against the real apiserver (the pinned control plane): every
//! object the validator finds fault with is rejected by a server-side
//! dry-run with strict field validation, and every object it passes is
//! accepted. CRDs of a case are created for real first. This is what keeps
//! the offline check honest: it must agree with the server it stands in for.

use std::path::{Path, PathBuf};
use std::process::Command;

use kix_manifest::ReadOptions;

const NAMESPACE: &str = "kix-validate-corpus";

fn kubectl() -> Command {
    let mut cmd = Command::new(kix_testkit::kubectl());
    cmd.arg("--kubeconfig").arg(kix_testkit::kubeconfig_path());
    cmd
}

fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().expect("kubectl runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn cases() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../kix-validate/tests");
    let mut files = Vec::new();
    for dir in ["invalid", "valid"] {
        for entry in std::fs::read_dir(root.join(dir)).expect("corpus") {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|e| e == "yaml") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The documents of a corpus file with whether the validator faults each.
fn documents(case: &Path) -> Vec<(String, bool)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    std::fs::write(
        root.join("kix.json"),
        r#"{"format": 1, "cluster": "corpus", "packages": ["app"]}"#,
    )
    .expect("kix.json");
    std::fs::create_dir_all(root.join("packages/app/resources")).expect("mkdir");
    std::fs::write(
        root.join("packages/app/package.json"),
        r#"{"name": "app", "version": "1"}"#,
    )
    .expect("package.json");
    std::fs::copy(case, root.join("packages/app/resources/case.yaml")).expect("copy");
    let options = ReadOptions {
        store_dir: root.canonicalize().expect("root").join(".."),
        ..ReadOptions::default()
    };
    let build = kix_manifest::read_tree(root, &options).expect("read");
    let report = kix_validate::validate_build(&build, None).expect("validate");
    let text = std::fs::read_to_string(case).expect("read case");
    text.split("\n---\n")
        .enumerate()
        .map(|(i, doc)| {
            let faulted = report.findings.iter().any(|f| f.document == i + 1);
            (doc.to_owned(), faulted)
        })
        .collect()
}

fn wait_established(name: &str) {
    let (ok, text) = run(kubectl().args([
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        &format!("crd/{name}"),
    ]));
    assert!(ok, "waited 60 s for CRD {name} to be Established: {text}");
}

#[test]
fn the_server_rejects_exactly_what_the_validator_rejects() {
    let (ok, text) = run(kubectl().args(["create", "namespace", NAMESPACE]));
    assert!(ok || text.contains("AlreadyExists"), "{text}");
    let mut disagreements = Vec::new();
    for case in cases() {
        let docs = documents(&case);
        let dir = tempfile::tempdir().expect("tempdir");
        for (i, (doc, faulted)) in docs.iter().enumerate() {
            let file = dir.path().join(format!("doc-{i}.yaml"));
            std::fs::write(&file, doc).expect("write doc");
            let is_crd = doc.contains("\nkind: CustomResourceDefinition\n");
            let mut cmd = kubectl();
            cmd.args([
                "apply",
                "--server-side",
                "--force-conflicts",
                "--validate=strict",
            ])
            .args([
                "--field-manager",
                "kix-validate-test",
                "-n",
                NAMESPACE,
                "-f",
            ])
            .arg(&file);
            if !is_crd {
                cmd.arg("--dry-run=server");
            }
            let (accepted, text) = run(&mut cmd);
            if is_crd && accepted {
                let name = doc
                    .lines()
                    .find_map(|l| l.trim().strip_prefix("name: "))
                    .expect("CRD name");
                wait_established(name);
            }
            if accepted == *faulted {
                disagreements.push(format!(
                    "{} document {}: validator {}, server {}: {text}",
                    case.display(),
                    i + 1,
                    if *faulted { "rejects" } else { "accepts" },
                    if accepted { "accepts" } else { "rejects" },
                ));
            }
        }
    }
    assert!(disagreements.is_empty(), "{}", disagreements.join("\n"));
}

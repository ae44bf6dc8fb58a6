//! Health rules end to end against the control plane: the built-in library
//! and a build's own CEL rule end a deploy Degraded within seconds, naming
//! the object's message, and `kix status` names the rule that judged.
//!
//! The control plane runs no cert-manager nor any controller of these
//! kinds: the tests write the status a controller would, while kix waits.

mod cli_support;
mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use cli_support::Kix;

/// A CRD for `kind` in `group` (v1, any fields, a status subresource).
fn crd(group: &str, kind: &str, plural: &str) -> String {
    serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(),
                      "listKind": format!("{kind}List")},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}]}
    })
    .to_string()
}

/// Installs a CRD (shared by the tests' runs: applied, never deleted) and
/// waits until it is served.
fn install_crd(kix: &Kix, group: &str, kind: &str, plural: &str) {
    let file = kix.dir.path().join(format!("{plural}.{group}.json"));
    std::fs::write(&file, crd(group, kind, plural)).expect("write crd");
    kix.kubectl(&["apply", "-f", file.to_str().expect("path")]);
    kix.kubectl(&[
        "wait",
        "--for=condition=Established",
        &format!("crd/{plural}.{group}"),
        "--timeout=60s",
    ]);
}

/// Starts `kix deploy` of `tree` (plus `extra`); the caller writes
/// statuses meanwhile.
fn start_deploy(kix: &Kix, tree: &Path, extra: &[&str]) -> std::process::Child {
    kix.cmd()
        .args(["deploy", kix.cluster(), "--path"])
        .arg(tree)
        .args(["--yes", "--timeout", "120s"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kix deploy starts")
}

/// Waits until `kubectl get <what>` finds the object kix created.
fn wait_created(kix: &Kix, what: &[&str]) {
    let until = Instant::now() + Duration::from_secs(60);
    let mut args = vec!["get", "-n", kix.ns()];
    args.extend_from_slice(what);
    while kix_testkit::kubectl_output(&args).is_err() {
        assert!(Instant::now() < until, "{what:?} was never created");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn write_status(kix: &Kix, what: &[&str], status: serde_json::Value) {
    let patch = serde_json::json!({ "status": status }).to_string();
    let mut args = vec!["patch", "-n", kix.ns()];
    args.extend_from_slice(what);
    args.extend_from_slice(&["--subresource=status", "--type=merge", "-p", &patch]);
    kix.kubectl(&args);
}

/// The deploy's exit code, output, and how long it took after `since`.
fn finish(child: std::process::Child, since: Instant) -> (Option<i32>, String, Duration) {
    let out = child.wait_with_output().expect("kix deploy ends");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text, since.elapsed())
}

fn status_object(kix: &Kix, name: &str) -> serde_json::Value {
    let status = kix.kix(&["status", kix.cluster(), "-o", "json"]).json();
    status["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|p| p["objects"].as_array().into_iter().flatten())
        .find(|o| o["object"]["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("{name} not in {status:#}"))
}

#[tokio::test]
async fn a_certificate_whose_issuer_is_missing_ends_the_deploy_degraded_in_seconds() {
    let kix = Kix::new("health-cert").await;
    install_crd(&kix, "cert-manager.io", "Certificate", "certificates");
    let tree = kix.tree(
        "v1",
        "apiVersion: cert-manager.io/v1\nkind: Certificate\nmetadata:\n  name: web\n\
         spec:\n  secretName: web-tls\n  dnsNames: [web.example.com]\n  issuerRef: {name: missing, kind: Issuer}\n",
        serde_json::json!({}),
    );
    let deploy = start_deploy(&kix, &tree, &[]);
    wait_created(&kix, &["certificates.cert-manager.io", "web"]);
    // A Certificate without status is not healthy yet: the deploy waits.
    std::thread::sleep(Duration::from_secs(2));
    let written = Instant::now();
    write_status(
        &kix,
        &["certificates.cert-manager.io", "web"],
        serde_json::json!({"conditions": [{"type": "Ready", "status": "False", "reason": "DoesNotExist",
            "message": "Issuer missing not found", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}),
    );
    let (code, output, took) = finish(deploy, written);
    assert_eq!(code, Some(1), "{output}");
    assert!(took < Duration::from_secs(20), "took {took:?}: {output}");
    assert!(output.contains("Issuer missing not found"), "{output}");
    let records = kix.records().await;
    let phase = records
        .last()
        .and_then(|r| r.status.as_ref())
        .and_then(|s| s.phase);
    // --on-error abort (the default): the record fails at once.
    assert_eq!(phase, Some(kix_api::Phase::Failed), "{output}");

    let row = status_object(&kix, "web");
    assert_eq!(row["health"], "Degraded", "{row:#}");
    assert_eq!(row["rule"], "built-in cert-manager Certificate", "{row:#}");
    assert_eq!(
        row["reason"], "Ready=False DoesNotExist: Issuer missing not found",
        "{row:#}"
    );
    let text = kix.kix(&["status", kix.cluster()]).stdout;
    assert!(
        text.contains("(rule: built-in cert-manager Certificate)"),
        "{text}"
    );
}

#[tokio::test]
async fn a_builds_own_cel_rule_ends_the_deploy_degraded_with_its_message() {
    let kix = Kix::new("health-user").await;
    let group = format!("{}.health.kix.test", kix.cluster());
    install_crd(&kix, &group, "Widget", "widgets");
    let tree = kix.tree(
        "v1",
        &format!("apiVersion: {group}/v1\nkind: Widget\nmetadata:\n  name: w\nspec:\n  size: 1\n"),
        serde_json::json!({}),
    );
    let kix_json = serde_json::json!({"format": 1, "cluster": kix.cluster(), "packages": ["web"],
        "health": [{"group": group, "kind": "Widget",
            "current": "status.?phase.orValue('') == 'Running'",
            "failed": "status.?phase.orValue('') == 'Failed'",
            "message": "'widget ' + self.metadata.name + ': ' + status.?error.orValue('no error')"}]});
    std::fs::write(tree.join("kix.json"), kix_json.to_string()).expect("kix.json");

    let deploy = start_deploy(&kix, &tree, &[]);
    wait_created(&kix, &[&format!("widgets.{group}"), "w"]);
    write_status(
        &kix,
        &[&format!("widgets.{group}"), "w"],
        serde_json::json!({"phase": "Starting"}),
    );
    std::thread::sleep(Duration::from_secs(2));
    let written = Instant::now();
    write_status(
        &kix,
        &[&format!("widgets.{group}"), "w"],
        serde_json::json!({"phase": "Failed", "error": "disk full"}),
    );
    let (code, output, took) = finish(deploy, written);
    assert_eq!(code, Some(1), "{output}");
    assert!(took < Duration::from_secs(20), "took {took:?}: {output}");
    assert!(output.contains("widget w: disk full"), "{output}");

    // Running, the build deploys Active; failed later, `kix status` judges
    // it by the current build's rule.
    write_status(
        &kix,
        &[&format!("widgets.{group}"), "w"],
        serde_json::json!({"phase": "Running"}),
    );
    kix.deploy(&tree, &[]).ok();
    write_status(
        &kix,
        &[&format!("widgets.{group}"), "w"],
        serde_json::json!({"phase": "Failed", "error": "disk full"}),
    );
    let row = status_object(&kix, "w");
    assert_eq!(row["health"], "Degraded", "{row:#}");
    assert_eq!(row["rule"], "kix.json health[0]", "{row:#}");
    assert_eq!(row["reason"], "widget w: disk full", "{row:#}");
}

/// A Widget tree whose kix.json declares a rule for Widgets of `group`.
fn widget_tree(kix: &Kix, group: &str) -> std::path::PathBuf {
    let tree = kix.tree(
        "v1",
        &format!("apiVersion: {group}/v1\nkind: Widget\nmetadata:\n  name: w\nspec:\n  size: 1\n"),
        serde_json::json!({}),
    );
    let kix_json = serde_json::json!({"format": 1, "cluster": kix.cluster(), "packages": ["web"],
        "health": [{"group": group, "kind": "Widget",
            "current": "status.?phase.orValue('') == 'Running'",
            "failed": "status.?phase.orValue('') == 'Failed'",
            "message": "'widget ' + self.metadata.name + ': ' + status.?error.orValue('no error')"}]});
    std::fs::write(tree.join("kix.json"), kix_json.to_string()).expect("kix.json");
    tree
}

#[tokio::test]
async fn the_operator_judges_with_the_builds_rule_and_fails_the_record_in_seconds() {
    let kix = Kix::new("health-operator").await;
    let group = format!("{}.health.kix.test", kix.cluster());
    install_crd(&kix, &group, "Widget", "widgets");
    let tree = widget_tree(&kix, &group);
    let _operator = common::Operator::start(
        &kix_testkit::kubeconfig_path(),
        &[kix.cluster()],
        kix.ns(),
        &kix_testkit::unique_name("lease"),
        kix.dir.path().join("operator.log"),
        None,
    );
    let deploy = start_deploy(&kix, &tree, &["--operator"]);
    wait_created(&kix, &[&format!("widgets.{group}"), "w"]);
    std::thread::sleep(Duration::from_secs(2));
    let written = Instant::now();
    write_status(
        &kix,
        &[&format!("widgets.{group}"), "w"],
        serde_json::json!({"phase": "Failed", "error": "disk full"}),
    );
    let (code, output, took) = finish(deploy, written);
    let log = std::fs::read_to_string(kix.dir.path().join("operator.log")).unwrap_or_default();
    assert_eq!(code, Some(1), "{output}\noperator log:\n{log}");
    // The CLI polls the record every 2 s.
    assert!(took < Duration::from_secs(20), "took {took:?}: {output}");
    assert!(output.contains("widget w: disk full"), "{output}");
}

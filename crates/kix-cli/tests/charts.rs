//! kix.lib.helm and kix.lib.kustomize (#47, points 1 and 2), differential:
//! each case of tests/fixtures/charts.nix (a chart and a set of values, or a
//! Kustomize overlay) is built by real Nix into a Kix cluster, read back by
//! kix's own reader, and its objects must equal what the real `helm
//! template` (or `kustomize build`), run here directly with the same
//! arguments, prints: the same identities and the same bodies. Hooks and
//! CRDs are objects of the package too (kix gives them their meaning), and
//! a chart's `test` hooks are set apart as the package's tests.
//!
//! helm and kustomize are the pinned ones of checks/build-helm-kustomize
//! (`$KIX_HELM_BIN_DIR`, else the script is run); Nix is the host's, with
//! nix/tests/host-tools.nix standing in for nixpkgs.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Run, run};
use serde_json::Value;

/// `bin/helm`, `bin/kustomize`: `$KIX_HELM_BIN_DIR`, else checks/build-helm-kustomize.
fn tools_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KIX_HELM_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let script = kix_testkit::repo_root().join("checks/build-helm-kustomize");
    match Command::new(&script).output() {
        Ok(out) if out.status.success() => {
            PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        }
        other => panic!(
            "this test needs the real helm and kustomize: run `checks/build-helm-kustomize` and \
             export KIX_HELM_BIN_DIR=<the directory it prints> (running it failed: {other:?})"
        ),
    }
}

fn charts_nix() -> PathBuf {
    kix_testkit::repo_root().join("crates/kix-cli/tests/fixtures/charts.nix")
}

/// The `--arg`s charts.nix takes: the tools as paths.
fn tool_args(cmd: &mut Command) -> &mut Command {
    let tools = tools_dir();
    cmd.arg("--arg")
        .arg("helm")
        .arg(tools.join("helm"))
        .arg("--arg")
        .arg("kustomize")
        .arg(tools.join("kustomize"))
}

fn succeeded(what: &str, out: Run) -> String {
    assert_eq!(out.code, Some(0), "{what}: {out}");
    out.stdout
}

/// `nix-build` of `clusters.<case>` for each case: the store paths, in order.
fn build(cases: &[&str]) -> Vec<String> {
    let mut cmd = Command::new("nix-build");
    cmd.arg("--no-out-link").arg(charts_nix());
    for case in cases {
        cmd.arg("-A").arg(format!("clusters.{case}"));
    }
    let stdout = succeeded("nix-build charts.nix", run(tool_args(&mut cmd)));
    let paths: Vec<String> = stdout.lines().map(str::to_owned).collect();
    assert_eq!(
        paths.len(),
        cases.len(),
        "one store path per case: {stdout}"
    );
    paths
}

/// `cases.<case>` of charts.nix: the arguments the case gives the library.
fn case(name: &str) -> Value {
    let mut cmd = Command::new("nix-instantiate");
    cmd.args(["--eval", "--strict", "--json"])
        .arg(charts_nix())
        .arg("-A")
        .arg(format!("cases.{name}"));
    let stdout = succeeded("nix-instantiate charts.nix", run(tool_args(&mut cmd)));
    serde_json::from_str(&stdout).expect("cases.<name> is JSON")
}

fn kube_version() -> String {
    let mut cmd = Command::new("nix-instantiate");
    cmd.args(["--eval", "--json"])
        .arg(charts_nix())
        .args(["-A", "kubeVersion"]);
    let stdout = succeeded("kubeVersion of charts.nix", run(tool_args(&mut cmd)));
    serde_json::from_str(&stdout).expect("a JSON string")
}

/// `helm template` run directly with the case's arguments.
fn helm_template(case: &Value, scratch: &Path) -> String {
    let values = scratch.join("values.json");
    std::fs::write(&values, case["values"].to_string()).expect("values.json");
    let mut cmd = helm(scratch);
    cmd.arg("template")
        .arg(str_of(&case["releaseName"]))
        .arg(str_of(&case["chart"]))
        .arg("--namespace")
        .arg(str_of(&case["namespace"]))
        .arg("--kube-version")
        .arg(kube_version());
    for file in case["valuesFiles"].as_array().expect("valuesFiles") {
        cmd.arg("--values").arg(str_of(file));
    }
    cmd.arg("--values").arg(&values);
    for api in case["apiVersions"].as_array().expect("apiVersions") {
        cmd.arg("--api-versions").arg(str_of(api));
    }
    if case["includeCRDs"] == Value::Bool(true) {
        cmd.arg("--include-crds");
    }
    succeeded("helm template", run(&mut cmd))
}

fn str_of(v: &Value) -> &str {
    v.as_str()
        .unwrap_or_else(|| panic!("expected a string, got {v}"))
}

/// apiVersion, kind, namespace ("" when none), name.
type Identity = (String, String, String, String);

/// Kinds of the fixtures that have no namespace (an independent list, not
/// kix's): objects of any other kind without one go to the release's.
const CLUSTER_SCOPED: [&str; 6] = [
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
    "IngressClass",
    "Namespace",
    "ValidatingWebhookConfiguration",
];

fn identity(object: &Value) -> Identity {
    let field = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    (
        field(&object["apiVersion"]),
        field(&object["kind"]),
        field(&object["metadata"]["namespace"]),
        field(&object["metadata"]["name"]),
    )
}

/// The objects of a YAML stream, keyed by identity; a namespaced object
/// without a namespace gets `namespace`, as `helm install` would give it.
fn objects_of_stream(text: &str, namespace: &str) -> BTreeMap<Identity, Value> {
    let objects = kix_manifest::decode::file_objects(text.as_bytes()).expect("the output parses");
    let mut out = BTreeMap::new();
    for mut object in objects {
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        if !CLUSTER_SCOPED.contains(&kind.as_str()) && object["metadata"].get("namespace").is_none()
        {
            object["metadata"]["namespace"] = Value::String(namespace.to_owned());
        }
        let previous = out.insert(identity(&object), object);
        assert!(
            previous.is_none(),
            "a duplicate object in the tool's output"
        );
    }
    out
}

/// What kix reads from a built cluster's one package: its objects, and its
/// tests (Helm `test` hooks) apart.
struct Read {
    objects: BTreeMap<Identity, Value>,
    tests: BTreeMap<Identity, Value>,
}

fn read_build(path: &str) -> Read {
    let build = kix_manifest::read_tree(Path::new(path), &kix_manifest::ReadOptions::default())
        .unwrap_or_else(|e| panic!("kix reads {path}: {e}"));
    assert_eq!(build.packages.len(), 1, "one package per case");
    let package = &build.packages[0];
    let keyed = |objects: &[kix_manifest::Object]| {
        objects
            .iter()
            .map(|o| {
                let manifest = o.manifest();
                (identity(&manifest), manifest)
            })
            .collect()
    };
    Read {
        objects: keyed(&package.objects),
        tests: keyed(&package.tests),
    }
}

fn assert_same(what: &str, expected: &BTreeMap<Identity, Value>, got: &BTreeMap<Identity, Value>) {
    let missing: Vec<_> = expected.keys().filter(|k| !got.contains_key(*k)).collect();
    let extra: Vec<_> = got.keys().filter(|k| !expected.contains_key(*k)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{what}: not the same objects; missing from kix's package: {missing:?}; only in kix's: {extra:?}"
    );
    for (key, body) in expected {
        assert_eq!(&got[key], body, "{what}: the body of {key:?} differs");
    }
}

fn hook_of(object: &Value) -> Option<&str> {
    object["metadata"]["annotations"]["helm.sh/hook"].as_str()
}

const HELM_CASES: [&str; 7] = [
    "hookdemo-default",
    "hookdemo-values",
    "hookdemo-no-crds",
    "certwarden-default",
    "certwarden-values",
    "edge-ingress-default",
    "edge-ingress-ttl",
];

#[test]
fn rendered_packages_equal_helm_template() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let paths = build(&HELM_CASES);
    for (name, path) in HELM_CASES.iter().zip(&paths) {
        let case = case(name);
        let namespace = str_of(&case["namespace"]);
        let expected = objects_of_stream(&helm_template(&case, scratch.path()), namespace);
        assert!(
            expected.len() >= 5,
            "{name}: helm rendered too little: {expected:?}"
        );
        let read = read_build(path);
        let mut got = read.objects.clone();
        got.extend(read.tests.clone());
        assert_same(name, &expected, &got);
        // Test hooks, and only they, are set apart.
        for (key, object) in &read.tests {
            assert_eq!(
                hook_of(object),
                Some("test"),
                "{name}: {key:?} is not a test hook"
            );
        }
        for (key, object) in &read.objects {
            assert_ne!(
                hook_of(object),
                Some("test"),
                "{name}: test hook {key:?} would be deployed"
            );
        }
    }
}

/// What the cases must contain, so the equality above is about something:
/// CRDs from crds/ (only with includeCRDs), every hook kind with its
/// annotations, the kept object, values from Nix and from files.
#[test]
fn rendered_packages_hold_crds_hooks_and_values() {
    let paths = build(&["hookdemo-default", "hookdemo-values", "hookdemo-no-crds"]);
    let default = read_build(&paths[0]);
    let crd = (
        "apiextensions.k8s.io/v1".to_owned(),
        "CustomResourceDefinition".to_owned(),
        String::new(),
        "widgets.hookdemo.example.com".to_owned(),
    );
    assert!(
        default.objects.contains_key(&crd),
        "the chart's crds/ CRD is in the package"
    );
    let crd_file = Path::new(&paths[0]).join(
        "packages/hookdemo-default/resources/manifests/000-helm-demo/hookdemo/crds/widgets.yaml",
    );
    assert!(
        crd_file.is_file(),
        "crds/ keeps its own file: {}",
        crd_file.display()
    );
    let hooks: BTreeMap<&str, &str> = default
        .objects
        .iter()
        .filter_map(|(k, o)| Some((k.3.as_str(), hook_of(o)?)))
        .collect();
    assert_eq!(
        hooks,
        BTreeMap::from([
            ("demo-hookdemo-cleanup", "pre-delete"),
            ("demo-hookdemo-migrate", "pre-install,pre-upgrade"),
            ("demo-hookdemo-notify", "post-install,post-upgrade"),
        ]),
        "hooks keep their annotations"
    );
    let ledger = default
        .objects
        .iter()
        .find(|(k, _)| k.3 == "demo-hookdemo-ledger")
        .expect("the kept ledger");
    assert_eq!(
        ledger.0.2, "apps",
        "no namespace in the chart: the package's"
    );
    assert_eq!(
        ledger.1["metadata"]["annotations"]["helm.sh/resource-policy"],
        "keep"
    );
    assert_eq!(default.tests.len(), 1, "one test hook");

    let values = read_build(&paths[1]);
    let settings = values
        .objects
        .values()
        .find(|o| o["metadata"]["name"] == "shop-hookdemo-settings")
        .expect("settings");
    assert_eq!(
        settings["data"],
        serde_json::json!({"greeting": "hej", "mode": "strict", "extra": "yes: really", "port": "8080"}),
        "Nix values win over the values file, which wins over the chart's"
    );
    assert!(values.tests.is_empty(), "tests.enabled = false");

    let bare = read_build(&paths[2]);
    assert!(
        !bare
            .objects
            .keys()
            .any(|k| k.1 == "CustomResourceDefinition"),
        "includeCRDs = false leaves crds/ out"
    );
}

const KUSTOMIZE_CASES: [&str; 2] = ["kustomize-prod", "kustomize-dev"];

#[test]
fn built_overlays_equal_kustomize_build() {
    let paths = build(&KUSTOMIZE_CASES);
    for (name, path) in KUSTOMIZE_CASES.iter().zip(&paths) {
        let case = case(name);
        let mut cmd = Command::new(tools_dir().join("kustomize"));
        cmd.arg("build").arg(str_of(&case["path"]));
        let expected = objects_of_stream(&succeeded("kustomize build", run(&mut cmd)), "");
        assert!(
            expected.len() >= 3,
            "{name}: kustomize built too little: {expected:?}"
        );
        assert_same(name, &expected, &read_build(path).objects);
    }
}

/// `kix ARGS --path PATH` offline (no cluster, no Nix build).
fn kix_offline(args: &[&str], path: &str) -> Run {
    run(Command::new(common::kix_bin())
        .args(args)
        .args(["--path", path])
        .env("NO_COLOR", "1")
        .env_remove("KIX_LOG"))
}

/// #47, 6: `kix build` and `kix validate` say which package came from which
/// chart and version (or overlay), as kix.lib.helm.render and
/// kix.lib.kustomize.build recorded it in package.json.
#[test]
fn build_and_validate_name_each_packages_chart_or_overlay() {
    let paths = build(&["hookdemo-default", "kustomize-prod"]);
    let (chart, overlay) = (paths[0].as_str(), paths[1].as_str());
    let objects = read_build(chart).objects.len();

    let text = succeeded(
        "kix build (text)",
        kix_offline(&["build", "hookdemo-default"], chart),
    );
    let line = format!(
        "  hookdemo-default  1  {objects} objects, 1 Helm test hook (not deployed); from Helm chart hookdemo 0.3.1\n"
    );
    assert!(
        text.contains(&line),
        "the package's line {line:?} in:\n{text}"
    );
    let json = succeeded(
        "kix build -o json",
        kix_offline(&["build", "hookdemo-default", "-o", "json"], chart),
    );
    let json: Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(
        json["packages"][0]["source"],
        serde_json::json!({"helm": {"chart": "hookdemo", "version": "0.3.1"}}),
        "{json}"
    );
    let validated = succeeded("kix validate", kix_offline(&["validate"], chart));
    let line = format!(
        "package hookdemo-default 1 (Helm chart hookdemo 0.3.1): {objects} object(s) valid\n"
    );
    assert!(validated.contains(&line), "{line:?} in:\n{validated}");
    let report = succeeded(
        "kix validate -o json",
        kix_offline(&["validate", "-o", "json"], chart),
    );
    let report: Value = serde_json::from_str(&report).expect("JSON");
    assert_eq!(
        report["packages"][0]["source"]["helm"]["chart"], "hookdemo",
        "{report}"
    );

    let text = succeeded(
        "kix build of the overlay",
        kix_offline(&["build", "kustomize-prod"], overlay),
    );
    assert!(
        text.contains("; from Kustomize overlay kustomize/overlays/prod\n"),
        "{text}"
    );
    let validated = succeeded("kix validate", kix_offline(&["validate"], overlay));
    assert!(
        validated
            .contains("package kustomize-prod 1 (Kustomize overlay kustomize/overlays/prod): "),
        "{validated}"
    );
}

/// `helm` run directly, with its caches in `scratch`.
fn helm(scratch: &Path) -> Command {
    let home = scratch.join("home");
    let mut cmd = Command::new(tools_dir().join("helm"));
    cmd.env("HOME", &home)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"));
    cmd
}

/// An expression of kix.lib with the host-tools builder for `pkgs`.
fn nix_build_expr(expr: &str) -> Run {
    let repo = kix_testkit::repo_root();
    let prelude = format!(
        "let kix = import {}/nix {{ }}; pkgs = import {}/nix/tests/host-tools.nix {{ }}; helm = {}; in ",
        repo.display(),
        repo.display(),
        tools_dir().join("helm").display()
    );
    run(Command::new("nix-build")
        .arg("--no-out-link")
        .arg("-E")
        .arg(prelude + expr))
}

/// A chart repository on loopback (helm package, helm repo index): fetch
/// pins the archive by hash, render takes it and the chart's version.
#[test]
fn fetch_pins_a_chart_archive_from_a_repository() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let served = scratch.path().join("repo");
    let server = kix_testkit::cache_server::CacheServer::start(&served).expect("server");
    let chart = kix_testkit::repo_root().join("crates/kix-cli/tests/fixtures/charts/certwarden");
    succeeded(
        "helm package",
        run(helm(scratch.path())
            .arg("package")
            .arg(&chart)
            .arg("-d")
            .arg(&served)),
    );
    succeeded(
        "helm repo index",
        run(helm(scratch.path())
            .args(["repo", "index"])
            .arg(&served)
            .args(["--url", &server.url])),
    );
    let archive = served.join("certwarden-1.16.2.tgz");
    let hash = succeeded(
        "nix hash file",
        run(Command::new("nix")
            .args(["--extra-experimental-features", "nix-command"])
            .args(["hash", "file", "--type", "sha256", "--sri"])
            .arg(&archive)),
    );
    let fetch = |hash: &str| {
        format!(
            "kix.helm.fetch {{ inherit pkgs helm; repo = \"{}\"; chart = \"certwarden\"; version = \"1.16.2\"; hash = \"{}\"; }}",
            server.url,
            hash.trim()
        )
    };
    let fetched = succeeded("fetch", nix_build_expr(&fetch(&hash)));
    assert_eq!(
        std::fs::read(fetched.trim()).expect("the fetched archive"),
        std::fs::read(&archive).expect("the served archive"),
        "the archive exactly as served"
    );

    // Rendered from the archive: the chart's version, the same objects as
    // helm template of the archive.
    let cluster = format!(
        "kix.mkCluster {{ inherit pkgs; name = \"fetched\"; packages.certs = kix.helm.render {{ inherit pkgs helm; chart = {}; releaseName = \"certs\"; namespace = \"certs\"; kubeVersion = \"1.36.3\"; }}; }}",
        fetch(&hash)
    );
    let built = succeeded("render of the fetched chart", nix_build_expr(&cluster));
    let package =
        std::fs::read_to_string(Path::new(built.trim()).join("packages/certs/package.json"))
            .expect("package.json");
    assert!(package.contains("\"version\":\"1.16.2\""), "{package}");
    let source: Value = serde_json::from_str::<Value>(&package).expect("JSON")["source"].clone();
    assert_eq!(
        source,
        serde_json::json!({"helm": {"chart": "certwarden", "version": "1.16.2", "repo": server.url}}),
        "the chart, its version and repository recorded"
    );
    let summary = succeeded(
        "kix build of the fetched chart",
        kix_offline(&["build", "fetched"], built.trim()),
    );
    assert!(
        summary.contains(&format!(
            "; from Helm chart certwarden 1.16.2 ({})\n",
            server.url
        )),
        "{summary}"
    );
    let direct = succeeded(
        "helm template of the archive",
        run(helm(scratch.path())
            .args(["template", "certs"])
            .arg(&archive)
            .args([
                "--namespace",
                "certs",
                "--kube-version",
                "1.36.3",
                "--include-crds",
            ])),
    );
    assert_same(
        "fetched",
        &objects_of_stream(&direct, "certs"),
        &read_build(built.trim()).objects,
    );

    // Another hash: the fetch fails, naming both.
    let wrong = "sha256-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
    let refused = nix_build_expr(&fetch(wrong));
    assert_ne!(refused.code, Some(0), "{refused}");
    assert!(
        refused.stderr.contains("hash mismatch") && refused.stderr.contains(hash.trim()),
        "{refused}"
    );
}

/// The ```nix blocks of docs/migrating.md's "From Helm" and "From
/// Kustomize", each lines-trimmed.
fn migrating_doc_blocks() -> Vec<Vec<String>> {
    let doc = std::fs::read_to_string(kix_testkit::repo_root().join("docs/migrating.md"))
        .expect("docs/migrating.md");
    let start = doc.find("## From Helm").expect("a From Helm section");
    let end = doc
        .find("## From `kubectl apply`")
        .expect("a From kubectl apply section");
    let mut blocks = Vec::new();
    let mut current: Option<Vec<String>> = None;
    for line in doc[start..end].lines() {
        match (line.trim(), current.as_mut()) {
            ("```nix", None) => current = Some(Vec::new()),
            ("```", Some(_)) => blocks.extend(current.take()),
            (text, Some(block)) => block.push(text.to_owned()),
            _ => {}
        }
    }
    blocks
}

/// docs/migrating.md's examples are pieces of examples/migrating/default.nix,
/// which builds, with the pinned helm and kustomize as nixpkgs'
/// kubernetes-helm and kustomize packages (bin/helm, bin/kustomize).
#[test]
fn migrating_doc_examples_build() {
    let repo = kix_testkit::repo_root();
    let example = repo.join("examples/migrating/default.nix");
    let text = std::fs::read_to_string(&example).expect("the example");
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let blocks = migrating_doc_blocks();
    assert!(blocks.len() >= 3, "the doc lost its examples: {blocks:?}");
    for block in &blocks {
        assert!(
            lines.windows(block.len()).any(|w| w == block.as_slice()),
            "docs/migrating.md shows code that examples/migrating/default.nix does not have:\n{}",
            block.join("\n")
        );
    }

    let tools = tools_dir();
    let pkgs = format!(
        "let p = import {}/nix/tests/host-tools.nix {{ }}; \
         pkg = name: exe: p.runCommand name {{ }} \"mkdir -p $out/bin; cp ${{exe}} $out/bin/${{name}}\"; \
         in p // {{ kubernetes-helm = pkg \"helm\" {}; kustomize = pkg \"kustomize\" {}; }}",
        repo.display(),
        tools.join("helm").display(),
        tools.join("kustomize").display()
    );
    let built = succeeded(
        "nix-build examples/migrating -A kixClusters.prod",
        run(Command::new("nix-build")
            .arg("--no-out-link")
            .arg(&example)
            .args(["-A", "kixClusters.prod", "--arg", "pkgs", &pkgs])),
    );
    let build = kix_manifest::read_tree(
        Path::new(built.trim()),
        &kix_manifest::ReadOptions::default(),
    )
    .expect("kix reads the example's build");
    let manifest = |package: &str, kind: &str, name: &str| {
        build
            .package(package)
            .and_then(|p| {
                p.objects
                    .iter()
                    .find(|o| o.key.kind == kind && o.key.name == name)
            })
            .map(|o| o.manifest())
            .unwrap_or_else(|| panic!("{package} has no {kind} {name}"))
    };
    let web = manifest("web", "Deployment", "web");
    assert_eq!(web["spec"]["replicas"], 3, "values from Nix");
    assert_eq!(
        web["spec"]["template"]["spec"]["containers"][0]["image"], "registry.example.com/web:1.2.0",
        "values from the file"
    );
    assert_eq!(web["metadata"]["namespace"], "web", "the release namespace");
    assert_eq!(
        manifest("web", "Job", "web-migrate")["metadata"]["annotations"]["helm.sh/hook"],
        "pre-install,pre-upgrade"
    );
    let worker = manifest("worker", "Deployment", "worker");
    assert_eq!(worker["spec"]["replicas"], 2);
    assert_eq!(worker["metadata"]["namespace"], "worker");

    let fetched = run(Command::new("nix-instantiate").arg(&example).args([
        "-A",
        "fetched.manifests",
        "--arg",
        "pkgs",
        &pkgs,
    ]));
    assert_eq!(
        fetched.code,
        Some(0),
        "the fetch example evaluates: {fetched}"
    );
}

/// A rendered chart deploys on the test control plane: hookdemo (CRD from
/// crds/ and a Widget of it, hooks, the kept ledger, a test hook) goes
/// Active with every object the chart rendered live in the release's
/// namespace but the test hook, and a second deploy of the same build
/// succeeds too. KWOK runs the Deployment's pods and completes the Jobs'.
#[tokio::test]
async fn a_rendered_chart_deploys() {
    let env = kix_testkit::TestEnv::new("helm-render").await.expect("env");
    let scratch = tempfile::tempdir().expect("tempdir");
    let cluster = format!(
        "kix.mkCluster {{ inherit pkgs; name = \"{}\"; packages.demo = kix.helm.render {{ inherit pkgs helm; chart = {}; releaseName = \"{}\"; namespace = \"{}\"; kubeVersion = \"1.36.3\"; values.replicaCount = 2; }} // {{ version = \"0.3.1\"; }}; }}",
        env.cluster,
        kix_testkit::repo_root()
            .join("crates/kix-cli/tests/fixtures/charts/hookdemo")
            .display(),
        env.cluster,
        env.namespace,
    );
    let built = succeeded("nix-build of the chart's cluster", nix_build_expr(&cluster));
    let path = built.trim();
    let kubeconfig = kix_testkit::kubeconfig_path();
    let gcroots = scratch.path().join("gcroots");
    for attempt in ["first", "second"] {
        let deployed = run(common::kix(&kubeconfig, &gcroots).args([
            "deploy",
            &env.cluster,
            "--path",
            path,
            "--yes",
        ]));
        assert_eq!(deployed.code, Some(0), "{attempt} deploy: {deployed}");
    }
    let release = format!("{}-hookdemo", env.cluster);
    let replicas = env
        .kubectl(&[
            "get",
            "deployment",
            &release,
            "-n",
            &env.namespace,
            "-o",
            "jsonpath={.spec.replicas}",
        ])
        .expect("the Deployment");
    assert_eq!(replicas.trim(), "2", "values from Nix");
    for (kind, name) in [
        ("widgets.hookdemo.example.com", release.clone()),
        ("configmap", format!("{release}-ledger")),
        ("configmap", format!("{release}-settings")),
        ("service", release.clone()),
    ] {
        env.kubectl(&["get", kind, &name, "-n", &env.namespace])
            .unwrap_or_else(|e| panic!("{kind} {name} is live: {e}"));
    }
    let test_pod = env.kubectl(&[
        "get",
        "pod",
        &format!("{release}-test-connection"),
        "-n",
        &env.namespace,
    ]);
    assert!(
        test_pod.is_err(),
        "the test hook was deployed: {test_pod:?}"
    );
}

/// Each call of nix/tests/chart-throws.nix fails evaluation with a message
/// naming the function, the release or chart, and the argument at fault.
#[test]
fn wrong_arguments_name_what_is_wrong() {
    let file = kix_testkit::repo_root().join("nix/tests/chart-throws.nix");
    let expect = succeeded(
        "the expected messages",
        run(Command::new("nix-instantiate")
            .args(["--eval", "--strict", "--json", "-E"])
            .arg(format!(
                "builtins.mapAttrs (n: c: c.expect) (import {} {{ }})",
                file.display()
            ))),
    );
    let cases: BTreeMap<String, Vec<String>> = serde_json::from_str(&expect).expect("cases");
    assert!(cases.len() >= 3, "{cases:?}");
    for (name, parts) in &cases {
        let out = run(Command::new("nix-instantiate")
            .args(["--eval", "-E"])
            .arg(format!(
                "builtins.seq (import {} {{ }}).{name}.value true",
                file.display()
            )));
        assert_ne!(out.code, Some(0), "{name} evaluated: {out}");
        for part in parts {
            assert!(
                out.stderr.contains(part.as_str()),
                "{name}: the message lacks {part:?}: {out}"
            );
        }
    }
}

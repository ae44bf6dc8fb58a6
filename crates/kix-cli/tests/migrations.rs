//! `kix plan` / `kix deploy` with migrations and replaces, through the real
//! binary against the local control plane (`checks/control-plane up`):
//! immutable fields (StatefulSet selector, Service clusterIP, Job template)
//! refused without `--accept-migrations` (exit 1, object and field named,
//! nothing written), then recreated; adoption of a ConfigMap made with
//! kubectl; a version jump whose plan lists two migrations in order, run in
//! that order; the PackageInstance record at the end.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use kix_testkit::TestEnv;
use kix_testkit::audit;
use serde_json::{Value, json};

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    #[track_caller]
    fn code(self, code: i32) -> Run {
        assert_eq!(
            self.code,
            Some(code),
            "expected exit {code}\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        self
    }
}

/// One test: its namespace, Kix cluster, GC roots and trees.
struct T {
    env: TestEnv,
    roots: PathBuf,
    dir: tempfile::TempDir,
}

impl T {
    async fn new(test: &str) -> T {
        let env = TestEnv::new(test)
            .await
            .expect("test env (checks/control-plane up)");
        let roots = PathBuf::from(format!("/nix/var/nix/gcroots/kix-test-{}", env.cluster));
        T {
            env,
            roots,
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn ns(&self) -> &str {
        &self.env.namespace
    }

    fn cluster(&self) -> &str {
        &self.env.cluster
    }

    fn kix(&self, args: &[&str]) -> Run {
        let out = Command::new(env!("CARGO_BIN_EXE_kix"))
            .args(args)
            .env_remove("KIX_LOG")
            .env("NO_COLOR", "1")
            .env("KIX_OFFLINE", "true")
            .env("KUBECONFIG", kix_testkit::kubeconfig_path())
            .env("KIX_GCROOTS_DIR", &self.roots)
            .stdin(Stdio::null())
            .output()
            .expect("kix runs");
        Run {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// A tree `name` with one package `web` at `version` in the test's
    /// namespace; `resources` is YAML.
    fn tree(&self, name: &str, version: &str, migrations: Value, resources: &str) -> PathBuf {
        let root = self.dir.path().join(name);
        let package = root.join("packages/web");
        std::fs::create_dir_all(package.join("resources")).expect("mkdir");
        std::fs::write(
            root.join("kix.json"),
            json!({"format": 1, "cluster": self.cluster(), "packages": ["web"], "settings": {}})
                .to_string(),
        )
        .expect("kix.json");
        std::fs::write(
            package.join("package.json"),
            json!({"name": "web", "version": version, "dependsOn": [], "namespace": self.ns(),
                   "migrations": migrations})
            .to_string(),
        )
        .expect("package.json");
        std::fs::write(package.join("resources/objects.yaml"), resources).expect("resources");
        root
    }

    fn deploy(&self, tree: &Path, extra: &[&str]) -> Run {
        let path = tree.to_str().expect("utf-8 path");
        let mut args = vec![
            "deploy",
            self.cluster(),
            "--path",
            path,
            "--yes",
            "--timeout",
            "60s",
        ];
        args.extend_from_slice(extra);
        self.kix(&args)
    }

    fn plan(&self, tree: &Path, extra: &[&str]) -> Run {
        let path = tree.to_str().expect("utf-8 path");
        let mut args = vec!["plan", self.cluster(), "--path", path];
        args.extend_from_slice(extra);
        self.kix(&args)
    }

    fn get(&self, kind: &str, name: &str) -> Option<Value> {
        let out = kix_testkit::kubectl_output(&["get", kind, "-n", self.ns(), name, "-o", "json"])
            .ok()?;
        serde_json::from_str(&out).ok()
    }

    fn uid(&self, kind: &str, name: &str) -> String {
        let obj = self
            .get(kind, name)
            .unwrap_or_else(|| panic!("{kind} {name} missing"));
        obj["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// Writes since `mark` in the test's namespace or to this cluster's
    /// records (the audit log; dry-runs excluded).
    fn writes(&self, mark: audit::Mark) -> Vec<String> {
        audit::since(mark)
            .expect("audit log")
            .into_iter()
            .filter(|r| r.is_write())
            .filter(|r| {
                r.namespace.as_deref() == Some(self.ns())
                    || r.name
                        .as_deref()
                        .is_some_and(|n| n.starts_with(&format!("{}-", self.cluster())))
            })
            .map(|r| format!("{} {} {:?}", r.verb, r.resource, r.name))
            .collect()
    }

    fn activations(&self) -> usize {
        let out = kix_testkit::kubectl_output(&[
            "get",
            "activations.kix.run",
            "-l",
            &format!("kix.run/cluster={}", self.cluster()),
            "-o",
            "name",
        ])
        .unwrap_or_default();
        out.lines().filter(|l| !l.trim().is_empty()).count()
    }
}

impl Drop for T {
    fn drop(&mut self) {
        let selector = format!("kix.run/cluster={}", self.cluster());
        for kind in ["activations.kix.run", "packageinstances.kix.run"] {
            let _ = kix_testkit::kubectl_output(&["delete", kind, "-l", &selector, "--wait=false"]);
        }
        let _ = kix_testkit::kubectl_output(&["delete", "namespace", self.ns(), "--wait=false"]);
        let _ = std::fs::remove_dir_all(&self.roots);
    }
}

fn statefulset(app: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {{name: db}}\nspec:\n  replicas: 0\n  selector: {{matchLabels: {{app: {app}}}}}\n  template:\n    metadata: {{labels: {{app: {app}}}}}\n    spec: {{containers: [{{name: main, image: \"example.invalid/db:1\"}}]}}\n"
    )
}

fn job(image: &str) -> String {
    format!(
        "apiVersion: batch/v1\nkind: Job\nmetadata: {{name: migrate}}\nspec:\n  suspend: true\n  template:\n    spec: {{restartPolicy: Never, containers: [{{name: main, image: \"{image}\"}}]}}\n"
    )
}

fn service(ip: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: web}}\nspec: {{clusterIP: {ip}, ports: [{{port: 80}}]}}\n"
    )
}

fn configmap(name: &str, value: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: {{v: \"{value}\"}}\n"
    )
}

/// Refused without `--accept-migrations`: exit 1 naming every `needle`,
/// nothing written, no record made.
#[track_caller]
fn assert_refused(t: &T, tree: &Path, needles: &[&str]) {
    let records = t.activations();
    let mark = audit::mark().expect("mark");
    let run = t.deploy(tree, &[]).code(1);
    for needle in needles {
        assert!(
            run.stderr.contains(needle),
            "stderr names {needle:?}:\n{}",
            run.stderr
        );
    }
    assert!(run.stderr.contains("--accept-migrations"), "{}", run.stderr);
    let writes = t.writes(mark);
    assert!(writes.is_empty(), "a refused deploy wrote: {writes:#?}");
    assert_eq!(t.activations(), records, "no record for a refused deploy");
}

#[tokio::test]
async fn statefulset_selector_change_is_refused_then_recreated() {
    let t = T::new("cli-mig-sts").await;
    let v1 = t.tree("v1", "1.0.0", json!([]), &statefulset("db"));
    t.deploy(&v1, &[]).code(0);
    let before = t.uid("statefulset", "db");

    let v2 = t.tree("v2", "1.0.1", json!([]), &statefulset("db2"));
    let field = format!(
        "replace StatefulSet.apps {}/db (spec.selector.matchLabels.app)",
        t.ns()
    );
    let plan = t.plan(&v2, &[]).code(0);
    assert!(
        plan.stdout.contains("replace   StatefulSet.apps"),
        "{}",
        plan.stdout
    );
    assert!(
        plan.stdout.contains("(spec.selector.matchLabels.app)"),
        "{}",
        plan.stdout
    );
    assert_refused(&t, &v2, &[&field]);
    assert_eq!(t.uid("statefulset", "db"), before, "nothing changed");

    t.deploy(&v2, &["--accept-migrations"]).code(0);
    assert_ne!(t.uid("statefulset", "db"), before, "recreated");
    let sts = t.get("statefulset", "db").expect("sts");
    assert_eq!(sts["spec"]["selector"]["matchLabels"]["app"], "db2");
}

#[tokio::test]
async fn job_template_and_service_cluster_ip_changes_are_replaces() {
    let t = T::new("cli-mig-job").await;
    let ips = kix_testkit::kubectl_output(&[
        "get",
        "services",
        "-A",
        "-o",
        "jsonpath={.items[*].spec.clusterIP}",
    ])
    .expect("list services");
    let used: Vec<&str> = ips.split_whitespace().collect();
    // The static band at the bottom of 10.0.0.0/24: allocated from last.
    let mut free = (0..14u32)
        .map(|i| format!("10.0.0.{}", 2 + (std::process::id() + 7 + i) % 14))
        .filter(|ip| !used.contains(&ip.as_str()));
    let (ip1, ip2) = (free.next().expect("free ip"), free.next().expect("free ip"));

    let v1 = t.tree(
        "v1",
        "1.0.0",
        json!([]),
        &format!("{}---\n{}", job("example.invalid/m:1"), service(&ip1)),
    );
    t.deploy(&v1, &[]).code(0);
    let (job_uid, svc_uid) = (t.uid("job", "migrate"), t.uid("service", "web"));

    let v2 = t.tree(
        "v2",
        "1.0.0",
        json!([]),
        &format!("{}---\n{}", job("example.invalid/m:2"), service(&ip2)),
    );
    let job_field = format!(
        "replace Job.batch {}/migrate (spec.template.spec.containers[0].image)",
        t.ns()
    );
    let svc_field = format!("replace Service {}/web (spec.clusterIPs[0])", t.ns());
    assert_refused(&t, &v2, &[&job_field, &svc_field]);
    assert_eq!(t.uid("job", "migrate"), job_uid);
    assert_eq!(t.uid("service", "web"), svc_uid);

    t.deploy(&v2, &["--accept-migrations"]).code(0);
    assert_ne!(t.uid("job", "migrate"), job_uid);
    assert_ne!(t.uid("service", "web"), svc_uid);
    assert_eq!(
        t.get("service", "web").expect("svc")["spec"]["clusterIP"],
        ip2.as_str()
    );
}

#[tokio::test]
async fn adopting_a_configmap_made_with_kubectl() {
    let t = T::new("cli-mig-adopt").await;
    kix_testkit::kubectl_output(&[
        "create",
        "configmap",
        "legacy",
        "-n",
        t.ns(),
        "--from-literal=v=hand",
    ])
    .expect("kubectl create");
    let before = t.get("configmap", "legacy").expect("made by kubectl");

    let v1 = t.tree("v1", "1.0.0", json!([]), &configmap("legacy", "build"));
    let plan = t.plan(&v1, &[]).code(0);
    assert!(
        plan.stdout
            .contains(&format!("adopt     ConfigMap {}/legacy", t.ns())),
        "{}",
        plan.stdout
    );
    assert_refused(&t, &v1, &[&format!("adopt ConfigMap {}/legacy", t.ns())]);
    let unchanged = t.get("configmap", "legacy").expect("still there");
    assert_eq!(
        unchanged["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );
    assert_eq!(unchanged["data"]["v"], "hand");

    t.deploy(&v1, &["--accept-migrations"]).code(0);
    let after = t.get("configmap", "legacy").expect("adopted");
    assert_eq!(
        after["metadata"]["uid"], before["metadata"]["uid"],
        "the same object"
    );
    assert_eq!(after["data"]["v"], "build");
    assert_eq!(
        after["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "kix"
    );
    // Owned now: an unchanged redeploy needs nothing accepted.
    let again = t.deploy(&v1, &[]).code(0);
    assert!(again.stdout.contains("nothing to do"), "{}", again.stdout);
}

#[tokio::test]
async fn a_version_jump_shows_and_runs_two_migrations_in_order() {
    let t = T::new("cli-mig-jump").await;
    let objects =
        |second: &str| format!("{}{}", configmap("first", "1"), configmap("second", second));
    let v1 = t.tree("v1", "1.0.0", json!([]), &objects("1"));
    t.deploy(&v1, &[]).code(0);
    let (first, second) = (t.uid("configmap", "first"), t.uid("configmap", "second"));

    let v3 = t.tree(
        "v3",
        "3.0.0",
        json!([
            {"from": "2.x", "to": "3.0.0", "description": "second moves",
             "actions": [{"action": "recreate", "object": {"kind": "ConfigMap", "name": "second"}}]},
            {"from": ">=1.0.0 <2.0.0", "to": "2.0.0", "description": "first moves",
             "actions": [{"action": "recreate", "object": {"kind": "ConfigMap", "name": "first"}}]},
        ]),
        &objects("3"),
    );
    let plan = t.plan(&v3, &[]).code(0);
    let text = &plan.stdout;
    assert!(
        text.contains("migrations (installed 1.0.0 -> 3.0.0; need --accept-migrations)"),
        "{text}"
    );
    let one = text
        .find("migration >=1.0.0 <2.0.0 -> 2.0.0: first moves")
        .unwrap_or_else(|| panic!("{text}"));
    let two = text
        .find("migration 2.x -> 3.0.0: second moves")
        .unwrap_or_else(|| panic!("{text}"));
    assert!(one < two, "in order:\n{text}");
    assert!(
        text.contains(&format!("recreate  ConfigMap {}/first", t.ns())),
        "{text}"
    );
    assert!(text.contains("2 migrations to run"), "{text}");
    let json_plan: Value =
        serde_json::from_str(&t.plan(&v3, &["-o", "json"]).code(0).stdout).expect("json plan");
    let tos: Vec<&str> = json_plan["migrations"]
        .as_array()
        .expect("migrations")
        .iter()
        .filter_map(|m| m["to"].as_str())
        .collect();
    assert_eq!(tos, ["2.0.0", "3.0.0"]);
    assert_eq!(json_plan["migrations"][0]["installed"], "1.0.0");
    assert_eq!(
        json_plan["migrations"][0]["actions"][0]["action"],
        "recreate"
    );

    assert_refused(
        &t,
        &v3,
        &[
            "migration web >=1.0.0 <2.0.0 -> 2.0.0: recreate ConfigMap",
            "migration web 2.x -> 3.0.0",
        ],
    );
    assert_eq!(t.uid("configmap", "first"), first);

    let mark = audit::mark().expect("mark");
    t.deploy(&v3, &["--accept-migrations"]).code(0);
    let writes = t.writes(mark);
    let delete_of = |name: &str| {
        writes
            .iter()
            .position(|w| w.starts_with("delete configmaps") && w.contains(&format!("\"{name}\"")))
            .unwrap_or_else(|| panic!("no delete of {name}: {writes:#?}"))
    };
    assert!(delete_of("first") < delete_of("second"), "{writes:#?}");
    assert_ne!(t.uid("configmap", "first"), first);
    assert_ne!(t.uid("configmap", "second"), second);

    let out = kix_testkit::kubectl_output(&[
        "get",
        "packageinstances.kix.run",
        &format!("{}.web", t.cluster()),
        "-o",
        "json",
    ])
    .expect("packageinstance");
    let pi: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(pi["spec"]["version"], "3.0.0");
    assert_eq!(pi["status"]["phase"], "Ready");
    assert_eq!(pi["status"]["resources"], 2);
}

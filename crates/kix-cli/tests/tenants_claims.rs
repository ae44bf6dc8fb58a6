//! What one tenant can claim of another (#43, findings 4 and 2), against a
//! control plane of the test's own (the admission policy is cluster-wide),
//! with the tenants granted exactly what docs/operator.md's "Several teams,
//! one operator" grants: its `tenants.json`, `team-a.yaml` (and the same for
//! team-b), `writers.yaml` and `operator-tenants.yaml`, read from the page.
//!
//! - A record's name is its own Kix cluster's (`<cluster>-<n>`): the
//!   apiserver refuses a record that takes another Kix cluster's next name,
//!   and a squatter made before the policy is named, never numbered past.
//! - An object's `kix.run/activations` claim on a record counts only when
//!   the record's build has the object: a tenant's decoy claiming another
//!   tenant's record is ignored (an Event names it), never read, pruned or
//!   released as that record's, and never fails it.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use kix_testkit::PrivateControlPlane;
use serde_json::{Value, json};

/// A file block (```` ```lang file=NAME ````) of the page's tenants section.
fn doc_file(name: &str) -> String {
    let page = std::fs::read_to_string(kix_testkit::repo_root().join("docs/operator.md"))
        .expect("docs/operator.md");
    let section = page
        .split_once("## Several teams, one operator")
        .expect("the tenants section")
        .1;
    let marker = format!("file={name}\n");
    let start = section
        .find(&marker)
        .unwrap_or_else(|| panic!("docs/operator.md has no block file={name}"))
        + marker.len();
    let body = &section[start..];
    body[..body.find("```").expect("the block ends")].to_string()
}

/// Who runs a kubectl command: the admin, or a user with groups.
#[derive(Clone, Copy)]
enum As<'a> {
    Admin,
    User(&'a str, &'a [&'a str]),
}

/// alice, in group team-a: a writer of team-a's records (tenants.json).
const ALICE: As = As::User("alice", &["team-a"]);
/// bob: a writer of team-b's records, by name.
const BOB: As = As::User("bob", &[]);
/// tina, in group team: a writer of Kix cluster `team` (added to the page's
/// declaration), whose name is a prefix of team-a's and team-b's.
const TINA: As = As::User("tina", &["team"]);

struct Platform {
    cp: PrivateControlPlane,
    dir: tempfile::TempDir,
}

impl Platform {
    fn start() -> Platform {
        Platform {
            cp: PrivateControlPlane::start(),
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn kubeconfig(&self) -> PathBuf {
        self.cp.kubeconfig()
    }

    fn kubectl(&self, who: As, args: &[&str], stdin: Option<&str>) -> Output {
        let mut cmd = Command::new(kix_testkit::kubectl());
        cmd.arg("--kubeconfig").arg(self.kubeconfig());
        if let As::User(user, groups) = who {
            cmd.args(["--as", user]);
            for group in groups {
                cmd.args(["--as-group", group]);
            }
        }
        cmd.args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("kubectl runs");
        if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
            use std::io::Write;
            pipe.write_all(text.as_bytes()).expect("kubectl's stdin");
        }
        child.wait_with_output().expect("kubectl finishes")
    }

    /// `kubectl apply -f -` of `yaml` as the admin, which must work.
    fn apply(&self, yaml: &str, what: &str) {
        let out = self.kubectl(As::Admin, &["apply", "-f", "-"], Some(yaml));
        assert!(out.status.success(), "{what}: {}", stderr(&out));
    }

    /// kix's CRDs (`kix crds`, `--tenants` the page's declaration plus
    /// Kix cluster `team`), Established.
    fn install(&self, policy: bool) {
        let mut cmd = Command::new(common::kix_bin());
        cmd.arg("crds");
        if policy {
            let file = self.dir.path().join("tenants.json");
            std::fs::write(&file, tenants_json()).expect("tenants.json");
            cmd.arg("--tenants").arg(file);
        }
        let out = cmd.output().expect("kix crds runs");
        assert!(out.status.success(), "kix crds: {}", stderr(&out));
        self.apply(&String::from_utf8_lossy(&out.stdout), "kix crds");
        let out = self.kubectl(
            As::Admin,
            &[
                "wait",
                "--for=condition=Established",
                "crd/activations.kix.run",
                "crd/packageinstances.kix.run",
                "--timeout=60s",
            ],
            None,
        );
        assert!(out.status.success(), "CRDs Established: {}", stderr(&out));
    }

    /// The page's RBAC for team-a, the same for team-b, and its writers.
    fn grant_tenants(&self) {
        self.grant_tenants_reading(true);
    }

    /// [`Platform::grant_tenants`]; team-b reads ConfigMaps cluster-wide
    /// (as the page's ClusterRole grants) or, `false`, in its namespace
    /// only (the page: "A Role is enough").
    fn grant_tenants_reading(&self, team_b_everywhere: bool) {
        let team_a = doc_file("team-a.yaml");
        self.apply(&team_a, "team-a.yaml");
        let mut team_b = team_a.replace("team-a", "team-b");
        if !team_b_everywhere {
            let everywhere = "resources: [configmaps, namespaces]";
            assert!(
                team_b.contains(everywhere),
                "the page's ClusterRole changed"
            );
            team_b = team_b.replace(everywhere, "resources: [namespaces]");
        }
        self.apply(&team_b, "team-b.yaml");
        self.apply(&doc_file("writers.yaml"), "writers.yaml");
        // tina writes records as the page lets team-a's group (writers.yaml).
        let tina = doc_file("writers.yaml")
            .replace("kix-records-writer}", "kix-records-writer-team}")
            .replace("name: team-a}", "name: team}");
        self.apply(&tina, "writers for group team");
    }

    /// The apiserver loads a new policy asynchronously: bob creating a
    /// record of team-a (not his) is refused once it is enforced (each try
    /// under a new name).
    fn wait_for_policy(&self) {
        let started = Instant::now();
        for n in 0.. {
            let probe = activation(&format!("team-a-{}", 9000 + n), "team-a", "team-a");
            let out = self.kubectl(BOB, &["create", "-f", "-"], Some(&probe));
            if stderr(&out).contains("ValidatingAdmissionPolicy") {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "kix's admission policy not enforced within 60 s (last answer: {})",
                stderr(&out)
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn kix(&self) -> Command {
        common::kix(&self.kubeconfig(), &self.dir.path().join("gcroots"))
    }

    /// `kix deploy <cluster> --path <build> --yes` (`--operator` if asked).
    fn deploy(&self, cluster: &str, build: &str, operator: bool) -> common::Run {
        let mut cmd = self.kix();
        cmd.args(["deploy", cluster, "--path", build, "--yes"]);
        if operator {
            cmd.arg("--operator");
        }
        common::run(&mut cmd)
    }

    /// A build of Kix cluster `cluster` acting as `<namespace>/kix`: one
    /// ConfigMap `settings` in `namespace`, `value` in its data.
    fn build(&self, cluster: &str, namespace: &str, value: &str) -> String {
        let root = self
            .dir
            .path()
            .join(format!("build-{cluster}-{namespace}-{value}"));
        let cm = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings}}\ndata: {{value: {value}}}\n"
        );
        common::write_tree(
            &root,
            cluster,
            &[common::Pkg {
                name: "web".into(),
                depends_on: vec![],
                namespace: namespace.into(),
                files: vec![("cm.yaml".into(), cm.into_bytes())],
            }],
        );
        let kix_json = root.join("kix.json");
        let mut head: Value =
            serde_json::from_str(&std::fs::read_to_string(&kix_json).expect("kix.json"))
                .expect("json");
        head["settings"]["serviceAccount"] = json!({"namespace": namespace, "name": "kix"});
        std::fs::write(&kix_json, head.to_string()).expect("kix.json");
        common::add_to_store(&root)
    }

    async fn phase(&self, name: &str) -> Option<kix_api::Phase> {
        let client = common::client_for(&self.kubeconfig()).await;
        let api: kube::Api<kix_api::Activation> = kube::Api::all(client);
        api.get_opt(name).await.expect("reading a record")?.phase()
    }
}

/// The page's declaration, plus Kix cluster `team` (writers: group team,
/// acting as `team/kix`).
fn tenants_json() -> String {
    let mut tenants: Value = serde_json::from_str(&doc_file("tenants.json")).expect("json");
    tenants["clusters"]["team"] =
        json!({"groups": ["team"], "serviceAccount": {"namespace": "team", "name": "kix"}});
    tenants.to_string()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// An Activation named `name` of Kix cluster `cluster` (label and
/// spec.cluster), acting as `<account_ns>/kix`.
fn activation(name: &str, cluster: &str, account_ns: &str) -> String {
    json!({"apiVersion": "kix.run/v1alpha1", "kind": "Activation",
           "metadata": {"name": name, "labels": {"kix.run/cluster": cluster,
                                                  "app.kubernetes.io/managed-by": "kix"}},
           "spec": {"cluster": cluster, "engine": "local",
                    "serviceAccount": {"namespace": account_ns, "name": "kix"},
                    "source": {"path": "/nix/store/0123456789abcdfghijklmnpqrsvwxyz-kix-test"},
                    "receipt": {"user": "u", "host": "h", "kixVersion": "0.1.0",
                                "time": "2026-01-02T03:04:05Z", "planDigest": "sha256:00"}}})
    .to_string()
}

/// A PackageInstance named `name` of Kix cluster `cluster`, package `package`.
fn package_instance(name: &str, cluster: &str, package: &str) -> String {
    json!({"apiVersion": "kix.run/v1alpha1", "kind": "PackageInstance",
           "metadata": {"name": name, "labels": {"kix.run/cluster": cluster,
                                                  "kix.run/package": package,
                                                  "app.kubernetes.io/managed-by": "kix"}},
           "spec": {"cluster": cluster, "package": package, "version": "1",
                    "activation": format!("{cluster}-1")}})
    .to_string()
}

fn assert_name_refused(platform: &Platform, who: As, object: &str, name: &str, form: &str) {
    let out = platform.kubectl(who, &["create", "-f", "-"], Some(object));
    let err = stderr(&out);
    assert!(!out.status.success(), "{name} was created");
    assert!(
        err.contains("ValidatingAdmissionPolicy")
            && err.contains(&format!("is named {form}, not {name}"))
            && err.contains("may not take another Kix cluster's record name"),
        "{name}: refused, but not by kix's name rule:\n{err}"
    );
}

fn assert_created(platform: &Platform, who: As, object: &str, what: &str) {
    let out = platform.kubectl(who, &["create", "-f", "-"], Some(object));
    assert!(out.status.success(), "{what}: {}", stderr(&out));
}

/// A writer of team-a cannot create a record under team-b's next name (nor
/// any name not `team-a-<n>`, nor a PackageInstance not `team-a.<package>`);
/// Kix cluster `team` cannot take `team-b-3` (`b-3` is no number). A
/// squatter made before the policy is named by team-b's deploy (local and
/// `--operator`), which numbers nothing past it; once the platform removes
/// it, team-b deploys. Records written before the policy keep working.
#[tokio::test]
async fn a_record_is_named_after_its_own_kix_cluster() {
    let platform = Platform::start();
    platform.install(false);
    platform.grant_tenants();
    // Before the policy (an upgrade of a platform that had none): team-b
    // deploys once, and someone of team-a takes team-b's next name.
    let v1 = platform.build("team-b", "team-b", "one");
    let run = platform.deploy("team-b", &v1, false);
    assert_eq!(run.code, Some(0), "team-b deploys: {run}");
    assert_created(
        &platform,
        ALICE,
        &activation("team-b-2", "team-a", "team-a"),
        "a squatter before the policy",
    );
    platform.install(true);
    platform.wait_for_policy();

    // The squatter made before: named, not numbered past, changing nothing.
    let v2 = platform.build("team-b", "team-b", "two");
    for operator in [false, true] {
        let run = platform.deploy("team-b", &v2, operator);
        let text = run.to_string();
        assert_eq!(run.code, Some(1), "deploy past a squatter: {run}");
        assert!(
            text.contains(
                "activation team-b-2 is Kix cluster \"team-b\"'s next record name, but a record of Kix cluster \"team-a\" holds it"
            ) && text.contains("kubectl delete activation team-b-2"),
            "the squatter is named (operator: {operator}): {text}"
        );
        assert!(!text.contains("raced"), "{text}");
    }
    assert_eq!(platform.phase("team-b-3").await, None, "no record past it");
    // team-b's writer may not remove it; the platform may.
    let out = platform.kubectl(BOB, &["delete", "activation", "team-b-2"], None);
    assert!(!out.status.success(), "bob deleted team-a's record");

    // No new squatter: team-b's next names, any name not team-a's form, a
    // PackageInstance of team-b's, and `team` taking team-b's form.
    for name in ["team-b-3", "team-b-30"] {
        let object = activation(name, "team-a", "team-a");
        assert_name_refused(&platform, ALICE, &object, name, "team-a-<number>");
    }
    for name in ["team-a-03", "team-a-3x", "team-a--3", "xteam-a-3"] {
        let object = activation(name, "team-a", "team-a");
        assert_name_refused(&platform, ALICE, &object, name, "team-a-<number>");
    }
    let object = activation("team-b-3", "team", "team");
    assert_name_refused(&platform, TINA, &object, "team-b-3", "team-<number>");
    let object = package_instance("team-b.web", "team-a", "web");
    assert_name_refused(&platform, ALICE, &object, "team-b.web", "team-a.<package>");
    let object = package_instance("team-a.web", "team-a", "api");
    assert_name_refused(&platform, ALICE, &object, "team-a.web", "team-a.<package>");
    // Their own names are theirs.
    let own = [
        (TINA, activation("team-3", "team", "team")),
        (ALICE, activation("team-a-7", "team-a", "team-a")),
        (ALICE, package_instance("team-a.api", "team-a", "api")),
    ];
    for (who, object) in own {
        assert_created(&platform, who, &object, "a record under its own name");
    }
    // The record written before the policy is still written to (status).
    let patch = r#"{"status": {"message": "still written"}}"#;
    let out = platform.kubectl(
        As::Admin,
        &[
            "patch",
            "activation",
            "team-b-1",
            "--subresource=status",
            "--type=merge",
            "-p",
            patch,
        ],
        None,
    );
    assert!(out.status.success(), "status of team-b-1: {}", stderr(&out));

    // The platform removes the squatter: team-b deploys its next record.
    let out = platform.kubectl(As::Admin, &["delete", "activation", "team-b-2"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let run = platform.deploy("team-b", &v2, false);
    assert_eq!(run.code, Some(0), "team-b deploys: {run}");
    assert_eq!(
        platform.phase("team-b-2").await,
        Some(kix_api::Phase::Active),
        "{run}"
    );
}

/// team-a's decoy: a ConfigMap in team-a's namespace that looks like kix's
/// (managed-by, an owner label naming its own identity, a package) and
/// claims team-b's record `claimed`. alice may write it; team-b's account
/// may read it (the page grants configmaps get/list/watch cluster-wide) but
/// not change or delete it.
fn plant_decoy(platform: &Platform, claimed: &str) {
    let owner = kix_api::owner_value("", "ConfigMap", Some("team-a"), "decoy");
    // Every label kix looks for, team-b's own included: plans find it.
    let team_b = kix_api::labels::cluster_label("team-b");
    let decoy = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "decoy", "namespace": "team-a",
                     "labels": {"app.kubernetes.io/managed-by": "kix", "kix.run/owner": owner,
                                "kix.run/package": "web", team_b: "true"},
                     "annotations": {"kix.run/activations": claimed}},
        "data": {"value": "team-a's"}});
    assert_created(platform, ALICE, &decoy.to_string(), "alice's decoy");
}

/// The decoy, unchanged: its data and its claim as alice wrote them.
fn assert_decoy_untouched(platform: &Platform, claimed: &str) {
    let out = platform.kubectl(
        As::Admin,
        &["get", "configmap", "decoy", "-n", "team-a", "-o", "json"],
        None,
    );
    assert!(out.status.success(), "the decoy is gone: {}", stderr(&out));
    let decoy: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(decoy["data"]["value"], "team-a's");
    assert_eq!(
        decoy["metadata"]["annotations"]["kix.run/activations"],
        claimed
    );
}

/// The notes of the Events on record `name` with `reason`.
fn events(platform: &Platform, name: &str, reason: &str) -> Vec<String> {
    let selector = format!("involvedObject.name={name},reason={reason}");
    let out = platform.kubectl(
        As::Admin,
        &[
            "get",
            "events",
            "-A",
            "--field-selector",
            &selector,
            "-o",
            "json",
        ],
        None,
    );
    assert!(out.status.success(), "events: {}", stderr(&out));
    let list: Value = serde_json::from_slice(&out.stdout).expect("json");
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["message"].as_str().map(str::to_string))
        .collect()
}

/// Polls `check` every half second for `within`, panicking with `what`.
async fn eventually<T>(what: &str, within: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(
            started.elapsed() < within,
            "gave up after {within:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A tenant's object that claims another tenant's record (finding 2): the
/// operator ignores the claim (an Event on the record names the object),
/// the record stays Active across resyncs, and deleting it completes
/// without touching the object. team-b may read it (the page's grants).
#[tokio::test]
async fn a_claim_planted_by_another_tenant_changes_nothing_of_the_record_it_names() {
    planted_claim(true).await;
}

/// The same, team-b reading only its namespace: the decoy is never read
/// as team-b's account (it would be refused, and fail the record).
#[tokio::test]
async fn a_claim_on_a_record_whose_account_may_not_read_the_object_changes_nothing() {
    planted_claim(false).await;
}

async fn planted_claim(team_b_reads_everywhere: bool) {
    let platform = Platform::start();
    platform.install(true);
    platform.grant_tenants_reading(team_b_reads_everywhere);
    platform.wait_for_policy();
    let _operator = common::Operator::start_with(
        &platform.kubeconfig(),
        &["team-a", "team-b"],
        "kube-system",
        "kix-operator",
        platform.dir.path().join("operator.log"),
        None,
        &["--require-service-account"],
    );
    let build = platform.build("team-b", "team-b", "one");
    let run = platform.deploy("team-b", &build, true);
    assert_eq!(
        run.code,
        Some(0),
        "team-b deploys through the operator: {run}"
    );
    assert_eq!(
        platform.phase("team-b-1").await,
        Some(kix_api::Phase::Active)
    );

    plant_decoy(&platform, "team-b-1");
    let note = eventually(
        "an Event on team-b-1 naming the decoy",
        Duration::from_secs(30),
        || {
            events(&platform, "team-b-1", "ClaimIgnored")
                .into_iter()
                .find(|n| n.contains("ConfigMap team-a/decoy claims team-b-1"))
        },
    )
    .await;
    assert!(note.contains("not in its build"), "{note}");
    // Over two resyncs (10 s each in tests): still Active, nothing said on
    // the record, the decoy untouched.
    let until = Instant::now() + Duration::from_secs(22);
    while Instant::now() < until {
        let client = common::client_for(&platform.kubeconfig()).await;
        let api: kube::Api<kix_api::Activation> = kube::Api::all(client);
        let record = api.get("team-b-1").await.expect("team-b-1");
        let status = record.status.clone().unwrap_or_default();
        assert_eq!(status.phase, Some(kix_api::Phase::Active), "{status:?}");
        assert!(status.failed_deletions.is_empty(), "{status:?}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_decoy_untouched(&platform, "team-b-1");
    let notes = events(&platform, "team-b-1", "ClaimIgnored");
    assert_eq!(notes.len(), 1, "reported once: {notes:?}");

    // The record's deletion completes; team-b's object goes, the decoy stays.
    let out = platform.kubectl(
        As::Admin,
        &["delete", "activation", "team-b-1", "--wait=false"],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    eventually(
        "team-b-1's finalizer to complete",
        Duration::from_secs(60),
        || {
            let out = platform.kubectl(
                As::Admin,
                &[
                    "get",
                    "activation",
                    "team-b-1",
                    "--ignore-not-found",
                    "-o",
                    "name",
                ],
                None,
            );
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .is_empty()
                .then_some(())
        },
    )
    .await;
    let out = platform.kubectl(
        As::Admin,
        &[
            "get",
            "configmap",
            "settings",
            "-n",
            "team-b",
            "--ignore-not-found",
            "-o",
            "name",
        ],
        None,
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).trim().is_empty(),
        "team-b's settings stays"
    );
    assert_decoy_untouched(&platform, "team-b-1");
}

/// The same decoy, met by the CLI: `kix deploy` of team-b (acting as its
/// account, which may list ConfigMaps everywhere but delete only in team-b)
/// neither prunes nor fails on it, the plan saying why it is left; `kix
/// status` does not count it as team-b's, and `kix gc` retiring the record
/// it claims leaves it. A decoy claiming a record that does not exist is
/// left the same way.
#[tokio::test]
async fn the_cli_leaves_an_object_that_claims_a_record_it_is_not_in() {
    let platform = Platform::start();
    platform.install(true);
    platform.grant_tenants();
    platform.wait_for_policy();
    let v1 = platform.build("team-b", "team-b", "one");
    let run = platform.deploy("team-b", &v1, false);
    assert_eq!(run.code, Some(0), "team-b deploys: {run}");
    plant_decoy(&platform, "team-b-1,team-b-7");

    let v2 = platform.build("team-b", "team-b", "two");
    let run = platform.deploy("team-b", &v2, false);
    assert_eq!(run.code, Some(0), "team-b deploys past the decoy: {run}");
    assert!(
        run.stdout.contains("ConfigMap team-a/decoy")
            && run
                .stdout
                .contains("not this Kix cluster's: it claims team-b-1, team-b-7"),
        "the plan says why the decoy is left: {run}"
    );
    assert_eq!(
        platform.phase("team-b-2").await,
        Some(kix_api::Phase::Active)
    );
    assert_decoy_untouched(&platform, "team-b-1,team-b-7");

    let run = common::run(platform.kix().args(["status", "team-b"]));
    assert_eq!(run.code, Some(0), "kix status: {run}");
    assert!(
        !run.stdout.contains("decoy"),
        "status counts the decoy as team-b's: {run}"
    );
    assert!(
        run.stdout.contains("objects: 1 Ready, 0 Progressing"),
        "team-b has one object: {run}"
    );

    // gc retires team-b-1, which the decoy claims: the decoy is left.
    let run = common::run(
        platform
            .kix()
            .args(["gc", "team-b", "--keep", "0", "--yes"]),
    );
    assert_eq!(run.code, Some(0), "kix gc: {run}");
    assert!(
        run.to_string()
            .contains("ConfigMap team-a/decoy left as it is"),
        "gc says why it leaves the decoy: {run}"
    );
    assert_eq!(
        platform.phase("team-b-1").await,
        None,
        "team-b-1 retired: {run}"
    );
    assert_decoy_untouched(&platform, "team-b-1,team-b-7");
}

//! `kix fleet` against three private control planes (apiserver + etcd each;
//! their controllers are stopped: nothing here needs them, and a
//! Deployment that never becomes healthy is what the halt needs) and one
//! member nobody listens for. One test, phases in order, so the control
//! planes start once:
//!
//! 1. three waves deploy; plan, status;
//! 2. a rollout killed (SIGKILL) in its first wave, as its second member
//!    starts, resumes: the member already Active on the build is not
//!    deployed again, the interrupted one is;
//! 3. a member whose workload cannot become healthy halts the rollout, the
//!    next wave untouched, exit 1;
//! 4. that partially rolled-out fleet rolls back, in reverse wave order;
//! 5. an unreachable member is shown as such and halts its wave, the
//!    next one untouched; `--continue-on-failure 1` goes past it;
//! 6. an operator member: its record is applied by `kix-operator`;
//! 7. the `$ kix` lines of docs/fleet.md, with the example fleet, on the
//!    three control planes as the contexts staging, eu-1 and us-1.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Operator, PrivateControlPlane, Run, client_for, kix_bin, records, run};
use kix_api::{Activation, Phase};
use kube::Client;
use serde_json::json;

const CLUSTER: &str = "web";
const NS: &str = "fleet";

struct Member {
    name: &'static str,
    kubeconfig: PathBuf,
    client: Client,
}

/// A tree of Kix cluster `web`: a Namespace and a ConfigMap holding
/// `version`; `unready` adds a Deployment no node can run.
fn tree(dir: &Path, version: &str, unready: bool) -> String {
    let root = dir.join(format!("tree-{version}-{unready}"));
    let mut resources = vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app", "namespace": NS},
               "data": {"version": version}}),
    ];
    if unready {
        resources.push(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "stuck", "namespace": NS},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "stuck"}},
                     "template": {"metadata": {"labels": {"app": "stuck"}},
                                  "spec": {"nodeSelector": {"kix.run/test": "nowhere"},
                                           "containers": [{"name": "c", "image": "example.invalid/c:1"}]}}}
        }));
    }
    let files = resources
        .iter()
        .enumerate()
        .map(|(i, r)| (format!("{i}.json"), r.to_string().into_bytes()))
        .collect();
    common::write_tree(
        &root,
        CLUSTER,
        &[common::Pkg {
            name: "app".into(),
            depends_on: vec![],
            namespace: NS.into(),
            files,
        }],
    );
    common::add_to_store(&root)
}

/// A fleet file (what mkFleet builds) added to the store: a wave per
/// member, in the order given.
fn fleet(dir: &Path, name: &str, pause: &str, members: &[(&str, &str, &Path, bool)]) -> String {
    let waves: Vec<usize> = (0..members.len()).collect();
    fleet_in_waves(dir, name, pause, 4, members, &waves)
}

/// A fleet file whose member i is in wave `waves[i]`.
fn fleet_in_waves(
    dir: &Path,
    name: &str,
    pause: &str,
    max_parallel: usize,
    members: &[(&str, &str, &Path, bool)],
    waves: &[usize],
) -> String {
    let mut wave_list: Vec<Vec<&str>> = vec![vec![]; waves.iter().max().map_or(0, |w| w + 1)];
    let mut spec = serde_json::Map::new();
    for ((member, build, kubeconfig, operator), wave) in members.iter().zip(waves) {
        wave_list[*wave].push(member);
        spec.insert(
            member.to_string(),
            json!({"build": build, "cluster": CLUSTER, "context": null,
                   "kubeconfig": kubeconfig, "operator": operator, "wave": wave}),
        );
    }
    let file = dir.join(format!("{name}.json"));
    let text = json!({"format": 1, "fleet": "prod", "maxParallel": max_parallel, "pause": pause,
                      "waves": wave_list, "members": spec});
    std::fs::write(&file, text.to_string()).expect("fleet file");
    common::add_to_store(&file)
}

fn kix_fleet(gcroots: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(kix_bin());
    cmd.arg("fleet")
        .args(args)
        .env_remove("KIX_LOG")
        .env_remove("KUBECONFIG")
        .env("KIX_GCROOTS_DIR", gcroots)
        .env("KIX_OFFLINE", "true")
        .env("KIX_LEASE_SECONDS", common::LEASE_SECONDS.to_string())
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    cmd
}

/// The current (applied) record of the member.
async fn current(m: &Member) -> Option<Activation> {
    records(&m.client, CLUSTER)
        .await
        .into_iter()
        .rev()
        .find(|r| matches!(r.phase(), Some(Phase::Active | Phase::Degraded)))
}

async fn current_path(m: &Member) -> String {
    current(m)
        .await
        .map(|r| r.spec.source.path)
        .unwrap_or_default()
}

fn rollout_label(r: &Activation) -> Option<String> {
    r.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("kix.run/fleet-rollout").cloned())
}

/// An admin kubeconfig of `cp` whose server nothing listens on.
fn unreachable_kubeconfig(cp: &PrivateControlPlane, dir: &Path) -> PathBuf {
    let mut kc = kube::config::Kubeconfig::read_from(cp.kubeconfig()).expect("kubeconfig");
    for c in &mut kc.clusters {
        if let Some(cluster) = c.cluster.as_mut() {
            cluster.server = Some("https://127.0.0.1:1".into());
        }
    }
    let path = dir.join("unreachable.kubeconfig");
    std::fs::write(&path, serde_json::to_string(&kc).expect("json")).expect("write");
    path
}

fn start_control_planes() -> Vec<PrivateControlPlane> {
    let started = Instant::now();
    let handles: Vec<_> = (0..3)
        .map(|_| std::thread::spawn(PrivateControlPlane::start))
        .collect();
    let cps: Vec<PrivateControlPlane> = handles
        .into_iter()
        .map(|h| h.join().expect("control plane"))
        .collect();
    // Nothing here needs controllers: stopped, they leave the CPU to kix.
    for cp in &cps {
        for c in ["kwok", "kube-scheduler", "kube-controller-manager"] {
            cp.component("stop", c);
        }
    }
    eprintln!(
        "three control planes in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    cps
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_rolls_out_in_waves_halts_resumes_and_rolls_back() {
    let cps = start_control_planes();
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    let gcroots = dir.join("gcroots");
    let mut members = vec![];
    for (name, cp) in ["staging", "eu", "us"].into_iter().zip(&cps) {
        members.push(Member {
            name,
            kubeconfig: cp.kubeconfig(),
            client: client_for(&cp.kubeconfig()).await,
        });
    }
    let [staging, eu, us] = [&members[0], &members[1], &members[2]];
    let v1 = tree(dir, "1", false);
    let v2 = tree(dir, "2", false);

    three_waves(dir, &gcroots, &members, &v1).await;
    resume_after_kill(dir, &gcroots, &members, &v2).await;
    let v3 = tree(dir, "3", false);
    let v3_unready = tree(dir, "3", true);
    let f3 = fleet(
        dir,
        "f3",
        "0s",
        &[
            (staging.name, &v3, &staging.kubeconfig, false),
            (eu.name, &v3_unready, &eu.kubeconfig, false),
            (us.name, &v3, &us.kubeconfig, false),
        ],
    );
    halt_on_unhealthy(&gcroots, &members, &f3, &v2, &v3).await;
    rollback_partial(&gcroots, &members, &f3, &v2).await;
    unreachable_member(dir, &gcroots, &cps[0], &members, &v1).await;
    let v4 = tree(dir, "4", false);
    operator_member(dir, &gcroots, us, &v4).await;
    docs_walkthrough(dir, &gcroots, &cps);
}

async fn three_waves(dir: &Path, gcroots: &Path, members: &[Member], v1: &str) {
    let spec: Vec<(&str, &str, &Path, bool)> = members
        .iter()
        .map(|m| (m.name, v1, m.kubeconfig.as_path(), false))
        .collect();
    let f1 = fleet(dir, "f1", "1s", &spec);

    let out: Run = run(&mut kix_fleet(
        gcroots,
        &["plan", "prod", "--path", &f1, "--summary"],
    ));
    assert_eq!(out.code, Some(0), "{out}");
    for m in members {
        assert!(
            out.stdout
                .lines()
                .any(|l| l.starts_with(m.name) && l.contains("changes")),
            "the summary has a line for {}: {out}",
            m.name
        );
    }

    let out = run(&mut kix_fleet(gcroots, &["deploy", "prod", "--path", &f1]));
    assert_eq!(out.code, Some(1), "no terminal, no --yes: {out}");
    assert!(out.stderr.contains("confirmation needed"), "{out}");
    for m in members {
        assert!(
            records(&m.client, CLUSTER).await.is_empty(),
            "nothing changed"
        );
    }

    // The root of a rollout no member's record names (retention retired
    // its records): dropped by the next fleet run.
    let stale = gcroots.join("fleet:prod").join("0123456789abcdef0123");
    std::fs::create_dir_all(stale.parent().expect("dir")).expect("mkdir");
    let out = run(Command::new("nix-store")
        .arg("--add-root")
        .arg(&stale)
        .args(["--indirect", "--realise", v1]));
    assert_eq!(out.code, Some(0), "{out}");

    // A saved fleet plan: deployed as reviewed (no question), and refused
    // once the members moved.
    let saved = dir.join("f1.plan.json");
    let saved = saved.to_str().expect("utf8");
    let out = run(&mut kix_fleet(
        gcroots,
        &["plan", "prod", "--path", &f1, "--summary", "--out", saved],
    ));
    assert_eq!(out.code, Some(0), "{out}");
    let out = run(&mut kix_fleet(
        gcroots,
        &["deploy", "prod", "--path", &f1, "--plan", saved],
    ));
    assert_eq!(out.code, Some(0), "{out}");
    assert!(out.stdout.contains("every member Active"), "{out}");
    let mut times = vec![];
    let mut rollouts = vec![];
    for m in members {
        let record = current(m).await.expect("a current record");
        assert_eq!(record.spec.source.path, v1, "{} runs v1", m.name);
        assert_eq!(record.phase(), Some(Phase::Active));
        times.push(record.spec.receipt.time);
        rollouts.push(rollout_label(&record).expect("the record names the rollout"));
    }
    assert!(
        times.windows(2).all(|w| w[0] < w[1]),
        "wave order: {times:?}"
    );
    assert!(rollouts.windows(2).all(|w| w[0] == w[1]), "{rollouts:?}");
    assert!(
        gcroots.join("fleet:prod").join(&rollouts[0]).exists(),
        "the fleet build has a GC root"
    );
    assert!(
        std::fs::symlink_metadata(&stale).is_err(),
        "the stale rollout's root was dropped"
    );

    let out = run(&mut kix_fleet(gcroots, &["status", "prod", "--path", &f1]));
    assert_eq!(out.code, Some(0), "{out}");
    assert_eq!(out.stdout.matches("current").count(), 3, "{out}");
    let out = run(&mut kix_fleet(
        gcroots,
        &["deploy", "prod", "--path", &f1, "--plan", saved],
    ));
    assert_eq!(out.code, Some(1), "{out}");
    assert!(
        out.stderr.contains("no longer what a deploy would do"),
        "{out}"
    );
}

async fn resume_after_kill(dir: &Path, gcroots: &Path, members: &[Member], v2: &str) {
    let spec: Vec<(&str, &str, &Path, bool)> = members
        .iter()
        .map(|m| (m.name, v2, m.kubeconfig.as_path(), false))
        .collect();
    // Wave 0 is staging then eu, one at a time; the deploy is killed as
    // soon as eu's record of v2 exists: mid-wave, eu most likely mid-apply.
    let f2 = fleet_in_waves(dir, "f2", "0s", 1, &spec, &[0, 0, 1]);
    let mut child = kix_fleet(gcroots, &["deploy", "prod", "--path", &f2, "--yes"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("kix fleet deploy");
    let [staging, eu, us] = [&members[0], &members[1], &members[2]];
    let started = Instant::now();
    loop {
        let records = records(&eu.client, CLUSTER).await;
        if records.iter().any(|r| r.spec.source.path == v2) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "eu never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    assert_eq!(current_path(staging).await, v2, "staging had finished");
    assert_ne!(current_path(us).await, v2, "wave 1 had not started");
    let before = records(&staging.client, CLUSTER).await.len();

    // The killed run's Lease lapses first.
    tokio::time::sleep(Duration::from_secs(common::LEASE_SECONDS + 1)).await;
    let out = run(&mut kix_fleet(
        gcroots,
        &["deploy", "prod", "--path", &f2, "--yes"],
    ));
    assert_eq!(out.code, Some(0), "{out}");
    assert!(
        out.stdout
            .lines()
            .any(|l| l.starts_with("staging") && l.contains("up to date")),
        "{out}"
    );
    assert_eq!(
        records(&staging.client, CLUSTER).await.len(),
        before,
        "staging was not deployed again"
    );
    for m in members {
        let record = current(m).await.expect("a current record");
        assert_eq!(record.spec.source.path, v2, "{} runs v2", m.name);
        assert_eq!(record.phase(), Some(Phase::Active), "{}", m.name);
    }
    let eu_records = records(&eu.client, CLUSTER).await;
    assert!(
        eu_records.iter().all(|r| r.is_terminal()),
        "no record of eu is left Pending or Applying: {}",
        common::phases(&eu_records)
    );
}

async fn halt_on_unhealthy(gcroots: &Path, members: &[Member], f3: &str, v2: &str, v3: &str) {
    let out = run(&mut kix_fleet(
        gcroots,
        &["deploy", "prod", "--path", f3, "--yes", "--timeout", "3s"],
    ));
    assert_eq!(out.code, Some(1), "{out}");
    assert!(out.stdout.contains("halted: wave 1 failed (eu:"), "{out}");
    assert!(
        out.stdout
            .lines()
            .any(|l| l.starts_with("us") && l.contains("untouched")),
        "{out}"
    );
    let [staging, eu, us] = [&members[0], &members[1], &members[2]];
    assert_eq!(current_path(staging).await, v3);
    let eu_latest = records(&eu.client, CLUSTER).await.pop().expect("eu record");
    assert_eq!(eu_latest.phase(), Some(Phase::Failed), "eu's deploy failed");
    assert_eq!(current_path(us).await, v2, "us untouched");
}

async fn rollback_partial(gcroots: &Path, members: &[Member], f3: &str, v2: &str) {
    let out = run(&mut kix_fleet(
        gcroots,
        &["rollback", "prod", "--path", f3, "--yes"],
    ));
    assert_eq!(out.code, Some(0), "{out}");
    assert!(
        out.stdout
            .contains("us: left as it is: did not take the rollout"),
        "{out}"
    );
    let [staging, eu, us] = [&members[0], &members[1], &members[2]];
    let us_records = records(&us.client, CLUSTER).await.len();
    let s = current(staging).await.expect("staging");
    let e = current(eu).await.expect("eu");
    for (name, r) in [("staging", &s), ("eu", &e)] {
        assert_eq!(r.spec.source.path, v2, "{name} back on v2");
        assert!(
            r.spec.receipt.rollback_from.is_some(),
            "{name}: a rollback record"
        );
    }
    assert!(
        e.spec.receipt.time < s.spec.receipt.time,
        "reverse wave order: eu (wave 1) before staging (wave 0)"
    );
    assert_eq!(current_path(us).await, v2);
    assert_eq!(records(&us.client, CLUSTER).await.len(), us_records);

    let out = run(&mut kix_fleet(gcroots, &["history", "prod", "--path", f3]));
    assert_eq!(out.code, Some(0), "{out}");
    assert!(out.stdout.contains("rollback"), "{out}");
}

async fn unreachable_member(
    dir: &Path,
    gcroots: &Path,
    cp: &PrivateControlPlane,
    members: &[Member],
    v1: &str,
) {
    let [staging, us] = [&members[0], &members[2]];
    let lost = unreachable_kubeconfig(cp, dir);
    let f4 = fleet(
        dir,
        "f4",
        "0s",
        &[
            (staging.name, v1, &staging.kubeconfig, false),
            ("lost", v1, &lost, false),
            (us.name, v1, &us.kubeconfig, false),
        ],
    );
    let out = run(&mut kix_fleet(
        gcroots,
        &["plan", "prod", "--path", &f4, "--summary"],
    ));
    assert_eq!(out.code, Some(0), "{out}");
    assert!(
        out.stdout
            .lines()
            .any(|l| l.starts_with("lost") && l.contains("UNREACHABLE")),
        "{out}"
    );
    let us_before = current_path(us).await;
    let out = run(&mut kix_fleet(
        gcroots,
        &["deploy", "prod", "--path", &f4, "--yes"],
    ));
    assert_eq!(out.code, Some(1), "{out}");
    assert!(
        out.stdout
            .contains("halted: wave 1 failed (lost: unreachable"),
        "{out}"
    );
    assert!(
        out.stderr
            .contains("warning: member lost cannot be reached"),
        "{out}"
    );
    assert_eq!(current_path(staging).await, v1, "wave 0 went ahead");
    assert_eq!(current_path(us).await, us_before, "wave 2 untouched");
    let out = run(&mut kix_fleet(gcroots, &["status", "prod", "--path", &f4]));
    assert_eq!(out.code, Some(1), "{out}");
    assert!(out.stdout.contains("UNREACHABLE"), "{out}");

    // One failure a wave tolerated: the rollout goes on past it, and
    // still exits 1.
    let out = run(&mut kix_fleet(
        gcroots,
        &[
            "deploy",
            "prod",
            "--path",
            &f4,
            "--yes",
            "--continue-on-failure",
            "1",
        ],
    ));
    assert_eq!(out.code, Some(1), "{out}");
    assert!(out.stdout.contains("finished with failures"), "{out}");
    assert_eq!(current_path(us).await, v1, "wave 2 deployed");
}

async fn operator_member(dir: &Path, gcroots: &Path, us: &Member, v4: &str) {
    let _operator = Operator::start(
        &us.kubeconfig,
        &[CLUSTER],
        "kube-system",
        "kix-fleet-operator",
        dir.join("operator.log"),
        None,
    );
    let f5 = fleet(dir, "f5", "0s", &[(us.name, v4, &us.kubeconfig, true)]);
    let out = run(&mut kix_fleet(
        gcroots,
        &["deploy", "prod", "--path", &f5, "--yes"],
    ));
    assert_eq!(out.code, Some(0), "{out}");
    let record = current(us).await.expect("us");
    assert_eq!(record.spec.source.path, v4);
    assert_eq!(record.spec.engine, kix_api::Engine::Operator);
    assert!(rollout_label(&record).is_some());
}

/// One kubeconfig whose contexts `names` reach the control planes `cps`.
fn merged_kubeconfig(cps: &[PrivateControlPlane], names: &[&str], dir: &Path) -> PathBuf {
    let mut merged = kube::config::Kubeconfig::default();
    for (cp, name) in cps.iter().zip(names) {
        let kc = kube::config::Kubeconfig::read_from(cp.kubeconfig()).expect("kubeconfig");
        let (Some(mut cluster), Some(mut user), Some(mut context)) = (
            kc.clusters.first().cloned(),
            kc.auth_infos.first().cloned(),
            kc.contexts.first().cloned(),
        ) else {
            panic!(
                "{} has no cluster, user or context",
                cp.kubeconfig().display()
            );
        };
        cluster.name = format!("{name}-cluster");
        user.name = format!("{name}-user");
        context.name = (*name).to_string();
        if let Some(c) = context.context.as_mut() {
            c.cluster = cluster.name.clone();
            c.user = Some(user.name.clone());
        }
        merged.clusters.push(cluster);
        merged.auth_infos.push(user);
        merged.contexts.push(context);
    }
    let path = dir.join("regions.kubeconfig");
    std::fs::write(&path, serde_json::to_string(&merged).expect("json")).expect("write");
    path
}

/// The `$ kix ...` lines of the ```console blocks of docs/fleet.md.
fn doc_commands() -> Vec<Vec<String>> {
    let doc = std::fs::read_to_string(kix_testkit::repo_root().join("docs/fleet.md"))
        .expect("docs/fleet.md");
    let mut commands = Vec::new();
    let mut in_console = false;
    for line in doc.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") {
            in_console = trimmed == "```console";
            continue;
        }
        if in_console && let Some(command) = trimmed.strip_prefix("$ kix ") {
            commands.push(command.split_whitespace().map(str::to_string).collect());
        }
    }
    commands
}

fn docs_walkthrough(dir: &Path, gcroots: &Path, cps: &[PrivateControlPlane]) {
    let kubeconfig = merged_kubeconfig(cps, &["staging", "eu-1", "us-1"], dir);
    let commands = doc_commands();
    assert!(
        commands.len() >= 7,
        "docs/fleet.md lost its commands: {commands:?}"
    );
    let repo = kix_testkit::repo_root();
    for args in commands {
        let out = run(Command::new(kix_bin())
            .args(&args)
            .current_dir(&repo)
            .env_remove("KIX_LOG")
            .env("KUBECONFIG", &kubeconfig)
            .env("KIX_GCROOTS_DIR", gcroots)
            .env("KIX_OFFLINE", "1")
            // The examples take `<nixpkgs>`: the host-tools builder here.
            .env(
                "NIX_PATH",
                format!(
                    "nixpkgs={}",
                    repo.join("nix/tests/host-tools.nix").display()
                ),
            )
            .env("NO_COLOR", "1")
            .stdin(Stdio::null()));
        assert_eq!(out.code, Some(0), "`kix {}`: {out}", args.join(" "));
    }
}

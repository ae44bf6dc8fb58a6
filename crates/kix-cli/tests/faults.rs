//! Injected faults, end to end: the real `kix` (and `kix-operator`) binaries
//! against a real control plane. docs/reliability.md records what these tests
//! observed.
//!
//! - `kix deploy` killed with SIGKILL at random points (seeded), each kill
//!   followed by a rerun: nothing lost, nothing wrongly deleted, no record left
//!   Applying (shared control plane).
//! - Two concurrent deploys of one Kix cluster (shared control plane).
//! - kube-apiserver restarted mid-deploy and while the operator corrects drift,
//!   etcd unavailable for 3 s mid-deploy: on a control plane of the test's own
//!   (`KIX_CP_DIR=<tmp> checks/control-plane up`), so the other tests are not
//!   disturbed.
//!
//! `kix` runs with `KIX_LEASE_SECONDS=3`: a killed client's deploy Lease then
//! blocks the rerun for at most 3 s instead of 15 s. Knobs: `KIX_FAULT_KILLS`
//! (default 20), `KIX_FAULT_SEED` (default 0x6b6978).
//!
//! The operator killed mid-apply is tested in crates/kix-operator/tests/operator.rs
//! (`an_operator_killed_mid_apply_converges_after_restart`).

mod common;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kix_api::{Activation, Phase};
use kix_testkit::TestEnv;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};

// ---------------------------------------------------------------------------
// Builds

/// One of the two builds of the kill test (`which` 0 = A, 1 = B): 500 objects
/// in two packages. `base` (400 ConfigMaps, 10 of whose data differ between A
/// and B); `apps`, which depends on `base` (70 shared ConfigMaps, 25 that only
/// this build has, 4 shared Deployments, 2 of which differ, and 1 Deployment
/// only this build has). A → B: 12 updates, 26 creates, 26 deletions (13 %).
fn fault_tree(dir: &Path, name: &str, cluster: &str, namespace: &str, which: usize) -> PathBuf {
    let letter = ["a", "b"][which];
    let cm = |name: &str, value: &str| {
        format!(
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: {{v: \"{value}\", size: \"{}\"}}\n",
            "x".repeat(64)
        )
    };
    let base: String = (0..400)
        .map(|i| {
            cm(
                &format!("base-{i:03}"),
                if i < 10 { letter } else { "same" },
            )
        })
        .collect();
    let mut apps: String = (0..70)
        .map(|i| cm(&format!("app-{i:03}"), "same"))
        .collect();
    apps.extend((0..25).map(|i| cm(&format!("{letter}-{i:02}"), letter)));
    let mut deployments = String::new();
    for (d, value) in [
        ("d-0", "same"),
        ("d-1", letter),
        ("d-2", letter),
        ("d-3", "same"),
        (&format!("d-{letter}")[..], letter),
    ] {
        deployments.push_str(&deployment(d, value));
    }
    let root = dir.join(name);
    write_tree(
        &root,
        cluster,
        &[
            Pkg {
                name: "base".into(),
                depends_on: vec![],
                namespace: namespace.into(),
                files: vec![("cms.yaml".into(), base.into_bytes())],
            },
            Pkg {
                name: "apps".into(),
                depends_on: vec!["base".into()],
                namespace: namespace.into(),
                files: vec![
                    ("cms.yaml".into(), apps.into_bytes()),
                    ("deployments.yaml".into(), deployments.into_bytes()),
                ],
            },
        ],
    );
    root
}

/// A Deployment KWOK runs; `value` goes into an environment variable, so a
/// change rolls it out.
fn deployment(name: &str, value: &str) -> String {
    format!(
        "---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}}}\nspec:\n  replicas: 1\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec:\n      containers: [{{name: app, image: \"example.invalid/app:1\", env: [{{name: BUILD, value: \"{value}\"}}]}}]\n"
    )
}

/// Both builds of a Kix cluster, in the store, with what each should look like.
struct Builds {
    paths: [String; 2],
    expected: [Expected; 2],
}

impl Builds {
    async fn new(
        client: &Client,
        dir: &Path,
        prefix: &str,
        cluster: &str,
        namespace: &str,
    ) -> Builds {
        let a = add_to_store(&fault_tree(
            dir,
            &format!("{prefix}-a"),
            cluster,
            namespace,
            0,
        ));
        let b = add_to_store(&fault_tree(
            dir,
            &format!("{prefix}-b"),
            cluster,
            namespace,
            1,
        ));
        let expected = [
            Expected::of(client, &a).await,
            Expected::of(client, &b).await,
        ];
        assert_eq!(expected[0].objects.len(), 500);
        assert_eq!(expected[1].objects.len(), 500);
        Builds {
            paths: [a, b],
            expected,
        }
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| {
            v.strip_prefix("0x")
                .map_or_else(|| v.parse().ok(), |h| u64::from_str_radix(h, 16).ok())
        })
        .unwrap_or(default)
}

/// How long a fault test's `kix deploy` waits for health (`--timeout`):
/// Deployments of one Pod on a working control plane take seconds, so a
/// deploy waiting on a stalled control plane ends, naming what it waited
/// for, well before the test's own bounds.
const KIX_TIMEOUT: &str = "90s";

/// A deploy (`kix deploy <cluster> --path <path> --yes <extra>`) as a child
/// process, its output in files under `dir`.
fn spawn_deploy(
    kubeconfig: &Path,
    gcroots: &Path,
    cluster: &str,
    path: &str,
    dir: &Path,
    tag: &str,
    extra: &[&str],
) -> Child {
    let file =
        |ext: &str| std::fs::File::create(dir.join(format!("{tag}.{ext}"))).expect("log file");
    kix(kubeconfig, gcroots)
        // -v: when a deploy hangs, its log says in which step.
        .args(["deploy", cluster, "--path", path, "--yes", "-v"])
        .args(extra)
        .stdout(file("stdout"))
        .stderr(file("stderr"))
        .spawn()
        .expect("spawn kix")
}

fn deploy(kubeconfig: &Path, gcroots: &Path, cluster: &str, path: &str) -> Run {
    run(kix(kubeconfig, gcroots).args([
        "deploy",
        cluster,
        "--path",
        path,
        "--yes",
        "--timeout",
        KIX_TIMEOUT,
    ]))
}

fn is_lease_block(out: &Run) -> bool {
    out.code == Some(1)
        && out.stderr.contains("is being deployed by")
        && out.stderr.contains("(lease ")
}

/// What a rerun after a fault took.
struct Rerun {
    blocked: u32,
    blocked_for: Duration,
    took: Duration,
}

/// Reruns the deploy of `path` until it succeeds (see [`past_dead_leases`]).
async fn rerun_until_converged(
    kubeconfig: &Path,
    gcroots: &Path,
    cluster: &str,
    path: &str,
    killed_pids: &[u32],
    timeout: Duration,
) -> Rerun {
    let (kc, gc, c, p) = (
        kubeconfig.to_path_buf(),
        gcroots.to_path_buf(),
        cluster.to_string(),
        path.to_string(),
    );
    let (out, rerun) =
        past_dead_leases(move || deploy(&kc, &gc, &c, &p), killed_pids, timeout).await;
    assert_eq!(out.code, Some(0), "rerun of {path} failed:\n{out}");
    rerun
}

/// Runs `command` again while a dead client's Lease refuses it: a client
/// killed after its deploy settled leaves its Lease until it expires, and
/// a rerun with nothing to do takes none. Each refusal is counted and must
/// name one of `killed_pids` (when given); the first other outcome is
/// returned.
async fn past_dead_leases(
    command: impl Fn() -> Run + Clone + Send + 'static,
    killed_pids: &[u32],
    timeout: Duration,
) -> (Run, Rerun) {
    let started = Instant::now();
    let mut rerun = Rerun {
        blocked: 0,
        blocked_for: Duration::ZERO,
        took: Duration::ZERO,
    };
    loop {
        let once = command.clone();
        let out = tokio::task::spawn_blocking(once).await.expect("join");
        if !is_lease_block(&out) {
            rerun.took = started.elapsed();
            return (out, rerun);
        }
        if !killed_pids.is_empty() {
            assert!(
                killed_pids
                    .iter()
                    .any(|pid| out.stderr.contains(&format!(" pid {pid} (lease"))),
                "the Lease's holder is a killed client (pids {killed_pids:?}): {out}"
            );
        }
        rerun.blocked += 1;
        rerun.blocked_for = started.elapsed();
        assert!(
            started.elapsed() < timeout,
            "still refused by a dead client's Lease after {timeout:?}; last:\n{out}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Where a kill landed, read from the cluster after the kill.
async fn landing(
    client: &Client,
    cluster: &str,
    namespace: &str,
    before: usize,
    pid: u32,
    exited: Option<i32>,
    changes: usize,
) -> String {
    if let Some(code) = exited {
        return format!("finished before the kill (exit {code})");
    }
    let records = records(client, cluster).await;
    let Some(killed) = records.get(before) else {
        let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
        let holder = leases
            .get_opt(&kix_engine::lease::lease_name(cluster))
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec?.holder_identity)
            .unwrap_or_default();
        return if holder.ends_with(&format!(" pid {pid}")) {
            "holding the lease, before its record".into()
        } else {
            "before the lease (build, read, plan)".into()
        };
    };
    let name = killed.metadata.name.clone().unwrap_or_default();
    let written = managed(client, namespace)
        .await
        .map(|live| {
            live.values()
                .filter(|o| {
                    o["metadata"]["annotations"][kix_api::ANNOTATION_ACTIVATIONS]
                        .as_str()
                        .is_some_and(|a| kix_api::labels::parse_activations(a).contains(&name))
                })
                .count()
        })
        .unwrap_or(0);
    let status = killed.status.clone().unwrap_or_default();
    match killed.phase_or_pending() {
        Phase::Applying if status.pending_prune_count() > 0 => "prune".into(),
        Phase::Applying if written < changes => {
            format!("apply ({written} of {changes} changes written)")
        }
        Phase::Applying => format!("health wait (all {changes} changes written)"),
        Phase::Pending => "recorded, before applying".into(),
        other => format!("after settling ({other})"),
    }
}

/// The landing's category, for the summary.
fn category(landing: &str) -> String {
    landing.split(" (").next().unwrap_or(landing).to_string()
}

/// Deletes the Kix cluster's records (local engine: no finalizers) and the
/// test's namespace, without waiting.
async fn cleanup(client: &Client, cluster: &str, namespace: &str) {
    let selector = ListParams::default().labels(&kix_api::labels::cluster_selector(cluster));
    let records: Api<Activation> = Api::all(client.clone());
    let _ = records
        .delete_collection(&DeleteParams::default(), &selector)
        .await;
    let instances: Api<kix_api::PackageInstance> = Api::all(client.clone());
    let _ = instances
        .delete_collection(&DeleteParams::default(), &selector)
        .await;
    let _ = kix_testkit::delete_namespace(client, namespace).await;
}

// ---------------------------------------------------------------------------
// SIGKILL at random points

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_points_then_rerun_converges() {
    let env = TestEnv::new("fault-kill").await.expect("control plane");
    let scratch = tempfile::tempdir().expect("tempdir");
    let kubeconfig = kix_testkit::kubeconfig_path();
    let gcroots = scratch.path().join("gcroots");
    let kills = env_u64("KIX_FAULT_KILLS", 20);
    let seed = env_u64("KIX_FAULT_SEED", 0x6b6978);
    let mut rng = Rng::new(seed);
    let cluster = env.cluster.clone();
    let ns = env.namespace.clone();
    let builds = Builds::new(&env.client, scratch.path(), &cluster, &cluster, &ns).await;
    let check = |which: usize, context: String| {
        let (client, ns, builds, cluster) = (&env.client, &ns, &builds, &cluster);
        async move {
            let diffs = differences(client, ns, &builds.expected[which]).await;
            assert!(
                diffs.is_empty(),
                "{context}: live objects differ from build {}: {diffs:#?}",
                ["A", "B"][which]
            );
            assert_settled(&records(client, cluster).await, &context);
        }
    };

    // Calibration: a first deploy, then A → B → A without faults.
    let mut times = vec![];
    for (step, which) in [0, 1, 0].into_iter().enumerate() {
        let started = Instant::now();
        let out = deploy(&kubeconfig, &gcroots, &cluster, &builds.paths[which]);
        assert_eq!(out.code, Some(0), "calibration deploy {step}: {out}");
        times.push(started.elapsed());
        check(which, format!("calibration deploy {step}")).await;
    }
    let typical = (times[1] + times[2]) / 2;
    eprintln!(
        "fault kill: first deploy of 500 objects {:.1}s; A→B {:.1}s, B→A {:.1}s; kills at a random delay in [0, {:.1}s], seed {seed:#x}",
        times[0].as_secs_f64(),
        times[1].as_secs_f64(),
        times[2].as_secs_f64(),
        typical.as_secs_f64()
    );

    let mut current = 0usize;
    let mut landings: BTreeMap<String, u32> = BTreeMap::new();
    let (mut blocked_reruns, mut blocked_total, mut max_blocked) = (0u32, 0u32, Duration::ZERO);
    let mut rerun_same = 0u32;
    let started_all = Instant::now();
    // At least `kills` kills, and more (up to 6 more) until at least
    // MIN_HOLDING of them landed while the deploy held its Lease (record,
    // apply, wait, prune): the random delays also land in the build, read
    // and plan before it, or after the deploy finished.
    const MIN_HOLDING: u32 = 5;
    let (mut i, mut holding) = (0u64, 0u32);
    // A dead client's Lease outlives its rerun when that rerun had nothing
    // to do (no Lease needed): the next rerun may meet an older one.
    let mut killed_pids: Vec<u32> = vec![];
    loop {
        if i >= kills && (holding >= MIN_HOLDING || i >= kills + 6) {
            break;
        }
        i += 1;
        let target = 1 - current;
        let before = records(&env.client, &cluster).await.len();
        let mut child = spawn_deploy(
            &kubeconfig,
            &gcroots,
            &cluster,
            &builds.paths[target],
            scratch.path(),
            &format!("kill-{i}"),
            &[],
        );
        let pid = child.id();
        killed_pids.push(pid);
        let delay = Duration::from_millis(rng.upto(typical.as_millis() as u64));
        tokio::time::sleep(delay).await;
        let exited = child
            .try_wait()
            .expect("try_wait")
            .map(|s| s.code().unwrap_or(-1));
        if exited.is_none() {
            child.kill().expect("SIGKILL");
        }
        child.wait().expect("reaped");
        // The objects this deploy writes: what differs from the live build.
        let changes = builds.expected[target]
            .objects
            .iter()
            .filter(|(key, (digest, _))| {
                builds.expected[current].objects.get(*key).map(|(d, _)| d) != Some(digest)
            })
            .count();
        let landed = landing(&env.client, &cluster, &ns, before, pid, exited, changes).await;
        *landings.entry(category(&landed)).or_default() += 1;
        holding += u32::from(
            !landed.starts_with("before the lease")
                && !landed.starts_with("finished")
                && !landed.starts_with("after"),
        );

        let rerun_build = if rng.coin() { target } else { current };
        rerun_same += u32::from(rerun_build == target);
        let rerun = rerun_until_converged(
            &kubeconfig,
            &gcroots,
            &cluster,
            &builds.paths[rerun_build],
            &killed_pids,
            Duration::from_secs(60),
        )
        .await;
        if rerun.blocked > 0 {
            blocked_reruns += 1;
            blocked_total += rerun.blocked;
            max_blocked = max_blocked.max(rerun.blocked_for);
        }
        let names = ["A", "B"];
        check(
            rerun_build,
            format!(
                "kill {i}: deploy of {} killed after {delay:?} ({landed}), rerun of {}",
                names[target], names[rerun_build]
            ),
        )
        .await;
        eprintln!(
            "fault kill {i}: deploy {}→{} killed after {:.2}s, landed: {landed}; rerun of {} blocked by the dead client's lease {}× for {:.1}s, converged in {:.1}s: all 500 objects equal to the build, nothing else, no record Applying",
            names[current],
            names[target],
            delay.as_secs_f64(),
            names[rerun_build],
            rerun.blocked,
            rerun.blocked_for.as_secs_f64(),
            rerun.took.as_secs_f64()
        );
        current = rerun_build;
    }

    // Retiring all those records (most of them Failed, named by objects that
    // did not change since) loses nothing of the current build.
    // The last killed client's Lease may still be held (its rerun had
    // nothing to do): gc waits it out like a rerun.
    let (kc, gc, c) = (kubeconfig.clone(), gcroots.clone(), cluster.clone());
    let (out, _) = past_dead_leases(
        move || run(kix(&kc, &gc).args(["gc", &c, "--keep", "1", "--yes"])),
        &killed_pids,
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(out.code, Some(0), "kix gc: {out}");
    check(current, "after kix gc --keep 1".into()).await;
    let out = run(kix(&kubeconfig, &gcroots).args([
        "plan",
        &cluster,
        "--path",
        &builds.paths[current],
        "--exit-code",
    ]));
    assert_eq!(
        out.code,
        Some(0),
        "converged: the plan has nothing to do: {out}"
    );

    let mut summary = String::new();
    for (what, n) in &landings {
        let _ = write!(summary, "{what}: {n}; ");
    }
    eprintln!(
        "fault kill summary: {i} SIGKILLs in {:.0}s (seed {seed:#x}), {holding} while the deploy held its lease; landed: {summary}reruns of the same build {rerun_same}, of the other {}; {blocked_reruns} reruns blocked by the dead client's lease ({blocked_total} refusals, longest {:.1}s); all {i} converged; kix gc afterwards lost nothing",
        started_all.elapsed().as_secs_f64(),
        i - u64::from(rerun_same),
        max_blocked.as_secs_f64()
    );
    assert!(
        holding >= 1,
        "no kill landed while the deploy held its lease in {i} kills"
    );
    cleanup(&env.client, &cluster, &ns).await;
}

// ---------------------------------------------------------------------------
// Two deploys at once

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_deploys_one_proceeds_the_other_names_the_holder() {
    let env = TestEnv::new("fault-concurrent")
        .await
        .expect("control plane");
    let scratch = tempfile::tempdir().expect("tempdir");
    let kubeconfig = kix_testkit::kubeconfig_path();
    let gcroots = scratch.path().join("gcroots");
    let (cluster, ns) = (env.cluster.clone(), env.namespace.clone());
    // Three builds: each round races the two that are not live (a deploy
    // of the live build has nothing to do and takes no Lease). A Deployment
    // that becomes Available only 4 s after its Pod is ready keeps the
    // winner holding the Lease meanwhile.
    let mut paths = vec![];
    for letter in ["x", "y", "z"] {
        let mut yaml: String = (0..100)
            .map(|i| format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm-{i:03}}}\ndata: {{v: \"{letter}\"}}\n"))
            .collect();
        yaml.push_str(
            &deployment("slow", letter)
                .replace("  replicas: 1\n", "  replicas: 1\n  minReadySeconds: 4\n"),
        );
        let root = scratch.path().join(format!("{cluster}-{letter}"));
        write_tree(
            &root,
            &cluster,
            &[Pkg {
                name: "web".into(),
                depends_on: vec![],
                namespace: ns.clone(),
                files: vec![("o.yaml".into(), yaml.into_bytes())],
            }],
        );
        paths.push(add_to_store(&root));
    }
    let mut expected = vec![];
    for path in &paths {
        expected.push(Expected::of(&env.client, path).await);
    }

    const ROUNDS: usize = 3;
    let mut live: Option<usize> = None;
    for round in 1..=ROUNDS {
        let racing: Vec<usize> = (0..3).filter(|b| Some(*b) != live).take(2).collect();
        let children: Vec<Child> = (0..2)
            .map(|k| {
                spawn_deploy(
                    &kubeconfig,
                    &gcroots,
                    &cluster,
                    &paths[racing[k]],
                    scratch.path(),
                    &format!("race-{round}-{k}"),
                    &[],
                )
            })
            .collect();
        let pids: Vec<u32> = children.iter().map(Child::id).collect();
        let mut codes = vec![];
        for mut child in children {
            let started = Instant::now();
            loop {
                if let Some(status) = child.try_wait().expect("try_wait") {
                    codes.push(status.code());
                    break;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(120),
                    "a racing deploy hangs"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        let read = |k: usize, ext: &str| {
            std::fs::read_to_string(scratch.path().join(format!("race-{round}-{k}.{ext}")))
                .unwrap_or_default()
        };
        let winners: Vec<usize> = (0..2).filter(|k| codes[*k] == Some(0)).collect();
        assert_eq!(
            winners.len(),
            1,
            "round {round}: exactly one deploy proceeds: exits {codes:?}\n0: {}\n1: {}",
            read(0, "stderr"),
            read(1, "stderr")
        );
        let (winner, loser) = (winners[0], 1 - winners[0]);
        let refusal = read(loser, "stderr");
        assert_eq!(codes[loser], Some(1), "round {round}: {refusal}");
        assert!(
            refusal.contains("is being deployed by")
                && refusal.contains(&format!("pid {}", pids[winner])),
            "round {round}: the loser names the holder (pid {}): {refusal}",
            pids[winner]
        );
        // The loser changed nothing: the cluster is the winner's build.
        let diffs = differences(&env.client, &ns, &expected[racing[winner]]).await;
        assert!(
            diffs.is_empty(),
            "round {round}: the winner's build is live: {diffs:#?}"
        );
        assert_settled(
            &records(&env.client, &cluster).await,
            &format!("round {round}"),
        );
        // Then the loser's deploy, rerun, converges.
        let rerun = rerun_until_converged(
            &kubeconfig,
            &gcroots,
            &cluster,
            &paths[racing[loser]],
            &[],
            Duration::from_secs(60),
        )
        .await;
        live = Some(racing[loser]);
        let diffs = differences(&env.client, &ns, &expected[racing[loser]]).await;
        assert!(
            diffs.is_empty(),
            "round {round}: the loser's rerun converged: {diffs:#?}"
        );
        assert_settled(
            &records(&env.client, &cluster).await,
            &format!("round {round}, rerun"),
        );
        eprintln!(
            "fault concurrent {round}/{ROUNDS}: two deploys at once, exits {codes:?}: one proceeded, the other failed with \"{}\"; its rerun converged in {:.1}s",
            error_line(&refusal),
            rerun.took.as_secs_f64()
        );
    }
    cleanup(&env.client, &cluster, &ns).await;
}

// ---------------------------------------------------------------------------
// The control plane itself: apiserver restarts, etcd down

async fn create_namespace(client: &Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
    )
    .expect("namespace");
    api.patch(name, &PatchParams::apply("kix-faults"), &Patch::Apply(&ns))
        .await
        .expect("create namespace");
}

/// Waits for a spawned deploy (bounded) and returns its exit code and the
/// error line of its stderr.
async fn finish(
    mut child: Child,
    dir: &Path,
    tag: &str,
    timeout: Duration,
) -> (Option<i32>, String) {
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if started.elapsed() > timeout {
            let _ = child.kill();
            let stderr =
                std::fs::read_to_string(dir.join(format!("{tag}.stderr"))).unwrap_or_default();
            let lines: Vec<&str> = stderr.lines().collect();
            let tail = lines[lines.len().saturating_sub(60)..].join("\n");
            panic!(
                "the deploy ({tag}) hangs after the fault: not finished after {timeout:?}; the end of its log:\n{tail}"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let stderr = std::fs::read_to_string(dir.join(format!("{tag}.stderr"))).unwrap_or_default();
    let stdout = std::fs::read_to_string(dir.join(format!("{tag}.stdout"))).unwrap_or_default();
    let line = if status.success() {
        stdout.lines().last().unwrap_or_default().to_string()
    } else {
        error_line(&stderr)
    };
    (status.code(), line)
}

/// Waits until the newest record of `cluster` is Applying and at least `n`
/// objects are live in `namespace`.
async fn wait_applying(
    client: &Client,
    cluster: &str,
    namespace: &str,
    before: usize,
    n: usize,
) -> usize {
    poll(
        "the deploy to be applying",
        Duration::from_secs(90),
        Duration::from_millis(40),
        || async {
            let recs = records(client, cluster).await;
            let applying = recs.len() > before
                && recs.last().and_then(Activation::phase) == Some(Phase::Applying);
            if !applying {
                return None;
            }
            let live = managed(client, namespace).await.ok()?.len();
            (live >= n).then_some(live)
        },
    )
    .await
}

/// kube-controller-manager's stale-read errors in its log ("read version …
/// is not as new as written version …": the StaleControllerConsistency
/// checks of 1.36), counted, with the last one.
fn stale_reads(cp_dir: &Path) -> String {
    let log = std::fs::read_to_string(cp_dir.join("logs/kube-controller-manager.log"))
        .unwrap_or_default();
    let stale: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("is not as new as written version"))
        .collect();
    format!(
        "kube-controller-manager logged {} stale-read errors{}; logs in {}",
        stale.len(),
        stale
            .last()
            .map(|l| format!(" (last: {})", tail(l, 300)))
            .unwrap_or_default(),
        cp_dir.join("logs").display()
    )
}

/// A Deployment made without kix before the faults and rolled out after
/// each: the rollout needs what kix's updates need from the control plane
/// (kube-controller-manager scaling a new ReplicaSet up and the old one,
/// written before the fault, down; the scheduler; KWOK). It reports whether
/// the control plane works at all after a fault, independently of kix, and
/// a stalled one is restarted; one probe rolling out does not prove every
/// ReplicaSet is synced, so kix is judged per object ([`kix_after_fault`]).
struct Probe {
    api: Api<Deployment>,
    cp_dir: PathBuf,
    name: String,
    revision: u32,
}

impl Probe {
    async fn create(client: &Client, cp_dir: &Path, ns: &str) -> Probe {
        let mut probe = Probe {
            api: Api::namespaced(client.clone(), ns),
            cp_dir: cp_dir.to_path_buf(),
            name: "probe".into(),
            revision: 0,
        };
        if let Err(seen) = probe.roll_out(Duration::from_secs(120)).await {
            panic!("before any fault, the control plane did not run the probe: {seen}");
        }
        probe
    }

    /// Changes the pod template and waits until the rollout is complete
    /// (one updated, available replica, no old one). `Err` says what was
    /// seen instead.
    async fn roll_out(&mut self, timeout: Duration) -> Result<Duration, String> {
        self.revision += 1;
        let name = &self.name;
        let desired: Deployment = serde_json::from_value(serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"probe": name}},
                     "template": {"metadata": {"labels": {"probe": name}},
                                  "spec": {"containers": [{"name": "probe", "image": "example.invalid/probe:1",
                                      "env": [{"name": "REVISION", "value": self.revision.to_string()}]}]}}}
        }))
        .expect("probe deployment");
        let started = Instant::now();
        let mut seen = String::from("not applied");
        let mut applied = None;
        while started.elapsed() < timeout {
            if applied.is_none() {
                match self
                    .api
                    .patch(
                        name,
                        &PatchParams::apply("kix-faults-probe"),
                        &Patch::Apply(&desired),
                    )
                    .await
                {
                    Ok(live) => applied = live.metadata.generation,
                    Err(err) => seen = format!("applying it failed: {err}"),
                }
            }
            if let Some(generation) = applied {
                match self.api.get(name).await {
                    Ok(live) => {
                        let status = live.status.unwrap_or_default();
                        if status.observed_generation >= Some(generation)
                            && status.replicas == Some(1)
                            && status.updated_replicas == Some(1)
                            && status.available_replicas == Some(1)
                        {
                            return Ok(started.elapsed());
                        }
                        seen = format!("status {status:?}");
                    }
                    Err(err) => seen = format!("reading it failed: {err}"),
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Err(format!(
            "probe Deployment {name} (no kix) not rolled out to revision {} after {timeout:?}: {seen}; {}",
            self.revision,
            stale_reads(&self.cp_dir)
        ))
    }
}

/// What the control plane did after a fault, judged by the probe.
enum Controllers {
    /// The probe rolled out; when the first rollout failed, after
    /// restarting kube-controller-manager and kube-apiserver (what it saw).
    Work {
        took: Duration,
        restarted_after: Option<String>,
    },
    /// Not even after those restarts: the control plane's failure, not kix's.
    Stalled { first: String, second: String },
}

impl std::fmt::Display for Controllers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Controllers::Work {
                took,
                restarted_after: None,
            } => write!(
                f,
                "the control plane converges (probe rolled out in {took:.1?})"
            ),
            Controllers::Work {
                took,
                restarted_after: Some(seen),
            } => write!(
                f,
                "the control plane stalled ({seen}) and converged after restarting kube-controller-manager and kube-apiserver (probe rolled out in {took:.1?})"
            ),
            Controllers::Stalled { first, second } => write!(
                f,
                "THE CONTROL PLANE DID NOT RECOVER (not kix's failure): {first}; after restarting kube-controller-manager and kube-apiserver: {second}"
            ),
        }
    }
}

/// Rolls the probe out after `fault`; when that stalls, restarts
/// kube-controller-manager and kube-apiserver once and rolls it out again.
async fn controllers_after(
    cp: &PrivateControlPlane,
    probe: &mut Probe,
    fault: &str,
) -> Controllers {
    let first = match probe.roll_out(Duration::from_secs(60)).await {
        Ok(took) => {
            return Controllers::Work {
                took,
                restarted_after: None,
            };
        }
        Err(seen) => seen,
    };
    eprintln!("fault {fault}: {first}; restarting kube-controller-manager and kube-apiserver");
    cp.component("restart", "kube-controller-manager");
    cp.component("restart", "kube-apiserver");
    match probe.roll_out(Duration::from_secs(90)).await {
        Ok(took) => Controllers::Work {
            took,
            restarted_after: Some(first),
        },
        Err(second) => Controllers::Stalled { first, second },
    }
}

/// The Deployments in `ns` whose rollout is not complete by their own
/// status (written by kube-controller-manager): observedGeneration behind
/// the generation, or replicas not all updated and available. Each with its
/// ReplicaSets, so a report shows where the controller stopped: (name,
/// report) pairs.
async fn unfinished_rollouts(client: &Client, ns: &str) -> Vec<(String, String)> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), ns);
    let (Ok(deployments), Ok(sets)) = (
        deployments.list(&ListParams::default()).await,
        sets.list(&ListParams::default()).await,
    ) else {
        return vec![(
            "?".into(),
            "listing Deployments or ReplicaSets failed".into(),
        )];
    };
    let mut unfinished = vec![];
    for d in deployments.items {
        let name = d.metadata.name.clone().unwrap_or_default();
        let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let status = d.status.clone().unwrap_or_default();
        let done = status.observed_generation >= d.metadata.generation
            && status.replicas == Some(want)
            && status.updated_replicas == Some(want)
            && status.available_replicas == Some(want);
        if done {
            continue;
        }
        let owned: Vec<String> = sets
            .items
            .iter()
            .filter(|rs| {
                rs.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.uid == d.metadata.uid.clone().unwrap_or_default())
            })
            .map(|rs| {
                let st = rs.status.clone().unwrap_or_default();
                format!(
                    "{} (spec {}, status {}/{} ready, generation {:?} observed {:?})",
                    rs.metadata.name.clone().unwrap_or_default(),
                    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0),
                    st.ready_replicas.unwrap_or(0),
                    st.replicas,
                    rs.metadata.generation,
                    st.observed_generation
                )
            })
            .collect();
        let report = format!(
            "Deployment {name}: generation {:?} observed {:?}, {}/{}/{} replicas/updated/available of {want}; ReplicaSets: {}",
            d.metadata.generation,
            status.observed_generation,
            status.replicas.unwrap_or(0),
            status.updated_replicas.unwrap_or(0),
            status.available_replicas.unwrap_or(0),
            owned.join(", ")
        );
        unfinished.push((name, report));
    }
    unfinished
}

/// After a fault, kix's part, judged per object. Reruns go on until one
/// converges (exit 0, every object equal to the build, no record Pending or
/// Applying), for at most 240 s; each rerun ends within its `--timeout`.
/// When none converged, whose failure it was:
/// - an object not equal to the build, or a record left unsettled: kix's
///   (an object the build drops may remain while the reruns fail on the
///   health of a Deployment the controller did not roll out: prune comes
///   after health);
/// - every Deployment of the build rolled out by its own status, yet the
///   reruns fail: kix's (its health wait);
/// - a Deployment equal to the build whose rollout kube-controller-manager
///   did not finish: the control plane's, reported with what it did
///   (seen after etcd outages: its ReplicaSet syncs fail with stale reads
///   while other Deployments, even the probe, roll out).
///
/// Returns the report line.
#[allow(clippy::too_many_arguments)]
async fn kix_after_fault(
    cp_dir: &Path,
    client: &Client,
    kubeconfig: &Path,
    gcroots: &Path,
    cluster: &str,
    ns: &str,
    path: &str,
    expected: &Expected,
    controllers: &Controllers,
    context: &str,
) -> String {
    let started = Instant::now();
    let mut reruns: Vec<String> = vec![];
    loop {
        let kc = kubeconfig.to_path_buf();
        let (gc, c, p) = (gcroots.to_path_buf(), cluster.to_string(), path.to_string());
        let out = tokio::task::spawn_blocking(move || deploy(&kc, &gc, &c, &p))
            .await
            .expect("join");
        let diffs = differences(client, ns, expected).await;
        let recs = records(client, cluster).await;
        let unsettled = recs
            .iter()
            .any(|r| matches!(r.phase(), None | Some(Phase::Pending | Phase::Applying)));
        if out.code == Some(0) && diffs.is_empty() && !unsettled {
            return format!(
                "{controllers}; kix converged {:.1}s after the first rerun began, after {} failed reruns {reruns:?}",
                started.elapsed().as_secs_f64(),
                reruns.len()
            );
        }
        reruns.push(format!("exit {:?}: {}", out.code, error_line(&out.stderr)));
        if started.elapsed() < Duration::from_secs(240) {
            tokio::time::sleep(Duration::from_millis(250)).await;
            continue;
        }
        // Prune follows the health of every wave, so while a rollout is
        // unfinished the objects the build drops rightly remain: accepted
        // only when the last rerun failed on such a Deployment's health.
        let stuck = unfinished_rollouts(client, ns).await;
        let failed_on_stuck = stuck
            .iter()
            .any(|(name, _)| out.stderr.contains(&format!("/{name} not healthy")));
        let wrong: Vec<&String> = diffs
            .iter()
            .filter(|d| !(failed_on_stuck && d.ends_with("should have been pruned")))
            .collect();
        assert!(
            wrong.is_empty() && !unsettled,
            "{context} ({controllers}): KIX'S FAILURE: after reruns {reruns:?}, objects differ from the build ({wrong:#?}) or records are unsettled ({})",
            phases(&recs)
        );
        assert!(
            !stuck.is_empty(),
            "{context} ({controllers}): KIX'S FAILURE: every Deployment rolled out by its own status, yet no rerun succeeded: {reruns:?}; last:\n{out}"
        );
        let stuck: Vec<&str> = stuck.iter().map(|(_, report)| report.as_str()).collect();
        return format!(
            "{controllers}; THE CONTROL PLANE DID NOT FINISH kix's rollouts (not kix's failure): {}; {}; kix did its part: every object the build has equal to it, {} dropped objects left for the prune that follows health, records settled ({}), every rerun ended within --timeout: {reruns:?}",
            stuck.join("; "),
            stale_reads(cp_dir),
            diffs.len() - wrong.len(),
            phases(&recs)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiserver_restarts_and_etcd_outage_on_a_private_control_plane() {
    let cp = PrivateControlPlane::start();
    let kubeconfig = cp.kubeconfig();
    let client = client_for(&kubeconfig).await;
    let scratch = tempfile::tempdir().expect("tempdir");
    let gcroots = scratch.path().join("gcroots");
    let cluster = "fault-cp";
    let ns = "fault-cp";
    create_namespace(&client, ns).await;
    // The probe lives apart from kix's objects.
    create_namespace(&client, "fault-probe").await;
    let mut probe = Probe::create(&client, cp.path(), "fault-probe").await;
    let builds = Builds::new(&client, scratch.path(), "fault-cp", cluster, ns).await;

    // 1. kube-apiserver restarted mid-deploy (a fresh 500-object deploy).
    let child = spawn_deploy(
        &kubeconfig,
        &gcroots,
        cluster,
        &builds.paths[0],
        scratch.path(),
        "apiserver",
        &["--timeout", KIX_TIMEOUT],
    );
    let live = wait_applying(&client, cluster, ns, 0, 50).await;
    let cp_dir = cp.path().to_path_buf();
    let restart = tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let out = run(
            Command::new(kix_testkit::repo_root().join("checks/control-plane"))
                .args(["restart", "kube-apiserver"])
                .env("KIX_CP_DIR", cp_dir)
                .stdin(Stdio::null()),
        );
        (out, started.elapsed())
    });
    // Restarting (stop, start, ready) takes a while; the deploy runs on
    // meanwhile and meets the outage.
    let started = Instant::now();
    let (code, line) = finish(child, scratch.path(), "apiserver", Duration::from_secs(240)).await;
    let (out, restart_took) = restart.await.expect("join");
    assert_eq!(out.code, Some(0), "restart kube-apiserver: {out}");
    let controllers = controllers_after(&cp, &mut probe, "apiserver").await;
    let outcome = kix_after_fault(
        cp.path(),
        &client,
        &kubeconfig,
        &gcroots,
        cluster,
        ns,
        &builds.paths[0],
        &builds.expected[0],
        &controllers,
        "after the apiserver restart",
    )
    .await;
    eprintln!(
        "fault apiserver-restart-mid-deploy: restart ({:.1}s) began with {live} of 500 objects applied; the deploy exited {code:?} (\"{line}\"); {outcome}; {:.1}s after the restart began",
        restart_took.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );

    // 2. etcd unavailable for 3 s during a deploy (A → B).
    let before = records(&client, cluster).await.len();
    let child = spawn_deploy(
        &kubeconfig,
        &gcroots,
        cluster,
        &builds.paths[1],
        scratch.path(),
        "etcd",
        &["--timeout", KIX_TIMEOUT],
    );
    let live = wait_applying(&client, cluster, ns, before, 1).await;
    let started = Instant::now();
    cp.component("kill", "etcd");
    tokio::time::sleep(Duration::from_secs(3)).await;
    cp.component("start", "etcd");
    let down_for = started.elapsed();
    // kube-controller-manager 1.36 does not always recover from an etcd
    // outage: seen in CI, its ReplicaSet syncs failed with "read version …
    // is not as new as written version …" (the StaleControllerConsistency
    // checks, beta in 1.36) and it created no Pods afterwards, even after a
    // restart: the ReplicaSets written before the outage were never scaled
    // down, while other Deployments (even the probe) rolled out. So kix is
    // judged per object (`kix_after_fault`): its objects equal to the build
    // and its records settled are kix's part; a rollout the controller did
    // not finish is the control plane's, and reported as such.
    let (code, line) = finish(child, scratch.path(), "etcd", Duration::from_secs(240)).await;
    let controllers = controllers_after(&cp, &mut probe, "etcd").await;
    let outcome = kix_after_fault(
        cp.path(),
        &client,
        &kubeconfig,
        &gcroots,
        cluster,
        ns,
        &builds.paths[1],
        &builds.expected[1],
        &controllers,
        "after the etcd outage",
    )
    .await;
    eprintln!(
        "fault etcd-down-mid-deploy: etcd killed ({live} objects live) and started again after {:.1}s; the deploy exited {code:?} (\"{line}\"); {outcome}; {:.1}s after etcd went down",
        down_for.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );

    // 3. kube-apiserver restarted while the operator corrects drift.
    let op_cluster = "fault-op";
    let op_ns = "fault-op";
    create_namespace(&client, op_ns).await;
    let yaml: String = (0..300)
        .map(|i| format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm-{i:03}}}\ndata: {{v: \"{i}\"}}\n"))
        .collect();
    let root = scratch.path().join("fault-op");
    write_tree(
        &root,
        op_cluster,
        &[Pkg {
            name: "web".into(),
            depends_on: vec![],
            namespace: op_ns.into(),
            files: vec![("o.yaml".into(), yaml.into_bytes())],
        }],
    );
    let path = add_to_store(&root);
    let expected = Expected::of(&client, &path).await;
    let _operator = Operator::start(
        &kubeconfig,
        &[op_cluster],
        op_ns,
        "kix-operator-faults",
        scratch.path().join("operator.log"),
        None,
    );
    let out = run(kix(&kubeconfig, &gcroots).args([
        "deploy",
        op_cluster,
        "--path",
        &path,
        "--operator",
        "--yes",
    ]));
    assert_eq!(out.code, Some(0), "deploy --operator: {out}");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), op_ns);
    cms.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("app.kubernetes.io/managed-by=kix"),
    )
    .await
    .expect("delete the ConfigMaps");
    // Restart as soon as the operator has started re-creating them.
    let recreated = poll(
        "the operator to start correcting",
        Duration::from_secs(60),
        Duration::from_millis(20),
        || async {
            let n = cms
                .list_metadata(&ListParams::default().labels("app.kubernetes.io/managed-by=kix"))
                .await
                .ok()?
                .items
                .len();
            (n > 0).then_some(n)
        },
    )
    .await;
    let started = Instant::now();
    let restart = cp.component("restart", "kube-apiserver");
    let after = started.elapsed();
    let client = client_for(&kubeconfig).await;
    poll(
        "the operator to correct the drift after the restart",
        Duration::from_secs(120),
        Duration::from_millis(500),
        || async {
            let diffs = differences(&client, op_ns, &expected).await;
            let recs = records(&client, op_cluster).await;
            (diffs.is_empty() && recs.last().and_then(Activation::phase) == Some(Phase::Active))
                .then_some(())
        },
    )
    .await;
    assert_settled(
        &records(&client, op_cluster).await,
        "operator after the apiserver restart",
    );
    eprintln!(
        "fault apiserver-restart-mid-reconcile: 300 owned ConfigMaps deleted, restart began with {recreated} re-created, restart took {:.1}s; the operator re-created all 300 and the record is Active {:.1}s after the restart began",
        restart.as_secs_f64().max(after.as_secs_f64()),
        started.elapsed().as_secs_f64()
    );
}

//! Jobs run once per build (ingress-nginx's admission Jobs): a Job kix
//! applied that finished, and that the TTL controller then removed, is not
//! created again while the build's Job is unchanged: not by a redeploy,
//! not by `--reconcile`; a changed Job runs again.
//!
//! The control plane runs the job and TTL-after-finished controllers, and
//! KWOK completes the pods of Jobs.

mod cli_support;
mod common;

use std::time::{Duration, Instant};

use cli_support::Kix;

/// ingress-nginx's admission-create Job, as published (TTL 0: removed as
/// soon as it finished), with `arg` as its container's argument.
fn job(arg: &str) -> String {
    format!(
        "---\napiVersion: batch/v1\nkind: Job\nmetadata:\n  name: admission-create\n\
         spec:\n  ttlSecondsAfterFinished: 0\n  backoffLimit: 0\n  template:\n    spec:\n\
         \x20     restartPolicy: OnFailure\n      containers:\n        - name: create\n\
         \x20         image: registry.k8s.io/ingress-nginx/kube-webhook-certgen:v1.6.4\n\
         \x20         args: [create, \"{arg}\"]\n"
    )
}

fn job_exists(kix: &Kix) -> bool {
    kix_testkit::kubectl_output(&["get", "job", "-n", kix.ns(), "admission-create"]).is_ok()
}

fn wait_gone(kix: &Kix) {
    let until = Instant::now() + Duration::from_secs(90);
    while job_exists(kix) {
        assert!(
            Instant::now() < until,
            "the TTL controller never removed the Job"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[tokio::test]
async fn a_finished_job_removed_by_its_ttl_is_not_run_again_for_the_same_build() {
    let kix = Kix::new("jobs-once").await;
    let objects = cli_support::configmap("settings", "1") + &job("--host=a");
    let tree = kix.tree("v1", &objects, serde_json::json!({}));
    let path = tree.to_str().expect("utf-8");
    kix.deploy(&tree, &["--timeout", "90s"]).ok();
    wait_gone(&kix);

    // The plan has nothing to do: the Job finished for this build.
    let plan = kix.kix(&["plan", kix.cluster(), "--path", path, "--exit-code"]);
    assert_eq!(plan.code, Some(0), "{}", plan.stdout);
    assert!(
        plan.stdout.contains("unchanged (completed)"),
        "{}",
        plan.stdout
    );

    // Redeploys do nothing, twice.
    for _ in 0..2 {
        let run = kix.deploy(&tree, &["--timeout", "30s"]).ok();
        assert!(run.stdout.contains("nothing to do"), "{}", run.stdout);
        assert!(!job_exists(&kix), "the Job was created again");
    }

    // Someone edits another object: --reconcile repairs it in seconds,
    // and leaves the finished Job alone.
    kix.kubectl(&[
        "patch",
        "configmap",
        "-n",
        kix.ns(),
        "settings",
        "--type=merge",
        "-p",
        r#"{"data":{"v":"edited"}}"#,
    ]);
    let started = Instant::now();
    kix.deploy(&tree, &["--reconcile", "--timeout", "60s"]).ok();
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(
        kix.configmap("settings").map(|c| c["data"]["v"].clone()),
        Some("1".into())
    );
    assert!(!job_exists(&kix), "the Job was created again");

    // A changed Job runs again.
    let changed = kix.tree(
        "v2",
        &(cli_support::configmap("settings", "1") + &job("--host=b")),
        serde_json::json!({}),
    );
    let run = kix.deploy(&changed, &["--timeout", "90s"]).ok();
    assert!(run.stdout.contains("create    Job.batch"), "{}", run.stdout);
    let plan = kix.kix(&[
        "plan",
        kix.cluster(),
        "--path",
        changed.to_str().expect("utf-8"),
        "--exit-code",
    ]);
    assert_eq!(plan.code, Some(0), "{}", plan.stdout);
}

#[tokio::test]
async fn with_the_operator_running_a_finished_job_is_not_run_again() {
    let kix = Kix::new("jobs-operator").await;
    let _operator = common::Operator::start(
        &kix_testkit::kubeconfig_path(),
        &[kix.cluster()],
        kix.ns(),
        &kix_testkit::unique_name("lease"),
        kix.dir.path().join("operator.log"),
        None,
    );
    let objects = cli_support::configmap("settings", "1") + &job("--host=a");
    let tree = kix.tree("v1", &objects, serde_json::json!({}));
    kix.deploy(&tree, &["--operator"]).ok();
    wait_gone(&kix);
    // Over a resync of the test operator (10 s) and two redeploys of the
    // same build, the Job is not created again.
    let until = Instant::now() + Duration::from_secs(12);
    while Instant::now() < until {
        assert!(!job_exists(&kix), "the operator created the Job again");
        std::thread::sleep(Duration::from_millis(500));
    }
    for _ in 0..2 {
        kix.deploy(&tree, &["--operator"]).ok();
        assert!(!job_exists(&kix), "the Job was created again");
    }
    let log = std::fs::read_to_string(kix.dir.path().join("operator.log")).unwrap_or_default();
    assert!(!job_exists(&kix), "operator log:\n{log}");
}

/// ingress-nginx's published manifest (the shared corpus, read at run time),
/// its documents of `kind` named `ingress-nginx-admission*`, moved into the
/// test's namespace.
fn ingress_nginx_admission(kix: &Kix, kind: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/corpus/realworld/ingress-nginx/deploy.yaml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let documents: Vec<String> = text
        .split("\n---\n")
        .filter(|d| d.contains(&format!("\nkind: {kind}\n")))
        .filter(|d| d.contains("name: ingress-nginx-admission"))
        .map(|d| {
            let d = d.trim_start_matches("---\n");
            format!(
                "---\n{}\n",
                d.replace(
                    "namespace: ingress-nginx",
                    &format!("namespace: {}", kix.ns())
                )
            )
        })
        .collect();
    assert!(!documents.is_empty(), "no {kind} in {}", path.display());
    documents.concat()
}

/// A Deployment that is Available only 20 s after its Pod is Ready: a
/// neighbour slower than a TTL-0 Job.
fn slow_deployment(name: &str) -> String {
    cli_support::deployment(name, true).replace(
        "spec:\n  replicas: 1\n",
        "spec:\n  replicas: 1\n  minReadySeconds: 20\n",
    )
}

#[tokio::test]
async fn ingress_nginx_admission_jobs_deploy_the_first_time_beside_slow_neighbours() {
    let kix = Kix::new("jobs-ttl0").await;
    let jobs = ingress_nginx_admission(&kix, "Job");
    assert_eq!(
        jobs.matches("ttlSecondsAfterFinished: 0").count(),
        2,
        "{jobs}"
    );
    let objects =
        ingress_nginx_admission(&kix, "ServiceAccount") + &jobs + &slow_deployment("controller");
    let tree = kix.tree("v1", &objects, serde_json::json!({}));
    let started = Instant::now();
    let run = kix.deploy(&tree, &["--timeout", "150s"]);
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    // Bound: the neighbour's 20 s and the Jobs' runs, far below the timeout.
    assert!(
        started.elapsed() < Duration::from_secs(120),
        "took {:?}",
        started.elapsed()
    );
    let records = kix.records().await;
    let phase = records.last().and_then(|r| r.phase());
    assert_eq!(phase, Some(kix_api::Phase::Active), "{}", run.stdout);

    // Both finished Jobs are remembered: the next deploy does not create them.
    let plan = kix.kix(&[
        "plan",
        kix.cluster(),
        "--path",
        tree.to_str().expect("utf-8"),
        "--exit-code",
    ]);
    assert_eq!(plan.code, Some(0), "{}", plan.stdout);
    assert_eq!(
        plan.stdout.matches("unchanged (completed)").count(),
        2,
        "{}",
        plan.stdout
    );
}

#[tokio::test]
async fn a_job_that_finished_is_remembered_though_a_neighbour_failed() {
    let kix = Kix::new("jobs-neighbour-failed").await;
    let objects = job("--host=a") + &cli_support::deployment("stuck", false);
    let tree = kix.tree("v1", &objects, serde_json::json!({}));
    let run = kix.deploy(&tree, &["--timeout", "30s"]);
    assert_ne!(run.code, Some(0), "{}", run.stdout);
    let said = format!("{}{}", run.stdout, run.stderr);
    assert!(said.contains("Deployment"), "{said}");
    assert!(!said.contains("admission-create not healthy"), "{said}");
    wait_gone(&kix);
    // The Job ran for this build: a rerun waits for the Deployment only.
    let plan = kix.kix(&[
        "plan",
        kix.cluster(),
        "--path",
        tree.to_str().expect("utf-8"),
    ]);
    assert!(
        plan.stdout.contains("unchanged (completed)"),
        "{}",
        plan.stdout
    );
}

/// A Job whose Pod is never scheduled: it runs until someone deletes it.
fn stuck_job() -> String {
    job("--host=a")
        .replace("  ttlSecondsAfterFinished: 0\n", "")
        .replace(
            "      restartPolicy: OnFailure\n",
            "      restartPolicy: OnFailure\n      nodeSelector: {kix-test: nowhere}\n",
        )
}

#[tokio::test]
async fn a_job_deleted_by_hand_mid_deploy_is_reported_once_not_waited_for() {
    let kix = Kix::new("jobs-by-hand").await;
    let tree = kix.tree("v1", &stuck_job(), serde_json::json!({}));
    let started = Instant::now();
    let run = std::thread::scope(|scope| {
        let deploy = scope.spawn(|| kix.deploy(&tree, &["--timeout", "240s"]));
        let until = Instant::now() + Duration::from_secs(60);
        while !job_exists(&kix) {
            assert!(Instant::now() < until, "the Job was never created");
            std::thread::sleep(Duration::from_millis(200));
        }
        std::thread::sleep(Duration::from_secs(2));
        kix.kubectl(&[
            "delete",
            "job",
            "-n",
            kix.ns(),
            "admission-create",
            "--wait=false",
        ]);
        deploy.join().expect("deploy thread")
    });
    // Bound: far below the 240 s timeout.
    assert!(
        started.elapsed() < Duration::from_secs(120),
        "took {:?}",
        started.elapsed()
    );
    assert_ne!(run.code, Some(0), "{}", run.stdout);
    let said = format!("{}{}", run.stdout, run.stderr);
    assert!(
        said.contains("admission-create degraded: deleted before it finished; kix saw no outcome"),
        "{said}"
    );
    assert!(!said.contains("timed out"), "{said}");
}

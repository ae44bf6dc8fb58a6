//! `kix rollback` end to end: the real binary, real Nix store paths, the
//! local control plane.

mod cli_support;

use std::process::Command;
use std::time::{Duration, Instant};

use cli_support::{Kix, configmap, deployment, nix_delete, path_of};
use kix_api::Phase;

#[tokio::test]
async fn rollback_reapplies_the_previous_build_and_records_its_origin() {
    let kix = Kix::new("rollback").await;
    let v1 = kix.tree(
        "v1",
        &(configmap("app", "1") + &configmap("only-v1", "x")),
        serde_json::json!({}),
    );
    let v2 = kix.tree(
        "v2",
        &(configmap("app", "2") + &configmap("only-v2", "x")),
        serde_json::json!({}),
    );
    kix.deploy(&v1, &[]).ok();
    kix.deploy(&v2, &[]).ok();

    let run = kix
        .kix(&["rollback", kix.cluster(), "--yes", "--output", "json"])
        .ok();
    let out = run.json();
    assert_eq!(out["target"], kix.name(1));
    assert_eq!(out["rollbackFrom"], kix.name(2));
    assert_eq!(out["outcome"]["phase"], "Active");

    let records = kix.records().await;
    assert_eq!(records.len(), 3);
    let (first, second, third) = (&records[0], &records[1], &records[2]);
    assert_eq!(
        third.spec.receipt.rollback_from.as_deref(),
        Some(kix.name(2).as_str())
    );
    assert_eq!(path_of(third), path_of(first));
    assert_eq!(third.phase(), Some(Phase::Active));
    assert_eq!(second.phase(), Some(Phase::Superseded));
    // The cluster has the first build again, prune included.
    assert_eq!(kix.configmap("app").expect("app")["data"]["v"], "1");
    assert!(kix.configmap("only-v1").is_some());
    assert!(kix.configmap("only-v2").is_none(), "pruned on rollback");

    // --to the record of the same build as the current one: nothing to do.
    kix.kix(&["rollback", kix.cluster(), "--to", &kix.name(1), "--yes"])
        .ok();
    assert_eq!(kix.records().await.len(), 3);
    // --to the current one, or one that does not exist: refused.
    let run = kix
        .kix(&["rollback", kix.cluster(), "--to", &kix.name(3), "--yes"])
        .code(1);
    assert!(
        run.stderr.contains("is the current activation"),
        "{}",
        run.stderr
    );
    let run = kix
        .kix(&["rollback", kix.cluster(), "--to", "nope-1", "--yes"])
        .code(1);
    assert!(
        run.stderr.contains("has no activation \"nope-1\""),
        "{}",
        run.stderr
    );
    // Without a terminal and without --yes: refused before any change.
    let run = kix.kix(&["rollback", kix.cluster()]).code(1);
    assert!(run.stderr.contains("confirmation needed"), "{}", run.stderr);
    assert_eq!(kix.records().await.len(), 3);
}

#[tokio::test]
async fn rollback_refuses_a_garbage_collected_build_before_any_change() {
    let kix = Kix::new("rollback-gone").await;
    let v1 = kix.tree("v1", &configmap("app", "1"), serde_json::json!({}));
    let v2 = kix.tree("v2", &configmap("app", "2"), serde_json::json!({}));
    kix.deploy(&v1, &[]).ok();
    kix.deploy(&v2, &[]).ok();
    let records = kix.records().await;
    let path1 = path_of(&records[0]);
    // The root of activation 1 is what keeps its build.
    assert!(!nix_delete(&path1), "{path1} is rooted");
    std::fs::remove_file(kix.roots.join(kix.cluster()).join(kix.name(1))).expect("remove the root");
    assert!(
        nix_delete(&path1),
        "{path1} is collectable once its root is gone"
    );

    let run = kix.kix(&["rollback", kix.cluster(), "--yes"]).code(1);
    assert!(run.stderr.contains(&path1), "{}", run.stderr);
    assert!(
        run.stderr.contains("no longer in the Nix store"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("hint: "), "{}", run.stderr);
    let after = kix.records().await;
    assert_eq!(after.len(), 2, "no record written");
    assert_eq!(after[1].phase(), Some(Phase::Active));
    assert_eq!(kix.configmap("app").expect("app")["data"]["v"], "2");
}

/// The full-screen view, for real, under tmux; and a rollback to a build
/// that does not become healthy exits 1.
#[tokio::test]
async fn tui_under_tmux_and_an_unhealthy_rollback_exits_1() {
    if Command::new("tmux").arg("-V").output().is_err() {
        eprintln!("SKIPPED: tmux is not installed");
        return;
    }
    let kix = Kix::new("rollback-tui").await;
    // Build 1 never becomes healthy: deployed with --on-error continue it is
    // Degraded, then superseded by build 2.
    let v1 = kix.tree(
        "v1",
        &(configmap("app", "1") + &deployment("stuck", false)),
        serde_json::json!({}),
    );
    let v2 = kix.tree("v2", &configmap("app", "2"), serde_json::json!({}));
    let run = kix
        .deploy(&v1, &["--on-error", "continue", "--timeout", "2s"])
        .code(1);
    assert!(run.stdout.contains("Degraded"), "{}", run.stdout);
    kix.deploy(&v2, &[]).ok();

    let session = format!("kix-{}", kix.cluster());
    let done = kix.dir.path().join("exit-code");
    let script = format!(
        "KUBECONFIG={} KIX_GCROOTS_DIR={} {} rollback {} --yes --tui --timeout 8s; echo $? > {}; sleep 60",
        kix_testkit::kubeconfig_path().display(),
        kix.roots.display(),
        cli_support::kix_bin(),
        kix.cluster(),
        done.display()
    );
    let status = tmux(&session)
        .args([
            "new-session",
            "-d",
            "-s",
            &session,
            "-x",
            "120",
            "-y",
            "40",
            &script,
        ])
        .status()
        .expect("tmux runs");
    assert!(status.success());
    let capture = || {
        let out = tmux(&session)
            .args(["capture-pane", "-p", "-t", &session])
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // While it waits for the Deployment: the view, with its three panes.
    let started = Instant::now();
    let mut screen = String::new();
    while started.elapsed() < Duration::from_secs(30) {
        screen = capture();
        if screen.contains("waiting for Deployment") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let kill = || {
        let _ = tmux(&session)
            .args(["kill-session", "-t", &session])
            .status();
    };
    for expected in [
        " kix rollback ",
        " Plan ",
        " Progress ",
        " Log ",
        "package web",
        "waiting for Deployment",
        "recorded activation",
    ] {
        if !screen.contains(expected) {
            kill();
            panic!("{expected:?} not on the screen:\n{screen}");
        }
    }
    // Then it ends Failed (the Deployment never becomes Available): exit 1,
    // the view gone, the final progress printed.
    let started = Instant::now();
    while !done.exists() && started.elapsed() < Duration::from_secs(40) {
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let screen = capture();
    kill();
    let code = std::fs::read_to_string(&done).unwrap_or_default();
    assert_eq!(code.trim(), "1", "exit code; screen:\n{screen}");
    assert!(screen.contains("✗ package web"), "{screen}");
    assert!(
        screen.contains(&format!("{}: Failed", kix.name(3))),
        "{screen}"
    );
    let records = kix.records().await;
    assert_eq!(records[2].phase(), Some(Phase::Failed));
    assert_eq!(
        records[2].spec.receipt.rollback_from.as_deref(),
        Some(kix.name(2).as_str())
    );
}

/// tmux with a server of the test's own (`-L`): parallel tests never race to
/// start or stop a shared default server.
fn tmux(socket: &str) -> Command {
    let mut command = Command::new("tmux");
    // CI may run without TERM; tmux's client needs one even when detached.
    command.args(["-L", socket]).env("TERM", "xterm-256color");
    command
}

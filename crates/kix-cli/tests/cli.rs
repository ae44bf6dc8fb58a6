//! Exit codes and conventions, end to end: each exit status docs/cli.md
//! lists, the hints for common failures, completions, the man page, log
//! formats.

mod cli_support;

use std::process::Command;

use cli_support::{Kix, configmap, deployment, kix_bin, run};

fn kix() -> Command {
    let mut cmd = Command::new(kix_bin());
    cmd.env_remove("KIX_LOG")
        .env("KUBECONFIG", kix_testkit::kubeconfig_path())
        .stdin(std::process::Stdio::null());
    cmd
}

// ---------------------------------------------------------------- 0 and 2

#[test]
fn exit_0_for_completions_man_and_version() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = run(kix().args(["completions", shell])).ok();
        assert!(out.stdout.contains("rollback"), "{shell}: {}", out.stdout);
    }
    let man = run(kix().arg("man")).ok();
    for expected in [
        ".TH kix",
        "KIX ROLLBACK",
        "KIX GC",
        "EXIT STATUS",
        "\\-\\-exit\\-code",
    ] {
        assert!(
            man.stdout.contains(expected),
            "{expected:?} not in the man page"
        );
    }
    let version = run(kix().arg("--version")).ok();
    assert!(version.stdout.starts_with("kix "), "{}", version.stdout);
}

#[test]
fn exit_2_for_usage_errors() {
    for args in [
        vec!["deploy"],
        vec!["--no-such-flag"],
        vec!["no-such-command"],
        vec!["gc", "x", "--max-age", "soon"],
        vec!["completions", "tcsh"],
        vec!["status", "x", "--output", "yaml"],
    ] {
        let out = run(kix().args(&args)).code(2);
        assert!(out.stderr.contains("error:"), "{args:?}: {}", out.stderr);
    }
}

// ---------------------------------------------------------------- 1

#[tokio::test]
async fn exit_1_when_confirmation_is_needed_without_a_terminal() {
    let kix = Kix::new("cli-confirm").await;
    let tree = kix.tree("v1", &configmap("app", "1"), serde_json::json!({}));
    let out = kix
        .kix(&[
            "deploy",
            kix.cluster(),
            "--path",
            tree.to_str().expect("path"),
        ])
        .code(1);
    assert!(out.stderr.contains("confirmation needed"), "{}", out.stderr);
    assert!(out.stderr.contains("nothing was changed"), "{}", out.stderr);
    assert!(kix.records().await.is_empty());
    assert!(kix.configmap("app").is_none());
}

#[tokio::test]
async fn exit_1_for_a_degraded_deploy_and_3_for_plan_exit_code() {
    let kix = Kix::new("cli-degraded").await;
    let good = kix.tree("good", &configmap("app", "1"), serde_json::json!({}));
    let path = good.to_str().expect("path");
    // plan --exit-code: 3 with changes, 0 without.
    let out = kix
        .kix(&["plan", kix.cluster(), "--path", path, "--exit-code"])
        .code(3);
    assert!(out.stdout.contains("1 to create"), "{}", out.stdout);
    kix.kix(&["plan", kix.cluster(), "--path", path]).ok();
    kix.deploy(&good, &[]).ok();
    kix.kix(&["plan", kix.cluster(), "--path", path, "--exit-code"])
        .ok();

    let bad = kix.tree(
        "bad",
        &(configmap("app", "2") + &deployment("stuck", false)),
        serde_json::json!({}),
    );
    let out = kix
        .deploy(&bad, &["--on-error", "continue", "--timeout", "2s"])
        .code(1);
    assert!(
        out.stdout.contains(": Degraded"),
        "{}\n{}",
        out.stdout,
        out.stderr
    );
    let out = kix.deploy(&bad, &["--timeout", "2s", "-o", "json"]).code(1);
    let outcome: serde_json::Value = serde_json::from_str(
        out.stdout
            .rsplit_once("\n{")
            .map(|(_, last)| format!("{{{last}"))
            .as_deref()
            .unwrap_or(&out.stdout),
    )
    .unwrap_or_else(|e| panic!("{e}: {}", out.stdout));
    assert!(
        matches!(outcome["phase"].as_str(), Some("Failed" | "Degraded")),
        "{outcome}"
    );
}

#[tokio::test]
async fn exit_1_when_gc_cannot_delete_a_record() {
    let kix = Kix::new("cli-gc-stuck").await;
    let v1 = kix.tree("v1", &configmap("app", "1"), serde_json::json!({}));
    let v2 = kix.tree("v2", &configmap("app", "2"), serde_json::json!({}));
    kix.deploy(&v1, &[]).ok();
    kix.deploy(&v2, &[]).ok();
    let first = kix.name(1);
    kix.kubectl(&[
        "patch",
        "activations.kix.run",
        &first,
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":["test.kix.run/hold"]}}"#,
    ]);
    let out = kix
        .kix(&["gc", kix.cluster(), "--keep", "0", "--yes"])
        .code(1);
    assert!(
        out.stdout
            .contains(&format!("could not delete record {first}")),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("test.kix.run/hold"), "{}", out.stdout);
    // Its GC root stays while the record exists.
    assert!(kix.roots.join(kix.cluster()).join(&first).exists());
    kix.kubectl(&[
        "patch",
        "activations.kix.run",
        &first,
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ]);
}

// ---------------------------------------------------------------- hints

#[test]
fn hint_when_there_is_no_kubeconfig() {
    let home = tempfile::tempdir().expect("tempdir");
    let out = run(kix()
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .args(["history", "prod"]))
    .code(1);
    assert!(
        out.stderr.contains("/nonexistent/kubeconfig"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("hint: no kubeconfig"), "{}", out.stderr);
    // No KUBECONFIG at all, no ~/.kube/config.
    let out = run(kix()
        .env_remove("KUBECONFIG")
        .env("HOME", home.path())
        .env_remove("KUBERNETES_SERVICE_HOST")
        .args(["status", "prod"]))
    .code(1);
    assert!(out.stderr.contains("hint: "), "{}", out.stderr);
    // An empty KUBECONFIG is no KUBECONFIG (not a usage error).
    let out = run(kix()
        .env("KUBECONFIG", "")
        .env("HOME", home.path())
        .args(["status", "prod"]))
    .code(1);
    assert!(out.stderr.contains("hint: "), "{}", out.stderr);
}

#[test]
fn hint_for_an_unknown_context() {
    let out = run(kix().args(["--context", "no-such-context", "history", "prod"])).code(1);
    assert!(out.stderr.contains("no-such-context"), "{}", out.stderr);
    assert!(
        out.stderr.contains("kubectl config get-contexts"),
        "{}",
        out.stderr
    );
}

#[test]
fn hint_when_kix_crds_are_missing() {
    // The same apiserver under a path where it serves nothing: every request
    // answers 404, as an apiserver without kix's CRDs does for activations.
    let dir = tempfile::tempdir().expect("tempdir");
    let admin = std::fs::read_to_string(kix_testkit::kubeconfig_path()).expect("kubeconfig");
    let prefixed: String = admin
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("server: ") {
                format!("{l}/no-kix-here\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let file = dir.path().join("kubeconfig");
    std::fs::write(&file, prefixed).expect("write");
    let out = run(kix().env("KUBECONFIG", &file).args(["history", "prod"])).code(1);
    assert!(
        out.stderr.contains("CRDs are not installed"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("hint: kix's CRDs are not installed"),
        "{}",
        out.stderr
    );
}

#[tokio::test]
async fn hint_when_permission_is_denied() {
    let kix = Kix::new("cli-forbidden").await;
    kix.kubectl(&["create", "serviceaccount", "-n", kix.ns(), "nobody"]);
    let token = kix.kubectl(&["create", "token", "-n", kix.ns(), "nobody"]);
    let admin = std::fs::read_to_string(kix_testkit::kubeconfig_path()).expect("kubeconfig");
    let clusters: String = admin
        .lines()
        .take_while(|l| !l.starts_with("users:"))
        .map(|l| format!("{l}\n"))
        .collect();
    let kubeconfig = format!(
        "{clusters}users:\n- name: nobody\n  user:\n    token: {}\ncontexts:\n- name: nobody\n  context: {{cluster: kix-local, user: nobody}}\ncurrent-context: nobody\n",
        token.trim()
    );
    let file = kix.dir.path().join("nobody.kubeconfig");
    std::fs::write(&file, kubeconfig).expect("write");
    let out = run(kix
        .cmd()
        .env("KUBECONFIG", &file)
        .args(["status", kix.cluster()]))
    .code(1);
    assert!(out.stderr.contains("forbidden"), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("hint: the Kubernetes user of this kubeconfig lacks permission"),
        "{}",
        out.stderr
    );
}

#[tokio::test]
async fn hint_when_nix_is_not_installed() {
    let kix = Kix::new("cli-no-nix").await;
    let tree = kix.tree("v1", &configmap("app", "1"), serde_json::json!({}));
    let out = run(kix.cmd().env("PATH", "/nonexistent").args([
        "deploy",
        kix.cluster(),
        "--path",
        tree.to_str().expect("path"),
        "--yes",
    ]))
    .code(1);
    assert!(
        out.stderr.contains("Nix is not installed"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("hint: kix needs Nix"), "{}", out.stderr);
}

// ---------------------------------------------------------------- logging

#[test]
fn log_format_json_reports_errors_as_json() {
    let out = run(kix().env("KUBECONFIG", "/nonexistent/kubeconfig").args([
        "--log-format",
        "json",
        "history",
        "prod",
    ]))
    .code(1);
    let line = out.stderr.lines().last().unwrap_or_default();
    let report: serde_json::Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {}", out.stderr));
    assert_eq!(report["level"], "ERROR");
    assert!(report["hint"].is_string(), "{report}");
}

#[tokio::test]
async fn progress_plain_by_default_json_with_log_format_json_none_with_quiet() {
    let kix = Kix::new("cli-progress").await;
    let v1 = kix.tree("v1", &configmap("app", "1"), serde_json::json!({}));
    let v2 = kix.tree("v2", &configmap("app", "2"), serde_json::json!({}));
    let v3 = kix.tree("v3", &configmap("app", "3"), serde_json::json!({}));
    let out = kix.deploy(&v1, &[]).ok();
    assert!(
        out.stderr.contains("package web: applying 1 objects"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("package web: healthy"),
        "{}",
        out.stderr
    );
    let out = run(kix
        .cmd()
        .args([
            "--log-format",
            "json",
            "deploy",
            kix.cluster(),
            "--yes",
            "--path",
        ])
        .arg(&v2))
    .ok();
    let events: Vec<serde_json::Value> = out
        .stderr
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    assert!(
        kinds.contains(&"recorded")
            && kinds.contains(&"groupStarted")
            && kinds.contains(&"finished"),
        "{}",
        out.stderr
    );
    let out = run(kix
        .cmd()
        .args(["-q", "deploy", kix.cluster(), "--yes", "--path"])
        .arg(&v3))
    .ok();
    assert!(!out.stderr.contains("package web"), "{}", out.stderr);
}

/// Colors on a terminal, none with NO_COLOR (run under tmux for a real tty).
#[tokio::test]
async fn colors_on_a_terminal_unless_no_color() {
    if Command::new("tmux").arg("-V").output().is_err() {
        eprintln!("SKIPPED: tmux is not installed");
        return;
    }
    let kix = Kix::new("cli-color").await;
    let tree = kix.tree("v1", &configmap("app", "1"), serde_json::json!({}));
    let screen = |no_color: bool| {
        let session = format!("kix-color-{}-{no_color}", kix.cluster());
        let done = kix.dir.path().join(format!("done-{no_color}"));
        let script = format!(
            "{} KUBECONFIG={} KIX_OFFLINE=true {} plan {} --path {}; touch {}; sleep 30",
            if no_color { "NO_COLOR=1" } else { "" },
            kix_testkit::kubeconfig_path().display(),
            kix_bin(),
            kix.cluster(),
            tree.display(),
            done.display()
        );
        let ok = tmux(&session)
            .args([
                "new-session",
                "-d",
                "-s",
                &session,
                "-x",
                "160",
                "-y",
                "40",
                &script,
            ])
            .status()
            .expect("tmux");
        assert!(ok.success());
        let started = std::time::Instant::now();
        while !done.exists() && started.elapsed() < std::time::Duration::from_secs(30) {
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        let out = tmux(&session)
            .args(["capture-pane", "-p", "-e", "-t", &session])
            .output()
            .expect("capture");
        let _ = tmux(&session)
            .args(["kill-session", "-t", &session])
            .status();
        let screen = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            done.exists(),
            "`kix plan` on the terminal did not finish within 30 s; the screen:\n{screen}"
        );
        screen
    };
    let colored = screen(false);
    assert!(colored.contains("create"), "{colored}");
    assert!(
        colored.contains("\u{1b}[32m"),
        "green create on a terminal:\n{colored:?}"
    );
    let plain = screen(true);
    assert!(plain.contains("create"), "{plain}");
    assert!(
        !plain.contains("\u{1b}[32m"),
        "no color with NO_COLOR:\n{plain:?}"
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

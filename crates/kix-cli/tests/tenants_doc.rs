//! docs/operator.md, "Several teams, one operator", runs as written: its
//! files (the code blocks marked `file=NAME`) are written to a scratch
//! directory, the Nix declaration is built and must be byte for byte the
//! JSON block, and every `$` line of its ```console blocks runs there in
//! order with bash, on a control plane of the test's own (the admission
//! policy is cluster-wide): a line ending in `&` starts a process that lives
//! until the test ends; the lines under a command are output it must print
//! (`...` is any text, runs of spaces are one), and output that starts with
//! `error` means the command must fail.
//!
//! The runner supplies what the page leaves to the reader: `alice.kubeconfig`
//! (a client certificate for user alice in group team-a), `nixos-modules/`
//! (the repository's), `kix`, `kix-operator` and `kubectl` on `PATH`,
//! `<nixpkgs>` (the host-tools builder) and `<kix>` (the repository's
//! `nix/`), and a free `--metrics-addr` for `kix-operator`.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const SECTION: &str = "## Several teams, one operator";

/// A file block, or a command with the output it must print.
#[derive(Debug)]
enum Step {
    File { name: String, text: String },
    Command { line: String, expected: Vec<String> },
}

fn steps(markdown: &str) -> Vec<Step> {
    let section = markdown
        .split_once(SECTION)
        .map(|(_, rest)| rest)
        .expect("docs/operator.md has the section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let mut steps = Vec::new();
    let mut block: Option<(String, Vec<&str>)> = None;
    for line in section.lines() {
        let fence = line.trim_start().starts_with("```");
        match (&mut block, fence) {
            (None, true) => block = Some((line.trim().to_string(), Vec::new())),
            (Some((_, lines)), false) => lines.push(line),
            (Some((info, lines)), true) => {
                steps.extend(block_steps(info, lines));
                block = None;
            }
            (None, false) => {}
        }
    }
    steps
}

fn block_steps(info: &str, lines: &[&str]) -> Vec<Step> {
    if let Some(name) = info
        .split_whitespace()
        .find_map(|w| w.strip_prefix("file="))
    {
        return vec![Step::File {
            name: name.to_string(),
            text: lines.join("\n") + "\n",
        }];
    }
    if info != "```console" {
        return vec![];
    }
    let mut steps = Vec::new();
    for line in lines {
        if let Some(command) = line.strip_prefix("$ ") {
            steps.push(Step::Command {
                line: command.to_string(),
                expected: vec![],
            });
        } else if let Some(Step::Command { expected, .. }) = steps.last_mut()
            && !line.trim().is_empty()
        {
            expected.push(line.trim().to_string());
        }
    }
    steps
}

fn squash(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `expected` (with `...` for any text) is in `output`.
fn shows(output: &str, expected: &str) -> bool {
    let output = squash(output);
    let mut rest = output.as_str();
    for part in expected.split("...").map(squash).filter(|p| !p.is_empty()) {
        match rest.find(&part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// A kubeconfig for user alice in group team-a: a client certificate the
/// control plane's CA signs.
fn alice_kubeconfig(cp: &kix_testkit::PrivateControlPlane, dir: &Path) -> PathBuf {
    let pki = cp.path().join("pki");
    let run = |cmd: &mut Command| {
        let out = cmd.output().expect("runs");
        assert!(out.status.success(), "{cmd:?}: {out:?}");
    };
    let p = |name: &str| dir.join(name).to_string_lossy().into_owned();
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").expect("ext");
    run(Command::new("openssl").args([
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/O=team-a/CN=alice",
        "-keyout",
        &p("alice.key"),
        "-out",
        &p("alice.csr"),
    ]));
    run(Command::new("openssl")
        .args(["x509", "-req", "-in", &p("alice.csr"), "-CA"])
        .arg(pki.join("ca.crt"))
        .arg("-CAkey")
        .arg(pki.join("ca.key"))
        .args([
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &p("client.ext"),
        ])
        .args(["-out", &p("alice.crt")]));
    let server = std::fs::read_to_string(cp.path().join("server")).expect("server");
    let config = dir.join("alice.kubeconfig");
    let kubectl = |args: &[&str]| {
        run(Command::new(kix_testkit::kubectl())
            .arg("--kubeconfig")
            .arg(&config)
            .args(["config"])
            .args(args));
    };
    let ca = pki.join("ca.crt").to_string_lossy().into_owned();
    kubectl(&[
        "set-cluster",
        "private",
        "--server",
        server.trim(),
        "--certificate-authority",
        &ca,
        "--embed-certs=true",
    ]);
    kubectl(&[
        "set-credentials",
        "alice",
        "--client-certificate",
        &p("alice.crt"),
        "--client-key",
        &p("alice.key"),
        "--embed-certs=true",
    ]);
    kubectl(&[
        "set-context",
        "alice",
        "--cluster",
        "private",
        "--user",
        "alice",
    ]);
    kubectl(&["use-context", "alice"]);
    config
}

/// The doc's Nix declaration of the tenants, built with the host-tools
/// builder: the file `kix crds --tenants` reads.
fn built_tenants(dir: &Path) -> String {
    let repo = kix_testkit::repo_root();
    let expr = format!(
        "import {}/tenants.nix {{ pkgs = import {}/nix/tests/host-tools.nix {{ }}; kix = {{ lib = import {}/nix {{ }}; }}; }}",
        dir.display(),
        repo.display(),
        repo.display()
    );
    let out = Command::new("nix-build")
        .args(["--no-out-link", "-E", &expr])
        .output()
        .expect("nix-build");
    assert!(
        out.status.success(),
        "building tenants.nix: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    std::fs::read_to_string(path).expect("the built declaration")
}

struct Background(Vec<(Child, PathBuf)>);

impl Drop for Background {
    fn drop(&mut self) {
        for (child, log) in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
            if std::thread::panicking() {
                eprintln!(
                    "{}:\n{}",
                    log.display(),
                    std::fs::read_to_string(&*log).unwrap_or_default()
                );
            }
        }
    }
}

#[test]
fn several_teams_one_operator_runs_as_documented() {
    let repo = kix_testkit::repo_root();
    let doc = std::fs::read_to_string(repo.join("docs/operator.md")).expect("docs/operator.md");
    let steps = steps(&doc);
    let commands = steps
        .iter()
        .filter(|s| matches!(s, Step::Command { .. }))
        .count();
    assert!(commands >= 10, "the section lost its commands: {steps:?}");

    let dir = tempfile::tempdir().expect("tempdir");
    let work = dir.path();
    for step in &steps {
        if let Step::File { name, text } = step {
            std::fs::write(work.join(name), text).expect("writing a file of the page");
        }
    }
    let json = std::fs::read_to_string(work.join("tenants.json")).expect("tenants.json");
    assert_eq!(
        built_tenants(work).trim(),
        json.trim(),
        "tenants.json is what tenants.nix builds"
    );
    std::os::unix::fs::symlink(repo.join("nixos-modules"), work.join("nixos-modules"))
        .expect("nixos-modules");

    let cp = kix_testkit::PrivateControlPlane::start();
    alice_kubeconfig(&cp, work);
    let gcroots = work.join("gcroots");
    let bin_dirs = [
        common::kix_bin(),
        common::operator_bin(),
        kix_testkit::kubectl(),
    ]
    .map(|bin| bin.parent().expect("a directory").display().to_string());
    let path = format!(
        "{}:{}",
        bin_dirs.join(":"),
        std::env::var("PATH").unwrap_or_default()
    );
    let nix_path = format!(
        "nixpkgs={}:kix={}",
        repo.join("nix/tests/host-tools.nix").display(),
        repo.join("nix").display()
    );
    let shell = |line: &str| {
        let mut cmd = Command::new("bash");
        cmd.args(["-o", "pipefail", "-c", line])
            .current_dir(work)
            .env("KUBECONFIG", cp.kubeconfig())
            .env("KIX_GCROOTS_DIR", &gcroots)
            .env("KIX_OFFLINE", "1")
            .env("NIX_PATH", &nix_path)
            .env("NO_COLOR", "1")
            .env("PATH", &path)
            .stdin(Stdio::null());
        cmd
    };
    let mut background = Background(vec![]);
    for step in &steps {
        let Step::Command { line, expected } = step else {
            continue;
        };
        if let Some(line) = line.strip_suffix('&') {
            let metrics = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            let line = line.trim().replacen(
                "kix-operator ",
                &format!("kix-operator --metrics-addr 127.0.0.1:{metrics} "),
                1,
            );
            let log = work.join(format!("background-{}.log", background.0.len()));
            let file = std::fs::File::create(&log).expect("log");
            let child = shell(&format!("exec {line}"))
                .stdout(file.try_clone().expect("log"))
                .stderr(file)
                .spawn()
                .expect("starting a background command");
            background.0.push((child, log));
            continue;
        }
        let out = shell(line).output().expect("running a command of the page");
        let output = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let must_fail = expected
            .first()
            .is_some_and(|e| e.to_lowercase().starts_with("error"));
        assert_eq!(
            out.status.success(),
            !must_fail,
            "`{line}` {} ({:?}):\n{output}",
            if must_fail { "succeeded" } else { "failed" },
            out.status.code()
        );
        for want in expected {
            assert!(
                shows(&output, want),
                "`{line}` does not show {want:?}:\n{output}"
            );
        }
    }
}

#[test]
fn expected_output_matches_with_ellipses_and_squashed_spaces() {
    assert!(shows("a  b\n c: Active (x)", "...b c: Active..."));
    assert!(shows("error: x y z", "error: ...z"));
    assert!(!shows("error: x y z", "error: ...z...y"));
    assert!(!shows("abc", "abd"));
}

//! The documentation's commands run: every `$ kix ...` line of
//! docs/getting-started.md (the README points there) is run with the examples,
//! in order, and must succeed.
//!
//! The guide names fixed Kix clusters (`infra`, `apps`) and the examples fix
//! their namespaces and a CRD, which `checks/demo` (or a person following the
//! guide) leaves on the shared control plane: so the commands run on a
//! control plane of the test's own, with GC roots in a scratch directory.

use std::path::PathBuf;
use std::process::{Command, Stdio};

fn repo() -> PathBuf {
    kix_testkit::repo_root()
}

/// `NIX_PATH` entry that makes `<nixpkgs>` the host-tools builder.
fn host_tools_nixpkgs() -> String {
    format!(
        "nixpkgs={}",
        repo().join("nix/tests/host-tools.nix").display()
    )
}

/// The `$ kix ...` lines of the ```console blocks of a markdown file.
fn kix_commands(markdown: &str) -> Vec<Vec<String>> {
    let mut commands = Vec::new();
    let mut in_console = false;
    for line in markdown.lines() {
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

#[test]
fn getting_started_commands_run() {
    let doc =
        std::fs::read_to_string(repo().join("docs/getting-started.md")).expect("read the guide");
    let commands = kix_commands(&doc);
    assert!(
        commands.len() >= 8,
        "the guide lost its commands: {commands:?}"
    );
    let cp = kix_testkit::PrivateControlPlane::start();
    let gcroots = tempfile::tempdir().expect("tempdir");
    for args in commands {
        let out = Command::new(env!("CARGO_BIN_EXE_kix"))
            .args(&args)
            .current_dir(repo())
            .env("KUBECONFIG", cp.kubeconfig())
            .env("KIX_GCROOTS_DIR", gcroots.path())
            .env("KIX_OFFLINE", "1")
            // The examples take `<nixpkgs>`; offline, with no nixpkgs here,
            // it is the host-tools builder of the library tests.
            .env("NIX_PATH", host_tools_nixpkgs())
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .output()
            .expect("run kix");
        assert!(
            out.status.success(),
            "`kix {}` failed ({:?}):\n{}\n{}",
            args.join(" "),
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn readme_starts_with_the_two_commands() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README");
    let first_block = readme
        .split("```sh")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a sh block");
    let lines: Vec<&str> = first_block
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    assert!(
        lines[0].starts_with("checks/demo") && lines[1].starts_with("checks/test"),
        "{lines:?}"
    );
    for script in ["checks/demo", "checks/test"] {
        assert!(repo().join(script).exists(), "{script} is missing");
    }
    let ci = std::fs::read_to_string(repo().join(".ci/run")).expect(".ci/run");
    assert!(
        ci.contains("checks/test"),
        ".ci/run must run the README's test command"
    );
}

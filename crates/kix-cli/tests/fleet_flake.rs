//! `kix fleet plan demo --flake REF` builds `REF#kixFleets.demo` (the
//! fixture flake of nix/tests/flake, in a copy of nix/ made a Git
//! repository as crates/kix-cli/tests/build.rs does), every member's build
//! with it. Its member's context is not in the kubeconfig given: the plan
//! shows it unreachable, which is all this needs of a cluster.

use std::path::Path;
use std::process::{Command, Stdio};

fn ok(cmd: &mut Command) -> String {
    let out = cmd.output().expect("the command runs");
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn fleet_commands_build_kix_fleets_of_a_flake() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    ok(Command::new("cp")
        .arg("-r")
        .arg(kix_testkit::repo_root().join("nix"))
        .arg(root));
    let system = ok(Command::new("nix-instantiate").args([
        "--eval",
        "--json",
        "-E",
        "builtins.currentSystem",
    ]));
    let flake = root.join("nix/tests/flake");
    std::fs::write(flake.join("system.nix"), system.trim()).expect("system.nix");
    for args in [&["init", "-q"][..], &["add", "-A"]] {
        ok(Command::new("git").args(args).current_dir(root));
    }
    let kubeconfig = root.join("empty.kubeconfig");
    std::fs::write(
        &kubeconfig,
        r#"{"apiVersion":"v1","kind":"Config","clusters":[],"contexts":[],"users":[]}"#,
    )
    .expect("kubeconfig");
    let stdout = ok(Command::new(env!("CARGO_BIN_EXE_kix"))
        .args(["fleet", "plan", "demo", "--summary", "--flake"])
        .arg(Path::new(&flake))
        .env("KUBECONFIG", &kubeconfig)
        .env("KIX_OFFLINE", "1")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null()));
    assert!(
        stdout.contains("Fleet demo (1 members, 1 waves"),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("one") && l.contains("kind-demo") && l.contains("UNREACHABLE")),
        "{stdout}"
    );
}

//! mkFleet's refusals say what is wrong and name the member: each `bad`
//! fleet of nix/tests/fleets.nix fails evaluation with every substring it
//! lists (nix/tests/run only sees that each one throws). And the good one
//! builds to a fleet file this crate reads, with the same waves.

use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn nix_instantiate(args: &[&str]) -> std::process::Output {
    Command::new("nix-instantiate")
        .args(args)
        .current_dir(repo())
        .output()
        .expect("nix-instantiate runs")
}

#[test]
fn bad_fleets_are_refused_naming_the_member() {
    let out = nix_instantiate(&[
        "--eval",
        "--strict",
        "--json",
        "-E",
        "builtins.mapAttrs (n: c: c.expect) (import ./nix/tests/fleets.nix { }).bad",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cases: std::collections::BTreeMap<String, Vec<String>> =
        serde_json::from_slice(&out.stdout).expect("the cases");
    assert!(cases.len() >= 7, "{cases:?}");
    for (case, expected) in cases {
        let attr = format!("bad.{case}.value.drvPath");
        let out = nix_instantiate(&["--eval", "nix/tests/fleets.nix", "-A", &attr]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{case} evaluated");
        for part in expected {
            assert!(stderr.contains(&part), "{case}: {part:?} not in:\n{stderr}");
        }
    }
}

#[test]
fn the_good_fleet_builds_to_a_file_kix_reads() {
    let out = Command::new("nix-build")
        .args(["--no-out-link", "nix/tests/fleets.nix", "-A", "good"])
        .current_dir(repo())
        .output()
        .expect("nix-build runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let file = kix_fleet::spec::FleetFile::read(std::path::Path::new(&path)).expect("a fleet");
    let waves: Vec<Vec<&str>> = file
        .spec
        .waves
        .iter()
        .map(|w| w.iter().map(|m| m.0.as_str()).collect())
        .collect();
    assert_eq!(waves, [["staging"], ["eu-1"], ["us-1"]]);
    assert!(
        file.spec
            .members
            .values()
            .all(|m| m.build.starts_with("/nix/store/"))
    );
    assert_eq!(file.spec.pause(), std::time::Duration::from_secs(1));
}

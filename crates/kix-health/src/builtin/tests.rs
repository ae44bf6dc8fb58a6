//! Every built-in rule against the status shapes in `fixtures/`: a file
//! `<project>/<kind>.<ready|progressing|degraded>[.<case>].json` must be
//! judged by its project's rule with that health, and every rule must meet
//! all three.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{compile_all, table};
use crate::{Health, RuleRef, Rules};

struct Fixture {
    path: PathBuf,
    project: String,
    expected: &'static str,
    object: Value,
}

fn fixtures() -> Vec<Fixture> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/builtin/fixtures");
    let mut found = Vec::new();
    let projects = std::fs::read_dir(&root).unwrap_or_else(|e| panic!("{}: {e}", root.display()));
    for project in projects.flatten().filter(|p| p.path().is_dir()) {
        let files = std::fs::read_dir(project.path()).unwrap_or_else(|e| panic!("{e}"));
        for file in files.flatten() {
            let path = file.path();
            if path.extension().is_none_or(|ext| ext != "json") {
                continue;
            }
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            let state = name.split('.').nth(1).unwrap_or_default();
            let expected = match state {
                "ready" => "Ready",
                "progressing" => "Progressing",
                "degraded" => "Degraded",
                other => panic!(
                    "{}: state {other:?} is not ready, progressing or degraded",
                    path.display()
                ),
            };
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
            let object =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            found.push(Fixture {
                project: project.file_name().to_string_lossy().into_owned(),
                path,
                expected,
                object,
            });
        }
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    found
}

#[test]
fn every_builtin_rule_compiles() {
    if let Err(e) = compile_all() {
        panic!("{e}");
    }
}

#[test]
fn every_fixture_is_judged_by_its_project_with_its_health() {
    let rules = Rules::builtin();
    let mut wrong = Vec::new();
    for fixture in fixtures() {
        let verdict = rules.judge(&fixture.object);
        let by_project = matches!(&verdict.rule, RuleRef::Builtin { project, .. } if *project == fixture.project);
        if verdict.health.as_str() != fixture.expected || !by_project {
            wrong.push(format!(
                "{}: expected {} by {}, got {} by {}",
                fixture.path.display(),
                fixture.expected,
                fixture.project,
                verdict.health,
                verdict.rule
            ));
        }
        // A reason is always given: the fields read, never an empty string.
        if let Some(reason) = verdict.health.reason() {
            assert!(!reason.is_empty(), "{}", fixture.path.display());
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_builtin_rule_has_a_ready_a_progressing_and_a_degraded_fixture() {
    let rules = Rules::builtin();
    let mut seen: BTreeSet<(String, &'static str)> = BTreeSet::new();
    for fixture in fixtures() {
        if let RuleRef::Builtin { project, kind } = rules.judge(&fixture.object).rule {
            seen.insert((format!("{project} {kind}"), fixture.expected));
        }
    }
    let mut missing = Vec::new();
    for rule in table() {
        for state in ["Ready", "Progressing", "Degraded"] {
            let key = (format!("{} {}", rule.project, rule.kind), state);
            if !seen.contains(&key) {
                missing.push(format!(
                    "{} {}: no {state} fixture",
                    rule.project, rule.kind
                ));
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

fn judge_fixture(path: &str) -> Health {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/builtin/fixtures");
    let text = std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    let object: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    Rules::builtin().judge(&object).health
}

#[test]
fn a_certificate_whose_issuer_is_missing_is_degraded_naming_the_message() {
    assert_eq!(
        judge_fixture("cert-manager/certificate.degraded.issuer-missing.json"),
        Health::Degraded {
            reason: "Ready=False DoesNotExist: Issuer missing not found".to_owned()
        }
    );
}

#[test]
fn a_route_refused_by_its_parent_names_the_parent_and_the_condition() {
    let health = judge_fixture("gateway-api/httproute.degraded.json");
    let reason = health.reason().unwrap_or_default();
    assert!(health.is_degraded(), "{health}");
    assert!(
        reason.contains("parent example-gateway: Accepted=False InvalidConfiguration"),
        "{reason}"
    );
}

#[test]
fn a_rollout_reason_is_its_rule_message() {
    let health = judge_fixture("argo-rollouts/rollout.degraded.json");
    assert_eq!(health.reason(), Some("phase Degraded: InvalidSpec"));
    let progressing = judge_fixture("argo-rollouts/rollout.progressing.json");
    assert_eq!(
        progressing.reason(),
        Some("workload generation not yet observed")
    );
}

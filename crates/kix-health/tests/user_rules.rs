//! Users' CEL rules: compiled up front, tried before the built-in library,
//! never an error that waits forever.

use kix_health::{ExprField, Health, RuleError, RuleRef, RuleSpec, Rules, UserRule};
use serde_json::{Value, json};

fn rule(source: &str, spec: Value) -> UserRule {
    UserRule {
        source: source.to_owned(),
        spec: serde_json::from_value(spec).unwrap_or_else(|e| panic!("{e}")),
    }
}

fn rules(list: Vec<UserRule>) -> Rules {
    Rules::with_user(list).unwrap_or_else(|e| panic!("{e}"))
}

fn widget(status: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget",
           "metadata": {"name": "w", "namespace": "default", "generation": 2}, "status": status})
}

fn widget_rule() -> UserRule {
    rule(
        "packages/web/package.json health[0]",
        json!({"group": "example.com", "kind": "Widget",
               "current": "status.phase == 'Running'",
               "inProgress": "status.phase == 'Starting'",
               "failed": "status.phase == 'Failed'",
               "message": "'phase ' + status.phase"}),
    )
}

fn user(source: &str) -> RuleRef {
    RuleRef::User {
        source: source.into(),
    }
}

#[test]
fn current_in_progress_and_failed_decide() {
    let rules = rules(vec![widget_rule()]);
    let source = "packages/web/package.json health[0]";
    for (phase, health) in [
        ("Running", Health::Ready),
        (
            "Starting",
            Health::Progressing {
                reason: "phase Starting".into(),
            },
        ),
        (
            "Failed",
            Health::Degraded {
                reason: "phase Failed".into(),
            },
        ),
        (
            "Paused",
            Health::Progressing {
                reason: "phase Paused".into(),
            },
        ),
    ] {
        let verdict = rules.judge(&widget(json!({"phase": phase})));
        assert_eq!(verdict.health, health, "{phase}");
        assert_eq!(verdict.rule, user(source));
    }
}

#[test]
fn without_the_rule_a_widget_is_judged_by_kstatus() {
    let verdict = Rules::builtin().judge(&widget(json!({"phase": "Failed"})));
    assert_eq!(
        verdict,
        kix_health::Verdict {
            health: Health::Ready,
            rule: RuleRef::Kstatus
        }
    );
}

#[test]
fn failed_is_checked_first() {
    let rules = rules(vec![rule(
        "kix.json health[0]",
        json!({"group": "example.com", "kind": "Widget",
               "current": "true", "failed": "status.?error.orValue('') != ''"}),
    )]);
    let verdict = rules.judge(&widget(json!({"error": "disk full"})));
    assert!(verdict.health.is_degraded(), "{}", verdict.health);
    assert!(rules.judge(&widget(json!({}))).health.is_ready());
}

#[test]
fn a_missing_field_is_not_a_match_and_the_reason_names_what_is_awaited() {
    let rules = rules(vec![rule(
        "kix.json health[0]",
        json!({"group": "example.com", "kind": "Widget",
               "current": "status.conditions.exists(c, c.type == 'Ready' && c.status == 'True')",
               "failed": "status.conditions.exists(c, c.type == 'Ready' && c.status == 'False')"}),
    )]);
    let no_status =
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}});
    assert_eq!(
        rules.judge(&no_status).health,
        Health::Progressing {
            reason:
                "waiting for `status.conditions.exists(c, c.type == 'Ready' && c.status == 'True')`"
                    .into()
        }
    );
    let not_ready = widget(json!({"conditions": [
        {"type": "Ready", "status": "False", "reason": "NoIssuer", "message": "issuer x not found"}]}));
    assert_eq!(
        rules.judge(&not_ready).health,
        Health::Degraded {
            reason: "Ready=False NoIssuer: issuer x not found".into()
        }
    );
}

#[test]
fn an_expression_that_cannot_be_evaluated_is_degraded_at_once_naming_it() {
    let rules = rules(vec![rule(
        "packages/db/package.json health[1]",
        json!({"group": "example.com", "kind": "Widget", "current": "status.replicas > 'three'"}),
    )]);
    let health = rules.judge(&widget(json!({"replicas": 3}))).health;
    let reason = health.reason().unwrap_or_default().to_owned();
    assert!(health.is_degraded(), "{health}");
    assert!(
        reason.starts_with("packages/db/package.json health[1]: current `status.replicas > 'three'` could not be evaluated"),
        "{reason}"
    );
}

#[test]
fn a_rule_that_does_not_compile_names_its_source_and_expression() {
    let error = Rules::with_user(vec![rule(
        "packages/web/package.json health[2]",
        json!({"group": "example.com", "kind": "Widget", "failed": "status.phase == "}),
    )])
    .err();
    let Some(RuleError::Compile {
        source_name,
        field,
        expr,
        ..
    }) = &error
    else {
        panic!("{error:?}");
    };
    assert_eq!(source_name, "packages/web/package.json health[2]");
    assert_eq!(*field, ExprField::Failed);
    assert_eq!(expr, "status.phase == ");
    let text = error.map(|e| e.to_string()).unwrap_or_default();
    assert!(
        text.starts_with("packages/web/package.json health[2]: health rule for Widget.example.com: failed `status.phase == ` does not compile"),
        "{text}"
    );
}

#[test]
fn a_rule_needs_an_expression_and_a_kind() {
    let none = Rules::with_user(vec![rule("kix.json health[0]", json!({"kind": "Widget"}))]).err();
    assert!(
        matches!(none, Some(RuleError::NoExpression { .. })),
        "{none:?}"
    );
    let no_kind =
        Rules::with_user(vec![rule("kix.json health[0]", json!({"current": "true"}))]).err();
    assert!(
        matches!(no_kind, Some(RuleError::NoKind { .. })),
        "{no_kind:?}"
    );
    let unknown: Result<RuleSpec, _> =
        serde_json::from_value(json!({"kind": "Widget", "healthy": "true"}));
    assert!(unknown.is_err());
}

#[test]
fn two_rules_for_one_kind_are_refused_naming_both() {
    let error = Rules::with_user(vec![
        widget_rule(),
        rule(
            "kix.json health[0]",
            json!({"group": "example.com", "kind": "Widget", "current": "true"}),
        ),
    ])
    .err()
    .map(|e| e.to_string());
    assert_eq!(
        error.as_deref(),
        Some(
            "kix.json health[0]: a health rule for Widget.example.com is already declared by packages/web/package.json health[0]"
        )
    );
}

#[test]
fn a_user_rule_overrides_the_builtin_one() {
    let certificate = json!({"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
        "metadata": {"name": "c"}, "status": {"conditions": [
            {"type": "Ready", "status": "False", "reason": "DoesNotExist", "message": "Issuer missing not found"}]}});
    let builtin = Rules::builtin().judge(&certificate);
    assert!(builtin.health.is_degraded());
    assert_eq!(
        builtin.rule.to_string(),
        "built-in cert-manager Certificate"
    );

    let rules = rules(vec![rule(
        "kix.json health[0]",
        json!({"group": "cert-manager.io", "kind": "Certificate", "current": "true"}),
    )]);
    let verdict = rules.judge(&certificate);
    assert_eq!(verdict.health, Health::Ready);
    assert_eq!(verdict.rule, user("kix.json health[0]"));
}

#[test]
fn a_rule_for_one_name_or_version_judges_only_those() {
    let rules = rules(vec![
        rule(
            "kix.json health[0]",
            json!({"group": "example.com", "kind": "Widget", "current": "false"}),
        ),
        rule(
            "kix.json health[1]",
            json!({"group": "example.com", "kind": "Widget", "name": "special", "current": "true"}),
        ),
        rule(
            "kix.json health[2]",
            json!({"group": "example.com", "kind": "Gadget", "version": "v2", "current": "true"}),
        ),
    ]);
    let mut special = widget(json!({}));
    special["metadata"]["name"] = json!("special");
    assert_eq!(rules.judge(&special).rule, user("kix.json health[1]"));
    assert_eq!(
        rules.judge(&widget(json!({}))).rule,
        user("kix.json health[0]")
    );
    let gadget = |version: &str| json!({"apiVersion": format!("example.com/{version}"), "kind": "Gadget", "metadata": {"name": "g"}});
    assert_eq!(rules.judge(&gadget("v2")).rule, user("kix.json health[2]"));
    assert_eq!(rules.judge(&gadget("v1")).rule, RuleRef::Kstatus);
}

#[test]
fn self_and_top_level_fields_are_bound() {
    let rules = rules(vec![rule(
        "kix.json health[0]",
        json!({"group": "example.com", "kind": "Widget",
               "current": "self.metadata.name == metadata.name && has(self.status.ok) && spec.size == 1"}),
    )]);
    let mut obj = widget(json!({"ok": true}));
    obj["spec"] = json!({"size": 1});
    assert_eq!(rules.judge(&obj).health, Health::Ready);
}

#[test]
fn a_rule_without_current_leaves_the_rest_to_kstatus() {
    let rules = rules(vec![rule(
        "kix.json health[0]",
        json!({"group": "apps", "kind": "Deployment", "failed": "metadata.?labels[?'broken'].hasValue()"}),
    )]);
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "d", "generation": 1, "labels": {"broken": "yes"}},
        "spec": {"replicas": 1}, "status": {"observedGeneration": 1}});
    assert_eq!(
        rules.judge(&deployment).health,
        Health::Degraded {
            reason: "failed `metadata.?labels[?'broken'].hasValue()` holds".into()
        }
    );
    let mut fine = deployment.clone();
    fine["metadata"]["labels"] = json!({});
    let verdict = rules.judge(&fine);
    assert_eq!(verdict.rule, RuleRef::Kstatus);
    assert!(verdict.health.is_progressing(), "{}", verdict.health);
}

#[test]
fn terminating_and_unobserved_objects_are_progressing_whatever_the_rule() {
    let rules = rules(vec![widget_rule()]);
    let mut old = widget(json!({"phase": "Failed", "observedGeneration": 1}));
    assert_eq!(
        rules.judge(&old).health,
        Health::Progressing {
            reason: "generation 2 not yet observed (observed 1)".into()
        }
    );
    old["metadata"]["deletionTimestamp"] = json!("2025-01-01T00:00:00Z");
    assert_eq!(
        rules.judge(&old).health,
        Health::Progressing {
            reason: "terminating".into()
        }
    );
}

#[test]
fn a_user_rule_for_configmaps_makes_them_read_whole() {
    assert!(Rules::builtin().judged_by_metadata("", "ConfigMap"));
    let rules = rules(vec![rule(
        "kix.json health[0]",
        json!({"kind": "ConfigMap", "current": "has(self.data)"}),
    )]);
    assert!(!rules.judged_by_metadata("", "ConfigMap"));
    assert!(rules.judged_by_metadata("", "Secret"));
}

#[test]
fn a_verdict_serializes_with_its_rule() {
    let verdict = Rules::builtin().judge(&widget(json!({})));
    assert_eq!(
        serde_json::to_value(&verdict).ok(),
        Some(json!({"health": {"status": "Ready"}, "rule": "kstatus"}))
    );
}

#[test]
fn an_unknown_function_is_degraded_naming_it_and_matches_is_there() {
    let rules = rules(vec![
        rule(
            "kix.json health[0]",
            json!({"group": "example.com", "kind": "Widget", "current": "status.phase.lowerAscii() == 'running'"}),
        ),
        rule(
            "kix.json health[1]",
            json!({"group": "example.com", "kind": "Gadget", "current": "status.phase.matches('^Run')"}),
        ),
    ]);
    let health = rules.judge(&widget(json!({"phase": "Running"}))).health;
    assert_eq!(
        health,
        Health::Degraded {
            reason: "kix.json health[0]: current `status.phase.lowerAscii() == 'running'` could not be evaluated: no function lowerAscii in kix's CEL".into()
        }
    );
    let mut gadget = widget(json!({"phase": "Running"}));
    gadget["kind"] = json!("Gadget");
    assert_eq!(rules.judge(&gadget).health, Health::Ready);
}

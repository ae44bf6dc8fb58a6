//! CEL bounded while it runs (#50, 2): an evaluation the estimate lets
//! through but that runs long (here: a regex compiled per item) ends its
//! object's health Degraded within the wall-clock limit, is not run again,
//! and while evaluators are busy with such rules a cheap rule is judged as
//! usual. One test: the evaluators are one process's, shared.

use std::time::{Duration, Instant};

use kix_health::evaluator::{EVALUATORS, WALL_LIMIT};
use kix_health::{RuleSpec, Rules, UserRule};
use serde_json::{Value, json};

const SLOW: &str = "status.patterns.all(p, 'ab'.matches(p))";

fn rules(kind: &str, current: &str) -> Rules {
    let rule = UserRule {
        source: format!("packages/{kind}/package.json health[0]"),
        spec: RuleSpec {
            group: "example.com".into(),
            kind: kind.into(),
            current: Some(current.into()),
            ..RuleSpec::default()
        },
    };
    Rules::with_user([rule]).unwrap_or_else(|e| panic!("{e}"))
}

/// 500 patterns, each taking milliseconds to compile (seconds in all).
fn slow_object(kind: &str) -> Value {
    let patterns: Vec<String> = (0..500)
        .map(|i| format!("^(a{{1,{}}}b|c[d-z]{{2,90}}){{1,30}}$", 50 + i))
        .collect();
    json!({"apiVersion": "example.com/v1", "kind": kind,
           "metadata": {"name": "w"}, "status": {"patterns": patterns}})
}

/// Judges on a thread, failing if that takes longer than `within`.
fn judged_within(rules: Rules, object: Value, within: Duration) -> (String, Duration) {
    let (send, receive) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let start = Instant::now();
        let health = rules.judge(&object).health.to_string();
        let _ = send.send((health, start.elapsed()));
    });
    receive
        .recv_timeout(within)
        .unwrap_or_else(|_| panic!("judging took longer than {within:?}"))
}

#[test]
fn a_long_evaluation_ends_at_the_wall_clock_limit_and_others_are_still_judged() {
    assert_eq!(EVALUATORS, 2, "this test keeps both evaluators busy");
    let margin = WALL_LIMIT + Duration::from_secs(3);
    let slow: Vec<(Rules, Value)> = ["Alpha", "Beta"]
        .into_iter()
        .map(|kind| (rules(kind, SLOW), slow_object(kind)))
        .collect();
    let runs: Vec<_> = slow
        .iter()
        .cloned()
        .map(|(rules, object)| std::thread::spawn(move || judged_within(rules, object, margin)))
        .collect();
    for (run, kind) in runs.into_iter().zip(["Alpha", "Beta"]) {
        let (health, _) = run.join().expect("judging panicked");
        assert_eq!(
            health,
            format!(
                "Degraded: packages/{kind}/package.json health[0]: health rule for \
                 {kind}.example.com exceeded its budget (1 s of evaluation)"
            )
        );
    }
    // Both overrunning evaluations still run: a third expensive rule finds
    // no evaluator within the limit, and says so.
    let (health, _) = judged_within(rules("Gamma", SLOW), slow_object("Gamma"), margin);
    assert!(
        health.ends_with(
            "exceeded its budget (waited 1 s for one of the 2 evaluators of expensive rules)"
        ),
        "{health}"
    );
    // A cheap rule runs in place, evaluators busy or not.
    let cheap = json!({"apiVersion": "example.com/v1", "kind": "Delta",
                       "metadata": {"name": "d"}, "status": {"ready": true}});
    let (health, took) = judged_within(rules("Delta", "status.ready"), cheap, margin);
    assert_eq!(health, "Ready");
    assert!(
        took < Duration::from_millis(500),
        "a cheap rule took {took:?}"
    );
    // A rule that overran is not run again on an object of that size.
    let (alpha, object) = slow[0].clone();
    let (health, took) = judged_within(alpha, object, margin);
    assert!(health.ends_with("(1 s of evaluation)"), "{health}");
    assert!(took < Duration::from_millis(500), "it ran again: {took:?}");
}

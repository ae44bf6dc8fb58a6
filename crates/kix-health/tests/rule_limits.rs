//! CEL rules bounded before they run (#50): an expression too long, too
//! deep, with too many operators or too costly is refused naming the rule,
//! the expression and the limit, and never reaches the `cel` crate's
//! recursive parser. Each case runs on a thread with a 256 KiB stack: a
//! regression overflows it (and aborts this test binary) rather than
//! passing. An expression at the limits compiles and evaluates on a 2 MiB
//! thread, as on a tokio worker.

use kix_health::bounds::{MAX_NESTING, MAX_OPERATORS};
use kix_health::{Health, RuleSpec, Rules, UserRule};
use serde_json::json;

const SOURCE: &str = "packages/web/package.json health[0]";

/// The rule's error, compiled on a thread of `stack` bytes.
fn compile_on(stack: usize, current: String) -> Result<Rules, String> {
    std::thread::Builder::new()
        .stack_size(stack)
        .spawn(move || {
            let rule = UserRule {
                source: SOURCE.to_owned(),
                spec: RuleSpec {
                    group: "example.com".into(),
                    kind: "Widget".into(),
                    current: Some(current),
                    ..RuleSpec::default()
                },
            };
            Rules::with_user([rule]).map_err(|e| e.to_string())
        })
        .expect("spawn")
        .join()
        .expect("the compiling thread panicked")
}

fn refused(current: String, words: &str) {
    let shown: String = current.chars().take(40).collect();
    let error = match compile_on(256 << 10, current) {
        Ok(_) => panic!("`{shown}...` was accepted"),
        Err(e) => e,
    };
    let prefix =
        format!("{SOURCE}: health rule for Widget.example.com: current is refused: it is ");
    assert!(error.starts_with(&prefix), "{error}");
    assert!(error.contains(words), "`{shown}...`: {error}");
    assert!(
        error.len() < 300,
        "the error repeats the expression: {error}"
    );
}

#[test]
fn a_long_sum_is_refused_naming_the_operator_limit() {
    refused(
        format!("1{} == 0", " + 1".repeat(20_000)),
        "80006 bytes long, over the limit of 4096",
    );
    refused(
        format!("1{} == 0", "+1".repeat(200)),
        "more than 128 operators",
    );
}

#[test]
fn a_long_field_chain_is_refused() {
    refused(
        format!("self{} == 0", ".a".repeat(20_000)),
        "over the limit of 4096",
    );
    refused(
        format!("self{} == 0", ".a".repeat(500)),
        "more than 128 operators",
    );
}

#[test]
fn a_long_or_is_refused() {
    refused(
        format!("false{}", " || false".repeat(300)),
        "more than 128 operators",
    );
    refused(
        format!("{}true", "!".repeat(300)),
        "more than 128 operators",
    );
}

#[test]
fn deep_parentheses_lists_and_maps_are_refused_naming_the_nesting_limit() {
    let deep = "nested more than 24 deep";
    refused(format!("{}true{}", "(".repeat(25), ")".repeat(25)), deep);
    refused(
        format!("size({}1{}) == 0", "[".repeat(30), "]".repeat(30)),
        deep,
    );
    refused(
        format!("size({}1{}) == 0", "{1:".repeat(30), "}".repeat(30)),
        deep,
    );
    // Unbalanced: refused before the parser sees it.
    refused("(".repeat(4_000), deep);
}

#[test]
fn nested_comprehensions_are_refused_naming_the_cost_limit() {
    let mut text = "x0 > 0".to_owned();
    for i in 0..10 {
        text = format!("[1,2,3,4,5,6,7,8,9,10].all(x{i}, {text})");
    }
    refused(text, "estimated cost over the limit of 1000000");
    refused(
        "self.a.all(x, self.b.all(y, self.c.exists(z, x == y && y == z)))".to_owned(),
        "estimated cost",
    );
}

#[test]
fn expressions_at_the_limits_compile_and_run_on_a_small_stack() {
    let depth = MAX_NESTING - 1;
    let ops = MAX_OPERATORS - 2;
    let shapes = [
        // Within the nesting limit, a chain using every operator left.
        format!(
            "{}1{}{} > 0",
            "(".repeat(depth),
            "+1".repeat(ops),
            ")".repeat(depth)
        ),
        format!(
            "size({}{}true{}) > 0",
            "[".repeat(depth - 1),
            "!".repeat(ops),
            "]".repeat(depth - 1)
        ),
        format!(
            "size({}self{}{}) > 0",
            "{1:".repeat(depth - 1),
            ".a".repeat(ops - depth),
            "}".repeat(depth - 1)
        ),
        format!("{}true{}", "(true && ".repeat(depth), ")".repeat(depth)),
    ];
    for text in shapes {
        let rules = compile_on(2 << 20, text.clone()).unwrap_or_else(|e| panic!("{e}"));
        let widget = json!({"apiVersion": "example.com/v1", "kind": "Widget",
                            "metadata": {"name": "w"}, "status": {}});
        let verdict = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || rules.judge(&widget))
            .expect("spawn")
            .join()
            .expect("judging panicked");
        // Judged by the rule (a missing field is Progressing, not a crash).
        assert_ne!(verdict.rule, kix_health::RuleRef::Kstatus, "{text}");
        assert!(
            !matches!(verdict.health, Health::Degraded { .. }),
            "{text}: {verdict:?}"
        );
    }
}

#[test]
fn a_rule_too_costly_for_the_objects_lists_is_degraded_at_once() {
    // Accepted (two nested comprehensions), but over this object's 20,000
    // items it would take 400 million steps: the evaluation never starts.
    let text = "status.items.all(x, status.items.exists(y, x == y))".to_owned();
    let rules = compile_on(2 << 20, text).unwrap_or_else(|e| panic!("{e}"));
    let items: Vec<u32> = (0..20_000).collect();
    let widget = json!({"apiVersion": "example.com/v1", "kind": "Widget",
                        "metadata": {"name": "w"}, "status": {"items": items}});
    let (send, receive) = std::sync::mpsc::channel();
    std::thread::spawn(move || send.send(rules.judge(&widget).health));
    let health = receive
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("the rule still ran after 10 s");
    assert_eq!(
        health.to_string(),
        format!(
            "Degraded: {SOURCE}: health rule for Widget.example.com: current exceeded its budget \
             (10000000 steps with lists of 20000 items)"
        )
    );
    // The same rule over a short list is judged as usual.
    let small = json!({"apiVersion": "example.com/v1", "kind": "Widget",
                       "metadata": {"name": "w"}, "status": {"items": [1, 2, 3]}});
    let text = "status.items.all(x, status.items.exists(y, x == y))".to_owned();
    let rules = compile_on(2 << 20, text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rules.judge(&small).health, Health::Ready);
}

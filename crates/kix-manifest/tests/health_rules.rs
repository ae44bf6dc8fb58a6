//! Health rules carried in the tree: `kix.json` and `package.json` list
//! CEL rules; the reader compiles them and refuses a bad one naming its
//! file, its place and its expression.

use std::fs;
use std::path::PathBuf;

use kix_manifest::{ReadOptions, TreeError, read_tree};
use serde_json::json;

struct Store {
    dir: tempfile::TempDir,
}

impl Store {
    fn new(kix_health: &str, web_health: &str) -> Store {
        let store = Store {
            dir: tempfile::tempdir().expect("tempdir"),
        };
        store.write(
            "kix.json",
            &format!(
                r#"{{"format":1,"cluster":"test","packages":["db","web"],"health":{kix_health}}}"#
            ),
        );
        store.write(
            "packages/web/package.json",
            &format!(r#"{{"name":"web","version":"1","dependsOn":["db"],"health":{web_health}}}"#),
        );
        store.write(
            "packages/db/package.json",
            r#"{"name":"db","version":"1","health":[{"kind":"Database","group":"example.com","current":"true"}]}"#,
        );
        store
    }

    fn root(&self) -> PathBuf {
        self.dir.path().canonicalize().expect("canonical tempdir")
    }

    fn write(&self, rel: &str, text: &str) {
        let path = self.root().join("build").join(rel);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(path, text).expect("write");
    }

    fn read(&self) -> Result<kix_manifest::Build, TreeError> {
        let options = ReadOptions {
            store_dir: self.root(),
            ..ReadOptions::default()
        };
        read_tree(&self.root().join("build"), &options)
    }
}

const WIDGET: &str = r#"[{"group":"example.com","kind":"Widget","current":"status.phase == 'Running'","failed":"status.phase == 'Failed'"}]"#;
const CERTIFICATE: &str = r#"[{"group":"cert-manager.io","kind":"Certificate","current":"true"}]"#;

#[test]
fn rules_are_read_from_kix_json_then_packages_in_dependency_order() {
    let build = Store::new(CERTIFICATE, WIDGET).read().expect("reads");
    let sources: Vec<&str> = build.health.iter().map(|r| r.source.as_str()).collect();
    assert_eq!(
        sources,
        [
            "kix.json health[0]",
            "packages/db/package.json health[0]",
            "packages/web/package.json health[0]"
        ]
    );
    let rules = build.health_rules().expect("compiles");
    let widget = |phase: &str| {
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
               "status": {"phase": phase}})
    };
    let failed = rules.judge(&widget("Failed"));
    assert!(failed.health.is_degraded(), "{}", failed.health);
    assert_eq!(
        failed.rule.to_string(),
        "packages/web/package.json health[0]"
    );
    assert!(rules.judge(&widget("Running")).health.is_ready());
}

#[test]
fn a_build_without_rules_has_none() {
    let build = Store::new("[]", "[]").read().expect("reads");
    assert_eq!(build.health.len(), 1, "db's rule only");
    let serialized = serde_json::to_value(Store::new("[]", "[]").read().expect("reads").health)
        .expect("serializes");
    assert_eq!(
        serialized[0]["source"],
        "packages/db/package.json health[0]"
    );
}

#[test]
fn a_rule_that_does_not_compile_is_refused_naming_file_rule_and_expression() {
    let bad = r#"[{"group":"example.com","kind":"Widget","current":"true"},{"group":"example.com","kind":"Gadget","failed":"status.phase =="}]"#;
    let error = Store::new("[]", bad).read().err().map(|e| e.to_string());
    let error = error.unwrap_or_default();
    assert!(
        error.starts_with(
            "packages/web/package.json health[1]: health rule for Gadget.example.com: failed `status.phase ==` does not compile"
        ),
        "{error}"
    );
}

#[test]
fn two_rules_for_one_kind_are_refused_naming_both_files() {
    let error = Store::new(WIDGET, WIDGET)
        .read()
        .err()
        .map(|e| e.to_string());
    assert_eq!(
        error.as_deref(),
        Some(
            "packages/web/package.json health[0]: a health rule for Widget.example.com is already declared by kix.json health[0]"
        )
    );
}

#[test]
fn an_unknown_field_of_a_rule_is_refused_naming_the_file() {
    let error = Store::new(r#"[{"kind":"Widget","healthy":"true"}]"#, "[]")
        .read()
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        error.starts_with("kix.json: unknown field `healthy`"),
        "{error}"
    );
}

/// The reader's error for a `package.json` rule whose `field` is `text`,
/// read on a thread with a 1 MiB stack (half a tokio worker's): a rule the
/// `cel` crate would recurse on too deeply aborts this binary instead.
fn refused_on_a_small_stack(field: &str, text: String) -> String {
    let field = field.to_owned();
    std::thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(move || {
            let rule = json!([{"group": "example.com", "kind": "Widget", field: text}]);
            let store = Store::new("[]", &rule.to_string());
            match store.read() {
                Ok(_) => panic!("the rule was accepted"),
                Err(e) => e.to_string(),
            }
        })
        .expect("spawn")
        .join()
        .expect("the reader panicked")
}

#[test]
fn a_rule_over_a_cel_limit_is_refused_naming_file_rule_and_limit() {
    let prefix = "packages/web/package.json health[0]: health rule for Widget.example.com: ";
    let cases = [
        (
            "current",
            format!("1{} == 0", "+1".repeat(20_000)),
            "current is refused: it is 40006 bytes long, over the limit of 4096",
        ),
        (
            "failed",
            format!("self{} == 0", ".a".repeat(2_000)),
            "failed is refused: it is more than 128 operators",
        ),
        (
            "inProgress",
            format!("false{}", "||false".repeat(500)),
            "inProgress is refused: it is more than 128 operators",
        ),
        (
            "current",
            format!("{}true{}", "(".repeat(200), ")".repeat(200)),
            "current is refused: it is nested more than 24 deep",
        ),
        (
            "current",
            format!("size({}1{}) > 0", "[".repeat(200), "]".repeat(200)),
            "current is refused: it is nested more than 24 deep",
        ),
    ];
    for (field, text, words) in cases {
        let error = refused_on_a_small_stack(field, text);
        assert!(error.starts_with(&format!("{prefix}{words}")), "{error}");
    }
}

#[test]
fn ten_nested_comprehensions_are_refused_by_their_estimated_cost() {
    let mut text = "x0 > 0".to_owned();
    for i in 0..10 {
        text = format!("[1,2,3,4,5,6,7,8,9,10].all(x{i}, {text})");
    }
    let error = refused_on_a_small_stack("current", text);
    assert_eq!(
        error,
        "packages/web/package.json health[0]: health rule for Widget.example.com: current is refused: \
         it is estimated cost over the limit of 1000000 (each comprehension counts 64 items)"
    );
}

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

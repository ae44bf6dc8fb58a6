//! `kix history` end to end.

mod cli_support;

use cli_support::{Kix, configmap, path_of};

#[tokio::test]
async fn history_lists_activations_newest_first_with_rollback_origin() {
    let kix = Kix::new("history").await;
    let v1 = kix.tree("v1", &configmap("app", "1"), serde_json::json!({}));
    let v2 = kix.tree("v2", &configmap("app", "2"), serde_json::json!({}));
    kix.deploy(&v1, &[]).ok();
    kix.deploy(&v2, &[]).ok();
    kix.kix(&["rollback", kix.cluster(), "--yes"]).ok();
    let records = kix.records().await;

    let history = kix
        .kix(&["history", kix.cluster(), "-o", "json"])
        .ok()
        .json();
    let rows = history.as_array().expect("array");
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(names, [kix.name(3), kix.name(2), kix.name(1)]);
    let phases: Vec<&str> = rows
        .iter()
        .map(|r| r["phase"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(phases, ["Active", "Superseded", "Superseded"]);
    assert_eq!(rows[0]["current"], true);
    assert_eq!(rows[1]["current"], false);
    assert_eq!(rows[0]["rollbackFrom"], kix.name(2));
    assert_eq!(rows[0]["path"], path_of(&records[0]));
    assert_eq!(rows[2]["counts"]["create"], 1);
    assert!(rows[0]["user"].is_string() && rows[0]["host"].is_string());

    let text = kix.kix(&["history", kix.cluster()]).ok().stdout;
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("  ACTIVATION"), "{text}");
    assert!(
        lines[1].starts_with(&format!("* {}", kix.name(3))),
        "{text}"
    );
    assert!(
        lines[1].contains(&format!("rollback from {}", kix.name(2))),
        "{text}"
    );
    assert!(lines[1].contains(&path_of(&records[0])), "{text}");
    assert!(
        lines[3].contains("Superseded") && lines[3].contains("+1 ~0 -0"),
        "{text}"
    );

    let limited = kix
        .kix(&["history", kix.cluster(), "-n", "1", "-o", "json"])
        .ok()
        .json();
    assert_eq!(limited.as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn history_of_an_unknown_cluster_is_empty() {
    let kix = Kix::new("history-none").await;
    let run = kix.kix(&["history", kix.cluster()]).ok();
    assert!(run.stdout.contains("has no activations"), "{}", run.stdout);
    assert_eq!(
        kix.kix(&["history", kix.cluster(), "-o", "json"])
            .ok()
            .json(),
        serde_json::json!([])
    );
}

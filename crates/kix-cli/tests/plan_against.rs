//! `kix plan CLUSTER --against STORE-PATH|current`: a plan of one build
//! against another, with no cluster (KUBECONFIG names a file that does not
//! exist). Build A is deployed to the real control plane; against that
//! undrifted cluster, `kix plan B` (live) and `kix plan B --against A`
//! (offline) hold the same objects with the same actions, and the same
//! digest: a changed field, an added object, a removed one (prune) and a
//! Secret whose value changed (redacted in both).

mod cli_support;

use std::collections::BTreeMap;

use cli_support::{Kix, configmap, path_of};
use serde_json::Value;

/// A Secret `name` whose one value is `encoded` (base64, in `data`).
fn secret(name: &str, encoded: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: Secret\nmetadata: {{name: {name}}}\ntype: Opaque\ndata: {{token: {encoded}}}\n"
    )
}

/// Every object of a plan's JSON by its key, with its action (prune too).
fn actions(plan: &Value) -> BTreeMap<String, String> {
    let objects = plan["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|p| p["objects"].as_array().into_iter().flatten())
        .chain(plan["prune"].as_array().into_iter().flatten());
    objects
        .map(|o| {
            let action = o["action"].as_str().unwrap_or_default().to_string();
            (o["key"].to_string(), action)
        })
        .collect()
}

/// The Secret's values before and after (`old-token-b7e1`,
/// `new-token-4c2d` in base64, as `data` holds them).
const OLD_SECRET: &str = "b2xkLXRva2VuLWI3ZTE=";
const NEW_SECRET: &str = "bmV3LXRva2VuLTRjMmQ=";
const SECRET_TEXTS: [&str; 4] = [OLD_SECRET, NEW_SECRET, "old-token-b7e1", "new-token-4c2d"];

#[tokio::test]
async fn an_offline_plan_against_the_deployed_build_is_the_live_plan() {
    let kix = Kix::new("plan-against").await;
    let a = configmap("changed", "1")
        + &configmap("kept", "1")
        + &configmap("removed", "1")
        + &secret("token", OLD_SECRET);
    let b = configmap("changed", "2")
        + &configmap("kept", "1")
        + &configmap("added", "1")
        + &secret("token", NEW_SECRET);
    let tree_a = kix.tree("a", &a, serde_json::json!({}));
    let tree_b = kix.tree("b", &b, serde_json::json!({}));
    kix.deploy(&tree_a, &[]).ok();
    let path_a = path_of(&kix.records().await[0]);
    let tree_b = tree_b.to_str().expect("utf-8");
    let live = kix
        .kix(&["plan", kix.cluster(), "--path", tree_b, "-o", "json"])
        .ok()
        .json();

    let dir = tempfile::tempdir().expect("tempdir");
    let nowhere = dir.path().join("no-such-kubeconfig");
    let offline = |extra: &[&str]| {
        let mut cmd = kix.cmd();
        cmd.env("KUBECONFIG", &nowhere)
            .args(["plan", kix.cluster(), "--path", tree_b])
            .args(extra);
        cli_support::run(&mut cmd).ok()
    };
    let against = offline(&["--against", &path_a, "-o", "json"]).json();

    let expected: BTreeMap<&str, &str> = [
        ("changed", "update"),
        ("kept", "unchanged"),
        ("added", "create"),
        ("removed", "delete"),
        ("token", "update"),
    ]
    .into();
    let live_actions = actions(&live);
    for (name, action) in &expected {
        let found = live_actions
            .iter()
            .find(|(key, _)| key.contains(&format!("\"name\":\"{name}\"")));
        assert_eq!(
            found.map(|(_, a)| a.as_str()),
            Some(*action),
            "the live plan's {name}: {live_actions:?}"
        );
    }
    assert_eq!(actions(&against), live_actions, "offline vs live");
    assert_eq!(against["counts"], live["counts"]);
    assert_eq!(
        against["digest"], live["digest"],
        "the same plan, the same seal"
    );
    assert_eq!(against["currentPath"], path_a.as_str());
    for plan in [&live, &against] {
        let text = plan.to_string();
        assert!(text.contains("(redacted)"), "{text}");
        for value in SECRET_TEXTS {
            assert!(!text.contains(value), "a Secret value in a plan: {text}");
        }
    }

    // --against current, from the document `kix status -o json` exports.
    let status = dir.path().join("status.json");
    let exported = kix
        .kix(&["status", kix.cluster(), "-o", "json"])
        .ok()
        .stdout;
    std::fs::write(&status, exported).expect("status.json");
    let status = status.to_str().expect("utf-8");
    let out = dir.path().join("plan.json");
    let current = offline(&[
        "--against",
        "current",
        "--current-from",
        status,
        "-o",
        "json",
        "--out",
        out.to_str().expect("utf-8"),
    ])
    .json();
    assert_eq!(actions(&current), live_actions);
    assert_eq!(current["currentActivation"], kix.name(1).as_str());
    assert_eq!(current["activation"], kix.name(2).as_str());
    let saved: Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("--out")).expect("json");
    assert_eq!(saved["digest"], live["digest"]);
    // The sealed plan reviewed offline is the one a deploy runs.
    let out = out.to_str().expect("utf-8");
    kix.kix(&["deploy", kix.cluster(), "--plan", out, "--yes"])
        .ok();
    assert!(kix.configmap("added").is_some() && kix.configmap("removed").is_none());

    let text = offline(&["--against", &path_a]).stdout;
    assert!(
        text.contains(&format!(
            "planned against: {path_a} (offline, no cluster read)"
        )),
        "{text}"
    );
    markdown(
        &offline(&["--against", &path_a, "--format", "markdown"]).stdout,
        kix.cluster(),
    );
}

/// The pull request's comment: heading, summary, a table per package, the
/// update's diff, no Secret value.
fn markdown(text: &str, cluster: &str) {
    assert!(
        text.starts_with(&format!("### kix plan: Kix cluster `{cluster}`")),
        "{text}"
    );
    assert!(
        text.contains("**1 to create, 2 to update, 1 to delete**, 1 unchanged"),
        "{text}"
    );
    assert!(text.contains("#### package `web` 1"), "{text}");
    assert!(text.contains("| update | `ConfigMap"), "{text}");
    assert!(text.contains("#### prune"), "{text}");
    assert!(
        text.contains("```diff\n- data.v: \"1\"\n+ data.v: \"2\"\n```"),
        "{text}"
    );
    assert!(text.contains("(redacted)"), "{text}");
    for value in SECRET_TEXTS {
        assert!(!text.contains(value), "a Secret value: {text}");
    }
}

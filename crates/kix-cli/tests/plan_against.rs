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

/// A Helm hook Job as a chart renders it; `policy`: its delete policy.
fn hook(name: &str, events: &str, weight: i64, policy: Option<&str>, arg: &str) -> String {
    let policy = policy
        .map(|p| format!("    helm.sh/hook-delete-policy: {p}\n"))
        .unwrap_or_default();
    format!(
        "---\napiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {name}\n  annotations:\n\
         \x20   helm.sh/hook: {events}\n    helm.sh/hook-weight: \"{weight}\"\n{policy}\
         spec:\n  backoffLimit: 0\n  template:\n    spec:\n      restartPolicy: Never\n\
         \x20     containers: [{{name: hook, image: busybox, args: [\"{arg}\"]}}]\n"
    )
}

/// Every object of a plan's JSON by its key, with its Helm hook (event and
/// weight) and note.
fn hooks(plan: &Value) -> BTreeMap<String, (Value, Value)> {
    plan["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|p| p["objects"].as_array().into_iter().flatten())
        .chain(plan["prune"].as_array().into_iter().flatten())
        .map(|o| (o["key"].to_string(), (o["hook"].clone(), o["note"].clone())))
        .collect()
}

#[tokio::test]
async fn an_offline_plan_runs_the_hooks_a_live_plan_runs() {
    let kix = Kix::new("plan-against-hooks").await;
    // A chart's hooks: one changed, one unchanged that removes itself once
    // it succeeded, one the next build drops, a test hook, an object Helm
    // keeps; and a package the next build drops, with its delete hooks.
    let smoke = "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: smoke\n  annotations: {helm.sh/hook: test}\n\
                 spec: {containers: [{name: t, image: busybox}]}\n";
    let kept = "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kept\n  annotations: {helm.sh/resource-policy: keep}\n";
    let notify = hook(
        "notify",
        "post-install,post-upgrade",
        0,
        Some("hook-succeeded"),
        "n",
    );
    let a = configmap("settings", "1")
        + &hook("migrate", "pre-install,pre-upgrade", -1, None, "a")
        + &notify
        + &hook("setup", "pre-install", 2, None, "s")
        + smoke
        + kept;
    let b = configmap("settings", "2")
        + &hook("migrate", "pre-install,pre-upgrade", -1, None, "b")
        + &notify
        + smoke;
    let tree_a = kix.tree("a", &a, serde_json::json!({}));
    let extras = tree_a.join("packages/extras");
    std::fs::create_dir_all(extras.join("resources")).expect("mkdir");
    std::fs::write(
        extras.join("package.json"),
        serde_json::json!({"name": "extras", "version": "1", "dependsOn": [], "namespace": kix.ns(), "migrations": []})
            .to_string(),
    )
    .expect("package.json");
    std::fs::write(
        extras.join("resources/objects.yaml"),
        configmap("extra", "1")
            + &hook("drain", "pre-delete", 1, None, "d")
            + &hook("cleanup", "post-delete", 0, None, "c"),
    )
    .expect("objects");
    std::fs::write(
        tree_a.join("kix.json"),
        serde_json::json!({"format": 1, "cluster": kix.cluster(), "packages": ["web", "extras"], "settings": {}})
            .to_string(),
    )
    .expect("kix.json");
    let tree_b = kix.tree("b", &b, serde_json::json!({}));
    kix.deploy(&tree_a, &["--timeout", "120s"]).ok();
    let path_a = path_of(&kix.records().await[0]);
    let tree_b = tree_b.to_str().expect("utf-8");
    let live = kix
        .kix(&["plan", kix.cluster(), "--path", tree_b, "-o", "json"])
        .ok()
        .json();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut offline = kix.cmd();
    offline
        .env("KUBECONFIG", dir.path().join("no-such-kubeconfig"))
        .args(["plan", kix.cluster(), "--path", tree_b])
        .args(["--against", &path_a, "-o", "json"]);
    let against = cli_support::run(&mut offline).ok().json();

    let expected: BTreeMap<&str, (&str, Value)> = [
        ("settings", ("update", Value::Null)),
        (
            "migrate",
            (
                "create",
                serde_json::json!({"event": "pre-upgrade", "weight": -1}),
            ),
        ),
        ("notify", ("unchanged", Value::Null)),
        ("setup", ("keep", Value::Null)),
        ("kept", ("keep", Value::Null)),
        ("extra", ("delete", Value::Null)),
        (
            "drain",
            (
                "create",
                serde_json::json!({"event": "pre-delete", "weight": 1}),
            ),
        ),
        (
            "cleanup",
            (
                "create",
                serde_json::json!({"event": "post-delete", "weight": 0}),
            ),
        ),
    ]
    .into();
    let (live_actions, live_hooks) = (actions(&live), hooks(&live));
    assert_eq!(live_actions.len(), expected.len(), "{live_actions:?}");
    for (name, (action, hook)) in &expected {
        let key = live_actions
            .keys()
            .find(|key| key.contains(&format!("\"name\":\"{name}\"")))
            .unwrap_or_else(|| panic!("{name} is not in the live plan: {live_actions:?}"));
        assert_eq!(live_actions[key], *action, "the live plan's {name}");
        assert_eq!(&live_hooks[key].0, hook, "the live plan's {name}");
    }
    assert_eq!(actions(&against), live_actions, "offline vs live");
    assert_eq!(
        hooks(&against),
        live_hooks,
        "offline vs live: hooks and notes"
    );
    assert_eq!(against["counts"], live["counts"]);
    assert_eq!(
        against["digest"], live["digest"],
        "the same plan, the same seal"
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

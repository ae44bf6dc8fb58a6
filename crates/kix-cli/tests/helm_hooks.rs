//! Helm's hook phases (#47, point 3): a chart's `pre-install`/`pre-upgrade`
//! hooks run before the package's other objects, one `helm.sh/hook-weight`
//! after the other, and `post-install`/`post-upgrade` hooks once they are
//! healthy; `helm.sh/hook-delete-policy` is honoured; each hook runs once
//! for its content; a failing hook stops the deploy before anything after
//! it, and the record names it. The manifests are what `helm template`
//! writes; hooks are Jobs, whose Pods KWOK completes, and a Job whose Pod
//! no node takes fails by its `activeDeadlineSeconds`.

mod cli_support;

use std::time::{Duration, Instant};

use cli_support::{Kix, configmap};

/// A hook Job as a chart renders it. `fails`: its Pod is never scheduled,
/// so the Job controller fails it after 2 s (DeadlineExceeded).
fn hook(
    name: &str,
    events: &str,
    weight: i64,
    policy: Option<&str>,
    arg: &str,
    fails: bool,
) -> String {
    let policy = policy
        .map(|p| format!("    helm.sh/hook-delete-policy: {p}\n"))
        .unwrap_or_default();
    let (deadline, placement) = if fails {
        (
            "  activeDeadlineSeconds: 2\n",
            "      nodeSelector: {kix-test: nowhere}\n",
        )
    } else {
        ("", "")
    };
    format!(
        "---\napiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {name}\n  annotations:\n\
         \x20   helm.sh/hook: {events}\n    helm.sh/hook-weight: \"{weight}\"\n{policy}\
         spec:\n  backoffLimit: 0\n{deadline}  template:\n    spec:\n      restartPolicy: Never\n\
         {placement}      containers: [{{name: hook, image: busybox, args: [\"{arg}\"]}}]\n"
    )
}

/// The live Job `name`, or None.
fn job(kix: &Kix, name: &str) -> Option<serde_json::Value> {
    let out =
        kix_testkit::kubectl_output(&["get", "job", "-n", kix.ns(), name, "-o", "json"]).ok()?;
    serde_json::from_str(&out).ok()
}

fn uid(object: &serde_json::Value) -> String {
    object["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Polls until the Job `name` is gone (its delete runs in the background);
/// false after 60 s.
fn gone(kix: &Kix, name: &str) -> bool {
    let until = Instant::now() + Duration::from_secs(60);
    while job(kix, name).is_some() {
        if Instant::now() > until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    true
}

/// Where `needle` first appears in `text`, or a failure naming it.
#[track_caller]
fn at(text: &str, needle: &str) -> usize {
    text.find(needle)
        .unwrap_or_else(|| panic!("{needle:?} is not in the output:\n{text}"))
}

#[tokio::test]
async fn pre_install_hooks_run_by_weight_before_the_package_and_post_install_after_it() {
    let kix = Kix::new("hooks-order").await;
    // Written in the wrong order on purpose: the weights and phases decide.
    let objects = hook("notify", "post-install", 0, None, "notify", false)
        + &hook("migrate-b", "pre-install", 5, None, "b", false)
        + &hook("migrate-a", "pre-install,pre-upgrade", -1, None, "a", false)
        + &configmap("settings", "1");
    let tree = kix.tree("v1", &objects, serde_json::json!({}));
    let path = tree.to_str().expect("utf-8");

    // The plan lists the hooks as they will run, each with its phase.
    let plan = kix.kix(&["plan", kix.cluster(), "--path", path]).ok();
    let notes = [
        "migrate-a [Helm hook pre-install, weight -1]",
        "migrate-b [Helm hook pre-install, weight 5]",
        "settings\n",
        "notify [Helm hook post-install, weight 0]",
    ]
    .map(|note| at(&plan.stdout, note));
    assert!(notes.is_sorted(), "{}", plan.stdout);

    let deployed = kix.deploy(&tree, &["-v", "--timeout", "120s"]).ok();
    let out = format!("{}{}", deployed.stdout, deployed.stderr);
    // What was applied, after the plan the deploy printed.
    let out = &out[at(&out, "recorded activation")..];
    let ns = kix.ns();
    let a = at(out, &format!("Job.batch {ns}/migrate-a"));
    let b = at(out, &format!("Job.batch {ns}/migrate-b"));
    let settings = at(out, &format!("ConfigMap {ns}/settings"));
    let notify = at(out, &format!("Job.batch {ns}/notify"));
    assert!(
        a < b && b < settings && settings < notify,
        "applied in the order weight -1, weight 5, the package, post-install:\n{out}"
    );
    // The cluster agrees: each hook had completed when the next was made.
    let created = |name: &str| -> String {
        kix.kubectl(&[
            "get",
            "-n",
            ns,
            name,
            "-o",
            "jsonpath={.metadata.creationTimestamp}",
        ])
    };
    let completed = |name: &str| -> String {
        job(&kix, name).expect("the hook Job stays (before-hook-creation)")["status"]
            ["completionTime"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    assert!(!completed("migrate-a").is_empty() && !completed("notify").is_empty());
    assert!(completed("migrate-a") <= created("job/migrate-b"));
    assert!(completed("migrate-b") <= created("configmap/settings"));
    assert!(created("configmap/settings") <= created("job/notify"));
}

#[tokio::test]
async fn hook_succeeded_removes_the_job_and_the_same_build_does_not_run_it_again() {
    let kix = Kix::new("hooks-once").await;
    // The Job runs as a ServiceAccount that is a hook of a lower weight:
    // hook-succeeded deletes it once the whole phase succeeded, not before
    // the Job that needs it ran (as Helm does).
    let account = "---\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: hook-sa\n  annotations:\n\
                   \x20   helm.sh/hook: pre-install\n    helm.sh/hook-weight: \"-1\"\n\
                   \x20   helm.sh/hook-delete-policy: hook-succeeded\n";
    let objects = account.to_owned()
        + &hook(
            "setup",
            "pre-install",
            0,
            Some("hook-succeeded"),
            "x",
            false,
        )
        .replace(
            "restartPolicy: Never\n",
            "restartPolicy: Never\n      serviceAccountName: hook-sa\n",
        )
        + &configmap("settings", "1");
    let tree = kix.tree("v1", &objects, serde_json::json!({}));
    kix.deploy(&tree, &["--timeout", "120s"]).ok();
    assert!(
        gone(&kix, "setup"),
        "hook-succeeded deletes the hook Job once it completed"
    );
    assert!(kix.configmap("settings").is_some());
    let account =
        kix_testkit::kubectl_output(&["get", "serviceaccount", "-n", kix.ns(), "hook-sa"]);
    assert!(
        account.is_err(),
        "hook-succeeded deletes the ServiceAccount hook too"
    );

    // The same build again: the hook ran for this content, nothing to do.
    let again = kix.deploy(&tree, &["--timeout", "120s"]).ok();
    assert!(
        again.stdout.contains("nothing to do"),
        "a redeploy of the same build runs no hook: {}{}",
        again.stdout,
        again.stderr
    );
    assert!(job(&kix, "setup").is_none(), "the hook was not run again");
}

#[tokio::test]
async fn before_hook_creation_recreates_a_changed_hook_on_the_next_build() {
    let kix = Kix::new("hooks-recreate").await;
    let v1 = kix.tree(
        "v1",
        &(hook("migrate", "pre-install,pre-upgrade", 0, None, "v1", false)
            + &configmap("settings", "1")),
        serde_json::json!({}),
    );
    kix.deploy(&v1, &["--timeout", "120s"]).ok();
    let first = job(&kix, "migrate").expect("the hook Job stays after it ran");

    // A changed hook in the next build: its previous run is deleted and it
    // runs again, never colliding with it (nor needing a replace's consent).
    let v2 = kix.tree(
        "v2",
        &(hook("migrate", "pre-install,pre-upgrade", 0, None, "v2", false)
            + &configmap("settings", "2")),
        serde_json::json!({}),
    );
    let path = v2.to_str().expect("utf-8");
    let plan = kix
        .kix(&["plan", kix.cluster(), "--path", path, "-o", "json"])
        .ok();
    let plan = plan.json();
    let planned = plan["packages"][0]["objects"]
        .as_array()
        .expect("objects")
        .iter()
        .find(|o| o["key"]["name"] == "migrate")
        .cloned()
        .expect("the hook is planned");
    assert_eq!(planned["action"], "create", "{planned}");
    assert_eq!(
        planned["note"], "Helm hook pre-upgrade, weight 0: recreated (before-hook-creation)",
        "{planned}"
    );
    let deployed = kix.deploy(&v2, &["--timeout", "120s"]);
    assert_eq!(
        deployed.code,
        Some(0),
        "{}{}",
        deployed.stdout,
        deployed.stderr
    );
    let second = job(&kix, "migrate").expect("the new run stays");
    assert_ne!(uid(&first), uid(&second), "a new Job ran");
    assert_eq!(
        second["spec"]["template"]["spec"]["containers"][0]["args"][0],
        "v2"
    );
    assert!(second["status"]["completionTime"].is_string(), "{second}");
}

#[tokio::test]
async fn a_failing_pre_upgrade_hook_changes_nothing_after_it_and_the_record_names_it() {
    let kix = Kix::new("hooks-fail").await;
    let check = |arg| hook("check", "pre-upgrade", 0, Some("hook-failed"), arg, true);
    let v1 = kix.tree(
        "v1",
        &(check("v1") + &configmap("settings", "1")),
        serde_json::json!({}),
    );
    // Installing: a pre-upgrade hook does not run.
    kix.deploy(&v1, &["--timeout", "120s"]).ok();
    assert!(
        job(&kix, "check").is_none(),
        "a pre-upgrade hook does not run on install"
    );
    let before = kix.configmap("settings").expect("settings");

    let v2 = kix.tree(
        "v2",
        &(check("v2") + &configmap("settings", "2")),
        serde_json::json!({}),
    );
    let failed = kix.deploy(&v2, &["--timeout", "120s"]);
    assert_eq!(failed.code, Some(1), "{}{}", failed.stdout, failed.stderr);
    let after = kix.configmap("settings").expect("settings");
    assert_eq!(
        after["data"]["v"], "1",
        "the package's objects are as they were"
    );
    assert_eq!(uid(&after), uid(&before));
    assert_eq!(
        after["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );

    let records = kix.records().await;
    let record = records.last().expect("the failed deploy's record");
    let status = record.status.as_ref().expect("status");
    assert_eq!(status.phase, Some(kix_api::Phase::Failed));
    let message = status.message.clone().unwrap_or_default();
    let named = format!("Helm hook pre-upgrade Job.batch {}/check failed", kix.ns());
    assert!(
        message.contains(&named),
        "the record names the hook: {message}"
    );
    assert!(
        gone(&kix, "check"),
        "hook-failed deletes the failed hook Job"
    );
}

/// A tree of package `web` (`web`'s objects) and, when given, a second
/// package `extras` with `extras`' objects, both in the test's namespace.
fn with_extras(kix: &Kix, name: &str, web: &str, extras: Option<&str>) -> std::path::PathBuf {
    let root = kix.tree(name, web, serde_json::json!({}));
    let Some(extras) = extras else {
        return root;
    };
    let package = root.join("packages/extras");
    std::fs::create_dir_all(package.join("resources")).expect("mkdir");
    let write = |path: std::path::PathBuf, text: String| std::fs::write(path, text).expect("write");
    write(
        package.join("package.json"),
        serde_json::json!({"name": "extras", "version": "1", "dependsOn": [], "namespace": kix.ns(), "migrations": []})
            .to_string(),
    );
    write(package.join("resources/objects.yaml"), extras.to_owned());
    write(
        root.join("kix.json"),
        serde_json::json!({"format": 1, "cluster": kix.cluster(), "packages": ["web", "extras"], "settings": {}})
            .to_string(),
    );
    root
}

/// The writes (no dry-runs) to the test's namespace since `mark`, in the
/// order the apiserver completed them: `verb resource/name`.
fn writes_since(kix: &Kix, mark: kix_testkit::audit::Mark) -> Vec<String> {
    kix_testkit::audit::since(mark)
        .expect("the audit log")
        .into_iter()
        .filter(|r| r.is_write() && r.namespace.as_deref() == Some(kix.ns()))
        .map(|r| format!("{} {}/{}", r.verb, r.resource, r.name.unwrap_or_default()))
        .collect()
}

/// Where `write` first appears in `writes`, or a failure listing them.
#[track_caller]
fn first(writes: &[String], write: &str) -> usize {
    writes
        .iter()
        .position(|w| w == write)
        .unwrap_or_else(|| panic!("{write:?} is not among the writes: {writes:#?}"))
}

#[tokio::test]
async fn a_dropped_package_runs_its_pre_delete_hooks_before_its_prune_and_post_delete_after() {
    let kix = Kix::new("hooks-delete").await;
    let extras = configmap("extra", "1")
        + &hook("drain-b", "pre-delete", 5, None, "b", false)
        + &hook(
            "drain-a",
            "pre-delete",
            -1,
            Some("hook-succeeded"),
            "a",
            false,
        )
        + &hook("cleanup", "post-delete", 0, None, "c", false);
    let v1 = with_extras(&kix, "v1", &configmap("settings", "1"), Some(&extras));
    kix.deploy(&v1, &["--timeout", "120s"]).ok();
    for name in ["drain-a", "drain-b", "cleanup"] {
        assert!(job(&kix, name).is_none(), "{name} runs only on removal");
    }
    assert!(kix.configmap("extra").is_some());

    // The next build drops the package: the plan says which hooks run, in
    // their order, under the package being removed.
    let v2 = with_extras(&kix, "v2", &configmap("settings", "1"), None);
    let path = v2.to_str().expect("utf-8");
    let plan = kix.kix(&["plan", kix.cluster(), "--path", path]).ok();
    let removal = "the build drops its package]";
    let lines = [
        "package extras 1\n".to_owned(),
        format!("drain-a [Helm hook pre-delete, weight -1: {removal}"),
        format!("drain-b [Helm hook pre-delete, weight 5: {removal}"),
        format!("cleanup [Helm hook post-delete, weight 0: {removal}"),
        "prune (the build no longer has these)".to_owned(),
        "extra\n".to_owned(),
    ]
    .map(|line| at(&plan.stdout, &line));
    assert!(lines.is_sorted(), "{}", plan.stdout);
    let json = kix
        .kix(&["plan", kix.cluster(), "--path", path, "-o", "json"])
        .ok()
        .json();
    let removed = json["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .find(|p| p["name"] == "extras")
        .cloned()
        .expect("the removed package is in the plan");
    let hooks: Vec<(&str, &serde_json::Value)> = removed["objects"]
        .as_array()
        .expect("objects")
        .iter()
        .map(|o| (o["key"]["name"].as_str().unwrap_or_default(), &o["hook"]))
        .collect();
    assert_eq!(
        hooks,
        [
            (
                "drain-a",
                &serde_json::json!({"event": "pre-delete", "weight": -1})
            ),
            (
                "drain-b",
                &serde_json::json!({"event": "pre-delete", "weight": 5})
            ),
            (
                "cleanup",
                &serde_json::json!({"event": "post-delete", "weight": 0})
            ),
        ],
        "{removed}"
    );

    let mark = kix_testkit::audit::mark().expect("audit mark");
    let deployed = kix.deploy(&v2, &["--timeout", "120s"]);
    assert_eq!(
        deployed.code,
        Some(0),
        "{}{}",
        deployed.stdout,
        deployed.stderr
    );
    let writes = writes_since(&kix, mark);
    let a = first(&writes, "patch jobs/drain-a");
    let b = first(&writes, "patch jobs/drain-b");
    let succeeded = first(&writes, "delete jobs/drain-a");
    let pruned = first(&writes, "delete configmaps/extra");
    let cleanup = first(&writes, "patch jobs/cleanup");
    assert!(
        a < b && b < succeeded && succeeded < pruned && pruned < cleanup,
        "pre-delete by weight, hook-succeeded after the phase, the prune, post-delete: {writes:#?}"
    );
    // Each ran to its end before what follows it.
    let completed = |name: &str| -> String {
        job(&kix, name).expect("the hook Job stays")["status"]["completionTime"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let cleanup = job(&kix, "cleanup").expect("post-delete ran");
    let created = cleanup["metadata"]["creationTimestamp"]
        .as_str()
        .unwrap_or_default();
    assert!(!completed("drain-b").is_empty() && completed("drain-b").as_str() <= created);
    assert!(!completed("cleanup").is_empty(), "{cleanup}");
    assert!(gone(&kix, "drain-a"), "hook-succeeded removes the hook");
    assert!(kix.configmap("extra").is_none(), "the package was pruned");
    let instance = format!("packageinstances.kix.run/{}.extras", kix.cluster());
    assert!(
        kix_testkit::kubectl_output(&["get", &instance]).is_err(),
        "the package's record is gone"
    );
}

#[tokio::test]
async fn a_failing_pre_delete_hook_prunes_nothing_of_its_package_and_the_record_names_it() {
    let kix = Kix::new("hooks-delete-fail").await;
    let extras = configmap("extra", "1")
        + &hook("drain", "pre-delete", 0, None, "x", true)
        + &hook("cleanup", "post-delete", 0, None, "c", false);
    let v1 = with_extras(&kix, "v1", &configmap("settings", "1"), Some(&extras));
    kix.deploy(&v1, &["--timeout", "120s"]).ok();
    let before = kix.configmap("extra").expect("extra");

    let v2 = with_extras(&kix, "v2", &configmap("settings", "1"), None);
    let failed = kix.deploy(&v2, &["--timeout", "120s"]);
    assert_eq!(failed.code, Some(1), "{}{}", failed.stdout, failed.stderr);
    let after = kix.configmap("extra").expect("the package's objects stay");
    assert_eq!(uid(&after), uid(&before));
    assert_eq!(
        after["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );
    assert!(job(&kix, "cleanup").is_none(), "post-delete did not run");

    let named = format!(
        "package extras: Helm hook pre-delete Job.batch {}/drain failed; nothing of the package was pruned",
        kix.ns()
    );
    let records = kix.records().await;
    let status = records
        .last()
        .and_then(|r| r.status.clone())
        .expect("status");
    assert_eq!(status.phase, Some(kix_api::Phase::Degraded));
    let message = status.message.unwrap_or_default();
    assert!(
        message.contains(&named),
        "the record names the hook: {message}"
    );
    let instance = format!("packageinstances.kix.run/{}.extras", kix.cluster());
    let instance = kix.kubectl(&["get", &instance, "-o", "jsonpath={.status.message}"]);
    assert!(
        instance.contains(&named),
        "the package's record stays and names the hook: {instance}"
    );
}

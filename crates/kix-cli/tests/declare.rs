//! `kix declare`, what a NixOS host's kix-declare-<name> unit runs on each
//! activation of a generation, against the real control plane and operator:
//! a first generation deploys, the same build again writes nothing, a
//! second generation deploys, switching back to the first rolls back to it
//! (`rollbackFrom`), acceptance is given only for what the host names (a
//! refusal is a Failed `engine: local` record the operator ignores),
//! `kix deploy` warns that the host declares the Kix cluster, and a cluster
//! declared absent is pruned through the deletion budget.

mod cli_support;
mod common;

use cli_support::{Kix, Run, configmap};
use kix_api::Phase;
use kix_api::labels::ANNOTATION_DECLARED_BY;
use kube::api::{Api, PostParams};
use serde_json::json;

const HOST: &str = "host-a";

fn start_operator(kix: &Kix) -> common::Operator {
    common::Operator::start(
        &kix_testkit::kubeconfig_path(),
        &[kix.cluster()],
        kix.ns(),
        &kix_testkit::unique_name("lease"),
        kix.dir.path().join("operator.log"),
        None,
    )
}

/// A generation's build: the tree `name`, added to the Nix store (the
/// module's builds are store paths).
fn generation(kix: &Kix, name: &str, resources: &str) -> String {
    common::add_to_store(&kix.tree(name, resources, json!({})))
}

/// The unit's command line: `kix declare <cluster> --path <build>` as host-a.
fn declare(kix: &Kix, path: &str, extra: &[&str]) -> Run {
    let mut args = vec![
        "declare",
        kix.cluster(),
        "--path",
        path,
        "--declared-by",
        HOST,
        "--wait",
        "120s",
    ];
    args.extend_from_slice(extra);
    kix.kix(&args)
}

fn value(kix: &Kix, name: &str) -> Option<String> {
    kix.configmap(name)
        .and_then(|cm| cm["data"]["v"].as_str().map(str::to_string))
}

/// (name, phase, path) of each record, oldest first.
async fn history(kix: &Kix) -> Vec<(String, Option<Phase>, String)> {
    kix.records()
        .await
        .iter()
        .map(|r| {
            (
                kube::ResourceExt::name_any(r),
                r.phase(),
                r.spec.source.path.clone(),
            )
        })
        .collect()
}

#[tokio::test]
async fn generations_deploy_the_same_build_writes_nothing_and_an_older_one_rolls_back() {
    let kix = Kix::new("declare-gens").await;
    let _operator = start_operator(&kix);
    let first = generation(&kix, "first", &configmap("settings", "one"));
    let second = generation(
        &kix,
        "second",
        &(configmap("settings", "two") + &configmap("extra", "x")),
    );

    // Generation 1: a deploy through the operator, marked as the host's.
    let run = declare(&kix, &first, &[]).ok();
    assert!(run.stdout.contains(": Active"), "{}", run.stdout);
    assert_eq!(value(&kix, "settings").as_deref(), Some("one"));
    let records = kix.records().await;
    assert_eq!(records.len(), 1);
    assert!(records[0].is_operator(), "the operator applies it");
    assert_eq!(
        kube::ResourceExt::annotations(&records[0])
            .get(ANNOTATION_DECLARED_BY)
            .map(String::as_str),
        Some(HOST)
    );
    assert_eq!(records[0].spec.receipt.host, HOST);

    // The same generation activated again (a reboot, a restart): nothing.
    let run = declare(&kix, &first, &[]).ok();
    assert!(run.stderr.contains("nothing to write"), "{}", run.stderr);
    assert_eq!(kix.records().await.len(), 1, "no record was written");

    // Generation 2: a deploy; generation 1 is superseded.
    declare(&kix, &second, &[]).ok();
    assert_eq!(value(&kix, "settings").as_deref(), Some("two"));
    assert_eq!(value(&kix, "extra").as_deref(), Some("x"));

    // Back to generation 1 (switch --rollback): a rollback to kix's record of
    // it, from the record that was applied; what generation 2 added is pruned.
    let run = declare(&kix, &first, &[]).ok();
    assert!(
        run.stdout
            .contains(&format!("to the build of {}", kix.name(1))),
        "{}",
        run.stdout
    );
    assert_eq!(value(&kix, "settings").as_deref(), Some("one"));
    common::poll(
        "extra pruned",
        std::time::Duration::from_secs(60),
        std::time::Duration::from_secs(1),
        || async { value(&kix, "extra").is_none().then_some(()) },
    )
    .await;
    let records = kix.records().await;
    assert_eq!(
        history(&kix).await,
        vec![
            (kix.name(1), Some(Phase::Superseded), first.clone()),
            (kix.name(2), Some(Phase::Superseded), second.clone()),
            (kix.name(3), Some(Phase::Active), first.clone()),
        ]
    );
    assert_eq!(records[2].spec.receipt.rollback_from, Some(kix.name(2)));

    // A CLI deploy of a host-declared Kix cluster says who wins.
    let run = kix
        .kix(&[
            "deploy",
            kix.cluster(),
            "--path",
            &second,
            "--operator",
            "--yes",
        ])
        .ok();
    assert!(
        run.stderr
            .contains(&format!("is declared by NixOS host {HOST}")),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("next activation"), "{}", run.stderr);
}

/// Record `sequence` is the refusal of `path`: `engine: local` (the
/// operator ignores it), Failed with the reason, claiming no acceptance,
/// marked as the host's; record 1 is still the current one, Active, and
/// nothing of the refused build was applied.
async fn assert_refused(kix: &Kix, sequence: u64, path: &str, reason: &str) {
    let records = kix.records().await;
    assert_eq!(records.len() as u64, sequence, "one record for the refusal");
    let refused = &records[records.len() - 1];
    assert_eq!(kube::ResourceExt::name_any(refused), kix.name(sequence));
    assert_eq!(refused.spec.engine, kix_api::Engine::Local);
    assert_eq!(refused.spec.source.path, path);
    assert_eq!(refused.phase(), Some(Phase::Failed));
    let message = refused
        .status
        .as_ref()
        .and_then(|s| s.message.clone())
        .unwrap_or_default();
    assert!(message.contains("needs acceptance"), "{message}");
    assert!(message.contains(reason), "{message}");
    assert!(
        refused.spec.receipt.accepted.is_empty(),
        "claims no acceptance"
    );
    assert_eq!(refused.spec.receipt.accepted_deletions, None);
    assert_eq!(
        kube::ResourceExt::annotations(refused)
            .get(ANNOTATION_DECLARED_BY)
            .map(String::as_str),
        Some(HOST)
    );
    assert_eq!(records[0].phase(), Some(Phase::Active), "still current");
    // The operator leaves it alone: no finalizer, no status of its own.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let again = kix.records().await;
    let refused = &again[again.len() - 1];
    assert!(kube::ResourceExt::finalizers(refused).is_empty());
    assert_eq!(refused.phase(), Some(Phase::Failed));
    assert_eq!(
        refused.status.as_ref().and_then(|s| s.message.clone()),
        Some(message)
    );
    assert_eq!(value(kix, "legacy").as_deref(), Some("by hand"));
    let current = &again[0];
    assert_eq!(current.phase(), Some(Phase::Active));
    assert_eq!(value(kix, "settings").as_deref(), Some("one"));
}

#[tokio::test]
async fn acceptance_is_only_what_the_host_names_and_absent_prunes_through_the_budget() {
    let kix = Kix::new("declare-gates").await;
    let _operator = start_operator(&kix);
    // An object kix does not own: taking it over is an adoption.
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(kix.env.client.clone(), kix.ns());
    let legacy = serde_json::from_value(json!({
        "metadata": {"name": "legacy"}, "data": {"v": "by hand"}
    }))
    .expect("configmap");
    cms.create(&PostParams::default(), &legacy)
        .await
        .expect("create legacy");
    // absent = "prune" of a Kix cluster that never had a build: nothing.
    let root = kix.dir.path().join("empty");
    std::fs::create_dir_all(&root).expect("mkdir");
    std::fs::write(
        root.join("kix.json"),
        json!({"format": 1, "cluster": kix.cluster(), "packages": [], "settings": {}}).to_string(),
    )
    .expect("kix.json");
    let empty = common::add_to_store(&root);
    let run = declare(&kix, &empty, &["--allow-empty"]).ok();
    assert!(run.stderr.contains("nothing to prune"), "{}", run.stderr);
    assert!(kix.records().await.is_empty(), "no record was written");

    let first = generation(&kix, "first", &configmap("settings", "one"));
    declare(&kix, &first, &[]).ok();

    let adopting = generation(
        &kix,
        "adopting",
        &(configmap("settings", "one") + &configmap("legacy", "kix")),
    );
    let adoption = format!("adopt ConfigMap {}/legacy", kix.ns());
    // Named otherwise: refused, the reason on stderr (the unit's log) and
    // on a Failed record the operator never acts on.
    let run = declare(&kix, &adopting, &["--accept", "migration web"]).code(1);
    assert!(run.stderr.contains("needs acceptance"), "{}", run.stderr);
    assert!(run.stderr.contains(&adoption), "{}", run.stderr);
    assert!(run.stderr.contains("acceptMigrations"), "{}", run.stderr);
    assert!(
        run.stderr
            .contains(&format!("recorded as {}, Failed", kix.name(2))),
        "{}",
        run.stderr
    );
    assert_refused(&kix, 2, &adopting, &adoption).await;
    // The current record is still reconciled: drift is put back.
    let drift = json!({"data": {"v": "by hand"}});
    cms.patch(
        "settings",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&drift),
    )
    .await
    .expect("drift settings");
    common::poll(
        "the drift put back",
        std::time::Duration::from_secs(60),
        std::time::Duration::from_secs(1),
        || async { (value(&kix, "settings").as_deref() == Some("one")).then_some(()) },
    )
    .await;
    // The unit restarted with the same refusal: no second record.
    let run = declare(&kix, &adopting, &[]).code(1);
    assert!(
        run.stderr
            .contains(&format!("recorded as {} already", kix.name(2))),
        "{}",
        run.stderr
    );
    assert_eq!(kix.records().await.len(), 2, "no second refusal record");
    // Named: the adoption is sealed into the record and applied.
    declare(&kix, &adopting, &["--accept", &adoption]).ok();
    assert_eq!(value(&kix, "legacy").as_deref(), Some("kix"));
    let records = kix.records().await;
    assert_eq!(records.len(), 3);
    assert_eq!(records[2].spec.receipt.accepted.adoptions, 1);
    // The operator supersedes the older record just after it marks the new
    // one Active, which is when the CLI returns: give it a moment.
    common::poll(
        "the first record to be Superseded",
        std::time::Duration::from_secs(20),
        std::time::Duration::from_millis(200),
        || async { (kix.records().await[0].phase() == Some(Phase::Superseded)).then_some(()) },
    )
    .await;

    // absent = "prune": an empty build of the Kix cluster, within the
    // budget (2 objects, the budget allows 10); without --allow-empty the
    // engine's empty-build guard refuses, recorded as Failed.
    let run = declare(&kix, &empty, &[]).code(1);
    assert!(run.stderr.contains("nothing was changed"), "{}", run.stderr);
    let records = kix.records().await;
    assert_eq!(records.len(), 4);
    assert_eq!(records[3].phase(), Some(Phase::Failed));
    assert_eq!(records[2].phase(), Some(Phase::Active), "still current");
    declare(&kix, &empty, &["--allow-empty"]).ok();
    common::poll(
        "the Kix cluster's objects pruned",
        std::time::Duration::from_secs(60),
        std::time::Duration::from_secs(1),
        || async {
            (value(&kix, "settings").is_none() && value(&kix, "legacy").is_none()).then_some(())
        },
    )
    .await;
}

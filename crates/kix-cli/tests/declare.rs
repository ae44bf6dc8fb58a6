//! `kix declare`, what a NixOS host's kix-declare-<name> unit runs on each
//! activation of a generation, against the real control plane and operator:
//! a first generation deploys, the same build again writes nothing, a
//! second generation deploys, switching back to the first rolls back to it
//! (`rollbackFrom`), acceptance is given only for what the host names,
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
    // Named otherwise: refused, nothing written, the reason on stderr
    // (the unit's log).
    let run = declare(&kix, &adopting, &["--accept", "migration web"]).code(1);
    assert!(run.stderr.contains("needs acceptance"), "{}", run.stderr);
    assert!(run.stderr.contains(&adoption), "{}", run.stderr);
    assert!(run.stderr.contains("acceptMigrations"), "{}", run.stderr);
    assert_eq!(kix.records().await.len(), 1, "no record was written");
    assert_eq!(value(&kix, "legacy").as_deref(), Some("by hand"));
    // Named: the adoption is sealed into the record and applied.
    declare(&kix, &adopting, &["--accept", &adoption]).ok();
    assert_eq!(value(&kix, "legacy").as_deref(), Some("kix"));
    let records = kix.records().await;
    assert_eq!(records.len(), 2);
    assert_eq!(records[1].spec.receipt.accepted.adoptions, 1);

    // absent = "prune": an empty build of the Kix cluster, within the
    // budget (2 objects, the budget allows 10); without --allow-empty the
    // engine's empty-build guard refuses.
    let run = declare(&kix, &empty, &[]).code(1);
    assert!(run.stderr.contains("nothing was changed"), "{}", run.stderr);
    assert_eq!(kix.records().await.len(), 2, "no record was written");
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

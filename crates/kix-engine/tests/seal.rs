//! The sealed plan in the local engine, against the real control plane: a
//! plan made before the Lease is held is made again when the records moved
//! (or when asked to), and a re-plan with a destructive action the confirmed
//! plan did not have changes nothing.

mod common;

use common::*;
use kix_engine::EngineError;
use kix_engine::deploy::DeployOptions;
use kix_engine::plan::PlanOptions;

fn prune() -> PlanOptions {
    PlanOptions {
        prune: true,
        ..PlanOptions::default()
    }
}

#[tokio::test]
async fn a_stale_plan_is_made_again_and_refused_when_it_would_delete_more() {
    let kit = Kit::new("seal-stale").await;
    let one = kit.simple(&[configmap("a", &[("v", "1")])]);
    let two = kit.simple(&[configmap("a", &[("v", "1")]), configmap("b", &[("v", "1")])]);
    kit.deploy(&one).await;

    // Planned when there was nothing to delete; then another deploy adds b.
    let stale = kit.plan(&one, &prune()).await;
    assert_eq!(stale.counts.delete, 0);
    kit.deploy(&two).await;

    let err = kix_engine::deploy::deploy(&kit.client, &one.build, stale, &kit.options())
        .await
        .expect_err("refused");
    assert!(matches!(err, EngineError::Unconfirmed(_)), "{err}");
    let message = err.to_string();
    assert!(
        message.contains(&format!("delete ConfigMap {}/b", kit.ns()))
            && message.contains("nothing was changed"),
        "{message}"
    );
    assert!(
        kit.get("v1", "ConfigMap", "b").await.is_some(),
        "not deleted"
    );
    assert_eq!(kit.records().await.len(), 2, "no record written");

    // Asked to re-plan, with nothing moved: the same plan runs.
    let plan = kit.plan(&one, &prune()).await;
    assert_eq!(plan.counts.delete, 1);
    let options = DeployOptions {
        replan: true,
        ..kit.options()
    };
    let outcome = kix_engine::deploy::deploy(&kit.client, &one.build, plan, &options)
        .await
        .expect("deploy");
    assert_eq!(outcome.pruned, 1, "{outcome:?}");
    assert!(kit.get("v1", "ConfigMap", "b").await.is_none());
    kit.cleanup().await;
}

#[tokio::test]
async fn the_digest_covers_every_action_and_is_stable() {
    let kit = Kit::new("seal-digest").await;
    let one = kit.simple(&[configmap("a", &[("v", "1")])]);
    let changed = kit.simple(&[configmap("a", &[("v", "2")])]);
    let first = kit.plan(&one, &prune()).await;
    let again = kit.plan(&one, &prune()).await;
    assert_eq!(first.digest, again.digest, "same state, same digest");
    let other = kit.plan(&changed, &prune()).await;
    assert_ne!(first.digest, other.digest, "other content, other digest");
    kit.deploy(&one).await;
    let after = kit.plan(&one, &prune()).await;
    assert_ne!(first.digest, after.digest, "create became unchanged");
    kit.cleanup().await;
}

#[tokio::test]
async fn a_saved_plan_runs_only_when_the_replan_under_the_lease_has_its_digest() {
    let kit = Kit::new("seal-exact").await;
    let both = kit.simple(&[configmap("a", &[("v", "1")]), configmap("b", &[("v", "1")])]);
    let one = kit.simple(&[configmap("a", &[("v", "2")])]);
    kit.deploy(&both).await;
    // Saved: update a, delete b. Then b goes out of band: fewer deletions,
    // which a confirmed plan would allow, but not a saved one.
    let saved = kit.plan(&one, &prune()).await;
    assert_eq!((saved.counts.update, saved.counts.delete), (1, 1));
    kit.env
        .kubectl(&["delete", "configmap", "b", "-n", kit.ns()])
        .expect("delete b");
    let options = DeployOptions {
        replan: true,
        exact_digest: Some(saved.digest.clone()),
        ..kit.options()
    };
    let err = kix_engine::deploy::deploy(&kit.client, &one.build, saved, &options)
        .await
        .expect_err("refused");
    assert!(matches!(err, EngineError::Moved(_)), "{err}");
    let message = err.to_string();
    assert!(
        message.contains(&format!("- delete v1 ConfigMap {}/b", kit.ns()))
            && message.contains("nothing was changed"),
        "{message}"
    );
    assert_eq!(
        kit.cm_value("a", "v").await.as_deref(),
        Some("1"),
        "unchanged"
    );
    assert_eq!(kit.records().await.len(), 1, "no record written");

    // Saved again: the same plan under the Lease runs, and the record says so.
    let saved = kit.plan(&one, &prune()).await;
    let options = DeployOptions {
        exact_digest: Some(saved.digest.clone()),
        ..kit.options()
    };
    let outcome = kix_engine::deploy::deploy(&kit.client, &one.build, saved, &options)
        .await
        .expect("deploy");
    assert_eq!(outcome.phase, kix_api::Phase::Active, "{outcome:?}");
    let record = kit.records().await.pop().expect("record");
    assert!(record.spec.receipt.saved_plan);
    assert_eq!(kit.cm_value("a", "v").await.as_deref(), Some("2"));
    kit.cleanup().await;
}

/// The plan's digest, recomputed after `change` edits the plan.
fn digest_after(
    plan: &kix_engine::plan::Plan,
    change: impl FnOnce(&mut kix_engine::plan::Plan),
) -> String {
    let mut changed = plan.clone();
    change(&mut changed);
    kix_engine::seal::digest(&changed)
}

fn set_action(plan: &mut kix_engine::plan::Plan, name: &str, action: kix_engine::plan::Action) {
    for package in &mut plan.packages {
        for o in &mut package.objects {
            if o.key.name == name {
                o.action = action;
                o.fields.clear();
            }
        }
    }
}

#[tokio::test]
async fn the_digest_changes_for_a_replace_an_adoption_and_a_migration() {
    use kix_engine::plan::Action;
    let kit = Kit::new("seal-digest-kinds").await;
    let deployment = |labels: serde_json::Value| {
        yaml(&serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "main", "image": "example.invalid/app:1"}]}}}
        }))
    };
    let first = kit.simple(&[deployment(serde_json::json!({"app": "web"}))]);
    kit.deploy(&first).await;
    // Another selector: immutable, a replace.
    let second = kit.simple(&[deployment(
        serde_json::json!({"app": "web", "tier": "front"}),
    )]);
    let plan = kit.plan(&second, &prune()).await;
    assert_eq!(plan.counts.replace, 1, "{plan:#?}");
    assert_eq!(kix_engine::seal::digest(&plan), plan.digest);
    assert_ne!(
        digest_after(&plan, |p| set_action(p, "web", Action::Update)),
        plan.digest,
        "a replace is not an update"
    );

    // An object that exists, made by hand: an adoption.
    kit.env
        .kubectl(&[
            "create",
            "configmap",
            "legacy",
            "-n",
            kit.ns(),
            "--from-literal=v=hand",
        ])
        .expect("by hand");
    let adopting = kit.simple(&[
        deployment(serde_json::json!({"app": "web"})),
        configmap("legacy", &[("v", "build")]),
    ]);
    let plan = kit.plan(&adopting, &prune()).await;
    assert_eq!(plan.counts.adopt, 1, "{plan:#?}");
    assert_ne!(
        digest_after(&plan, |p| set_action(p, "legacy", Action::Create)),
        plan.digest,
        "an adoption is not a create"
    );

    // A version that crosses a migration.
    let migrating = {
        let tmp = tempfile::tempdir().expect("tmp");
        let root = tmp.path().join("kix-seal-migration");
        write_tree(
            &root,
            kit.cluster(),
            kit.ns(),
            &[Pkg::new(
                "a",
                &[deployment(serde_json::json!({"app": "web"}))],
            )],
        );
        let package = root.join("packages/a/package.json");
        let mut json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&package).expect("read")).expect("json");
        json["version"] = "2.0.0".into();
        json["migrations"] = serde_json::json!([{"from": "1.0.0", "to": "2.0.0",
            "description": "recreate web", "actions": [{"action": "recreate",
                "object": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}}]}]);
        std::fs::write(&package, json.to_string()).expect("write");
        let path = kix_nix::add_to_store(&root).expect("nix-store --add");
        let build = kix_manifest::read_tree(
            std::path::Path::new(path.as_str()),
            &kix_manifest::ReadOptions::default(),
        )
        .expect("read");
        Built {
            path: path.to_string(),
            build,
        }
    };
    let plan = kit.plan(&migrating, &prune()).await;
    assert_eq!(plan.migrations.len(), 1, "{plan:#?}");
    assert_ne!(
        digest_after(&plan, |p| p.migrations.clear()),
        plan.digest,
        "a migration is in the digest"
    );
    kit.cleanup().await;
}

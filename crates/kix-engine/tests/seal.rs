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

//! Health waits and `--on-error` against the real control plane: a
//! Deployment that never becomes Available fails at the timeout naming it;
//! abort, continue (dependents skipped) and rollback (the previous build
//! restored, recorded as such).

mod common;

use std::time::{Duration, Instant};

use common::*;
use kix_api::Phase;
use kix_engine::deploy::OnError;

#[tokio::test]
async fn a_deployment_that_never_becomes_available_fails_at_the_timeout() {
    let kit = Kit::new("fail-timeout").await;
    let built = kit.build(&[
        Pkg::new("a", &[deployment("stuck", false)]),
        Pkg::new("b", &[configmap("beside", &[("k", "v")])]),
        Pkg::new("c", &[configmap("after", &[("k", "v")])]).depends_on(&["b"]),
    ]);
    let mut options = kit.options();
    options.timeout = Duration::from_secs(3);
    let started = Instant::now();
    let outcome = kit.try_deploy(&built, &options).await.expect("deploy runs");
    let elapsed = started.elapsed();
    assert_eq!(outcome.phase, Phase::Failed, "{outcome:?}");
    assert!(!outcome.is_success());
    assert!(
        outcome.message.contains("Deployment") && outcome.message.contains("stuck"),
        "the object is named: {}",
        outcome.message
    );
    assert!(outcome.message.contains("timed out"), "{}", outcome.message);
    assert!(
        elapsed < Duration::from_secs(20),
        "fails at the timeout, took {elapsed:?}"
    );
    // Abort: the package of the same wave (independent of `a`) finishes; no
    // later wave starts, so `c` (which depends only on the healthy `b`) is
    // not applied, although `--on-error continue` would apply it.
    assert_eq!(kit.cm_value("beside", "k").await.as_deref(), Some("v"));
    assert!(kit.cm_value("after", "k").await.is_none(), "abort stops");
    let record = kit.records().await.pop().expect("record");
    assert_eq!(record.phase(), Some(Phase::Failed));
    assert!(
        record
            .status
            .as_ref()
            .and_then(|s| s.message.as_deref())
            .is_some_and(|m| m.contains("stuck")),
        "{:?}",
        record.status
    );
    kit.cleanup().await;
}

#[tokio::test]
async fn on_error_rollback_restores_the_previous_build() {
    let kit = Kit::new("fail-rollback").await;
    let good = kit.simple(&[configmap("cfg", &[("version", "1")])]);
    let first = kit.deploy(&good).await;
    let first_name = first.activation.clone().expect("first");

    let bad = kit.simple(&[
        configmap("cfg", &[("version", "2")]),
        deployment("stuck", false),
    ]);
    let mut options = kit.options();
    options.timeout = Duration::from_secs(3);
    options.on_error = OnError::Rollback;
    let outcome = kit.try_deploy(&bad, &options).await.expect("deploy runs");
    assert_eq!(outcome.phase, Phase::Failed, "{outcome:?}");
    assert_eq!(outcome.rolled_back_to.as_deref(), Some(first_name.as_str()));
    let failed_name = outcome.activation.clone().expect("failed record");
    assert_eq!(failed_name, format!("{}-2", kit.cluster()));

    // The previous ConfigMap value is back; the failed build's new object is
    // pruned by the rollback.
    assert_eq!(kit.cm_value("cfg", "version").await.as_deref(), Some("1"));
    eventually(
        "the stuck Deployment pruned",
        Duration::from_secs(30),
        || async {
            kit.get("apps/v1", "Deployment", "stuck")
                .await
                .is_none()
                .then_some(())
        },
    )
    .await;

    let records = kit.records().await;
    let names: Vec<_> = records
        .iter()
        .map(|r| (r.metadata.name.clone().unwrap_or_default(), r.phase()))
        .collect();
    assert_eq!(
        names,
        [
            (first_name.clone(), Some(Phase::Superseded)),
            (failed_name.clone(), Some(Phase::Failed)),
            (format!("{}-3", kit.cluster()), Some(Phase::Active)),
        ],
        "{names:?}"
    );
    let rollback = &records[2];
    assert_eq!(rollback.spec.source.path, good.path);
    assert_eq!(
        rollback.spec.receipt.rollback_from.as_deref(),
        Some(failed_name.as_str())
    );
    kit.cleanup().await;
}

#[tokio::test]
async fn on_error_continue_applies_independent_packages_and_skips_dependents() {
    let kit = Kit::new("fail-continue").await;
    let built = kit.build(&[
        Pkg::new("broken", &[deployment("stuck", false)]),
        Pkg::new("dependent", &[configmap("dependent", &[("k", "v")])]).depends_on(&["broken"]),
        Pkg::new("independent", &[configmap("independent", &[("k", "v")])]),
    ]);
    let mut options = kit.options();
    options.timeout = Duration::from_secs(3);
    options.on_error = OnError::Continue;
    let outcome = kit.try_deploy(&built, &options).await.expect("deploy runs");
    assert_eq!(outcome.phase, Phase::Degraded, "{outcome:?}");
    assert!(outcome.message.contains("stuck"), "{}", outcome.message);
    assert!(
        outcome.message.contains("dependent") && outcome.message.contains("skipped"),
        "{}",
        outcome.message
    );
    assert_eq!(kit.cm_value("independent", "k").await.as_deref(), Some("v"));
    assert!(
        kit.cm_value("dependent", "k").await.is_none(),
        "a package depending on the failed one is skipped"
    );
    let record = kit.records().await.pop().expect("record");
    assert_eq!(record.phase(), Some(Phase::Degraded));
    kit.cleanup().await;
}

#[tokio::test]
async fn redeploying_a_failed_build_waits_again_and_fails_again() {
    let kit = Kit::new("fail-again").await;
    kit.deploy(&kit.simple(&[configmap("cfg", &[("v", "1")])]))
        .await;
    let bad = kit.build(&[
        Pkg::new(
            "a",
            &[configmap("cfg", &[("v", "2")]), deployment("stuck", false)],
        ),
        Pkg::new("b", &[configmap("after", &[("k", "v")])]).depends_on(&["a"]),
    ]);
    let mut options = kit.options();
    options.timeout = Duration::from_secs(3);
    let first = kit.try_deploy(&bad, &options).await.expect("deploy runs");
    assert_eq!(first.phase, Phase::Failed, "{first:?}");

    // Same build again: its objects are already applied (nothing to write),
    // but they are not healthy; the deploy must not call them Active.
    let again = kit.try_deploy(&bad, &options).await.expect("deploy runs");
    assert_eq!(again.phase, Phase::Failed, "{again:?}");
    assert!(again.message.contains("stuck"), "{}", again.message);
    assert!(kit.cm_value("after", "k").await.is_none(), "b waits for a");
    let phases: Vec<_> = kit.records().await.iter().map(|r| r.phase()).collect();
    assert_eq!(
        phases,
        [
            Some(Phase::Active),
            Some(Phase::Failed),
            Some(Phase::Failed)
        ]
    );
    kit.cleanup().await;
}

#[tokio::test]
async fn rollback_after_an_interrupted_deploy_restores_the_last_good_build() {
    let kit = Kit::new("fail-rollback-stale").await;
    let good = kit.simple(&[configmap("cfg", &[("version", "good")])]);
    let good_name = kit.deploy(&good).await.activation.expect("good");

    // A deploy of another build was killed: its record stays Applying.
    let killed = kit.simple(&[configmap("cfg", &[("version", "killed")])]);
    let spec = record_spec(kit.cluster(), &killed.path, "killed");
    let stale = kix_engine::records::create(&kit.client, 2, spec, vec!["v1/ConfigMap".into()])
        .await
        .expect("record");
    kix_engine::records::set_phase(&kit.client, &stale, Phase::Applying, None)
        .await
        .expect("applying");

    let bad = kit.simple(&[
        configmap("cfg", &[("version", "bad")]),
        deployment("stuck", false),
    ]);
    let mut options = kit.options();
    options.timeout = Duration::from_secs(3);
    options.on_error = OnError::Rollback;
    let outcome = kit.try_deploy(&bad, &options).await.expect("deploy runs");
    assert_eq!(outcome.phase, Phase::Failed, "{outcome:?}");
    assert_eq!(
        outcome.rolled_back_to.as_deref(),
        Some(good_name.as_str()),
        "the last build that was applied, not the interrupted one: {outcome:?}"
    );
    assert_eq!(
        kit.cm_value("cfg", "version").await.as_deref(),
        Some("good")
    );
    let last = kit.records().await.pop().expect("record");
    assert_eq!(last.spec.source.path, good.path);
    assert_eq!(last.phase(), Some(Phase::Active));
    kit.cleanup().await;
}

//! Activation records and deploy control against the real control plane:
//! names and phases, the receipt, the deploy Lease (a concurrent deploy fails
//! naming the holder; a dead holder blocks only until the Lease expires),
//! `--current-activation`, and a record left Applying by a killed deploy.

mod common;

use std::time::{Duration, Instant};

use common::*;
use futures::StreamExt;
use kix_api::{Activation, Engine, Phase};
use kix_engine::EngineError;
use kix_engine::lease::{DeployLease, LeaseError, LeaseOptions};
use kix_testkit::audit;
use kube::api::Api;
use kube::runtime::watcher;

#[tokio::test]
async fn records_are_numbered_phased_and_carry_a_receipt() {
    let kit = Kit::new("records-life").await;
    let first = kit.simple(&[
        configmap("one", &[("k", "1")]),
        configmap("two", &[("k", "2")]),
    ]);
    let plan = kit.plan(&first, &Default::default()).await;
    assert_eq!(plan.activation, format!("{}-1", kit.cluster()));

    // Watch the record through its life.
    let api: Api<Activation> = Api::all(kit.env.client.clone());
    let cfg = watcher::Config::default().fields(&format!("metadata.name={}", plan.activation));
    let mut stream = watcher::watcher(api, cfg).boxed();
    let phases = tokio::spawn(async move {
        let mut phases: Vec<Phase> = vec![];
        while let Some(event) = stream.next().await {
            if let Ok(watcher::Event::Apply(r) | watcher::Event::InitApply(r)) = event {
                let phase = r.phase_or_pending();
                if phases.last() != Some(&phase) {
                    phases.push(phase);
                }
                if phase.is_terminal() {
                    break;
                }
            }
        }
        phases
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let outcome = kit.deploy(&first).await;
    let phases = tokio::time::timeout(Duration::from_secs(10), phases)
        .await
        .expect("the record did not reach a final phase within 10 s of the deploy")
        .expect("watch task");
    assert_eq!(phases, [Phase::Pending, Phase::Applying, Phase::Active]);
    assert_eq!(
        outcome.activation.as_deref(),
        Some(plan.activation.as_str())
    );

    let record = kit.record(&plan.activation).await;
    assert_eq!(record.cluster_name(), kit.cluster());
    assert_eq!(record.spec.source.path, first.path);
    assert_eq!(record.spec.engine, Engine::Local);
    let receipt = &record.spec.receipt;
    assert!(
        !receipt.user.is_empty() && !receipt.host.is_empty(),
        "{receipt:?}"
    );
    assert_eq!(receipt.kix_version, env!("CARGO_PKG_VERSION"));
    assert_eq!(receipt.plan_digest, plan.digest);
    assert_eq!(receipt.counts.create, 2);
    assert!(
        (chrono::Utc::now() - receipt.time).num_seconds().abs() < 120,
        "{receipt:?}"
    );
    let status = record.status.clone().expect("status");
    assert_eq!(status.objects, Some(2));
    assert!(
        status.kinds.iter().any(|k| k == "v1/ConfigMap"),
        "{status:?}"
    );
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True"),
        "{status:?}"
    );

    // kix's own CRDs are installed and current: the plan has nothing to do.
    let plan = kit.plan(&first, &Default::default()).await;
    assert_eq!(plan.kix_crds, kix_engine::records::CrdState::Current);
    assert!(!plan.has_changes(), "{plan:#?}");

    let second = kit.simple(&[configmap("one", &[("k", "1b")])]);
    let outcome = kit.deploy(&second).await;
    assert_eq!(
        outcome.activation.as_deref(),
        Some(format!("{}-2", kit.cluster()).as_str())
    );
    let third = kit.simple(&[configmap("one", &[("k", "1c")])]);
    kit.deploy(&third).await;
    let records = kit.records().await;
    let summary: Vec<_> = records.iter().map(|r| (r.sequence(), r.phase())).collect();
    assert_eq!(
        summary,
        [
            (Some(1), Some(Phase::Superseded)),
            (Some(2), Some(Phase::Superseded)),
            (Some(3), Some(Phase::Active)),
        ]
    );
    assert_eq!(records[1].spec.receipt.counts.update, 1);
    assert_eq!(records[1].spec.receipt.counts.delete, 1);
    kit.cleanup().await;
}

#[tokio::test]
async fn a_concurrent_deploy_fails_naming_the_holder_until_the_lease_expires() {
    let kit = Kit::new("records-lease").await;
    let lease_options = LeaseOptions {
        namespace: kit.ns().to_string(),
        duration: Duration::from_secs(3),
        renew_every: Duration::from_secs(1),
    };
    let holder = "ci-runner@build-host pid 4242";
    let held = DeployLease::acquire(
        kit.env.client.clone(),
        kit.cluster(),
        holder,
        lease_options.clone(),
    )
    .await
    .expect("acquire");

    let built = kit.simple(&[configmap("cfg", &[("k", "v")])]);
    let mut options = kit.options();
    options.lease = lease_options.clone();
    let mark = audit::mark().expect("mark");
    let err = expect_err(kit.try_deploy(&built, &options).await);
    match &err {
        EngineError::Lease(LeaseError::Held { holder: h, .. }) => assert_eq!(h, holder),
        other => panic!("expected Lease(Held), got {other:?}"),
    }
    assert!(err.to_string().contains(holder), "{err}");
    let writes = kit.writes(mark);
    assert!(
        writes.iter().all(|r| r.resource == "leases"),
        "nothing but the lease touched:\n{}",
        describe(&writes)
    );
    assert!(kit.records().await.is_empty());
    assert!(kit.cm_value("cfg", "k").await.is_none());

    // The holder dies without releasing (dropping stops the renewal).
    drop(held);
    let err = expect_err(kit.try_deploy(&built, &options).await);
    assert!(matches!(err, EngineError::Lease(_)), "{err}");
    let started = Instant::now();
    let outcome = loop {
        match kit.try_deploy(&built, &options).await {
            Ok(outcome) => break outcome,
            Err(EngineError::Lease(LeaseError::Held { .. })) => {
                assert!(
                    started.elapsed() < Duration::from_secs(15),
                    "the dead holder's lease never expired"
                );
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(outcome.phase, Phase::Active);
    assert!(
        started.elapsed() <= Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(kit.cm_value("cfg", "k").await.as_deref(), Some("v"));
    kit.cleanup().await;
}

#[tokio::test]
async fn current_activation_guard_refuses_with_nothing_written() {
    let kit = Kit::new("records-current").await;
    let first = kit
        .deploy(&kit.simple(&[configmap("cfg", &[("k", "1")])]))
        .await;
    let current = first.activation.expect("activation");
    let second = kit.simple(&[configmap("cfg", &[("k", "2")])]);

    let mut options = kit.options();
    options.current_activation = Some(format!("{}-7", kit.cluster()));
    let mark = audit::mark().expect("mark");
    let err = expect_err(kit.try_deploy(&second, &options).await);
    match &err {
        EngineError::NotCurrent {
            expected, found, ..
        } => {
            assert_eq!(expected, &format!("{}-7", kit.cluster()));
            assert_eq!(found, &current);
        }
        other => panic!("expected NotCurrent, got {other:?}"),
    }
    let writes = kit.writes(mark);
    assert!(writes.is_empty(), "{}", describe(&writes));
    assert_eq!(kit.cm_value("cfg", "k").await.as_deref(), Some("1"));

    options.current_activation = Some(current);
    kit.deploy_opts(&second, &options).await;
    assert_eq!(kit.cm_value("cfg", "k").await.as_deref(), Some("2"));
    kit.cleanup().await;
}

#[tokio::test]
async fn a_record_left_applying_is_failed_by_the_next_deploy_which_converges() {
    let kit = Kit::new("records-stale").await;
    let build1 = kit.simple(&[
        configmap("cfg", &[("k", "1")]),
        configmap("old", &[("k", "v")]),
    ]);
    kit.deploy(&build1).await;

    // A deploy of build2 was killed mid-apply: its record still says Applying.
    let build2 = kit.simple(&[
        configmap("cfg", &[("k", "2")]),
        configmap("new", &[("k", "v")]),
    ]);
    let spec = record_spec(kit.cluster(), &build2.path, "killed");
    let stale = kix_engine::records::create(&kit.client, 2, spec, vec!["v1/ConfigMap".into()])
        .await
        .expect("record");
    kix_engine::records::set_phase(&kit.client, &stale, Phase::Applying, None)
        .await
        .expect("applying");

    let outcome = kit.deploy(&build2).await;
    assert_eq!(
        outcome.activation.as_deref(),
        Some(format!("{}-3", kit.cluster()).as_str())
    );
    let records = kit.records().await;
    let summary: Vec<_> = records.iter().map(|r| (r.sequence(), r.phase())).collect();
    assert_eq!(
        summary,
        [
            (Some(1), Some(Phase::Superseded)),
            (Some(2), Some(Phase::Failed)),
            (Some(3), Some(Phase::Active)),
        ]
    );
    assert!(
        records[1]
            .status
            .as_ref()
            .and_then(|s| s.message.as_deref())
            .is_some_and(|m| m.contains("interrupted")),
        "{:?}",
        records[1].status
    );
    assert_eq!(kit.cm_value("cfg", "k").await.as_deref(), Some("2"));
    assert!(kit.get("v1", "ConfigMap", "new").await.is_some());
    assert!(kit.get("v1", "ConfigMap", "old").await.is_none(), "pruned");
    // Converged: nothing left to do.
    let again = kit.deploy(&build2).await;
    assert!(again.no_op, "{again:?}");
    kit.cleanup().await;
}

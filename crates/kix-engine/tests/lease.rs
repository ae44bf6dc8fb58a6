//! The deploy Lease against the real control plane (`checks/control-plane up`).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kix_engine::lease::{DeployLease, LeaseError, LeaseOptions, current_holder, lease_name};
use kix_testkit::TestEnv;
use kube::api::{Api, PostParams};

fn options(env: &TestEnv, duration: Duration, renew_every: Duration) -> LeaseOptions {
    LeaseOptions {
        namespace: env.namespace.clone(),
        duration,
        renew_every,
    }
}

async fn lease_object(env: &TestEnv) -> Lease {
    Api::<Lease>::namespaced(env.client.clone(), &env.namespace)
        .get(&lease_name(&env.cluster))
        .await
        .expect("the Lease exists")
}

#[tokio::test]
async fn a_second_acquire_fails_naming_the_holder() {
    let env = TestEnv::new("lease-held").await.expect("test env");
    let opts = LeaseOptions {
        namespace: env.namespace.clone(),
        ..LeaseOptions::default()
    };
    let lease = DeployLease::acquire(
        env.client.clone(),
        &env.cluster,
        "alice@ci pid 42",
        opts.clone(),
    )
    .await
    .expect("first acquire");
    lease.check().expect("held");

    let err = DeployLease::acquire(
        env.client.clone(),
        &env.cluster,
        "bob@laptop pid 7",
        opts.clone(),
    )
    .await
    .expect_err("second acquire must fail");
    match &err {
        LeaseError::Held {
            cluster,
            holder,
            lease,
            expires_in_secs,
            by_kix,
        } => {
            assert!(by_kix, "kix labelled the Lease it created");
            assert_eq!(cluster, &env.cluster);
            assert_eq!(holder, "alice@ci pid 42");
            assert_eq!(
                lease,
                &format!("{}/kix-deploy-{}", env.namespace, env.cluster)
            );
            assert!((1..=15).contains(expires_in_secs), "{expires_in_secs}");
        }
        other => panic!("expected Held, got {other:?}"),
    }
    let message = err.to_string();
    assert!(
        message.starts_with(&format!(
            "Kix cluster {:?} is being deployed by alice@ci pid 42 (lease {}/kix-deploy-{}, expires in ",
            env.cluster, env.namespace, env.cluster
        )),
        "{message}"
    );

    // The same identity is refused too: a deploy never assumes the earlier one is done.
    DeployLease::acquire(
        env.client.clone(),
        &env.cluster,
        "alice@ci pid 42",
        opts.clone(),
    )
    .await
    .expect_err("same holder, still held");

    assert_eq!(
        current_holder(env.client.clone(), &env.cluster, &env.namespace)
            .await
            .expect("current holder")
            .as_deref(),
        Some("alice@ci pid 42")
    );
    let spec = lease_object(&env).await.spec.expect("spec");
    assert_eq!(spec.lease_duration_seconds, Some(15));
    assert_eq!(spec.lease_transitions, Some(0));
    assert!(spec.renew_time.is_some() && spec.acquire_time.is_some());
    lease.release().await;
}

#[tokio::test]
async fn release_lets_the_next_deploy_in_at_once() {
    let env = TestEnv::new("lease-release").await.expect("test env");
    let opts = LeaseOptions {
        namespace: env.namespace.clone(),
        ..LeaseOptions::default()
    };
    let first = DeployLease::acquire(env.client.clone(), &env.cluster, "first", opts.clone())
        .await
        .expect("first acquire");
    first.release().await;

    let spec = lease_object(&env).await.spec.expect("spec");
    assert_eq!(spec.holder_identity, None, "release clears the holder");
    assert_eq!(
        current_holder(env.client.clone(), &env.cluster, &env.namespace)
            .await
            .expect("current holder"),
        None
    );

    let second = DeployLease::acquire(env.client.clone(), &env.cluster, "second", opts.clone())
        .await
        .expect("acquire after release");
    let spec = lease_object(&env).await.spec.expect("spec");
    assert_eq!(spec.holder_identity.as_deref(), Some("second"));
    assert_eq!(spec.lease_transitions, Some(1));
    second.check().expect("held");
    second.release().await;
}

/// A Lease someone else created (no kix label) and holds: the deploy stops
/// naming the holder and saying kix did not create it; once it is not
/// renewed past its duration, the next deploy takes it over.
#[tokio::test]
async fn a_lease_kix_did_not_create_is_named_and_taken_over_when_it_expires() {
    let env = TestEnv::new("lease-squat").await.expect("test env");
    let now = k8s_openapi::jiff::Timestamp::now();
    let squat: Lease = serde_json::from_value(serde_json::json!({
        "metadata": {"name": lease_name(&env.cluster), "namespace": env.namespace},
        "spec": {"holderIdentity": "mallory", "leaseDurationSeconds": 3,
                 "renewTime": now.to_string()}
    }))
    .expect("lease");
    Api::<Lease>::namespaced(env.client.clone(), &env.namespace)
        .create(&PostParams::default(), &squat)
        .await
        .expect("create the squatting Lease");
    let opts = options(&env, Duration::from_secs(2), Duration::from_millis(500));
    let err = DeployLease::acquire(env.client.clone(), &env.cluster, "kix", opts.clone())
        .await
        .expect_err("held by mallory");
    assert_eq!(
        err.to_string(),
        format!(
            "Kix cluster {:?} is being deployed by mallory (lease {}/{}, expires in 3s); \
             kix did not create this Lease: whoever may write Leases in its namespace did",
            env.cluster,
            env.namespace,
            lease_name(&env.cluster)
        )
    );
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let taken = DeployLease::acquire(env.client.clone(), &env.cluster, "kix", opts)
        .await
        .expect("take over the expired Lease");
    taken.release().await;
}

#[tokio::test]
async fn a_vanished_holder_blocks_only_until_expiry() {
    let env = TestEnv::new("lease-expiry").await.expect("test env");
    let opts = options(&env, Duration::from_secs(2), Duration::from_millis(500));
    let killed = DeployLease::acquire(env.client.clone(), &env.cluster, "killed", opts.clone())
        .await
        .expect("acquire");
    // A killed client: no release, renewal stops.
    drop(killed);

    let err = DeployLease::acquire(env.client.clone(), &env.cluster, "next", opts.clone())
        .await
        .expect_err("not expired yet");
    assert!(
        matches!(&err, LeaseError::Held { holder, .. } if holder == "killed"),
        "{err:?}"
    );

    tokio::time::sleep(Duration::from_millis(2600)).await;
    assert_eq!(
        current_holder(env.client.clone(), &env.cluster, &env.namespace)
            .await
            .expect("current holder"),
        None,
        "expired"
    );
    let next = DeployLease::acquire(env.client.clone(), &env.cluster, "next", opts.clone())
        .await
        .expect("take over the expired lease");
    let spec = lease_object(&env).await.spec.expect("spec");
    assert_eq!(spec.holder_identity.as_deref(), Some("next"));
    assert_eq!(spec.lease_transitions, Some(1));
    next.release().await;
}

#[tokio::test]
async fn renewal_keeps_the_lease_beyond_its_duration() {
    let env = TestEnv::new("lease-renew").await.expect("test env");
    let opts = options(&env, Duration::from_secs(2), Duration::from_millis(500));
    let lease = DeployLease::acquire(
        env.client.clone(),
        &env.cluster,
        "long-deploy",
        opts.clone(),
    )
    .await
    .expect("acquire");
    let acquired = lease_object(&env).await.spec.expect("spec");

    tokio::time::sleep(Duration::from_secs(5)).await;
    lease.check().expect("still ours");
    let err = DeployLease::acquire(env.client.clone(), &env.cluster, "impatient", opts.clone())
        .await
        .expect_err("renewed, so still held");
    assert!(
        matches!(&err, LeaseError::Held { holder, .. } if holder == "long-deploy"),
        "{err:?}"
    );
    let renewed = lease_object(&env).await.spec.expect("spec");
    assert!(
        renewed.renew_time > acquired.renew_time,
        "renewTime moved on"
    );
    assert_eq!(renewed.acquire_time, acquired.acquire_time);
    lease.release().await;
}

#[tokio::test]
async fn concurrent_acquires_have_exactly_one_winner() {
    let env = TestEnv::new("lease-race").await.expect("test env");
    let opts = LeaseOptions {
        namespace: env.namespace.clone(),
        ..LeaseOptions::default()
    };
    // Twice: once racing to create the Lease, once racing to take over a released one.
    for round in 0..2 {
        let tasks: Vec<_> = (0..6)
            .map(|i| {
                let client = env.client.clone();
                let cluster = env.cluster.clone();
                let opts = opts.clone();
                tokio::spawn(async move {
                    DeployLease::acquire(client, &cluster, &format!("racer-{round}-{i}"), opts)
                        .await
                })
            })
            .collect();
        let mut winners = Vec::new();
        let mut held_by = Vec::new();
        for task in tasks {
            match task.await.expect("task") {
                Ok(lease) => winners.push(lease),
                Err(LeaseError::Held { holder, .. }) => held_by.push(holder),
                Err(other) => panic!("unexpected error: {other:?}"),
            }
        }
        assert_eq!(winners.len(), 1, "exactly one winner in round {round}");
        let winner = winners.pop().expect("winner");
        assert_eq!(held_by.len(), 5);
        assert!(
            held_by.iter().all(|h| h == winner.holder()),
            "losers name the winner {}: {held_by:?}",
            winner.holder()
        );
        let spec = lease_object(&env).await.spec.expect("spec");
        assert_eq!(spec.holder_identity.as_deref(), Some(winner.holder()));
        assert_eq!(spec.lease_transitions, Some(round));
        winner.release().await;
    }
}

#[tokio::test]
async fn check_reports_a_lease_taken_over_behind_our_back() {
    let env = TestEnv::new("lease-lost").await.expect("test env");
    let opts = options(&env, Duration::from_secs(10), Duration::from_millis(300));
    let lease = DeployLease::acquire(env.client.clone(), &env.cluster, "victim", opts)
        .await
        .expect("acquire");

    // Someone overwrites the holder (say, a forced takeover).
    let api = Api::<Lease>::namespaced(env.client.clone(), &env.namespace);
    let mut object = lease_object(&env).await;
    object.spec.as_mut().expect("spec").holder_identity = Some("intruder".to_owned());
    api.replace(&lease_name(&env.cluster), &PostParams::default(), &object)
        .await
        .expect("overwrite");

    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let err = loop {
        match lease.check() {
            Err(err) => break err,
            Ok(()) if tokio::time::Instant::now() > deadline => panic!("loss not noticed"),
            Ok(()) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    match &err {
        LeaseError::Lost { new_holder, .. } => assert_eq!(new_holder.as_deref(), Some("intruder")),
        other => panic!("expected Lost, got {other:?}"),
    }
    assert!(err.to_string().contains("now held by intruder"), "{err}");

    // Releasing a lost lease leaves the new holder alone.
    lease.release().await;
    assert_eq!(
        lease_object(&env)
            .await
            .spec
            .expect("spec")
            .holder_identity
            .as_deref(),
        Some("intruder")
    );
}

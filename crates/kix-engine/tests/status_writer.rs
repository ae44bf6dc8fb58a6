//! The one writer of a record's status (`records::update_status`), against
//! the real control plane: a step that works from a copy of the record read
//! earlier keeps what another step wrote since, concurrent writers each keep
//! their field, and a write that changes nothing is not sent.

mod common;

use common::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kix_api::{Activation, Drift, Phase};
use kix_engine::records::update_status;
use kube::ResourceExt;

/// A Pending record of the kit's Kix cluster, as a deploy creates it.
async fn record(kit: &Kit) -> Activation {
    let path = "/nix/store/00000000000000000000000000000000-kix-cluster";
    let spec = record_spec(kit.cluster(), path, "test");
    kix_engine::records::create(&kit.client, 1, spec, vec!["v1/ConfigMap".into()])
        .await
        .expect("record")
}

fn condition(type_: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: "True".into(),
        reason: type_.into(),
        message: format!("set by the step that owns {type_}"),
        last_transition_time: Time(k8s_openapi::jiff::Timestamp::now()),
        observed_generation: None,
    }
}

#[tokio::test]
async fn a_step_working_from_an_earlier_copy_keeps_what_was_written_since() {
    let kit = Kit::new("status-stale-copy").await;
    // The reconcile's copy, read before another step wrote.
    let copy = record(&kit).await;
    let name = copy.name_any();
    update_status(&kit.client, &name, |status| {
        status.drift = Some(Drift {
            detected: 3,
            corrected: 3,
            last_corrected: None,
        });
        status.conditions.push(condition("DriftFight"));
    })
    .await
    .expect("another step writes");

    // The stale copy's step fails the record, as the operator's fail() does.
    kix_engine::records::set_phase(&kit.client, &copy, Phase::Failed, Some("boom".into()))
        .await
        .expect("fail");

    let status = kit.record(&name).await.status.expect("status");
    assert_eq!(status.phase, Some(Phase::Failed));
    assert_eq!(status.message.as_deref(), Some("boom"));
    assert_eq!(
        status.drift.map(|d| d.corrected),
        Some(3),
        "drift was dropped"
    );
    assert!(
        status.conditions.iter().any(|c| c.type_ == "DriftFight"),
        "the other step's condition was dropped: {:?}",
        status.conditions
    );
    assert_eq!(
        status.kinds,
        ["v1/ConfigMap"],
        "the record's kinds were dropped"
    );
}

#[tokio::test]
async fn concurrent_writers_each_keep_their_field() {
    let kit = Kit::new("status-concurrent").await;
    let name = record(&kit).await.name_any();
    let writers = (0..8).map(|i| {
        let (client, name) = (kit.client.clone(), name.clone());
        tokio::spawn(async move {
            update_status(&client, &name, |status| {
                status.conditions.push(condition(&format!("Step{i}")));
            })
            .await
        })
    });
    for writer in futures::future::join_all(writers).await {
        writer.expect("task").expect("write");
    }
    let status = kit.record(&name).await.status.expect("status");
    let mut types: Vec<&str> = status.conditions.iter().map(|c| c.type_.as_str()).collect();
    types.sort();
    let expected: Vec<String> = (0..8).map(|i| format!("Step{i}")).collect();
    let mut want: Vec<&str> = expected.iter().map(String::as_str).collect();
    want.push(kix_api::CONDITION_READY);
    want.sort();
    assert_eq!(types, want, "a concurrent write was lost");
}

#[tokio::test]
async fn a_write_that_changes_nothing_is_not_sent() {
    let kit = Kit::new("status-no-op").await;
    let name = record(&kit).await.name_any();
    let set = |status: &mut kix_api::ActivationStatus| {
        status.phase = Some(Phase::Applying);
        status.message = Some("applying".into());
    };
    let first = update_status(&kit.client, &name, set).await.expect("write");
    let second = update_status(&kit.client, &name, set).await.expect("write");
    assert_eq!(
        first.resource_version(),
        second.resource_version(),
        "an unchanged status was written again"
    );
    assert_eq!(
        kit.record(&name).await.resource_version(),
        first.resource_version()
    );
}

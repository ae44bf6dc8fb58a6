//! What keeps an Active record's upkeep quiet and safe: the deletion budget
//! (a prune over it changes nothing, sets a condition and an Event, and
//! waits), the set of objects being deleted (reported when it changes, never
//! deleted again), and status writes only when something changed.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kix_api::{Activation, ActivationStatus, DeletingObject};
use kix_engine::plan::Plan;
use kube::ResourceExt;
use kube::runtime::events::EventType;

use crate::controller::{Context, ReconcileError, event};

/// The condition an Active record carries while its prune waits for consent.
pub const CONDITION_DELETION_BUDGET: &str = "DeletionBudgetExceeded";

/// The plan's deletions exceed the budget the record's receipt accepted:
/// nothing is changed; the record says why (once) and the operator waits.
pub async fn hold_for_budget(
    ctx: &Context,
    record: &Activation,
    plan: &Plan,
) -> Result<(), ReconcileError> {
    let message = format!(
        "pruning is on hold: this prune {}",
        plan.deletion_budget.explain()
    );
    let mut newly = false;
    kix_engine::records::update_status(&ctx.client, &record.name_any(), |status| {
        newly = set_condition(status, CONDITION_DELETION_BUDGET, Some(&message));
    })
    .await?;
    if newly {
        tracing::warn!("{message}");
        event(
            ctx,
            record,
            EventType::Warning,
            CONDITION_DELETION_BUDGET,
            message,
        )
        .await;
    }
    Ok(())
}

/// The condition an applied record carries while the build's CRDs cannot be
/// applied: a version it removes is still in the CRD's storedVersions.
pub const CONDITION_CRD_UPGRADE_REFUSED: &str = "CrdUpgradeRefused";

/// For an applied record's upkeep: the build's CRDs that the apiserver would
/// refuse (a stored version removed) are left as they are this round, so the
/// rest is still kept applied; returns the condition's message (None: no
/// such CRD). The record gets the condition, and one Event per refusal and
/// operator process.
pub async fn hold_refused_crds(
    ctx: &Context,
    record: &Activation,
    plan: &mut Plan,
) -> Option<String> {
    let refused: Vec<&kix_engine::crd_upgrade::CrdUpgrade> = plan
        .crd_upgrades
        .iter()
        .filter(|u| u.refusal().is_some())
        .collect();
    let name = record.name_any();
    if refused.is_empty() {
        if let Ok(mut published) = ctx.crd_refusals.lock() {
            published.remove(&name);
        }
        return None;
    }
    let keys = refused.iter().map(|u| u.key.clone()).collect();
    let reasons: Vec<String> = refused.iter().filter_map(|u| u.refusal()).collect();
    plan.leave_as_is(&keys);
    let message = format!(
        "left as they are, the rest is kept applied: {}",
        kix_engine::deploy::joined(&reasons)
    );
    // Once per refusal: remembered here, since the cached record may not
    // show the condition yet when the next reconcile comes.
    let new = ctx
        .crd_refusals
        .lock()
        .map(|mut published| published.insert(name, message.clone()) != Some(message.clone()))
        .unwrap_or(true);
    if new {
        tracing::warn!("{message}");
        event(
            ctx,
            record,
            EventType::Warning,
            CONDITION_CRD_UPGRADE_REFUSED,
            message.clone(),
        )
        .await;
    }
    Some(message)
}

/// Nothing to apply: the record's deleting set follows the plan's (objects
/// whose finalizers are done leave it), the budget condition is cleared, and
/// the status is written only when that changed something.
pub async fn settle_quiet(
    ctx: &Context,
    record: &Activation,
    plan: &Plan,
    crds_refused: Option<&str>,
) -> Result<(), ReconcileError> {
    let deleting = kix_engine::prune::deleting_in(plan);
    let fight = crate::fights::condition_message(ctx);
    let settle = |status: &mut ActivationStatus| {
        kix_engine::prune::set_deleting(status, deleting.clone());
        set_condition(status, CONDITION_DELETION_BUDGET, None);
        set_condition(status, CONDITION_CRD_UPGRADE_REFUSED, crds_refused);
        set_condition(
            status,
            crate::fights::CONDITION_DRIFT_FIGHT,
            fight.as_deref(),
        );
    };
    // As the operator's watch last saw the record, nothing would change:
    // an idle re-check neither reads nor writes it (a later change of the
    // record is seen by the watch, and the next re-check settles it).
    if let Some(seen) = &record.status {
        let mut settled = seen.clone();
        settle(&mut settled);
        if kix_engine::records::as_written(&settled) == *seen {
            return Ok(());
        }
    }
    let mut before = Vec::new();
    let written = kix_engine::records::update_status(&ctx.client, &record.name_any(), |status| {
        before = status.deleting.clone();
        settle(status);
    })
    .await?;
    let after = written.status.map(|s| s.deleting).unwrap_or_default();
    report_deleting(ctx, record, &before, &after).await;
    Ok(())
}

/// Clears the budget condition of a status about to be written.
pub fn clear_budget(status: &mut ActivationStatus) {
    set_condition(status, CONDITION_DELETION_BUDGET, None);
}

/// Events for the objects that started waiting on finalizers and for those
/// that are gone since `before`.
pub async fn report_deleting(
    ctx: &Context,
    record: &Activation,
    before: &[DeletingObject],
    after: &[DeletingObject],
) {
    let names = |list: &[DeletingObject]| -> Vec<kix_api::ObjectRef> {
        list.iter().map(|d| d.object.clone()).collect()
    };
    let (was, is) = (names(before), names(after));
    for waiting in after.iter().filter(|d| !was.contains(&d.object)) {
        let waits = if waiting.finalizers.is_empty() {
            "its deletion to finish".to_string()
        } else {
            format!("finalizers {}", waiting.finalizers.join(", "))
        };
        let since = waiting
            .since
            .map(|t| format!(" since {}", t.to_rfc3339()))
            .unwrap_or_default();
        event(
            ctx,
            record,
            EventType::Warning,
            "Deleting",
            format!(
                "{} is being deleted and waits for {waits}{since}; it is not deleted again",
                waiting.object
            ),
        )
        .await;
    }
    for gone in before.iter().filter(|d| !is.contains(&d.object)) {
        event(
            ctx,
            record,
            EventType::Normal,
            "Deleted",
            format!("{} is gone", gone.object),
        )
        .await;
    }
    if before != after {
        tracing::info!(record = %record.name_any(), deleting = after.len(), "deleting set changed");
    }
}

/// Sets (message given) or removes (None) the condition `type_`; returns
/// whether it was newly set. A condition already set keeps its
/// lastTransitionTime, so an unchanged state writes nothing.
pub fn set_condition(status: &mut ActivationStatus, type_: &str, message: Option<&str>) -> bool {
    let existing = status.conditions.iter().position(|c| c.type_ == type_);
    match (message, existing) {
        (None, Some(i)) => {
            status.conditions.remove(i);
            false
        }
        (None, None) => false,
        (Some(message), Some(i)) => {
            status.conditions[i].message = message.to_string();
            false
        }
        (Some(message), None) => {
            status.conditions.push(Condition {
                type_: type_.to_string(),
                status: "True".into(),
                reason: type_.to_string(),
                message: message.to_string(),
                last_transition_time: Time(k8s_openapi::jiff::Timestamp::now()),
                observed_generation: None,
            });
            true
        }
    }
}

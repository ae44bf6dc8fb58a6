//! The fleet rollout record: labels on each member's Activation. Nothing
//! else is stored: which members took a rollout, what they had before and
//! how far a rollout went are read back from the members' own records.

use std::collections::BTreeMap;

use kix_api::Activation;
use serde::Serialize;

use crate::spec::{MemberName, RolloutId};

/// The fleet a record was deployed by.
pub const LABEL_FLEET: &str = "kix.run/fleet";
/// The rollout (the fleet build's id, [`crate::spec::FleetFile::rollout`]).
pub const LABEL_ROLLOUT: &str = "kix.run/fleet-rollout";
/// The member of the fleet the record is.
pub const LABEL_MEMBER: &str = "kix.run/fleet-member";
/// `deploy` or `rollback`.
pub const LABEL_ACTION: &str = "kix.run/fleet-action";
/// The fleet build's path.
pub const ANNOTATION_FLEET_PATH: &str = "kix.run/fleet-path";

/// What a fleet run does to a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum FleetAction {
    Deploy,
    Rollback,
}

impl FleetAction {
    pub fn as_str(self) -> &'static str {
        match self {
            FleetAction::Deploy => "deploy",
            FleetAction::Rollback => "rollback",
        }
    }
}

/// The labels that name a fleet rollout on a member's record.
#[derive(Debug, Clone)]
pub struct RolloutLabels {
    pub fleet: String,
    pub rollout: RolloutId,
    pub member: MemberName,
    pub action: FleetAction,
    pub fleet_path: String,
}

impl RolloutLabels {
    pub fn labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (LABEL_FLEET.to_string(), self.fleet.clone()),
            (LABEL_ROLLOUT.to_string(), self.rollout.0.clone()),
            (LABEL_MEMBER.to_string(), self.member.0.clone()),
            (LABEL_ACTION.to_string(), self.action.as_str().to_string()),
        ])
    }

    /// The labels and annotation of a member's record, set when it is
    /// created (by the engine, or as an operator member's record).
    pub fn record_meta(&self) -> kix_engine::operator_record::RecordMeta {
        kix_engine::operator_record::RecordMeta {
            labels: self.labels(),
            annotations: BTreeMap::from([(
                ANNOTATION_FLEET_PATH.to_string(),
                self.fleet_path.clone(),
            )]),
        }
    }
}

/// A member record's fleet labels, when it has them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordRollout {
    pub fleet: String,
    pub rollout: RolloutId,
    pub action: String,
}

pub fn rollout_of(record: &Activation) -> Option<RecordRollout> {
    let labels = record.metadata.labels.as_ref()?;
    Some(RecordRollout {
        fleet: labels.get(LABEL_FLEET)?.clone(),
        rollout: RolloutId(labels.get(LABEL_ROLLOUT)?.clone()),
        action: labels.get(LABEL_ACTION).cloned().unwrap_or_default(),
    })
}

//! What the engine reports while it works ([`Event`]); front ends render it.

use kix_api::Phase;
use serde::Serialize;
use tokio::sync::mpsc::UnboundedSender;

use crate::order::Group;
use crate::plan_object::Action;

/// Where a run's events go, if anywhere.
pub type Events = Option<UnboundedSender<Event>>;

/// One step of a run, as it happens.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "camelCase")]
pub enum Event {
    Recorded {
        activation: String,
    },
    GroupStarted {
        group: Group,
        objects: usize,
    },
    Applied {
        group: Group,
        key: String,
        action: Action,
    },
    ApplyFailed {
        group: Group,
        key: String,
        error: String,
    },
    Waiting {
        group: Group,
        pending: Vec<String>,
    },
    Healthy {
        group: Group,
        elapsed_ms: u64,
    },
    Unhealthy {
        group: Group,
        reasons: Vec<String>,
    },
    Skipped {
        group: Group,
        reason: String,
    },
    Pruned {
        key: String,
        action: Action,
    },
    PruneFailed {
        key: String,
        error: String,
    },
    /// The DELETE was accepted; the object waits for its finalizers.
    PruneDeleting {
        key: String,
        finalizers: Vec<String>,
    },
    Finished {
        activation: String,
        phase: Phase,
        message: String,
    },
}

/// Sends `event` to whoever listens; a listener that left is no error.
pub(crate) fn emit(events: &Events, event: Event) {
    if let Some(tx) = events {
        let _ = tx.send(event);
    }
}

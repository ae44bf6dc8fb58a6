//! What the stages of a deploy did, object by object (Flux's `ChangeSet`).
//!
//! Each stage (apply, wait, migrations, prune) returns its own change set;
//! the orchestrator merges them, and [`ChangeSet::record`] is the one place
//! that turns the merged set into the Activation's status. The keys borrow
//! from the plan, so a change set of 50,000 objects holds no copies.

use kix_api::{ActivationStatus, DELETING_LISTED, DeletingObject, FailedDeletion};
use kix_manifest::{ActionKind, ObjectKey};

/// How many of a run's messages (one per failed object) its message names;
/// the rest are counted, so the message, the record and its events stay
/// small however many objects failed.
pub const MESSAGES_LISTED: usize = 10;

/// What one or more stages did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ChangeSet<'p> {
    /// Objects created by an apply.
    pub created: Vec<&'p ObjectKey>,
    /// Existing objects an apply changed (updated, replaced, adopted,
    /// drift or a conflict taken back).
    pub configured: Vec<&'p ObjectKey>,
    /// Objects of the build the plan left as they are: not written.
    pub unchanged: Vec<&'p ObjectKey>,
    /// Objects found healthy, applied or not.
    pub healthy: u32,
    /// Jobs a wait saw complete (`namespace/name`), removed since or not:
    /// remembered on the record even when the deploy failed elsewhere.
    pub completed_jobs: Vec<String>,
    /// Objects whose apply failed (a failed migration counts one).
    pub failed: u32,
    /// Objects the prune deleted.
    pub deleted: Vec<&'p ObjectKey>,
    /// Once the prune ran: the objects being deleted, held by finalizers.
    pub held: Option<Vec<DeletingObject>>,
    /// Objects the prune could not delete, not yet on the record.
    pub failed_deletions: Vec<FailedDeletion>,
    /// The migrations' actions that ran, in order. Not counted as applied
    /// or pruned: a recreated object is counted when the apply creates it.
    pub migrated: Vec<Migrated>,
    /// What went wrong, one line per object or group, in order.
    pub messages: Vec<String>,
}

/// One migration action that ran: what it did to which object.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Migrated {
    pub action: ActionKind,
    /// The object (`Kind ns/name`), or the migration's reference to it
    /// when the apiserver does not serve its kind.
    pub object: String,
    /// How it ended (`deleted`, `gone`, `adopted`, `kind not served,
    /// nothing to do`).
    pub outcome: String,
}

impl<'p> ChangeSet<'p> {
    /// Objects applied: created or configured.
    pub fn applied(&self) -> u32 {
        (self.created.len() + self.configured.len()) as u32
    }

    /// Objects pruned.
    pub fn pruned(&self) -> u32 {
        self.deleted.len() as u32
    }

    /// Adds what another stage did.
    pub fn merge(&mut self, other: ChangeSet<'p>) {
        self.created.extend(other.created);
        self.configured.extend(other.configured);
        self.unchanged.extend(other.unchanged);
        self.healthy += other.healthy;
        self.completed_jobs.extend(other.completed_jobs);
        self.failed += other.failed;
        self.deleted.extend(other.deleted);
        if let Some(held) = other.held {
            self.held.get_or_insert_with(Vec::new).extend(held);
        }
        self.failed_deletions.extend(other.failed_deletions);
        self.migrated.extend(other.migrated);
        self.messages.extend(other.messages);
    }

    /// Writes the set into the record's status: the progress counts and,
    /// once the prune ran, the objects it could not delete (each written
    /// once, whatever the number of calls) and those being deleted.
    pub fn record(&mut self, status: &mut ActivationStatus) {
        let mut progress = status.progress.unwrap_or_default();
        progress.applied = self.applied();
        progress.failed = self.failed;
        progress.healthy = self.healthy;
        progress.pruned = self.pruned();
        status.progress = Some(progress);
        for failed in std::mem::take(&mut self.failed_deletions) {
            status.push_failed_deletion(failed);
        }
        if let Some(held) = &self.held {
            set_deleting(status, held.clone());
        }
    }
}

/// Records the objects being deleted on the record's status, at most
/// [`DELETING_LISTED`] of them (the total beside): the record stays small
/// however many objects wait. Returns whether the status changed.
pub fn set_deleting(status: &mut ActivationStatus, mut deleting: Vec<DeletingObject>) -> bool {
    deleting.sort();
    let total = deleting.len();
    deleting.truncate(DELETING_LISTED);
    let total = (total > DELETING_LISTED).then_some(total as u32);
    let changed = status.deleting != deleting || status.deleting_total != total;
    status.deleting = deleting;
    status.deleting_total = total;
    changed
}

#[cfg(test)]
mod tests {
    use kix_api::{ObjectRef, Progress};

    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey {
            group: String::new(),
            kind: "ConfigMap".into(),
            namespace: Some("web".into()),
            name: name.into(),
        }
    }

    #[test]
    fn merged_stages_become_the_records_status_once() {
        let (a, b, c) = (key("a"), key("b"), key("c"));
        let mut run = ChangeSet::default();
        run.merge(ChangeSet {
            created: vec![&a],
            configured: vec![&b],
            healthy: 2,
            ..ChangeSet::default()
        });
        run.merge(ChangeSet {
            failed: 1,
            messages: vec!["ConfigMap web/x: refused".into()],
            ..ChangeSet::default()
        });
        let failed = FailedDeletion {
            object: ObjectRef::new("v1", "ConfigMap", Some("web"), "stuck"),
            reason: "forbidden".into(),
        };
        run.merge(ChangeSet {
            deleted: vec![&c],
            held: Some(vec![]),
            failed_deletions: vec![failed.clone()],
            ..ChangeSet::default()
        });
        assert_eq!((run.applied(), run.pruned()), (2, 1));
        let mut status = ActivationStatus {
            progress: Some(Progress {
                total: 5,
                ..Progress::default()
            }),
            ..ActivationStatus::default()
        };
        run.record(&mut status);
        run.record(&mut status);
        let progress = status.progress.unwrap_or_default();
        assert_eq!(
            (
                progress.total,
                progress.applied,
                progress.healthy,
                progress.failed,
                progress.pruned
            ),
            (5, 2, 2, 1, 1)
        );
        assert_eq!(status.failed_deletions, vec![failed]);
        assert_eq!(run.messages, ["ConfigMap web/x: refused"]);
    }
}

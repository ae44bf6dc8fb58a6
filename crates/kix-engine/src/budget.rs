//! The deletion budget: how many of a Kix cluster's owned objects one deploy
//! (rollback, operator prune, gc) may delete without explicit consent.
//!
//! A plan that deletes more than `percent` % of the owned objects *and* more
//! than `floor` objects exceeds the budget (defaults 25 % and 10, settable in
//! the cluster's settings as `deletionBudget`). It then runs only with
//! consent: `--max-deletions N` (N at least the plan's deletions) or
//! `--accept-deletions`; the accepted count is recorded in the Activation's
//! receipt, where the operator reads it.

use kix_manifest::DeletionBudget;
use serde::Serialize;

use crate::plan_object::Counts;

/// What the plan's deletions weigh against the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetCheck {
    /// Objects the plan deletes.
    pub deletions: u32,
    /// The Kix cluster's owned objects before the deploy.
    pub owned: u32,
    /// The most deletions allowed without consent.
    pub allowed: u32,
    pub percent: u32,
    pub floor: u32,
}

impl BudgetCheck {
    /// The check of a plan with `counts` under `budget` (the default when the
    /// cluster's settings have none).
    pub fn of(budget: Option<DeletionBudget>, counts: &Counts) -> BudgetCheck {
        // Every live object of the cluster the plan saw: kept, changed,
        // deleted or being deleted. Creates and adoptions are not owned yet.
        let owned = counts.unchanged
            + counts.update
            + counts.replace
            + counts.conflict
            + counts.delete
            + counts.deleting
            + counts.keep;
        BudgetCheck::new(budget, counts.delete, owned)
    }

    /// `deletions` out of `owned` objects under `budget` (default when None).
    pub fn new(budget: Option<DeletionBudget>, deletions: u32, owned: u32) -> BudgetCheck {
        let budget = budget.unwrap_or_default();
        let share = u64::from(owned) * u64::from(budget.percent) / 100;
        BudgetCheck {
            deletions,
            owned,
            allowed: u32::try_from(share).unwrap_or(u32::MAX).max(budget.floor),
            percent: budget.percent,
            floor: budget.floor,
        }
    }

    pub fn is_exceeded(&self) -> bool {
        self.deletions > self.allowed
    }

    /// The plan's line about an exceeded budget: what and how to proceed.
    pub fn explain(&self) -> String {
        format!(
            "deletes {} of the {} objects the Kix cluster owns, more than its deletion budget allows ({}: {} % of the owned objects, at least {}); rerun with --max-deletions {} (or --accept-deletions) to proceed",
            self.deletions, self.owned, self.allowed, self.percent, self.floor, self.deletions
        )
    }
}

/// The user's consent to delete beyond the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum DeletionConsent {
    /// No consent: the budget applies.
    #[default]
    Budget,
    /// Up to this many deletions (`--max-deletions N`, or the count an
    /// Activation's receipt accepted).
    UpTo(u32),
    /// Whatever the plan deletes (`--accept-deletions`).
    Any,
}

impl DeletionConsent {
    /// The consent a record's receipt carries.
    pub fn from_receipt(accepted: Option<u32>) -> DeletionConsent {
        accepted.map_or(DeletionConsent::Budget, DeletionConsent::UpTo)
    }

    /// Whether the plan's deletions may run.
    pub fn allows(self, check: &BudgetCheck) -> bool {
        match self {
            DeletionConsent::Budget => !check.is_exceeded(),
            DeletionConsent::UpTo(n) => check.deletions <= n.max(check.allowed),
            DeletionConsent::Any => true,
        }
    }

    /// What the receipt records: the count accepted beyond the budget, none
    /// when the plan stays within it.
    pub fn recorded(self, check: &BudgetCheck) -> Option<u32> {
        if !check.is_exceeded() {
            return None;
        }
        match self {
            DeletionConsent::Budget => None,
            DeletionConsent::UpTo(n) => Some(n),
            DeletionConsent::Any => Some(check.deletions),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(unchanged: u32, delete: u32) -> Counts {
        Counts {
            unchanged,
            delete,
            ..Counts::default()
        }
    }

    #[test]
    fn the_default_budget_needs_both_the_share_and_the_floor_exceeded() {
        // 39 of 40: far over 25 % and over 10.
        let check = BudgetCheck::of(None, &counts(1, 39));
        assert_eq!((check.owned, check.allowed), (40, 10));
        assert!(check.is_exceeded());
        // 10 of 10: the floor allows it.
        assert!(!BudgetCheck::of(None, &counts(0, 10)).is_exceeded());
        // 11 of 12: over the floor and the share.
        assert!(BudgetCheck::of(None, &counts(1, 11)).is_exceeded());
        // 50 of 200: exactly 25 %.
        assert!(!BudgetCheck::of(None, &counts(150, 50)).is_exceeded());
        assert!(BudgetCheck::of(None, &counts(149, 51)).is_exceeded());
        // Nothing owned, nothing deleted.
        assert!(!BudgetCheck::of(None, &Counts::default()).is_exceeded());
    }

    #[test]
    fn settings_change_the_budget() {
        let strict = Some(DeletionBudget {
            percent: 0,
            floor: 0,
        });
        assert!(BudgetCheck::of(strict, &counts(100, 1)).is_exceeded());
        let open = Some(DeletionBudget {
            percent: 100,
            floor: 0,
        });
        assert!(!BudgetCheck::of(open, &counts(0, 1000)).is_exceeded());
    }

    #[test]
    fn consent_covers_at_most_what_it_names() {
        let check = BudgetCheck::of(None, &counts(1, 39));
        assert!(!DeletionConsent::Budget.allows(&check));
        assert!(!DeletionConsent::UpTo(38).allows(&check));
        assert!(DeletionConsent::UpTo(39).allows(&check));
        assert!(DeletionConsent::Any.allows(&check));
        assert_eq!(DeletionConsent::Any.recorded(&check), Some(39));
        assert_eq!(DeletionConsent::UpTo(50).recorded(&check), Some(50));
        let within = BudgetCheck::of(None, &counts(100, 3));
        assert_eq!(DeletionConsent::Any.recorded(&within), None);
        // A small --max-deletions never lowers the budget itself.
        assert!(DeletionConsent::UpTo(1).allows(&within));
        assert!(
            check.explain().contains("--max-deletions 39"),
            "{}",
            check.explain()
        );
    }
}

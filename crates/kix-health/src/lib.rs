//! Health of a live Kubernetes object, from the object alone (no API calls,
//! no kube client).
//!
//! [`Rules::judge`] gives a [`Verdict`]: the object's [`Health`] and the
//! rule that judged it. The rules, in order: the user's CEL rules
//! ([`Rules::with_user`], declared in Nix and carried in the tree), the
//! built-in library for common custom resources (`builtin`, one file per
//! project), then the generic kstatus rules ([`kstatus`]).
//!
//! [`health`] and [`judge`] use the built-in library and kstatus.
//!
//! # Where things are
//!
//! - A built-in rule for a custom resource: an entry in its project's file
//!   under `builtin/` (CEL, as a user would write it) and fixtures of real
//!   status shapes beside it (`builtin/fixtures/`): healthy, progressing and
//!   degraded, which `builtin::tests` requires.
//! - A user's rule: declared in Nix, carried in the tree, compiled by the
//!   tree reader ([`Rules::with_user`]); `rule` and `rules` hold the CEL side.
//! - Kinds without a rule: the kstatus port in [`kstatus`].
//! - The engine's wait, `kix status` and the operator all judge through
//!   [`Rules::judge`]; none has health rules of its own.

pub mod bounds;
pub mod evaluator;
pub mod kstatus;

mod builtin;
mod reason;
mod rule;
mod rules;

use chrono::{DateTime, Utc};
use serde_json::Value;

pub use kstatus::{Health, SCHEDULE_WINDOW, judged_by_metadata};
pub use rule::{ExprField, RuleError, RuleSpec};
pub use rules::{RuleRef, Rules, UserRule, Verdict};

/// The health of a live object (as returned by the API server), by the
/// built-in library and kstatus.
pub fn health(obj: &Value) -> Health {
    judge(obj).health
}

/// [`health`] with an explicit current time (only Pod scheduling uses it).
pub fn health_at(obj: &Value, now: DateTime<Utc>) -> Health {
    Rules::builtin().judge_at(obj, now).health
}

/// The health of a live object and the rule that judged it, by the built-in
/// library and kstatus.
pub fn judge(obj: &Value) -> Verdict {
    Rules::builtin().judge(obj)
}

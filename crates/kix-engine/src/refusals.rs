//! The refusals of the sealed plan, as errors: what a re-plan holds that
//! nobody confirmed ([`Unconfirmed`]), a saved plan that moved ([`Moved`]).
//! A leaf of the engine: the errors name them, the gates return them.

/// Destructive actions of a re-plan that the record does not accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the plan has {} destructive action(s) that were not confirmed: {}{}; nothing was changed",
    .actions.len(),
    shown(.actions),
    .note.as_deref().map(|n| format!(" ({n})")).unwrap_or_default()
)]
pub struct Unconfirmed {
    /// The unconfirmed actions (all of the plan's when the record lists
    /// only a digest).
    pub actions: Vec<String>,
    pub note: Option<String>,
}

/// How many unconfirmed actions a message names.
const SHOWN: usize = 20;

pub(crate) fn shown(actions: &[String]) -> String {
    let mut text = actions
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if actions.len() > SHOWN {
        text.push_str(&format!(" and {} more", actions.len() - SHOWN));
    }
    text
}

/// The re-plan an executor made right before acting is not the plan that
/// was saved and confirmed (`kix deploy --plan`): nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the plan is no longer the saved plan (digest {saved}, now {now}): {}; nothing was changed, plan again",
    shown(.changes)
)]
pub struct Moved {
    pub saved: String,
    pub now: String,
    /// `- <action> <object>` saved only, `+ …` now only.
    pub changes: Vec<String>,
}

//! Helm's hooks in a deploy (#47, 3): which of a package's hooks a deploy
//! runs, in which phase and order, as plan values (no client).
//!
//! - A package new to the Kix cluster (no installed PackageInstance) runs
//!   its `pre-install` hooks before its other objects and its
//!   `post-install` hooks once they are healthy; an installed one its
//!   `pre-upgrade` and `post-upgrade` hooks. A package the build drops runs
//!   its `pre-delete` hooks before its objects are pruned and its
//!   `post-delete` hooks after ([`crate::delete_hooks`]). `*-rollback`
//!   hooks are not run.
//! - Inside a phase, hooks go by `helm.sh/hook-weight` (lowest first), one
//!   weight applied and waited for before the next; inside a weight, by
//!   kind rank then name, as Helm sorts them.
//! - A hook runs once per content: one that succeeded is remembered on the
//!   record with its digest ([`crate::health::completed`]), as run-once
//!   Jobs are, and not run again until its manifest changes.
//! - `before-hook-creation` (Helm's default): a hook that runs is created
//!   anew, its previous object deleted first, so the plan shows it as a
//!   create, never a replace to accept.
//!
//! The plan says what it decided for each hook in its `hook` field (event
//! and weight; its note says it in words); the apply stage follows that
//! field ([`split`]), so it runs exactly what the plan showed.

use std::collections::{BTreeMap, BTreeSet};

use kix_manifest::ObjectKey;
use kix_manifest::helm::{DeletePolicy, Hook, HookEvent};

use crate::desired::Desired;
use crate::gates::CompletedJobs;
use crate::health::completed::NOTE_COMPLETED;
use crate::plan_object::{Action, HookRun, PackagePlan, PlannedObject};

/// How a hook's plan note starts.
pub const NOTE_PREFIX: &str = "Helm hook ";

/// The note's end on a hook a deploy does not run.
pub const NOTE_NOT_RUN: &str = "not run by this deploy";

/// The note's end on a hook created anew.
pub const NOTE_RECREATED: &str = "recreated (before-hook-creation)";

/// When a hook runs in its package's group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Before the package's other objects.
    Pre,
    /// Once the package's other objects are healthy.
    Post,
}

/// The event `hook` runs for in a deploy of its package (`installing`: the
/// package is new to the Kix cluster); None when it is not run.
pub fn event_for(hook: &Hook, installing: bool) -> Option<HookEvent> {
    let (pre, post) = if installing {
        (HookEvent::PreInstall, HookEvent::PostInstall)
    } else {
        (HookEvent::PreUpgrade, HookEvent::PostUpgrade)
    };
    [pre, post]
        .into_iter()
        .find(|event| hook.events.contains(event))
}

/// The event `hook` runs for when its package is removed: `pre-delete`
/// (first, when it has both) or `post-delete`; None for any other hook.
pub fn delete_event(hook: &Hook) -> Option<HookEvent> {
    [HookEvent::PreDelete, HookEvent::PostDelete]
        .into_iter()
        .find(|event| hook.events.contains(event))
}

/// The phase of `event`: around the package's objects, or, for a removed
/// package, around the prune of its objects.
pub fn phase_of(event: HookEvent) -> Phase {
    match event {
        HookEvent::PreInstall | HookEvent::PreUpgrade | HookEvent::PreDelete => Phase::Pre,
        _ => Phase::Post,
    }
}

/// The entry of a hook in the record's [`CompletedJobs`]: a Job's as
/// run-once Jobs have it, any other kind's its key.
pub fn entry(key: &ObjectKey) -> String {
    crate::gates::run_entry(key)
}

/// Whether the hook `d` succeeded with its present content before.
pub fn ran(completed: &CompletedJobs, d: &Desired) -> bool {
    completed.get(&entry(&d.key)) == Some(&d.digest)
}

/// The note of a hook that runs: `Helm hook pre-install, weight -5`.
pub fn run_note(event: HookEvent, weight: i64) -> String {
    format!("{NOTE_PREFIX}{event}, weight {weight}")
}

/// The event a planned hook runs for; None for a hook the plan does not
/// run (or any other object).
pub fn planned_event(planned: &PlannedObject) -> Option<HookEvent> {
    planned.hook.map(|h| h.event)
}

/// What the plan of a Kix cluster's deploy does with it: `installed`, the
/// packages installed before; `completed`, the hooks and Jobs that
/// succeeded; `only`, a scoped plan's objects; `mine`, whether an
/// activation is this cluster's; `activation`, the record the deploy writes.
pub struct Context<'a> {
    pub installed: &'a BTreeSet<String>,
    pub completed: &'a CompletedJobs,
    pub only: Option<&'a BTreeSet<ObjectKey>>,
    pub activation: &'a str,
    pub mine: &'a dyn Fn(&str) -> bool,
}

/// Sets each hook's action and note in `packages`: not run (unchanged),
/// completed before (unchanged), or run in its phase (a create when
/// `before-hook-creation` recreates it).
pub fn mark(packages: &mut [PackagePlan], desired: &[Desired], ctx: &Context<'_>) {
    let hooks: BTreeMap<&ObjectKey, &Desired> = desired
        .iter()
        .filter(|d| d.hook.is_some())
        .map(|d| (&d.key, d))
        .collect();
    if hooks.is_empty() {
        return;
    }
    for package in packages.iter_mut() {
        let installing = !ctx.installed.contains(&package.name);
        for planned in &mut package.objects {
            let Some(d) = hooks.get(&planned.key) else {
                continue;
            };
            if ctx.only.is_some_and(|only| !only.contains(&planned.key)) {
                continue;
            }
            let Some(hook) = d.hook.as_deref() else {
                continue;
            };
            mark_one(planned, d, hook, installing, ctx);
        }
        // Listed as they run: the pre phase by weight, the package's other
        // objects, the post phase by weight.
        package.objects.sort_by_key(|p| run_order(p, &hooks));
    }
}

/// Where a planned object runs in its package: (phase, weight); the
/// package's other objects between the phases. A stable sort keeps the
/// build's order inside each.
fn run_order(planned: &PlannedObject, hooks: &BTreeMap<&ObjectKey, &Desired>) -> (u8, i64) {
    let weight = || {
        hooks
            .get(&planned.key)
            .and_then(|d| d.hook.as_deref())
            .map_or(0, |h| h.weight)
    };
    match planned_event(planned).map(phase_of) {
        Some(Phase::Pre) => (0, weight()),
        Some(Phase::Post) => (2, weight()),
        None => (1, 0),
    }
}

fn mark_one(
    planned: &mut PlannedObject,
    d: &Desired,
    hook: &Hook,
    installing: bool,
    ctx: &Context<'_>,
) {
    let Some(event) = event_for(hook, installing) else {
        let events: Vec<&str> = hook.events.iter().map(|e| e.name()).collect();
        let note = format!("{NOTE_PREFIX}{}: {NOTE_NOT_RUN}", events.join(","));
        leave(planned, note);
        return;
    };
    if ran(ctx.completed, d) {
        leave(planned, NOTE_COMPLETED.to_owned());
        return;
    }
    let mut note = run_note(event, hook.weight);
    planned.hook = Some(HookRun {
        event,
        weight: hook.weight,
    });
    let recreate = hook.delete.contains(&DeletePolicy::BeforeHookCreation)
        && matches!(
            planned.action,
            Action::Unchanged | Action::Update | Action::Replace
        );
    if recreate {
        if planned.action == Action::Unchanged {
            planned.activations.retain(|a| !(ctx.mine)(a));
            planned.activations.insert(ctx.activation.to_owned());
        }
        planned.action = Action::Create;
        planned.fields.clear();
        planned.changes.clear();
        planned.destructive = false;
        note.push_str(": ");
        note.push_str(NOTE_RECREATED);
    }
    planned.note = Some(note);
}

/// The hook is left as it is: neither applied nor waited for.
fn leave(planned: &mut PlannedObject, note: String) {
    planned.action = Action::Unchanged;
    planned.hook = None;
    planned.note = Some(note);
    planned.fields.clear();
    planned.changes.clear();
}

/// One weight of a phase: applied, then waited for, before the next.
pub struct Batch<'a> {
    pub event: HookEvent,
    pub weight: i64,
    pub objects: Vec<&'a Desired>,
}

/// A group's objects as the apply stage runs them.
pub struct Split<'a> {
    pub pre: Vec<Batch<'a>>,
    /// The package's other objects.
    pub main: Vec<&'a Desired>,
    pub post: Vec<Batch<'a>>,
    /// Hooks the plan does not run: left as they are, not waited for.
    pub skipped: Vec<&'a ObjectKey>,
}

/// Splits a group's `objects` by what the plan decided for its hooks.
pub fn split<'a>(
    objects: &[&'a Desired],
    planned: &BTreeMap<&ObjectKey, &PlannedObject>,
) -> Split<'a> {
    let mut batches: BTreeMap<(Phase, i64), Batch<'a>> = BTreeMap::new();
    let mut split = Split {
        pre: vec![],
        main: vec![],
        post: vec![],
        skipped: vec![],
    };
    for &d in objects {
        let (Some(hook), Some(p)) = (d.hook.as_deref(), planned.get(&d.key)) else {
            split.main.push(d);
            continue;
        };
        match planned_event(p) {
            Some(event) => batches
                .entry((phase_of(event), hook.weight))
                .or_insert_with(|| Batch {
                    event,
                    weight: hook.weight,
                    objects: vec![],
                })
                .objects
                .push(d),
            None if p.action == Action::Unchanged => split.skipped.push(&d.key),
            None => split.main.push(d),
        }
    }
    for ((phase, _), mut batch) in batches {
        batch
            .objects
            .sort_by(|a, b| (a.rank, &a.key).cmp(&(b.rank, &b.key)));
        match phase {
            Phase::Pre => split.pre.push(batch),
            Phase::Post => split.post.push(batch),
        }
    }
    split
}

/// What a failed hook of `event` left undone, as the record says it.
pub fn after_failure(event: HookEvent) -> &'static str {
    match event {
        HookEvent::PreDelete => "nothing of the package was pruned",
        HookEvent::PostDelete => "the package's objects were pruned",
        _ => "nothing after it was applied",
    }
}

/// `<Kind> <ns>/<name>` of a hook, as a failure names it.
pub fn describe(event: HookEvent, key: &ObjectKey) -> String {
    format!("{NOTE_PREFIX}{event} {key}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(events: &[HookEvent]) -> Hook {
        Hook {
            events: events.iter().copied().collect(),
            weight: 0,
            delete: BTreeSet::from([DeletePolicy::BeforeHookCreation]),
        }
    }

    #[test]
    fn install_and_upgrade_run_their_own_events() {
        use HookEvent::*;
        let both = hook(&[PreInstall, PreUpgrade]);
        assert_eq!(event_for(&both, true), Some(PreInstall));
        assert_eq!(event_for(&both, false), Some(PreUpgrade));
        assert_eq!(event_for(&hook(&[PostUpgrade]), true), None);
        assert_eq!(event_for(&hook(&[PostUpgrade]), false), Some(PostUpgrade));
        assert_eq!(event_for(&hook(&[PreDelete, PostDelete]), false), None);
        assert_eq!(phase_of(PostInstall), Phase::Post);
        assert_eq!(phase_of(PreUpgrade), Phase::Pre);
        assert_eq!(phase_of(PreDelete), Phase::Pre);
        assert_eq!(phase_of(PostDelete), Phase::Post);
        assert_eq!(
            delete_event(&hook(&[PostDelete, PreDelete])),
            Some(PreDelete)
        );
        assert_eq!(delete_event(&hook(&[PostDelete])), Some(PostDelete));
        assert_eq!(delete_event(&hook(&[PreInstall])), None);
    }

    #[test]
    fn the_note_says_in_words_what_the_hook_field_says() {
        assert_eq!(
            run_note(HookEvent::PreUpgrade, -5),
            "Helm hook pre-upgrade, weight -5"
        );
    }
}

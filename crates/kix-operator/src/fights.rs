//! Drift fights: another controller or a person changing an object back
//! every time kix corrects it. After [`FIGHT_AFTER`] corrections of the same
//! object within [`WINDOW`], the operator backs off: it leaves the object
//! alone for a minute, then two, four, up to thirty, and the record gets a
//! `DriftFight` condition and an Event naming the object and the field
//! manager that changed it. Without a correction for a whole window the
//! object is forgiven.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kix_api::{Activation, LEGACY_FIELD_MANAGER};
use kube::runtime::events::EventType;

use crate::controller::{Context, event};
use kix_engine::plan::{Action, Plan};
use kix_manifest::ObjectKey;

/// Corrections of one object within [`WINDOW`] that make a fight.
pub const FIGHT_AFTER: usize = 3;
pub const WINDOW: Duration = Duration::from_secs(600);
const FIRST_BACKOFF: Duration = Duration::from_secs(60);
const MAX_BACKOFF: Duration = Duration::from_secs(1800);

/// The condition a record carries while the operator backs off an object.
pub const CONDITION_DRIFT_FIGHT: &str = "DriftFight";

#[derive(Debug, Default)]
pub struct Fights {
    objects: BTreeMap<ObjectKey, Fight>,
}

#[derive(Debug)]
struct Fight {
    corrections: Vec<Instant>,
    /// Left alone until then.
    until: Option<Instant>,
    backoff: Duration,
    /// The other field manager, once known.
    manager: Option<String>,
}

/// A fight that just started (or escalated): what the record reports.
#[derive(Debug, Clone)]
pub struct Escalation {
    pub key: ObjectKey,
    pub backoff: Duration,
}

impl Fights {
    /// Takes the objects in backoff out of the plan (they stay as they are
    /// this round); returns them.
    pub fn hold_back(&mut self, plan: &mut Plan, now: Instant) -> BTreeSet<ObjectKey> {
        let held: BTreeSet<ObjectKey> = self
            .objects
            .iter()
            .filter(|(_, f)| f.until.is_some_and(|u| u > now))
            .map(|(k, _)| k.clone())
            .collect();
        plan.leave_as_is(&held);
        held
    }

    /// Notes the corrections this round makes (the plan's creates and
    /// updates); returns the objects whose fight starts or escalates now.
    pub fn corrected(&mut self, plan: &Plan, now: Instant) -> Vec<Escalation> {
        let mut out = Vec::new();
        for o in plan.packages.iter().flat_map(|p| &p.objects) {
            if !matches!(o.action, Action::Update | Action::Create) {
                continue;
            }
            let fight = self.objects.entry(o.key.clone()).or_insert(Fight {
                corrections: vec![],
                until: None,
                backoff: FIRST_BACKOFF / 2,
                manager: None,
            });
            fight
                .corrections
                .retain(|t| now.duration_since(*t) < WINDOW);
            fight.corrections.push(now);
            if fight.corrections.len() >= FIGHT_AFTER {
                fight.backoff = (fight.backoff * 2).min(MAX_BACKOFF);
                fight.until = Some(now + fight.backoff);
                out.push(Escalation {
                    key: o.key.clone(),
                    backoff: fight.backoff,
                });
            }
        }
        // Forgiven: no correction for a whole window.
        self.objects.retain(|_, f| {
            f.corrections
                .last()
                .is_some_and(|t| now.duration_since(*t) < WINDOW)
        });
        out
    }

    pub fn set_manager(&mut self, key: &ObjectKey, manager: String) {
        if let Some(f) = self.objects.get_mut(key) {
            f.manager = Some(manager);
        }
    }

    /// The condition's message, or None when no fight is on. It changes
    /// only when a fight starts, escalates or ends (no clock in it).
    pub fn message(&self) -> Option<String> {
        let fights: Vec<String> = self
            .objects
            .iter()
            .filter(|(_, f)| f.until.is_some())
            .map(|(key, f)| {
                let by = f
                    .manager
                    .as_deref()
                    .map(|m| format!(" by field manager {m:?}"))
                    .unwrap_or_default();
                format!(
                    "{key} was changed back{by} after {} corrections within {} min: kix leaves it alone for {}s at a time",
                    f.corrections.len(),
                    WINDOW.as_secs() / 60,
                    f.backoff.as_secs()
                )
            })
            .collect();
        // The first few by name, then a count: the record stays small
        // however many objects fight.
        (!fights.is_empty()).then(|| kix_engine::deploy::joined(&fights))
    }
}

/// The field manager other than this Kix cluster's (`own`, the legacy `kix`
/// and the hand-over manager) that last wrote `object` (its managedFields
/// entry with the newest time).
pub fn other_manager(object: &serde_json::Value, own: &str) -> Option<String> {
    let ours = [
        own,
        LEGACY_FIELD_MANAGER,
        kix_engine::ownership::HANDOVER_FIELD_MANAGER,
    ];
    object["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .filter(|m| m["manager"].as_str().is_some_and(|n| !ours.contains(&n)))
        .max_by_key(|m| m["time"].as_str().unwrap_or_default().to_string())
        .and_then(|m| m["manager"].as_str().map(str::to_string))
}

/// Before a drift correction: takes the objects in backoff out of `plan`,
/// notes the corrections it will make, and for each fight that starts or
/// escalates reads the object's other field manager (before kix takes its
/// fields back) and publishes an Event.
pub async fn before_correcting(ctx: &Context, record: &Activation, plan: &mut Plan) {
    let now = Instant::now();
    let escalations = match ctx.fights.lock() {
        Ok(mut fights) => {
            fights.hold_back(plan, now);
            fights.corrected(plan, now)
        }
        Err(_) => return,
    };
    for escalation in escalations {
        let manager = match plan.desired_for(&escalation.key) {
            Some(d) => kix_engine::plan::api_for(&ctx.client, d)
                .get_opt(&escalation.key.name)
                .await
                .ok()
                .flatten()
                .and_then(|o| {
                    other_manager(
                        &serde_json::to_value(o).ok()?,
                        &kix_api::field_manager(&plan.cluster),
                    )
                }),
            None => None,
        };
        if let (Some(m), Ok(mut fights)) = (&manager, ctx.fights.lock()) {
            fights.set_manager(&escalation.key, m.clone());
        }
        let by = manager
            .map(|m| format!(" by field manager {m:?}"))
            .unwrap_or_default();
        event(
            ctx,
            record,
            EventType::Warning,
            CONDITION_DRIFT_FIGHT,
            format!(
                "{} keeps being changed back{by}: kix leaves it alone for {}s before correcting it again",
                escalation.key,
                escalation.backoff.as_secs()
            ),
        )
        .await;
    }
}

/// The DriftFight condition's message now (None: no fight).
pub fn condition_message(ctx: &Context) -> Option<String> {
    ctx.fights.lock().ok().and_then(|f| f.message())
}

//! The sealed plan: one digest over every action of a [`Plan`], and the
//! destructive actions a user confirms with it.
//!
//! The digest covers each object's action with the content digest of what is
//! applied (creates, updates, unchanged), the fields of replaces and
//! conflicts, each deletion and kept object with its reason, the migrations
//! crossed and kix's own CRDs. It does not cover the field diffs (they
//! describe the live object, not what kix sends) nor the record name.
//!
//! The destructive actions are deletions, replaces, adoptions and
//! migrations. An Activation records them as [`Accepted`] (a digest, counts
//! per kind, and the actions when few); every executor re-plans against the
//! live state right before it acts and refuses, changing nothing, when its
//! plan holds a destructive action the record does not accept ([`check`]).

use std::collections::BTreeSet;

use kix_api::Accepted;
use kix_manifest::{KeyMap, KeySet, ObjectKey, canonical_digest, canonical_json};
use serde_json::{Value, json};

use crate::plan_object::{Action, PlanOptions};
use crate::plan_value::CrdState;
use crate::plan_value::Plan;
pub use crate::refusals::{Moved, Unconfirmed};

/// The digest of every action of `plan` (sha256 hex of its canonical JSON).
///
/// The canonical JSON of `{cluster, crdVersions, kixCrds, migrations,
/// objects: [...]}`
/// is hashed as it is written, an object at a time: the whole document as
/// one `Value` held a KB per object.
pub fn digest(plan: &Plan) -> String {
    let content: KeyMap<&ObjectKey, &str> = plan
        .desired
        .iter()
        .map(|d| (&d.key, d.digest.as_str()))
        .collect();
    // Keys in canonical (sorted) order: cluster, crdVersions, kixCrds,
    // migrations, objects.
    let head = [
        ("cluster", json!(plan.cluster)),
        ("crdVersions", json!(crd_actions(plan).collect::<Vec<_>>())),
        (
            "kixCrds",
            json!((plan.kix_crds != CrdState::Current).then(|| format!("{:?}", plan.kix_crds))),
        ),
        (
            "migrations",
            json!(crate::plan_value::acceptance(&plan.migrations)),
        ),
    ];
    let objects = plan.objects().map(|o| Sealed {
        object: format!("{} {}", o.api_version, o.key),
        action: o.action.as_str(),
        content: content.get(&o.key).copied(),
        fields: &o.fields,
        kept: o.note.as_deref().filter(|_| o.action == Action::Keep),
    });
    streamed_digest(&head, objects)
}

/// What the digest holds of one planned object.
struct Sealed<'a> {
    object: String,
    action: &'static str,
    content: Option<&'a str>,
    fields: &'a [String],
    kept: Option<&'a str>,
}

impl Sealed<'_> {
    /// Its canonical JSON, written straight out: its keys are known, and
    /// making a `Value` of each of 50,000 objects to sort them was most
    /// of the digest's time.
    fn write_canonical(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        out.extend_from_slice(br#"{"action":"#);
        serde_json::to_writer(&mut *out, self.action)?;
        out.extend_from_slice(br#","content":"#);
        serde_json::to_writer(&mut *out, &self.content)?;
        out.extend_from_slice(br#","fields":"#);
        serde_json::to_writer(&mut *out, self.fields)?;
        out.extend_from_slice(br#","kept":"#);
        serde_json::to_writer(&mut *out, &self.kept)?;
        out.extend_from_slice(br#","object":"#);
        serde_json::to_writer(&mut *out, &self.object)?;
        out.push(b'}');
        Ok(())
    }
}

/// [`canonical_digest`] of `{head..., "objects": [objects...]}`, the head's
/// keys sorted and before "objects", written into the hash an object at a
/// time.
fn streamed_digest<'a>(
    head: &[(&str, Value)],
    objects: impl Iterator<Item = Sealed<'a>>,
) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update(b"{");
    for (key, value) in head {
        hasher.update(format!("{}:", Value::from(*key)).as_bytes());
        hasher.update(canonical_json(value).as_bytes());
        hasher.update(b",");
    }
    hasher.update(br#""objects":["#);
    let mut text = Vec::new();
    for (i, object) in objects.enumerate() {
        if i > 0 {
            hasher.update(b",");
        }
        text.clear();
        // Writing to a Vec cannot fail, nor can strings be refused.
        let written = object.write_canonical(&mut text);
        debug_assert!(written.is_ok(), "{written:?}");
        hasher.update(&text);
    }
    hasher.update(b"]}");
    hex::encode(hasher.finalize())
}

/// The CRD versions a plan drops or stops serving while they are stored.
fn crd_actions(plan: &Plan) -> impl Iterator<Item = String> + '_ {
    plan.crd_upgrades
        .iter()
        .flat_map(crate::plan_value::CrdUpgrade::actions)
}

/// The kinds of consent a destructive action needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Consent {
    Deletion,
    Replace,
    Adoption,
    Migration,
    /// A stored CRD version dropped or no longer served.
    CrdVersion,
}

/// The destructive actions of a plan, sorted: `delete Kind ns/name`,
/// `replace …`, `adopt …`, `migration <package> <from> -> <to>`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Destructive {
    actions: BTreeSet<(Consent, String)>,
    /// Deletions of objects the build does not have (pruned): the only
    /// deletions a plan makes. A record that lists only a digest can accept
    /// fewer of them by count alone because of this.
    undropped: Vec<String>,
}

impl Destructive {
    pub fn of(plan: &Plan) -> Destructive {
        let mut actions = BTreeSet::new();
        let desired: KeySet<&ObjectKey> = plan.desired.iter().map(|d| &d.key).collect();
        let pruned: KeySet<&ObjectKey> = plan.prune.iter().map(|o| &o.key).collect();
        let mut undropped = Vec::new();
        for o in plan.objects() {
            if o.action == Action::Delete && (desired.contains(&o.key) || !pruned.contains(&o.key))
            {
                undropped.push(format!("delete {}", o.key));
            }
            let consent = match o.action {
                Action::Delete => Consent::Deletion,
                Action::Replace => Consent::Replace,
                Action::Adopt => Consent::Adoption,
                _ => continue,
            };
            let verb = match consent {
                Consent::Deletion => "delete",
                Consent::Replace => "replace",
                _ => "adopt",
            };
            actions.insert((consent, format!("{verb} {}", o.key)));
        }
        for m in &plan.migrations {
            actions.insert((
                Consent::Migration,
                format!("migration {} {}", m.package, m.label()),
            ));
        }
        for line in crd_actions(plan) {
            actions.insert((Consent::CrdVersion, line));
        }
        Destructive { actions, undropped }
    }

    pub fn is_empty(&self) -> bool {
        self.actions.is_empty()
    }

    pub fn lines(&self) -> impl Iterator<Item = &str> {
        self.actions.iter().map(|(_, line)| line.as_str())
    }

    /// Digest of the sorted actions; empty when there are none.
    pub fn digest(&self) -> String {
        if self.actions.is_empty() {
            return String::new();
        }
        canonical_digest(&json!(self.lines().collect::<Vec<_>>()))
    }

    fn count(&self, consent: Consent) -> u32 {
        self.actions.iter().filter(|(c, _)| *c == consent).count() as u32
    }

    /// What a record stores when the user confirms these actions.
    pub fn accepted(&self) -> Accepted {
        Accepted {
            digest: self.digest(),
            deletions: self.count(Consent::Deletion),
            replaces: self.count(Consent::Replace),
            adoptions: self.count(Consent::Adoption),
            migrations: self.count(Consent::Migration),
            crd_versions: self.count(Consent::CrdVersion),
            actions: if self.actions.len() <= Accepted::MAX_LISTED {
                self.lines().map(str::to_string).collect()
            } else {
                vec![]
            },
        }
    }
}

/// Whether `planned` (an executor's re-plan) stays within what `accepted`
/// confirmed: the same set (by digest), or a subset of the listed actions (a
/// deletion already done, an interrupted deploy resumed).
///
/// A record that lists only a digest (more than [`Accepted::MAX_LISTED`]
/// actions) cannot name a subset: then the re-plan passes when it has no
/// more actions of each kind than were accepted, and its deletions are all
/// of objects the Kix cluster owns and the build no longer has (an
/// interrupted prune resumed deletes fewer of the same). It cannot tell one
/// replace or adoption from another: the counts bound them.
pub fn check(accepted: &Accepted, planned: &Destructive) -> Result<(), Unconfirmed> {
    if planned.is_empty() || planned.digest() == accepted.digest {
        return Ok(());
    }
    if accepted.is_listed() {
        let listed: BTreeSet<&str> = accepted.actions.iter().map(String::as_str).collect();
        let missing: Vec<String> = planned
            .lines()
            .filter(|l| !listed.contains(l))
            .map(str::to_string)
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        return Err(Unconfirmed {
            actions: missing,
            note: None,
        });
    }
    let limits = [
        (Consent::Deletion, accepted.deletions, "deletions"),
        (Consent::Replace, accepted.replaces, "replaces"),
        (Consent::Adoption, accepted.adoptions, "adoptions"),
        (Consent::Migration, accepted.migrations, "migrations"),
    ];
    let over: Vec<(Consent, String)> = limits
        .iter()
        .filter(|(consent, limit, _)| planned.count(*consent) > *limit)
        .map(|(consent, limit, what)| {
            (
                *consent,
                format!("{} {what}, {limit} accepted", planned.count(*consent)),
            )
        })
        .collect();
    if over.is_empty() && planned.undropped.is_empty() {
        return Ok(());
    }
    let kinds: BTreeSet<Consent> = over.iter().map(|(c, _)| *c).collect();
    let mut why: Vec<String> = over.into_iter().map(|(_, w)| w).collect();
    if !planned.undropped.is_empty() {
        why.push("deletions of objects the build still has".to_string());
    }
    Err(Unconfirmed {
        actions: planned
            .actions
            .iter()
            .filter(|(c, _)| kinds.contains(c))
            .map(|(_, l)| l.clone())
            .chain(planned.undropped.iter().cloned())
            .collect(),
        note: Some(format!(
            "the record accepts {} destructive action(s), by digest and counts only: {}",
            accepted.total(),
            why.join(", ")
        )),
    })
}

impl Moved {
    /// What [`Moved::check`] compares a re-plan with: the actions of the
    /// plan made from the saved one (kept instead of that whole plan).
    pub fn actions_of(confirmed: &Plan) -> BTreeSet<String> {
        action_lines(&serde_json::to_value(confirmed).unwrap_or(Value::Null))
    }

    /// What moved between the actions of the confirmed plan
    /// ([`Moved::actions_of`]) and `now`, a re-plan: the changes of the
    /// [`crate::gates::saved_plan`] gate's refusal.
    pub fn changes(confirmed: &BTreeSet<String>, now: &Plan) -> Vec<String> {
        moved_lines(confirmed, now)
    }
}

/// `- line` for each of `saved` that `plan` does not have, `+ line` for the
/// reverse; a line saying only the content changed when the sets are equal.
fn moved_lines(saved: &BTreeSet<String>, plan: &Plan) -> Vec<String> {
    let now = action_lines(&serde_json::to_value(plan).unwrap_or(Value::Null));
    let mut out: Vec<String> = saved
        .difference(&now)
        .map(|l| format!("- {l}"))
        .chain(now.difference(saved).map(|l| format!("+ {l}")))
        .collect();
    if out.is_empty() {
        out.push(
            "the same actions, but their content or fields differ (the digest changed)".to_string(),
        );
    }
    out
}

/// Consent given by other means than a confirmed plan (`--on-error
/// rollback`): deletions of the named objects, and, when `others`, every
/// replace, adoption and migration.
#[derive(Debug, Clone, Default)]
pub struct Consented {
    pub deletions: BTreeSet<ObjectKey>,
    pub others: bool,
}

impl Consented {
    pub fn check(&self, plan: &Plan) -> Result<(), Unconfirmed> {
        let actions: Vec<String> = plan
            .objects()
            .filter(|o| match o.action {
                Action::Delete => !self.deletions.contains(&o.key),
                Action::Replace | Action::Adopt => !self.others,
                _ => false,
            })
            .map(|o| format!("{} {}", o.action.as_str(), o.key))
            .chain(
                plan.migrations
                    .iter()
                    .filter(|_| !self.others)
                    .map(|m| format!("migration {} {}", m.package, m.label())),
            )
            .chain(crd_actions(plan).filter(|_| !self.others))
            .collect();
        if actions.is_empty() {
            Ok(())
        } else {
            Err(Unconfirmed {
                actions,
                note: None,
            })
        }
    }
}

/// A plan saved by `kix plan --out`: the `--output json` document (digest,
/// store path, Kix cluster and options included). `kix deploy --plan` runs
/// it only when a re-plan against the live state has the same digest.
#[derive(Debug, Clone)]
pub struct SavedPlan {
    pub cluster: String,
    pub store_path: String,
    pub digest: String,
    /// The options it was planned with: what runs.
    pub options: PlanOptions,
    /// Made for the operator (`kix plan --operator`, `"executor":
    /// "operator"`), not the local engine.
    pub operator: bool,
    document: Value,
}

impl SavedPlan {
    /// Reads the document; the error says which field is missing.
    pub fn from_json(text: &str) -> Result<SavedPlan, String> {
        let document: Value =
            serde_json::from_str(text).map_err(|e| format!("not a kix plan (JSON): {e}"))?;
        let field = |name: &str| {
            document[name]
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("not a kix plan: no {name:?} field"))
        };
        let options = serde_json::from_value(document["options"].clone())
            .map_err(|e| format!("not a kix plan: \"options\": {e}"))?;
        let operator = match document.get("executor").and_then(Value::as_str) {
            None | Some(EXECUTOR_LOCAL) => false,
            Some(EXECUTOR_OPERATOR) => true,
            Some(other) => {
                return Err(format!(
                    "not a kix plan: \"executor\" is {other:?}, not {EXECUTOR_LOCAL:?} or {EXECUTOR_OPERATOR:?}"
                ));
            }
        };
        Ok(SavedPlan {
            cluster: field("cluster")?,
            store_path: field("storePath")?,
            digest: field("digest")?,
            options,
            operator,
            document,
        })
    }

    /// What differs between the saved plan and `plan` (a re-plan of the same
    /// build), one line each: `- <action> <object>` saved only, `+ …` now
    /// only. Empty when the digests are equal.
    pub fn moved(&self, plan: &Plan) -> Vec<String> {
        if plan.digest == self.digest {
            return vec![];
        }
        moved_lines(&action_lines(&self.document), plan)
    }
}

/// The `executor` of a saved plan document: who it was planned for.
pub const EXECUTOR_LOCAL: &str = "local";
pub const EXECUTOR_OPERATOR: &str = "operator";

/// The document `kix plan --out` writes: the plan's `--output json` and
/// the executor it was planned for.
pub fn saved_document(plan: &Plan, operator: bool) -> Value {
    let mut document = serde_json::to_value(plan).unwrap_or(Value::Null);
    if let Some(map) = document.as_object_mut() {
        let executor = if operator {
            EXECUTOR_OPERATOR
        } else {
            EXECUTOR_LOCAL
        };
        map.insert("executor".into(), json!(executor));
    }
    document
}

/// `<action> <Kind> <namespace>/<name>` of every object of a plan document,
/// and `migration …` of each migration.
fn action_lines(document: &Value) -> BTreeSet<String> {
    let empty = vec![];
    let arr = |v: &Value| v.as_array().unwrap_or(&empty).clone();
    let objects = arr(&document["packages"])
        .iter()
        .flat_map(|p| arr(&p["objects"]))
        .chain(arr(&document["prune"]))
        .collect::<Vec<_>>();
    let mut lines: BTreeSet<String> = objects
        .iter()
        .map(|o| {
            let key = &o["key"];
            let at = match key["namespace"].as_str() {
                Some(ns) => format!("{ns}/"),
                None => String::new(),
            };
            format!(
                "{} {} {} {at}{}",
                o["action"].as_str().unwrap_or("?"),
                o["apiVersion"].as_str().unwrap_or(""),
                key["kind"].as_str().unwrap_or("?"),
                key["name"].as_str().unwrap_or("?")
            )
        })
        .collect();
    for m in arr(&document["migrations"]) {
        lines.insert(format!(
            "migration {} {} -> {}",
            m["package"].as_str().unwrap_or("?"),
            m["from"].as_str().unwrap_or("?"),
            m["to"].as_str().unwrap_or("?")
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(lines: &[(Consent, &str)]) -> Destructive {
        Destructive {
            actions: lines.iter().map(|(c, l)| (*c, l.to_string())).collect(),
            undropped: vec![],
        }
    }

    #[test]
    fn the_streamed_digest_is_the_digest_of_the_whole_document() {
        let fields = ["x".to_string(), "a\"\\\u{1}é".to_string()];
        let objects = || {
            [
                Sealed {
                    object: "v1 ConfigMap a/x".into(),
                    action: "create",
                    content: Some("ab"),
                    fields: &[],
                    kept: None,
                },
                Sealed {
                    object: "v1 Namespace/a\"".into(),
                    action: "keep",
                    content: None,
                    fields: &fields,
                    kept: Some("shared\n"),
                },
            ]
            .into_iter()
        };
        let whole_objects: Vec<Value> = objects()
            .map(|o| {
                json!({"object": o.object, "action": o.action, "content": o.content,
                       "fields": o.fields, "kept": o.kept})
            })
            .collect();
        let head = [
            ("cluster", json!("prod")),
            ("kixCrds", json!("Missing")),
            ("migrations", json!(["migration web 1 -> 2"])),
        ];
        let whole = json!({
            "objects": whole_objects,
            "migrations": ["migration web 1 -> 2"],
            "kixCrds": "Missing",
            "cluster": "prod",
        });
        assert_eq!(streamed_digest(&head, objects()), canonical_digest(&whole));
        let empty = json!({"cluster": "prod", "kixCrds": null, "migrations": [], "objects": []});
        let head = [
            ("cluster", json!("prod")),
            ("kixCrds", Value::Null),
            ("migrations", json!([])),
        ];
        assert_eq!(
            streamed_digest(&head, std::iter::empty()),
            canonical_digest(&empty)
        );
    }

    #[test]
    fn the_same_set_and_a_listed_subset_pass() {
        let confirmed = set(&[
            (Consent::Deletion, "delete ConfigMap a/x"),
            (Consent::Adoption, "adopt ConfigMap a/y"),
        ]);
        let accepted = confirmed.accepted();
        assert_eq!(accepted.deletions, 1);
        assert_eq!(accepted.adoptions, 1);
        assert!(accepted.is_listed());
        assert_eq!(check(&accepted, &confirmed), Ok(()));
        let fewer = set(&[(Consent::Deletion, "delete ConfigMap a/x")]);
        assert_eq!(check(&accepted, &fewer), Ok(()));
        assert_eq!(check(&Accepted::default(), &Destructive::default()), Ok(()));
    }

    #[test]
    fn an_action_not_confirmed_is_named() {
        let accepted = set(&[(Consent::Deletion, "delete ConfigMap a/x")]).accepted();
        let planned = set(&[
            (Consent::Deletion, "delete ConfigMap a/x"),
            (Consent::Deletion, "delete Namespace a"),
        ]);
        let err = check(&accepted, &planned).expect_err("refused");
        assert_eq!(err.actions, ["delete Namespace a"]);
        assert!(err.to_string().contains("delete Namespace a"), "{err}");
        let none = check(&Accepted::default(), &planned).expect_err("refused");
        assert_eq!(none.actions.len(), 2);
    }

    #[test]
    fn a_large_set_is_recorded_by_digest_and_checked_by_counts() {
        let many: Vec<(Consent, String)> = (0..Accepted::MAX_LISTED + 1)
            .map(|i| (Consent::Deletion, format!("delete ConfigMap a/c{i}")))
            .collect();
        let confirmed = Destructive {
            actions: many.iter().cloned().collect(),
            undropped: vec![],
        };
        let accepted = confirmed.accepted();
        assert!(accepted.actions.is_empty(), "bounded record");
        assert_eq!(accepted.deletions as usize, Accepted::MAX_LISTED + 1);
        assert_eq!(check(&accepted, &confirmed), Ok(()));
        // An interrupted prune resumed: some deletions already happened.
        let mut fewer = confirmed.clone();
        for _ in 0..30 {
            fewer.actions.pop_first();
        }
        assert_eq!(check(&accepted, &fewer), Ok(()));
        // One deletion more than accepted: every deletion is named.
        let mut more = confirmed.clone();
        more.actions
            .insert((Consent::Deletion, "delete Namespace a".to_string()));
        let err = check(&accepted, &more).expect_err("more deletions");
        assert_eq!(err.actions.len(), Accepted::MAX_LISTED + 2);
        assert!(
            err.to_string().contains("102 deletions, 101 accepted"),
            "{err}"
        );
        assert!(err.to_string().contains("and 82 more"), "{err}");
        // Another kind than was accepted: refused, naming it.
        let mut replace = fewer.clone();
        replace
            .actions
            .insert((Consent::Replace, "replace Service a/s".to_string()));
        let err = check(&accepted, &replace).expect_err("a replace");
        assert_eq!(err.actions, ["replace Service a/s"]);
        // A deletion of an object the build still has: refused.
        let mut kept = fewer.clone();
        kept.undropped.push("delete ConfigMap a/c0".to_string());
        let err = check(&accepted, &kept).expect_err("undropped");
        assert!(err.to_string().contains("the build still has"), "{err}");
    }
}

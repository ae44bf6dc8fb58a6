//! The gates: every rule that may refuse or hold a change, each a function
//! of plan values and the consents given, returning a typed verdict.
//!
//! Every executor asks these functions (the CLI's deploy, rollback, gc,
//! build, validate and declare, the fleet, the operator); none
//! re-implements a rule. A new rule is a new function here, with its
//! verdicts tested on values below. Pure: no client, no I/O.
//!
//! - On the plan ([`Refusal`]): [`deploy`] asks, in order,
//!   [`current_activation`], [`rights`], [`conflicts`],
//!   [`crd_stored_versions`], [`destructive`], [`empty_build`] and
//!   [`deletion_budget`]; a host's declaration asks [`accepted_by_host`];
//!   the sealed plan [`confirmed`], [`consented`] and [`saved_plan`].
//! - On the build, before it is planned ([`BuildRefusal`]):
//!   [`plaintext_secrets`], [`allow_list`], [`acting_account`] and
//!   [`build_account`].
//! - Holds (a change the plan leaves out): [`ran_once`], a Job that
//!   completed for this build.

use std::collections::{BTreeMap, BTreeSet};

use kix_api::{Accepted, ServiceAccountRef};
use kix_manifest::{Build, ObjectKey, group_kind};

use crate::budget::{BudgetCheck, DeletionConsent};
use crate::plan_value::Plan;
use crate::seal::{Consented, Destructive, Moved, Unconfirmed};

/// What the user (or the record they wrote) consented to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Consents {
    /// `--current-activation NAME`: act only if NAME is current.
    pub current_activation: Option<String>,
    /// `--force-conflicts`: take fields other managers own.
    pub force_conflicts: bool,
    /// Never take a field another Kix cluster set, even when forcing (the
    /// operator: it has no user's consent to that).
    pub yield_to_kix_clusters: bool,
    /// `--accept-migrations`: migrations, replaces, adoptions, destructive
    /// deletions.
    pub accept_migrations: bool,
    /// `--allow-empty`: a build with no objects may prune everything.
    pub allow_empty: bool,
    /// Whether the run prunes at all.
    pub prune: bool,
    /// Deleting more than the deletion budget allows.
    pub deletions: DeletionConsent,
}

/// Why a gate refuses a plan: nothing is changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// `--current-activation` names another record than the current one.
    NotCurrent {
        cluster: String,
        expected: String,
        found: String,
    },
    /// Objects the deploy's account may not write (`"<object>: <apiserver's
    /// message>"`).
    NoPermission(Vec<String>),
    /// Fields other managers own, not to be taken (`"<object> (<fields>)"`).
    Conflicts(Vec<String>),
    /// Stored CRD versions the build drops: the apiserver would refuse it.
    CrdStoredVersions(Vec<String>),
    /// Destructive actions that need `--accept-migrations`.
    NeedsAcceptance(Vec<String>),
    /// A build with no objects would prune everything the cluster owns.
    EmptyBuild { cluster: String },
    /// More deletions than the budget and the consent allow.
    DeletionBudget(BudgetCheck),
}

/// A gate's verdict: `Ok` lets the change through.
pub type Verdict<E = Refusal> = std::result::Result<(), E>;

/// Every gate a local deploy (or rollback) passes before it changes
/// anything, in the order they are asked: the first refusal wins.
pub fn deploy(plan: &Plan, build_objects: usize, consents: &Consents) -> Verdict {
    current_activation(plan, consents.current_activation.as_deref())?;
    rights(plan)?;
    conflicts(
        plan,
        consents.force_conflicts,
        consents.yield_to_kix_clusters,
    )?;
    // Before the acceptance: accepted or not, the apiserver would refuse it.
    crd_stored_versions(plan)?;
    destructive(plan, consents.accept_migrations)?;
    empty_build(plan, build_objects, consents.prune, consents.allow_empty)?;
    if consents.prune {
        deletion_budget(&plan.deletion_budget, consents.deletions)?;
    }
    Ok(())
}

/// `--current-activation`: the plan's current record is the one named.
pub fn current_activation(plan: &Plan, expected: Option<&str>) -> Verdict {
    let Some(expected) = expected else {
        return Ok(());
    };
    let found = plan.current_activation.as_deref().unwrap_or("none");
    if found == expected {
        return Ok(());
    }
    Err(Refusal::NotCurrent {
        cluster: plan.cluster.clone(),
        expected: expected.to_string(),
        found: found.to_string(),
    })
}

/// Rights: every object the deploy would write, the apiserver let its
/// account write in the plan's dry run. A tenant's build reaching past its
/// account's rights is refused before any change, naming each object and
/// what the account may not do (the apiserver's words).
pub fn rights(plan: &Plan) -> Verdict {
    let refused: Vec<String> = plan
        .objects()
        .filter(|o| o.action.writes())
        .filter_map(|o| {
            let reason = o
                .note
                .as_deref()?
                .strip_prefix(crate::plan_object::NOTE_NO_PERMISSION)?;
            Some(format!("{}{reason}", o.key))
        })
        .collect();
    if refused.is_empty() {
        Ok(())
    } else {
        Err(Refusal::NoPermission(refused))
    }
}

/// Conflicts: all refused without `force`; with it, those with other Kix
/// clusters still refused when `yield_to_kix_clusters`.
pub fn conflicts(plan: &Plan, force: bool, yield_to_kix_clusters: bool) -> Verdict {
    let refused = plan.refused_conflicts(force, yield_to_kix_clusters);
    if refused.is_empty() {
        Ok(())
    } else {
        Err(Refusal::Conflicts(refused))
    }
}

/// CRD versions that still hold stored objects may not be dropped.
pub fn crd_stored_versions(plan: &Plan) -> Verdict {
    let refused = crate::plan_value::refusals(&plan.crd_upgrades);
    if refused.is_empty() {
        Ok(())
    } else {
        Err(Refusal::CrdStoredVersions(refused))
    }
}

/// Migrations, replaces, adoptions and destructive deletions need
/// `--accept-migrations`.
pub fn destructive(plan: &Plan, accept_migrations: bool) -> Verdict {
    let needed = plan.needs_acceptance();
    if needed.is_empty() || accept_migrations {
        Ok(())
    } else {
        Err(Refusal::NeedsAcceptance(needed))
    }
}

/// A build with no objects may not prune everything without `--allow-empty`.
pub fn empty_build(plan: &Plan, build_objects: usize, prune: bool, allow_empty: bool) -> Verdict {
    if build_objects == 0 && prune && !allow_empty && plan.counts.delete > 0 {
        Err(Refusal::EmptyBuild {
            cluster: plan.cluster.clone(),
        })
    } else {
        Ok(())
    }
}

/// Deletions beyond the budget need consent (a deploy's, a rollback's, the
/// operator's prune from its record's receipt, gc's).
pub fn deletion_budget(check: &BudgetCheck, consent: DeletionConsent) -> Verdict {
    if consent.allows(check) {
        Ok(())
    } else {
        Err(Refusal::DeletionBudget(*check))
    }
}

/// The sealed plan: an executor's re-plan holds no destructive action the
/// record does not accept.
pub fn confirmed(accepted: &Accepted, plan: &Plan) -> Verdict<Unconfirmed> {
    crate::seal::check(accepted, &Destructive::of(plan))
}

/// `--on-error rollback`: the rollback's plan holds only what undoing the
/// failed deploy was consented to.
pub fn consented(consented: &Consented, plan: &Plan) -> Verdict<Unconfirmed> {
    consented.check(plan)
}

/// A saved plan (`kix deploy --plan`) runs only as saved: the re-plan has
/// its digest. `changes` says what moved when it has not.
pub fn saved_plan(
    saved_digest: &str,
    plan: &Plan,
    changes: impl FnOnce() -> Vec<String>,
) -> Verdict<Moved> {
    if plan.digest == saved_digest {
        return Ok(());
    }
    Err(Moved {
        saved: saved_digest.to_string(),
        now: plan.digest.clone(),
        changes: changes(),
    })
}

/// A host's declaration (`kix declare --accept`, the NixOS module's
/// `acceptMigrations`): every line of the plan's `needs_acceptance` must be
/// named by an entry, an entry naming the lines that start with its words.
pub fn accepted_by_host(plan: &Plan, accepted: &[String]) -> Verdict {
    lines_accepted(plan.needs_acceptance(), accepted)
}

fn lines_accepted(needed: Vec<String>, accepted: &[String]) -> Verdict {
    let names = |entry: &str, line: &str| {
        let entry: Vec<&str> = entry.split_whitespace().collect();
        !entry.is_empty() && line.split_whitespace().take(entry.len()).eq(entry)
    };
    let refused: Vec<String> = needed
        .into_iter()
        .filter(|line| !accepted.iter().any(|entry| names(entry, line)))
        .collect();
    if refused.is_empty() {
        Ok(())
    } else {
        Err(Refusal::NeedsAcceptance(refused))
    }
}

// ---------------------------------------------------------------- the build

/// Why a build is refused before it is planned: nothing is changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildRefusal {
    /// Plain Secrets with values in packages that do not allow them.
    #[error(
        "the build has plain Secrets with values ({}): the Nix store is world-readable, so every \
         user of this machine (and of every machine the path is copied to) can read them. \
         Encrypt them with sops and give the files as `packages.<p>.secrets` (see \
         docs/secrets.md), or set `allowPlaintextSecrets = true` on package {} for a test \
         cluster",
        .objects.join(", "),
        .packages.join(", ")
    )]
    PlaintextSecrets {
        objects: Vec<String>,
        packages: Vec<String>,
    },
    /// Objects outside the operator's allow-list (`"<object>: <why>"`).
    #[error("the build is outside this operator's allow-list: {}", first_ten(.0))]
    OutsideAllowList(Vec<String>),
    /// A record naming no account, where one is required.
    #[error(
        "the record names no ServiceAccount (spec.serviceAccount) and this operator runs with \
         --require-service-account: nothing was changed"
    )]
    AccountRequired,
    /// The build declares another account than the one acting for it.
    #[error(
        "the build acts as ServiceAccount {}, the record as {}: nothing was changed",
        shown(.build.as_ref()),
        shown(.acting.as_ref())
    )]
    AccountMismatch {
        build: Option<ServiceAccountRef>,
        acting: Option<ServiceAccountRef>,
    },
}

fn first_ten(lines: &[String]) -> String {
    lines
        .iter()
        .take(10)
        .cloned()
        .collect::<Vec<_>>()
        .join("; ")
}

fn shown(account: Option<&ServiceAccountRef>) -> String {
    account.map_or_else(
        || "the operator's own account".to_string(),
        ToString::to_string,
    )
}

/// The Nix store is world-readable: a plain Secret with values is refused
/// unless its package allows it (`allowPlaintextSecrets`). `kix build` and
/// `kix validate` ask it.
pub fn plaintext_secrets(build: &Build) -> Verdict<BuildRefusal> {
    let plain = build.plaintext_secrets();
    if plain.is_empty() {
        return Ok(());
    }
    let mut packages: Vec<String> = plain.iter().map(|o| o.package.clone()).collect();
    packages.dedup();
    Err(BuildRefusal::PlaintextSecrets {
        objects: plain.iter().map(|o| o.key.to_string()).collect(),
        packages,
    })
}

/// What an operator may apply (its least-privilege mode). Empty sets allow
/// all.
#[derive(Debug, Default, Clone)]
pub struct AllowList {
    pub namespaces: BTreeSet<String>,
    /// `Kind` for the core group, `Kind.group` otherwise.
    pub kinds: BTreeSet<String>,
}

/// Every object of the build is of an allowed kind, in an allowed
/// namespace (a Namespace is in itself; a cluster-scoped object is in none).
pub fn allow_list(build: &Build, allow: &AllowList) -> Verdict<BuildRefusal> {
    let outside: Vec<String> = build
        .objects()
        .filter_map(|object| outside_allow_list(&object.key, allow))
        .collect();
    if outside.is_empty() {
        Ok(())
    } else {
        Err(BuildRefusal::OutsideAllowList(outside))
    }
}

fn outside_allow_list(key: &ObjectKey, allow: &AllowList) -> Option<String> {
    let kind = key.group_kind().to_string();
    if !allow.kinds.is_empty() && !allow.kinds.contains(&kind) {
        return Some(format!("{key}: kind {kind} is not allowed"));
    }
    if allow.namespaces.is_empty() {
        return None;
    }
    let namespace = if key.group_kind() == group_kind::NAMESPACE {
        Some(&key.name)
    } else {
        key.namespace.as_ref()
    };
    match namespace {
        Some(ns) if allow.namespaces.contains(ns) => None,
        Some(ns) => Some(format!("{key}: namespace {ns} is not allowed")),
        None => Some(format!("{key}: cluster-scoped objects are not allowed")),
    }
}

/// Whom an operator acts as for a record: the account it names, else the
/// default; refused when none is named and one is required
/// (`--require-service-account`).
pub fn acting_account(
    named: Option<&ServiceAccountRef>,
    default: Option<&ServiceAccountRef>,
    required: bool,
) -> Result<Option<ServiceAccountRef>, BuildRefusal> {
    match (named, default) {
        (Some(account), _) => Ok(Some(account.clone())),
        (None, _) if required => Err(BuildRefusal::AccountRequired),
        (None, default) => Ok(default.cloned()),
    }
}

/// A build must act as the account acting for it: a record cannot borrow
/// another team's account by pointing at a build that names it. A build
/// that names none acts as whoever acts for it.
pub fn build_account(build: &Build, acting: Option<&ServiceAccountRef>) -> Verdict<BuildRefusal> {
    let declared = crate::plan_value::declared_account(&build.settings);
    if declared.is_none() || declared.as_ref() == acting {
        return Ok(());
    }
    Err(BuildRefusal::AccountMismatch {
        build: declared,
        acting: acting.cloned(),
    })
}

// ---------------------------------------------------------------- holds

/// Jobs of a Kix cluster that completed, by `<namespace>/<name>`, with the
/// digest they completed with.
pub type CompletedJobs = BTreeMap<String, String>;

/// The entry of a Job in [`CompletedJobs`].
pub fn completed_entry(key: &ObjectKey) -> String {
    format!(
        "{}/{}",
        key.namespace.as_deref().unwrap_or_default(),
        key.name
    )
}

/// The entry in [`CompletedJobs`] of a Job or a Helm hook of any other
/// kind that succeeded (its key).
pub fn run_entry(key: &ObjectKey) -> String {
    if key.group_kind() == group_kind::JOB {
        completed_entry(key)
    } else {
        key.to_string()
    }
}

/// Jobs run once per build: a Job that completed with this digest is held
/// (neither created again nor waited for). A changed Job runs again.
pub fn ran_once(completed: &CompletedJobs, key: &ObjectKey, digest: &str) -> bool {
    key.group_kind() == group_kind::JOB
        && completed
            .get(&completed_entry(key))
            .is_some_and(|d| d == digest)
}

#[cfg(test)]
mod tests {
    use kix_manifest::ObjectKey;

    use super::*;
    use crate::budget::BudgetCheck;
    use crate::plan_object::{Action, Counts, PackagePlan, PlanOptions, PlannedObject};
    use crate::plan_value::{CrdState, CrdUpgrade, Hazard, VersionHazard};

    fn key(kind: &str, name: &str) -> ObjectKey {
        ObjectKey {
            group: String::new(),
            kind: kind.into(),
            namespace: (kind != "Namespace").then(|| "web".to_string()),
            name: name.into(),
        }
    }

    fn object(kind: &str, name: &str, action: Action) -> PlannedObject {
        PlannedObject {
            key: key(kind, name),
            api_version: "v1".into(),
            package: "web".into(),
            action,
            changes: vec![],
            fields: vec![],
            destructive: false,
            note: None,
            hook: None,
            warnings: vec![],
            contenders: vec![],
            takes_with_it: None,
            deletion: None,
            activations: Default::default(),
            legacy: Default::default(),
        }
    }

    /// A plan of `objects` (the build's) and `prune`, its counts and
    /// budget made from them.
    fn plan(objects: Vec<PlannedObject>, prune: Vec<PlannedObject>) -> Plan {
        let mut counts = Counts::default();
        for o in objects.iter().chain(&prune) {
            match o.action {
                Action::Unchanged => counts.unchanged += 1,
                Action::Delete => counts.delete += 1,
                Action::Conflict => counts.conflict += 1,
                _ => counts.update += 1,
            }
        }
        let mut plan = Plan {
            cluster: "prod".into(),
            store_path: "/nix/store/0123456789abcdfghijklmnpqrsvwxyz-kix-prod".into(),
            current_activation: Some("prod-6".into()),
            current_path: None,
            current_phase: None,
            service_account: None,
            revision: None,
            activation: "prod-7".into(),
            kix_crds: CrdState::Current,
            packages: vec![PackagePlan {
                name: "web".into(),
                version: "1.0.0".into(),
                handoff: vec![],
                objects,
            }],
            prune,
            deletion_budget: BudgetCheck::of(None, &counts),
            counts,
            digest: String::new(),
            kinds: vec![],
            migrations: vec![],
            crd_upgrades: vec![],
            desired: vec![],
            options: PlanOptions::default(),
            labelled: false,
        };
        plan.digest = crate::seal::digest(&plan);
        plan
    }

    fn unchanged(n: usize) -> Vec<PlannedObject> {
        (0..n)
            .map(|i| object("ConfigMap", &format!("c{i}"), Action::Unchanged))
            .collect()
    }

    fn deletions(n: usize) -> Vec<PlannedObject> {
        (0..n)
            .map(|i| object("ConfigMap", &format!("gone{i}"), Action::Delete))
            .collect()
    }

    #[test]
    fn the_digest_of_an_unchanged_plan_is_pinned() {
        // Moving the plan's code must not change what a user confirmed.
        let mut shared = object("ConfigMap", "shared", Action::Keep);
        shared.note = Some(crate::plan_object::NOTE_SHARED.into());
        let mut replaced = object("Service", "web", Action::Replace);
        replaced.fields = vec!["spec.clusterIP".into()];
        let plan = plan(
            vec![object("Namespace", "web", Action::Unchanged), replaced],
            vec![object("ConfigMap", "old", Action::Delete), shared],
        );
        assert_eq!(
            plan.digest,
            "c6a410cb9817f79a72638fd98b228abb2e7fdefa3cf73af2104726110356b519"
        );
    }

    #[test]
    fn rights_refuses_each_object_the_account_may_not_write() {
        let forbidden = |kind: &str, name: &str, action: Action| {
            let mut o = object(kind, name, action);
            o.note = Some(format!(
                "{}: User \"system:serviceaccount:web:kix\" cannot patch resource \"{kind}\"",
                crate::plan_object::NOTE_NO_PERMISSION
            ));
            o
        };
        assert_eq!(rights(&plan(unchanged(2), vec![])), Ok(()));
        // Unchanged objects are not written: what the account may not do to
        // them does not matter.
        let plan_ = plan(
            vec![
                forbidden("ConfigMap", "a", Action::Update),
                forbidden("Secret", "b", Action::Unchanged),
                forbidden("Service", "c", Action::Create),
            ],
            vec![],
        );
        assert_eq!(
            rights(&plan_),
            Err(Refusal::NoPermission(vec![
                "ConfigMap web/a: User \"system:serviceaccount:web:kix\" cannot patch resource \"ConfigMap\"".into(),
                "Service web/c: User \"system:serviceaccount:web:kix\" cannot patch resource \"Service\"".into(),
            ]))
        );
        assert!(matches!(
            deploy(&plan_, 3, &Consents::default()),
            Err(Refusal::NoPermission(_))
        ));
    }

    #[test]
    fn current_activation_passes_only_the_named_record() {
        let plan = plan(unchanged(1), vec![]);
        assert_eq!(current_activation(&plan, None), Ok(()));
        assert_eq!(current_activation(&plan, Some("prod-6")), Ok(()));
        let refused = Refusal::NotCurrent {
            cluster: "prod".into(),
            expected: "prod-5".into(),
            found: "prod-6".into(),
        };
        assert_eq!(current_activation(&plan, Some("prod-5")), Err(refused));
        let mut first = plan.clone();
        first.current_activation = None;
        assert!(matches!(
            current_activation(&first, Some("prod-6")),
            Err(Refusal::NotCurrent { found, .. }) if found == "none"
        ));
    }

    #[test]
    fn conflicts_are_refused_unless_forced_and_never_against_another_kix_cluster_when_yielding() {
        let mut manager = object("ConfigMap", "a", Action::Conflict);
        manager.fields = vec!["data.x (kubectl)".into()];
        let mut cluster = object("ConfigMap", "b", Action::Conflict);
        cluster.fields = vec!["data.y (kix/apps)".into()];
        cluster.contenders = vec!["apps".into()];
        let plan = plan(vec![manager, cluster], vec![]);
        assert_eq!(
            conflicts(&plan, false, false),
            Err(Refusal::Conflicts(vec![
                "ConfigMap web/a (data.x (kubectl))".into(),
                "ConfigMap web/b (data.y (kix/apps))".into(),
            ]))
        );
        assert_eq!(conflicts(&plan, true, false), Ok(()));
        assert_eq!(
            conflicts(&plan, true, true),
            Err(Refusal::Conflicts(vec![
                "ConfigMap web/b (data.y (kix/apps))".into()
            ]))
        );
    }

    #[test]
    fn a_stored_crd_version_dropped_is_refused_and_one_not_served_needs_acceptance() {
        let crd = ObjectKey {
            group: "apiextensions.k8s.io".into(),
            kind: "CustomResourceDefinition".into(),
            namespace: None,
            name: "widgets.example.com".into(),
        };
        let upgrade = |hazard| CrdUpgrade {
            key: crd.clone(),
            stored_versions: vec!["v1alpha1".into(), "v1".into()],
            storage_version: Some("v1".into()),
            objects: Some(3),
            changes: vec![],
            destructive: vec![VersionHazard {
                version: "v1alpha1".into(),
                hazard,
            }],
        };
        let mut removed = plan(unchanged(1), vec![]);
        removed.crd_upgrades = vec![upgrade(Hazard::Removed)];
        let Err(Refusal::CrdStoredVersions(why)) = crd_stored_versions(&removed) else {
            panic!("a stored version removed passes");
        };
        assert!(
            why[0].contains("the build removes version v1alpha1"),
            "{why:?}"
        );
        let mut not_served = plan(unchanged(1), vec![]);
        not_served.crd_upgrades = vec![upgrade(Hazard::NotServed)];
        assert_eq!(crd_stored_versions(&not_served), Ok(()));
        assert_eq!(
            destructive(&not_served, false),
            Err(Refusal::NeedsAcceptance(vec![
                "stop serving stored version v1alpha1 of CustomResourceDefinition.apiextensions.k8s.io/widgets.example.com (destructive: 3 widgets.example.com objects exist, stored versions v1alpha1, v1)".into()
            ]))
        );
        assert_eq!(destructive(&not_served, true), Ok(()));
    }

    #[test]
    fn replaces_adoptions_and_destructive_deletions_need_acceptance() {
        let mut namespace = object("Namespace", "old", Action::Delete);
        namespace.destructive = true;
        namespace.takes_with_it = Some(4);
        let plan = plan(
            vec![
                object("ConfigMap", "adopted", Action::Adopt),
                object("ConfigMap", "fine", Action::Update),
            ],
            vec![namespace, object("ConfigMap", "gone", Action::Delete)],
        );
        assert_eq!(
            destructive(&plan, false),
            Err(Refusal::NeedsAcceptance(vec![
                "adopt ConfigMap web/adopted".into(),
                "delete Namespace/old (destructive: takes 4 objects with it)".into(),
            ]))
        );
        assert_eq!(destructive(&plan, true), Ok(()));
    }

    #[test]
    fn an_empty_build_prunes_everything_only_when_allowed() {
        let plan = plan(vec![], deletions(3));
        let refused = Err(Refusal::EmptyBuild {
            cluster: "prod".into(),
        });
        assert_eq!(empty_build(&plan, 0, true, false), refused);
        assert_eq!(empty_build(&plan, 0, true, true), Ok(()));
        assert_eq!(empty_build(&plan, 0, false, false), Ok(()));
        assert_eq!(empty_build(&plan, 1, true, false), Ok(()));
    }

    #[test]
    fn deletions_beyond_the_budget_need_consent_naming_enough() {
        // 39 of 40 owned: the default budget allows 10.
        let check = BudgetCheck::new(None, 39, 40);
        assert_eq!(
            deletion_budget(&check, DeletionConsent::Budget),
            Err(Refusal::DeletionBudget(check))
        );
        assert!(deletion_budget(&check, DeletionConsent::UpTo(38)).is_err());
        assert_eq!(deletion_budget(&check, DeletionConsent::UpTo(39)), Ok(()));
        assert_eq!(deletion_budget(&check, DeletionConsent::Any), Ok(()));
        let within = BudgetCheck::new(None, 10, 12);
        assert_eq!(deletion_budget(&within, DeletionConsent::Budget), Ok(()));
        let message = Refusal::DeletionBudget(check).into_error().to_string();
        assert!(message.contains("--max-deletions 39"), "{message}");
    }

    #[test]
    fn a_deploy_asks_every_gate_in_order_and_the_budget_only_when_it_prunes() {
        let mut over = unchanged(1);
        over.push(object("ConfigMap", "x", Action::Conflict));
        let plan_over = plan(over, deletions(39));
        let consents = Consents {
            prune: true,
            ..Consents::default()
        };
        // The conflict is asked before the budget.
        assert!(matches!(
            deploy(&plan_over, 2, &consents),
            Err(Refusal::Conflicts(_))
        ));
        let forced = Consents {
            force_conflicts: true,
            ..consents.clone()
        };
        assert!(matches!(
            deploy(&plan_over, 2, &forced),
            Err(Refusal::DeletionBudget(_))
        ));
        let no_prune = Consents {
            prune: false,
            ..forced.clone()
        };
        assert_eq!(deploy(&plan_over, 2, &no_prune), Ok(()));
        let consented = Consents {
            deletions: DeletionConsent::Any,
            ..forced
        };
        assert_eq!(deploy(&plan_over, 2, &consented), Ok(()));
    }

    #[test]
    fn a_record_accepts_only_the_destructive_actions_it_lists() {
        let plan = plan(unchanged(1), deletions(2));
        let accepted = Destructive::of(&plan).accepted();
        assert_eq!(confirmed(&accepted, &plan), Ok(()));
        let fewer = self::plan(unchanged(1), deletions(1));
        assert_eq!(confirmed(&accepted, &fewer), Ok(()));
        let more = self::plan(unchanged(1), deletions(3));
        let err = confirmed(&accepted, &more).expect_err("a third deletion");
        assert_eq!(err.actions, ["delete ConfigMap web/gone2"]);
        assert!(confirmed(&Accepted::default(), &plan).is_err());
    }

    #[test]
    fn a_saved_plan_runs_only_with_its_digest() {
        let plan = plan(unchanged(1), vec![]);
        assert_eq!(saved_plan(&plan.digest, &plan, Vec::new), Ok(()));
        let moved = saved_plan("0000", &plan, || vec!["+ create ConfigMap web/x".into()])
            .expect_err("another digest");
        assert_eq!(moved.saved, "0000");
        assert_eq!(moved.now, plan.digest);
        assert!(
            moved.to_string().contains("+ create ConfigMap web/x"),
            "{moved}"
        );
    }

    // ------------------------------------------------------------ the build

    fn build_of(objects: Vec<(&str, serde_json::Value)>, plain_allowed: bool) -> Build {
        let objects = objects
            .into_iter()
            .map(|(package, manifest)| {
                let key = ObjectKey::from_manifest(&manifest).expect("a key");
                let text = manifest.to_string();
                kix_manifest::Object::new(key, &manifest, text, "x.yaml".into(), 0, package.into())
            })
            .collect::<Vec<_>>();
        let mut packages: Vec<kix_manifest::Package> = Vec::new();
        for object in objects {
            match packages.iter_mut().find(|p| p.name == object.package) {
                Some(p) => p.objects.push(object),
                None => packages.push(kix_manifest::Package {
                    name: object.package.clone(),
                    version: "1.0.0".into(),
                    depends_on: vec![],
                    namespace: Some("web".into()),
                    migrations: vec![],
                    handoff: vec![],
                    tests: vec![],
                    objects: vec![object],
                }),
            }
        }
        let allowed = packages
            .iter()
            .filter(|_| plain_allowed)
            .map(|p| p.name.clone())
            .collect();
        Build {
            root: "/nix/store/x".into(),
            cluster: "prod".into(),
            format: 1,
            settings: Default::default(),
            revision: None,
            health: Vec::new(),
            dropped: Vec::new(),
            packages,
            secrets: Vec::new(),
            plaintext_secrets_allowed: allowed,
            secrets_decrypted: false,
            secret_digest_keys: Default::default(),
            sources: Default::default(),
        }
    }

    fn manifest(kind: &str, namespace: Option<&str>, name: &str) -> serde_json::Value {
        let (api_version, kind) = kind.rsplit_once('/').unwrap_or(("v1", kind));
        let mut m = serde_json::json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}});
        if let Some(ns) = namespace {
            m["metadata"]["namespace"] = ns.into();
        }
        m
    }

    #[test]
    fn a_plain_secret_with_values_is_refused_unless_its_package_allows_it() {
        let mut secret = manifest("Secret", Some("web"), "db");
        secret["stringData"] = serde_json::json!({"password": "hunter2"});
        let mut token = manifest("Secret", Some("web"), "token");
        token["type"] = "kubernetes.io/service-account-token".into();
        let mut config = manifest("ConfigMap", Some("web"), "db");
        config["data"] = serde_json::json!({"password": "not a secret"});
        let objects = vec![("web", secret), ("web", token), ("api", config)];
        let refusal = plaintext_secrets(&build_of(objects.clone(), false)).expect_err("refused");
        assert_eq!(
            refusal,
            BuildRefusal::PlaintextSecrets {
                objects: vec!["Secret web/db".into()],
                packages: vec!["web".into()]
            }
        );
        let text = refusal.to_string();
        assert!(text.contains("(Secret web/db)"), "{text}");
        assert!(text.contains("on package web for a test"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
        assert_eq!(plaintext_secrets(&build_of(objects, true)), Ok(()));
    }

    #[test]
    fn the_allow_list_names_each_object_outside_it() {
        let build = build_of(
            vec![
                ("web", manifest("ConfigMap", Some("web"), "ok")),
                ("web", manifest("ConfigMap", Some("other"), "elsewhere")),
                ("web", manifest("Namespace", None, "web")),
                ("web", manifest("Namespace", None, "other")),
                ("web", manifest("apps/v1/Deployment", Some("web"), "api")),
                (
                    "web",
                    manifest("rbac.authorization.k8s.io/v1/ClusterRole", None, "admin"),
                ),
            ],
            false,
        );
        assert_eq!(allow_list(&build, &AllowList::default()), Ok(()));
        let allow = AllowList {
            namespaces: ["web".to_string()].into(),
            kinds: [
                "ConfigMap",
                "Namespace",
                "ClusterRole.rbac.authorization.k8s.io",
            ]
            .map(String::from)
            .into(),
        };
        let refusal = allow_list(&build, &allow).expect_err("outside");
        assert_eq!(
            refusal,
            BuildRefusal::OutsideAllowList(vec![
                "ConfigMap other/elsewhere: namespace other is not allowed".into(),
                "Namespace/other: namespace other is not allowed".into(),
                "Deployment.apps web/api: kind Deployment.apps is not allowed".into(),
                "ClusterRole.rbac.authorization.k8s.io/admin: cluster-scoped objects are not allowed"
                    .into(),
            ])
        );
        assert!(
            refusal
                .to_string()
                .starts_with("the build is outside this operator's allow-list: ConfigMap other/"),
            "{refusal}"
        );
        // However many there are, the message names ten.
        let many = BuildRefusal::OutsideAllowList((0..25).map(|i| format!("<{i}>")).collect());
        let text = many.to_string();
        assert!(text.ends_with("<8>; <9>"), "{text}");
        assert_eq!(text.matches('<').count(), 10, "{text}");
    }

    fn account(text: &str) -> ServiceAccountRef {
        ServiceAccountRef::parse(text).expect("an account")
    }

    #[test]
    fn a_record_acts_as_its_account_else_the_default_else_is_refused_when_one_is_required() {
        let (a, default) = (account("a/kix"), account("kix-system/tenant"));
        assert_eq!(acting_account(Some(&a), None, false), Ok(Some(a.clone())));
        assert_eq!(acting_account(None, None, false), Ok(None));
        assert_eq!(
            acting_account(None, Some(&default), false),
            Ok(Some(default.clone()))
        );
        assert_eq!(
            acting_account(Some(&a), Some(&default), true),
            Ok(Some(a.clone()))
        );
        let refused = acting_account(None, Some(&default), true).expect_err("required");
        assert_eq!(refused, BuildRefusal::AccountRequired);
        assert!(
            refused.to_string().contains("--require-service-account"),
            "{refused}"
        );
    }

    #[test]
    fn a_build_acts_only_as_the_account_acting_for_it() {
        let mut build = build_of(vec![], false);
        let (a, b) = (account("a/kix"), account("b/kix"));
        assert_eq!(build_account(&build, None), Ok(()));
        assert_eq!(build_account(&build, Some(&a)), Ok(()));
        build.settings.service_account = Some(kix_manifest::ServiceAccount {
            namespace: "a".into(),
            name: "kix".into(),
        });
        assert_eq!(build_account(&build, Some(&a)), Ok(()));
        let refused = build_account(&build, Some(&b)).expect_err("another account");
        assert_eq!(
            refused.to_string(),
            "the build acts as ServiceAccount a/kix, the record as b/kix: nothing was changed"
        );
        let refused = build_account(&build, None).expect_err("the operator's own");
        assert!(
            refused
                .to_string()
                .contains("the record as the operator's own account"),
            "{refused}"
        );
    }

    #[test]
    fn a_host_accepts_line_by_line_by_whole_words() {
        let needed = || {
            vec![
                "migration web 1.0.0 -> 2.0.0: recreate Deployment web/api".to_string(),
                "adopt ConfigMap apps/legacy".to_string(),
                "delete Namespace/old (destructive)".to_string(),
            ]
        };
        let accepted = ["migration web", "adopt ConfigMap apps/leg"].map(String::from);
        assert_eq!(
            lines_accepted(needed(), &accepted),
            Err(Refusal::NeedsAcceptance(vec![
                "adopt ConfigMap apps/legacy".into(),
                "delete Namespace/old (destructive)".into()
            ]))
        );
        let all = [
            "migration web",
            "adopt ConfigMap apps/legacy",
            "delete Namespace/old",
        ]
        .map(String::from);
        assert_eq!(lines_accepted(needed(), &all), Ok(()));
        // An empty entry accepts nothing.
        assert!(lines_accepted(needed(), &[" ".to_string()]).is_err());
        // On a plan: its destructive deletions are what a host must name.
        let plan = plan(unchanged(1), vec![]);
        assert_eq!(accepted_by_host(&plan, &[]), Ok(()));
    }

    // ------------------------------------------------------------ holds

    #[test]
    fn a_job_that_completed_with_its_digest_is_held() {
        let job = |name: &str| ObjectKey {
            group: "batch".into(),
            kind: "Job".into(),
            namespace: Some("web".into()),
            name: name.into(),
        };
        let completed = CompletedJobs::from([("web/create".to_owned(), "d1".to_owned())]);
        assert!(ran_once(&completed, &job("create"), "d1"));
        assert!(
            !ran_once(&completed, &job("create"), "d2"),
            "a changed Job runs again"
        );
        assert!(!ran_once(&completed, &job("patch"), "d1"));
        let mut config_map = job("create");
        config_map.group = String::new();
        config_map.kind = "ConfigMap".into();
        assert!(!ran_once(&completed, &config_map, "d1"));
    }
}

//! The gates: every rule that may refuse or hold a change, each a function
//! of plan values and the consents given, returning a typed verdict.
//!
//! Every executor asks these functions (the CLI's deploy, rollback and gc,
//! the operator); none re-implements a rule. A new rule (plaintext Secrets,
//! a tenant's rights, a run-once Job, a fleet's budget) is a new function
//! here, with its verdicts tested on values below. Pure: no client, no I/O.

use kix_api::Accepted;

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
}

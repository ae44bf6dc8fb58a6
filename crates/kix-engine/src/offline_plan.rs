//! A plan of one build against another, with no cluster: `kix plan
//! CLUSTER --against STORE-PATH`. The `--against` build's objects stand for
//! what is live, as kix would have applied them (its labels, digest and
//! activations annotation), so the plan is what `kix plan` shows against a
//! cluster that runs that build undrifted: the same [`Plan`] value, digest
//! and JSON.
//!
//! Kinds are resolved without an apiserver ([`offline_client`]): the
//! built-in cluster-scoped kinds, the CRDs of the `--against` build (served:
//! it installed them), the CRDs of the new build alone (not served yet, as
//! against the cluster); any other kind is taken as namespaced and served.
//!
//! Helm's hooks are planned as a live plan plans them ([`crate::hooks`]):
//! every package of the `--against` build counts as installed and its
//! `install`/`upgrade` hooks as run for their content (a hook with
//! `hook-succeeded` as gone); a dropped hook is kept, never pruned; the
//! delete hooks of a package the new build drops come from the `--against`
//! build ([`crate::delete_hooks`]).
//!
//! What only a live cluster can tell is not in it: objects that exist
//! without kix's ownership (a create is not shown as an adoption), fields
//! another manager took (conflicts), immutable fields (an update the
//! apiserver would refuse to make in place is shown as an update), what a
//! CRD's stored versions forbid, and how many objects a Namespace or CRD
//! deletion takes with it.

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::sync::Arc;

use k8s_openapi::{ClusterResourceScope, Resource as K8sResource};
use kix_api::{Activation, PackageInstance, PackageInstanceSpec, PackagePhase, Phase};
use kix_manifest::{Build, GroupVersionKind, KeyMap, ObjectKey, group_kind};
use kube::Client;
use serde_json::{Value, json};

use crate::desired::{Desired, Shapes, desired_objects};
use crate::diff::{Redaction, diff};
use crate::error::Result;
use crate::plan::{Action, PlanOptions, PlannedObject, applied_manifest, by_package, count};
use crate::plan_object::{Legacy, NOTE_HELM_HOOK, NOTE_HELM_KEEP, NOTE_PRUNE_DISABLED};
use crate::plan_value::{CrdState, Plan};
use crate::resources::{Resources, split_api_version};

/// The build a plan is made against: what stands for the live cluster.
#[derive(Debug, Clone)]
pub struct Against<'a> {
    pub build: &'a Build,
    pub store_path: &'a str,
    /// Its Activation, when known (`--against current`): the plan's
    /// current activation, and the next record's name after it.
    pub activation: Option<String>,
    pub phase: Option<Phase>,
}

/// Plans `build` (read from `store_path`) against `against`, offline.
pub async fn plan_against(
    build: &Build,
    store_path: &str,
    against: &Against<'_>,
    options: &PlanOptions,
) -> Result<Plan> {
    let client = offline_client(build, against.build);
    let mut resources = Resources::new(client.clone());
    let live = desired_objects(against.build, &mut resources, Shapes::Skipped).await?;
    let completed = ran_hooks(&live);
    // Hooks that ran and removed themselves are not live.
    let live: Vec<Desired> = live.into_iter().filter(stays_live).collect();
    let mut desired = desired_objects(build, &mut Resources::new(client), Shapes::Skipped).await?;
    let cluster = build.cluster.clone();
    let activation = options
        .activation
        .clone()
        .unwrap_or_else(|| next_activation(&cluster, against.activation.as_deref()));
    let previous: BTreeSet<String> = against.activation.iter().cloned().collect();
    let live_by_key: KeyMap<&ObjectKey, &Desired> = live.iter().map(|d| (&d.key, d)).collect();
    let objects: Vec<PlannedObject> = desired
        .iter()
        .map(|d| compare(d, live_by_key.get(&d.key).copied(), &previous, &activation))
        .collect();
    let mut packages = by_package(build, objects);
    let migrations = crate::migrations::crossed(build, &installed_records(against, &cluster));
    let mine = |a: &str| previous.contains(a) || a == activation;
    crate::migrations::mark_objects(&mut packages, &migrations, &activation, mine);
    let hooks = Hooks {
        against,
        activation: &activation,
        mine: &mine,
        completed: &completed,
    };
    hooks
        .mark(build, &mut desired, &mut packages, &mut resources)
        .await?;
    let prune = if options.prune {
        dropped(&desired, &live, &previous)
    } else {
        Vec::new()
    };
    let counts = count(packages.iter().flat_map(|p| &p.objects).chain(&prune));
    let deletion_budget = crate::budget::BudgetCheck::of(build.settings.deletion_budget, &counts);
    let mut plan = Plan {
        store_path: store_path.to_string(),
        current_activation: against.activation.clone(),
        current_path: Some(against.store_path.to_string()),
        current_phase: against.phase,
        service_account: crate::plan_value::declared_account(&build.settings),
        revision: build.revision.clone(),
        kix_crds: CrdState::Current,
        counts,
        packages,
        prune,
        digest: String::new(),
        kinds: kinds_of(&desired),
        deletion_budget,
        migrations,
        crd_upgrades: vec![],
        desired,
        options: options.clone(),
        labelled: true,
        cluster,
        activation,
    };
    plan.digest = crate::seal::digest(&plan);
    crate::drop_later(live);
    Ok(plan)
}

/// Whether an object of the `--against` build is live once that build was
/// deployed: every object but a Helm hook a deploy did not run (delete
/// hooks) or removed once it succeeded (`hook-succeeded`). That a deploy
/// of it ran a hook is assumed for every `install` and `upgrade` hook (the
/// record that says which ran is not read).
fn stays_live(d: &Desired) -> bool {
    let Some(hook) = d.hook.as_deref() else {
        return true;
    };
    ran_by_a_deploy(hook)
        && !hook
            .delete
            .contains(&kix_manifest::helm::DeletePolicy::HookSucceeded)
}

fn ran_by_a_deploy(hook: &kix_manifest::helm::Hook) -> bool {
    crate::hooks::event_for(hook, true).is_some() || crate::hooks::event_for(hook, false).is_some()
}

/// The hooks of the `--against` build that its deploy ran, with their
/// content, as the record remembers them.
fn ran_hooks(against: &[Desired]) -> crate::gates::CompletedJobs {
    against
        .iter()
        .filter(|d| d.hook.as_deref().is_some_and(ran_by_a_deploy))
        .map(|d| (crate::hooks::entry(&d.key), d.digest.clone()))
        .collect()
}

/// The Helm hooks of an offline plan, decided as a live plan decides them
/// ([`crate::hooks`], [`crate::delete_hooks`]).
struct Hooks<'a> {
    against: &'a Against<'a>,
    activation: &'a str,
    mine: &'a dyn Fn(&str) -> bool,
    /// The hooks its deploy ran ([`ran_hooks`]).
    completed: &'a crate::gates::CompletedJobs,
}

impl Hooks<'_> {
    /// Marks the hooks of `build` (every package of the `--against` build
    /// installed, its hooks run), and adds the delete hooks of the packages
    /// `build` drops, from the `--against` build.
    async fn mark(
        &self,
        build: &Build,
        desired: &mut Vec<Desired>,
        packages: &mut Vec<crate::plan_object::PackagePlan>,
        resources: &mut Resources,
    ) -> Result<()> {
        let installed: BTreeSet<String> = self
            .against
            .build
            .packages
            .iter()
            .map(|p| p.name.clone())
            .collect();
        let context = crate::hooks::Context {
            installed: &installed,
            completed: self.completed,
            only: None,
            activation: self.activation,
            mine: self.mine,
        };
        crate::hooks::mark(packages, desired, &context);
        let cluster = &build.cluster;
        let dropped =
            crate::delete_hooks::dropped(build, &installed_records(self.against, cluster));
        for (package, version) in dropped {
            let hooks =
                crate::delete_hooks::hooks_in(self.against.build, &package, resources).await?;
            if hooks.is_empty() {
                continue;
            }
            let removed = crate::delete_hooks::Removed {
                package,
                version,
                hooks,
            };
            packages.push(crate::delete_hooks::planned(&removed, self.activation));
            desired.extend(removed.hooks);
        }
        Ok(())
    }
}

/// `<cluster>-<n+1>` after `current` (`<cluster>-<n>`); `<cluster>-next`
/// when the current record is not known.
fn next_activation(cluster: &str, current: Option<&str>) -> String {
    match current.and_then(|name| Activation::sequence_in(name, cluster)) {
        Some(n) => Activation::name_for(cluster, n + 1),
        None => format!("{cluster}-next"),
    }
}

/// One object of the new build against the same object of the old one.
fn compare(
    d: &Desired,
    live: Option<&Desired>,
    previous: &BTreeSet<String>,
    activation: &str,
) -> PlannedObject {
    let (action, activations, changes) = match live {
        Some(l) if l.digest == d.digest => (Action::Unchanged, previous.clone(), vec![]),
        Some(l) => {
            let next = BTreeSet::from([activation.to_string()]);
            let old = applied_manifest(l, previous);
            let new = applied_manifest(d, &next);
            let redaction = Redaction {
                secret: d.key.group_kind() == group_kind::SECRET,
                decrypted: d.decrypted.as_deref(),
            };
            let mut changes = diff(&old, &new, redaction);
            changes.retain(|c| !crate::ownership::is_handed_off(&c.path, &d.handed_off));
            (Action::Update, next, changes)
        }
        None => (
            Action::Create,
            BTreeSet::from([activation.to_string()]),
            vec![],
        ),
    };
    PlannedObject {
        key: d.key.clone(),
        api_version: d.api_version.clone(),
        package: d.package.clone(),
        action,
        changes,
        fields: vec![],
        destructive: false,
        note: None,
        hook: None,
        warnings: vec![],
        contenders: vec![],
        takes_with_it: None,
        deletion: None,
        activations,
        legacy: Legacy::None,
    }
}

/// The objects of the old build the new one no longer has, in prune order:
/// deleted, or kept when annotated so.
fn dropped(
    desired: &[Desired],
    live: &[Desired],
    previous: &BTreeSet<String>,
) -> Vec<PlannedObject> {
    let wanted: BTreeSet<&ObjectKey> = desired.iter().map(|d| &d.key).collect();
    let mut gone: Vec<&Desired> = live.iter().filter(|l| !wanted.contains(&l.key)).collect();
    gone.sort_by(|a, b| crate::order::prune_order(&a.key, &b.key));
    gone.into_iter()
        .map(|l| {
            let keep = kept(l);
            let action = if keep.is_some() {
                Action::Keep
            } else {
                Action::Delete
            };
            PlannedObject {
                key: l.key.clone(),
                api_version: l.api_version.clone(),
                package: l.package.clone(),
                action,
                changes: vec![],
                fields: vec![],
                destructive: action == Action::Delete && crate::plan::is_destructive(&l.key),
                note: keep.map(str::to_string),
                hook: None,
                warnings: vec![],
                contenders: vec![],
                takes_with_it: None,
                deletion: None,
                activations: previous.clone(),
                legacy: Legacy::None,
            }
        })
        .collect()
}

/// Why prune keeps an object whatever the build says, from its annotations.
fn kept(l: &Desired) -> Option<&'static str> {
    let manifest = l.manifest();
    let annotation = |key: &str| manifest["metadata"]["annotations"][key].as_str();
    if annotation(kix_api::ANNOTATION_PRUNE) == Some(kix_api::PRUNE_DISABLED) {
        Some(NOTE_PRUNE_DISABLED)
    } else if kix_manifest::helm::keeps(annotation(kix_manifest::helm::RESOURCE_POLICY)) {
        Some(NOTE_HELM_KEEP)
    } else if l.hook.is_some() {
        Some(NOTE_HELM_HOOK)
    } else {
        None
    }
}

/// The packages of the old build, installed: what migrations are crossed
/// from.
fn installed_records(against: &Against<'_>, cluster: &str) -> Vec<PackageInstance> {
    let activation = against.activation.clone().unwrap_or_default();
    against
        .build
        .packages
        .iter()
        .map(|p| {
            let mut instance = PackageInstance::new_record(PackageInstanceSpec {
                cluster: cluster.to_string(),
                package: p.name.clone(),
                version: p.version.clone(),
                activation: activation.clone(),
            });
            instance.status = Some(kix_api::PackageInstanceStatus {
                phase: Some(PackagePhase::Ready),
                ..Default::default()
            });
            instance
        })
        .collect()
}

/// The kinds of the build (apiVersion/Kind), as a live plan records them.
fn kinds_of(desired: &[Desired]) -> Vec<String> {
    desired
        .iter()
        .map(|d| GroupVersionKind::new(&d.api_version, &d.key.kind).to_string())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// The built-in kinds that are cluster-scoped (checked against
/// k8s-openapi's types: each must be cluster-scoped there); every other
/// built-in kind is namespaced.
fn cluster_scoped_builtin() -> &'static BTreeSet<(&'static str, &'static str)> {
    use k8s_openapi::api::{
        admissionregistration, certificates, core, flowcontrol, networking, node, rbac, scheduling,
        storage,
    };
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions;
    use k8s_openapi::kube_aggregator::pkg::apis::apiregistration;
    fn entry<T: K8sResource<Scope = ClusterResourceScope>>() -> (&'static str, &'static str) {
        (T::GROUP, T::KIND)
    }
    static KINDS: std::sync::OnceLock<BTreeSet<(&'static str, &'static str)>> =
        std::sync::OnceLock::new();
    KINDS.get_or_init(|| {
        BTreeSet::from([
            entry::<core::v1::Namespace>(),
            entry::<core::v1::Node>(),
            entry::<core::v1::PersistentVolume>(),
            entry::<core::v1::ComponentStatus>(),
            entry::<rbac::v1::ClusterRole>(),
            entry::<rbac::v1::ClusterRoleBinding>(),
            entry::<apiextensions::v1::CustomResourceDefinition>(),
            entry::<apiregistration::v1::APIService>(),
            entry::<storage::v1::StorageClass>(),
            entry::<storage::v1::CSIDriver>(),
            entry::<storage::v1::CSINode>(),
            entry::<storage::v1::VolumeAttachment>(),
            entry::<scheduling::v1::PriorityClass>(),
            entry::<node::v1::RuntimeClass>(),
            entry::<admissionregistration::v1::MutatingWebhookConfiguration>(),
            entry::<admissionregistration::v1::ValidatingWebhookConfiguration>(),
            entry::<admissionregistration::v1::ValidatingAdmissionPolicy>(),
            entry::<admissionregistration::v1::ValidatingAdmissionPolicyBinding>(),
            entry::<certificates::v1::CertificateSigningRequest>(),
            entry::<networking::v1::IngressClass>(),
            entry::<flowcontrol::v1::FlowSchema>(),
            entry::<flowcontrol::v1::PriorityLevelConfiguration>(),
        ])
    })
}

/// What discovery says of the kinds of both builds, by apiVersion: an
/// `APIResourceList` each.
fn discovery(build: &Build, against: &Build) -> BTreeMap<String, Value> {
    // The CRDs `against` installed: (group, kind) → (versions, plural, namespaced).
    let mut crds: BTreeMap<(String, String), (Vec<String>, String, bool)> = BTreeMap::new();
    let mut new_crds: BTreeSet<(String, String)> = BTreeSet::new();
    for (source, installed) in [(against, true), (build, false)] {
        for object in source.objects() {
            if object.key.group_kind() != group_kind::CUSTOM_RESOURCE_DEFINITION {
                continue;
            }
            let manifest = object.manifest();
            let spec = &manifest["spec"];
            let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
            let key = (text(&spec["group"]), text(&spec["names"]["kind"]));
            if !installed {
                new_crds.insert(key);
                continue;
            }
            let versions = spec["versions"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|v| text(&v["name"]))
                .collect();
            let namespaced = spec["scope"].as_str() != Some("Cluster");
            crds.insert(key, (versions, text(&spec["names"]["plural"]), namespaced));
        }
    }
    let mut lists: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    let kinds: BTreeSet<(String, String)> = build
        .objects()
        .chain(against.objects())
        .map(|o| (o.api_version.clone(), o.key.kind.clone()))
        .collect();
    for (api_version, kind) in kinds {
        let (group, version) = split_api_version(&api_version);
        let key = (group.to_string(), kind.clone());
        let (plural, namespaced) = match crds.get(&key) {
            Some((versions, plural, namespaced)) if versions.iter().any(|v| v == version) => {
                (plural.clone(), *namespaced)
            }
            // Defined by the new build's CRD alone: not served before it.
            _ if new_crds.contains(&key) => continue,
            _ => (
                format!("{}s", kind.to_lowercase()),
                !cluster_scoped_builtin().contains(&(group, kind.as_str())),
            ),
        };
        lists.entry(api_version.clone()).or_default().push(json!({
            "name": plural, "singularName": kind.to_lowercase(), "namespaced": namespaced,
            "kind": kind, "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        }));
    }
    lists
        .into_iter()
        .map(|(gv, resources)| {
            let list = json!({"kind": "APIResourceList", "apiVersion": "v1",
                              "groupVersion": gv, "resources": resources});
            (gv, list)
        })
        .collect()
}

/// A client that talks to no apiserver: it answers discovery of the kinds
/// of both builds ([`discovery`]) and 404 to anything else, so the engine's
/// kind resolution works offline. Nothing else is asked of it.
fn offline_client(build: &Build, against: &Build) -> Client {
    let lists = Arc::new(discovery(build, against));
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let path = request.uri().path();
        let gv = path
            .strip_prefix("/apis/")
            .or_else(|| path.strip_prefix("/api/"))
            .unwrap_or_default();
        let found = lists.get(gv);
        let (status, body) = match found {
            Some(list) => (200, list.to_string()),
            None => (
                404,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                       "reason": "NotFound", "code": 404,
                       "message": format!("{path}: kix plan --against reads no cluster")})
                .to_string(),
            ),
        };
        let response = http::Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(kube::client::Body::from(body.into_bytes()))
            .map_err(|err| err.to_string());
        async move {
            Ok::<_, Infallible>(response.unwrap_or_else(|err| {
                http::Response::new(kube::client::Body::from(err.into_bytes()))
            }))
        }
    });
    Client::new(service, "default")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_record_follows_the_current_one() {
        assert_eq!(next_activation("prod", Some("prod-7")), "prod-8");
        assert_eq!(next_activation("prod", None), "prod-next");
    }

    #[test]
    fn cluster_scoped_builtins_are_known() {
        let kinds = cluster_scoped_builtin();
        assert!(kinds.contains(&("", "Namespace")));
        assert!(kinds.contains(&("rbac.authorization.k8s.io", "ClusterRole")));
        assert!(!kinds.contains(&("", "ConfigMap")));
    }
}

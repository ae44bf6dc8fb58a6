//! Package migrations: which ones a deploy crosses, how the plan shows them,
//! and running their actions; and the replaces forced by immutable fields.
//!
//! # Which migrations a deploy crosses
//!
//! A package declares migrations `{from, to, description, actions}` in its
//! `package.json`. `from` is a version or a small range (see
//! [`kix_manifest::VersionRange`]: `1.2.0` means `>=1.2.0`, `>=1.0.0 <2.0.0`,
//! `1.x`, `*`); a migration covers its `from` range below its `to`, so
//! `1.0.0 -> 2.0.0` covers `[1.0.0, 2.0.0)` and `2.0.0 -> 3.0.0` chains after
//! it.
//!
//! The installed version `I` of a package is the version its PackageInstance
//! records (once the package was installed: see
//! [`crate::packages::installed_version`]). A deploy of the build's version
//! `N` crosses a migration when the package moves *up across* it:
//!
//! - `I < to <= N`, and
//! - the migration's range has a version at or above `I` (the package passes
//!   through `from` on its way to `to`).
//!
//! Crossed migrations run in ascending `to` order (1 → 2 before 2 → 3). A
//! first install (no installed version), the same version and a downgrade
//! (a rollback) cross none.
//!
//! # Actions
//!
//! Before a package's objects are applied, its crossed migrations' actions
//! run in order ([`run_group`]):
//!
//! - `recreate`: delete the object (foreground), wait until it is gone
//!   (bounded by the deploy timeout); the package's apply then creates it. The
//!   plan shows the object as `replace`.
//! - `delete`: delete the object (background) and wait until it is gone. An
//!   object the build still has is created again by the apply (shown as
//!   `replace`); one it does not have stays deleted.
//! - `adopt`: take ownership of an existing object kix does not own without
//!   changing it first: a merge patch that only adds kix's ownership labels and
//!   the activations annotation (not the digest, so the apply that follows
//!   still writes the build's content), then the package's forced
//!   server-side apply.
//!
//! Actions on CustomResourceDefinitions and Namespaces of the build run before
//! the CRD and Namespace groups (which are applied before every package).
//!
//! Every crossed migration needs `--accept-migrations`
//! ([`acceptance`] lines join [`crate::plan_value::Plan::needs_acceptance`]).

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;
use std::time::Instant;

use kix_api::{
    ANNOTATION_ACTIVATIONS, LABEL_MANAGED_BY, LABEL_OWNER, LABEL_PACKAGE, MANAGED_BY_VALUE,
    PackageInstance, owner_value,
};
use kix_manifest::{
    ActionKind, Build, MigrationAction, MigrationRef, ObjectKey, Package, VersionRange,
    compare_versions, group_of, is_well_known_cluster_scoped,
};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PropagationPolicy};
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use tracing::info;

use crate::changes::{ChangeSet, Migrated};
use crate::desired::DEFAULT_NAMESPACE;
use crate::order::Group;
use crate::plan_object::{Action, PackagePlan};
use crate::plan_value::Plan;
use crate::resources::{Resources, Served};

pub use crate::plan_value::PlannedMigration;

// ---------------------------------------------------------------- selection

/// The migrations a deploy of `build` crosses, given the cluster's
/// PackageInstance records: per package in apply order, each package's in
/// ascending `to` order.
pub fn crossed(build: &Build, instances: &[PackageInstance]) -> Vec<PlannedMigration> {
    let installed: BTreeMap<&str, &str> = instances
        .iter()
        .filter_map(|pi| {
            Some((
                pi.spec.package.as_str(),
                crate::packages::installed_version(pi)?,
            ))
        })
        .collect();
    build
        .packages
        .iter()
        .flat_map(|p| match installed.get(p.name.as_str()) {
            Some(version) => select(p, version),
            None => vec![],
        })
        .collect()
}

/// The migrations of `package` that moving from `installed` to the package's
/// version crosses, in order.
pub fn select(package: &Package, installed: &str) -> Vec<PlannedMigration> {
    if compare_versions(installed, &package.version) != Ordering::Less {
        return vec![];
    }
    let from_installed = VersionRange::at_least(installed);
    let mut found: Vec<(VersionRange, &kix_manifest::Migration)> = package
        .migrations
        .iter()
        .filter(|m| compare_versions(&m.to, &package.version) != Ordering::Greater)
        .filter_map(|m| {
            let range = VersionRange::of_migration(&m.from, &m.to).ok()?;
            (!range.intersect(&from_installed).is_empty()).then_some((range, m))
        })
        .collect();
    found.sort_by(|(ra, a), (rb, b)| {
        compare_versions(&a.to, &b.to).then_with(|| match (&ra.lower, &rb.lower) {
            (None, None) => Ordering::Equal,
            (None, Some(_)) => Ordering::Less,
            (Some(_), None) => Ordering::Greater,
            (Some(x), Some(y)) => compare_versions(&x.version, &y.version),
        })
    });
    found
        .into_iter()
        .map(|(_, m)| PlannedMigration {
            package: package.name.clone(),
            installed: installed.to_owned(),
            version: package.version.clone(),
            from: m.from.clone(),
            to: m.to.clone(),
            description: m.description.clone(),
            actions: m
                .actions
                .iter()
                .map(|a| {
                    let mut a = a.clone();
                    let group = a.object.group().unwrap_or_default().to_owned();
                    if a.object.namespace.is_none()
                        && a.action == ActionKind::Delete
                        && !is_well_known_cluster_scoped(&group, &a.object.kind)
                    {
                        a.object.namespace = Some(
                            package
                                .namespace
                                .clone()
                                .unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned()),
                        );
                    }
                    a
                })
                .collect(),
            namespace: package.namespace.clone(),
        })
        .collect()
}

/// Whether `reference` (from a migration of a package whose default
/// namespace is `package_ns`) names the object `key`. Without apiVersion any
/// group matches; a cluster-scoped key matches whatever namespace the
/// reference has.
pub fn refers_to(reference: &MigrationRef, package_ns: Option<&str>, key: &ObjectKey) -> bool {
    let group_ok = reference
        .api_version
        .as_deref()
        .is_none_or(|v| group_of(v).unwrap_or_default() == key.group);
    let ns_ok = match (&reference.namespace, &key.namespace) {
        (_, None) => true,
        (Some(a), Some(b)) => a == b,
        (None, Some(b)) => b == package_ns.unwrap_or(DEFAULT_NAMESPACE),
    };
    reference.kind == key.kind && reference.name == key.name && group_ok && ns_ok
}

/// Marks the planned objects a crossed `recreate` (or a `delete` of an object
/// the build still has) deletes before the apply: they become `replace`, with
/// a note naming the migration, and carry this deploy's activation.
/// `mine(activation)` tells whether an activation name belongs to the
/// deploying Kix cluster.
pub fn mark_objects(
    packages: &mut [PackagePlan],
    migrations: &[PlannedMigration],
    activation: &str,
    mine: impl Fn(&str) -> bool,
) {
    for m in migrations {
        for a in &m.actions {
            if a.action == ActionKind::Adopt {
                continue;
            }
            let objects = packages.iter_mut().flat_map(|p| p.objects.iter_mut());
            for o in objects.filter(|o| refers_to(&a.object, m.namespace.as_deref(), &o.key)) {
                let note = format!(
                    "{} by migration {} of package {}",
                    a.action,
                    m.label(),
                    m.package
                );
                o.note = Some(match o.note.take() {
                    Some(old) => format!("{old}; {note}"),
                    None => note,
                });
                if o.action == Action::Create {
                    continue;
                }
                if o.action == Action::Unchanged {
                    o.activations.retain(|x| !mine(x));
                    o.activations.insert(activation.to_owned());
                }
                o.action = Action::Replace;
            }
        }
    }
}

pub use crate::plan_value::acceptance;
// ---------------------------------------------------------------- running

/// A migration action that failed; the package is not applied.
#[derive(Debug, Clone)]
pub struct MigrationFailure {
    /// The object (`Kind ns/name`).
    pub key: String,
    pub error: String,
}

impl fmt::Display for MigrationFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.error)
    }
}

/// The deploy group whose start runs `action` of `m`: the CRD or Namespace
/// group for a CRD or Namespace of the build, else the package's group.
fn group_for(plan: &Plan, m: &PlannedMigration, action: &MigrationAction) -> Group {
    let in_build = plan
        .desired
        .iter()
        .find(|d| refers_to(&action.object, m.namespace.as_deref(), &d.key));
    Group::of_migration(in_build.map(|d| &d.key), &m.package)
}

/// What the migrations stage reads: its own settings, made by the deploy.
pub(crate) struct MigrationStage<'a> {
    pub client: &'a Client,
    pub events: &'a crate::events::Events,
    /// When waiting for deletions ends.
    pub deadline: Instant,
}

/// Runs, in order, the actions of the plan's crossed migrations that belong
/// to the deploy group `group`. Returns what it did: the actions that ran
/// and, when one failed, the group counted failed with its message (the
/// package is then not applied).
pub(crate) async fn run_group<'p>(
    stage: &MigrationStage<'_>,
    plan: &Plan,
    group: &Group,
) -> ChangeSet<'p> {
    let mut changes = ChangeSet::default();
    if let Err(failure) = run_actions(stage, plan, group, &mut changes.migrated).await {
        changes.failed = 1;
        changes.messages.push(format!("{group}: {failure}"));
        crate::events::emit(
            stage.events,
            crate::events::Event::ApplyFailed {
                group: group.clone(),
                key: failure.key,
                error: failure.error,
            },
        );
    }
    changes
}

/// The actions of `group`, in order, each pushed to `done` once it ran;
/// stops at the first that fails.
async fn run_actions(
    stage: &MigrationStage<'_>,
    plan: &Plan,
    group: &Group,
    done: &mut Vec<Migrated>,
) -> Result<(), MigrationFailure> {
    let client = stage.client;
    let mut resources = Resources::new(client.clone());
    for m in &plan.migrations {
        for action in &m.actions {
            if group_for(plan, m, action) != *group {
                continue;
            }
            let failure = |error: String| MigrationFailure {
                key: action.object.to_string(),
                error: format!(
                    "migration {} of package {}: {} failed: {error}",
                    m.label(),
                    m.package,
                    action.action
                ),
            };
            let Some((resource, key)) = resolve(client, &mut resources, plan, m, &action.object)
                .await
                .map_err(failure)?
            else {
                info!(object = %action.object, "migration {}: {} skipped: the apiserver does not serve the kind", m.label(), action.action);
                done.push(Migrated {
                    action: action.action,
                    object: action.object.to_string(),
                    outcome: "kind not served, nothing to do".to_string(),
                });
                continue;
            };
            let api: Api<DynamicObject> = match &key.namespace {
                Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
                None => Api::all_with(client.clone(), &resource),
            };
            let deadline = stage.deadline;
            let outcome = match action.action {
                ActionKind::Recreate => {
                    delete_and_wait(&api, &key, PropagationPolicy::Foreground, deadline).await
                }
                ActionKind::Delete => {
                    delete_and_wait(&api, &key, PropagationPolicy::Background, deadline).await
                }
                ActionKind::Adopt => adopt(&api, plan, m, &key).await,
            }
            .map_err(failure)?;
            info!(
                "migration {} of package {}: {} {key}: {outcome}",
                m.label(),
                m.package,
                action.action
            );
            done.push(Migrated {
                action: action.action,
                object: key.to_string(),
                outcome,
            });
        }
    }
    Ok(())
}

/// The API resource and full key of a reference: the build's object it names,
/// else discovery (its apiVersion, `v1`, or any group serving the kind).
/// None when no served kind matches.
async fn resolve(
    client: &Client,
    resources: &mut Resources,
    plan: &Plan,
    m: &PlannedMigration,
    reference: &MigrationRef,
) -> Result<Option<(ApiResource, ObjectKey)>, String> {
    if let Some(d) = plan
        .desired
        .iter()
        .find(|d| refers_to(reference, m.namespace.as_deref(), &d.key))
    {
        return Ok(Some((d.resource.api.clone(), d.key.clone())));
    }
    let served = |r: Option<crate::resources::Resource>| {
        r.filter(|r| r.served == Served::Yes)
            .map(|r| (r.api, r.namespaced))
    };
    let found = match &reference.api_version {
        Some(v) => served(
            resources
                .get(v, &reference.kind)
                .await
                .map_err(|e| e.to_string())?,
        ),
        None => match served(
            resources
                .get("v1", &reference.kind)
                .await
                .map_err(|e| e.to_string())?,
        ) {
            Some(found) => Some(found),
            None => discover_kind(client, &reference.kind).await?,
        },
    };
    Ok(found.map(|(api, namespaced)| {
        let namespace = namespaced.then(|| {
            reference
                .namespace
                .clone()
                .or_else(|| m.namespace.clone())
                .unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned())
        });
        let key = ObjectKey {
            group: api.group.clone(),
            kind: reference.kind.clone(),
            namespace,
            name: reference.name.clone(),
        };
        (api, key)
    }))
}

/// The preferred resource of `kind` in any API group (full discovery).
async fn discover_kind(client: &Client, kind: &str) -> Result<Option<(ApiResource, bool)>, String> {
    let discovery = crate::contents::discover_all(client)
        .await
        .map_err(|e| format!("discovering the kind {kind}: {e}"))?;
    for group in discovery.groups() {
        for (api, caps) in group.recommended_resources() {
            if api.kind == kind {
                return Ok(Some((
                    api,
                    caps.scope == kube::discovery::Scope::Namespaced,
                )));
            }
        }
    }
    Ok(None)
}

/// Deletes the object and waits until it is gone (its finalizers, and with
/// foreground propagation its dependents, done), at most until `deadline`.
async fn delete_and_wait(
    api: &Api<DynamicObject>,
    key: &ObjectKey,
    propagation: PropagationPolicy,
    deadline: Instant,
) -> Result<String, String> {
    let params = DeleteParams {
        propagation_policy: Some(propagation),
        ..Default::default()
    };
    match api.delete(&key.name, &params).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {
            return Ok("not found, nothing to delete".to_owned());
        }
        Err(e) => return Err(crate::error::api_message(&e)),
    }
    let started = Instant::now();
    let gone = kube::runtime::wait::await_condition(
        api.clone(),
        &key.name,
        |o: Option<&DynamicObject>| o.is_none(),
    );
    match tokio::time::timeout(deadline.saturating_duration_since(Instant::now()), gone).await {
        Ok(Ok(_)) => Ok(format!("deleted ({:.1}s)", started.elapsed().as_secs_f64())),
        Ok(Err(e)) => Err(format!("waiting for the deletion: {e}")),
        Err(_) => Err(format!(
            "still being deleted after {:.0}s (the deploy timeout)",
            started.elapsed().as_secs_f64()
        )),
    }
}

/// Takes ownership of an existing object without changing its content: adds
/// kix's ownership labels and the activations annotation (merge patch). The
/// package's forced server-side apply then writes the build's content.
async fn adopt(
    api: &Api<DynamicObject>,
    plan: &Plan,
    m: &PlannedMigration,
    key: &ObjectKey,
) -> Result<String, String> {
    let live = api
        .get_opt(&key.name)
        .await
        .map_err(|e| crate::error::api_message(&e))?;
    let Some(live) = live else {
        return Ok("not found: the apply creates it".to_owned());
    };
    let owner = owner_value(&key.group, &key.kind, key.namespace.as_deref(), &key.name);
    let labels = live.metadata.labels.clone().unwrap_or_default();
    if labels.get(LABEL_OWNER) == Some(&owner) {
        return Ok("already owned by kix".to_owned());
    }
    let activations = plan
        .packages
        .iter()
        .flat_map(|p| &p.objects)
        .find(|o| &o.key == key)
        .map(|o| o.activations.clone())
        .filter(|a| !a.is_empty())
        .unwrap_or_else(|| [plan.activation.clone()].into());
    let package = plan
        .desired
        .iter()
        .find(|d| &d.key == key)
        .map_or(m.package.as_str(), |d| d.package.as_str());
    let patch = json!({"metadata": {
        "labels": {LABEL_MANAGED_BY: MANAGED_BY_VALUE, LABEL_PACKAGE: package, LABEL_OWNER: owner,
                   kix_api::labels::cluster_label(&plan.cluster): kix_api::labels::CLUSTER_LABEL_VALUE},
        "annotations": {ANNOTATION_ACTIVATIONS: kix_api::labels::format_activations(&activations)},
    }});
    let params = PatchParams {
        field_manager: Some(kix_api::field_manager(&plan.cluster)),
        ..Default::default()
    };
    api.patch(&key.name, &params, &Patch::Merge(&patch))
        .await
        .map_err(|e| crate::error::api_message(&e))?;
    Ok("ownership taken (labels only; the apply writes the content)".to_owned())
}

// ---------------------------------------------------------------- immutable fields

/// Phrases of the apiserver's validation messages for a field that cannot
/// change in place.
const IMMUTABLE: &[&str] = &[
    "field is immutable",
    "immutable",
    "Forbidden: updates to",
    "may not change once set",
    "may not be changed",
    "cannot be changed",
];

/// Whether a failed (dry-run) apply was refused because it changes a field the
/// server does not let change in place: a replace.
pub fn is_immutable(status: &kube::core::Status) -> bool {
    let causes = status.details.iter().flat_map(|d| &d.causes);
    status.code == 422
        && std::iter::once(status.message.as_str())
            .chain(causes.map(|c| c.message.as_str()))
            .any(|m| IMMUTABLE.iter().any(|p| m.contains(p)))
}

/// The immutable fields of a refused apply, as paths: the server names a
/// field (`spec.clusterIPs[0]`, `spec.template.spec`, or all of `spec` for a
/// StatefulSet); where the build's manifest and the live object differ
/// below it, those leaves are named instead (`spec.selector.matchLabels.app`,
/// `spec.template.spec.containers[0].image`), without the fields the message
/// lists as mutable. Also returns the server's reasons, shortened.
pub fn immutable_fields(
    status: &kube::core::Status,
    desired: &Value,
    live: Option<&Value>,
) -> (Vec<String>, Vec<String>) {
    const MAX: usize = 8;
    let causes: Vec<(String, String)> = match status.details.as_ref().map(|d| &d.causes) {
        Some(causes) if !causes.is_empty() => causes
            .iter()
            .map(|c| {
                (
                    c.field.trim_start_matches('.').to_owned(),
                    c.message.clone(),
                )
            })
            .collect(),
        _ => vec![(String::new(), status.message.clone())],
    };
    let mut fields: Vec<String> = Vec::new();
    let mut reasons: Vec<String> = Vec::new();
    for (field, message) in causes {
        let reason = short_reason(&message);
        if !reasons.contains(&reason) {
            reasons.push(reason.clone());
        }
        if field.is_empty() {
            fields.push(reason);
            continue;
        }
        let mutable = mutable_fields(&message);
        let mut found = Vec::new();
        if let (Some(want), Some(have)) = (
            at_path(desired, &field),
            live.and_then(|l| at_path(l, &field)),
        ) {
            differing(&field, want, have, &mutable, &mut found);
        }
        if found.is_empty() {
            found.push(field);
        }
        for f in found {
            if !fields.contains(&f) {
                fields.push(f);
            }
        }
    }
    if fields.len() > MAX {
        let more = fields.len() - MAX;
        fields.truncate(MAX);
        fields.push(format!("and {more} more"));
    }
    (fields, reasons)
}

/// `Invalid value: <the whole value>: field is immutable` → `field is immutable`.
fn short_reason(message: &str) -> String {
    match message.strip_prefix("Invalid value: ") {
        Some(rest) => rest.rsplit(": ").next().unwrap_or(rest).to_owned(),
        None => message.to_owned(),
    }
}

/// The fields a message lists as allowed to change: `... fields other than
/// 'replicas', 'template' ... are forbidden` → `replicas`, `template`.
fn mutable_fields(message: &str) -> Vec<String> {
    let Some((_, rest)) = message.split_once("other than") else {
        return vec![];
    };
    rest.split('\'')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// The value at a field path (`spec.ports[0].port`, `metadata.labels[app]`).
fn at_path<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    let mut current = value;
    for part in path.split('.') {
        let (name, indexes) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !name.is_empty() {
            current = current.get(name)?;
        }
        for index in indexes.split('[').skip(1) {
            let index = index.trim_end_matches(']');
            current = match index.parse::<usize>() {
                Ok(i) => current.get(i)?,
                Err(_) => current.get(index)?,
            };
        }
    }
    Some(current)
}

/// Leaves the build sets whose live value differs, below `path`.
fn differing(path: &str, want: &Value, have: &Value, skip: &[String], out: &mut Vec<String>) {
    match (want, have) {
        (Value::Object(want), Value::Object(have)) => {
            for (k, v) in want {
                if skip.iter().any(|s| s == k) {
                    continue;
                }
                differing(
                    &format!("{path}.{k}"),
                    v,
                    have.get(k).unwrap_or(&Value::Null),
                    &[],
                    out,
                );
            }
        }
        (Value::Array(want), Value::Array(have)) if want.len() == have.len() => {
            for (i, (w, h)) in want.iter().zip(have).enumerate() {
                differing(&format!("{path}[{i}]"), w, h, &[], out);
            }
        }
        _ if want != have && !same_scalar(want, have) => out.push(path.to_owned()),
        _ => {}
    }
}

/// `"80"` and `80`: the server's normal form of an int-or-string.
fn same_scalar(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::String(s), Value::Number(n)) | (Value::Number(n), Value::String(s)) => {
            s == &n.to_string()
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kix_api::{PackageInstanceSpec, PackageInstanceStatus, PackagePhase};
    use kix_manifest::Migration;

    fn migration(from: &str, to: &str) -> Migration {
        Migration {
            from: from.into(),
            to: to.into(),
            description: format!("{from} to {to}"),
            actions: vec![],
        }
    }

    fn package(version: &str, migrations: Vec<Migration>) -> Package {
        Package {
            name: "db".into(),
            version: version.into(),
            depends_on: vec![],
            namespace: Some("data".into()),
            migrations,
            handoff: vec![],
            tests: vec![],
            objects: vec![],
        }
    }

    fn crossed_labels(p: &Package, installed: &str) -> Vec<String> {
        select(p, installed)
            .iter()
            .map(PlannedMigration::label)
            .collect()
    }

    #[test]
    fn migrations_crossed_by_a_version_jump_in_order() {
        // Declared out of order: the selection sorts by `to`.
        let p = package(
            "3.0.0",
            vec![migration("2.0.0", "3.0.0"), migration("1.0.0", "2.0.0")],
        );
        assert_eq!(
            crossed_labels(&p, "1.0.0"),
            ["1.0.0 -> 2.0.0", "2.0.0 -> 3.0.0"]
        );
        assert_eq!(
            crossed_labels(&p, "1.5.0"),
            ["1.0.0 -> 2.0.0", "2.0.0 -> 3.0.0"]
        );
        assert_eq!(crossed_labels(&p, "2.0.0"), ["2.0.0 -> 3.0.0"]);
        assert_eq!(crossed_labels(&p, "2.9"), ["2.0.0 -> 3.0.0"]);
        // Below every `from`: the package still passes through both.
        assert_eq!(
            crossed_labels(&p, "0.9.0"),
            ["1.0.0 -> 2.0.0", "2.0.0 -> 3.0.0"]
        );
        // Same version, downgrade: none.
        assert!(select(&p, "3.0.0").is_empty());
        assert!(select(&p, "4.0.0").is_empty());
        // Not reaching `to`: 1 -> 2.5 crosses 1 -> 2 only.
        let p = package("2.5.0", p.migrations.clone());
        assert_eq!(crossed_labels(&p, "1.0.0"), ["1.0.0 -> 2.0.0"]);
        // Pre-releases sort below the release.
        let p = package("3.0.0-rc.1", p.migrations.clone());
        assert_eq!(crossed_labels(&p, "1.0.0"), ["1.0.0 -> 2.0.0"]);
    }

    #[test]
    fn migrations_with_range_from() {
        let p = package(
            "3.0.0",
            vec![
                migration("1.x", "2.0.0"),
                migration(">=2.1.0 <2.5", "3.0.0"),
            ],
        );
        assert_eq!(
            crossed_labels(&p, "1.4.2"),
            ["1.x -> 2.0.0", ">=2.1.0 <2.5 -> 3.0.0"]
        );
        // 2.0.x is below the second range, which the path still goes through.
        assert_eq!(crossed_labels(&p, "2.0.3"), [">=2.1.0 <2.5 -> 3.0.0"]);
        // Installed above the range: the package does not pass through it.
        assert!(select(&p, "2.7.0").is_empty());
        let p = package("2.0.0", vec![migration("=1.5.0", "2.0.0")]);
        assert_eq!(crossed_labels(&p, "1.5.0"), ["=1.5.0 -> 2.0.0"]);
        assert_eq!(crossed_labels(&p, "1.0.0"), ["=1.5.0 -> 2.0.0"]);
        assert!(select(&p, "1.6.0").is_empty());
        let p = package("2.0.0", vec![migration("*", "2.0.0")]);
        assert_eq!(crossed_labels(&p, "0.1"), ["* -> 2.0.0"]);
    }

    #[test]
    fn migrations_version_range_syntax() {
        let r = |s: &str| VersionRange::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(r("1.2.0").to_string(), ">=1.2.0");
        assert_eq!(r(">=1.0.0 <2.0.0").to_string(), ">=1.0.0 <2.0.0");
        assert_eq!(r(">= 1.0.0  < 2.0.0").to_string(), ">=1.0.0 <2.0.0");
        assert_eq!(r("1.x").to_string(), ">=1 <2");
        assert_eq!(r("1.2.*").to_string(), ">=1.2 <1.3");
        assert_eq!(r("v1.X.x").to_string(), ">=1 <2");
        assert_eq!(r("*").to_string(), "*");
        assert_eq!(r("=1.5").to_string(), ">=1.5 <=1.5");
        assert_eq!(r(">1 >2 <5 <=4").to_string(), ">2 <=4");
        for bad in ["", "1.0 2.0", ">=", ">=1.0 2.0", "1.x.3", "a.x", "<*"] {
            assert!(VersionRange::parse(bad).is_err(), "{bad:?} parses");
        }
        assert!(r("1.x").contains("1.99.3"));
        assert!(!r("1.x").contains("2.0"));
        assert!(!r("1.x").contains("0.9"));
        assert!(r(">1.0 <=2").contains("2.0.0"));
        assert!(!r(">1.0 <=2").contains("1.0.0"));
        let m =
            |f: &str, t: &str| VersionRange::of_migration(f, t).unwrap_or_else(|e| panic!("{e}"));
        assert!(m("2.0.0", "1.0.0").is_empty());
        assert!(m("1.0.0", "1.0").is_empty());
        assert!(!m("1.0.0", "2.0.0").is_empty());
        // Chained migrations do not overlap; nested ones do.
        assert!(
            m("1.0.0", "2.0.0")
                .intersect(&m("2.0.0", "3.0.0"))
                .is_empty()
        );
        assert!(!m(">=1.0", "3.0").intersect(&m("2.0.0", "3.0.0")).is_empty());
        assert!(m("1.x", "3.0").intersect(&m(">=2.0.0", "3.0.0")).is_empty());
        assert_eq!(m("1.x", "1.5").to_string(), ">=1 <1.5");
    }

    #[test]
    fn migrations_validation_in_the_tree_reader() {
        let read = |migrations: serde_json::Value| {
            let dir = tempfile::tempdir().expect("tempdir");
            let root = dir.path().join("tree");
            std::fs::create_dir_all(root.join("packages/app/resources")).expect("mkdir");
            std::fs::write(
                root.join("kix.json"),
                r#"{"format":1,"cluster":"c","packages":["app"]}"#,
            )
            .expect("write");
            std::fs::write(
                root.join("packages/app/package.json"),
                json!({"name": "app", "version": "3.0.0", "namespace": "app", "migrations": migrations}).to_string(),
            )
            .expect("write");
            std::fs::write(
                root.join("packages/app/resources/cm.yaml"),
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: config}\n",
            )
            .expect("write");
            let options = kix_manifest::ReadOptions {
                store_dir: dir.path().canonicalize().expect("canonical"),
                ..Default::default()
            };
            kix_manifest::read_tree(&root, &options)
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        let ok = |m: serde_json::Value| read(m.clone()).unwrap_or_else(|e| panic!("{m}: {e}"));
        ok(json!([{"from": ">=1.0.0 <2.0.0", "to": "2.0.0"}, {"from": "2.x", "to": "3.0.0"}]));
        ok(
            json!([{"from": "1.0.0", "to": "2.0.0"}, {"from": "2.0.0", "to": "3.0.0",
            "actions": [{"action": "recreate", "object": {"kind": "ConfigMap", "name": "config"}}]}]),
        );
        let err = |m: serde_json::Value, want: &str| {
            let e = read(m.clone()).err().unwrap_or_else(|| panic!("{m} reads"));
            assert!(e.contains(want), "{m}: {e}");
        };
        err(
            json!([{"from": "1.x", "to": "2.0.0"}, {"from": ">=1.5 <3", "to": "3.0.0"}]),
            "overlap",
        );
        err(
            json!([{"from": "1.0 2.0", "to": "3.0.0"}]),
            "needs an operator",
        );
        err(
            json!([{"from": "3.x", "to": "3.0.0"}]),
            "must be a lower version",
        );
        err(
            json!([{"from": "2.0.0", "to": "1.0.0"}]),
            "must be a lower version",
        );
        err(
            json!([{"from": "1.0.0", "to": "2.0.0", "actions": [{"action": "adopt", "object": {"kind": "Secret", "name": "x"}}]}]),
            "no such object",
        );
    }

    fn instance(version: &str, phase: Option<PackagePhase>, installed: bool) -> PackageInstance {
        let mut pi = PackageInstance::new_record(PackageInstanceSpec {
            cluster: "c".into(),
            package: "db".into(),
            version: version.into(),
            activation: "c-1".into(),
        });
        let mut status = PackageInstanceStatus {
            phase,
            ..Default::default()
        };
        if installed {
            status.conditions = vec![crate::packages::installed_condition(version, "c-1")];
        }
        pi.status = Some(status);
        pi
    }

    #[test]
    fn migrations_from_package_instances() {
        let build = Build {
            root: "/nix/store/x".into(),
            cluster: "c".into(),
            format: 1,
            settings: Default::default(),
            revision: None,
            health: Vec::new(),
            dropped: Vec::new(),
            packages: vec![package("2.0.0", vec![migration("1.0.0", "2.0.0")])],
            secrets: Vec::new(),
            plaintext_secrets_allowed: Default::default(),
            secrets_decrypted: false,
            secret_digest_keys: Default::default(),
            sources: Default::default(),
        };
        let labels = |pis: &[PackageInstance]| {
            crossed(&build, pis)
                .iter()
                .map(PlannedMigration::label)
                .collect::<Vec<_>>()
        };
        assert!(labels(&[]).is_empty(), "first install");
        assert_eq!(
            labels(&[instance("1.0.0", Some(PackagePhase::Ready), true)]),
            ["1.0.0 -> 2.0.0"]
        );
        assert_eq!(
            labels(&[instance("1.0.0", Some(PackagePhase::Ready), false)]),
            ["1.0.0 -> 2.0.0"]
        );
        // A failed upgrade keeps the installed version: the migration is crossed again.
        assert_eq!(
            labels(&[instance("1.0.0", Some(PackagePhase::Failed), true)]),
            ["1.0.0 -> 2.0.0"]
        );
        // Never installed (an install that did not finish): nothing to migrate.
        assert!(labels(&[instance("1.0.0", Some(PackagePhase::Pending), false)]).is_empty());
        assert!(labels(&[instance("1.0.0", Some(PackagePhase::Failed), false)]).is_empty());
        assert!(labels(&[instance("2.0.0", Some(PackagePhase::Ready), true)]).is_empty());
    }

    #[test]
    fn migrations_delete_references_default_to_the_package_namespace() {
        let mut m = migration("1.0.0", "2.0.0");
        let action = |kind: &str, api_version: Option<&str>| MigrationAction {
            action: ActionKind::Delete,
            object: MigrationRef {
                api_version: api_version.map(str::to_owned),
                kind: kind.into(),
                namespace: None,
                name: "x".into(),
            },
        };
        m.actions = vec![
            action("Deployment", Some("apps/v1")),
            action("ClusterRole", Some("rbac.authorization.k8s.io/v1")),
        ];
        let planned = select(&package("2.0.0", vec![m]), "1.0.0");
        assert_eq!(
            planned[0].actions[0].object.to_string(),
            "Deployment.apps data/x"
        );
        assert_eq!(
            planned[0].actions[1].object.to_string(),
            "ClusterRole.rbac.authorization.k8s.io/x"
        );
        assert_eq!(
            acceptance(&planned),
            [
                "migration db 1.0.0 -> 2.0.0: delete Deployment.apps data/x, delete ClusterRole.rbac.authorization.k8s.io/x"
            ]
        );
        let key = |ns: Option<&str>| ObjectKey {
            group: "apps".into(),
            kind: "Deployment".into(),
            namespace: ns.map(str::to_owned),
            name: "x".into(),
        };
        let r = &planned[0].actions[0].object;
        assert!(refers_to(r, Some("data"), &key(Some("data"))));
        assert!(!refers_to(r, Some("data"), &key(Some("other"))));
        let bare = MigrationRef {
            api_version: None,
            kind: "Deployment".into(),
            namespace: None,
            name: "x".into(),
        };
        assert!(refers_to(&bare, None, &key(Some("default"))));
        assert!(refers_to(&bare, Some("data"), &key(Some("data"))));
    }

    #[test]
    fn migrations_immutable_field_paths() {
        let status = |field: &str, message: &str| -> kube::core::Status {
            serde_json::from_value(json!({
                "code": 422,
                "message": format!("X is invalid: {field}: {message}"),
                "reason": "Invalid",
                "details": {"causes": [{"reason": "FieldValueInvalid", "message": message, "field": field}]},
            }))
            .unwrap_or_else(|e| panic!("{e}"))
        };
        // StatefulSet: the server names all of `spec`.
        let sts = status(
            "spec",
            "Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy' and 'minReadySeconds' are forbidden",
        );
        assert!(is_immutable(&sts));
        let desired = json!({"spec": {"replicas": 0, "selector": {"matchLabels": {"app": "db2"}},
            "template": {"metadata": {"labels": {"app": "db2"}}}}});
        let live = json!({"spec": {"replicas": 1, "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}}}, "podManagementPolicy": "OrderedReady"}});
        let (fields, reasons) = immutable_fields(&sts, &desired, Some(&live));
        assert_eq!(fields, ["spec.selector.matchLabels.app"]);
        assert!(reasons[0].starts_with("Forbidden: updates to statefulset spec"));
        // Service: the field is already precise.
        let svc = status(
            "spec.clusterIPs[0]",
            r#"Invalid value: ["10.0.0.9"]: may not change once set"#,
        );
        assert!(is_immutable(&svc));
        let (fields, reasons) = immutable_fields(
            &svc,
            &json!({"spec": {"clusterIP": "10.0.0.9"}}),
            Some(&json!({"spec": {"clusterIP": "10.0.0.8", "clusterIPs": ["10.0.0.8"]}})),
        );
        assert_eq!(fields, ["spec.clusterIPs[0]"]);
        assert_eq!(reasons, ["may not change once set"]);
        // Job: the leaf below the named field.
        let job = status(
            "spec.template.spec",
            r#"Invalid value: {"Containers":[{"Image":"x:2"}]}: field is immutable"#,
        );
        let (fields, reasons) = immutable_fields(
            &job,
            &json!({"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "m", "image": "x:2"}]}}}}),
            Some(
                &json!({"spec": {"template": {"spec": {"restartPolicy": "Never", "dnsPolicy": "ClusterFirst",
                "containers": [{"name": "m", "image": "x:1", "imagePullPolicy": "IfNotPresent"}]}}}}),
            ),
        );
        assert_eq!(fields, ["spec.template.spec.containers[0].image"]);
        assert_eq!(reasons, ["field is immutable"]);
        // Without the live object: the server's path.
        assert_eq!(
            immutable_fields(&job, &json!({}), None).0,
            ["spec.template.spec"]
        );
        let other = status(
            "spec.replicas",
            "Invalid value: -1: must be greater than or equal to 0",
        );
        assert!(!is_immutable(&other));
    }
}

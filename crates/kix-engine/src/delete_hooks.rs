//! Helm's `pre-delete` and `post-delete` hooks (#47, 3). Helm runs them on
//! `helm uninstall`; kix uninstalls a package when a build drops it: the
//! Kix cluster has a PackageInstance of a package the build no longer has,
//! and the prune deletes the package's objects.
//!
//! - The hooks come from the build that had the package: that of the
//!   newest record of the Kix cluster whose build (in this store) has it
//!   (the current activation's, unless a removal that did not finish left a
//!   newer record). A package no readable build has runs none.
//! - The plan lists them under the removed package (its installed version)
//!   as the hooks a deploy runs, typed like the others
//!   ([`crate::plan_object::HookRun`]): `pre-delete` by weight, then
//!   `post-delete` by weight. Each is a create: a run an earlier removal
//!   left is deleted first (`before-hook-creation`).
//! - The deploy runs the `pre-delete` hooks before the prune, weight by
//!   weight, with the delete policies and failure rules of the other
//!   phases. When one fails, nothing of that package is pruned, its record
//!   stays (Removing) and names the hook, and the deploy ends Degraded. The
//!   `post-delete` hooks run once the package's objects were pruned.
//! - They run whenever a deploy removes the package: a removal that did not
//!   finish runs them again on the next deploy, as a repeated `helm
//!   uninstall` does.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use kix_api::{Activation, PackageInstance};
use kix_manifest::{Build, Object, ObjectKey, ReadOptions};

use crate::desired::{Desired, Shapes, desired_of};
use crate::error::Result;
use crate::hooks::{Phase, delete_event, phase_of, run_note};
use crate::plan_object::{Action, HookRun, Legacy, PackagePlan, PlannedObject};
use crate::resources::Resources;

/// A package the build drops, and the delete hooks of the build that had it.
pub struct Removed {
    pub package: String,
    /// As installed (its PackageInstance).
    pub version: String,
    pub hooks: Vec<Desired>,
}

/// The packages of `instances` (the Kix cluster's PackageInstances) that
/// `build` no longer has, with their versions.
pub fn dropped(build: &Build, instances: &[PackageInstance]) -> BTreeMap<String, String> {
    instances
        .iter()
        .filter(|pi| build.package(&pi.spec.package).is_none())
        .map(|pi| (pi.spec.package.clone(), pi.spec.version.clone()))
        .collect()
}

/// The delete hooks of `package` in `source`, a build that has it.
pub async fn hooks_in(
    source: &Build,
    package: &str,
    resources: &mut Resources,
) -> Result<Vec<Desired>> {
    let objects: Vec<&Object> = source
        .objects()
        .filter(|o| o.package == package)
        .filter(|o| {
            kix_manifest::helm::hook_of(o)
                .ok()
                .flatten()
                .is_some_and(|h| delete_event(&h).is_some())
        })
        .collect();
    if objects.is_empty() {
        return Ok(vec![]);
    }
    desired_of(source, objects, resources, Shapes::Skipped).await
}

/// The delete hooks of each package in `dropped`, from the newest of
/// `records` (the Kix cluster's, oldest first) whose build this store has
/// and that has the package.
pub async fn removed(
    dropped: BTreeMap<String, String>,
    records: &[&Activation],
    resources: &mut Resources,
) -> Result<Vec<Removed>> {
    let mut builds: BTreeMap<&str, Option<Build>> = BTreeMap::new();
    let mut out = Vec::with_capacity(dropped.len());
    for (package, version) in dropped {
        let mut hooks = vec![];
        for record in records.iter().rev() {
            let path = record.spec.source.path.as_str();
            let build = builds.entry(path).or_insert_with(|| {
                kix_manifest::read_tree(Path::new(path), &ReadOptions::default())
                    .inspect_err(|error| {
                        tracing::info!(%error, "{path}: not read for {package}'s delete hooks")
                    })
                    .ok()
            });
            if let Some(build) = build.as_ref().filter(|b| b.package(&package).is_some()) {
                hooks = hooks_in(build, &package, resources).await?;
                break;
            }
        }
        out.push(Removed {
            package,
            version,
            hooks,
        });
    }
    Ok(out)
}

/// The plan of a removed package: its delete hooks as they run, each a
/// create by `activation`.
pub fn planned(removed: &Removed, activation: &str) -> PackagePlan {
    let mut objects: Vec<(Phase, i64, &Desired, HookRun)> = removed
        .hooks
        .iter()
        .filter_map(|d| {
            let hook = d.hook.as_deref()?;
            let event = delete_event(hook)?;
            let run = HookRun {
                event,
                weight: hook.weight,
            };
            Some((phase_of(event), hook.weight, d, run))
        })
        .collect();
    objects.sort_by(|a, b| (a.0, a.1, a.2.rank, &a.2.key).cmp(&(b.0, b.1, b.2.rank, &b.2.key)));
    PackagePlan {
        name: removed.package.clone(),
        version: removed.version.clone(),
        handoff: vec![],
        objects: objects
            .into_iter()
            .map(|(_, _, d, run)| planned_hook(d, run, activation))
            .collect(),
    }
}

fn planned_hook(d: &Desired, run: HookRun, activation: &str) -> PlannedObject {
    PlannedObject {
        key: d.key.clone(),
        api_version: d.api_version.clone(),
        package: d.package.clone(),
        action: Action::Create,
        changes: vec![],
        fields: vec![],
        destructive: false,
        note: Some(format!(
            "{}: {NOTE_REMOVED}",
            run_note(run.event, run.weight)
        )),
        hook: Some(run),
        warnings: vec![],
        contenders: vec![],
        takes_with_it: None,
        deletion: None,
        activations: BTreeSet::from([activation.to_owned()]),
        legacy: Legacy::None,
    }
}

/// The note's end on a delete hook: why it runs.
pub const NOTE_REMOVED: &str = "the build drops its package";

/// The removed packages of a plan: its packages that `build` does not have.
pub fn of_plan<'p>(plan: &'p crate::plan_value::Plan, build: &Build) -> Vec<&'p PackagePlan> {
    plan.packages
        .iter()
        .filter(|p| build.package(&p.name).is_none())
        .collect()
}

/// The desired delete hooks of `package` in `plan` (after the build's own
/// objects in its `desired`).
pub fn desired_of_package<'p>(
    plan: &'p crate::plan_value::Plan,
    package: &PackagePlan,
) -> Vec<&'p Desired> {
    let keys: BTreeSet<&ObjectKey> = package.objects.iter().map(|o| &o.key).collect();
    plan.desired
        .iter()
        .filter(|d| d.package == package.name && keys.contains(&d.key))
        .collect()
}

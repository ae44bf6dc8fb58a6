//! The fleet build's GC root: `fleet:<fleet>/<rollout>` in kix's GC roots
//! directory (`fleet:` cannot begin a Kix cluster's name), kept while a
//! member's record names the rollout. The fleet file refers to every
//! member's build, so the root keeps them all.

use std::collections::BTreeSet;

use kix_manifest::StorePath;

use crate::plan::FleetPlan;
use crate::records::rollout_of;

fn dir_of(fleet: &str) -> String {
    format!("fleet:{fleet}")
}

/// Roots the fleet build of `plan` (a deploy is about to name it).
pub fn add(plan: &FleetPlan) {
    let Ok(path) = StorePath::parse(&plan.path) else {
        return;
    };
    let roots = kix_nix::GcRoots::from_env();
    if let Err(err) = roots.add(&dir_of(&plan.fleet), &plan.rollout.0, &path) {
        tracing::warn!("could not add a Nix GC root for the fleet build {path}: {err}");
    }
}

/// Drops the roots of the fleet's rollouts that no member's record names
/// any more (retention retired them), keeping `plan`'s own. Only when
/// every member's records could be read: a member that was not reached
/// may still name one. Returns the rollouts whose roots went.
pub async fn drop_unnamed(plan: &FleetPlan) -> Vec<String> {
    let roots = kix_nix::GcRoots::from_env();
    let dir = dir_of(&plan.fleet);
    let Ok(listed) = roots.list(&dir) else {
        return vec![];
    };
    let mut named = BTreeSet::from([plan.rollout.0.clone()]);
    for member in &plan.members {
        let Some(client) = &member.client else {
            return vec![];
        };
        let Ok(all) = kix_engine::records::list_all(client).await else {
            return vec![];
        };
        named.extend(
            kix_engine::records::of_cluster(&all, &member.cluster)
                .into_iter()
                .filter_map(rollout_of)
                .filter(|r| r.fleet == plan.fleet)
                .map(|r| r.rollout.0),
        );
    }
    let mut dropped = vec![];
    for root in listed {
        if !named.contains(&root.activation) && roots.remove(&dir, &root.activation).is_ok() {
            dropped.push(root.activation);
        }
    }
    dropped
}

//! `kix fleet rollback`: every member that took a rollout goes back to the
//! build it had before (the newest Superseded record older than the
//! rollout's record, as `kix rollback` picks), in reverse wave order,
//! through the same engine gates.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use kix_api::{Activation, Phase};
use kix_engine::client::Clients;
use kix_manifest::StorePath;
use kube::ResourceExt;
use serde::Serialize;

use crate::error::{FleetError, Result};
use crate::member::{self, Connect, MemberBuild};
use crate::plan::{FleetPlan, FleetPlanOptions, MemberPlan, MemberState, member_plan_options};
use crate::records::rollout_of;
use crate::spec::{FleetFile, MemberName, MemberSpec, RolloutId};

/// What a fleet rollback will do: the members' plans back to their
/// earlier builds, the record each goes back from, and the members it
/// leaves alone (with why).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RollbackPlan {
    pub plan: FleetPlan,
    pub from: BTreeMap<MemberName, String>,
    pub skipped: Vec<(MemberName, String)>,
}

/// A member's records of its Kix cluster (oldest first) and its
/// credentials, or why they could not be read.
type MemberRecords = std::result::Result<(Clients, Vec<Activation>), String>;

/// What one member's records say about the rollout.
enum Found {
    /// Took the rollout as `from`; goes back to the build of `to`.
    Target {
        from: String,
        to: Box<Activation>,
    },
    Skip(String),
    Refuse(String),
}

/// Plans the rollback of `rollout` (default: the fleet's newest deploy
/// rollout). A member that took it but has nothing to go back to refuses
/// the whole rollback, before any change.
pub async fn plan_rollback(
    file: &FleetFile,
    connect: &Connect,
    rollout: Option<RolloutId>,
    options: &FleetPlanOptions,
) -> Result<RollbackPlan> {
    let spec = file.spec.clone();
    let builds = tokio::task::spawn_blocking(move || member::read_builds(&spec))
        .await
        .map_err(|e| FleetError::Refused(format!("reading the builds: {e}")))??;
    let spec = &file.spec;
    let read: Vec<(MemberName, MemberRecords)> = futures::stream::iter(spec.members.iter())
        .filter_map(|(name, m)| {
            let build = builds.get(name).cloned();
            async move { build.map(|b| (name, m, b)) }
        })
        .map(
            |(name, m, build)| async move { (name.clone(), read_member(m, &build, connect).await) },
        )
        .buffer_unordered(spec.max_parallel.max(1))
        .collect()
        .await;
    let rollout = match rollout {
        Some(r) => r,
        None => newest_rollout(&spec.fleet, &read).ok_or_else(|| {
            FleetError::Refused(format!(
                "no member has a record of a rollout of fleet {:?}: nothing to roll back",
                spec.fleet
            ))
        })?,
    };
    let mut members = Vec::new();
    let mut from = BTreeMap::new();
    let mut skipped = Vec::new();
    for (name, records) in read {
        let (Some(m), Some(build)) = (spec.members.get(&name), builds.get(&name)) else {
            continue;
        };
        let (clients, records) = match records {
            Ok(read) => read,
            Err(reason) => {
                members.push(unplanned(
                    &name,
                    m,
                    build,
                    MemberState::Unreachable { reason },
                ));
                continue;
            }
        };
        match find_target(&records, &spec.fleet, &rollout) {
            Found::Skip(why) => skipped.push((name, why)),
            Found::Refuse(why) => {
                return Err(FleetError::Refused(format!(
                    "member {name}: {why}: nothing was changed"
                )));
            }
            Found::Target { from: f, to } => {
                from.insert(name.clone(), f);
                members.push(plan_target(&name, m, build, &clients, &to, options).await?);
            }
        }
    }
    members.sort_by_key(|m| spec.position(&m.member));
    let plan = FleetPlan {
        fleet: spec.fleet.clone(),
        path: file.path.display().to_string(),
        rollout,
        digest: crate::plan::fleet_digest(&members),
        max_parallel: spec.max_parallel,
        pause: spec.pause.clone(),
        members,
    };
    Ok(RollbackPlan {
        plan,
        from,
        skipped,
    })
}

async fn read_member(m: &MemberSpec, build: &MemberBuild, connect: &Connect) -> MemberRecords {
    let clients = member::clients(m, &build.build, connect).await?;
    let all = kix_engine::records::list_all(clients.own())
        .await
        .map_err(|e| e.to_string())?;
    let mine = kix_engine::records::of_cluster(&all, &build.build.cluster)
        .into_iter()
        .cloned()
        .collect();
    Ok((clients, mine))
}

/// The rollout of the newest deploy record naming `fleet`, of any member.
fn newest_rollout(fleet: &str, read: &[(MemberName, MemberRecords)]) -> Option<RolloutId> {
    read.iter()
        .filter_map(|(_, r)| r.as_ref().ok())
        .flat_map(|(_, records)| records)
        .filter_map(|r| {
            let labels = rollout_of(r)?;
            (labels.fleet == fleet && labels.action == "deploy")
                .then(|| (kix_engine::records::recorded_at(r), labels.rollout))
        })
        .max()
        .map(|(_, rollout)| rollout)
}

/// The member's record of the rollout and the record to go back to: the
/// newest applied record before it with another build. A member whose
/// deploy of the rollout failed goes back too (its objects may be half
/// applied); one that was deployed again since is left as it is.
fn find_target(records: &[Activation], fleet: &str, rollout: &RolloutId) -> Found {
    let took = records.iter().rposition(|r| {
        rollout_of(r)
            .is_some_and(|l| l.fleet == fleet && &l.rollout == rollout && l.action == "deploy")
    });
    let Some(took) = took else {
        return Found::Skip("did not take the rollout".into());
    };
    let record = &records[took];
    let was_applied = |r: &Activation| {
        matches!(
            r.phase(),
            Some(Phase::Active | Phase::Degraded | Phase::Superseded)
        )
    };
    if let Some(later) = records[took + 1..].iter().rev().find(|r| was_applied(r)) {
        return Found::Skip(format!(
            "deployed again since the rollout: its current activation is {}",
            later.name_any()
        ));
    }
    let path = &record.spec.source.path;
    match records[..took]
        .iter()
        .rev()
        .filter(|r| was_applied(r))
        .find(|r| &r.spec.source.path != path)
    {
        Some(to) => Found::Target {
            from: record.name_any(),
            to: Box::new(to.clone()),
        },
        None => Found::Refuse(format!(
            "{} took the rollout but has no earlier activation with another build to go back to",
            record.name_any()
        )),
    }
}

fn unplanned(
    name: &MemberName,
    m: &MemberSpec,
    build: &MemberBuild,
    state: MemberState,
) -> MemberPlan {
    MemberPlan {
        member: name.clone(),
        wave: m.wave,
        cluster: build.build.cluster.clone(),
        context: member::context_of(m, &build.build),
        operator: m.operator,
        store_path: String::new(),
        state,
        client: None,
        build: build.build.clone(),
    }
}

/// The plan of the member's earlier build, acting as the ServiceAccount
/// that build names (as `kix rollback` to it does); refused (nothing
/// changed) when that build is gone from the store.
async fn plan_target(
    name: &MemberName,
    m: &MemberSpec,
    build: &MemberBuild,
    clients: &Clients,
    to: &Activation,
    options: &FleetPlanOptions,
) -> Result<MemberPlan> {
    let fail = |reason: String| FleetError::Build {
        member: name.clone(),
        reason,
    };
    let path_text = to.spec.source.path.clone();
    let path = StorePath::parse(&path_text)
        .map_err(|e| fail(format!("{} names {path_text:?}: {e}", to.name_any())))?;
    let check = path.clone();
    let target = tokio::task::spawn_blocking(move || {
        if !kix_nix::is_valid(&check).map_err(|e| e.to_string())? {
            return Err(format!(
                "{check} is no longer in the Nix store (garbage-collected)"
            ));
        }
        kix_nix::read_build(&check).map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| fail(e.to_string()))?
    .map_err(|e| {
        fail(format!(
            "the build of {}: {e}: nothing was changed",
            to.name_any()
        ))
    })?;
    let client = member::acting_for_build(clients, &target).map_err(fail)?;
    let plan_options = member_plan_options(options.is_operator(m), options);
    let state = match kix_engine::plan::plan(&client, &target, path.as_str(), &plan_options).await {
        Ok(p) => MemberState::Planned { plan: Box::new(p) },
        Err(e) if member::is_unreachable(&e) => MemberState::Unreachable {
            reason: e.to_string(),
        },
        Err(e) => MemberState::Failed {
            reason: e.to_string(),
        },
    };
    Ok(MemberPlan {
        member: name.clone(),
        wave: m.wave,
        cluster: build.build.cluster.clone(),
        context: member::context_of(m, &build.build),
        operator: options.is_operator(m),
        store_path: path.to_string(),
        state,
        client: Some(client),
        build: Arc::new(target),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Record `web-<n>` of `path` in `phase`, of `rollout` when given.
    fn record(n: u64, path: &str, phase: &str, rollout: Option<&str>) -> Activation {
        let mut labels = json!({"kix.run/cluster": "web"});
        if let Some(r) = rollout {
            labels["kix.run/fleet"] = json!("prod");
            labels["kix.run/fleet-rollout"] = json!(r);
            labels["kix.run/fleet-action"] = json!("deploy");
        }
        serde_json::from_value(json!({
            "apiVersion": "kix.run/v1alpha1", "kind": "Activation",
            "metadata": {"name": format!("web-{n}"), "labels": labels},
            "spec": {"cluster": "web", "engine": "local", "source": {"path": path},
                     "receipt": {"user": "u", "host": "h", "kixVersion": "0", "time": "2026-01-01T00:00:00Z",
                                 "planDigest": "d"}},
            "status": {"phase": phase},
        }))
        .expect("an Activation")
    }

    fn target(records: &[Activation]) -> Result<(String, String), String> {
        match find_target(records, "prod", &RolloutId("r2".into())) {
            Found::Target { from, to } => Ok((from, to.name_any())),
            Found::Skip(why) => Err(format!("skip: {why}")),
            Found::Refuse(why) => Err(format!("refuse: {why}")),
        }
    }

    #[test]
    fn a_member_goes_back_to_the_applied_build_before_the_rollout() {
        let records = [
            record(1, "/a", "Superseded", None),
            record(2, "/b", "Superseded", Some("r1")),
            record(3, "/b", "Superseded", None),
            record(4, "/c", "Active", Some("r2")),
        ];
        // web-3 has the same build as web-2; the newest applied one is taken.
        assert_eq!(target(&records), Ok(("web-4".into(), "web-3".into())));
    }

    #[test]
    fn a_failed_deploy_of_the_rollout_goes_back_to_the_current_build() {
        let records = [
            record(1, "/a", "Superseded", None),
            record(2, "/b", "Active", None),
            record(3, "/c", "Failed", Some("r2")),
        ];
        assert_eq!(target(&records), Ok(("web-3".into(), "web-2".into())));
    }

    #[test]
    fn members_that_did_not_take_it_or_moved_on_are_left_alone() {
        let untouched = [record(1, "/a", "Active", Some("r1"))];
        assert_eq!(
            target(&untouched),
            Err("skip: did not take the rollout".into())
        );
        let moved = [
            record(1, "/a", "Superseded", None),
            record(2, "/c", "Superseded", Some("r2")),
            record(3, "/a", "Active", None),
        ];
        assert_eq!(
            target(&moved),
            Err("skip: deployed again since the rollout: its current activation is web-3".into())
        );
    }

    #[test]
    fn a_member_with_nothing_before_the_rollout_refuses() {
        let first = [
            record(1, "/c", "Failed", None),
            record(2, "/c", "Active", Some("r2")),
        ];
        assert_eq!(
            target(&first),
            Err("refuse: web-2 took the rollout but has no earlier activation with another build to go back to".into())
        );
    }
}

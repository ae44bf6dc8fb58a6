//! `kix fleet status` and `kix fleet history`: read back from each
//! member's own records (members in parallel, bounded).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use kix_api::{Activation, Phase};
use kube::{Client, ResourceExt};
use serde::Serialize;

use crate::error::Result;
use crate::member::{self, Connect, MemberBuild};
use crate::records::rollout_of;
use crate::spec::{FleetFile, MemberName, MemberSpec};

/// A member as `kix fleet status` shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    pub member: MemberName,
    pub wave: usize,
    pub cluster: String,
    /// The fleet build's store path for this member.
    pub build: String,
    #[serde(flatten)]
    pub state: MemberStatusState,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "state", rename_all = "camelCase")]
pub enum MemberStatusState {
    Unreachable {
        reason: String,
    },
    Read {
        /// The current (applied) record.
        activation: Option<String>,
        phase: Option<Phase>,
        path: Option<String>,
        /// The current record runs the fleet build's store path.
        current: bool,
        /// Objects Ready / all.
        ready: u32,
        objects: u32,
        /// The rollout the current record names, if a fleet deployed it.
        rollout: Option<String>,
    },
}

impl MemberStatus {
    /// Current on this build, Active, every object Ready.
    pub fn is_healthy_current(&self) -> bool {
        matches!(&self.state, MemberStatusState::Read { current: true, phase: Some(Phase::Active), ready, objects, .. } if ready == objects)
    }
}

/// Each member's current record and health.
pub async fn status(file: &FleetFile, connect: &Connect) -> Result<Vec<MemberStatus>> {
    let builds = read_builds(file).await?;
    let spec = &file.spec;
    let mut out: Vec<MemberStatus> = futures::stream::iter(spec.members.iter())
        .filter_map(|(name, m)| {
            let build = builds.get(name).cloned();
            async move { build.map(|b| (name, m, b)) }
        })
        .map(|(name, m, build)| member_status(name, m, build, connect))
        .buffer_unordered(spec.max_parallel.max(1))
        .collect()
        .await;
    out.sort_by_key(|m| spec.position(&m.member));
    Ok(out)
}

async fn read_builds(file: &FleetFile) -> Result<BTreeMap<MemberName, MemberBuild>> {
    let spec = file.spec.clone();
    tokio::task::spawn_blocking(move || member::read_builds(&spec))
        .await
        .map_err(|e| crate::error::FleetError::Refused(format!("reading the builds: {e}")))?
}

async fn member_status(
    name: &MemberName,
    m: &MemberSpec,
    build: MemberBuild,
    connect: &Connect,
) -> MemberStatus {
    let state = match member::client(m, &build.build, connect).await {
        Err(reason) => MemberStatusState::Unreachable { reason },
        Ok(client) => read_status(&client, &build).await,
    };
    MemberStatus {
        member: name.clone(),
        wave: m.wave,
        cluster: build.build.cluster.clone(),
        build: build.path.to_string(),
        state,
    }
}

async fn read_status(client: &Client, build: &MemberBuild) -> MemberStatusState {
    let cluster = &build.build.cluster;
    let status = match kix_engine::status::status(client, cluster).await {
        Ok(status) => status,
        Err(e) => {
            return MemberStatusState::Unreachable {
                reason: e.to_string(),
            };
        }
    };
    let rollout = match &status.current {
        Some(current) => kix_engine::records::list_all(client)
            .await
            .ok()
            .and_then(|all| all.into_iter().find(|r| r.name_any() == current.name))
            .and_then(|r| rollout_of(&r))
            .map(|r| r.rollout.0),
        None => None,
    };
    let current = status.current.as_ref();
    MemberStatusState::Read {
        activation: current.map(|c| c.name.clone()),
        phase: current.and_then(|c| c.phase),
        path: current.map(|c| c.path.clone()),
        current: current.is_some_and(|c| c.path == build.path.as_str()),
        ready: status.counts.ready,
        objects: status.counts.total(),
        rollout,
    }
}

/// One member's record of a fleet run.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberRecord {
    pub member: MemberName,
    pub activation: String,
    pub phase: Option<Phase>,
    pub path: String,
}

/// One rollout (or its rollback) as the members recorded it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutEntry {
    pub rollout: String,
    pub action: String,
    /// The first member record's time.
    pub time: DateTime<Utc>,
    pub members: Vec<MemberRecord>,
}

/// The fleet's runs, newest first, and the members that could not be read.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct History {
    pub entries: Vec<RolloutEntry>,
    pub unreachable: Vec<(MemberName, String)>,
}

/// Every record of every member that names this fleet, grouped by rollout
/// and action (a record per member and run; the newest when it ran twice).
pub async fn history(file: &FleetFile, connect: &Connect) -> Result<History> {
    let builds = read_builds(file).await?;
    let spec = &file.spec;
    let read: Vec<(MemberName, std::result::Result<Vec<Activation>, String>)> =
        futures::stream::iter(spec.members.iter())
            .map(|(name, m)| {
                let build = builds.get(name).cloned();
                async move {
                    let records = match build {
                        None => Err("no build".to_string()),
                        Some(build) => member_records(m, &build, connect).await,
                    };
                    (name.clone(), records)
                }
            })
            .buffer_unordered(spec.max_parallel.max(1))
            .collect()
            .await;
    let mut groups: BTreeMap<(String, String), RolloutEntry> = BTreeMap::new();
    let mut unreachable = Vec::new();
    for (member, records) in read {
        let records = match records {
            Ok(records) => records,
            Err(reason) => {
                unreachable.push((member, reason));
                continue;
            }
        };
        for record in records {
            let Some(r) = rollout_of(&record).filter(|r| r.fleet == spec.fleet) else {
                continue;
            };
            let time = kix_engine::records::recorded_at(&record);
            let entry = groups
                .entry((r.rollout.0.clone(), r.action.clone()))
                .or_insert_with(|| RolloutEntry {
                    rollout: r.rollout.0.clone(),
                    action: r.action.clone(),
                    time,
                    members: vec![],
                });
            entry.time = entry.time.min(time);
            entry.members.retain(|m| m.member != member);
            entry.members.push(MemberRecord {
                member: member.clone(),
                activation: record.name_any(),
                phase: record.phase(),
                path: record.spec.source.path.clone(),
            });
        }
    }
    let mut entries: Vec<RolloutEntry> = groups.into_values().collect();
    for e in &mut entries {
        e.members.sort_by(|a, b| a.member.cmp(&b.member));
    }
    entries.sort_by_key(|e| std::cmp::Reverse(e.time));
    unreachable.sort();
    Ok(History {
        entries,
        unreachable,
    })
}

/// The member's records of its Kix cluster, oldest first.
pub async fn member_records(
    m: &MemberSpec,
    build: &MemberBuild,
    connect: &Connect,
) -> std::result::Result<Vec<Activation>, String> {
    let client = member::client(m, &build.build, connect).await?;
    let all = kix_engine::records::list_all(&client)
        .await
        .map_err(|e| e.to_string())?;
    Ok(kix_engine::records::of_cluster(&all, &build.build.cluster)
        .into_iter()
        .cloned()
        .collect())
}

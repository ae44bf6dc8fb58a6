//! One plan for the whole fleet: every member planned against its own
//! cluster by the engine (bounded parallel), one digest over them all.

use std::sync::Arc;

use futures::StreamExt;
use kix_api::Phase;
use kix_engine::plan::{Plan, PlanOptions};
use kix_manifest::Build;
use kube::Client;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::error::Result;
use crate::member::{self, Connect, MemberBuild};
use crate::spec::{FleetFile, MemberName, MemberSpec, RolloutId};

/// How members are planned.
#[derive(Debug, Clone, Copy, Default)]
pub struct FleetPlanOptions {
    /// Local members take fields other managers own (server-side apply
    /// force). Operator members always plan as the operator does.
    pub force_conflicts: bool,
    /// Every member through its cluster's operator (`--operator`), not only
    /// those the fleet declares `operator = true`.
    pub operator: bool,
}

impl FleetPlanOptions {
    /// Whether `member` goes through its cluster's operator.
    pub fn is_operator(&self, member: &MemberSpec) -> bool {
        self.operator || member.operator
    }
}

/// What planning one member found.
#[derive(Debug, Serialize)]
#[serde(tag = "state", rename_all = "camelCase")]
pub enum MemberState {
    Planned {
        plan: Box<Plan>,
    },
    /// Its apiserver did not answer (or its kubeconfig did not load).
    Unreachable {
        reason: String,
    },
    /// It answered, and planning failed.
    Failed {
        reason: String,
    },
}

/// One member's plan.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberPlan {
    pub member: MemberName,
    pub wave: usize,
    pub cluster: String,
    pub context: Option<String>,
    pub operator: bool,
    pub store_path: String,
    #[serde(flatten)]
    pub state: MemberState,
    #[serde(skip)]
    pub client: Option<Client>,
    #[serde(skip)]
    pub build: Arc<Build>,
}

impl MemberPlan {
    pub fn plan(&self) -> Option<&Plan> {
        match &self.state {
            MemberState::Planned { plan } => Some(plan),
            _ => None,
        }
    }

    /// Active on this build with nothing to change: a deploy skips it.
    pub fn up_to_date(&self) -> bool {
        self.plan().is_some_and(|p| {
            !p.has_changes()
                && p.current_path.as_deref() == Some(p.store_path.as_str())
                && p.current_phase == Some(Phase::Active)
        })
    }

    /// The plan's destructive actions (`delete ConfigMap ns/x`, …).
    pub fn destructive(&self) -> Vec<String> {
        self.plan()
            .map(|p| {
                kix_engine::seal::Destructive::of(p)
                    .lines()
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The line the member adds to the fleet digest.
    fn digest_line(&self) -> String {
        let state = match &self.state {
            MemberState::Planned { plan } => plan.digest.clone(),
            MemberState::Unreachable { .. } => "unreachable".into(),
            MemberState::Failed { .. } => "failed".into(),
        };
        format!(
            "{}\t{}\t{}\t{}\n",
            self.member, self.wave, self.store_path, state
        )
    }
}

/// The fleet's plan: its members in wave order (then by name).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetPlan {
    pub fleet: String,
    /// The fleet build's path.
    pub path: String,
    pub rollout: RolloutId,
    /// Digest over every member's plan digest (and who could not be planned).
    pub digest: String,
    pub max_parallel: usize,
    pub pause: String,
    pub members: Vec<MemberPlan>,
}

impl FleetPlan {
    pub fn waves(&self) -> usize {
        self.members.iter().map(|m| m.wave + 1).max().unwrap_or(0)
    }

    pub fn has_changes(&self) -> bool {
        self.members.iter().any(|m| !m.up_to_date())
    }
}

/// The plan options a member is planned with: the operator's own for
/// operator members (it prunes, takes other managers' fields but not other
/// Kix clusters', trusts recorded digests), as `kix plan --operator`.
pub fn member_plan_options(operator: bool, options: &FleetPlanOptions) -> PlanOptions {
    PlanOptions {
        reconcile: false,
        force_conflicts: operator || options.force_conflicts,
        yield_to_kix_clusters: operator,
        prune: true,
        activation: None,
        only: None,
    }
}

/// Plans every member of `file`, `maxParallel` at once.
pub async fn plan_fleet(
    file: &FleetFile,
    connect: &Connect,
    options: &FleetPlanOptions,
) -> Result<FleetPlan> {
    let spec = file.spec.clone();
    let builds = tokio::task::spawn_blocking(move || member::read_builds(&spec))
        .await
        .map_err(|e| crate::error::FleetError::Refused(format!("reading the builds: {e}")))??;
    let spec = &file.spec;
    let mut members: Vec<MemberPlan> = futures::stream::iter(spec.members.iter())
        .filter_map(|(name, member)| {
            let build = builds.get(name).cloned();
            async move { build.map(|b| (name, member, b)) }
        })
        .map(|(name, member, build)| plan_member(name, member, build, connect, options))
        .buffer_unordered(spec.max_parallel.max(1))
        .collect()
        .await;
    members.sort_by_key(|m| spec.position(&m.member));
    let digest = fleet_digest(&members);
    Ok(FleetPlan {
        fleet: spec.fleet.clone(),
        path: file.path.display().to_string(),
        rollout: file.rollout.clone(),
        digest,
        max_parallel: spec.max_parallel,
        pause: spec.pause.clone(),
        members,
    })
}

async fn plan_member(
    name: &MemberName,
    member: &MemberSpec,
    build: MemberBuild,
    connect: &Connect,
    options: &FleetPlanOptions,
) -> MemberPlan {
    let mut plan = MemberPlan {
        member: name.clone(),
        wave: member.wave,
        cluster: build.build.cluster.clone(),
        context: member::context_of(member, &build.build),
        operator: options.is_operator(member),
        store_path: build.path.to_string(),
        state: MemberState::Unreachable {
            reason: String::new(),
        },
        client: None,
        build: build.build.clone(),
    };
    let client = match member::client_for_build(member, &build.build, connect).await {
        Ok(client) => client,
        Err(reason) => {
            plan.state = MemberState::Unreachable { reason };
            return plan;
        }
    };
    let plan_options = member_plan_options(options.is_operator(member), options);
    plan.state =
        match kix_engine::plan::plan(&client, &build.build, build.path.as_str(), &plan_options)
            .await
        {
            Ok(p) => MemberState::Planned { plan: Box::new(p) },
            Err(e) if member::is_unreachable(&e) => MemberState::Unreachable {
                reason: e.to_string(),
            },
            Err(e) => MemberState::Failed {
                reason: e.to_string(),
            },
        };
    plan.client = Some(client);
    plan
}

/// SHA-256 hex over each member's line, in wave order.
pub(crate) fn fleet_digest(members: &[MemberPlan]) -> String {
    let mut hasher = Sha256::new();
    for m in members {
        hasher.update(m.digest_line().as_bytes());
    }
    hex::encode(hasher.finalize())
}

/// The document `kix fleet plan --out FILE` writes and `kix fleet deploy
/// --plan FILE` runs: the fleet digest, and per member what was planned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SavedFleetPlan {
    pub fleet: String,
    pub path: String,
    pub digest: String,
    pub members: Vec<SavedMember>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SavedMember {
    pub member: MemberName,
    pub wave: usize,
    pub store_path: String,
    /// The member's plan digest, or `unreachable` / `failed`.
    pub digest: String,
    pub destructive: Vec<String>,
}

impl SavedFleetPlan {
    pub fn of(plan: &FleetPlan) -> SavedFleetPlan {
        SavedFleetPlan {
            fleet: plan.fleet.clone(),
            path: plan.path.clone(),
            digest: plan.digest.clone(),
            members: plan
                .members
                .iter()
                .map(|m| SavedMember {
                    member: m.member.clone(),
                    wave: m.wave,
                    store_path: m.store_path.clone(),
                    digest: m
                        .digest_line()
                        .rsplit('\t')
                        .next()
                        .unwrap_or_default()
                        .trim_end()
                        .to_string(),
                    destructive: m.destructive(),
                })
                .collect(),
        }
    }

    /// What moved between this saved plan and `now`, one line per member
    /// (empty when the digests agree).
    pub fn moved(&self, now: &FleetPlan) -> Vec<String> {
        if self.digest == now.digest {
            return vec![];
        }
        let now = SavedFleetPlan::of(now);
        let mut lines = Vec::new();
        for saved in &self.members {
            match now.members.iter().find(|m| m.member == saved.member) {
                None => lines.push(format!("{}: no longer a member", saved.member)),
                Some(m) if m != saved => lines.push(format!(
                    "{}: planned {} ({}), now {} ({})",
                    saved.member, saved.digest, saved.store_path, m.digest, m.store_path
                )),
                Some(_) => {}
            }
        }
        for m in &now.members {
            if !self.members.iter().any(|s| s.member == m.member) {
                lines.push(format!("{}: a new member", m.member));
            }
        }
        if lines.is_empty() {
            lines.push("the fleet's digest differs".into());
        }
        lines
    }
}

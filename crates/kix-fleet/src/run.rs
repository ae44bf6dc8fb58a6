//! Wave by wave: the members of a wave in parallel up to `maxParallel`;
//! the next wave only when every member of this one is Active and healthy
//! for `pause`; the first failure beyond the tolerance halts the run, the
//! rest untouched. Deploy and rollback both run through here.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kix_api::Phase;
use serde::Serialize;
use tokio::sync::mpsc::UnboundedSender;

use crate::apply::{self, MemberOptions};
use crate::plan::{FleetPlan, MemberPlan, MemberState};
use crate::records::{FleetAction, RolloutLabels};
use crate::spec::MemberName;

/// How a fleet run goes.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub member: MemberOptions,
    /// Failures tolerated per wave before the run halts.
    pub continue_on_failure: usize,
    /// Members deployed at once inside a wave (default: the fleet's).
    pub max_parallel: Option<usize>,
    /// How long a wave holds healthy (default: the fleet's `pause`).
    pub pause: Option<Duration>,
    pub events: Option<UnboundedSender<FleetEvent>>,
}

/// What happened to a member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "camelCase")]
pub enum MemberResult {
    /// Active on this build already with nothing to change: skipped.
    UpToDate { activation: Option<String> },
    /// Deployed, Active and healthy.
    Done { activation: Option<String> },
    /// Deployed and Degraded or Failed, or failed before its record, or
    /// unhealthy during the pause, or unreachable.
    Failed {
        activation: Option<String>,
        reason: String,
    },
    /// Not started: the run halted first.
    Untouched,
}

impl MemberResult {
    pub fn is_failure(&self) -> bool {
        matches!(self, MemberResult::Failed { .. })
    }
}

/// Progress, one event per member step.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetEvent {
    pub member: MemberName,
    pub wave: usize,
    pub step: Step,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "step", rename_all = "camelCase")]
pub enum Step {
    Started,
    /// Waiting `pause` with the wave healthy.
    Holding {
        seconds: u64,
    },
    /// Held Active and healthy for the whole pause.
    Held {
        seconds: u64,
    },
    Finished {
        result: MemberResult,
    },
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberOutcome {
    pub member: MemberName,
    pub wave: usize,
    pub cluster: String,
    #[serde(flatten)]
    pub result: MemberResult,
}

/// How the run ended.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetOutcome {
    pub fleet: String,
    pub rollout: String,
    pub action: FleetAction,
    /// Why the run stopped before its last wave (or in it).
    pub halted: Option<String>,
    pub members: Vec<MemberOutcome>,
}

impl FleetOutcome {
    pub fn is_success(&self) -> bool {
        self.halted.is_none() && !self.members.iter().any(|m| m.result.is_failure())
    }
}

/// A run: the plan's members (deploy: the fleet build's; rollback: the
/// builds they go back to), each with the record it leaves (rollback).
pub struct Run<'a> {
    pub plan: &'a FleetPlan,
    pub action: FleetAction,
    /// Waves in the order they run (rollback: reversed).
    pub order: Vec<usize>,
    /// Per member, the record a rollback goes back from.
    pub rollback_from: &'a std::collections::BTreeMap<MemberName, String>,
}

/// Runs the waves; returns every member's result.
pub async fn run(run: Run<'_>, options: &RunOptions) -> FleetOutcome {
    let plan = run.plan;
    let parallel = options.max_parallel.unwrap_or(plan.max_parallel).max(1);
    let pause = options
        .pause
        .unwrap_or_else(|| crate::spec::parse_pause(&plan.pause).unwrap_or_default());
    if run.action == FleetAction::Deploy {
        crate::roots::add(plan);
    }
    let mut results: Vec<MemberOutcome> = Vec::new();
    let mut halted: Option<String> = None;
    for &wave in &run.order {
        let members: Vec<&MemberPlan> = plan.members.iter().filter(|m| m.wave == wave).collect();
        if halted.is_some() {
            results.extend(members.iter().map(|m| untouched(m, options)));
            continue;
        }
        let failures = AtomicUsize::new(0);
        let mut done: Vec<MemberOutcome> = futures::stream::iter(members.iter().copied())
            .map(|m| run_member(&run, m, options, &failures))
            .buffer_unordered(parallel)
            .collect()
            .await;
        if failures.load(Ordering::SeqCst) <= options.continue_on_failure {
            // A wave where nothing was deployed (a resumed rollout) is
            // checked once, not held again.
            let deployed = done
                .iter()
                .any(|o| matches!(o.result, MemberResult::Done { .. }));
            let hold_for = if deployed { pause } else { Duration::ZERO };
            hold(&mut done, &members, hold_for, options, parallel).await;
        }
        let failed: Vec<String> = done
            .iter()
            .filter_map(|o| match &o.result {
                MemberResult::Failed { reason, .. } => Some(format!("{}: {reason}", o.member)),
                _ => None,
            })
            .collect();
        if failed.len() > options.continue_on_failure {
            halted = Some(format!(
                "wave {wave} failed ({}), the rest untouched",
                failed.join("; ")
            ));
        }
        done.sort_by(|a, b| a.member.cmp(&b.member));
        results.extend(done);
    }
    for rollout in crate::roots::drop_unnamed(plan).await {
        tracing::info!(%rollout, "dropped the GC root of a rollout no member's record names");
    }
    FleetOutcome {
        fleet: plan.fleet.clone(),
        rollout: plan.rollout.0.clone(),
        action: run.action,
        halted,
        members: results,
    }
}

fn emit(options: &RunOptions, member: &MemberPlan, step: Step) {
    if let Some(tx) = &options.events {
        let _ = tx.send(FleetEvent {
            member: member.member.clone(),
            wave: member.wave,
            step,
        });
    }
}

fn outcome(member: &MemberPlan, result: MemberResult) -> MemberOutcome {
    MemberOutcome {
        member: member.member.clone(),
        wave: member.wave,
        cluster: member.cluster.clone(),
        result,
    }
}

fn untouched(member: &MemberPlan, options: &RunOptions) -> MemberOutcome {
    emit(
        options,
        member,
        Step::Finished {
            result: MemberResult::Untouched,
        },
    );
    outcome(member, MemberResult::Untouched)
}

/// One member of a wave: skipped when up to date, not started once the
/// wave's failures passed the tolerance, else deployed.
async fn run_member(
    run: &Run<'_>,
    member: &MemberPlan,
    options: &RunOptions,
    failures: &AtomicUsize,
) -> MemberOutcome {
    if failures.load(Ordering::SeqCst) > options.continue_on_failure {
        return untouched(member, options);
    }
    let result = if member.up_to_date() {
        MemberResult::UpToDate {
            activation: member.plan().and_then(|p| p.current_activation.clone()),
        }
    } else {
        emit(options, member, Step::Started);
        deploy_member(run, member, options).await
    };
    if result.is_failure() {
        failures.fetch_add(1, Ordering::SeqCst);
    }
    emit(
        options,
        member,
        Step::Finished {
            result: result.clone(),
        },
    );
    outcome(member, result)
}

async fn deploy_member(run: &Run<'_>, member: &MemberPlan, options: &RunOptions) -> MemberResult {
    let failed = |reason: String| MemberResult::Failed {
        activation: None,
        reason,
    };
    let client = match (&member.state, &member.client) {
        (MemberState::Unreachable { reason }, _) => {
            return failed(format!("unreachable: {reason}"));
        }
        (MemberState::Failed { reason }, _) => return failed(format!("not planned: {reason}")),
        (MemberState::Planned { .. }, Some(client)) => client,
        (MemberState::Planned { .. }, None) => return failed("no client".into()),
    };
    let labels = RolloutLabels {
        fleet: run.plan.fleet.clone(),
        rollout: run.plan.rollout.clone(),
        member: member.member.clone(),
        action: run.action,
        fleet_path: run.plan.path.clone(),
    };
    let deploy_options = apply::deploy_options(
        member,
        &options.member,
        run.rollback_from.get(&member.member).cloned(),
    );
    match apply::apply_member(member, client, deploy_options, &labels, &options.member).await {
        Ok(applied) if applied.phase == Phase::Active => MemberResult::Done {
            activation: applied.activation,
        },
        Ok(applied) => MemberResult::Failed {
            reason: format!("{}: {}", applied.phase, applied.message),
            activation: applied.activation,
        },
        Err(reason) => failed(reason),
    }
}

/// Checks every member still Done or UpToDate at once (each check lists
/// its Kix cluster's objects: one after the other, they added up to seconds
/// at the end of a wave), `parallel` at a time; one that is not healthy
/// becomes Failed.
async fn check_healthy(
    done: &mut [MemberOutcome],
    members: &[&MemberPlan],
    options: &RunOptions,
    parallel: usize,
) {
    let checks = done.iter().map(|o| async {
        let member = members.iter().find(|m| m.member == o.member)?;
        let client = member.client.as_ref()?;
        if !matches!(
            o.result,
            MemberResult::Done { .. } | MemberResult::UpToDate { .. }
        ) {
            return None;
        }
        apply::healthy(client, &o.cluster, &member.store_path)
            .await
            .err()
    });
    let verdicts: Vec<Option<String>> = futures::stream::iter(checks)
        .buffered(parallel)
        .collect()
        .await;
    for (o, reason) in done.iter_mut().zip(verdicts) {
        let (Some(reason), Some(member)) = (reason, members.iter().find(|m| m.member == o.member))
        else {
            continue;
        };
        let (MemberResult::Done { activation } | MemberResult::UpToDate { activation }) = &o.result
        else {
            continue;
        };
        o.result = MemberResult::Failed {
            activation: activation.clone(),
            reason: format!("unhealthy while the wave held: {reason}"),
        };
        emit(
            options,
            member,
            Step::Finished {
                result: o.result.clone(),
            },
        );
    }
}

/// The wave holds Active and healthy for `pause` (checked every 2 s, and
/// once at the end): a member that is not becomes Failed.
async fn hold(
    done: &mut [MemberOutcome],
    members: &[&MemberPlan],
    pause: Duration,
    options: &RunOptions,
    parallel: usize,
) {
    if !pause.is_zero() {
        for m in members {
            emit(
                options,
                m,
                Step::Holding {
                    seconds: pause.as_secs(),
                },
            );
        }
    }
    let started = Instant::now();
    loop {
        check_healthy(done, members, options, parallel).await;
        if started.elapsed() >= pause {
            break;
        }
        let left = pause.saturating_sub(started.elapsed());
        tokio::time::sleep(left.min(Duration::from_secs(2))).await;
    }
    if pause.is_zero() {
        return;
    }
    for o in done.iter() {
        if let (MemberResult::Done { .. } | MemberResult::UpToDate { .. }, Some(member)) =
            (&o.result, members.iter().find(|m| m.member == o.member))
        {
            emit(
                options,
                member,
                Step::Held {
                    seconds: pause.as_secs(),
                },
            );
        }
    }
}

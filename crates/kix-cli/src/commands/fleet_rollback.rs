//! `kix fleet rollback <FLEET>`: each member that took a rollout goes back
//! to its build before it, in reverse wave order (kix_fleet::rollback).

use std::process::ExitCode;

use clap::Args;
use kix_fleet::plan::FleetPlanOptions;
use kix_fleet::records::FleetAction;
use kix_fleet::run::Run;
use kix_fleet::spec::RolloutId;

use super::fleet::{FleetRunArgs, FleetSourceArgs, connect, summary_text};
use super::{GlobalArgs, OutputFormat};

#[derive(Debug, Args)]
pub struct FleetRollbackArgs {
    #[command(flatten)]
    pub source: FleetSourceArgs,
    #[command(flatten)]
    pub run: FleetRunArgs,
    /// The rollout to undo (`kix fleet history` lists them) [default: the
    /// fleet's newest]
    #[arg(long, value_name = "ID")]
    pub rollout: Option<String>,
    /// Take fields other field managers own (server-side apply force).
    #[arg(long)]
    pub force_conflicts: bool,
    /// Roll every member back through its cluster's operator, not only
    /// those the fleet declares `operator = true`.
    #[arg(long)]
    pub operator: bool,
}

pub async fn exec(args: FleetRollbackArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let file = args.source.read(global).await?;
    let options = FleetPlanOptions {
        force_conflicts: args.force_conflicts,
        operator: args.operator,
    };
    let rollback = kix_fleet::rollback::plan_rollback(
        &file,
        &connect(global)?,
        args.rollout.clone().map(RolloutId),
        &options,
    )
    .await?;
    let plan = &rollback.plan;
    if args.run.output == OutputFormat::Text {
        println!(
            "Rolling back rollout {} of fleet {}",
            plan.rollout, plan.fleet
        );
        print!("{}", summary_text(plan));
        for (member, why) in &rollback.skipped {
            println!("{member}: left as it is: {why}");
        }
    }
    let question = format!(
        "Roll back {} member(s) of fleet {} to their builds before rollout {}?",
        plan.members.len(),
        plan.fleet,
        plan.rollout
    );
    if !args.run.check_and_confirm(plan, &question)? {
        return Ok(ExitCode::from(1));
    }
    let (events, printer) = args.run.progress(plan);
    let run_options = args.run.options(events, false)?;
    let order = (0..plan.waves()).rev().collect();
    let outcome = kix_fleet::run::run(
        Run {
            plan,
            action: FleetAction::Rollback,
            order,
            rollback_from: &rollback.from,
        },
        &run_options,
    )
    .await;
    drop(run_options);
    let _ = printer.await;
    super::fleet::print_outcome(&outcome, args.run.output)
}

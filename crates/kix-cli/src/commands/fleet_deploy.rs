//! `kix fleet deploy <FLEET>`: plan every member, confirm once, then deploy
//! wave by wave (kix_fleet::run).

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use kix_fleet::plan::{FleetPlanOptions, SavedFleetPlan};
use kix_fleet::records::FleetAction;
use kix_fleet::run::Run;

use super::fleet::{FleetRunArgs, FleetSourceArgs, connect, summary_text};
use super::{GlobalArgs, OutputFormat};

#[derive(Debug, Args)]
pub struct FleetDeployArgs {
    #[command(flatten)]
    pub source: FleetSourceArgs,
    #[command(flatten)]
    pub run: FleetRunArgs,
    /// Run the fleet plan saved by `kix fleet plan --out FILE`: deployed
    /// only when planning again gives the same fleet digest, and each
    /// member runs only its saved plan. No question is asked.
    #[arg(long, value_name = "FILE")]
    pub plan: Option<std::path::PathBuf>,
    /// Local members take fields other field managers own.
    #[arg(long)]
    pub force_conflicts: bool,
    /// Deploy every member through its cluster's operator (`kix deploy
    /// --operator`), not only those the fleet declares `operator = true`.
    #[arg(long)]
    pub operator: bool,
}

pub async fn exec(args: FleetDeployArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let saved = match &args.plan {
        Some(file) => Some(read_saved(file, &args.source.fleet)?),
        None => None,
    };
    let file = args.source.read(global).await?;
    let options = FleetPlanOptions {
        force_conflicts: args.force_conflicts,
        operator: args.operator,
    };
    let plan = kix_fleet::plan::plan_fleet(&file, &connect(global)?, &options).await?;
    if let (Some(saved), Some(path)) = (&saved, &args.plan) {
        let moved = saved.moved(&plan);
        if !moved.is_empty() {
            for line in &moved {
                eprintln!("  {line}");
            }
            anyhow::bail!(
                "the fleet plan in {} is no longer what a deploy would do: nothing was changed; plan again",
                path.display()
            );
        }
    }
    if args.run.output == OutputFormat::Text {
        print!("{}", summary_text(&plan));
    }
    let mut confirm = args.run.confirm.clone();
    confirm.yes |= saved.is_some();
    let run_args = FleetRunArgs {
        confirm,
        ..args.run
    };
    let question = format!(
        "Deploy fleet {} ({} members in {} waves)?",
        plan.fleet,
        plan.members.len(),
        plan.waves()
    );
    if !run_args.check_and_confirm(&plan, &question)? {
        return Ok(ExitCode::from(1));
    }
    let (events, printer) = run_args.progress(&plan);
    let options = run_args.options(events, saved.is_some())?;
    let order = (0..plan.waves()).collect();
    let outcome = kix_fleet::run::run(
        Run {
            plan: &plan,
            action: FleetAction::Deploy,
            order,
            rollback_from: &BTreeMap::new(),
        },
        &options,
    )
    .await;
    drop(options);
    let _ = printer.await;
    super::fleet::print_outcome(&outcome, run_args.output)
}

fn read_saved(file: &std::path::Path, fleet: &str) -> anyhow::Result<SavedFleetPlan> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("reading the fleet plan {}", file.display()))?;
    let saved: SavedFleetPlan = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a fleet plan", file.display()))?;
    if saved.fleet != fleet {
        anyhow::bail!(
            "{} is a plan of fleet {:?}, not {fleet:?}: nothing was changed",
            file.display(),
            saved.fleet
        );
    }
    Ok(saved)
}

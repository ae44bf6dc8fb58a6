//! `kix fleet plan <FLEET>`: every member planned against its own cluster.

use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use kix_fleet::plan::{FleetPlanOptions, SavedFleetPlan};

use super::fleet::{FleetSourceArgs, connect, summary_text};
use super::{GlobalArgs, OutputFormat};
use crate::render::{Style, plan_text};

#[derive(Debug, Args)]
pub struct FleetPlanArgs {
    #[command(flatten)]
    pub source: FleetSourceArgs,
    /// Local members take fields other field managers own (server-side
    /// apply force). Operator members plan as the operator does.
    #[arg(long)]
    pub force_conflicts: bool,
    /// Plan every member as its cluster's operator will (`kix plan --operator`),
    /// not only those the fleet declares `operator = true`.
    #[arg(long)]
    pub operator: bool,
    /// Only the summary table, not each member's plan.
    #[arg(long)]
    pub summary: bool,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t)]
    pub output: OutputFormat,
    /// Also write the fleet plan (its digest and each member's) to FILE for
    /// `kix fleet deploy --plan FILE`.
    #[arg(long, value_name = "FILE")]
    pub out: Option<std::path::PathBuf>,
    /// Exit 3 when any member's plan has changes.
    #[arg(long)]
    pub exit_code: bool,
}

pub async fn exec(args: FleetPlanArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let file = args.source.read(global).await?;
    let options = FleetPlanOptions {
        force_conflicts: args.force_conflicts,
        operator: args.operator,
    };
    let plan = kix_fleet::plan::plan_fleet(&file, &connect(global)?, &options).await?;
    match args.output {
        OutputFormat::Json => {
            crate::output::print_stdout(&crate::output::json_text(&plan)?)?;
        }
        OutputFormat::Text => {
            let mut text = format!(
                "Fleet {} ({} members, {} waves, maxParallel {}, pause {}), digest {}\n",
                plan.fleet,
                plan.members.len(),
                plan.waves(),
                plan.max_parallel,
                plan.pause,
                plan.digest
            );
            text.push_str(&summary_text(&plan));
            if !args.summary {
                for m in &plan.members {
                    if let Some(p) = m.plan() {
                        text.push_str(&format!("\n== member {} (wave {})\n", m.member, m.wave));
                        text.push_str(&plan_text(p, Style::detect(), false));
                    }
                }
            }
            crate::output::print_stdout(&text)?;
        }
    }
    if let Some(out) = &args.out {
        let mut text = serde_json::to_string_pretty(&SavedFleetPlan::of(&plan))?;
        text.push('\n');
        std::fs::write(out, text)
            .with_context(|| format!("writing the fleet plan to {}", out.display()))?;
        eprintln!(
            "fleet plan written to {} (digest {})",
            out.display(),
            plan.digest
        );
    }
    Ok(if args.exit_code && plan.has_changes() {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}

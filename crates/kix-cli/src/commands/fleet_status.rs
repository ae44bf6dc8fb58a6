//! `kix fleet status <FLEET>`: per member, what is current and healthy.

use std::process::ExitCode;

use clap::Args;
use kix_fleet::inspect::MemberStatusState;

use super::fleet::{FleetSourceArgs, connect, table};
use super::{GlobalArgs, OutputFormat};

#[derive(Debug, Args)]
pub struct FleetStatusArgs {
    #[command(flatten)]
    pub source: FleetSourceArgs,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t)]
    pub output: OutputFormat,
}

/// Exit 0 when every member runs the fleet build, Active, every object
/// Ready; 1 otherwise (a member behind, unhealthy or unreachable).
pub async fn exec(args: FleetStatusArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let file = args.source.read(global).await?;
    let members = kix_fleet::inspect::status(&file, &connect(global)?).await?;
    match args.output {
        OutputFormat::Json => crate::output::print_stdout(&crate::output::json_text(&members)?)?,
        OutputFormat::Text => {
            let mut rows = vec![
                [
                    "MEMBER",
                    "WAVE",
                    "CLUSTER",
                    "ACTIVATION",
                    "PHASE",
                    "BUILD",
                    "READY",
                    "ROLLOUT",
                ]
                .map(String::from),
            ];
            for m in &members {
                let row = match &m.state {
                    MemberStatusState::Unreachable { reason } => [
                        m.member.to_string(),
                        m.wave.to_string(),
                        m.cluster.clone(),
                        "-".into(),
                        "UNREACHABLE".into(),
                        "-".into(),
                        "-".into(),
                        reason.clone(),
                    ],
                    MemberStatusState::Read {
                        activation,
                        phase,
                        current,
                        ready,
                        objects,
                        rollout,
                        ..
                    } => [
                        m.member.to_string(),
                        m.wave.to_string(),
                        m.cluster.clone(),
                        activation.clone().unwrap_or_else(|| "-".into()),
                        phase.map_or("-", |p| p.as_str()).to_string(),
                        if *current {
                            "current"
                        } else if activation.is_some() {
                            "other"
                        } else {
                            "-"
                        }
                        .into(),
                        format!("{ready}/{objects}"),
                        rollout.clone().unwrap_or_else(|| "-".into()),
                    ],
                };
                rows.push(row);
            }
            crate::output::print_stdout(&table(&rows))?;
        }
    }
    Ok(if members.iter().all(|m| m.is_healthy_current()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

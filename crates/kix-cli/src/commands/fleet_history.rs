//! `kix fleet history <FLEET>`: the fleet's rollouts and rollbacks, newest
//! first, as the members' records name them.

use std::process::ExitCode;

use clap::Args;

use super::fleet::{FleetSourceArgs, connect, table};
use super::{GlobalArgs, OutputFormat};
use crate::output::age;

#[derive(Debug, Args)]
pub struct FleetHistoryArgs {
    #[command(flatten)]
    pub source: FleetSourceArgs,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t)]
    pub output: OutputFormat,
}

pub async fn exec(args: FleetHistoryArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let file = args.source.read(global).await?;
    let history = kix_fleet::inspect::history(&file, &connect(global)?).await?;
    match args.output {
        OutputFormat::Json => crate::output::print_stdout(&crate::output::json_text(&history)?)?,
        OutputFormat::Text => {
            let now = chrono::Utc::now();
            let mut rows = vec![["ROLLOUT", "ACTION", "AGE", "MEMBERS"].map(String::from)];
            for e in &history.entries {
                let members: Vec<String> = e
                    .members
                    .iter()
                    .map(|m| {
                        format!(
                            "{}={} {}",
                            m.member,
                            m.activation,
                            m.phase.map_or("-", |p| p.as_str())
                        )
                    })
                    .collect();
                rows.push([
                    e.rollout.clone(),
                    e.action.clone(),
                    age(e.time, now),
                    members.join(", "),
                ]);
            }
            let mut text = if history.entries.is_empty() {
                format!("fleet {} has no rollouts\n", file.spec.fleet)
            } else {
                table(&rows)
            };
            for (member, reason) in &history.unreachable {
                text.push_str(&format!("member {member}: UNREACHABLE: {reason}\n"));
            }
            crate::output::print_stdout(&text)?;
        }
    }
    Ok(if history.unreachable.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

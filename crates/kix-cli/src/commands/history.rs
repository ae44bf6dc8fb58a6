//! `kix history <CLUSTER>`: the Kix cluster's activations, newest first.

use std::fmt::Write as _;
use std::process::ExitCode;

use clap::Args;
use kix_engine::status::RecordSummary;

use super::{GlobalArgs, OutputFormat};
use crate::output::{age, json_text, print_stdout};

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// The Kix cluster.
    pub cluster: String,
    /// Show at most this many activations (newest first).
    #[arg(long, short = 'n', value_name = "N")]
    pub limit: Option<usize>,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t)]
    pub output: OutputFormat,
}

pub async fn exec(args: HistoryArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let client = crate::kube_client::client(global, None).await?;
    let all = kix_engine::records::list_all_required(&client).await?;
    let mut history = kix_engine::status::history(&all, &args.cluster);
    if let Some(limit) = args.limit {
        history.truncate(limit);
    }
    match args.output {
        OutputFormat::Json => print_stdout(&json_text(&history)?)?,
        OutputFormat::Text => {
            print_stdout(&history_text(&args.cluster, &history, chrono::Utc::now()))?
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn history_text(
    cluster: &str,
    history: &[RecordSummary],
    now: chrono::DateTime<chrono::Utc>,
) -> String {
    let mut out = String::new();
    if history.is_empty() {
        let _ = writeln!(out, "Kix cluster {cluster} has no activations");
        return out;
    }
    let rows: Vec<[String; 7]> = history
        .iter()
        .map(|r| {
            let c = &r.counts;
            [
                format!("{}{}", if r.current { "* " } else { "  " }, r.name),
                r.phase.map_or("-", |p| p.as_str()).to_string(),
                age(r.time, now),
                format!("{}@{}", r.user, r.host),
                format!(
                    "+{} ~{} -{}",
                    c.create + c.adopt,
                    c.update + c.replace,
                    c.delete
                ),
                r.path.clone(),
                r.rollback_from
                    .as_ref()
                    .map(|f| format!("rollback from {f}"))
                    .unwrap_or_default(),
            ]
        })
        .collect();
    let header = [
        "  ACTIVATION",
        "PHASE",
        "AGE",
        "BY",
        "CHANGES",
        "PATH",
        "NOTE",
    ];
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut line = |cells: [&str; 7]| {
        let mut text = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                text.push_str(cell);
            } else {
                let _ = write!(text, "{cell:<width$}  ", width = widths[i]);
            }
        }
        let _ = writeln!(out, "{}", text.trim_end());
    };
    line(header);
    for row in &rows {
        line([
            &row[0], &row[1], &row[2], &row[3], &row[4], &row[5], &row[6],
        ]);
    }
    out
}

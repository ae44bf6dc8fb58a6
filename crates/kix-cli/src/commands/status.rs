//! `kix status <CLUSTER>`: the current activation, its receipt, and the live
//! objects by package with their health; `kix status --all`: every Kix
//! cluster you can see, one line each ([`crate::clusters`]). Reads only;
//! needs no operator.

use std::fmt::Write as _;
use std::process::ExitCode;

use clap::Args;
use kix_engine::status::{BuildState, HealthState, RecordSummary, Status};

use super::{GlobalArgs, OutputFormat};
use crate::output::{age, json_text, print_stdout};

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The Kix cluster; none with `--all`: every Kix cluster you can see.
    #[arg(required_unless_present = "all")]
    pub cluster: Option<String>,
    /// Without CLUSTER: every Kix cluster you can see, one line each
    /// (phase, version, build, age, health). With CLUSTER: list its Ready
    /// objects too (by default only their count per package).
    #[arg(long, short = 'a')]
    pub all: bool,
    /// Operator mode: the same view (it needs no running operator); reports
    /// no active activation when the Activation CRD is not installed.
    #[arg(long)]
    pub operator: bool,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t)]
    pub output: OutputFormat,
}

pub async fn exec(args: StatusArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let client = crate::kube_client::client(global, None).await?;
    let Some(cluster) = args.cluster.clone() else {
        return every_cluster(&client, args.output, global).await;
    };
    if args.operator && !kix_engine::records::crds_installed(&client).await? {
        match args.output {
            OutputFormat::Json => print_stdout(&json_text(&serde_json::json!({
                "cluster": cluster, "current": null, "reason": "the Activation CRD is not installed"
            }))?)?,
            OutputFormat::Text => print_stdout(&format!(
                "Kix cluster {cluster}: no active activation (the Activation CRD is not installed)\n"
            ))?,
        }
        return Ok(ExitCode::SUCCESS);
    }
    let status = kix_engine::status::status(&client, &cluster).await?;
    match args.output {
        OutputFormat::Json => print_stdout(&json_text(&status)?)?,
        OutputFormat::Text => print_stdout(&status_text(
            &status,
            args.all,
            crate::render::Style::detect(),
            chrono::Utc::now(),
        ))?,
    }
    Ok(ExitCode::SUCCESS)
}

/// `kix status --all`: a table, or a JSON array; `-v` names the Kix
/// clusters left out.
async fn every_cluster(
    client: &kube::Client,
    output: OutputFormat,
    global: &GlobalArgs,
) -> anyhow::Result<ExitCode> {
    let (rows, skipped) = crate::clusters::visible(client).await?;
    if global.verbose > 0 {
        for s in &skipped {
            eprintln!("{}", crate::clusters::skipped_line(s));
        }
    }
    match output {
        OutputFormat::Json => print_stdout(&json_text(&rows)?)?,
        OutputFormat::Text => print_stdout(&crate::clusters::table(&rows, chrono::Utc::now()))?,
    }
    Ok(ExitCode::SUCCESS)
}

/// `alice@laptop, 5m ago, +3 ~1 -0`.
pub fn receipt_line(r: &RecordSummary, now: chrono::DateTime<chrono::Utc>) -> String {
    let c = &r.counts;
    let mut line = format!(
        "{}@{}, {} ago, {} created, {} updated, {} deleted",
        r.user,
        r.host,
        age(r.time, now),
        c.create + c.adopt,
        c.update + c.replace,
        c.delete
    );
    if let Some(from) = &r.rollback_from {
        let _ = write!(line, ", rollback from {from}");
    }
    line
}

fn paint(style: crate::render::Style, state: HealthState, text: &str) -> String {
    let code = match state {
        HealthState::Ready => "32",
        HealthState::Progressing => "33",
        HealthState::Degraded | HealthState::Missing => "31",
        HealthState::Drifted | HealthState::Deleting => "35",
    };
    if style.color {
        format!("\x1b[{code}m{text}\x1b[0m")
    } else {
        text.to_string()
    }
}

pub fn status_text(
    status: &Status,
    all: bool,
    style: crate::render::Style,
    now: chrono::DateTime<chrono::Utc>,
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Kix cluster {}", status.cluster);
    match &status.current {
        Some(c) => {
            let _ = writeln!(
                out,
                "current activation: {} ({})",
                c.name,
                c.phase.map_or("-", |p| p.as_str())
            );
            let _ = writeln!(out, "  build:   {}", c.path);
            let _ = writeln!(out, "  receipt: {}", receipt_line(c, now));
            if let Some(message) = &c.message {
                let _ = writeln!(out, "  message: {message}");
            }
        }
        None => {
            let _ = writeln!(out, "current activation: none");
        }
    }
    if let Some(latest) = &status.latest {
        let _ = writeln!(
            out,
            "latest activation: {} ({}){}",
            latest.name,
            // A record nothing has acted on yet is Pending.
            latest.phase.map_or("Pending", |p| p.as_str()),
            latest
                .message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        );
    }
    if let BuildState::Unreadable { reason } = &status.build {
        let _ = writeln!(
            out,
            "the current build cannot be read ({reason}): showing live objects only; Missing and Drifted are unknown"
        );
    }
    let c = &status.counts;
    let _ = write!(
        out,
        "objects: {} Ready, {} Progressing, {} Degraded, {} Missing, {} Drifted",
        c.ready, c.progressing, c.degraded, c.missing, c.drifted
    );
    if c.deleting > 0 {
        let _ = write!(out, ", {} Deleting", c.deleting);
    }
    let _ = writeln!(out);
    for p in &status.packages {
        let _ = write!(out, "\npackage {}", p.name);
        if let Some(v) = &p.version {
            let _ = write!(out, " {v}");
        }
        let _ = writeln!(out, " ({}/{} Ready)", p.counts.ready, p.counts.total());
        let mut hidden = 0;
        for o in &p.objects {
            if o.health == HealthState::Ready && !all && !o.extra {
                hidden += 1;
                continue;
            }
            let mut line = format!(
                "  {} {}",
                paint(style, o.health, &format!("{:<11}", o.health.as_str())),
                o.object
            );
            if o.extra {
                line.push_str(" (not in the build)");
            }
            if let Some(reason) = &o.reason {
                let _ = write!(line, ": {reason}");
            }
            if let Some(rule) = &o.rule {
                let _ = write!(line, " (rule: {rule})");
            }
            let _ = writeln!(out, "{line}");
        }
        if hidden > 0 {
            let _ = writeln!(
                out,
                "  {} {hidden} objects",
                paint(style, HealthState::Ready, &format!("{:<11}", "Ready"))
            );
        }
    }
    if !status.package_instances.is_empty() {
        let _ = writeln!(out, "\npackage instances:");
        for i in &status.package_instances {
            let _ = writeln!(
                out,
                "  {:<24} {:<10} {:<10} {}{}",
                i.name,
                i.version,
                i.phase.map_or("-".to_string(), |p| format!("{p:?}")),
                i.activation,
                i.health
                    .as_deref()
                    .map(|h| format!("  {h}"))
                    .unwrap_or_default()
            );
        }
    }
    out
}

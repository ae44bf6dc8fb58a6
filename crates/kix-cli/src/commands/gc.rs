//! `kix gc <CLUSTER>`: retire the activations retention no longer keeps,
//! release the objects only they name, drop their Nix GC roots.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use kix_engine::gates::{self, Refusal};
use kix_engine::gc::{GcAction, GcPlan, GcReport, Retention, parse_age};
use kix_nix::GcRoots;

use super::{GlobalArgs, OutputFormat};
use crate::output::{json_text, print_stdout};

#[derive(Debug, Args)]
pub struct GcArgs {
    /// The Kix cluster.
    pub cluster: String,
    /// Superseded activations to keep [default: the current build's
    /// settings.keep, else 5]
    #[arg(long, value_name = "N")]
    pub keep: Option<u32>,
    /// Also retire Superseded and Failed activations older than this (30d,
    /// 12h, 2w) [default: the current build's settings.maxAge, else none]
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub max_age: Option<Duration>,
    /// Show what would be retired; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Do not ask for confirmation.
    #[arg(long, short)]
    pub yes: bool,
    /// Allow up to N deletions when gc exceeds the Kix cluster's deletion
    /// budget (default budget: 25 % of its objects, at least 10).
    #[arg(long, value_name = "N")]
    pub max_deletions: Option<u32>,
    /// Accept every deletion gc lists, beyond the deletion budget.
    #[arg(long, conflicts_with = "max_deletions")]
    pub accept_deletions: bool,
    /// Delete the retired records and let the operator's finalizer release
    /// their objects; waits up to 300 s per record.
    #[arg(long)]
    pub operator: bool,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t)]
    pub output: OutputFormat,
}

pub async fn exec(args: GcArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let clients = crate::kube_client::clients(global, None).await?;
    let all = kix_engine::records::list_all_required(clients.own()).await?;
    let current = kix_engine::records::current(&all, &args.cluster);
    // gc acts for the Kix cluster as the account its records name (the
    // current one's, else the newest's), as a deploy of its build does.
    let named = current
        .or_else(|| kix_engine::records::of_cluster(&all, &args.cluster).pop())
        .and_then(|r| r.spec.service_account.clone());
    let client = clients.acting_for(named.as_ref())?.client;
    // Retention from the flags, else the current build's kix.json; the
    // deletion budget from it.
    let settings = current.and_then(|c| {
        let path = c.spec.source.path.clone();
        match kix_manifest::read_tree(Path::new(&path), &kix_manifest::ReadOptions::default()) {
            Ok(build) => Some(build.settings),
            Err(err) => {
                tracing::warn!(
                    "cannot read the current build {path} for its retention settings: {err}"
                );
                None
            }
        }
    });
    let retention = Retention::resolve(args.keep, args.max_age, settings.as_ref())
        .map_err(anyhow::Error::msg)?;
    let roots = GcRoots::from_env();
    let plan = kix_engine::gc::plan(
        &client,
        &args.cluster,
        retention,
        &roots,
        chrono::Utc::now(),
    )
    .await?;

    if args.dry_run || args.output == OutputFormat::Text {
        match args.output {
            OutputFormat::Json if args.dry_run => print_stdout(&json_text(&plan)?)?,
            OutputFormat::Json => {}
            OutputFormat::Text => print_stdout(&plan_text(&plan, args.dry_run))?,
        }
    }
    if args.dry_run || !plan.has_work() {
        if !plan.has_work() && args.output == OutputFormat::Json && !args.dry_run {
            print_stdout(&json_text(
                &serde_json::json!({"plan": plan, "report": GcReport::default()}),
            )?)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let question = format!(
        "Retire {} activation(s) of Kix cluster {} and delete {} object(s)?",
        plan.retired.len(),
        plan.cluster,
        plan.objects
            .iter()
            .filter(|o| o.action == GcAction::Delete)
            .count()
    );
    let confirm = crate::args::ConfirmArgs {
        yes: args.yes,
        current_activation: None,
        accept_migrations: false,
        max_deletions: args.max_deletions,
        accept_deletions: args.accept_deletions,
    };
    // Refused before anything is deleted, like deploy.
    let budget = plan.deletion_budget(settings.as_ref().and_then(|s| s.deletion_budget));
    if let Err(Refusal::DeletionBudget(check)) =
        gates::deletion_budget(&budget, confirm.deletion_consent())
    {
        anyhow::bail!(
            "gc exceeds the deletion budget: nothing was changed: it {}",
            check.explain()
        );
    }
    if args.operator {
        super::operator::require_records(&client).await?;
    }
    if !crate::args::confirm(&confirm, &question)? {
        return Ok(ExitCode::from(1));
    }
    if args.operator {
        // Planned again right before the records go: nothing unconfirmed.
        let plan = plan.again(&client, &roots).await?;
        return gc_with_operator(&client, &plan).await;
    }
    let holder = kix_engine::deploy::DeployOptions::default().holder;
    let holder = format!("{holder} (gc)");
    let report = kix_engine::gc::execute(&client, &plan, &roots, &holder, named.as_ref()).await?;
    // An object gc could not delete (refused) is reported, not waited for.
    let until = std::time::Instant::now()
        + if report.failed_objects.is_empty() {
            super::operator::gc_wait()
        } else {
            Duration::ZERO
        };
    let remaining = wait_objects_gone(&client, &plan, None, until).await?;
    match args.output {
        OutputFormat::Json => print_stdout(&json_text(
            &serde_json::json!({"plan": plan, "report": report, "remaining": remaining}),
        )?)?,
        OutputFormat::Text => {
            let mut text = report_text(&report);
            for r in &remaining {
                let _ = writeln!(text, "not gone: {r}");
            }
            print_stdout(&text)?
        }
    }
    Ok(if report.is_success() && remaining.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn plan_text(plan: &GcPlan, dry_run: bool) -> String {
    let mut out = String::new();
    let r = &plan.retention;
    let _ = write!(
        out,
        "Kix cluster {}: keep {} Superseded ({})",
        plan.cluster, r.keep, r.keep_from
    );
    if let (Some(age), Some(from)) = (&r.max_age, r.max_age_from) {
        let _ = write!(out, ", max age {age} ({from})");
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "current: {}; kept: {}",
        plan.current.as_deref().unwrap_or("none"),
        if plan.kept.is_empty() {
            "none".to_string()
        } else {
            plan.kept.join(", ")
        }
    );
    for note in &plan.notes {
        let _ = writeln!(out, "note: {note}");
    }
    if plan.retired.is_empty() {
        let _ = writeln!(out, "nothing to retire");
    } else {
        let _ = writeln!(out, "\n{}retire:", if dry_run { "would " } else { "" });
        for record in &plan.retired {
            let _ = writeln!(
                out,
                "  {:<24} {:<10} {}  ({})",
                record.name,
                record.phase.map_or("-", |p| p.as_str()),
                record.path,
                record.reasons.join(", ")
            );
        }
    }
    if !plan.objects.is_empty() {
        let _ = writeln!(out, "\nobjects they name:");
        for o in &plan.objects {
            let action = match o.action {
                GcAction::Delete => "delete",
                GcAction::Repoint => "repoint",
                GcAction::Keep => "keep",
            };
            let mut line = format!("  {action:<8} {}", o.object);
            if o.destructive {
                line.push_str(" (destructive)");
            }
            if o.action == GcAction::Repoint {
                let _ = write!(line, " → {}", o.after.join(","));
            }
            if let Some(note) = &o.note {
                let _ = write!(line, " [{note}]");
            }
            let _ = writeln!(out, "{line}");
        }
    }
    if !plan.orphaned_roots.is_empty() {
        let _ = writeln!(
            out,
            "\nGC roots of records that no longer exist: {}",
            plan.orphaned_roots.join(", ")
        );
    }
    if !plan.unrooted.is_empty() {
        let _ = writeln!(
            out,
            "kept records to root here: {}",
            plan.unrooted.join(", ")
        );
    }
    out
}

fn report_text(report: &GcReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nretired {} record(s): {}",
        report.deleted_records.len(),
        report.deleted_records.join(", ")
    );
    let _ = writeln!(
        out,
        "objects: {} deleted, {} re-pointed; GC roots: {} removed, {} added",
        report.deleted_objects.len(),
        report.repointed_objects.len(),
        report.removed_roots.len(),
        report.added_roots.len()
    );
    for f in &report.failed_objects {
        let _ = writeln!(out, "could not release {}: {}", f.name, f.reason);
    }
    for f in &report.failed_records {
        let _ = writeln!(out, "could not delete record {}: {}", f.name, f.reason);
    }
    for f in &report.root_errors {
        let _ = writeln!(out, "GC root of {}: {}", f.name, f.reason);
    }
    out
}

/// `gc --operator`: release each retired record's objects and delete it.
/// An operator record is deleted and its finalizer (the operator) releases
/// them; a record the local engine wrote has no finalizer, so the CLI
/// releases its objects first with the finalizer's own code. A record is
/// reported deleted only when it and the objects gc deletes are gone.
async fn gc_with_operator(client: &kube::Client, plan: &GcPlan) -> anyhow::Result<ExitCode> {
    let api: kube::Api<kix_api::Activation> = kube::Api::all(client.clone());
    let retiring: BTreeSet<String> = plan.retired.iter().map(|r| r.name.clone()).collect();
    let mut failed = BTreeSet::new();
    for retired in &plan.retired {
        let name = &retired.name;
        if let Some(record) = api.get_opt(name).await?
            && !record.is_operator()
        {
            let report = kix_engine::retire::release_objects(client, &record, &retiring).await?;
            if !report.failed.is_empty() {
                for (object, reason) in &report.failed {
                    eprintln!(
                        "error: {name} (written by the local engine): cannot release {object}: {reason}"
                    );
                }
                failed.insert(name.clone());
                continue;
            }
        }
        // Up to 300 s per record: for the record and the objects it named.
        let until = std::time::Instant::now() + super::operator::gc_wait();
        kix_engine::records::delete(client, name).await?;
        if let Err(err) = super::operator::wait_deleted(client, name, until).await {
            eprintln!("error: {err:#}");
            failed.insert(name.clone());
            continue;
        }
        let held: Vec<String> = wait_objects_gone(client, plan, Some(name), until)
            .await?
            .iter()
            .map(|r| r.to_string())
            .collect();
        if held.is_empty() {
            println!("deleted {name}");
        } else {
            eprintln!(
                "error: {name}: the record is gone but {} object(s) it named are not: {}",
                held.len(),
                held.join("; ")
            );
            failed.insert(name.clone());
        }
    }
    if failed.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        anyhow::bail!(
            "{} record(s) could not be deleted with their objects: {}",
            failed.len(),
            failed.into_iter().collect::<Vec<_>>().join(", ")
        )
    }
}

/// Waits until `until` for the objects `plan` deletes (those naming
/// `record`, when given) to be gone; what is still there then, with what
/// holds it.
async fn wait_objects_gone(
    client: &kube::Client,
    plan: &GcPlan,
    record: Option<&str>,
    until: std::time::Instant,
) -> anyhow::Result<Vec<kix_engine::gc::Remaining>> {
    loop {
        let mut remaining = plan.remaining(client).await?;
        if let Some(name) = record {
            remaining.retain(|r| r.activations.iter().any(|a| a == name));
        }
        if remaining.is_empty() || std::time::Instant::now() >= until {
            return Ok(remaining);
        }
        tokio::time::sleep(super::operator::POLL_EVERY).await;
    }
}

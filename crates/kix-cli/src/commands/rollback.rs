//! `kix rollback <CLUSTER> [--to NAME]`: re-apply the build of a Superseded
//! activation as a new activation whose receipt names where it came from.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use kix_api::{Activation, Phase};
use kix_engine::deploy::{DeployOptions, OnError, ReceiptInfo};
use kix_engine::plan::PlanOptions;
use kix_manifest::StorePath;
use kube::ResourceExt;

use super::deploy::{ConfirmArgs, parse_duration};
use super::plan::print_plan;
use super::{GlobalArgs, OutputFormat};
use crate::progress;
use crate::tui::TuiArgs;

#[derive(Debug, Args)]
pub struct RollbackArgs {
    /// The Kix cluster.
    pub cluster: String,
    /// The activation to go back to [default: the newest Superseded one whose
    /// build differs from the current one]
    #[arg(long, value_name = "NAME")]
    pub to: Option<String>,
    #[command(flatten)]
    pub confirm: ConfirmArgs,
    /// How long to wait for objects to become healthy (e.g. 90s, 5m).
    #[arg(long, value_parser = parse_duration, default_value = "5m")]
    pub timeout: Duration,
    /// Take fields other field managers own (server-side apply force).
    #[arg(long)]
    pub force_conflicts: bool,
    #[command(flatten)]
    pub ui: TuiArgs,
    /// Let the operator apply: point the current record at the target's store
    /// path, then wait for the operator.
    #[arg(long)]
    pub operator: bool,
    /// Output format of the plan and the result.
    #[arg(long, short, value_enum, default_value_t)]
    pub output: OutputFormat,
}

/// The rollback target among a cluster's records (oldest first): `--to`, or
/// the newest Superseded record whose build is not the current one.
pub fn select_target<'a>(
    records: &[&'a Activation],
    current: Option<&Activation>,
    to: Option<&str>,
    cluster: &str,
) -> anyhow::Result<&'a Activation> {
    let current_path = current.map(|c| c.spec.source.path.as_str());
    match to {
        Some(name) => {
            let Some(record) = records.iter().find(|r| r.name_any() == name) else {
                bail!(
                    "Kix cluster {cluster:?} has no activation {name:?} (kix history {cluster} lists them)"
                );
            };
            if current.is_some_and(|c| c.name_any() == name) {
                bail!("{name} is the current activation of Kix cluster {cluster:?}: nothing to roll back to");
            }
            match record.phase() {
                Some(Phase::Superseded) => Ok(record),
                phase => bail!(
                    "{name} is {}, not Superseded: only a build that was applied and then replaced can be rolled back to",
                    phase.map_or("without a phase", Phase::as_str)
                ),
            }
        }
        None => records
            .iter()
            .rev()
            .filter(|r| r.phase() == Some(Phase::Superseded))
            .find(|r| Some(r.spec.source.path.as_str()) != current_path)
            .copied()
            .with_context(|| {
                format!(
                    "Kix cluster {cluster:?} has no Superseded activation with another build to roll back to (kix history {cluster} lists them)"
                )
            }),
    }
}

pub async fn exec(args: RollbackArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let client = crate::kube_client::client(global, None).await?;
    let all = kix_engine::records::list_all_required(&client).await?;
    let mine = kix_engine::records::of_cluster(&all, &args.cluster);
    if mine.is_empty() {
        bail!("Kix cluster {:?} has no activations", args.cluster);
    }
    let current = kix_engine::records::current(&all, &args.cluster);
    let target = select_target(&mine, current, args.to.as_deref(), &args.cluster)?;
    let target_name = target.name_any();
    let path = target.spec.source.path.clone();
    if args.operator {
        let Some(current) = current else {
            bail!(
                "Kix cluster {:?} has no current activation to point at {target_name}'s build",
                args.cluster
            );
        };
        return rollback_with_operator(&client, &args, current, &target_name, &path).await;
    }

    // Refuse before any change when the build is gone from the store.
    let store_path = StorePath::parse(&path)
        .with_context(|| format!("activation {target_name} names {path:?}"))?;
    let check = store_path.clone();
    let valid = tokio::task::spawn_blocking(move || kix_nix::is_valid(&check))
        .await
        .context("the store check failed")??;
    if !valid {
        bail!(
            "the build of {target_name}, {path}, is no longer in the Nix store (garbage-collected): nothing was changed"
        );
    }
    let read_path = path.clone();
    let build = tokio::task::spawn_blocking(move || {
        kix_manifest::read_tree(Path::new(&read_path), &kix_manifest::ReadOptions::default())
    })
    .await
    .context("reading the build failed")?
    .with_context(|| format!("reading the build of {target_name} ({path})"))?;
    if build.cluster != args.cluster {
        bail!(
            "the build of {target_name} ({path}) is for Kix cluster {:?}, not {:?}",
            build.cluster,
            args.cluster
        );
    }

    let plan = kix_engine::plan::plan(
        &client,
        &build,
        store_path.as_str(),
        &PlanOptions {
            reconcile: false,
            force_conflicts: args.force_conflicts,
            prune: true,
            ..PlanOptions::default()
        },
    )
    .await?;
    // JSON: one document at the end, the plan in it.
    let plan_json = match args.output {
        OutputFormat::Text => {
            println!(
                "Rolling back Kix cluster {} to the build of {target_name}",
                args.cluster
            );
            print_plan(&plan, args.output, false)?;
            serde_json::Value::Null
        }
        OutputFormat::Json => serde_json::to_value(&plan)?,
    };
    let from = current.map(|c| c.name_any());
    let mut options = DeployOptions {
        timeout: args.timeout,
        on_error: OnError::Abort,
        prune: true,
        force_conflicts: args.force_conflicts,
        accept_migrations: args.confirm.accept_migrations,
        deletions: args.confirm.deletion_consent(),
        current_activation: args.confirm.current_activation.clone(),
        receipt: ReceiptInfo {
            rollback_from: from.clone(),
            ..ReceiptInfo::local()
        },
        ..DeployOptions::default()
    };
    kix_engine::deploy::check_plan(&plan, &build, &options)?;
    if !super::deploy::confirm(
        &args.confirm,
        &format!(
            "Roll Kix cluster {} back to {path} (the build of {target_name})?",
            args.cluster
        ),
    )? {
        return Ok(ExitCode::from(1));
    }
    let (tx, printer) = progress::start_ui(
        &args.ui,
        &plan,
        "rollback",
        args.output == OutputFormat::Text,
    );
    options.events = Some(tx);
    let outcome = kix_engine::deploy::deploy(&client, &build, plan, &options).await;
    drop(options);
    let _ = printer.await;
    let outcome = outcome?;
    match args.output {
        OutputFormat::Json => {
            let value = serde_json::json!({
                "target": target_name,
                "path": path,
                "rollbackFrom": from,
                "plan": plan_json,
                "outcome": outcome,
            });
            crate::output::print_stdout(&crate::output::json_text(&value)?)?;
        }
        OutputFormat::Text => {
            let name = outcome.activation.as_deref().unwrap_or("-");
            println!("{name}: {} — {}", outcome.phase, outcome.message);
        }
    }
    Ok(if outcome.phase == Phase::Active {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `rollback --operator`: the current record's spec gets the target's store
/// path (its generation changes), and the operator applies it like a new build.
async fn rollback_with_operator(
    client: &kube::Client,
    args: &RollbackArgs,
    current: &Activation,
    target_name: &str,
    path: &str,
) -> anyhow::Result<ExitCode> {
    use super::operator;
    operator::warn_local_engine_flags();
    let name = current.name_any();
    if let Some(expected) = &args.confirm.current_activation
        && expected != &name
    {
        bail!(
            "--current-activation {expected}: the current activation of Kix cluster {:?} is {name}",
            args.cluster
        );
    }
    operator::require_records(client).await?;
    if !super::deploy::confirm(
        &args.confirm,
        &format!(
            "Point {name} at {path} (the build of {target_name}) and let the operator apply it?"
        ),
    )? {
        return Ok(ExitCode::from(1));
    }
    let api: kube::Api<Activation> = kube::Api::all(client.clone());
    let patch = serde_json::json!({"spec": {
        "source": {"path": path, "flake": null, "revision": null},
        "receipt": {"rollbackFrom": name, "time": chrono::Utc::now(), "user": kix_engine::deploy::ReceiptInfo::local().user},
    }});
    let updated = api
        .patch(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .with_context(|| format!("pointing {name} at {path}"))?;
    eprintln!("{name} now names {path}; waiting for the operator");
    let phase = operator::wait_for_operator(client, &name, updated.metadata.generation).await?;
    println!("{name}: {phase}");
    Ok(if phase == Phase::Active {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

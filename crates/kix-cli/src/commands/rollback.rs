//! `kix rollback <CLUSTER> [--to NAME]`: re-apply the build of a Superseded
//! activation as a new activation whose receipt names where it came from.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use kix_api::{Activation, Phase};
use kix_engine::deploy::{DeployOptions, OnError, ReceiptInfo};
use kix_engine::plan::PlanOptions;
use kube::ResourceExt;

use super::{GlobalArgs, OutputFormat};
use crate::args::{ConfirmArgs, confirm};
use crate::output::print_plan;
use crate::progress;
use crate::source::read_store_build;
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
    #[arg(long, value_parser = kix_engine::duration::parse, default_value = "5m")]
    pub timeout: Duration,
    /// Take fields other field managers own (server-side apply force).
    #[arg(long)]
    pub force_conflicts: bool,
    #[command(flatten)]
    pub ui: TuiArgs,
    /// Let the operator apply: plan the target's build, confirm, write a new
    /// Activation record for it, then wait for the operator.
    #[arg(long)]
    pub operator: bool,
    /// With --operator, when the target's build names a cache
    /// (settings.cache): the key to publish it there with; without one,
    /// the cache must hold it already.
    #[command(flatten)]
    pub key: super::publish::SignKeyArgs,
    /// Output format of the plan and the result.
    #[arg(long, short, value_enum, default_value_t)]
    pub output: OutputFormat,
}

/// The rollback target among a cluster's records (oldest first): `--to`, or
/// the newest replaced record (Superseded, or older than `current`, which
/// supersedes it) whose build is not the current one.
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
                _ if kix_engine::records::was_replaced(record, current) => Ok(record),
                phase => bail!(
                    "{name} is {}, not Superseded: only a build that was applied and then replaced can be rolled back to",
                    phase.map_or("without a phase", Phase::as_str)
                ),
            }
        }
        None => records
            .iter()
            .rev()
            .filter(|r| kix_engine::records::was_replaced(r, current))
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
    let clients = crate::kube_client::clients(global, None).await?;
    let client = clients.own().clone();
    let all = kix_engine::records::list_all_required(&client).await?;
    let mine = kix_engine::records::of_cluster(&all, &args.cluster);
    if mine.is_empty() {
        bail!("Kix cluster {:?} has no activations", args.cluster);
    }
    // The record whose build is live (Active or Degraded): a newer record
    // still Pending or Applying is not what the rollback goes back from.
    let current = kix_engine::records::applied(&all, &args.cluster);
    let target = select_target(&mine, current, args.to.as_deref(), &args.cluster)?;
    if let Some(warning) = current.and_then(super::operator::host_declared_warning) {
        eprintln!("{warning}");
    }
    let target_name = target.name_any();
    let path = target.spec.source.path.clone();
    if args.operator {
        super::operator::warn_local_engine_flags();
        super::operator::require_records(&client).await?;
    }
    // Refuse before any change when the build is gone from the store (the
    // operator would fail on it too, in both modes).
    let (store_path, build) =
        read_store_build(&format!("the build of {target_name}"), &path, &args.cluster).await?;
    // The target's build acts as the ServiceAccount it names, as `kix
    // deploy` of it does: its plan, writes and record are that account's.
    let client = clients.for_build(&build.settings)?.client;

    // Operator mode shows the operator's plan.
    let plan_options = if args.operator {
        super::operator::plan_options()
    } else {
        PlanOptions {
            reconcile: false,
            force_conflicts: args.force_conflicts,
            prune: true,
            ..PlanOptions::default()
        }
    };
    let plan = kix_engine::plan::plan(&client, &build, store_path.as_str(), &plan_options).await?;
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
        force_conflicts: args.force_conflicts || args.operator,
        accept_migrations: args.confirm.accept_migrations,
        deletions: args.confirm.deletion_consent(),
        current_activation: args.confirm.current_activation.clone(),
        receipt: ReceiptInfo {
            rollback_from: from.clone(),
            ..ReceiptInfo::local()
        },
        // A rollback plans again under the Lease before it acts.
        replan: true,
        ..DeployOptions::default()
    };
    kix_engine::deploy::check_plan(&plan, &build, &options)?;
    let question = format!(
        "Roll Kix cluster {} back to {path} (the build of {target_name}){}?",
        args.cluster,
        if args.operator {
            " through the operator"
        } else {
            ""
        }
    );
    if !confirm(&args.confirm, &question)? {
        return Ok(ExitCode::from(1));
    }
    let summary = serde_json::json!({
        "target": target_name,
        "path": path,
        "rollbackFrom": from,
        "plan": plan_json,
    });
    if args.operator {
        options.engine = kix_api::Engine::Operator;
        // The operator fetches the target from the build's cache: it is
        // there (pushed now, or checked) before the record is written.
        let progress = args.output == OutputFormat::Text && !global.quiet;
        super::publish::target_source(
            &build,
            &path,
            &args.key,
            target,
            progress,
            &mut options.receipt,
        )
        .await?;
        return rollback_with_operator(&client, &plan, &options, args.output, summary).await;
    }
    let text = args.output == OutputFormat::Text;
    let outcome =
        progress::deploy_with_ui(&client, &build, plan, options, &args.ui, "rollback", text)
            .await?;
    match args.output {
        OutputFormat::Json => {
            let mut value = summary;
            value["outcome"] = serde_json::to_value(&outcome)?;
            crate::output::print_stdout(&crate::output::json_text(&value)?)?;
        }
        OutputFormat::Text => crate::output::print_outcome_line(&outcome),
    }
    Ok(crate::output::exit_for(outcome.phase))
}

/// `rollback --operator`: a new operator record for the target's build,
/// with the confirmed plan's receipt (`rollbackFrom`: the record that was
/// current), then the operator's result. The current record is never
/// rewritten: whatever engine wrote it, it stays current until the new
/// record is applied.
async fn rollback_with_operator(
    client: &kube::Client,
    plan: &kix_engine::plan::Plan,
    options: &DeployOptions,
    output: OutputFormat,
    summary: serde_json::Value,
) -> anyhow::Result<ExitCode> {
    use super::operator;
    let record = operator::create_record(
        client,
        plan,
        kix_engine::deploy::activation_spec(plan, options),
    )
    .await?;
    let name = record.name_any();
    eprintln!("recorded {name}; waiting for the operator");
    let phase = operator::wait_for_operator(client, &name).await?;
    match output {
        OutputFormat::Json => {
            let mut value = summary;
            value["activation"] = serde_json::json!(name);
            value["phase"] = serde_json::json!(phase);
            crate::output::print_stdout(&crate::output::json_text(&value)?)?;
        }
        OutputFormat::Text => println!("{name}: {phase}"),
    }
    Ok(crate::output::exit_for(phase))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(n: u64, path: &str, phase: Phase) -> Activation {
        kix_testkit::records::activation("c", n, path, phase)
    }

    fn target(records: &[Activation], to: Option<&str>) -> Result<String, String> {
        let mine: Vec<&Activation> = records.iter().collect();
        let current = kix_engine::records::applied(records, "c");
        select_target(&mine, current, to, "c")
            .map(ResourceExt::name_any)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_target_is_the_newest_replaced_record_with_another_build() {
        let records = [
            record(1, "/nix/store/a", Phase::Superseded),
            record(2, "/nix/store/b", Phase::Superseded),
            record(3, "/nix/store/b", Phase::Failed),
            record(4, "/nix/store/c", Phase::Active),
        ];
        assert_eq!(target(&records, None), Ok("c-2".into()));
        assert_eq!(target(&records, Some("c-1")), Ok("c-1".into()));
        let failed = target(&records, Some("c-3")).expect_err("a Failed record");
        assert!(failed.contains("c-3 is Failed, not Superseded"), "{failed}");
        let current = target(&records, Some("c-4")).expect_err("the current one");
        assert!(current.contains("is the current activation"), "{current}");
    }

    #[test]
    fn right_after_a_deploy_the_record_it_replaces_is_the_target_before_it_is_marked() {
        // The deploy of c-2 settled Active; the operator marks c-1
        // Superseded moments later.
        let records = [
            record(1, "/nix/store/a", Phase::Active),
            record(2, "/nix/store/b", Phase::Active),
        ];
        assert_eq!(target(&records, None), Ok("c-1".into()));
        assert_eq!(target(&records, Some("c-1")), Ok("c-1".into()));
        // Nothing replaced yet: nothing to go back to.
        let first = [record(1, "/nix/store/a", Phase::Active)];
        let none = target(&first, None).expect_err("nothing before");
        assert!(none.contains("has no Superseded activation"), "{none}");
    }
}

//! `kix deploy <CLUSTER>`: build, plan, confirm, record, apply, wait, prune.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, ValueEnum};
use kix_engine::deploy::{DeployOptions, OnError, PruneMode, ReceiptInfo};

use super::{GlobalArgs, OutputFormat};
use crate::args::EngineArgs;
use crate::output::print_plan;
use crate::progress;
use crate::source::{SourceArgs, read_store_build};

#[derive(Debug, Args)]
pub struct DeployArgs {
    /// The Kix cluster (an attribute of `kixClusters` in the flake).
    pub cluster: String,
    #[command(flatten)]
    pub source: SourceArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub confirm: ConfirmArgs,
    /// How long to wait for objects to become healthy (e.g. 90s, 5m).
    #[arg(long, value_parser = kix_engine::duration::parse, default_value = "5m")]
    pub timeout: Duration,
    /// What a failed object or health wait does to the rest of the deploy.
    #[arg(long, value_enum, default_value_t = OnErrorArg::Abort)]
    pub on_error: OnErrorArg,
    /// Deletion propagation of pruned objects.
    #[arg(long, value_enum, default_value_t = PruneModeArg::Background)]
    pub prune_mode: PruneModeArg,
    /// Allow a build with no objects to prune everything the cluster owns.
    #[arg(long)]
    pub allow_empty: bool,
    /// Only plan (same as `kix plan`); change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Server-side applies in flight at once.
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    #[command(flatten)]
    pub ui: crate::tui::TuiArgs,
    /// Run the plan saved in FILE by `kix plan --out FILE`: its build is
    /// re-planned against the live state and deployed only when the result
    /// is the saved plan (same digest); otherwise nothing changes and what
    /// moved is printed. No question is asked: the saved plan was reviewed.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["flake", "path"])]
    pub plan: Option<std::path::PathBuf>,
    /// Let the in-cluster operator apply: write the Activation record, then
    /// wait for the operator to finish it.
    #[arg(long)]
    pub operator: bool,
    /// With --operator and a build whose settings.cache is set: the key
    /// the build is signed with when it is pushed there.
    #[command(flatten)]
    pub key: super::publish::SignKeyArgs,
    /// Output format of the plan and the result.
    #[arg(long, short, value_enum, default_value_t)]
    pub output: OutputFormat,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum OnErrorArg {
    Abort,
    Continue,
    Rollback,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum PruneModeArg {
    Background,
    Foreground,
    Orphan,
}

use crate::args::{ConfirmArgs, confirm};

pub async fn exec(args: DeployArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let saved = match &args.plan {
        Some(file) => Some(read_saved_plan(file, &args.cluster)?),
        None => None,
    };
    // Operator mode shows the operator's plan: its engine settings, not the
    // local-engine flags. A saved plan runs with the options it was made
    // with, for the executor it was made for.
    if args.operator {
        super::operator::warn_local_engine_flags();
    }
    let plan_options = match (&saved, &args.plan) {
        (Some(saved), Some(file)) => saved_plan_options(saved, file, &args)?,
        _ if args.operator => super::operator::plan_options(),
        _ => args.engine.plan_options(),
    };
    let (path, build, client, plan) =
        plan_to_deploy(&args, global, saved.as_ref(), &plan_options).await?;
    if let (Some(saved), Some(file)) = (&saved, &args.plan) {
        refuse_moved(saved, file, &plan)?;
    }
    print_plan(&plan, args.output, false)?;
    super::operator::warn_if_host_declared(&client, plan.current_activation.as_deref()).await;
    if args.dry_run {
        return Ok(ExitCode::SUCCESS);
    }
    let mut options = deploy_options(&args, &plan_options, saved.as_ref());
    // A saved plan was reviewed: it is the confirmation; the engine still
    // plans again under the Lease before it acts.
    let mut confirm_args = args.confirm.clone();
    confirm_args.yes |= saved.is_some();
    if args.operator {
        let publish = super::publish::Publish::of(&build, &args.key, !global.quiet)?;
        return deploy_with_operator(&client, &build, &plan, options, &confirm_args, publish).await;
    }
    // Refusals first: nothing is asked or changed when the plan cannot run.
    kix_engine::deploy::check_plan(&plan, &build, &options)?;
    if plan.has_changes()
        && !confirm(
            &confirm_args,
            &format!("Deploy {} to Kix cluster {}?", path, build.cluster),
        )?
    {
        return Ok(ExitCode::from(1));
    }
    // Asked on a terminal: time passed since planning, so the engine plans
    // again before it acts.
    options.replan = !confirm_args.yes || saved.is_some();
    let text = args.output == OutputFormat::Text;
    let outcome =
        progress::deploy_with_ui(&client, &build, plan, options, &args.ui, "deploy", text).await?;
    kix_engine::drop_later(build);
    match args.output {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&outcome)?),
        OutputFormat::Text => crate::output::print_outcome_line(&outcome),
    }
    Ok(crate::output::exit_for(outcome.phase))
}

/// The build a deploy runs and its plan: the saved plan's store path,
/// planned again, or the source built and read while the cluster's first
/// reads start.
async fn plan_to_deploy(
    args: &DeployArgs,
    global: &GlobalArgs,
    saved: Option<&kix_engine::seal::SavedPlan>,
    plan_options: &kix_engine::plan::PlanOptions,
) -> anyhow::Result<(
    kix_manifest::StorePath,
    kix_manifest::Build,
    kube::Client,
    kix_engine::plan::Plan,
)> {
    Ok(match saved {
        Some(saved) => {
            let (path, build) =
                read_store_build("the build the plan names", &saved.store_path, &args.cluster)
                    .await?;
            let client = crate::kube_client::client_for_build(global, &build.settings).await?;
            let plan = kix_engine::plan::plan(&client, &build, path.as_str(), plan_options).await?;
            (path, build, client, plan)
        }
        None => {
            let read = args
                .source
                .build_and_read_for_plan(&args.cluster, global, plan_options)
                .await?;
            let plan = kix_engine::plan::plan_prefetched(
                &read.client,
                &read.build,
                read.path.as_str(),
                plan_options,
                read.prefetched,
            )
            .await?;
            (read.path, read.build, read.client, plan)
        }
    })
}

/// A saved plan runs only as saved: what moved since, on stderr, and
/// nothing changed.
fn refuse_moved(
    saved: &kix_engine::seal::SavedPlan,
    file: &std::path::Path,
    plan: &kix_engine::plan::Plan,
) -> anyhow::Result<()> {
    let moved = saved.moved(plan);
    if !moved.is_empty() {
        for line in &moved {
            eprintln!("  {line}");
        }
        anyhow::bail!(
            "the plan in {} is no longer what a deploy would do ({} change(s) above, - saved, + now): nothing was changed; plan again",
            file.display(),
            moved.len()
        );
    }
    Ok(())
}

/// The engine's options of a deploy: what was planned (prune, conflicts)
/// from the plan's options, the rest from the flags.
fn deploy_options(
    args: &DeployArgs,
    plan_options: &kix_engine::plan::PlanOptions,
    saved: Option<&kix_engine::seal::SavedPlan>,
) -> DeployOptions {
    let mut options = DeployOptions {
        timeout: args.timeout,
        on_error: match args.on_error {
            OnErrorArg::Abort => OnError::Abort,
            OnErrorArg::Continue => OnError::Continue,
            OnErrorArg::Rollback => OnError::Rollback,
        },
        // What was planned is what runs: the plan's options, not the flags
        // (the same unless the plan was saved).
        prune: plan_options.prune,
        prune_mode: match args.prune_mode {
            PruneModeArg::Background => PruneMode::Background,
            PruneModeArg::Foreground => PruneMode::Foreground,
            PruneModeArg::Orphan => PruneMode::Orphan,
        },
        force_conflicts: plan_options.force_conflicts,
        yield_to_kix_clusters: plan_options.yield_to_kix_clusters,
        accept_migrations: args.confirm.accept_migrations,
        deletions: args.confirm.deletion_consent(),
        allow_empty: args.allow_empty,
        current_activation: args.confirm.current_activation.clone(),
        concurrency: args.concurrency,
        receipt: ReceiptInfo {
            flake: args.source.flake.clone(),
            ..ReceiptInfo::local()
        },
        // A saved plan runs only as saved: re-checked under the Lease (by
        // the operator too, which the record tells).
        exact_digest: saved.map(|s| s.digest.clone()),
        ..DeployOptions::default()
    };
    // Undocumented, for the fault tests: a shorter deploy Lease (a killed
    // client then blocks the next deploy for seconds, not 15 s).
    if let Some(secs) = std::env::var("KIX_LEASE_SECONDS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    {
        options.lease.duration = Duration::from_secs(secs.max(1));
    }
    options
}

/// The options a saved plan runs with: the ones it was made with. Refused
/// when it was made for the other executor, or when a flag given now says
/// otherwise (naming the flag); nothing was changed then.
fn saved_plan_options(
    saved: &kix_engine::seal::SavedPlan,
    file: &std::path::Path,
    args: &DeployArgs,
) -> anyhow::Result<kix_engine::plan::PlanOptions> {
    let shown = file.display();
    let cluster = &args.cluster;
    match (saved.operator, args.operator) {
        (false, true) => anyhow::bail!(
            "{shown} is a plan for the local engine (kix plan without --operator); the operator makes its own plan: save one with `kix plan {cluster} --operator --out FILE`: nothing was changed"
        ),
        (true, false) => anyhow::bail!(
            "{shown} is the operator's plan (kix plan --operator): run it with `kix deploy {cluster} --plan {shown} --operator`: nothing was changed"
        ),
        (true, true) => return Ok(super::operator::plan_options()),
        (false, false) => {}
    }
    let options = &saved.options;
    let flags = [
        ("--prune", args.engine.prune, options.prune),
        ("--reconcile", args.engine.reconcile, options.reconcile),
        (
            "--force-conflicts",
            args.engine.force_conflicts,
            options.force_conflicts,
        ),
    ];
    let contradicting: Vec<String> = flags
        .iter()
        .filter(|(flag, given, planned)| super::operator::flag_given(flag) && given != planned)
        .map(|(flag, _, planned)| {
            format!(
                "{flag}={given} (the plan has {flag}={planned})",
                given = !planned
            )
        })
        .collect();
    if !contradicting.is_empty() {
        anyhow::bail!(
            "{shown} was planned with other options than {}: a saved plan runs as it was planned; plan again with the flags you want: nothing was changed",
            contradicting.join(", ")
        );
    }
    Ok(options.clone())
}

/// The plan `kix plan --out` saved in `file`, for Kix cluster `cluster`.
fn read_saved_plan(
    file: &std::path::Path,
    cluster: &str,
) -> anyhow::Result<kix_engine::seal::SavedPlan> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("reading the plan {}", file.display()))?;
    let saved = kix_engine::seal::SavedPlan::from_json(&text)
        .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    if saved.cluster != cluster {
        anyhow::bail!(
            "{} is a plan of Kix cluster {:?}, not {cluster:?}: nothing was changed",
            file.display(),
            saved.cluster
        );
    }
    Ok(saved)
}

/// `deploy --operator`: the local plan's guards, then the push to the
/// build's cache (a failed push writes no record), then the record, then
/// wait.
async fn deploy_with_operator(
    client: &kube::Client,
    build: &kix_manifest::Build,
    plan: &kix_engine::plan::Plan,
    mut options: DeployOptions,
    confirm_args: &ConfirmArgs,
    publish: Option<super::publish::Publish>,
) -> anyhow::Result<ExitCode> {
    use super::operator;
    // The operator prunes; conflicts with controllers are its to resolve (it
    // applies with force); conflicts with other Kix clusters it refuses, so does this.
    options.force_conflicts = true;
    options.yield_to_kix_clusters = true;
    options.prune = true;
    kix_engine::deploy::check_plan(plan, build, &options)?;
    operator::require_records(client).await?;
    if !confirm(
        confirm_args,
        &format!(
            "Activate {} on Kix cluster {} through the operator?",
            plan.store_path, build.cluster
        ),
    )? {
        return Ok(ExitCode::from(1));
    }
    if let Some(publish) = &publish {
        publish.run(&plan.store_path, &mut options.receipt).await?;
    }
    options.engine = kix_api::Engine::Operator;
    let record = operator::create_record(
        client,
        plan,
        kix_engine::deploy::activation_spec(plan, &options),
    )
    .await?;
    let name = kube::ResourceExt::name_any(&record);
    eprintln!("recorded {name}; waiting for the operator");
    let phase = operator::wait_for_operator(client, &name).await?;
    println!("{name}: {phase}");
    Ok(crate::output::exit_for(phase))
}

//! `kix deploy <CLUSTER>`: build, plan, confirm, record, apply, wait, prune.

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, ValueEnum};
use kix_api::Phase;
use kix_engine::budget::DeletionConsent;
use kix_engine::deploy::{DeployOptions, OnError, PruneMode, ReceiptInfo};

use super::build::SourceArgs;
use super::plan::{EngineArgs, print_plan};
use super::{GlobalArgs, OutputFormat};
use crate::progress;

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
    #[arg(long, value_parser = parse_duration, default_value = "5m")]
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
    /// Let the in-cluster operator apply: write the Activation record, then
    /// wait for the operator to finish it.
    #[arg(long)]
    pub operator: bool,
    /// Output format of the plan and the result.
    #[arg(long, short, value_enum, default_value_t)]
    pub output: OutputFormat,
}

/// Guards shared by the commands that change the cluster.
#[derive(Debug, Clone, Args)]
pub struct ConfirmArgs {
    /// Do not ask for confirmation.
    #[arg(long, short)]
    pub yes: bool,
    /// Refuse unless NAME is the Kix cluster's current activation.
    #[arg(long, value_name = "NAME")]
    pub current_activation: Option<String>,
    /// Accept migrations, replaces (immutable fields), adoptions and
    /// destructive deletions the plan lists.
    #[arg(long)]
    pub accept_migrations: bool,
    /// Allow up to N deletions when the plan exceeds the Kix cluster's
    /// deletion budget (default budget: 25 % of its objects, at least 10).
    #[arg(long, value_name = "N")]
    pub max_deletions: Option<u32>,
    /// Accept every deletion the plan lists, beyond the deletion budget.
    #[arg(long, conflicts_with = "max_deletions")]
    pub accept_deletions: bool,
}

impl ConfirmArgs {
    /// The consent `--max-deletions` / `--accept-deletions` give.
    pub fn deletion_consent(&self) -> DeletionConsent {
        match (self.accept_deletions, self.max_deletions) {
            (true, _) => DeletionConsent::Any,
            (false, Some(n)) => DeletionConsent::UpTo(n),
            (false, None) => DeletionConsent::Budget,
        }
    }
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

/// `90s`, `5m`, `1h`, or plain seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (like 90s, 5m, 1h)"))?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86400,
        _ => {
            return Err(format!(
                "{text:?}: unknown unit {unit:?} (use s, m, h or d)"
            ));
        }
    };
    Ok(Duration::from_secs(secs))
}

pub async fn exec(args: DeployArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let (path, build) = args
        .source
        .build_and_read(&args.cluster, global, &[])
        .await?;
    let client = crate::kube_client::client(global, build.settings.context.as_deref()).await?;
    let plan =
        kix_engine::plan::plan(&client, &build, path.as_str(), &args.engine.plan_options()).await?;
    print_plan(&plan, args.output, false)?;
    if args.dry_run {
        return Ok(ExitCode::SUCCESS);
    }
    let mut options = DeployOptions {
        timeout: args.timeout,
        on_error: match args.on_error {
            OnErrorArg::Abort => OnError::Abort,
            OnErrorArg::Continue => OnError::Continue,
            OnErrorArg::Rollback => OnError::Rollback,
        },
        prune: args.engine.prune,
        prune_mode: match args.prune_mode {
            PruneModeArg::Background => PruneMode::Background,
            PruneModeArg::Foreground => PruneMode::Foreground,
            PruneModeArg::Orphan => PruneMode::Orphan,
        },
        force_conflicts: args.engine.force_conflicts,
        accept_migrations: args.confirm.accept_migrations,
        deletions: args.confirm.deletion_consent(),
        allow_empty: args.allow_empty,
        current_activation: args.confirm.current_activation.clone(),
        concurrency: args.concurrency,
        receipt: ReceiptInfo {
            flake: args.source.flake.clone(),
            ..ReceiptInfo::local()
        },
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
    if args.operator {
        return deploy_with_operator(&client, &build, &plan, options, &args).await;
    }
    // Refusals first: nothing is asked or changed when the plan cannot run.
    kix_engine::deploy::check_plan(&plan, &build, &options)?;
    if plan.has_changes()
        && !confirm(
            &args.confirm,
            &format!("Deploy {} to Kix cluster {}?", path, build.cluster),
        )?
    {
        return Ok(ExitCode::from(1));
    }
    let (tx, printer) =
        progress::start_ui(&args.ui, &plan, "deploy", args.output == OutputFormat::Text);
    options.events = Some(tx);
    let outcome = kix_engine::deploy::deploy(&client, &build, plan, &options).await;
    drop(options);
    let _ = printer.await;
    let outcome = outcome?;
    match args.output {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&outcome)?),
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

/// Asks on the terminal; refuses (exit 1) without a terminal unless `--yes`.
pub fn confirm(args: &ConfirmArgs, question: &str) -> anyhow::Result<bool> {
    if args.yes {
        return Ok(true);
    }
    if !std::io::stdin().is_terminal() {
        anyhow::bail!(
            "confirmation needed and stdin is not a terminal: nothing was changed; rerun with --yes"
        );
    }
    eprint!("{question} [y/N] ");
    std::io::stderr().flush()?;
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .context("reading the answer")?;
    let yes = matches!(answer.trim(), "y" | "Y" | "yes");
    if !yes {
        eprintln!("nothing changed");
    }
    Ok(yes)
}

/// `deploy --operator`: the local plan's guards, then the record, then wait.
async fn deploy_with_operator(
    client: &kube::Client,
    build: &kix_manifest::Build,
    plan: &kix_engine::plan::Plan,
    mut options: DeployOptions,
    args: &DeployArgs,
) -> anyhow::Result<ExitCode> {
    use super::operator;
    operator::warn_local_engine_flags();
    // Conflicts are the operator's to resolve (it applies with force).
    options.force_conflicts = true;
    kix_engine::deploy::check_plan(plan, build, &options)?;
    operator::require_records(client).await?;
    if !confirm(
        &args.confirm,
        &format!(
            "Activate {} on Kix cluster {} through the operator?",
            plan.store_path, build.cluster
        ),
    )? {
        return Ok(ExitCode::from(1));
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
    let phase = operator::wait_for_operator(client, &name, None).await?;
    println!("{name}: {phase}");
    Ok(if phase == Phase::Active {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

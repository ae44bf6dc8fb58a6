//! `kix plan <CLUSTER>`: what a deploy would change, without changing anything.

use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use super::{GlobalArgs, OutputFormat};
use crate::args::EngineArgs;
use crate::output::print_plan;
use crate::source::SourceArgs;

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The Kix cluster (an attribute of `kixClusters` in the flake).
    pub cluster: String,
    #[command(flatten)]
    pub source: SourceArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t)]
    pub output: OutputFormat,
    /// Exit 3 when the plan has changes (a CI drift check).
    #[arg(long)]
    pub exit_code: bool,
    /// List unchanged objects too.
    #[arg(long)]
    pub show_unchanged: bool,
    /// Also write the plan to FILE (the `--output json` document: digest,
    /// store path, Kix cluster, options and executor included) for `kix
    /// deploy --plan FILE`.
    #[arg(long, value_name = "FILE")]
    pub out: Option<std::path::PathBuf>,
    /// Plan as the in-cluster operator will (it prunes, takes other
    /// managers' fields but not other Kix clusters', trusts recorded
    /// digests): the plan `kix deploy --operator` shows, and with `--out`
    /// one for `kix deploy --plan FILE --operator`. `--prune`,
    /// `--reconcile` and `--force-conflicts` have no effect with it.
    #[arg(long)]
    pub operator: bool,
}

pub async fn exec(args: PlanArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let options = if args.operator {
        super::operator::warn_local_engine_flags();
        super::operator::plan_options()
    } else {
        args.engine.plan_options()
    };
    let read = args
        .source
        .build_and_read_for_plan(&args.cluster, global, &options)
        .await?;
    let (client, build) = (&read.client, &read.build);
    let plan = kix_engine::plan::plan_prefetched(
        client,
        build,
        read.path.as_str(),
        &options,
        read.prefetched,
    )
    .await?;
    print_plan(&plan, args.output, args.show_unchanged)?;
    if let Some(file) = &args.out {
        let document = kix_engine::seal::saved_document(&plan, args.operator);
        let mut text = serde_json::to_string_pretty(&document)?;
        text.push('\n');
        std::fs::write(file, text)
            .with_context(|| format!("writing the plan to {}", file.display()))?;
        eprintln!(
            "plan written to {} (digest {})",
            file.display(),
            plan.digest
        );
    }
    let code = if args.exit_code && plan.has_changes() {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    };
    // Freeing 50,000 objects took the last tenth of a second of a plan.
    kix_engine::drop_later((plan, read.build));
    Ok(code)
}

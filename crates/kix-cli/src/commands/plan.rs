//! `kix plan <CLUSTER>`: what a deploy would change, without changing anything.

use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use super::{GlobalArgs, PlanFormat};
use crate::args::EngineArgs;
use crate::output::print_plan_as;
use crate::source::SourceArgs;

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The Kix cluster (an attribute of `kixClusters` in the flake).
    pub cluster: String,
    #[command(flatten)]
    pub source: SourceArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Output format (`markdown`: a pull request's comment).
    #[arg(long, short, visible_alias = "format", value_enum, default_value_t)]
    pub output: PlanFormat,
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
    /// Plan offline against another build instead of the live cluster: a
    /// store path, or `current` (the current activation's build, from
    /// `--current-from FILE`, else from the cluster's records). No cluster
    /// is read (with a store path, or `current` and `--current-from`).
    #[arg(long, value_name = "STORE-PATH|current")]
    pub against: Option<String>,
    /// With `--against current`: the `kix status CLUSTER -o json` document
    /// that names the current activation (its `current.path`).
    #[arg(long, value_name = "FILE", requires = "against")]
    pub current_from: Option<std::path::PathBuf>,
}

pub async fn exec(args: PlanArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let options = if args.operator {
        super::operator::warn_local_engine_flags();
        super::operator::plan_options()
    } else {
        args.engine.plan_options()
    };
    if let Some(against) = &args.against {
        let (path, build) = args
            .source
            .build_and_read(&args.cluster, global, &[])
            .await?;
        let current = against_build(against, &args, global).await?;
        let (_, against_build) =
            crate::source::read_store_build("the --against build", &current.path, &args.cluster)
                .await?;
        let against = kix_engine::offline_plan::Against {
            build: &against_build,
            store_path: &current.path,
            activation: current.name.clone(),
            phase: current.phase,
        };
        let plan =
            kix_engine::offline_plan::plan_against(&build, path.as_str(), &against, &options)
                .await?;
        return finish(&args, plan);
    }
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
    let code = finish(&args, plan)?;
    // Freeing 50,000 objects took the last tenth of a second of a plan.
    kix_engine::drop_later(read.build);
    Ok(code)
}

/// Prints the plan, writes `--out`, and says the exit status.
fn finish(args: &PlanArgs, plan: kix_engine::plan::Plan) -> anyhow::Result<ExitCode> {
    print_plan_as(&plan, args.output, args.show_unchanged)?;
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
    kix_engine::drop_later(plan);
    Ok(code)
}

/// The build `--against` names, and its activation when known.
struct AgainstBuild {
    path: String,
    name: Option<String>,
    phase: Option<kix_api::Phase>,
}

/// `--against STORE-PATH`, or `current`: from `--current-from FILE` (a
/// `kix status -o json` document), else the cluster's records.
async fn against_build(
    against: &str,
    args: &PlanArgs,
    global: &GlobalArgs,
) -> anyhow::Result<AgainstBuild> {
    if against != "current" {
        return Ok(AgainstBuild {
            path: against.to_string(),
            name: None,
            phase: None,
        });
    }
    if let Some(file) = &args.current_from {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("reading --current-from {}", file.display()))?;
        let document: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("--current-from {}: not a JSON document", file.display()))?;
        let current = &document["current"];
        let Some(path) = current["path"].as_str() else {
            anyhow::bail!(
                "--current-from {} names no current activation (`current.path` of `kix status {} -o json`)",
                file.display(),
                args.cluster
            );
        };
        return Ok(AgainstBuild {
            path: path.to_string(),
            name: current["name"].as_str().map(str::to_string),
            phase: serde_json::from_value(current["phase"].clone()).ok(),
        });
    }
    let client = crate::kube_client::client(global, None).await?;
    let records = kix_engine::records::list_cluster(&client, &args.cluster).await?;
    let Some(current) = kix_engine::records::current(&records, &args.cluster) else {
        anyhow::bail!(
            "--against current: Kix cluster {} has no current activation",
            args.cluster
        );
    };
    Ok(AgainstBuild {
        path: current.spec.source.path.clone(),
        name: current.metadata.name.clone(),
        phase: current.phase(),
    })
}

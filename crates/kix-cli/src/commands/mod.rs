//! The subcommands. One file each; `exec` dispatches.

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

pub mod build;
pub mod crds;
pub mod deploy;
pub mod operator;
pub mod plan;

#[derive(Debug, Parser)]
#[command(name = "kix", version, about = "Deploy what Nix builds to Kubernetes")]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every subcommand takes.
#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// More log output (-v info, -vv debug, -vvv trace).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Only errors.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true, env = "KUBECONFIG")]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// Kubeconfig context to use.
    #[arg(long, global = true)]
    pub context: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Human text or machine JSON on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum OutputFormat {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Build a Kix cluster with Nix and summarise the manifest tree.
    Build(build::BuildArgs),
    /// Show what a deploy would change, without changing anything.
    Plan(plan::PlanArgs),
    /// Build, plan, confirm, then apply, wait for health and prune.
    Deploy(deploy::DeployArgs),
    /// Print the CRDs of kix's records (Activation, PackageInstance).
    Crds(crds::CrdsArgs),
}

pub async fn exec(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Build(args) => build::exec(args, &cli.global).await,
        Command::Plan(args) => plan::exec(args, &cli.global).await,
        Command::Deploy(args) => deploy::exec(args, &cli.global).await,
        Command::Crds(args) => crds::exec(args, &cli.global).await,
    }
}

//! The subcommands. One file each; `exec` dispatches.

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

pub mod build;
pub mod completions;
pub mod crds;
pub mod declare;
pub mod deploy;
pub mod fleet;
pub mod fleet_deploy;
pub mod fleet_history;
pub mod fleet_plan;
pub mod fleet_rollback;
pub mod fleet_status;
pub mod gc;
pub mod history;
pub mod operator;
pub mod operator_kubeconfig;
pub mod plan;
pub mod publish;
pub mod push;
pub mod rollback;
pub mod status;
pub mod test;
pub mod ui;
pub mod validate;

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
#[command(next_help_heading = "Global options")]
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
    /// Path to the kubeconfig file (default: $KUBECONFIG, which may list
    /// several files separated by ':', then ~/.kube/config).
    #[arg(long, global = true)]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// Kubeconfig context to use.
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// An age identity file (as age-keygen writes it) to decrypt the build's
    /// SOPS-encrypted Secrets with, in memory; repeatable. Default: what sops
    /// reads: $SOPS_AGE_KEY_FILE, $SOPS_AGE_KEY, ~/.config/sops/age/keys.txt.
    #[arg(long, global = true, value_name = "FILE")]
    pub age_identity: Vec<std::path::PathBuf>,
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

/// A plan's format on stdout: human text, machine JSON, or Markdown for a
/// pull request's comment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum PlanFormat {
    #[default]
    Text,
    Json,
    Markdown,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Build a Kix cluster with Nix and summarise the manifest tree.
    Build(build::BuildArgs),
    /// Check a build against the Kubernetes API schemas and its own CRDs,
    /// without a cluster.
    Validate(validate::ValidateArgs),
    /// Show what a deploy would change, without changing anything.
    Plan(plan::PlanArgs),
    /// Build, plan, confirm, then apply, wait for health and prune.
    Deploy(deploy::DeployArgs),
    /// Re-apply the build of an earlier (Superseded) activation.
    Rollback(rollback::RollbackArgs),
    /// Publish a build's closure to a Nix binary cache, signed with your
    /// key (what `deploy --operator` does before it writes the record).
    Push(push::PushArgs),
    /// Declare a NixOS host's build through the operator: nothing when it
    /// is current, a rollback when an older activation had it, else a
    /// deploy (the NixOS module's services.kix-operator.clusters).
    Declare(declare::DeclareArgs),
    /// Retire the activations retention no longer keeps, with their objects
    /// and Nix GC roots.
    Gc(gc::GcArgs),
    /// Run the build's Helm test hooks (never deployed) against the live
    /// cluster and report each one's outcome.
    Test(test::TestArgs),
    /// Show the current activation and the health of its objects.
    Status(status::StatusArgs),
    /// List the Kix cluster's activations, newest first.
    History(history::HistoryArgs),
    /// Serve the read-only web view (every Kix cluster, its history, each
    /// activation's objects and health) on this machine.
    Ui(ui::UiArgs),
    /// Fleets: one build promoted across many clusters in health-gated
    /// waves (`kixFleets.<FLEET>`, kix.lib.mkFleet).
    Fleet(fleet::FleetArgs),
    /// Print the CRDs of kix's records (Activation, PackageInstance).
    Crds(crds::CrdsArgs),
    /// Write a kubeconfig for a ServiceAccount from its token Secret and the
    /// current context's server and CA (the NixOS module's bootstrap).
    OperatorKubeconfig(operator_kubeconfig::OperatorKubeconfigArgs),
    /// Print a shell completion script.
    Completions(completions::CompletionsArgs),
    /// Print the man page (roff).
    Man(completions::ManArgs),
}

pub async fn exec(cli: Cli) -> anyhow::Result<ExitCode> {
    use_age_identities(&cli.global)?;
    match cli.command {
        Command::Build(args) => build::exec(args, &cli.global).await,
        Command::Validate(args) => validate::exec(args, &cli.global).await,
        Command::Plan(args) => plan::exec(args, &cli.global).await,
        Command::Deploy(args) => deploy::exec(args, &cli.global).await,
        Command::Rollback(args) => rollback::exec(args, &cli.global).await,
        Command::Push(args) => push::exec(args, &cli.global).await,
        Command::Declare(args) => declare::exec(args, &cli.global).await,
        Command::Gc(args) => gc::exec(args, &cli.global).await,
        Command::Test(args) => test::exec(args, &cli.global).await,
        Command::Status(args) => status::exec(args, &cli.global).await,
        Command::History(args) => history::exec(args, &cli.global).await,
        Command::Ui(args) => ui::exec(args, &cli.global).await,
        Command::Fleet(args) => fleet::exec(args, &cli.global).await,
        Command::Crds(args) => crds::exec(args, &cli.global).await,
        Command::OperatorKubeconfig(args) => operator_kubeconfig::exec(args, &cli.global).await,
        Command::Completions(args) => completions::exec(args, &cli.global).await,
        Command::Man(args) => completions::exec_man(args, &cli.global).await,
    }
}

/// The age identities every build this process reads is decrypted with:
/// `--age-identity`, else those sops would find (a broken sops variable is
/// then only a warning: it matters only to a build with encrypted Secrets,
/// which is refused for want of a key, naming the file).
fn use_age_identities(global: &GlobalArgs) -> anyhow::Result<()> {
    use kix_manifest::secrets::kix_sops::Identities;
    let identities = if global.age_identity.is_empty() {
        match Identities::from_env() {
            Ok(identities) => identities,
            Err(err) => {
                tracing::warn!("not using the sops age identities of the environment: {err}");
                return Ok(());
            }
        }
    } else {
        let mut all = Identities::default();
        for path in &global.age_identity {
            all.extend(Identities::from_file(path)?);
        }
        all
    };
    if !identities.is_empty() {
        kix_manifest::secrets::use_age_identities(identities);
    }
    Ok(())
}

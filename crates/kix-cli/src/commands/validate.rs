//! `kix validate <CLUSTER> | --path PATH`: check every object of a build
//! against the Kubernetes API schemas and the build's own CRDs, offline.
//! `kix build` runs the same check (`--no-validate` skips it).

use std::ffi::OsString;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use kix_manifest::{Build, ReadOptions, STORE_DIR};

use super::{GlobalArgs, OutputFormat};
use crate::source::SourceArgs;
use crate::validation::{VersionArg, exit_code, print_unchecked, verdict};

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// The Kix cluster (an attribute of `kixClusters` in the flake); with
    /// --path, the build must be of this cluster if given.
    #[arg(required_unless_present = "path")]
    pub cluster: Option<String>,

    #[command(flatten)]
    pub source: SourceArgs,

    #[command(flatten)]
    pub version: VersionArg,

    /// Output format on stdout.
    #[arg(long, short = 'o', value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,

    /// Extra arguments for `nix build`, after `--` (e.g. `-- --show-trace`).
    #[arg(last = true, value_name = "NIX_ARGS")]
    pub nix_args: Vec<OsString>,
}

pub async fn exec(args: ValidateArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let build = match (&args.source.path, &args.cluster) {
        // A path is read as it is: no Nix needed (the Nix check derivation
        // runs this inside a build sandbox).
        (Some(path), cluster) => read_path(path, cluster.as_deref())?,
        (None, Some(cluster)) => {
            let (_, build) = args
                .source
                .build_and_read(cluster, global, &args.nix_args)
                .await?;
            build
        }
        (None, None) => anyhow::bail!("name a Kix cluster or give --path"),
    };
    // The Nix store is world-readable.
    kix_engine::gates::plaintext_secrets(&build)?;
    let report = args.version.validate(&build)?;
    let mut stdout = std::io::stdout().lock();
    match args.output {
        OutputFormat::Json => {
            serde_json::to_writer_pretty(&mut stdout, &report)?;
            writeln!(stdout)?;
        }
        OutputFormat::Text => {
            for finding in &report.findings {
                writeln!(stdout, "{finding}")?;
            }
            // Which chart or overlay each package came from, when known.
            for package in report.packages.iter().filter(|p| p.source.is_some()) {
                writeln!(stdout, "package {package}")?;
            }
            writeln!(stdout, "{}", verdict(&report))?;
            if !global.quiet {
                print_unchecked(&report);
            }
        }
    }
    stdout.flush()?;
    Ok(exit_code(&report))
}

/// Reads a tree without Nix. Symlinks may lead into the Nix store when the
/// tree is there, else they must stay inside the tree's parent directory.
fn read_path(path: &Path, cluster: Option<&str>) -> anyhow::Result<Build> {
    let root =
        std::fs::canonicalize(path).with_context(|| format!("reading {}", path.display()))?;
    let mut options = ReadOptions::default();
    if !root.starts_with(STORE_DIR)
        && let Some(parent) = root.parent()
    {
        options.store_dir = parent.to_path_buf();
    }
    let build = kix_manifest::read_tree(&root, &options)
        .with_context(|| format!("reading the manifest tree {}", path.display()))?;
    crate::source::warn_dropped(&build);
    if let Some(cluster) = cluster
        && build.cluster != cluster
    {
        anyhow::bail!(
            "{} is the build of Kix cluster {:?}, not {cluster:?}",
            path.display(),
            build.cluster
        );
    }
    Ok(build)
}

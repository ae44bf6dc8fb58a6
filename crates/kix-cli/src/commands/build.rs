//! `kix build <CLUSTER>`: build with Nix, print the store path and a summary.

use std::process::ExitCode;

use clap::Args;

use super::GlobalArgs;

#[derive(Debug, Args)]
pub struct BuildArgs {
    /// The Kix cluster (an attribute of `kixClusters` in the flake).
    pub cluster: String,
}

pub async fn exec(_args: BuildArgs, _global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("kix build is not implemented yet")
}

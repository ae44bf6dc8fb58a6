//! `kix crds`: print the CustomResourceDefinitions of kix's records.

use std::io::{self, Write};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use super::GlobalArgs;

/// Print the CRD YAML of kix's records (Activation, PackageInstance), ready
/// for `kubectl apply -f -`.
#[derive(Debug, Args)]
pub struct CrdsArgs {}

pub async fn exec(_args: CrdsArgs, _global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let yaml = kix_api::crds_yaml();
    let mut stdout = io::stdout().lock();
    match stdout
        .write_all(yaml.as_bytes())
        .and_then(|()| stdout.flush())
    {
        // `kix crds | head` closing the pipe early is not an error.
        Err(err) if err.kind() == io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        result => {
            result.context("writing the CRDs to stdout")?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

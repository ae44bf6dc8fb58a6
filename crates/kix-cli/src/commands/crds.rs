//! `kix crds`: print the CustomResourceDefinitions of kix's records.

use std::io::{self, Write};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use super::GlobalArgs;

/// Print the CRD YAML of kix's records (Activation, PackageInstance), ready
/// for `kubectl apply -f -`.
#[derive(Debug, Args)]
pub struct CrdsArgs {
    /// Also print the ValidatingAdmissionPolicy (and its binding) that lets
    /// only the subjects this JSON file declares for a Kix cluster write its
    /// records (`{"platform": {...}, "clusters": {"<name>": {"users": [...],
    /// "groups": [...], "serviceAccount": {"namespace": ..., "name": ...}}}}`,
    /// as the Nix library's `mkTenants` writes it).
    #[arg(long, value_name = "FILE")]
    pub tenants: Option<std::path::PathBuf>,
}

pub async fn exec(args: CrdsArgs, _global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let mut yaml = kix_api::crds_yaml();
    if let Some(path) = &args.tenants {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the tenants file {}", path.display()))?;
        let tenants: kix_api::admission::Tenants = serde_json::from_str(&text)
            .with_context(|| format!("{}: not a tenants declaration", path.display()))?;
        yaml.push_str(&kix_api::admission::admission_policy_yaml(&tenants));
    }
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

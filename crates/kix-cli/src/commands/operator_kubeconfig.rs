//! `kix operator-kubeconfig`: write a kubeconfig that authenticates as a
//! ServiceAccount, from its token Secret and the current context's server and
//! CA. The NixOS module's bootstrap uses it for the operator's credential.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use super::GlobalArgs;
use crate::kube_client::{cluster_endpoint, service_account_kubeconfig, service_account_token};

#[derive(Debug, Args)]
pub struct OperatorKubeconfigArgs {
    /// Namespace of the ServiceAccount and its token Secret.
    #[arg(long, default_value = "kix-system")]
    pub namespace: String,
    /// The ServiceAccount the kubeconfig authenticates as.
    #[arg(long, default_value = "kix-operator")]
    pub service_account: String,
    /// Its `kubernetes.io/service-account-token` Secret
    /// (default: <SERVICE_ACCOUNT>-token).
    #[arg(long)]
    pub secret: Option<String>,
    /// The kubeconfig to write (replaced atomically, mode 0600).
    #[arg(long)]
    pub out: PathBuf,
    /// How long to wait for the token controller to fill in the token.
    #[arg(long, value_parser = kix_engine::duration::parse, default_value = "120s")]
    pub wait: Duration,
}

pub async fn exec(args: OperatorKubeconfigArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let secret = args
        .secret
        .clone()
        .unwrap_or_else(|| format!("{}-token", args.service_account));
    let endpoint = cluster_endpoint(global)?;
    let client = crate::kube_client::client(global, None).await?;
    let token = service_account_token(
        &client,
        &args.namespace,
        &args.service_account,
        &secret,
        args.wait,
    )
    .await?;
    let ca = endpoint
        .certificate_authority
        .as_deref()
        .or(token.ca_crt.as_deref());
    let kubeconfig = service_account_kubeconfig(
        &endpoint,
        ca,
        &args.namespace,
        &args.service_account,
        &token.token,
    )?;
    write_atomically(&args.out, &kubeconfig)?;
    eprintln!(
        "wrote {} for ServiceAccount {}/{}",
        args.out.display(),
        args.namespace,
        args.service_account
    );
    Ok(ExitCode::SUCCESS)
}

/// A temporary file (created 0600) beside `path`, renamed over it: readers
/// see the old file or the whole new one.
fn write_atomically(path: &Path, text: &str) -> anyhow::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mut file = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("creating a temporary file in {}", dir.display()))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.as_file().sync_all())
        .with_context(|| format!("writing {}", file.path().display()))?;
    file.persist(path)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

//! `kix ui [--listen ADDR]`: the read-only web view (kix-web) on this
//! machine, reading with the caller's own kubeconfig and credentials.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;

use super::GlobalArgs;
use crate::output::print_stdout;

#[derive(Debug, Args)]
pub struct UiArgs {
    /// The address to serve on. The pages show whatever your credentials
    /// can read: keep it on loopback unless everyone who can reach it may
    /// see that.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
}

pub async fn exec(args: UiArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let client = crate::kube_client::client(global, None).await?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {} (--listen)", args.listen))?;
    let bound = listener.local_addr()?;
    let authorizer = Arc::new(kix_web::CallerCredentials::for_address(bound));
    let web = kix_web::Web::new(client, authorizer);
    print_stdout(&format!(
        "kix ui: http://{bound}/ (read-only, with your kubeconfig's credentials; Ctrl-C stops)\n"
    ))?;
    tokio::select! {
        served = web.serve(listener) => served?,
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(ExitCode::SUCCESS)
}

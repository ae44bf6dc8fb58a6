//! The Kubernetes client from `--kubeconfig`, `--context` and `$KUBECONFIG`.

use anyhow::Context;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::commands::GlobalArgs;

pub async fn client(global: &GlobalArgs, default_context: Option<&str>) -> anyhow::Result<Client> {
    let options = KubeConfigOptions {
        context: global
            .context
            .clone()
            .or_else(|| default_context.map(str::to_string)),
        ..Default::default()
    };
    let config = match &global.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(kubeconfig, &options).await
        }
        None => Config::from_kubeconfig(&options).await,
    }
    .map_err(|e| match &options.context {
        Some(ctx) => anyhow::anyhow!("loading kubeconfig context {ctx:?}: {e}"),
        None => anyhow::anyhow!("loading kubeconfig: {e}"),
    })?;
    Client::try_from(config).context("creating the Kubernetes client")
}

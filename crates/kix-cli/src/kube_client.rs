//! The Kubernetes client from `--kubeconfig`, `--context` and `$KUBECONFIG`;
//! the server and CA of that context, and a ServiceAccount's kubeconfig
//! (`kix operator-kubeconfig`).

use anyhow::Context;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kix_engine::client::{Accounts, Clients, Source};
use kube::Client;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::wait::await_condition;

use crate::commands::GlobalArgs;

/// The credentials `--kubeconfig` and `--context` (else `default_context`)
/// name: the CLI's adapter of [`kix_engine::client`]. The CLI has no
/// lock-down of its own: a build acts as the account it names, else as the
/// caller.
pub async fn clients(
    global: &GlobalArgs,
    default_context: Option<&str>,
) -> anyhow::Result<Clients> {
    let source = Source {
        kubeconfig: global.kubeconfig.clone(),
        context: global
            .context
            .clone()
            .or_else(|| default_context.map(str::to_string)),
        in_cluster: false,
    };
    Ok(Clients::connect(&source, Accounts::default()).await?)
}

/// The caller's own client, for what is not done for a build (records,
/// status, history).
pub async fn client(global: &GlobalArgs, default_context: Option<&str>) -> anyhow::Result<Client> {
    Ok(clients(global, default_context).await?.own().clone())
}

/// The client a build's plan and deploy use: the kubeconfig context its
/// settings name (unless `--context`), acting as the ServiceAccount its
/// settings name, so a local deploy has the rights an operator deploy of
/// the same build has.
pub async fn client_for_build(
    global: &GlobalArgs,
    settings: &kix_manifest::Settings,
) -> anyhow::Result<Client> {
    let clients = clients(global, settings.context.as_deref()).await?;
    Ok(clients.for_build(settings)?.client)
}

/// The API server and CA a client of the kubeconfig context `--context` (or
/// the current one) uses.
pub struct ClusterEndpoint {
    pub server: String,
    /// PEM bytes: the context's inline `certificate-authority-data` or its
    /// `certificate-authority` file; None when it names neither.
    pub certificate_authority: Option<Vec<u8>>,
}

pub fn cluster_endpoint(global: &GlobalArgs) -> anyhow::Result<ClusterEndpoint> {
    let kubeconfig = kix_engine::client::read_kubeconfig(global.kubeconfig.as_deref())?;
    let context_name = global
        .context
        .clone()
        .or_else(|| kubeconfig.current_context.clone())
        .context("the kubeconfig has no current context (pass --context)")?;
    let context = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == context_name)
        .and_then(|c| c.context.as_ref())
        .with_context(|| format!("kubeconfig context {context_name:?} not found"))?;
    let cluster = kubeconfig
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .and_then(|c| c.cluster.as_ref())
        .with_context(|| {
            format!(
                "cluster {:?} of kubeconfig context {context_name:?} not found",
                context.cluster
            )
        })?;
    let server = cluster.server.clone().with_context(|| {
        format!(
            "cluster {:?} of the kubeconfig has no server",
            context.cluster
        )
    })?;
    let certificate_authority = match (
        &cluster.certificate_authority_data,
        &cluster.certificate_authority,
    ) {
        (Some(data), _) => Some(base64_decode(data).with_context(|| {
            format!(
                "certificate-authority-data of cluster {:?} of the kubeconfig",
                context.cluster
            )
        })?),
        (None, Some(file)) => Some(std::fs::read(file).with_context(|| {
            format!(
                "reading certificate-authority {file} of cluster {:?} of the kubeconfig",
                context.cluster
            )
        })?),
        (None, None) => None,
    };
    Ok(ClusterEndpoint {
        server,
        certificate_authority,
    })
}

/// k8s-openapi's ByteString is Kubernetes' base64 bytes; it saves a base64
/// dependency of our own.
fn base64_decode(text: &str) -> anyhow::Result<Vec<u8>> {
    let bytes: ByteString = serde_json::from_value(serde_json::Value::String(text.to_string()))
        .context("not base64")?;
    Ok(bytes.0)
}

/// A kubeconfig (JSON, which every kubeconfig reader takes) that
/// authenticates as ServiceAccount `namespace/service_account` with `token`.
pub fn service_account_kubeconfig(
    endpoint: &ClusterEndpoint,
    certificate_authority: Option<&[u8]>,
    namespace: &str,
    service_account: &str,
    token: &str,
) -> anyhow::Result<String> {
    let mut cluster = serde_json::json!({ "server": endpoint.server });
    if let Some(ca) = certificate_authority {
        cluster["certificate-authority-data"] = serde_json::to_value(ByteString(ca.to_vec()))?;
    }
    let kubeconfig = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": "kix", "cluster": cluster }],
        "users": [{ "name": service_account, "user": { "token": token } }],
        "contexts": [{
            "name": service_account,
            "context": { "cluster": "kix", "user": service_account, "namespace": namespace },
        }],
        "current-context": service_account,
    });
    Ok(serde_json::to_string_pretty(&kubeconfig)? + "\n")
}

/// What the token controller put into a `kubernetes.io/service-account-token`
/// Secret.
pub struct ServiceAccountToken {
    pub token: String,
    pub ca_crt: Option<Vec<u8>>,
}

const SERVICE_ACCOUNT_ANNOTATION: &str = "kubernetes.io/service-account.name";

/// Waits up to `wait` until Secret `namespace/secret`, of ServiceAccount
/// `service_account`, has its token; on giving up, says what was missing.
pub async fn service_account_token(
    client: &Client,
    namespace: &str,
    service_account: &str,
    secret: &str,
    wait: std::time::Duration,
) -> anyhow::Result<ServiceAccountToken> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let settled = |s: Option<&Secret>| {
        s.is_some_and(|s| token_of(s).is_some() || not_of_account(s, service_account).is_some())
    };
    let waited = tokio::time::timeout(wait, await_condition(secrets, secret, settled)).await;
    let found = match waited {
        Ok(result) => result.with_context(|| format!("watching Secret {namespace}/{secret}"))?,
        Err(_elapsed) => {
            let why = why_no_token(client, namespace, service_account, secret).await?;
            anyhow::bail!(
                "Secret {namespace}/{secret} got no token of ServiceAccount \
                 {namespace}/{service_account} within {}s: {why}",
                wait.as_secs()
            );
        }
    };
    let found = found.with_context(|| format!("Secret {namespace}/{secret} was deleted"))?;
    if let Some(problem) = not_of_account(&found, service_account) {
        anyhow::bail!("Secret {namespace}/{secret} {problem}");
    }
    let token = token_of(&found)
        .with_context(|| format!("Secret {namespace}/{secret} has no token"))?
        .to_string();
    let ca_crt = secret_data(&found, "ca.crt").map(<[u8]>::to_vec);
    Ok(ServiceAccountToken { token, ca_crt })
}

fn secret_data<'a>(secret: &'a Secret, key: &str) -> Option<&'a [u8]> {
    let bytes = secret.data.as_ref()?.get(key)?;
    (!bytes.0.is_empty()).then_some(bytes.0.as_slice())
}

fn token_of(secret: &Secret) -> Option<&str> {
    std::str::from_utf8(secret_data(secret, "token")?).ok()
}

/// Why `secret` is not a token Secret of `service_account`, if it is not.
fn not_of_account(secret: &Secret, service_account: &str) -> Option<String> {
    const TOKEN_TYPE: &str = "kubernetes.io/service-account-token";
    if secret.type_.as_deref() != Some(TOKEN_TYPE) {
        return Some(format!(
            "has type {:?}, not {TOKEN_TYPE:?}",
            secret.type_.as_deref().unwrap_or("Opaque")
        ));
    }
    match secret.annotations().get(SERVICE_ACCOUNT_ANNOTATION) {
        Some(name) if name == service_account => None,
        Some(name) => Some(format!(
            "is the token of ServiceAccount {name:?}, not {service_account:?}"
        )),
        None => Some(format!("has no annotation {SERVICE_ACCOUNT_ANNOTATION}")),
    }
}

async fn why_no_token(
    client: &Client,
    namespace: &str,
    service_account: &str,
    secret: &str,
) -> anyhow::Result<&'static str> {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let lookup = "looking up what the token Secret waits for";
    Ok(
        if accounts
            .get_opt(service_account)
            .await
            .context(lookup)?
            .is_none()
        {
            "the ServiceAccount does not exist"
        } else if secrets.get_opt(secret).await.context(lookup)?.is_none() {
            "the Secret does not exist"
        } else {
            "the Secret exists with no token (is kube-controller-manager's token controller running?)"
        },
    )
}

//! `kix-operator`: keeps the current `engine: operator` Activation of every Kix
//! cluster applied. Leader election makes sure one replica applies at a time;
//! with `--shards N` the records are split among replicas, one Lease per shard.
//!
//! # Where things are
//!
//! - `controller.rs`: the reconcile of a record (plan, the gates, deploy
//!   through the engine) and the finalizer; `guard.rs`: what keeps an
//!   Active record's upkeep quiet (budget holds, deletions, status writes);
//!   `fights.rs`: drift fights; `triggers.rs`: watches on owned objects;
//!   `tenant.rs`: a tenant's impersonated client; `metrics.rs`, `http.rs`;
//!   `shard.rs`: a record's shard; `shards.rs`: the shard Leases.
//! - A rule that refuses or holds a change is a gate of the engine
//!   (`kix_engine::gates`), called here as the CLI calls it; never a check
//!   of its own. A health rule goes in kix-health.

mod controller;
mod faults;
mod fights;
mod guard;
mod http;
mod metrics;
mod notify;
mod shard;
mod shards;
mod tenant;
mod triggers;
mod upkeep;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, ValueEnum};
use futures::StreamExt;
use kix_api::Activation;
use kix_engine::client::{Accounts, Clients, Source};
use kube::Client;
use kube::api::Api;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::{Controller, WatchStreamExt, reflector, watcher};
use tokio::sync::mpsc::unbounded_channel;
use tokio_stream_shim::UnboundedReceiverStream;
use tracing::{error, info, warn};

use crate::controller::Context;
use crate::metrics::Metrics;

#[derive(Debug, Parser)]
#[command(
    name = "kix-operator",
    version,
    about = "Keeps the current Activation of every Kix cluster applied"
)]
struct Args {
    /// Kubeconfig file; in-cluster configuration when absent.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context.
    #[arg(long)]
    context: Option<String>,
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_addr: SocketAddr,
    /// Serve the read-only web view on this address (e.g. 0.0.0.0:8081);
    /// every replica serves it, leader or not. A viewer sends a bearer
    /// token the apiserver accepts (TokenReview) and sees the records a
    /// SubjectAccessReview lets them read. Default: not served.
    #[arg(long, value_name = "ADDR")]
    web_addr: Option<SocketAddr>,
    /// With --web-addr, also take the viewer from an authenticating proxy's
    /// headers (USER-HEADER,GROUP-HEADER, e.g. X-Remote-User,X-Remote-Group):
    /// only where nothing but that proxy can reach --web-addr.
    #[arg(long, value_name = "USER,GROUP", requires = "web_addr", value_parser = proxy_headers)]
    web_proxy_headers: Option<kix_web::ProxyHeaders>,
    /// Send notices of the records' phase changes (and deletions held,
    /// drift fights, stuck deletions) as this alerts file says (JSON, see
    /// docs/operator.md "Notifications"); its credentials are keys of
    /// Secrets, read when a notice is sent. A bad file: the operator does
    /// not start. Default: no notices.
    #[arg(long, env = "KIX_ALERTS", value_name = "FILE")]
    alerts: Option<PathBuf>,
    /// The web view's URL as people reach it (e.g.
    /// https://kix.example.com), for the notices' links; default, with
    /// --web-addr: http://ADDR.
    #[arg(long, value_name = "BASE")]
    web_url: Option<String>,
    /// The least time between two full re-checks of an Active record,
    /// besides the watches on owned objects, which repair drift at once
    /// (e.g. 60s, 5m).
    #[arg(long, value_parser = kix_engine::duration::parse, default_value = "60s")]
    resync_interval: Duration,
    /// Full re-checks of idle Active records per minute, across all
    /// records: with many records each is re-checked every
    /// records/budget minutes (never more often than --resync-interval),
    /// so upkeep's requests stay bounded; new and changed records and
    /// repairs of drift do not wait for it.
    #[arg(long, env = "KIX_OPERATOR_RESYNC_BUDGET", default_value_t = 8,
          value_parser = clap::value_parser!(u32).range(1..))]
    resync_budget: u32,
    /// Records reconciled at once: each holds its plan (and its LISTs)
    /// while it runs, so this bounds the operator's memory; more records
    /// wait their turn, in the order they changed.
    #[arg(long, env = "KIX_OPERATOR_CONCURRENCY", default_value_t = 8,
          value_parser = clap::value_parser!(u16).range(1..))]
    concurrency: u16,
    /// Namespace of the leader-election and deploy Leases.
    #[arg(long, default_value = "kube-system")]
    lease_namespace: String,
    /// This replica's identity (default: $POD_NAME, else host and pid).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Manage only these Kix clusters (repeatable); default: every cluster.
    /// Lets several operators share an apiserver, each with its own clusters.
    #[arg(long = "cluster", value_name = "NAME")]
    clusters: Vec<String>,
    /// Least privilege: apply only objects in these namespaces (repeatable;
    /// Namespace objects of these names included). Default: any namespace.
    #[arg(long = "allow-namespace", value_name = "NS")]
    allow_namespaces: Vec<String>,
    /// Least privilege: apply only these kinds (`ConfigMap`, `Deployment.apps`;
    /// repeatable). Default: any kind.
    #[arg(long = "allow-kind", value_name = "KIND")]
    allow_kinds: Vec<String>,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "kix-operator")]
    leader_lease: String,
    /// Leader lease duration in seconds.
    #[arg(long, default_value_t = 15)]
    leader_lease_seconds: u64,
    /// Split the records among the replicas in N shards, each with its own
    /// Lease (`<leader-lease>-shard-<i>`): each replica takes up to its
    /// fair share of the shards and acts only on their records. A record's
    /// shard is its `kix.run/shard` label (0 to N-1), else a hash of its Kix
    /// cluster's name. 1: one leader for all records (--leader-lease).
    #[arg(long, env = "KIX_OPERATOR_SHARDS", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    shards: u32,
    /// Shard Lease duration in seconds (--shards above 1): a killed
    /// replica's shards are taken over this long after its last renewal; a
    /// replica stops acting on a shard it could not renew a third of it
    /// before that.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(3..=3600))]
    shard_lease_seconds: u64,
    /// An age identity file (as age-keygen writes it) to decrypt the builds'
    /// SOPS-encrypted Secrets with, in memory; repeatable. Not bound to a
    /// tenant: every Kix cluster's builds may use it (a single-team
    /// operator); several teams use --age-key-file or --age-key-dir. Keep it
    /// out of the Nix store. Default, when no age option is given: what sops
    /// reads ($SOPS_AGE_KEY_FILE, $SOPS_AGE_KEY, ~/.config/sops/age/keys.txt).
    #[arg(long = "age-identity", value_name = "FILE")]
    age_identities: Vec<PathBuf>,
    /// An age identity file bound to one Kix cluster (CLUSTER=FILE,
    /// repeatable): only that cluster's builds decrypt with it, and a file
    /// of another cluster's build encrypted for it is refused.
    #[arg(long = "age-key-file", value_name = "CLUSTER=FILE", value_parser = bound_key_file)]
    age_key_files: Vec<(String, PathBuf)>,
    /// A directory of age identity files, `<cluster>.txt` each, bound to
    /// the Kix cluster of its name (as --age-key-file); a mounted Secret
    /// with such keys will do (names starting with a dot are not read).
    #[arg(long = "age-key-dir", value_name = "DIR")]
    age_key_dir: Option<PathBuf>,
    /// A Secret in the operator's namespace (--lease-namespace) whose values
    /// are age identity files, read at start, besides --age-identity's (not
    /// bound to a tenant, as --age-identity).
    #[arg(long = "age-identity-secret", value_name = "NAME")]
    age_identity_secret: Option<String>,
    /// Act as this ServiceAccount (NAMESPACE/NAME) for records that name
    /// none (`spec.serviceAccount`); default: the operator's own account.
    #[arg(long, value_name = "NS/NAME", value_parser = kix_api::ServiceAccountRef::parse)]
    default_service_account: Option<kix_api::ServiceAccountRef>,
    /// Refuse (Failed, with the reason) every record that names no
    /// ServiceAccount: the operator never acts with its own rights.
    #[arg(long)]
    require_service_account: bool,
    /// A binary cache to fetch builds from (repeatable; space-separated in
    /// $KIX_SUBSTITUTERS): file://, http(s):// or s3:// as in settings.cache.
    /// Needs --trusted-public-key: only signed builds are fetched.
    #[arg(long = "substituter", value_name = "URL", env = "KIX_SUBSTITUTERS",
          value_delimiter = ' ', value_parser = kix_manifest::CacheUrl::parse)]
    substituters: Vec<kix_manifest::CacheUrl>,
    /// A public key (NAME:BASE64, as `nix key convert-secret-to-public`
    /// prints it; repeatable, space-separated in $KIX_TRUSTED_PUBLIC_KEYS):
    /// a record's build is applied only when its whole closure is signed by
    /// one of these keys, whether or not it was already in the store.
    /// Default: none, and builds are taken from the store as they are.
    #[arg(long = "trusted-public-key", value_name = "NAME:KEY", env = "KIX_TRUSTED_PUBLIC_KEYS",
          value_delimiter = ' ', value_parser = kix_manifest::PublicKey::parse)]
    trusted_public_keys: Vec<kix_manifest::PublicKey>,
    /// The Nix store builds are kept in: `local?root=DIR` gives the operator
    /// a store of its own under DIR (no host /nix/store or daemon needed),
    /// from which it deletes the builds of retired records. Default: the
    /// host's store, as Nix is configured.
    #[arg(long, value_name = "STORE-URL", env = "KIX_STORE", value_parser = parse_store)]
    store: Option<kix_nix::Store>,
}

fn parse_store(url: &str) -> Result<kix_nix::Store, String> {
    kix_nix::Store::parse(url).map_err(|err| err.to_string())
}

/// The operator's store and what it trusts, made the process's store (GC
/// roots are taken there), stated in the log.
fn fetcher(args: &Args) -> anyhow::Result<kix_nix::Fetcher> {
    if !args.substituters.is_empty() && args.trusted_public_keys.is_empty() {
        anyhow::bail!(
            "--substituter needs --trusted-public-key: the operator fetches only builds signed by a key it trusts"
        );
    }
    let store = args.store.clone().unwrap_or_else(kix_nix::Store::host);
    kix_nix::use_store(store.clone());
    let fetcher = kix_nix::Fetcher::new(
        store,
        kix_nix::GcRoots::from_env(),
        args.substituters.clone(),
        args.trusted_public_keys.clone(),
    );
    info!("{}", fetcher.describe());
    Ok(fetcher)
}

/// `--age-key-file CLUSTER=FILE`.
fn bound_key_file(arg: &str) -> Result<(String, PathBuf), String> {
    match arg.split_once('=') {
        Some((cluster, file)) if !cluster.is_empty() && !file.is_empty() => {
            Ok((cluster.to_owned(), PathBuf::from(file)))
        }
        _ => Err(format!("{arg:?} is not CLUSTER=FILE")),
    }
}

/// The age keys builds are decrypted with, as a key ring: `--age-key-file`
/// and `--age-key-dir` bound to their Kix cluster; `--age-identity` and
/// `--age-identity-secret` usable by every cluster; with no age option,
/// those sops would find (every cluster's). A record's build decrypts with
/// its cluster's keys only; without any, a build with encrypted Secrets is
/// refused (Failed, naming the file), never half-applied.
async fn use_age_identities(args: &Args, client: &Client) -> anyhow::Result<()> {
    use kix_manifest::secrets::kix_sops::{Identities, KeyRing};
    let given = !args.age_identities.is_empty()
        || !args.age_key_files.is_empty()
        || args.age_key_dir.is_some()
        || args.age_identity_secret.is_some();
    let mut ring = KeyRing::default();
    if !given {
        ring.share(Identities::from_env().context("the sops age identities of the environment")?);
    }
    for file in &args.age_identities {
        ring.share(Identities::from_file(file)?);
    }
    for (cluster, file) in &args.age_key_files {
        ring.bind(cluster, Identities::from_file(file)?);
    }
    if let Some(dir) = &args.age_key_dir {
        ring.bind_dir(dir)?;
    }
    if let Some(name) = &args.age_identity_secret {
        ring.share(identities_of_secret(client, &args.lease_namespace, name).await?);
    }
    if !ring.is_empty() {
        for cluster in ring.clusters() {
            let recipients = ring.for_cluster(cluster).map(|i| i.recipients());
            info!(
                cluster,
                ?recipients,
                "age identities for encrypted Secrets, bound to a Kix cluster"
            );
        }
        let shared = ring.shared_recipients();
        if !shared.is_empty() {
            info!(recipients = ?shared, "age identities for encrypted Secrets, of every Kix cluster");
        }
        kix_manifest::secrets::use_age_key_ring(ring);
    }
    Ok(())
}

/// The age identities in the values of Secret `namespace/name` (each value
/// an identity file). Errors name the Secret and key, never a line.
async fn identities_of_secret(
    client: &Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<kix_manifest::secrets::kix_sops::Identities> {
    use kix_manifest::secrets::kix_sops::{Identities, Layout};
    let secret = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .with_context(|| format!("reading the age identities of Secret {namespace}/{name}"))?;
    let mut all = Identities::default();
    for (key, value) in secret.data.unwrap_or_default() {
        let source = format!("Secret {namespace}/{name} key {key}");
        let text = String::from_utf8(value.0)
            .map_err(|_| anyhow::anyhow!("{source}: not an age identity file (not UTF-8)"))?;
        all.extend(Identities::parse(&text, &source, Layout::OnePerLine)?);
    }
    Ok(all)
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("KIX_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

/// The operator's credentials (`--kubeconfig`/`--context`, else the
/// in-cluster configuration) and lock-down settings, through the one client
/// factory ([`kix_engine::client`]).
async fn clients(args: &Args, identity: &str) -> anyhow::Result<Clients> {
    let source = Source {
        kubeconfig: args.kubeconfig.clone(),
        context: args.context.clone(),
        in_cluster: true,
    };
    let mut config = kix_engine::client::load_config(&source).await?;
    // Names the operator (and this replica) in the apiserver's audit log.
    let agent = format!("kix-operator/{} {identity}", env!("CARGO_PKG_VERSION"));
    config.headers.push(("user-agent".parse()?, agent.parse()?));
    let accounts = Accounts {
        default: args.default_service_account.clone(),
        require: args.require_service_account,
    };
    Ok(Clients::from_config(config, accounts)?)
}

/// The controller's context for one term as leader.
fn context(
    args: &Args,
    identity: &str,
    clients: &Arc<Clients>,
    metrics: &Arc<Metrics>,
    trigger: &tokio::sync::mpsc::UnboundedSender<
        kube::runtime::reflector::ObjectRef<kix_api::Activation>,
    >,
    fetcher: &Arc<kix_nix::Fetcher>,
    records: reflector::Store<Activation>,
) -> Context {
    let client = clients.own();
    // A quarter of the reconcile slots at most for full re-checks: the
    // others stay free for new records and repairs.
    let upkeep_permits = usize::from(args.concurrency / 4).max(1);
    Context {
        client: client.clone(),
        metrics: metrics.clone(),
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: "kix-operator".into(),
                instance: Some(identity.to_string()),
            },
        ),
        resync: args.resync_interval,
        holder: identity.to_string(),
        lease_namespace: args.lease_namespace.clone(),
        clusters: args.clusters.iter().cloned().collect(),
        allow: kix_engine::gates::AllowList {
            namespaces: args.allow_namespaces.iter().cloned().collect(),
            kinds: args.allow_kinds.iter().cloned().collect(),
        },
        current: Default::default(),
        kinds: Default::default(),
        fights: Default::default(),
        crd_refusals: Default::default(),
        touched: Default::default(),
        trigger: trigger.clone(),
        tenants: tenant::Tenants::new(clients.clone()),
        fetcher: fetcher.clone(),
        records,
        upkeep: upkeep::Upkeep::new(args.resync_interval, args.resync_budget, upkeep_permits),
        shards: None,
        notifier: None,
    }
}

/// The controller: one watch of every record (its cache read by the
/// reconciles, whatever their shard), reconciles on spec, deletion,
/// finalizer and shard-label changes of records and on owned objects
/// (`reconcile_on`); never on status writes.
fn controller(
    args: &Args,
    client: &Client,
    ctx: Arc<Context>,
    writer: reflector::store::Writer<Activation>,
    reader: reflector::Store<Activation>,
    trigger_rx: tokio::sync::mpsc::UnboundedReceiver<reflector::ObjectRef<Activation>>,
) -> impl std::future::Future<Output = ()> + use<> {
    let records: Api<Activation> = Api::all(client.clone());
    let observed = ctx.clone();
    let record_changes = watcher::watcher(records, watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .applied_objects()
        // Every change of a record, status too: its notices are due now.
        .inspect(move |record| {
            if let Ok(record) = record {
                notify::observe(&observed, record);
            }
        })
        .filter(triggers::record_changes());
    let bounded = kube::runtime::controller::Config::default().concurrency(args.concurrency);
    Controller::for_stream(record_changes, reader)
        .with_config(bounded)
        .reconcile_on(UnboundedReceiverStream::new(trigger_rx))
        .run(controller::reconcile, controller::error_policy, ctx)
        .for_each(|result| async move {
            if let Err(err) = result {
                warn!("{err}");
            }
        })
}

/// What a sharded operator runs with, besides the controller's context.
struct Sharded<'a> {
    args: &'a Args,
    identity: &'a str,
    clients: &'a Arc<Clients>,
    metrics: &'a Arc<Metrics>,
    fetcher: &'a Arc<kix_nix::Fetcher>,
    alerting: Option<&'a Arc<notify::Alerting>>,
}

/// `--shards` above 1: the shard Leases taken and renewed beside one
/// controller over every record, which acts on the held shards' records
/// only. Until `shutdown`; then the reconciles stop first, and the shards
/// are given back.
async fn run_sharded(
    run: Sharded<'_>,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let Sharded {
        args,
        identity,
        clients,
        metrics,
        fetcher,
        alerting,
    } = run;
    let client = clients.own().clone();
    let set = shards::ShardSet::new(args.shards);
    let (gained_tx, gained_rx) = unbounded_channel();
    let elector = shards::Elector::new(
        shards::LeaseConfig {
            client: client.clone(),
            namespace: args.lease_namespace.clone(),
            base: args.leader_lease.clone(),
            identity: identity.to_owned(),
            duration: Duration::from_secs(args.shard_lease_seconds),
        },
        set.clone(),
        gained_tx,
    );
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    let electing = tokio::spawn(elector.run(stop_rx));
    info!(%identity, shards = args.shards, "sharded: taking a fair share of the shard Leases");
    let (trigger_tx, trigger_rx) = unbounded_channel();
    let (reader, writer) = reflector::store();
    let (notifier, jobs) = notify::for_term(alerting, &client, metrics);
    let mut ctx = context(
        args,
        identity,
        clients,
        metrics,
        &trigger_tx,
        fetcher,
        reader.clone(),
    );
    ctx.shards = Some(set.clone());
    ctx.notifier = notifier;
    let ctx = Arc::new(ctx);
    let notifying = notify::spawn(&ctx, jobs);
    let watches = tokio::spawn(triggers::run(ctx.clone(), trigger_tx.clone()));
    let gains = tokio::spawn(reconcile_gained(ctx.clone(), gained_rx, trigger_tx));
    let mut running = Box::pin(controller(args, &client, ctx, writer, reader, trigger_rx));
    tokio::select! {
        () = &mut running => error!("controller stopped"),
        () = shutdown => info!("shutting down"),
    }
    // Dropping the controller cancels its reconciles: nothing acts on a
    // shard once it is given back.
    drop(running);
    watches.abort();
    gains.abort();
    if let Some(notifying) = notifying {
        notifying.abort();
    }
    let _ = stop_tx.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), electing).await;
    Ok(())
}

/// Each shard this replica takes: its records are reconciled now, planned
/// whole (another replica kept them meanwhile). Keeps the `leader` gauge
/// saying whether any shard is held.
async fn reconcile_gained(
    ctx: Arc<Context>,
    mut gained: tokio::sync::mpsc::UnboundedReceiver<shard::Shard>,
    trigger: tokio::sync::mpsc::UnboundedSender<reflector::ObjectRef<Activation>>,
) {
    let Some(set) = ctx.shards.clone() else {
        return;
    };
    loop {
        let next = tokio::time::timeout(Duration::from_secs(1), gained.recv()).await;
        let holding = !set.held().is_empty();
        ctx.metrics.leader.store(holding, Ordering::Relaxed);
        let shard = match next {
            Ok(Some(shard)) => shard,
            Ok(None) => return,
            Err(_) => continue,
        };
        for record in ctx.records.state() {
            let of = shard::shard_of(&record, set.count()).unwrap_or_else(|bad| bad.fallback);
            if of != shard {
                continue;
            }
            let name = kube::ResourceExt::name_any(record.as_ref());
            if let Ok(mut touched) = ctx.touched.lock() {
                touched.entry(name.clone()).or_default().whole_now = true;
            }
            let _ = trigger.send(reflector::ObjectRef::new(&name));
        }
    }
}

/// `--web-proxy-headers USER,GROUP`.
fn proxy_headers(value: &str) -> Result<kix_web::ProxyHeaders, String> {
    match value.split_once(',') {
        Some((user, groups)) if !user.trim().is_empty() && !groups.trim().is_empty() => {
            Ok(kix_web::ProxyHeaders {
                user: user.trim().to_string(),
                groups: groups.trim().to_string(),
            })
        }
        _ => Err("expected USER-HEADER,GROUP-HEADER, e.g. X-Remote-User,X-Remote-Group".into()),
    }
}

/// The web view on `addr`, reading with the operator's own client and
/// asking the apiserver who may see what.
async fn serve_web(
    addr: SocketAddr,
    client: kube::Client,
    proxy: Option<kix_web::ProxyHeaders>,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding --web-addr {addr}"))?;
    let bound = listener.local_addr().context("the web view's address")?;
    let mut authorizer = kix_web::KubeAuthorizer::new(client.clone());
    if let Some(proxy) = proxy {
        authorizer = authorizer.trusting_proxy(proxy);
    }
    let web = kix_web::Web::new(client, Arc::new(authorizer));
    tokio::spawn(async move {
        if let Err(e) = web.serve(listener).await {
            tracing::error!("the web view stopped: {e}");
        }
    });
    info!(addr = %bound, "serving the web view on http://{bound}/");
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    init_logging(args.log_format);
    // A bad alerts file stops the operator before it acts on anything.
    let web_url = args
        .web_url
        .clone()
        .or_else(|| args.web_addr.map(|addr| format!("http://{addr}")));
    let alerting = match &args.alerts {
        Some(file) => Some(Arc::new(notify::Alerting::load(
            file,
            web_url,
            &args.lease_namespace,
        )?)),
        None => None,
    };
    let identity = args.identity.clone().unwrap_or_else(|| {
        let host = std::fs::read_to_string("/etc/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "kix-operator".into());
        format!("{host}-{}", std::process::id())
    });
    let clients = Arc::new(clients(&args, &identity).await?);
    let client = clients.own().clone();
    use_age_identities(&args, &client).await?;
    let fetcher = Arc::new(fetcher(&args)?);
    let metrics = Arc::new(Metrics::default());
    let addr = http::serve_on_own_thread(args.metrics_addr, metrics.clone())
        .with_context(|| format!("binding {}", args.metrics_addr))?;
    info!(%addr, "serving /metrics, /healthz, /readyz");
    if let Some(web_addr) = args.web_addr {
        serve_web(web_addr, client.clone(), args.web_proxy_headers.clone()).await?;
    }
    client
        .apiserver_version()
        .await
        .context("reaching the apiserver")?;
    metrics.ready.store(true, Ordering::Relaxed);
    if args.shards > 1 {
        let run = Sharded {
            args: &args,
            identity: &identity,
            clients: &clients,
            metrics: &metrics,
            fetcher: &fetcher,
            alerting: alerting.as_ref(),
        };
        return run_sharded(run, shutdown_signal()).await;
    }

    // Leader election: only the holder of the lease runs the controller.
    let leader = kube_lease_manager::LeaseManagerBuilder::new(client.clone(), &args.leader_lease)
        .with_namespace(&args.lease_namespace)
        .with_identity(&identity)
        .with_duration(args.leader_lease_seconds)
        .with_grace(std::cmp::max(2, args.leader_lease_seconds / 3))
        .build()
        .await
        .context("setting up leader election")?;
    let (mut is_leader, lease_task) = leader.watch().await;

    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);

    loop {
        // Stand by until elected.
        while !*is_leader.borrow_and_update() {
            metrics.leader.store(false, Ordering::Relaxed);
            tokio::select! {
                changed = is_leader.changed() => if changed.is_err() { anyhow::bail!("leader election stopped") },
                () = &mut shutdown => { info!("shutting down"); drop(is_leader); let _ = lease_task.await; return Ok(()); }
            }
        }
        info!(%identity, "elected leader");
        metrics.leader.store(true, Ordering::Relaxed);
        let (trigger_tx, trigger_rx) = unbounded_channel();
        let (reader, writer) = reflector::store();
        let (notifier, jobs) = notify::for_term(alerting.as_ref(), &client, &metrics);
        let mut ctx = context(
            &args,
            &identity,
            &clients,
            &metrics,
            &trigger_tx,
            &fetcher,
            reader.clone(),
        );
        ctx.notifier = notifier;
        let ctx = Arc::new(ctx);
        let notifying = notify::spawn(&ctx, jobs);
        let watches = tokio::spawn(triggers::run(ctx.clone(), trigger_tx));
        let controller = controller(&args, &client, ctx, writer, reader, trigger_rx);
        tokio::pin!(controller);
        let lost = async {
            loop {
                if is_leader.changed().await.is_err() || !*is_leader.borrow() {
                    return;
                }
            }
        };
        tokio::select! {
            () = &mut controller => { error!("controller stopped"); }
            () = lost => { warn!("lost leadership; standing by"); }
            () = &mut shutdown => {
                info!("shutting down");
                watches.abort();
                drop(is_leader);
                let _ = lease_task.await;
                return Ok(());
            }
        }
        watches.abort();
        // A new term starts from what the records say was sent.
        if let Some(notifying) = notifying {
            notifying.abort();
        }
    }
}

/// Completes on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = async { if let Some(t) = term.as_mut() { t.recv().await; } else { std::future::pending::<()>().await } } => {},
    }
}

/// An `UnboundedReceiver` as a `Stream` (tokio-stream's wrapper, without the crate).
mod tokio_stream_shim {
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use tokio::sync::mpsc::UnboundedReceiver;

    pub struct UnboundedReceiverStream<T>(UnboundedReceiver<T>);

    impl<T> UnboundedReceiverStream<T> {
        pub fn new(rx: UnboundedReceiver<T>) -> Self {
            Self(rx)
        }
    }

    impl<T> futures::Stream for UnboundedReceiverStream<T> {
        type Item = T;
        fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
            self.0.poll_recv(cx)
        }
    }
}

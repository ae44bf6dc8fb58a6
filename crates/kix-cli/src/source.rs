//! Where a build comes from and how it is read: the `--flake`, `--file`,
//! `--path` arguments of the commands that build, a recorded store path
//! read again (rollback, deploy --plan), and what reading a build says
//! about its Secrets.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Args;
use futures::FutureExt;
use kix_engine::plan::{PlanOptions, Prefetched};
use kix_manifest::Build;
use kix_nix::{BuildOptions, BuildSource, Checked, StorePath};

use crate::commands::GlobalArgs;

/// Where the build comes from: a flake (default `.`), a Nix file, or a path.
/// Shared by the commands that build (`build`, `plan`, `deploy`).
#[derive(Debug, Clone, Args)]
pub struct SourceArgs {
    /// Flake reference whose `kixClusters.<CLUSTER>` is built [default: .]
    #[arg(long, value_name = "REF", conflicts_with_all = ["file", "path"])]
    pub flake: Option<String>,

    /// Nix file to build from instead of a flake (`nix build --file`).
    #[arg(long, short = 'f', value_name = "FILE", conflicts_with = "path")]
    pub file: Option<PathBuf>,

    /// Attribute of --file to build [default: kixClusters.<CLUSTER>]
    #[arg(long, short = 'A', value_name = "ATTR", requires = "file")]
    pub attr: Option<String>,

    /// A prebuilt store path (or ./result), or a directory holding a manifest
    /// tree, which is added to the Nix store first. Nothing is built.
    #[arg(long, value_name = "PATH")]
    pub path: Option<PathBuf>,

    /// Do not use the network: no substituters (`nix build --offline`).
    #[arg(
        long,
        env = "KIX_OFFLINE",
        action = clap::ArgAction::SetTrue,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub offline: bool,
}

impl SourceArgs {
    /// The build source for `cluster`.
    pub fn source(&self, cluster: &str) -> BuildSource {
        if let Some(path) = &self.path {
            BuildSource::Path(path.clone())
        } else if let Some(file) = &self.file {
            BuildSource::file(file.clone(), self.attr.clone(), cluster)
        } else {
            BuildSource::flake(self.flake.clone().unwrap_or_else(|| ".".into()), cluster)
        }
    }

    /// Build options: Nix's progress goes to stderr unless `--quiet`.
    pub fn options(&self, global: &GlobalArgs, extra_args: &[OsString]) -> BuildOptions {
        BuildOptions {
            show_progress: !global.quiet,
            offline: self.offline,
            extra_args: extra_args.to_vec(),
        }
    }

    /// Builds (or resolves) the source and reads the manifest tree, checking
    /// that it is the build of `cluster`. Runs Nix on a blocking thread.
    pub async fn build_and_read(
        &self,
        cluster: &str,
        global: &GlobalArgs,
        extra_args: &[OsString],
    ) -> anyhow::Result<(StorePath, Build)> {
        let source = self.source(cluster);
        let options = self.options(global, extra_args);
        let cluster = cluster.to_owned();
        let described = source.to_string();
        let (path, build) = tokio::task::spawn_blocking(move || {
            kix_nix::build_and_read(&source, &cluster, &options)
        })
        .await
        .context("the build task failed")?
        .with_context(|| format!("building {described}"))?;
        warn_secrets(&build);
        warn_dropped(&build);
        Ok((path, build))
    }
}

/// A build read for a plan, the client of its kube context, and the
/// plan's first reads of that cluster.
pub struct ReadForPlan {
    pub path: StorePath,
    pub build: Build,
    pub client: kube::Client,
    pub prefetched: Prefetched,
}

impl SourceArgs {
    /// [`SourceArgs::build_and_read`] for a plan: the plan's first reads of
    /// the cluster ([`Prefetched`]) start, on the kube context the build's
    /// `kix.json` names, while the tree is read. A build that cannot be
    /// read fails as it would alone; what was prefetched is dropped.
    pub async fn build_and_read_for_plan(
        &self,
        cluster: &str,
        global: &GlobalArgs,
        options: &PlanOptions,
    ) -> anyhow::Result<ReadForPlan> {
        let source = self.source(cluster);
        let build_options = self.options(global, &[]);
        let described = source.to_string();
        let resolved =
            tokio::task::spawn_blocking(move || kix_nix::build_unchecked(&source, &build_options))
                .await
                .context("the build task failed")?
                .with_context(|| format!("building {described}"))?;
        let path = resolved.path.clone();
        // A `--path`'s validity check (a nix-store run) goes beside the
        // reads: it decides before anything read is used, and a path it had
        // to realise is read again.
        let checking = tokio::task::spawn_blocking(move || resolved.check());
        // Where and as whom the build deploys: its context and ServiceAccount.
        let target = kix_manifest::settings_hint(path.as_path());
        let early = match &target {
            // A context that does not load fails later, after the tree is
            // read, as it does without this.
            Some(target) => crate::kube_client::client_for_build(global, target)
                .await
                .ok()
                .map(|client| {
                    let (prefetching, handle) =
                        prefetch(client.clone(), cluster, options).remote_handle();
                    tokio::spawn(prefetching);
                    (client, handle)
                }),
            None => None,
        };
        let read = read_build_of(path.clone(), cluster).await;
        // A tree that cannot be read fails on its own: its reads of the
        // cluster stop now, not after the check.
        let early = early.filter(|_| read.is_ok());
        let checked = checking
            .await
            .context("the build task failed")?
            .with_context(|| format!("building {described}"))?;
        let read = match checked {
            Checked::AsFound => read,
            Checked::Realised => read_build_of(path, cluster).await,
        };
        let (path, build) = read.with_context(|| format!("building {described}"))?;
        warn_secrets(&build);
        warn_dropped(&build);
        let (client, prefetched) = match early {
            Some((client, prefetched))
                if target.as_ref().is_some_and(|target| {
                    target.context == build.settings.context
                        && target.service_account == build.settings.service_account
                }) =>
            {
                (client, prefetched.await?)
            }
            _ => {
                let client = crate::kube_client::client_for_build(global, &build.settings).await?;
                let prefetched = Prefetched::start(&client, cluster, options).await?;
                (client, prefetched)
            }
        };
        Ok(ReadForPlan {
            path,
            build,
            client,
            prefetched,
        })
    }
}

/// [`kix_nix::read_build_of`] on a blocking thread.
async fn read_build_of(path: StorePath, cluster: &str) -> anyhow::Result<(StorePath, Build)> {
    let cluster = cluster.to_owned();
    Ok(
        tokio::task::spawn_blocking(move || kix_nix::read_build_of(path, &cluster))
            .await
            .context("the build task failed")??,
    )
}

/// [`Prefetched::start`], owning what it reads from: for a task of its own.
fn prefetch(
    client: kube::Client,
    cluster: &str,
    options: &PlanOptions,
) -> impl Future<Output = kix_engine::Result<Prefetched>> + Send + use<> {
    let (cluster, options) = (cluster.to_owned(), options.clone());
    async move { Prefetched::start(&client, &cluster, &options).await }
}

/// A build read from the store for `what` (`the build of C-1`): refused,
/// nothing changed, when the path is not a store path, is gone from the
/// store, or is another Kix cluster's build.
pub async fn read_store_build(
    what: &str,
    path: &str,
    cluster: &str,
) -> anyhow::Result<(StorePath, kix_manifest::Build)> {
    let store_path = StorePath::parse(path)
        .with_context(|| format!("{what} names {path:?}: nothing was changed"))?;
    let check = store_path.clone();
    let valid = tokio::task::spawn_blocking(move || kix_nix::is_valid(&check))
        .await
        .context("the store check failed")??;
    if !valid {
        bail!(
            "{what}, {path}, is no longer in the Nix store (garbage-collected): nothing was changed"
        );
    }
    let read_path = path.to_string();
    let build = tokio::task::spawn_blocking(move || {
        kix_manifest::read_tree(Path::new(&read_path), &kix_manifest::ReadOptions::default())
    })
    .await
    .context("reading the build failed")?
    .with_context(|| format!("reading {what} ({path}): nothing was changed"))?;
    if build.cluster != cluster {
        bail!(
            "{what} ({path}) is for Kix cluster {:?}, not {cluster:?}: nothing was changed",
            build.cluster,
        );
    }
    Ok((store_path, build))
}

/// Fields only the API server sets, dropped from what kix applies: one
/// warning per file naming them.
pub fn warn_dropped(build: &Build) {
    for dropped in &build.dropped {
        eprintln!("warning: {dropped}");
    }
}

/// Secrets in a build are readable by every user of the machine: the Nix store
/// is world-readable. Say so, once per command.
pub fn warn_secrets(build: &Build) {
    let secrets: Vec<String> = build
        .objects()
        .filter(|o| o.key.group_kind() == kix_manifest::group_kind::SECRET)
        // A Secret decrypted from a package's SOPS file is not in the store.
        .filter(|o| !kix_manifest::secrets::is_decrypted(o))
        .map(|o| o.key.to_string())
        .collect();
    if !secrets.is_empty() {
        eprintln!(
            "warning: the build contains {} Secret(s) ({}); the Nix store is world-readable, so their values are readable by every user of this machine. Reference secrets instead (see docs/secrets.md).",
            secrets.len(),
            secrets.join(", ")
        );
    }
}

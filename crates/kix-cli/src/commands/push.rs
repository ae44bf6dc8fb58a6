//! `kix push`: publish a build's closure to a Nix binary cache, signed with
//! the user's key. `kix deploy --operator`, `kix rollback --operator` and
//! `kix fleet deploy` publish the same way ([`super::publish`]).

use std::process::ExitCode;

use anyhow::bail;
use clap::Args;
use kix_manifest::CacheUrl;
use kix_nix::Cache;

use super::GlobalArgs;
use super::publish::{SignKeyArgs, cache_of, publish, report_line};
use crate::source::SourceArgs;

#[derive(Debug, Args)]
pub struct PushArgs {
    /// The Kix cluster whose build is pushed (built as `kix build` does);
    /// optional with --path.
    #[arg(required_unless_present = "path")]
    pub cluster: Option<String>,
    #[command(flatten)]
    pub source: SourceArgs,
    /// The binary cache to push to [default: the build's settings.cache.url]
    #[arg(long, value_name = "URL")]
    pub to: Option<String>,
    #[command(flatten)]
    pub key: SignKeyArgs,
}

pub async fn exec(args: PushArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let key = args.key.key()?;
    let (path, cache) = match &args.cluster {
        Some(cluster) => {
            let (path, build) = args.source.build_and_read(cluster, global, &[]).await?;
            (path, build.settings.cache)
        }
        None => {
            let dir = args.source.path.clone().unwrap_or_default();
            let path = tokio::task::spawn_blocking(move || kix_nix::resolve_path(&dir)).await??;
            let cache = kix_manifest::settings_hint(path.as_path()).and_then(|s| s.cache);
            (path, cache)
        }
    };
    let cache = match (&args.to, cache) {
        (Some(url), setting) => Cache::new(
            CacheUrl::parse(url)?,
            setting.map(|s| s.public_keys).unwrap_or_default(),
        ),
        (None, Some(setting)) => cache_of(&setting),
        (None, None) => bail!(
            "{path} has no settings.cache: give the cache with --to URL, or set settings.cache = {{ url = \"...\"; }} in mkCluster"
        ),
    };
    let report = publish(&path, &cache, key.as_ref(), !global.quiet).await?;
    println!("{}", report_line(&path, &cache, &report, key.as_ref()));
    Ok(ExitCode::SUCCESS)
}

//! Publishing a build to the Nix binary cache its `settings.cache` names,
//! signed with the user's key: what `kix push`, `kix deploy --operator`,
//! `kix rollback --operator` and `kix fleet deploy` share.

use std::path::PathBuf;

use clap::Args;
use kix_engine::deploy::ReceiptInfo;
use kix_manifest::{CacheSetting, StorePath};
use kix_nix::{Cache, PushProgress, PushReport, SigningKey};

/// The environment variable naming the signing key file.
pub const SIGN_KEY_ENV: &str = "KIX_SIGN_KEY_FILE";

/// The key a build is signed with in the cache.
#[derive(Debug, Clone, Args)]
pub struct SignKeyArgs {
    /// A Nix secret key file (`nix key generate-secret --key-name NAME`)
    /// that signs the pushed paths in the cache (default: $KIX_SIGN_KEY_FILE);
    /// Nix reads it, kix only reads its name.
    #[arg(long, value_name = "FILE", env = SIGN_KEY_ENV)]
    pub sign_key: Option<PathBuf>,
}

impl SignKeyArgs {
    /// The key, read from its file, if one was given.
    pub fn key(&self) -> anyhow::Result<Option<SigningKey>> {
        Ok(match &self.sign_key {
            Some(file) => Some(SigningKey::from_file(file)?),
            None => None,
        })
    }
}

/// The [`Cache`] a build's `settings.cache` names.
pub fn cache_of(setting: &CacheSetting) -> Cache {
    Cache::new(setting.url.clone(), setting.public_keys.clone())
}

/// Pushes the closure of `path` on a blocking thread, its progress on
/// stderr (unless `show_progress` is false).
pub async fn publish(
    path: &StorePath,
    cache: &Cache,
    key: Option<&SigningKey>,
    show_progress: bool,
) -> anyhow::Result<PushReport> {
    let (path, cache, key) = (path.clone(), cache.clone(), key.cloned());
    let url = cache.url.to_string();
    let report = tokio::task::spawn_blocking(move || {
        cache.push(&path, key.as_ref(), &mut |event| {
            if show_progress {
                eprintln!("{}", progress_line(&url, &event));
            }
        })
    })
    .await??;
    Ok(report)
}

fn progress_line(url: &str, event: &PushProgress) -> String {
    match event {
        PushProgress::Checked { closure, present } => {
            format!("{url} has {present} of the build's {closure} paths")
        }
        PushProgress::Copying {
            path,
            number,
            total,
        } => format!("[{number}/{total}] copying {path}"),
        PushProgress::Signing { paths } => {
            format!("signing {paths} path(s) the cache has without this key's signature")
        }
    }
}

/// `pushed 3 paths (1.2 KiB) to URL, signed by NAME; 2 were there already`.
pub fn report_line(
    path: &StorePath,
    cache: &Cache,
    report: &PushReport,
    key: Option<&SigningKey>,
) -> String {
    let signed = key
        .map(|k| format!(", signed by {}", k.name()))
        .unwrap_or_else(|| ", unsigned".to_owned());
    let mut line = format!(
        "pushed {path} to {}: {} path(s) sent ({}){signed}; {} already there",
        cache.url,
        report.paths_sent,
        human_bytes(report.bytes_sent),
        report.paths_present
    );
    if report.paths_signed > 0 {
        line.push_str(&format!(", {} of them signed now", report.paths_signed));
    }
    line
}

fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} bytes");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// Where an operator deploy (or rollback) publishes its build: the build's
/// settings.cache, signed with the user's key.
pub struct Publish {
    cache: kix_nix::Cache,
    key: kix_nix::SigningKey,
    show_progress: bool,
}

impl Publish {
    /// None when the build names no cache; an error, before anything is
    /// asked or changed, when it does and no key is given.
    pub fn of(
        build: &kix_manifest::Build,
        key: &SignKeyArgs,
        show_progress: bool,
    ) -> anyhow::Result<Option<Publish>> {
        let Some(setting) = &build.settings.cache else {
            return Ok(None);
        };
        let Some(key) = key.key()? else {
            anyhow::bail!(
                "Kix cluster {} publishes its builds to {} (settings.cache), and no key was given to sign them: pass --sign-key FILE or set {} to a Nix secret key file (nix key generate-secret --key-name NAME): nothing was changed",
                build.cluster,
                setting.url,
                SIGN_KEY_ENV
            );
        };
        Ok(Some(Publish {
            cache: cache_of(setting),
            key,
            show_progress,
        }))
    }

    /// Pushes the build and says where the record will say it comes from.
    pub async fn run(&self, path: &str, receipt: &mut ReceiptInfo) -> anyhow::Result<()> {
        let path = kix_manifest::StorePath::parse(path)?;
        let report = publish(&path, &self.cache, Some(&self.key), self.show_progress).await?;
        eprintln!(
            "{}",
            report_line(&path, &self.cache, &report, Some(&self.key))
        );
        receipt.cache = Some(self.cache.url.to_string());
        receipt.signed_by = Some(self.key.name().to_owned());
        Ok(())
    }
}

/// Where an operator rollback's target comes from: pushed with the
/// user's key when one is given (idempotent: nothing is sent if the cache
/// has it); else the cache must hold it already, signed by one of its
/// public keys (checked with Nix), and the record names the cache and the
/// signer the target's record named. None when the build names no cache.
pub async fn target_source(
    build: &kix_manifest::Build,
    path: &str,
    key: &SignKeyArgs,
    target: &kix_api::Activation,
    show_progress: bool,
    receipt: &mut ReceiptInfo,
) -> anyhow::Result<()> {
    if key.sign_key.is_some()
        && let Some(publish) = Publish::of(build, key, show_progress)?
    {
        return publish.run(path, receipt).await;
    }
    let Some(setting) = &build.settings.cache else {
        return Ok(());
    };
    let cache = cache_of(setting);
    let store_path = kix_manifest::StorePath::parse(path)?;
    let checked = (cache.clone(), store_path.clone());
    let verified = tokio::task::spawn_blocking(move || checked.0.verify(&checked.1)).await?;
    if let Err(error) = verified {
        anyhow::bail!(
            "the build {path} is not in {} as Kix cluster {} needs it ({error}): pass --sign-key FILE (or set {SIGN_KEY_ENV}) to publish it: nothing was changed",
            cache.url,
            build.cluster
        );
    }
    receipt.cache = Some(cache.url.to_string());
    receipt.signed_by = target.spec.source.signed_by.clone();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::human_bytes;

    #[test]
    fn sizes() {
        assert_eq!(human_bytes(0), "0 bytes");
        assert_eq!(human_bytes(2048), "2.0 KiB");
        assert_eq!(human_bytes(5 * 1024 * 1024 + 1), "5.0 MiB");
    }
}

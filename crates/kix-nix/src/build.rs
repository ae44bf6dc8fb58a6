//! Building a Kix cluster with `nix build`, and reading the result.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

use kix_manifest::{Build, StorePath};

use crate::NixError;
use crate::command::{EXPERIMENTAL, NIX, NixCommand};
use crate::store::{self, Resolved};

/// Where the build comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuildSource {
    /// `nix build <flake>#kixClusters.<cluster>`.
    Flake { flake: String, cluster: String },
    /// `nix build --file <file> <attr>` (for people without flakes).
    File { file: PathBuf, attr: String },
    /// `nix build <flake>#<attr>`: another output than a cluster's (a
    /// fleet's `kixFleets.<name>`, see [`output_attr`]).
    FlakeAttr { flake: String, attr: String },
    /// A store path used as it is (checked, realised if needed), or a plain
    /// directory holding a manifest tree, added to the store first.
    Path(PathBuf),
}

impl BuildSource {
    /// The flake output of `cluster`: `<flake>#kixClusters.<cluster>`.
    pub fn flake(flake: impl Into<String>, cluster: impl Into<String>) -> Self {
        BuildSource::Flake {
            flake: flake.into(),
            cluster: cluster.into(),
        }
    }

    /// `file` with attribute `attr`, defaulting to `kixClusters.<cluster>`.
    pub fn file(file: impl Into<PathBuf>, attr: Option<String>, cluster: &str) -> Self {
        BuildSource::File {
            file: file.into(),
            attr: attr.unwrap_or_else(|| cluster_attr(cluster)),
        }
    }

    /// The installable `nix build` gets, if this source is built at all.
    pub fn installable(&self) -> Option<String> {
        match self {
            BuildSource::Flake { flake, cluster } => {
                Some(format!("{flake}#{}", cluster_attr(cluster)))
            }
            BuildSource::File { attr, .. } => Some(attr.clone()),
            BuildSource::FlakeAttr { flake, attr } => Some(format!("{flake}#{attr}")),
            BuildSource::Path(_) => None,
        }
    }
}

impl fmt::Display for BuildSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildSource::Flake { flake, cluster } => {
                write!(f, "{flake}#{}", cluster_attr(cluster))
            }
            BuildSource::File { file, attr } => write!(f, "{} -A {attr}", file.display()),
            BuildSource::FlakeAttr { flake, attr } => write!(f, "{flake}#{attr}"),
            BuildSource::Path(path) => write!(f, "{}", path.display()),
        }
    }
}

/// `kixClusters.<cluster>`, quoting the name when Nix would not read it as a
/// plain attribute name.
fn cluster_attr(cluster: &str) -> String {
    output_attr("kixClusters", cluster)
}

/// `<output>.<name>` (`kixFleets.prod`), quoting the name when Nix would
/// not read it as a plain attribute name.
pub fn output_attr(output: &str, name: &str) -> String {
    let plain = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '\''))
        && !name.starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '\'');
    if plain {
        format!("{output}.{name}")
    } else {
        format!(
            "{output}.\"{}\"",
            name.replace('\\', "\\\\").replace('"', "\\\"")
        )
    }
}

/// How to run `nix build`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BuildOptions {
    /// Copy Nix's stderr (progress, build logs, errors) to ours as it comes.
    /// It is captured either way, for the error.
    pub show_progress: bool,
    /// Build without the network: `--offline` and no substituters, so
    /// nothing waits on a cache that cannot be reached.
    pub offline: bool,
    /// More arguments for `nix build` (`--show-trace`, `-L`, `--option k v`).
    pub extra_args: Vec<OsString>,
}

impl BuildOptions {
    fn nix_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        if self.offline {
            args.extend(["--offline", "--option", "substituters", ""].map(OsString::from));
        }
        args.extend(self.extra_args.iter().cloned());
        args
    }
}

/// Builds `source` and returns the store path of the result. A
/// [`BuildSource::Path`] is not built: see [`store::resolve_path`].
pub fn build(source: &BuildSource, options: &BuildOptions) -> Result<StorePath, NixError> {
    let built = build_unchecked(source, options)?;
    built.check()?;
    Ok(built.path)
}

/// [`build`], leaving the validity check of a `--path` store path to
/// [`Resolved::check`] ([`store::resolve_path_unchecked`]).
pub fn build_unchecked(source: &BuildSource, options: &BuildOptions) -> Result<Resolved, NixError> {
    let command = match source {
        BuildSource::Path(path) => return store::resolve_path_unchecked(path),
        BuildSource::Flake { .. } | BuildSource::FlakeAttr { .. } => nix_build(options),
        BuildSource::File { file, .. } => nix_build(options).arg("--file").arg(file),
    };
    let command = match source.installable() {
        Some(installable) => command.arg(installable),
        None => command,
    };
    tracing::info!(source = %source, "building with nix");
    let out = command.run(options.show_progress)?;
    let path = parse_build_json(&command.display(), &out.stdout)?;
    tracing::info!(path = %path, "built");
    Ok(Resolved::valid(path))
}

fn nix_build(options: &BuildOptions) -> NixCommand {
    NixCommand::new(NIX)
        .args(EXPERIMENTAL)
        .args(["build", "--no-link", "--json"])
        .args(options.nix_args())
}

/// `nix build --json` prints `[{"drvPath":…,"outputs":{"out":"/nix/store/…"}}]`.
fn parse_build_json(command: &str, stdout: &str) -> Result<StorePath, NixError> {
    let unexpected = |reason: &str| NixError::UnexpectedOutput {
        command: command.to_owned(),
        reason: reason.to_owned(),
        output: stdout.to_owned(),
    };
    let value: serde_json::Value =
        serde_json::from_str(stdout.trim()).map_err(|e| unexpected(&format!("not JSON: {e}")))?;
    let results = value
        .as_array()
        .ok_or_else(|| unexpected("expected a JSON array"))?;
    let [result] = results.as_slice() else {
        return Err(unexpected(&format!(
            "expected one build result, got {}",
            results.len()
        )));
    };
    let outputs = result
        .get("outputs")
        .and_then(|o| o.as_object())
        .ok_or_else(|| unexpected("no \"outputs\" object"))?;
    let out = match outputs.get("out") {
        Some(out) => out,
        None if outputs.len() == 1 => outputs.values().next().unwrap_or(&serde_json::Value::Null),
        None => return Err(unexpected("no \"out\" output")),
    };
    let text = out
        .as_str()
        .ok_or_else(|| unexpected("the output path is not a string"))?;
    Ok(StorePath::parse(text)?)
}

/// Building and reading together, for `kix build`, `kix plan`, `kix deploy`.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Nix(#[from] NixError),

    /// The tree is not a valid format-1 manifest tree.
    #[error("reading the build {path}: {source}")]
    Read {
        path: StorePath,
        #[source]
        source: Box<kix_manifest::TreeError>,
    },

    /// `kix.json` names another cluster than the one asked for.
    #[error(
        "the build {path} is of Kix cluster {found:?}, not {expected:?} (kix.json says \"cluster\": {found:?})"
    )]
    ClusterMismatch {
        expected: String,
        found: String,
        path: StorePath,
    },
}

/// Builds (or resolves) `source`, reads the manifest tree from the store and
/// checks that it is the build of `cluster`.
pub fn build_and_read(
    source: &BuildSource,
    cluster: &str,
    options: &BuildOptions,
) -> Result<(StorePath, Build), BuildError> {
    read_build_of(build(source, options)?, cluster)
}

/// [`read_build`], checking that it is the build of `cluster`.
pub fn read_build_of(path: StorePath, cluster: &str) -> Result<(StorePath, Build), BuildError> {
    let build = read_build(&path)?;
    if build.cluster != cluster {
        return Err(BuildError::ClusterMismatch {
            expected: cluster.to_owned(),
            found: build.cluster.clone(),
            path,
        });
    }
    Ok((path, build))
}

/// Reads the manifest tree at `path` with the default reader options (store
/// `/nix/store`: symlinks may not leave it).
pub fn read_build(path: &StorePath) -> Result<Build, BuildError> {
    kix_manifest::read_tree(path.as_path(), &kix_manifest::ReadOptions::default()).map_err(
        |source| BuildError::Read {
            path: path.clone(),
            source: Box::new(source),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fleet_is_built_from_kix_fleets() {
        let source = BuildSource::FlakeAttr {
            flake: ".".into(),
            attr: output_attr("kixFleets", "prod"),
        };
        assert_eq!(source.installable().as_deref(), Some(".#kixFleets.prod"));
        assert_eq!(source.to_string(), ".#kixFleets.prod");
        assert_eq!(
            output_attr("kixFleets", "my.fleet"),
            "kixFleets.\"my.fleet\""
        );
    }

    #[test]
    fn installables() {
        assert_eq!(
            BuildSource::flake(".", "prod").installable().as_deref(),
            Some(".#kixClusters.prod")
        );
        assert_eq!(
            BuildSource::flake("github:o/r", "my.cluster")
                .installable()
                .as_deref(),
            Some("github:o/r#kixClusters.\"my.cluster\"")
        );
        assert_eq!(
            BuildSource::file("default.nix", None, "prod"),
            BuildSource::File {
                file: "default.nix".into(),
                attr: "kixClusters.prod".into()
            }
        );
        assert_eq!(
            BuildSource::file("c.nix", Some("clusters.x".into()), "prod")
                .installable()
                .as_deref(),
            Some("clusters.x")
        );
        assert_eq!(BuildSource::Path("/tmp/x".into()).installable(), None);
    }

    #[test]
    fn offline_args() {
        let options = BuildOptions {
            offline: true,
            extra_args: vec!["--show-trace".into()],
            ..BuildOptions::default()
        };
        assert_eq!(
            options.nix_args(),
            ["--offline", "--option", "substituters", "", "--show-trace"].map(OsString::from)
        );
        assert!(BuildOptions::default().nix_args().is_empty());
    }

    #[test]
    fn parses_nix_build_json() {
        let good = r#"[{"drvPath":"/nix/store/2x4rbwi3w11vp2z727psffi51ii4av01-kxa.drv","outputs":{"out":"/nix/store/ldf6lay2b60x9d3scxq7j221lwjjlva1-kxa"}}]"#;
        assert_eq!(
            parse_build_json("nix build", good)
                .expect("parses")
                .as_str(),
            "/nix/store/ldf6lay2b60x9d3scxq7j221lwjjlva1-kxa"
        );
        for bad in [
            "",
            "{}",
            "[]",
            r#"[{"outputs":{}}]"#,
            r#"[{"outputs":{"out":1}}]"#,
            r#"[{"outputs":{"out":"/tmp/x"}}]"#,
        ] {
            assert!(parse_build_json("nix build", bad).is_err(), "{bad}");
        }
    }
}

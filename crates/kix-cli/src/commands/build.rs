//! `kix build <CLUSTER>`: build with Nix, print the store path and a summary.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use clap::Args;
use kix_manifest::{Build, PackageSource};
use kix_nix::StorePath;
use serde::Serialize;

use super::{GlobalArgs, OutputFormat};
use crate::source::SourceArgs;
use crate::validation::{self, VersionArg};

#[derive(Debug, Args)]
pub struct BuildArgs {
    /// The Kix cluster (an attribute of `kixClusters` in the flake).
    pub cluster: String,

    #[command(flatten)]
    pub source: SourceArgs,

    /// Output format on stdout.
    #[arg(long, short = 'o', value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,

    /// Do not check the objects against the Kubernetes API schemas and the
    /// build's CRDs (see `kix validate`).
    #[arg(long)]
    pub no_validate: bool,

    #[command(flatten)]
    pub version: VersionArg,

    /// Extra arguments for `nix build`, after `--` (e.g. `-- --show-trace`).
    #[arg(last = true, value_name = "NIX_ARGS")]
    pub nix_args: Vec<OsString>,
}

pub async fn exec(args: BuildArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let (path, build) = args
        .source
        .build_and_read(&args.cluster, global, &args.nix_args)
        .await?;
    // The Nix store is world-readable.
    kix_engine::gates::plaintext_secrets(&build)?;
    let validation = if args.no_validate {
        None
    } else {
        Some(args.version.validate(&build)?)
    };
    let mut summary = Summary::new(&path, &build);
    summary.validation = validation;
    let text = match args.output {
        OutputFormat::Json => {
            let mut text = serde_json::to_string_pretty(&summary)?;
            text.push('\n');
            text
        }
        OutputFormat::Text => summary.text(),
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    let Some(report) = &summary.validation else {
        return Ok(ExitCode::SUCCESS);
    };
    if args.output == OutputFormat::Text {
        // The summary is stdout; what is wrong goes with the other errors.
        for finding in &report.findings {
            eprintln!("error: {finding}");
        }
        if !report.is_valid() {
            eprintln!(
                "{} (--no-validate skips this check)",
                validation::verdict(report)
            );
        }
        if !global.quiet {
            validation::print_unchecked(report);
        }
    }
    Ok(validation::exit_code(report))
}

/// What `kix build` reports; `--output json` prints it as is.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Summary {
    store_path: String,
    cluster: String,
    /// In dependency order.
    packages: Vec<PackageSummary>,
    /// Object counts per kind (`Deployment.apps`, `ConfigMap`).
    kinds: BTreeMap<String, usize>,
    /// The schema check (absent with `--no-validate`).
    #[serde(skip_serializing_if = "Option::is_none")]
    validation: Option<kix_validate::Report>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct PackageSummary {
    name: String,
    version: String,
    objects: usize,
    /// Helm test hooks: not deployed.
    #[serde(skip_serializing_if = "is_zero")]
    helm_tests: usize,
    /// The Helm chart or Kustomize overlay it came from, when the build
    /// says.
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<PackageSource>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Summary {
    fn new(path: &StorePath, build: &Build) -> Self {
        Summary {
            store_path: path.to_string(),
            cluster: build.cluster.clone(),
            packages: build
                .packages
                .iter()
                .map(|p| PackageSummary {
                    name: p.name.clone(),
                    version: p.version.clone(),
                    objects: p.objects.len(),
                    helm_tests: p.tests.len(),
                    source: build.sources.get(&p.name).cloned(),
                })
                .collect(),
            kinds: build.summary().by_kind,
            validation: None,
        }
    }

    fn text(&self) -> String {
        use std::fmt::Write as _;
        let objects: usize = self.packages.iter().map(|p| p.objects).sum();
        let mut out = String::new();
        let _ = writeln!(out, "{}", self.store_path);
        let _ = writeln!(
            out,
            "cluster {}: {} {}, {} {}",
            self.cluster,
            self.packages.len(),
            plural(self.packages.len(), "package", "packages"),
            objects,
            plural(objects, "object", "objects"),
        );
        if !self.packages.is_empty() {
            let _ = writeln!(out, "\npackages (in apply order):");
            let name_width = self
                .packages
                .iter()
                .map(|p| p.name.len())
                .max()
                .unwrap_or(0);
            let version_width = self
                .packages
                .iter()
                .map(|p| p.version.len())
                .max()
                .unwrap_or(0);
            for p in &self.packages {
                let _ = write!(
                    out,
                    "  {:name_width$}  {:version_width$}  {} {}",
                    p.name,
                    p.version,
                    p.objects,
                    plural(p.objects, "object", "objects"),
                );
                if p.helm_tests > 0 {
                    let hooks = plural(p.helm_tests, "Helm test hook", "Helm test hooks");
                    let _ = write!(out, ", {} {hooks} (not deployed)", p.helm_tests);
                }
                if let Some(source) = &p.source {
                    let _ = write!(out, "; from {source}");
                }
                out.push('\n');
            }
        }
        if !self.kinds.is_empty() {
            let _ = writeln!(out, "\nobjects by kind:");
            let kind_width = self.kinds.keys().map(String::len).max().unwrap_or(0);
            for (kind, count) in &self.kinds {
                let _ = writeln!(out, "  {kind:kind_width$}  {count}");
            }
        }
        out
    }
}

fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 { one } else { many }
}

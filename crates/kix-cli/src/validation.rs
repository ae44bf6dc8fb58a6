//! A validation report as the commands show it (`kix validate`, `kix
//! build`), and the Kubernetes version it is made against.

use std::process::ExitCode;

use clap::Args;
use kix_manifest::Build;
use kix_validate::Report;

/// Which Kubernetes release's schemas built-in kinds are checked against.
#[derive(Debug, Clone, Args)]
pub struct VersionArg {
    /// Kubernetes version to validate against [default: the build's
    /// `kubernetesVersion` setting, else the release kix is tested with]
    #[arg(long, value_name = "VERSION", env = "KIX_KUBERNETES_VERSION")]
    pub kubernetes_version: Option<String>,
}

impl VersionArg {
    /// Validates `build`; an unsupported version is an error naming it.
    pub fn validate(&self, build: &Build) -> anyhow::Result<Report> {
        let mut report = kix_validate::validate_build(build, self.kubernetes_version.as_deref())?;
        scrub_decrypted(build, &mut report);
        Ok(report)
    }
}

/// A finding about a decrypted Secret (the reader had a key) may quote a
/// value that came out of decryption: scrubbed.
fn scrub_decrypted(build: &Build, report: &mut Report) {
    for finding in &mut report.findings {
        let values = build
            .objects()
            .filter(|o| o.source == finding.file && o.document == finding.document)
            .find_map(|o| o.decrypted.as_ref());
        if let Some(values) = values {
            finding.message = values.scrub(&finding.message).into_owned();
        }
    }
}

/// The last line of a text report.
pub fn verdict(report: &Report) -> String {
    let crds = match report.custom_kinds {
        0 => String::new(),
        n => format!(" and {n} custom resource kind(s) of the build"),
    };
    if report.is_valid() {
        format!(
            "ok: {} object(s) valid against Kubernetes {}{crds}",
            report.objects, report.kubernetes_version
        )
    } else {
        format!(
            "error: {} schema error(s) in {} object(s) (Kubernetes {}{crds})",
            report.findings.len(),
            report.objects,
            report.kubernetes_version
        )
    }
}

/// What was not checked, on stderr.
pub fn print_unchecked(report: &Report) {
    for unchecked in &report.unchecked {
        eprintln!("note: not checked: {unchecked}");
    }
}

pub fn exit_code(report: &Report) -> ExitCode {
    if report.is_valid() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

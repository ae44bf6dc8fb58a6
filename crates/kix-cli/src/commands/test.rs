//! `kix test <CLUSTER>`: run the build's Helm test hooks against the live
//! cluster and report each one's outcome (`crate::helm_tests` runs them).

use std::ffi::OsString;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde::Serialize;

use super::{GlobalArgs, OutputFormat};
use crate::helm_tests::{TestOptions, TestResult, Verdict};
use crate::output::{json_text, print_stdout};
use crate::source::SourceArgs;

#[derive(Debug, Args)]
pub struct TestArgs {
    /// The Kix cluster (an attribute of `kixClusters` in the flake).
    pub cluster: String,
    #[command(flatten)]
    pub source: SourceArgs,
    /// How long each test may run (and a previous run's object may take to
    /// go) before it counts as failed (e.g. 90s, 5m).
    #[arg(long, value_parser = kix_engine::duration::parse, default_value = "5m")]
    pub timeout: Duration,
    /// Only the tests of this package.
    #[arg(long, value_name = "PACKAGE")]
    pub package: Option<String>,
    /// Output format: a line per test as it finishes, or JSON at the end.
    #[arg(long, short = 'o', value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
    /// Extra arguments for `nix build`, after `--` (e.g. `-- --show-trace`).
    #[arg(last = true, value_name = "NIX_ARGS")]
    pub nix_args: Vec<OsString>,
}

/// What `kix test -o json` prints.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Report<'a> {
    cluster: &'a str,
    store_path: String,
    passed: usize,
    failed: usize,
    tests: &'a [TestResult],
}

pub async fn exec(args: TestArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let (path, build) = args
        .source
        .build_and_read(&args.cluster, global, &args.nix_args)
        .await?;
    if let Some(package) = &args.package
        && build.package(package).is_none()
    {
        anyhow::bail!("--package {package:?}: the build has no such package");
    }
    let client = crate::kube_client::client_for_build(global, &build.settings).await?;
    let options = TestOptions {
        package: args.package.clone(),
        timeout: args.timeout,
    };
    let text = args.output == OutputFormat::Text;
    let results = crate::helm_tests::run(&client, &build, &options, |result| {
        if text {
            // Each as it finishes: a test may take minutes.
            let _ = print_stdout(&result_text(result));
        }
    })
    .await;
    let failed = results
        .iter()
        .filter(|r| r.verdict == Verdict::Failed)
        .count();
    let passed = results.len() - failed;
    if text {
        print_stdout(&summary_line(&build.cluster, passed, failed))?;
    } else {
        print_stdout(&json_text(&Report {
            cluster: &build.cluster,
            store_path: path.to_string(),
            passed,
            failed,
            tests: &results,
        })?)?;
    }
    Ok(crate::output::exit_for_tests(failed == 0))
}

/// `PASS  Pod apps/web-test (Succeeded, 3s)`, then for a failure its reason
/// and log lines, indented.
fn result_text(result: &TestResult) -> String {
    let word = match result.verdict {
        Verdict::Passed => "PASS",
        Verdict::Failed => "FAIL",
    };
    let mut out = format!(
        "{word}  {} ({}, {}s",
        result.object, result.phase, result.seconds
    );
    if result.deleted {
        out.push_str(", deleted by its hook-delete-policy");
    }
    out.push_str(")\n");
    if let Some(reason) = &result.reason {
        let _ = writeln!(out, "      {reason}");
    }
    for line in &result.logs {
        let _ = writeln!(out, "      | {line}");
    }
    out
}

fn summary_line(cluster: &str, passed: usize, failed: usize) -> String {
    match passed + failed {
        0 => format!("Kix cluster {cluster}: the build has no Helm test hooks\n"),
        n => format!("Kix cluster {cluster}: {n} test(s), {passed} passed, {failed} failed\n"),
    }
}

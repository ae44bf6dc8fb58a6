//! `kix`: deploy what Nix builds. Each subcommand lives in `commands/<name>.rs`
//! with its clap arguments and an `exec` that calls the libraries.
//!
//! # Where things are
//!
//! - A subcommand: `commands/<name>.rs` (its args and `exec`), dispatched
//!   by `commands/mod.rs`; a subcommand of a subcommand, `<name>_<sub>.rs`.
//!   A command file imports none of its siblings (tests/architecture.rs in
//!   kix-engine checks it): what several share goes in a module of its own.
//! - Shared arguments and helpers: `source.rs` (where a build comes from and
//!   reading it), `args.rs` (confirmation guards, engine options),
//!   `validation.rs` (the report's lines), `output.rs` (stdout, logging,
//!   printing a plan), `render.rs` (plan text), `plan_markdown.rs` (a
//!   plan as a pull request's comment), `clusters.rs` (`status --all`),
//!   `progress.rs` and `tui.rs`
//!   (a run's events), `kube_client.rs` (kubeconfig and clients),
//!   `helm_tests.rs` (running a build's Helm test hooks, `kix test`),
//!   `commands/operator.rs` (operator mode's records and waits).
//! - A rule that refuses a change is never checked here: it is a gate of
//!   the engine (`kix_engine::gates`); durations are read by
//!   `kix_engine::duration::parse`.

mod args;
mod clusters;
mod commands;
mod helm_tests;
mod kube_client;
mod output;
mod plan_markdown;
mod progress;
#[cfg(test)]
mod reference;
mod render;
mod source;
mod tui;
mod validation;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = commands::Cli::parse();
    output::init_logging(&cli.global);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(commands::exec(cli)) {
        Ok(code) => code,
        Err(err) => {
            output::report_error(&err);
            ExitCode::from(1)
        }
    }
}

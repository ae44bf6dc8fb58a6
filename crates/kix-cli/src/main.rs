//! `kix`: deploy what Nix builds. Each subcommand lives in `commands/<name>.rs`
//! with its clap arguments and an `exec` that calls the libraries.

mod args;
mod commands;
mod kube_client;
mod output;
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

//! `kix completions <SHELL>` and `kix man`: shell completion scripts
//! (clap_complete) and the man page (clap_mangen, roff), printed to stdout.

use std::process::ExitCode;

use clap::{Args, CommandFactory};
use clap_complete::Shell;

use super::{Cli, GlobalArgs};

/// Print a completion script: `kix completions bash > /etc/bash_completion.d/kix`,
/// `kix completions zsh > "${fpath[1]}/_kix"`, `kix completions fish >
/// ~/.config/fish/completions/kix.fish`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Print the man page (roff): `kix man | man -l -`, or `kix man > kix.1`.
#[derive(Debug, Args)]
pub struct ManArgs {}

pub async fn exec(args: CompletionsArgs, _global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let mut command = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut command, "kix", &mut out);
    crate::output::print_stdout(&String::from_utf8_lossy(&out))?;
    Ok(ExitCode::SUCCESS)
}

pub async fn exec_man(_args: ManArgs, _global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let mut out = Vec::new();
    man_page(&mut out)?;
    crate::output::print_stdout(&String::from_utf8_lossy(&out))?;
    Ok(ExitCode::SUCCESS)
}

/// The page of `kix` with a section per subcommand, and the exit status.
fn man_page(out: &mut Vec<u8>) -> std::io::Result<()> {
    let command = Cli::command();
    let man = clap_mangen::Man::new(command.clone());
    man.render_title(out)?;
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)?;
    man.render_options_section(out)?;
    man.render_subcommands_section(out)?;
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = sub.get_name();
        out.extend_from_slice(format!(".SH \"KIX {}\"\n", name.to_uppercase()).as_bytes());
        let sub = sub.clone().bin_name(format!("kix {name}"));
        let man = clap_mangen::Man::new(sub);
        man.render_synopsis_section(out)?;
        man.render_description_section(out)?;
        man.render_options_section(out)?;
    }
    out.extend_from_slice(EXIT_STATUS.as_bytes());
    man.render_version_section(out)?;
    Ok(())
}

const EXIT_STATUS: &str = r#".SH "EXIT STATUS"
.TP
\fB0\fR
Success.
.TP
\fB1\fR
An error; a deploy or rollback that ended Degraded or Failed; a confirmation needed while stdin is not a terminal (nothing was changed); a record gc could not delete.
.TP
\fB2\fR
Usage error (unknown flag, missing argument).
.TP
\fB3\fR
\fBkix plan \-\-exit\-code\fR: the plan has changes.
.TP
\fB130\fR
Interrupted in the \fB\-\-tui\fR view (q or Ctrl\-C); rerun to converge.
"#;

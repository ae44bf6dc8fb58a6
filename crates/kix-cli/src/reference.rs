//! The CLI reference in markdown, generated from the clap definitions:
//! `docs/cli-reference.md` is this output, and a test keeps it current
//! (`UPDATE_DOCS=1 cargo test -p kix-cli --bin kix reference` rewrites it).

use std::fmt::Write as _;

use clap::Command;

pub fn markdown(root: &Command) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# kix command reference\n");
    let _ = writeln!(
        out,
        "Generated from the command definitions; do not edit by hand.\n"
    );
    command(&mut out, root, &[]);
    out
}

fn command(out: &mut String, cmd: &Command, parents: &[&str]) {
    let mut path: Vec<&str> = parents.to_vec();
    path.push(cmd.get_name());
    let title = path.join(" ");
    let level = if parents.is_empty() { "##" } else { "###" };
    let _ = writeln!(out, "{level} `{title}`\n");
    if let Some(about) = cmd.get_about() {
        let _ = writeln!(out, "{about}\n");
    }
    let positionals: Vec<_> = cmd.get_positionals().collect();
    let usage: Vec<String> = positionals
        .iter()
        .map(|a| format!("<{}>", a.get_id().as_str().to_uppercase()))
        .collect();
    let _ = writeln!(
        out,
        "```\n{title} [OPTIONS] {}\n```\n",
        usage.join(" ").trim()
    );
    let options: Vec<_> = cmd.get_arguments().filter(|a| !a.is_hide_set()).collect();
    if !options.is_empty() {
        let _ = writeln!(out, "| argument | description |\n|---|---|");
        for arg in options {
            let name = match (arg.get_short(), arg.get_long()) {
                (Some(s), Some(l)) => format!("`-{s}`, `--{l}`"),
                (None, Some(l)) => format!("`--{l}`"),
                (Some(s), None) => format!("`-{s}`"),
                (None, None) => format!("`<{}>`", arg.get_id().as_str().to_uppercase()),
            };
            let mut help = arg
                .get_help()
                .map(|h| h.to_string())
                .unwrap_or_default()
                .replace('\n', " ")
                .replace('|', "\\|");
            if !help.is_empty() && !help.ends_with('.') {
                help.push('.');
            }
            let values: Vec<String> = arg
                .get_possible_values()
                .iter()
                .map(|v| v.get_name().to_string())
                .collect();
            if !values.is_empty() && arg.get_action().takes_values() {
                let _ = write!(help, " One of: {}.", values.join(", "));
            }
            let defaults: Vec<String> = arg
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .collect();
            if !defaults.is_empty() {
                let _ = write!(help, " Default: `{}`.", defaults.join(","));
            }
            let _ = writeln!(out, "| {name} | {} |", help.trim());
        }
        let _ = writeln!(out);
    }
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        command(out, sub, &path);
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn reference_is_current() {
        let generated = super::markdown(&crate::commands::Cli::command());
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/cli-reference.md");
        if std::env::var_os("UPDATE_DOCS").is_some() {
            std::fs::write(&path, &generated).expect("write docs/cli-reference.md");
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == generated,
            "docs/cli-reference.md is out of date: run `UPDATE_DOCS=1 cargo test -p kix-cli --bin kix reference`"
        );
    }
}

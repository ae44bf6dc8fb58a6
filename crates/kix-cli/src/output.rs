//! Logging setup and error reports: the one place the CLI decides how things look.

use tracing_subscriber::EnvFilter;

use crate::commands::{GlobalArgs, LogFormat};

pub fn init_logging(global: &GlobalArgs) {
    let level = if global.quiet {
        "error"
    } else {
        match global.verbose {
            0 => "warn",
            1 => "info",
            2 => "debug",
            _ => "trace",
        }
    };
    let filter = EnvFilter::try_from_env("KIX_LOG").unwrap_or_else(|_| EnvFilter::new(level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match global.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.with_target(false).init(),
    }
}

/// Prints the whole cause chain, then a hint when the failure is a known one.
pub fn report_error(err: &anyhow::Error) {
    eprintln!("error: {err}");
    for cause in err.chain().skip(1) {
        eprintln!("  caused by: {cause}");
    }
    if let Some(hint) = hint_for(err) {
        eprintln!("hint: {hint}");
    }
}

fn hint_for(err: &anyhow::Error) -> Option<&'static str> {
    let text = format!("{err:#}");
    if text.contains("kubeconfig") && (text.contains("No such file") || text.contains("not found"))
    {
        return Some(
            "point KUBECONFIG or --kubeconfig at a kubeconfig file (checks/control-plane env prints one for the local control plane)",
        );
    }
    if text.contains("nix-store") && text.contains("No such file") {
        return Some("kix needs Nix: install it (on Debian: apt-get install nix-bin)");
    }
    None
}

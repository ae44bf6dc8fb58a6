//! Logging setup and error reports: the one place the CLI decides how things look.

use std::sync::OnceLock;

use chrono::{DateTime, Utc};
use tracing_subscriber::EnvFilter;

use crate::commands::{GlobalArgs, LogFormat, OutputFormat, PlanFormat};
use crate::render::{Style, plan_text};

/// What `--log-format`, `-v` and `-q` said, for the progress printers.
#[derive(Debug, Clone, Copy)]
pub struct Verbosity {
    pub log_format: LogFormat,
    pub quiet: bool,
    pub verbose: u8,
}

static VERBOSITY: OnceLock<Verbosity> = OnceLock::new();

/// The global verbosity (text logs, normal level before `init_logging`).
pub fn verbosity() -> Verbosity {
    VERBOSITY.get().copied().unwrap_or(Verbosity {
        log_format: LogFormat::Text,
        quiet: false,
        verbose: 0,
    })
}

pub fn init_logging(global: &GlobalArgs) {
    let _ = VERBOSITY.set(Verbosity {
        log_format: global.log_format,
        quiet: global.quiet,
        verbose: global.verbose,
    });
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
    // kube's client logs each failed request at ERROR; kix reports the
    // failure itself, once (and a prefetch a bad tree cancels is no failure).
    let default = match global.verbose {
        0 | 1 => format!("{level},kube_client=off"),
        _ => level.to_owned(),
    };
    let filter = EnvFilter::try_from_env("KIX_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match global.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.with_target(false).init(),
    }
}

/// Prints the whole cause chain, then a hint when the failure is a known one.
/// With `--log-format json` the report is one JSON object on stderr.
pub fn report_error(err: &anyhow::Error) {
    // A cause whose text an earlier line already shows (`#[error("{0}")]`
    // wrappers) is not repeated.
    let mut shown = vec![err.to_string()];
    let mut causes: Vec<String> = Vec::new();
    for cause in err.chain().skip(1).map(|c| c.to_string()) {
        if !shown.iter().any(|line| line.contains(&cause)) {
            causes.push(cause.clone());
        }
        shown.push(cause);
    }
    let hint = hint_for(err);
    if verbosity().log_format == LogFormat::Json {
        let report = serde_json::json!({
            "level": "ERROR",
            "error": err.to_string(),
            "causes": causes,
            "hint": hint,
        });
        eprintln!("{report}");
        return;
    }
    eprintln!("error: {err}");
    for cause in causes {
        eprintln!("  caused by: {cause}");
    }
    if let Some(hint) = hint {
        eprintln!("hint: {hint}");
    }
}

/// A hint for the failures people run into most, from the error's text (the
/// causes come from kube, Nix and the engine, so the text is what they share).
pub fn hint_for(err: &anyhow::Error) -> Option<&'static str> {
    hint_for_text(&format!("{err:#}"))
}

pub fn hint_for_text(text: &str) -> Option<&'static str> {
    let lower = text.to_lowercase();
    if text.contains("Nix is not installed")
        || (text.contains("nix") && text.contains("cannot run `nix"))
    {
        return Some(
            "kix needs Nix: install it (on Debian: apt-get install nix-bin) and make sure nix-store is on PATH",
        );
    }
    if text.contains("is no longer in the Nix store") {
        return Some(
            "the build was garbage-collected: rebuild it and deploy it (kix deploy), or pick another activation with --to (kix history lists them)",
        );
    }
    if text.contains("kubeconfig")
        && (text.contains("No such file")
            || text.contains("not found")
            || text.contains("failed to read kubeconfig"))
    {
        return Some(
            "no kubeconfig: point KUBECONFIG or --kubeconfig at one (checks/control-plane env prints one for the local control plane)",
        );
    }
    if text.contains("failed to infer config") {
        return Some(
            "no kubeconfig found and not running in a cluster: set KUBECONFIG or pass --kubeconfig",
        );
    }
    if text.contains("loading kubeconfig context")
        || text.contains("failed to load current context")
        || text.contains("LoadContext")
    {
        return Some(
            "that context is not in the kubeconfig: list them with `kubectl config get-contexts`, then pass --context NAME (or fix settings.context of the Kix cluster)",
        );
    }
    if text.contains(kix_engine::records::CRDS_MISSING) {
        return Some(
            "kix's CRDs are not installed: a first `kix deploy` installs them, or `kix crds | kubectl apply -f -`",
        );
    }
    if lower.contains("is forbidden") || text.contains("code: 403") {
        return Some(
            "the Kubernetes user of this kubeconfig lacks permission: check with `kubectl auth can-i --list`, or use another --context",
        );
    }
    if text.contains("Unauthorized") || text.contains("code: 401") {
        return Some(
            "the apiserver did not accept the credentials: refresh them or use another --context",
        );
    }
    if lower.contains("connection refused") || lower.contains("error trying to connect") {
        return Some(
            "the apiserver does not answer: is the cluster up, and is the kubeconfig's server address right?",
        );
    }
    None
}

/// `42s`, `5m`, `3h`, `12d`: how long ago `time` was.
pub fn age(time: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let secs = now.signed_duration_since(time).num_seconds().max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 2 * 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// Writes `text` to stdout; a closed pipe (`kix history | head`) is not an error.
/// A deploy's exit status: 0 when it ended Active, else 1 (Degraded and
/// Failed alike).
pub fn exit_for(phase: kix_api::Phase) -> std::process::ExitCode {
    if phase == kix_api::Phase::Active {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(1)
    }
}

/// `kix test`'s exit status: 0 when every test passed (or there were
/// none), else 1.
pub fn exit_for_tests(all_passed: bool) -> std::process::ExitCode {
    if all_passed {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(1)
    }
}

/// A deploy's outcome in one line: `<activation>: <phase> — <message>`.
pub fn print_outcome_line(outcome: &kix_engine::deploy::DeployOutcome) {
    let name = outcome.activation.as_deref().unwrap_or("-");
    println!("{name}: {} — {}", outcome.phase, outcome.message);
}

pub fn print_stdout(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

/// Pretty JSON with a final newline.
pub fn json_text<T: serde::Serialize>(value: &T) -> anyhow::Result<String> {
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    Ok(text)
}

/// The plan on stdout: human text, or JSON.
pub fn print_plan(
    plan: &kix_engine::plan::Plan,
    output: OutputFormat,
    show_unchanged: bool,
) -> anyhow::Result<()> {
    match output {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(plan)?),
        OutputFormat::Text => print!("{}", plan_text(plan, Style::detect(), show_unchanged)),
    }
    Ok(())
}

/// The plan on stdout as `kix plan` prints it: text, JSON or Markdown.
pub fn print_plan_as(
    plan: &kix_engine::plan::Plan,
    format: PlanFormat,
    show_unchanged: bool,
) -> anyhow::Result<()> {
    match format {
        PlanFormat::Text => print_plan(plan, OutputFormat::Text, show_unchanged),
        PlanFormat::Json => print_plan(plan, OutputFormat::Json, show_unchanged),
        PlanFormat::Markdown => print_stdout(&crate::plan_markdown::plan_markdown(plan)),
    }
}

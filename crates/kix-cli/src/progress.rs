//! Deploy progress on stderr, from the engine's events.
//!
//! - On a terminal: live bars per order group (CRDs, Namespaces, each
//!   package) with applied/total, elapsed time and what is waited on
//!   (indicatif).
//! - Not on a terminal: one plain line per group step (each object at -v).
//! - `--log-format json`: one JSON object per event.
//! - `--tui`: the full-screen view of [`crate::tui`], when there is a terminal.
//! - `-q` or `--output json`: nothing.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use kix_engine::deploy::Event;
use kix_engine::order::Group;
use kix_engine::plan::Plan;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::task::JoinHandle;

use crate::commands::LogFormat;
use crate::output::verbosity;
use crate::tui::TuiArgs;

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Off,
    Plain,
    Json,
    Bars,
    Tui,
}

/// Picks the mode: `enabled` is false for `--output json`.
pub fn mode(enabled: bool, tui: bool) -> Mode {
    let v = verbosity();
    if !enabled || v.quiet {
        return Mode::Off;
    }
    if v.log_format == LogFormat::Json {
        return Mode::Json;
    }
    let terminal =
        std::io::stderr().is_terminal() && std::env::var("TERM").map_or(true, |t| t != "dumb");
    match (terminal, tui) {
        (true, true) => Mode::Tui,
        (true, false) => Mode::Bars,
        (false, _) => Mode::Plain,
    }
}

/// Starts the progress printer; it ends when every sender is dropped. Bars on
/// a terminal, plain lines otherwise; with `--tui` the full-screen view shows
/// `plan` (falling back to bars or plain lines without a terminal). `verb`
/// titles it (`deploy`, `rollback`).
pub fn start_ui(
    ui: &TuiArgs,
    plan: &Plan,
    verb: &str,
    enabled: bool,
) -> (UnboundedSender<Event>, JoinHandle<()>) {
    let mode = mode(enabled, ui.tui);
    let model = (mode == Mode::Tui).then(|| crate::tui::Model::from_plan(plan, verb));
    spawn(mode, model)
}

/// The engine's deploy of `plan`, its progress shown by the UI of `ui`
/// (`verb`: "deploy", "rollback"; `text`: the output is text), returned
/// once the UI printed everything.
pub async fn deploy_with_ui(
    client: &kube::Client,
    build: &kix_manifest::Build,
    plan: Plan,
    mut options: kix_engine::deploy::DeployOptions,
    ui: &TuiArgs,
    verb: &str,
    text: bool,
) -> kix_engine::Result<kix_engine::deploy::DeployOutcome> {
    let (tx, printer) = start_ui(ui, &plan, verb, text);
    options.events = Some(tx);
    let outcome = kix_engine::deploy::deploy(client, build, plan, &options).await;
    // The UI ends when the last sender is gone.
    drop(options);
    let _ = printer.await;
    outcome
}

fn spawn(mode: Mode, model: Option<crate::tui::Model>) -> (UnboundedSender<Event>, JoinHandle<()>) {
    let (tx, rx) = unbounded_channel::<Event>();
    let handle = match (mode, model) {
        (Mode::Tui, Some(model)) => crate::tui::spawn(model, rx),
        (Mode::Bars, _) => tokio::task::spawn_blocking(move || bars(rx)),
        (mode, _) => tokio::spawn(lines(mode, rx)),
    };
    (tx, handle)
}

async fn lines(mode: Mode, mut rx: UnboundedReceiver<Event>) {
    while let Some(event) = rx.recv().await {
        match mode {
            Mode::Json => {
                if let Ok(text) = serde_json::to_string(&event) {
                    eprintln!("{text}");
                }
            }
            Mode::Plain => {
                if let Some(line) = line(&event) {
                    eprintln!("{line}");
                }
            }
            _ => {}
        }
    }
}

/// An object whose DELETE was accepted but which stays, held by finalizers.
pub fn deleting_line(key: &str, finalizers: &[String]) -> String {
    if finalizers.is_empty() {
        format!("  deleting {key} (still there)")
    } else {
        format!("  deleting {key} (waits for {})", finalizers.join(", "))
    }
}

/// The plain line of an event, if it gets one (each applied object only at -v).
pub fn line(event: &Event) -> Option<String> {
    Some(match event {
        Event::Recorded { activation } => format!("recorded activation {activation}"),
        Event::GroupStarted { group, objects } => format!("{group}: applying {objects} objects"),
        Event::Applied { key, action, .. } => {
            if verbosity().verbose > 0 {
                format!("  {} {key}", past(action.as_str()))
            } else {
                return None;
            }
        }
        Event::ApplyFailed { key, error, .. } => format!("  failed {key}: {error}"),
        Event::Waiting { group, pending } => {
            format!("{group}: waiting for {}", waiting(pending, 5))
        }
        Event::Healthy { group, elapsed_ms } => {
            format!("{group}: healthy ({:.1}s)", *elapsed_ms as f64 / 1000.0)
        }
        Event::Unhealthy { group, reasons } => {
            format!("{group}: not healthy: {}", reasons.join("; "))
        }
        Event::Skipped { group, reason } => format!("{group}: skipped ({reason})"),
        Event::Pruned { key, action } => format!(
            "  {} {key}",
            if action.as_str() == "delete" {
                "deleted"
            } else {
                "kept (shared)"
            }
        ),
        Event::PruneFailed { key, error } => format!("  could not delete {key}: {error}"),
        Event::PruneDeleting { key, finalizers } => deleting_line(key, finalizers),
        Event::Finished { .. } => return None,
    })
}

/// `created`, `updated`, ... for the -v lines.
fn past(action: &str) -> String {
    match action {
        "create" => "created".into(),
        "update" => "updated".into(),
        "replace" => "replaced".into(),
        "adopt" => "adopted".into(),
        "conflict" => "applied (forced)".into(),
        other => other.into(),
    }
}

/// `a, b, c and 4 more`.
pub fn waiting(pending: &[String], shown: usize) -> String {
    let list: Vec<&str> = pending.iter().take(shown).map(String::as_str).collect();
    let more = if pending.len() > shown {
        format!(" and {} more", pending.len() - shown)
    } else {
        String::new()
    };
    format!("{}{more}", list.join(", "))
}

/// Live bars: one per group, one for prune. Runs on a blocking thread.
fn bars(mut rx: UnboundedReceiver<Event>) {
    let multi = MultiProgress::new();
    let running = ProgressStyle::with_template(
        "{spinner:.cyan} {prefix:<28.bold} {bar:20.cyan/blue} {pos:>3}/{len:<3} {elapsed:>4} {wide_msg}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ")
    .tick_chars("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏✓");
    let done = ProgressStyle::with_template("{prefix:.green.bold} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    let failed = ProgressStyle::with_template("{prefix:.red.bold} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    let mut groups: HashMap<Group, ProgressBar> = HashMap::new();
    let mut prune: Option<ProgressBar> = None;
    let verbose = verbosity().verbose > 0;
    while let Some(event) = rx.blocking_recv() {
        match &event {
            Event::Recorded { activation } => {
                let _ = multi.println(format!("recorded activation {activation}"));
            }
            Event::GroupStarted { group, objects } => {
                let bar = multi.add(ProgressBar::new(*objects as u64));
                bar.set_style(running.clone());
                bar.set_prefix(group.to_string());
                bar.set_message("applying");
                bar.enable_steady_tick(Duration::from_millis(120));
                groups.insert(group.clone(), bar);
            }
            Event::Applied { group, key, action } => {
                if let Some(bar) = groups.get(group) {
                    bar.inc(1);
                }
                if verbose {
                    let _ = multi.println(format!("  {} {key}", past(action.as_str())));
                }
            }
            Event::ApplyFailed { key, error, .. } => {
                let _ = multi.println(format!("  failed {key}: {error}"));
            }
            Event::Waiting { group, pending } => {
                if let Some(bar) = groups.get(group) {
                    bar.set_message(format!("waiting for {}", waiting(pending, 3)));
                }
            }
            Event::Healthy { group, elapsed_ms } => {
                if let Some(bar) = groups.get(group) {
                    bar.set_style(done.clone());
                    bar.set_prefix(format!("✓ {group}"));
                    bar.finish_with_message(format!(
                        "{}/{} healthy ({:.1}s)",
                        bar.position(),
                        bar.length().unwrap_or(0),
                        *elapsed_ms as f64 / 1000.0
                    ));
                }
            }
            Event::Unhealthy { group, reasons } => {
                let bar = groups
                    .get(group)
                    .cloned()
                    .unwrap_or_else(|| multi.add(ProgressBar::new(0)));
                bar.set_style(failed.clone());
                bar.set_prefix(format!("✗ {group}"));
                bar.abandon_with_message(format!("not healthy: {}", reasons.join("; ")));
            }
            Event::Skipped { group, reason } => {
                let bar = multi.add(ProgressBar::new(0));
                bar.set_style(failed.clone());
                bar.set_prefix(format!("- {group}"));
                bar.abandon_with_message(format!("skipped ({reason})"));
            }
            Event::Pruned { key, .. }
            | Event::PruneFailed { key, .. }
            | Event::PruneDeleting { key, .. } => {
                let bar = prune.get_or_insert_with(|| {
                    let bar = multi.add(ProgressBar::new_spinner());
                    bar.set_style(
                        ProgressStyle::with_template(
                            "{spinner:.cyan} {prefix:<28.bold} {pos} {wide_msg}",
                        )
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                    );
                    bar.set_prefix("prune");
                    bar.enable_steady_tick(Duration::from_millis(120));
                    bar
                });
                bar.inc(1);
                bar.set_message(key.clone());
                if let Event::PruneFailed { key, error } = &event {
                    let _ = multi.println(format!("  could not delete {key}: {error}"));
                }
                if let Event::PruneDeleting { key, finalizers } = &event {
                    let _ = multi.println(deleting_line(key, finalizers));
                }
            }
            Event::Finished { .. } => {}
        }
    }
    for bar in groups.values().filter(|b| !b.is_finished()) {
        bar.abandon();
    }
    if let Some(bar) = prune {
        bar.set_style(done);
        bar.set_prefix("✓ prune");
        let n = bar.position();
        bar.finish_with_message(format!("{n} objects handled"));
    }
}

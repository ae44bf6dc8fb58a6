//! Deploy progress on stderr, from the engine's events: one plain line per
//! group step, plus each object at -v.

use kix_engine::deploy::Event;
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
use tokio::task::JoinHandle;

/// Starts the printer; it ends when every sender is dropped.
pub fn start(enabled: bool) -> (UnboundedSender<Event>, JoinHandle<()>) {
    let (tx, mut rx) = unbounded_channel::<Event>();
    let handle = tokio::spawn(async move {
        while let Some(event) = rx.recv().await {
            if enabled {
                if let Some(line) = line(&event) {
                    eprintln!("{line}");
                }
            }
        }
    });
    (tx, handle)
}

pub fn line(event: &Event) -> Option<String> {
    Some(match event {
        Event::Recorded { activation } => format!("recorded activation {activation}"),
        Event::GroupStarted { group, objects } => format!("{group}: applying {objects} objects"),
        Event::Applied { key, action } => {
            tracing::info!("{} {key}", action.as_str());
            return None;
        }
        Event::ApplyFailed { key, error } => format!("  failed {key}: {error}"),
        Event::Waiting { group, pending } => {
            let shown: Vec<&str> = pending.iter().take(5).map(String::as_str).collect();
            let more = if pending.len() > 5 {
                format!(" and {} more", pending.len() - 5)
            } else {
                String::new()
            };
            format!("{group}: waiting for {}{more}", shown.join(", "))
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
        Event::Finished { .. } => return None,
    })
}

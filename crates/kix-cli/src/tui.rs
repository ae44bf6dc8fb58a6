//! `--tui`: a full-screen view of a deploy or rollback (ratatui): the plan,
//! progress per order group (CRDs, Namespaces, each package) and a log pane,
//! fed by the engine's events. Drawn on stderr, so stdout stays the result.
//!
//! [`Model`] is a pure value (events in, a frame out, the clock passed in),
//! which is what the snapshot tests render on ratatui's `TestBackend`.
//! `q` or Ctrl-C leaves the view and stops kix (exit 130); a rerun
//! converges, as after any interrupted deploy. When the deploy ends the
//! view closes and the final progress and log are printed as plain text.

use std::io;
use std::time::{Duration, Instant};

use clap::Args;
use kix_api::Phase;
use kix_engine::deploy::Event;
use kix_engine::order;
use kix_engine::plan::{Action, Counts, Plan, PlannedObject};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Wrap};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::mpsc::error::TryRecvError;
use tokio::task::JoinHandle;

/// The `--tui` flag, for the commands that apply (deploy, rollback).
#[derive(Debug, Clone, Default, Args)]
pub struct TuiArgs {
    /// Full-screen progress view (plan, progress per package, log). Plain
    /// output when stderr is not a terminal.
    #[arg(long)]
    pub tui: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum GroupState {
    /// Nothing to write in it.
    Unchanged,
    Pending,
    Applying,
    Waiting(Vec<String>),
    Healthy(u64),
    Unhealthy(Vec<String>),
    Skipped(String),
}

#[derive(Debug, Clone)]
struct Group {
    name: order::Group,
    /// Objects the plan writes in this group.
    writes: usize,
    applied: usize,
    failed: usize,
    state: GroupState,
    started: Option<Duration>,
    ended: Option<Duration>,
}

/// Everything the view shows.
#[derive(Debug, Clone)]
pub struct Model {
    verb: String,
    cluster: String,
    store_path: String,
    current: Option<String>,
    counts: Counts,
    changes: Vec<(Action, String)>,
    groups: Vec<Group>,
    prune_planned: usize,
    pruned: usize,
    log: Vec<String>,
    activation: Option<String>,
    finished: Option<(Phase, String)>,
}

impl Model {
    /// The groups in the engine's order, from the plan.
    pub fn from_plan(plan: &Plan, verb: &str) -> Model {
        let objects: Vec<(&PlannedObject, order::Group)> = plan
            .packages
            .iter()
            .flat_map(|p| {
                p.objects
                    .iter()
                    .map(|o| (o, order::Group::of(&o.key, &p.name)))
            })
            .collect();
        let mut groups = Vec::new();
        let mut push = |name: order::Group, present: bool| {
            let count = objects
                .iter()
                .filter(|(o, g)| *g == name && o.action != Action::Unchanged)
                .count();
            if present {
                groups.push(Group {
                    name,
                    writes: count,
                    applied: 0,
                    failed: 0,
                    state: if count == 0 {
                        GroupState::Unchanged
                    } else {
                        GroupState::Pending
                    },
                    started: None,
                    ended: None,
                });
            }
        };
        for name in [order::Group::Crds, order::Group::Namespaces] {
            let present = objects.iter().any(|(_, g)| *g == name);
            push(name, present);
        }
        for package in &plan.packages {
            push(order::Group::Package(package.name.clone()), true);
        }
        let changes = plan
            .objects()
            .filter(|o| o.action != Action::Unchanged)
            .map(|o| (o.action, o.key.to_string()))
            .collect();
        Model {
            verb: verb.to_string(),
            cluster: plan.cluster.clone(),
            store_path: plan.store_path.clone(),
            current: plan.current_activation.clone(),
            counts: plan.counts.clone(),
            changes,
            groups,
            prune_planned: plan
                .prune
                .iter()
                .filter(|o| o.action == Action::Delete)
                .count(),
            pruned: 0,
            log: Vec::new(),
            activation: None,
            finished: None,
        }
    }

    fn group(&mut self, name: &order::Group) -> Option<&mut Group> {
        self.groups.iter_mut().find(|g| g.name == *name)
    }

    /// Takes in one event, `at` the time since the view started.
    pub fn apply(&mut self, event: &Event, at: Duration) {
        match event {
            Event::Recorded { activation } => {
                self.activation = Some(activation.clone());
                self.log.push(format!("recorded activation {activation}"));
            }
            Event::GroupStarted { group, objects } => {
                if self.group(group).is_none() {
                    self.groups.push(Group {
                        name: group.clone(),
                        writes: *objects,
                        applied: 0,
                        failed: 0,
                        state: GroupState::Pending,
                        started: None,
                        ended: None,
                    });
                }
                if let Some(g) = self.group(group) {
                    g.writes = *objects;
                    g.state = GroupState::Applying;
                    g.started = Some(at);
                }
                self.log
                    .push(format!("{group}: applying {objects} objects"));
            }
            Event::Applied { group, key, action } => {
                if let Some(g) = self.group(group) {
                    g.applied += 1;
                }
                self.log.push(format!("  {} {key}", action.as_str()));
            }
            Event::ApplyFailed { group, key, error } => {
                if let Some(g) = self.group(group) {
                    g.failed += 1;
                }
                self.log.push(format!("  failed {key}: {error}"));
            }
            Event::Waiting { group, pending } => {
                if let Some(g) = self.group(group) {
                    g.state = GroupState::Waiting(pending.clone());
                }
                self.log.push(format!(
                    "{group}: waiting for {}",
                    crate::progress::waiting(pending, 5)
                ));
            }
            Event::Healthy { group, elapsed_ms } => {
                if let Some(g) = self.group(group) {
                    g.state = GroupState::Healthy(*elapsed_ms);
                    g.ended = Some(at);
                }
                self.log.push(format!(
                    "{group}: healthy ({:.1}s)",
                    *elapsed_ms as f64 / 1000.0
                ));
            }
            Event::Unhealthy { group, reasons } => {
                if let Some(g) = self.group(group) {
                    g.state = GroupState::Unhealthy(reasons.clone());
                    g.ended = Some(at);
                }
                self.log
                    .push(format!("{group}: not healthy: {}", reasons.join("; ")));
            }
            Event::Skipped { group, reason } => {
                if let Some(g) = self.group(group) {
                    g.state = GroupState::Skipped(reason.clone());
                }
                self.log.push(format!("{group}: skipped ({reason})"));
            }
            Event::Pruned { key, action } => {
                if action.as_str() == "delete" {
                    self.pruned += 1;
                    self.log.push(format!("  deleted {key}"));
                } else {
                    self.log.push(format!("  kept (shared) {key}"));
                }
            }
            Event::PruneFailed { key, error } => {
                self.log.push(format!("  could not delete {key}: {error}"));
            }
            Event::PruneDeleting { key, finalizers } => {
                self.log.push(format!(
                    "  deleting {key} (waits for {})",
                    finalizers.join(", ")
                ));
            }
            Event::Finished {
                activation,
                phase,
                message,
            } => {
                // Shown in the footer; stdout gets the same line at the end.
                let _ = activation;
                self.finished = Some((*phase, message.clone()));
            }
        }
    }

    fn group_line(&self, g: &Group, now: Duration, name_width: usize) -> Line<'static> {
        let (icon, color) = match &g.state {
            GroupState::Unchanged => ("=", Color::DarkGray),
            GroupState::Pending => ("·", Color::DarkGray),
            GroupState::Applying => ("▶", Color::Cyan),
            GroupState::Waiting(_) => ("…", Color::Yellow),
            GroupState::Healthy(_) => ("✓", Color::Green),
            GroupState::Unhealthy(_) => ("✗", Color::Red),
            GroupState::Skipped(_) => ("-", Color::Red),
        };
        let elapsed = match (g.started, g.ended) {
            (Some(s), Some(e)) => format!("{:.1}s", e.saturating_sub(s).as_secs_f64()),
            (Some(s), None) => format!("{:.1}s", now.saturating_sub(s).as_secs_f64()),
            _ => String::new(),
        };
        let detail = match &g.state {
            GroupState::Unchanged => "unchanged".to_string(),
            GroupState::Pending => "pending".to_string(),
            GroupState::Applying => "applying".to_string(),
            GroupState::Waiting(p) => format!("waiting for {}", crate::progress::waiting(p, 3)),
            GroupState::Healthy(_) => "healthy".to_string(),
            GroupState::Unhealthy(r) => format!("not healthy: {}", r.join("; ")),
            GroupState::Skipped(r) => format!("skipped: {r}"),
        };
        let failed = if g.failed > 0 {
            format!(" {} failed", g.failed)
        } else {
            String::new()
        };
        Line::from(vec![
            Span::styled(format!("{icon} "), Style::new().fg(color)),
            Span::styled(
                format!("{:<name_width$}", g.name),
                Style::new().add_modifier(Modifier::BOLD),
            ),
            Span::raw(format!(
                " {:>3}/{:<3}{failed} {elapsed:>6}  ",
                g.applied, g.writes
            )),
            Span::styled(detail, Style::new().fg(color)),
        ])
    }

    /// Draws the whole view; `now` is the time since the view started.
    pub fn render(&self, frame: &mut Frame, now: Duration) {
        let area = frame.area();
        let log_height = (area.height / 3).max(5);
        let [header, middle, log, footer] = Layout::vertical([
            Constraint::Length(4),
            Constraint::Min(6),
            Constraint::Length(log_height),
            Constraint::Length(1),
        ])
        .areas(area);
        let [plan_area, progress_area] =
            Layout::horizontal([Constraint::Percentage(40), Constraint::Percentage(60)])
                .areas(middle);

        self.render_header(frame, header, now);
        self.render_plan(frame, plan_area);
        self.render_progress(frame, progress_area, now);
        self.render_log(frame, log);
        let footer_text = match &self.finished {
            Some((phase, message)) => format!(" {phase}: {message}"),
            None => " q: stop kix (a rerun converges)".to_string(),
        };
        frame.render_widget(
            Paragraph::new(footer_text).style(Style::new().add_modifier(Modifier::DIM)),
            Rect { ..footer },
        );
    }

    /// The cluster, the build, the activation and how long it has run.
    fn render_header(&self, frame: &mut Frame, header: Rect, now: Duration) {
        let status = match (&self.finished, &self.activation) {
            (Some((phase, _)), _) => phase.as_str().to_string(),
            (None, Some(_)) => "Applying".into(),
            (None, None) => "starting".into(),
        };
        let header_text = vec![
            Line::from(vec![
                Span::raw("Kix cluster "),
                Span::styled(
                    self.cluster.clone(),
                    Style::new().add_modifier(Modifier::BOLD),
                ),
                Span::raw(format!("  build {}", self.store_path)),
            ]),
            Line::from(format!(
                "activation {}  ({status}, {:.0}s)  current before: {}",
                self.activation.as_deref().unwrap_or("-"),
                now.as_secs_f64().floor(),
                self.current.as_deref().unwrap_or("none"),
            )),
        ];
        frame.render_widget(
            Paragraph::new(header_text)
                .block(Block::bordered().title(format!(" kix {} ", self.verb))),
            header,
        );
    }

    /// The plan's counts and as many of its changes as fit.
    fn render_plan(&self, frame: &mut Frame, plan_area: Rect) {
        let c = &self.counts;
        let mut plan_lines = vec![
            Line::from(format!(
                "{} create, {} update, {} unchanged",
                c.create, c.update, c.unchanged
            )),
            Line::from(format!(
                "{} delete, {} replace, {} adopt",
                c.delete, c.replace, c.adopt
            )),
            Line::from(""),
        ];
        let room = plan_area.height.saturating_sub(2 + 3) as usize;
        let shown = if self.changes.len() > room {
            room.saturating_sub(1)
        } else {
            self.changes.len()
        };
        for (action, key) in self.changes.iter().take(shown) {
            let color = match action {
                Action::Create | Action::Adopt => Color::Green,
                Action::Update => Color::Yellow,
                Action::Delete | Action::Replace | Action::Conflict => Color::Red,
                _ => Color::DarkGray,
            };
            plan_lines.push(Line::from(vec![
                Span::styled(format!("{:<8}", action.as_str()), Style::new().fg(color)),
                Span::raw(key.clone()),
            ]));
        }
        if shown < self.changes.len() {
            plan_lines.push(Line::from(format!("… {} more", self.changes.len() - shown)));
        }
        frame.render_widget(
            Paragraph::new(plan_lines).block(Block::bordered().title(" Plan ")),
            plan_area,
        );
    }

    /// One line per group, then the prune.
    fn render_progress(&self, frame: &mut Frame, progress_area: Rect, now: Duration) {
        let name_width = self
            .groups
            .iter()
            .map(|g| g.name.to_string().chars().count())
            .max()
            .unwrap_or(0)
            .min(28);
        let mut progress: Vec<Line> = self
            .groups
            .iter()
            .map(|g| self.group_line(g, now, name_width))
            .collect();
        if self.prune_planned > 0 || self.pruned > 0 {
            progress.push(Line::from(format!(
                "  {:<name_width$} {:>3}/{:<3} deleted",
                "prune", self.pruned, self.prune_planned
            )));
        }
        frame.render_widget(
            Paragraph::new(progress)
                .block(Block::bordered().title(" Progress "))
                .wrap(Wrap { trim: false }),
            progress_area,
        );
    }

    /// The log's last lines that fit.
    fn render_log(&self, frame: &mut Frame, log: Rect) {
        let visible = log.height.saturating_sub(2) as usize;
        let start = self.log.len().saturating_sub(visible);
        let log_lines: Vec<Line> = self.log[start..]
            .iter()
            .map(|l| Line::from(l.clone()))
            .collect();
        frame.render_widget(
            Paragraph::new(log_lines).block(Block::bordered().title(" Log ")),
            log,
        );
    }

    /// The final progress and log as plain text, printed when the view closes.
    pub fn summary(&self, now: Duration) -> String {
        let name_width = self
            .groups
            .iter()
            .map(|g| g.name.to_string().chars().count())
            .max()
            .unwrap_or(0);
        let mut out = String::new();
        for g in &self.groups {
            let line = self.group_line(g, now, name_width);
            let text: String = line.spans.iter().map(|s| s.content.as_ref()).collect();
            out.push_str(text.trim_end());
            out.push('\n');
        }
        for line in &self.log {
            out.push_str(line);
            out.push('\n');
        }
        out
    }
}

/// Restores the terminal however the view ends (panics included).
struct TerminalGuard;

impl TerminalGuard {
    fn enter() -> io::Result<TerminalGuard> {
        use ratatui::crossterm::{cursor, execute, terminal};
        terminal::enable_raw_mode()?;
        let guard = TerminalGuard;
        execute!(io::stderr(), terminal::EnterAlternateScreen, cursor::Hide)?;
        Ok(guard)
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        use ratatui::crossterm::{cursor, execute, terminal};
        let _ = execute!(io::stderr(), terminal::LeaveAlternateScreen, cursor::Show);
        let _ = terminal::disable_raw_mode();
    }
}

/// Runs the view on a blocking thread until every event sender is dropped.
pub fn spawn(model: Model, rx: UnboundedReceiver<Event>) -> JoinHandle<()> {
    tokio::task::spawn_blocking(move || {
        if let Err(err) = run(model, rx) {
            eprintln!("warning: the full-screen view failed: {err}");
        }
    })
}

fn run(mut model: Model, mut rx: UnboundedReceiver<Event>) -> io::Result<()> {
    use ratatui::crossterm::event::{self, KeyCode, KeyEventKind, KeyModifiers};
    let started = Instant::now();
    let guard = TerminalGuard::enter()?;
    let mut terminal =
        ratatui::Terminal::new(ratatui::backend::CrosstermBackend::new(io::stderr()))?;
    terminal.clear()?;
    loop {
        let mut closed = false;
        loop {
            match rx.try_recv() {
                Ok(event) => model.apply(&event, started.elapsed()),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    closed = true;
                    break;
                }
            }
        }
        terminal.draw(|frame| model.render(frame, started.elapsed()))?;
        if closed {
            break;
        }
        if event::poll(Duration::from_millis(100))?
            && let event::Event::Key(key) = event::read()?
            && key.kind == KeyEventKind::Press
            && (key.code == KeyCode::Char('q')
                || (key.code == KeyCode::Char('c')
                    && key.modifiers.contains(KeyModifiers::CONTROL)))
        {
            drop(terminal);
            drop(guard);
            eprint!("{}", model.summary(started.elapsed()));
            eprintln!(
                "interrupted: kix stopped while applying; rerun the same command to converge (the deploy lease expires on its own)"
            );
            std::process::exit(130);
        }
    }
    drop(terminal);
    drop(guard);
    eprint!("{}", model.summary(started.elapsed()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kix_engine::plan::{PackagePlan, PlannedObject};
    use kix_engine::records::CrdState;
    use kix_manifest::ObjectKey;
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    fn object(
        package: &str,
        group: &str,
        kind: &str,
        ns: Option<&str>,
        name: &str,
        action: Action,
    ) -> PlannedObject {
        PlannedObject {
            key: ObjectKey {
                group: group.into(),
                kind: kind.into(),
                namespace: ns.map(Into::into),
                name: name.into(),
            },
            api_version: if group.is_empty() {
                "v1".into()
            } else {
                format!("{group}/v1")
            },
            package: package.into(),
            action,
            changes: vec![],
            fields: vec![],
            destructive: false,
            takes_with_it: None,
            deletion: None,
            note: None,
            hook: None,
            warnings: vec![],
            contenders: vec![],
            activations: Default::default(),
            legacy: Default::default(),
        }
    }

    fn plan() -> Plan {
        Plan {
            cluster: "prod".into(),
            store_path: "/nix/store/0123456789abcdfghijklmnpqrsvwxyz-kix-prod".into(),
            current_activation: Some("prod-6".into()),
            current_path: Some("/nix/store/zyxwvsrqpnmlkjihgfdcba9876543210-kix-prod".into()),
            current_phase: Some(Phase::Active),
            service_account: None,
            revision: None,
            activation: "prod-7".into(),
            kix_crds: CrdState::Current,
            packages: vec![
                PackagePlan {
                    name: "db".into(),
                    version: "15.2".into(),
                    handoff: vec![],
                    objects: vec![
                        object("db", "", "Namespace", None, "data", Action::Unchanged),
                        object(
                            "db",
                            "",
                            "ConfigMap",
                            Some("data"),
                            "db-config",
                            Action::Update,
                        ),
                        object(
                            "db",
                            "apps",
                            "StatefulSet",
                            Some("data"),
                            "db",
                            Action::Unchanged,
                        ),
                    ],
                },
                PackagePlan {
                    name: "web".into(),
                    version: "2.0.1".into(),
                    handoff: vec![],
                    objects: vec![
                        object(
                            "web",
                            "",
                            "ConfigMap",
                            Some("web"),
                            "web-config",
                            Action::Create,
                        ),
                        object(
                            "web",
                            "apps",
                            "Deployment",
                            Some("web"),
                            "web",
                            Action::Update,
                        ),
                        object("web", "", "Service", Some("web"), "web", Action::Create),
                    ],
                },
            ],
            prune: vec![object(
                "",
                "",
                "ConfigMap",
                Some("web"),
                "old",
                Action::Delete,
            )],
            counts: Counts {
                create: 2,
                update: 2,
                unchanged: 2,
                delete: 1,
                ..Counts::default()
            },
            digest: "sha256:x".into(),
            kinds: vec![],
            deletion_budget: kix_engine::budget::BudgetCheck::of(None, &Counts::default()),
            migrations: vec![],
            crd_upgrades: vec![],
            desired: vec![],
            options: Default::default(),
            labelled: false,
        }
    }

    fn draw(model: &Model, now: Duration) -> String {
        let mut terminal = Terminal::new(TestBackend::new(110, 28)).expect("terminal");
        terminal
            .draw(|frame| model.render(frame, now))
            .expect("draw");
        terminal.backend().to_string()
    }

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn before_anything_happens() {
        let model = Model::from_plan(&plan(), "deploy");
        insta::assert_snapshot!(draw(&model, secs(0.0)));
    }

    #[test]
    fn in_the_middle_of_a_deploy() {
        let mut model = Model::from_plan(&plan(), "deploy");
        let events = [
            (
                0.1,
                Event::Recorded {
                    activation: "prod-7".into(),
                },
            ),
            (
                0.2,
                Event::GroupStarted {
                    group: order::Group::Package("db".into()),
                    objects: 1,
                },
            ),
            (
                0.3,
                Event::Applied {
                    group: order::Group::Package("db".into()),
                    key: "ConfigMap data/db-config".into(),
                    action: Action::Update,
                },
            ),
            (
                0.4,
                Event::Healthy {
                    group: order::Group::Package("db".into()),
                    elapsed_ms: 200,
                },
            ),
            (
                0.5,
                Event::GroupStarted {
                    group: order::Group::Package("web".into()),
                    objects: 3,
                },
            ),
            (
                0.6,
                Event::Applied {
                    group: order::Group::Package("web".into()),
                    key: "ConfigMap web/web-config".into(),
                    action: Action::Create,
                },
            ),
            (
                0.7,
                Event::Applied {
                    group: order::Group::Package("web".into()),
                    key: "Service web/web".into(),
                    action: Action::Create,
                },
            ),
            (
                0.8,
                Event::Applied {
                    group: order::Group::Package("web".into()),
                    key: "Deployment.apps web/web".into(),
                    action: Action::Update,
                },
            ),
            (
                0.9,
                Event::Waiting {
                    group: order::Group::Package("web".into()),
                    pending: vec!["Deployment web/web".into()],
                },
            ),
        ];
        for (at, event) in &events {
            model.apply(event, secs(*at));
        }
        insta::assert_snapshot!(draw(&model, secs(3.4)));
    }

    #[test]
    fn a_failed_package_and_the_summary() {
        let mut model = Model::from_plan(&plan(), "rollback");
        let events = [
            (
                0.1,
                Event::Recorded {
                    activation: "prod-7".into(),
                },
            ),
            (
                0.2,
                Event::GroupStarted {
                    group: order::Group::Package("db".into()),
                    objects: 1,
                },
            ),
            (
                0.3,
                Event::ApplyFailed {
                    group: order::Group::Package("db".into()),
                    key: "ConfigMap data/db-config".into(),
                    error: "forbidden".into(),
                },
            ),
            (
                5.0,
                Event::Unhealthy {
                    group: order::Group::Package("db".into()),
                    reasons: vec!["ConfigMap data/db-config failed".into()],
                },
            ),
            (
                5.0,
                Event::Skipped {
                    group: order::Group::Package("web".into()),
                    reason: "package db is not healthy".into(),
                },
            ),
            (
                5.1,
                Event::Finished {
                    activation: "prod-7".into(),
                    phase: Phase::Failed,
                    message: "package db: ConfigMap data/db-config: forbidden".into(),
                },
            ),
        ];
        for (at, event) in &events {
            model.apply(event, secs(*at));
        }
        insta::assert_snapshot!(draw(&model, secs(5.2)));
        insta::assert_snapshot!(model.summary(secs(5.2)));
    }

    #[test]
    fn a_small_terminal_does_not_panic() {
        let model = Model::from_plan(&plan(), "deploy");
        for (w, h) in [(20, 5), (1, 1), (80, 10)] {
            let mut terminal = Terminal::new(TestBackend::new(w, h)).expect("terminal");
            terminal
                .draw(|frame| model.render(frame, secs(1.0)))
                .expect("draw");
        }
    }
}

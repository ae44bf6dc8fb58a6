//! `kix fleet plan|deploy|status|history|rollback <FLEET>`: one build
//! promoted across many clusters in health-gated waves (kix-fleet). Each
//! subcommand lives in `fleet_<name>.rs`; this file holds what they share:
//! where the fleet build comes from and how members are shown.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use kix_fleet::plan::{FleetPlan, MemberState};
use kix_fleet::run::{FleetEvent, FleetOutcome, MemberResult, Step};
use kix_fleet::spec::{FleetFile, MemberName};
use kix_nix::{BuildOptions, BuildSource};

use std::time::Duration;

use kix_fleet::run::RunOptions;

use super::{GlobalArgs, OutputFormat};
use crate::args::ConfirmArgs;

#[derive(Debug, Args)]
pub struct FleetArgs {
    #[command(subcommand)]
    pub command: FleetCommand,
}

#[derive(Debug, Subcommand)]
pub enum FleetCommand {
    /// Plan every member against its own cluster: one summary, one digest.
    Plan(super::fleet_plan::FleetPlanArgs),
    /// Confirm once, then deploy wave by wave, each wave Active and healthy
    /// for the fleet's pause before the next; halt on the first failure.
    Deploy(super::fleet_deploy::FleetDeployArgs),
    /// Each member's current activation and health against the fleet build.
    Status(super::fleet_status::FleetStatusArgs),
    /// The fleet's rollouts and rollbacks as the members recorded them.
    History(super::fleet_history::FleetHistoryArgs),
    /// Roll every member that took a rollout back to its build before it,
    /// in reverse wave order.
    Rollback(super::fleet_rollback::FleetRollbackArgs),
}

pub async fn exec(args: FleetArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        FleetCommand::Plan(a) => super::fleet_plan::exec(a, global).await,
        FleetCommand::Deploy(a) => super::fleet_deploy::exec(a, global).await,
        FleetCommand::Status(a) => super::fleet_status::exec(a, global).await,
        FleetCommand::History(a) => super::fleet_history::exec(a, global).await,
        FleetCommand::Rollback(a) => super::fleet_rollback::exec(a, global).await,
    }
}

/// Where the fleet build comes from: `<flake>#kixFleets.<FLEET>`, a file,
/// or a prebuilt fleet file.
#[derive(Debug, Clone, Args)]
pub struct FleetSourceArgs {
    /// The fleet (an attribute of `kixFleets` in the flake).
    pub fleet: String,
    /// Flake reference whose `kixFleets.<FLEET>` is built [default: .]
    #[arg(long, value_name = "REF", conflicts_with_all = ["file", "path"])]
    pub flake: Option<String>,
    /// Nix file to build from instead of a flake (`nix build --file`).
    #[arg(long, short = 'f', value_name = "FILE", conflicts_with = "path")]
    pub file: Option<PathBuf>,
    /// Attribute of --file to build [default: kixFleets.<FLEET>]
    #[arg(long, short = 'A', value_name = "ATTR", requires = "file")]
    pub attr: Option<String>,
    /// A prebuilt fleet file (or ./result). Nothing is built.
    #[arg(long, value_name = "PATH")]
    pub path: Option<PathBuf>,
    /// Do not use the network: no substituters (`nix build --offline`).
    #[arg(long, env = "KIX_OFFLINE", action = clap::ArgAction::SetTrue,
          value_parser = clap::builder::BoolishValueParser::new())]
    pub offline: bool,
}

impl FleetSourceArgs {
    fn source(&self) -> BuildSource {
        let attr = kix_nix::output_attr("kixFleets", &self.fleet);
        if let Some(path) = &self.path {
            BuildSource::Path(path.clone())
        } else if let Some(file) = &self.file {
            BuildSource::File {
                file: file.clone(),
                attr: self.attr.clone().unwrap_or(attr),
            }
        } else {
            BuildSource::FlakeAttr {
                flake: self.flake.clone().unwrap_or_else(|| ".".into()),
                attr,
            }
        }
    }

    /// Builds the fleet (which builds every member) and reads its file.
    pub async fn read(&self, global: &GlobalArgs) -> anyhow::Result<FleetFile> {
        let source = self.source();
        let options = BuildOptions {
            show_progress: !global.quiet,
            offline: self.offline,
            extra_args: vec![],
        };
        let described = source.to_string();
        let path = tokio::task::spawn_blocking(move || kix_nix::build(&source, &options))
            .await
            .context("the build task failed")?
            .with_context(|| format!("building {described}"))?;
        let file = FleetFile::read(path.as_path())?;
        if file.spec.fleet != self.fleet {
            anyhow::bail!(
                "{path} is the build of fleet {:?}, not {:?}",
                file.spec.fleet,
                self.fleet
            );
        }
        Ok(file)
    }
}

/// The members' kube clients: `--kubeconfig` where a member names none.
/// `--context` would send every member to one cluster: refused.
pub fn connect(global: &GlobalArgs) -> anyhow::Result<kix_fleet::member::Connect> {
    if global.context.is_some() {
        anyhow::bail!(
            "--context does not apply to a fleet: each member names its context (members.<name>.context in mkFleet)"
        );
    }
    Ok(kix_fleet::member::Connect {
        kubeconfig: global.kubeconfig.clone(),
    })
}

/// What `fleet deploy` and `fleet rollback` share.
#[derive(Debug, Args)]
pub struct FleetRunArgs {
    #[command(flatten)]
    pub confirm: FleetConfirmArgs,
    /// How long a local member's deploy waits for its objects to become
    /// healthy (e.g. 90s, 5m).
    #[arg(long, value_parser = kix_engine::duration::parse, default_value = "5m")]
    pub timeout: Duration,
    /// Failures tolerated per wave before the rollout halts.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub continue_on_failure: usize,
    /// Members deployed at once inside a wave [default: the fleet's maxParallel]
    #[arg(long, value_name = "N")]
    pub max_parallel: Option<usize>,
    /// How long a wave stays Active and healthy before the next starts
    /// [default: the fleet's pause]
    #[arg(long, value_parser = kix_fleet::spec::parse_pause)]
    pub pause: Option<Duration>,
    /// Output format of the plan and the result.
    #[arg(long, short, value_enum, default_value_t)]
    pub output: OutputFormat,
    /// Progress as a table of every member, redrawn in place (on a
    /// terminal; one line per member step otherwise).
    #[arg(long)]
    pub tui: bool,
    #[command(flatten)]
    pub key: super::publish::SignKeyArgs,
}

impl FleetRunArgs {
    /// The progress view and its rows: the plan's members.
    pub fn progress(
        &self,
        plan: &FleetPlan,
    ) -> (
        Option<tokio::sync::mpsc::UnboundedSender<FleetEvent>>,
        tokio::task::JoinHandle<()>,
    ) {
        let members = plan
            .members
            .iter()
            .map(|m| (m.wave, m.member.clone()))
            .collect();
        start_progress(ProgressView::of(self.output, self.tui), members)
    }

    /// The run's options; progress lines go to `events`.
    pub fn options(
        &self,
        events: Option<tokio::sync::mpsc::UnboundedSender<kix_fleet::run::FleetEvent>>,
        exact: bool,
    ) -> anyhow::Result<RunOptions> {
        let mut member = kix_fleet::apply::MemberOptions {
            timeout: self.timeout,
            accept_migrations: self.confirm.accept_migrations,
            deletions: self.confirm.as_confirm_args().deletion_consent(),
            exact,
            sign_key: self.key.key()?,
            ..Default::default()
        };
        // Undocumented, for the tests (as `kix deploy`): a shorter Lease.
        if let Some(secs) = std::env::var("KIX_LEASE_SECONDS")
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
        {
            member.lease.duration = Duration::from_secs(secs.max(1));
        }
        Ok(RunOptions {
            member,
            continue_on_failure: self.continue_on_failure,
            max_parallel: self.max_parallel,
            pause: self.pause,
            events,
        })
    }

    /// Refusals first (each member's, as `kix deploy` checks them), then
    /// one confirmation for the union of destructive actions.
    pub fn check_and_confirm(&self, plan: &FleetPlan, question: &str) -> anyhow::Result<bool> {
        let options = self.options(None, false)?;
        let refused: Vec<String> = plan
            .members
            .iter()
            .filter_map(|m| {
                let p = m.plan()?;
                let deploy = kix_fleet::apply::deploy_options(m, &options.member, None);
                if let Err(e) = kix_engine::deploy::check_plan(p, &m.build, &deploy) {
                    return Some(format!("member {}: {e}", m.member));
                }
                // An operator member fetches its build from its cache: it
                // is pushed there, signed, before its record.
                let cache = m.build.settings.cache.as_ref().filter(|_| m.operator);
                (cache.is_some() && options.member.sign_key.is_none()).then(|| {
                    format!(
                        "member {}: Kix cluster {} publishes its builds to {} (settings.cache), and no key was given to sign them: pass --sign-key FILE or set {}",
                        m.member,
                        m.cluster,
                        cache.map(|c| c.url.to_string()).unwrap_or_default(),
                        super::publish::SIGN_KEY_ENV
                    )
                })
            })
            .collect();
        if !refused.is_empty() {
            anyhow::bail!("{}: nothing was changed", refused.join("; "));
        }
        for m in &plan.members {
            let why = match &m.state {
                MemberState::Unreachable { reason } => format!("cannot be reached ({reason})"),
                MemberState::Failed { reason } => format!("could not be planned ({reason})"),
                MemberState::Planned { .. } => continue,
            };
            eprintln!(
                "warning: member {} {why}: wave {} will fail on it (--continue-on-failure tolerates it)",
                m.member, m.wave
            );
        }
        let destructive = destructive_text(plan);
        if !destructive.is_empty() {
            eprint!("{destructive}");
        }
        if !plan.has_changes() {
            return Ok(true);
        }
        crate::args::confirm(&self.confirm.as_confirm_args(), question)
    }
}

/// The guards of `kix deploy` that apply to a fleet (each member has its
/// own current activation: `--current-activation` does not).
#[derive(Debug, Clone, Args)]
pub struct FleetConfirmArgs {
    /// Do not ask for confirmation.
    #[arg(long, short)]
    pub yes: bool,
    /// Accept migrations, replaces (immutable fields), adoptions and
    /// destructive deletions the members' plans list.
    #[arg(long)]
    pub accept_migrations: bool,
    /// Allow each member up to N deletions beyond its deletion budget.
    #[arg(long, value_name = "N")]
    pub max_deletions: Option<u32>,
    /// Accept every deletion the members' plans list, beyond their budgets.
    #[arg(long, conflicts_with = "max_deletions")]
    pub accept_deletions: bool,
}

impl FleetConfirmArgs {
    fn as_confirm_args(&self) -> ConfirmArgs {
        ConfirmArgs {
            yes: self.yes,
            current_activation: None,
            accept_migrations: self.accept_migrations,
            max_deletions: self.max_deletions,
            accept_deletions: self.accept_deletions,
        }
    }
}

/// The summary table: one line per member.
pub fn summary_text(plan: &FleetPlan) -> String {
    let mut rows = vec![
        [
            "MEMBER", "WAVE", "CLUSTER", "CONTEXT", "ENGINE", "CREATE", "UPDATE", "DELETE",
            "REPLACE", "STATE",
        ]
        .map(String::from),
    ];
    for m in &plan.members {
        let (counts, state) = match &m.state {
            MemberState::Planned { plan: p } => (
                [
                    p.counts.create + p.counts.adopt,
                    p.counts.update,
                    p.counts.delete,
                    p.counts.replace,
                ]
                .map(|n| n.to_string()),
                if m.up_to_date() {
                    "up to date".to_string()
                } else {
                    let destructive = m.destructive().len();
                    if destructive > 0 {
                        format!("{destructive} destructive")
                    } else {
                        "changes".to_string()
                    }
                },
            ),
            MemberState::Unreachable { reason } => (
                ["-", "-", "-", "-"].map(String::from),
                format!("UNREACHABLE: {reason}"),
            ),
            MemberState::Failed { reason } => (
                ["-", "-", "-", "-"].map(String::from),
                format!("NOT PLANNED: {reason}"),
            ),
        };
        let [c, u, d, r] = counts;
        rows.push([
            m.member.to_string(),
            m.wave.to_string(),
            m.cluster.clone(),
            m.context.clone().unwrap_or_else(|| "(current)".into()),
            if m.operator { "operator" } else { "local" }.into(),
            c,
            u,
            d,
            r,
            state,
        ]);
    }
    table(&rows)
}

/// Columns padded to their widest cell; the last one as it is.
pub fn table<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == N {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}  ", width = widths[i]);
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out
}

/// The destructive actions of every member, with its deletion budget:
/// what one confirmation accepts.
pub fn destructive_text(plan: &FleetPlan) -> String {
    let mut out = String::new();
    for m in &plan.members {
        let actions = m.destructive();
        let Some(p) = m.plan() else { continue };
        if actions.is_empty() && !p.deletion_budget.is_exceeded() {
            continue;
        }
        let b = &p.deletion_budget;
        let _ = writeln!(
            out,
            "{} (wave {}): {} destructive action(s); deletes {} of {} owned objects (budget {})",
            m.member,
            m.wave,
            actions.len(),
            b.deletions,
            b.owned,
            b.allowed
        );
        for a in actions {
            let _ = writeln!(out, "  {a}");
        }
    }
    out
}

/// One progress line per member step, on stderr.
pub fn progress_line(event: &FleetEvent) -> String {
    format!(
        "{} (wave {}): {}",
        event.member,
        event.wave,
        step_text(&event.step)
    )
}

pub fn result_text(result: &MemberResult) -> String {
    match result {
        MemberResult::UpToDate { activation } => {
            format!("up to date ({})", activation.as_deref().unwrap_or("-"))
        }
        MemberResult::Done { activation } => {
            format!("Active ({})", activation.as_deref().unwrap_or("-"))
        }
        MemberResult::Failed { activation, reason } => match activation {
            Some(a) => format!("FAILED ({a}): {reason}"),
            None => format!("FAILED: {reason}"),
        },
        MemberResult::Untouched => "untouched".into(),
    }
}

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressView {
    /// Nothing (`--output json`).
    None,
    /// One line per member step.
    Lines,
    /// A table of every member, redrawn in place (`--tui` on a terminal).
    Table,
}

impl ProgressView {
    pub fn of(output: OutputFormat, tui: bool) -> ProgressView {
        use std::io::IsTerminal;
        match output {
            OutputFormat::Json => ProgressView::None,
            OutputFormat::Text if tui && std::io::stderr().is_terminal() => ProgressView::Table,
            OutputFormat::Text => ProgressView::Lines,
        }
    }
}

/// Shows events as they come; returns when the sender is dropped.
/// `members` (wave, name) are the table's rows.
pub fn start_progress(
    view: ProgressView,
    members: Vec<(usize, MemberName)>,
) -> (
    Option<tokio::sync::mpsc::UnboundedSender<FleetEvent>>,
    tokio::task::JoinHandle<()>,
) {
    if view == ProgressView::None {
        return (None, tokio::spawn(async {}));
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<FleetEvent>();
    let printer = tokio::spawn(async move {
        let mut rows: Vec<(usize, MemberName, String)> = members
            .into_iter()
            .map(|(wave, member)| (wave, member, "waiting".to_string()))
            .collect();
        let mut drawn = 0;
        while let Some(event) = rx.recv().await {
            if view == ProgressView::Lines {
                eprintln!("{}", progress_line(&event));
                continue;
            }
            if let Some(row) = rows.iter_mut().find(|r| r.1 == event.member) {
                row.2 = step_text(&event.step);
            }
            let table = progress_table(&rows);
            // Back over the table drawn last, then each line cleared.
            let mut out = if drawn > 0 {
                format!("\x1b[{drawn}A")
            } else {
                String::new()
            };
            for line in table.lines() {
                out.push_str("\x1b[2K");
                out.push_str(line);
                out.push('\n');
            }
            drawn = table.lines().count();
            eprint!("{out}");
        }
    });
    (Some(tx), printer)
}

fn step_text(step: &Step) -> String {
    match step {
        Step::Started => "deploying".into(),
        Step::Holding { seconds } => format!("holding healthy for {seconds}s"),
        Step::Held { seconds } => format!("Active and healthy for {seconds}s"),
        Step::Finished { result } => result_text(result),
    }
}

/// The `--tui` table: a row per member, in wave order.
pub fn progress_table(rows: &[(usize, MemberName, String)]) -> String {
    let mut cells = vec![["MEMBER", "WAVE", "STATE"].map(String::from)];
    cells.extend(
        rows.iter()
            .map(|(wave, member, state)| [member.to_string(), wave.to_string(), state.clone()]),
    );
    table(&cells)
}

/// The outcome as text (one line per member) or JSON; exit 1 unless every
/// member ended Active (or was up to date).
pub fn print_outcome(outcome: &FleetOutcome, output: OutputFormat) -> anyhow::Result<ExitCode> {
    match output {
        OutputFormat::Json => {
            crate::output::print_stdout(&crate::output::json_text(outcome)?)?;
        }
        OutputFormat::Text => {
            let mut rows = vec![["MEMBER", "WAVE", "RESULT"].map(String::from)];
            for m in &outcome.members {
                rows.push([
                    m.member.to_string(),
                    m.wave.to_string(),
                    result_text(&m.result),
                ]);
            }
            print!("{}", table(&rows));
            match &outcome.halted {
                Some(why) => println!(
                    "fleet {} {} halted: {why}",
                    outcome.fleet,
                    outcome.action.as_str()
                ),
                None if outcome.is_success() => println!(
                    "fleet {} {} finished: every member Active",
                    outcome.fleet,
                    outcome.action.as_str()
                ),
                None => println!(
                    "fleet {} {} finished with failures",
                    outcome.fleet,
                    outcome.action.as_str()
                ),
            }
        }
    }
    Ok(if outcome.is_success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_progress_table_has_a_row_per_member_in_wave_order() {
        let rows = vec![
            (
                0,
                MemberName("staging".into()),
                "Active (web-3)".to_string(),
            ),
            (1, MemberName("eu-1".into()), "deploying".to_string()),
            (1, MemberName("eu-2".into()), "waiting".to_string()),
        ];
        assert_eq!(
            progress_table(&rows),
            "MEMBER   WAVE  STATE\n\
             staging  0     Active (web-3)\n\
             eu-1     1     deploying\n\
             eu-2     1     waiting\n"
        );
    }
}

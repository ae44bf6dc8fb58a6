//! Arguments several commands take, and what they make: the guards of the
//! commands that change the cluster (and their confirmation), the plan's
//! engine options, the Kubernetes version validated against.

use std::io::{BufRead, IsTerminal, Write};

use anyhow::Context;
use clap::Args;
use kix_engine::budget::DeletionConsent;
use kix_engine::plan::PlanOptions;

/// Guards shared by the commands that change the cluster.
#[derive(Debug, Clone, Args)]
pub struct ConfirmArgs {
    /// Do not ask for confirmation.
    #[arg(long, short)]
    pub yes: bool,
    /// Refuse unless NAME is the Kix cluster's current activation.
    #[arg(long, value_name = "NAME")]
    pub current_activation: Option<String>,
    /// Accept migrations, replaces (immutable fields), adoptions and
    /// destructive deletions the plan lists.
    #[arg(long)]
    pub accept_migrations: bool,
    /// Allow up to N deletions when the plan exceeds the Kix cluster's
    /// deletion budget (default budget: 25 % of its objects, at least 10).
    #[arg(long, value_name = "N")]
    pub max_deletions: Option<u32>,
    /// Accept every deletion the plan lists, beyond the deletion budget.
    #[arg(long, conflicts_with = "max_deletions")]
    pub accept_deletions: bool,
}

impl ConfirmArgs {
    /// The consent `--max-deletions` / `--accept-deletions` give.
    pub fn deletion_consent(&self) -> DeletionConsent {
        match (self.accept_deletions, self.max_deletions) {
            (true, _) => DeletionConsent::Any,
            (false, Some(n)) => DeletionConsent::UpTo(n),
            (false, None) => DeletionConsent::Budget,
        }
    }
}

/// Asks on the terminal; refuses (exit 1) without a terminal unless `--yes`.
pub fn confirm(args: &ConfirmArgs, question: &str) -> anyhow::Result<bool> {
    if args.yes {
        return Ok(true);
    }
    if !std::io::stdin().is_terminal() {
        anyhow::bail!(
            "confirmation needed and stdin is not a terminal: nothing was changed; rerun with --yes"
        );
    }
    eprint!("{question} [y/N] ");
    std::io::stderr().flush()?;
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .context("reading the answer")?;
    let yes = matches!(answer.trim(), "y" | "Y" | "yes");
    if !yes {
        eprintln!("nothing changed");
    }
    Ok(yes)
}

/// Plan options shared by `plan` and `deploy`.
#[derive(Debug, Clone, Args)]
pub struct EngineArgs {
    /// Compare every object with its live state and re-apply drift, instead
    /// of trusting the digest recorded at the last apply.
    #[arg(long)]
    pub reconcile: bool,
    /// Take fields other field managers own (server-side apply force).
    #[arg(long)]
    pub force_conflicts: bool,
    /// Delete what the build no longer has.
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub prune: bool,
}

impl EngineArgs {
    pub fn plan_options(&self) -> PlanOptions {
        PlanOptions {
            reconcile: self.reconcile,
            force_conflicts: self.force_conflicts,
            yield_to_kix_clusters: false,
            prune: self.prune,
            activation: None,
            only: None,
        }
    }
}

//! Operator mode (`--operator`): the CLI builds and plans locally, writes the
//! Activation record, and the in-cluster operator applies it. This file holds
//! what the `--operator` variants of deploy, rollback, gc and status share:
//! the CRD check, writing records, and waiting for the operator.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use kix_api::labels::ANNOTATION_DECLARED_BY;
use kix_api::{Activation, ActivationSpec, ActivationStatus, Phase};
use kix_engine::plan::{Plan, PlanOptions};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

/// How often the CLI polls the record, and how long it waits for a terminal phase.
pub const POLL_EVERY: Duration = Duration::from_secs(2);
pub const WAIT_FOR: Duration = Duration::from_secs(600);
/// How long gc waits for each record: for the record (its finalizer) and
/// for the objects it named to be gone.
pub const GC_WAIT_PER_RECORD: Duration = Duration::from_secs(300);

/// The flags that control the local engine and do nothing in operator mode.
pub const LOCAL_ENGINE_FLAGS: [&str; 8] = [
    "--timeout",
    "--on-error",
    "--prune",
    "--prune-mode",
    "--reconcile",
    "--force-conflicts",
    "--tui",
    "--log-format",
];

/// Whether `flag` (`--prune`) was given on the command line, with or
/// without a value.
pub fn flag_given(flag: &str) -> bool {
    std::env::args().any(|a| a == flag || a.starts_with(&format!("{flag}=")))
}

/// Warns about each local-engine flag given on the command line.
pub fn warn_local_engine_flags() {
    let given: Vec<&str> = LOCAL_ENGINE_FLAGS
        .iter()
        .copied()
        .filter(|flag| flag_given(flag))
        .collect();
    for flag in given {
        eprintln!(
            "warning: {flag} has no effect in operator mode (the operator's engine settings apply)"
        );
    }
}

/// Before changing anything: the Activation CRD is installed and this account
/// can list Activation records.
pub async fn require_records(client: &Client) -> anyhow::Result<()> {
    let api: Api<Activation> = Api::all(client.clone());
    match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => bail!(
            "the Activation CRD (activations.kix.run) is not installed: nothing was changed. Install it with `kix crds | kubectl apply -f -` and run the kix operator"
        ),
        Err(kube::Error::Api(s)) if s.code == 403 => {
            bail!(
                "this account cannot list Activation records: nothing was changed ({})",
                s.message
            )
        }
        Err(err) => Err(err).context("listing Activation records"),
    }
}

/// Writes the record the operator will apply: the build's store path and the
/// deploy receipt, `engine: operator`.
pub async fn create_record(
    client: &Client,
    plan: &Plan,
    spec: ActivationSpec,
) -> anyhow::Result<Activation> {
    create_annotated_record(client, plan, spec, Default::default()).await
}

/// [`create_record`] with annotations on the record (`kix declare`: the
/// host that declared it). The record and its checks are the engine's
/// ([`kix_engine::operator_record`]), which fleets write too.
pub async fn create_annotated_record(
    client: &Client,
    plan: &Plan,
    spec: ActivationSpec,
    annotations: std::collections::BTreeMap<String, String>,
) -> anyhow::Result<Activation> {
    let meta = kix_engine::operator_record::RecordMeta {
        annotations,
        ..Default::default()
    };
    Ok(kix_engine::operator_record::create(client, plan, spec, meta).await?)
}

/// The plan as the operator will make it: prune on, no `--reconcile`, other
/// managers' fields taken (it applies with force) except other Kix clusters'. The local-engine flags
/// change nothing here, as they change nothing in the operator.
pub fn plan_options() -> PlanOptions {
    PlanOptions {
        reconcile: false,
        force_conflicts: true,
        yield_to_kix_clusters: true,
        prune: true,
        activation: None,
        only: None,
    }
}

/// Polls the record every 2 s until the operator settles it, printing
/// progress as the operator reports it, with the record's message (why it
/// waits, what failed). Active or Degraded are returned, Degraded after its
/// reasons are printed; Failed, Superseded and the 600 s timeout are errors.
pub async fn wait_for_operator(client: &Client, name: &str) -> anyhow::Result<Phase> {
    wait_for_operator_within(client, name, WAIT_FOR).await
}

/// [`wait_for_operator`], giving up after `limit` instead of 600 s.
pub async fn wait_for_operator_within(
    client: &Client,
    name: &str,
    limit: Duration,
) -> anyhow::Result<Phase> {
    let api: Api<Activation> = Api::all(client.clone());
    let started = Instant::now();
    let mut last = String::new();
    loop {
        let record = api
            .get(name)
            .await
            .with_context(|| format!("reading Activation {name}"))?;
        let status = record.status.clone().unwrap_or_default();
        let phase = status.phase.unwrap_or(Phase::Pending);
        let line = progress_line(name, &status);
        if line != last {
            eprintln!("{line}");
            last = line;
        }
        if matches!(phase, Phase::Active | Phase::Degraded | Phase::Failed) {
            print_deleting(&status);
        }
        match phase {
            Phase::Active => return Ok(phase),
            Phase::Degraded => {
                print_reasons(&status);
                return Ok(phase);
            }
            Phase::Failed => {
                print_reasons(&status);
                bail!("{name} failed: {}", status.message.unwrap_or_default())
            }
            Phase::Superseded => bail!("{name}: a newer activation took over"),
            Phase::Pending | Phase::Applying => {}
        }
        if started.elapsed() >= limit {
            bail!(
                "timed out after {}s waiting for the operator to finish {name} (it is {phase}{}); the operator keeps working on it",
                limit.as_secs(),
                status.message.map(|m| format!(": {m}")).unwrap_or_default()
            );
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// `C-1: Applying (1/3 applied, 1 healthy, 0 pruned)`, or `C-1: Pending —
/// <why it waits>` while the record's message says why.
fn progress_line(name: &str, status: &ActivationStatus) -> String {
    let phase = status.phase.unwrap_or(Phase::Pending);
    let mut line = format!("{name}: {phase}");
    if let Some(p) = &status.progress {
        line.push_str(&format!(
            " ({}/{} applied, {} healthy, {} pruned)",
            p.applied, p.total, p.healthy, p.pruned
        ));
    }
    // The operator says why it cannot proceed (its Ready condition's message).
    if let (Phase::Pending | Phase::Applying, Some(message)) = (phase, &status.message) {
        line.push_str(&format!(" — {message}"));
    }
    line
}

/// The objects the record's prune deleted that are still there, held by
/// finalizers, as the local deploy prints them, with since when.
fn print_deleting(status: &ActivationStatus) {
    for d in &status.deleting {
        let mut line = crate::progress::deleting_line(&d.object.to_string(), &d.finalizers);
        if let Some(since) = d.since {
            line.push_str(&format!(" since {}", since.to_rfc3339()));
        }
        eprintln!("{line}");
    }
    let total = status
        .deleting_total
        .unwrap_or(status.deleting.len() as u32);
    if total as usize > status.deleting.len() {
        eprintln!(
            "  and {} more being deleted",
            total as usize - status.deleting.len()
        );
    }
}

/// The reasons of a Degraded or Failed record: its message, one reason a
/// line, and each object it could not delete.
fn print_reasons(status: &ActivationStatus) {
    for reason in status.message.iter().flat_map(|m| m.split("; ")) {
        eprintln!("  reason: {reason}");
    }
    for failed in &status.failed_deletions {
        eprintln!("  not deleted: {}: {}", failed.object, failed.reason);
    }
    let more = status.failed_deletion_count() as usize - status.failed_deletions.len();
    if more > 0 {
        eprintln!("  not deleted: {more} more objects");
    }
}

/// How long gc waits for a record (and for the objects it deletes) to be
/// gone. KIX_GC_WAIT_SECONDS shortens the wait for tests; users get 300 s.
pub fn gc_wait() -> Duration {
    std::env::var("KIX_GC_WAIT_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(GC_WAIT_PER_RECORD, Duration::from_secs)
}

/// Waits until the record is gone (its finalizer released its objects), up
/// to `until`; an error names what the finalizer could not delete.
pub async fn wait_deleted(client: &Client, name: &str, until: Instant) -> anyhow::Result<()> {
    let api: Api<Activation> = Api::all(client.clone());
    let limit = gc_wait();
    loop {
        let Some(record) = api.get_opt(name).await? else {
            return Ok(());
        };
        if Instant::now() >= until {
            let status = record.status.unwrap_or_default();
            let failed: Vec<String> = status
                .failed_deletions
                .iter()
                .map(|f| format!("{}: {}", f.object, f.reason))
                .collect();
            let more = status.failed_deletion_count() as usize - failed.len();
            let why = if failed.is_empty() {
                "the operator did not release it".to_string()
            } else if more > 0 {
                format!("{}; and {more} more", failed.join("; "))
            } else {
                failed.join("; ")
            };
            bail!(
                "Activation {name} could not be deleted within {}s: {why}",
                limit.as_secs()
            );
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// The host that declared `record`, if a host did.
pub fn declared_by(record: &Activation) -> Option<&str> {
    record
        .annotations()
        .get(ANNOTATION_DECLARED_BY)
        .map(String::as_str)
}

/// For `kix deploy` and `kix rollback`: a warning when the record that is
/// current was declared by a NixOS host, whose next activation re-declares
/// its build over this one.
pub fn host_declared_warning(current: &Activation) -> Option<String> {
    declared_by(current).map(|host| {
        format!(
            "warning: Kix cluster {:?} is declared by NixOS host {host} ({} names {}): this change stays until the host's next activation of a generation (switch, boot, or a restart of its kix-declare unit) declares the host's build again; change services.kix-operator.clusters.{} on {host} to make it last",
            current.cluster_name(),
            current.name_any(),
            current.spec.source.path,
            current.cluster_name(),
        )
    })
}

/// For `kix declare`: a warning when another NixOS host declared the
/// current record: each host's activations replace the other's build.
pub fn other_host_warning(current: &Activation, host: &str) -> Option<String> {
    declared_by(current)
        .filter(|other| *other != host)
        .map(|other| {
            format!(
                "warning: Kix cluster {:?} is declared by NixOS host {other} too ({} names {}): each host's activations replace the other's build; declare it on one host",
                current.cluster_name(),
                current.name_any(),
                current.spec.source.path,
            )
        })
}

/// Prints [`host_declared_warning`] for the record named `current`, if any
/// (a failed read is no reason to stop a deploy: it is only a warning).
pub async fn warn_if_host_declared(client: &kube::Client, current: Option<&str>) {
    let Some(name) = current else { return };
    let api: kube::Api<Activation> = kube::Api::all(client.clone());
    if let Ok(Some(record)) = api.get_opt(name).await
        && let Some(warning) = host_declared_warning(&record)
    {
        eprintln!("{warning}");
    }
}

//! `kix declare <CLUSTER> --path <STORE PATH>`: a NixOS host declares the
//! build its generation names (services.kix-operator.clusters.<name>; the
//! module's oneshot unit runs this on each activation of a generation).
//!
//! The same store path as the current record writes nothing (the unit waits
//! for that record); the build of an older activation is declared as a
//! rollback to it (`rollbackFrom`, as `kix rollback --operator`); any other
//! build as a deploy (as `kix deploy --operator`). Either way through the
//! operator's sealed plan and the deletion budget, never asking: what the
//! plan needs accepted must be named by `--accept`, or nothing is written.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use kix_api::labels::ANNOTATION_DECLARED_BY;
use kix_api::{Activation, Phase};
use kix_engine::budget::DeletionConsent;
use kix_engine::deploy::{DeployOptions, ReceiptInfo};
use kix_engine::gates::{self, Refusal};
use kix_manifest::StorePath;
use kube::ResourceExt;

use super::GlobalArgs;
use super::operator::{self, other_host_warning};
use crate::source::SourceArgs;

#[derive(Debug, Args)]
pub struct DeclareArgs {
    /// The Kix cluster.
    pub cluster: String,
    /// The build the host declares: a store path (realised from the
    /// substituters when it is not valid here).
    #[arg(long, value_name = "STORE PATH")]
    pub path: String,
    /// Accept what the plan needs accepted (a migration, replace, adoption
    /// or destructive deletion) when its line in the plan starts with TEXT,
    /// by whole words (`migration web`, `adopt ConfigMap apps/legacy`).
    /// Repeatable; anything else needing acceptance refuses the declaration.
    #[arg(long, value_name = "TEXT")]
    pub accept: Vec<String>,
    /// Allow up to N deletions when the plan exceeds the Kix cluster's
    /// deletion budget.
    #[arg(long, value_name = "N")]
    pub max_deletions: Option<u32>,
    /// Allow a build with no objects to prune everything the Kix cluster
    /// owns (the module's `absent = "prune"`), within the deletion budget.
    #[arg(long)]
    pub allow_empty: bool,
    /// How long to wait for the operator to make the record Active or
    /// Degraded (e.g. 90s, 5m).
    #[arg(long, value_parser = kix_engine::duration::parse, default_value = "10m")]
    pub wait: Duration,
    /// The host the record names as its declarer [default: this host's name].
    #[arg(long, value_name = "HOST")]
    pub declared_by: Option<String>,
}

/// What the host's declaration does, given the Kix cluster's records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Declaration {
    /// The current record already names the build: nothing is written; the
    /// outcome is that record's.
    Current { record: String },
    /// The build of an older activation: a rollback to it from the applied
    /// record (if any).
    Rollback {
        target: String,
        from: Option<String>,
    },
    /// A build the Kix cluster has not had: a deploy.
    Deploy,
}

/// The rule, on the records alone: same path as the current record →
/// nothing; path of an older replaced activation (Superseded, or older than
/// the applied one) → a rollback to the newest such record; else a deploy.
pub fn decide(records: &[Activation], cluster: &str, path: &str) -> Declaration {
    if let Some(current) = kix_engine::records::current(records, cluster)
        && current.spec.source.path == path
    {
        return Declaration::Current {
            record: current.name_any(),
        };
    }
    let applied = kix_engine::records::applied(records, cluster);
    let older = kix_engine::records::of_cluster(records, cluster)
        .into_iter()
        .rev()
        .find(|r| kix_engine::records::was_replaced(r, applied) && r.spec.source.path == path);
    match older {
        Some(target) => Declaration::Rollback {
            target: target.name_any(),
            from: applied.map(ResourceExt::name_any),
        },
        None => Declaration::Deploy,
    }
}

pub async fn exec(args: DeclareArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    // A store path only: what a generation names, never a directory to add.
    StorePath::parse(&args.path)
        .with_context(|| format!("--path {:?}: nothing was changed", args.path))?;
    // Read as `kix deploy --path` reads it: realised when not valid here,
    // the client of its context and ServiceAccount, the Secrets warnings.
    let source = SourceArgs {
        flake: None,
        file: None,
        attr: None,
        path: Some(PathBuf::from(&args.path)),
        offline: false,
    };
    let plan_options = operator::plan_options();
    let read = source
        .build_and_read_for_plan(&args.cluster, global, &plan_options)
        .await
        .with_context(|| format!("the declared build {}: nothing was changed", args.path))?;
    let (store_path, build, client) = (read.path, read.build, read.client);
    operator::require_records(&client).await?;
    let records = kix_engine::records::list_all_required(&client).await?;
    // absent = "prune" of a Kix cluster the Kubernetes cluster never had: no record
    // of a build that was never there.
    if build.object_count() == 0
        && kix_engine::records::of_cluster(&records, &args.cluster).is_empty()
    {
        eprintln!(
            "Kix cluster {:?} has no activations: nothing to prune, nothing written",
            args.cluster
        );
        return Ok(ExitCode::SUCCESS);
    }
    let host = args
        .declared_by
        .clone()
        .unwrap_or_else(|| ReceiptInfo::local().host);
    if let Some(warning) = kix_engine::records::current(&records, &args.cluster)
        .and_then(|current| other_host_warning(current, &host))
    {
        eprintln!("{warning}");
    }
    let declaration = decide(&records, &args.cluster, store_path.as_str());
    let from = match &declaration {
        Declaration::Current { record } => {
            eprintln!(
                "{record} already declares {store_path}: nothing to write; waiting for the operator"
            );
            return settle(&client, record, args.wait).await;
        }
        Declaration::Rollback { target, from } => {
            println!(
                "Rolling back Kix cluster {} to the build of {target}",
                args.cluster
            );
            from.clone()
        }
        Declaration::Deploy => None,
    };
    let plan = kix_engine::plan::plan_prefetched(
        &client,
        &build,
        store_path.as_str(),
        &plan_options,
        read.prefetched,
    )
    .await?;
    let style = crate::render::Style::detect();
    crate::output::print_stdout(&crate::render::plan_text(&plan, style, false))?;
    let needed = plan.needs_acceptance();
    let options = DeployOptions {
        engine: kix_api::Engine::Operator,
        force_conflicts: plan_options.force_conflicts,
        yield_to_kix_clusters: plan_options.yield_to_kix_clusters,
        prune: plan_options.prune,
        accept_migrations: !needed.is_empty(),
        deletions: args
            .max_deletions
            .map_or(DeletionConsent::Budget, DeletionConsent::UpTo),
        allow_empty: args.allow_empty,
        receipt: ReceiptInfo {
            host: host.clone(),
            rollback_from: from,
            ..ReceiptInfo::local()
        },
        ..DeployOptions::default()
    };
    let annotations = BTreeMap::from([(ANNOTATION_DECLARED_BY.to_string(), host)]);
    if let Some(reason) = refusal(&plan, &build, &options, &args) {
        let spec = kix_engine::deploy::activation_spec(&plan, &options);
        let note = record_refusal(&client, &records, &plan, spec, annotations, &reason).await;
        bail!("{reason}{note}");
    }
    let spec = kix_engine::deploy::activation_spec(&plan, &options);
    let record = operator::create_annotated_record(&client, &plan, spec, annotations).await?;
    let name = record.name_any();
    kix_engine::drop_later(build);
    eprintln!("recorded {name}; waiting for the operator");
    settle(&client, &name, args.wait).await
}

/// Why the host's declaration is refused, if it is: acceptance the host did
/// not give, or a gate of `kix deploy --operator` (budget, empty build,
/// CRD versions, rights...).
fn refusal(
    plan: &kix_engine::plan::Plan,
    build: &kix_manifest::Build,
    options: &DeployOptions,
    args: &DeclareArgs,
) -> Option<String> {
    if let Err(Refusal::NeedsAcceptance(refused)) = gates::accepted_by_host(plan, &args.accept) {
        return Some(format!(
            "the plan needs acceptance the host did not give: {}; nothing was changed (name each in services.kix-operator.clusters.{}.acceptMigrations, or `kix declare --accept`)",
            refused.join("; "),
            args.cluster
        ));
    }
    kix_engine::deploy::check_plan(plan, build, options)
        .err()
        .map(|err| format!("the declared build is refused: nothing was changed: {err}"))
}

/// The record of a refused declaration, for `kix history` and `kubectl get
/// act`: `engine: local`, so the operator never acts on it, claiming no
/// acceptance, then Failed with `reason`, so it is never current and the
/// current record keeps being reconciled. The same refusal as the newest
/// record (the unit restarted) is not written again. Returns a note for the
/// error (the record's name, or why it could not be written).
async fn record_refusal(
    client: &kube::Client,
    records: &[Activation],
    plan: &kix_engine::plan::Plan,
    mut spec: kix_api::ActivationSpec,
    annotations: BTreeMap<String, String>,
    reason: &str,
) -> String {
    let message = format!("refused by kix declare: {reason}");
    if let Some(last) = kix_engine::records::of_cluster(records, &plan.cluster).last()
        && repeats(last, &spec, &annotations, &message)
    {
        return format!(" (recorded as {} already)", last.name_any());
    }
    spec.engine = kix_api::Engine::Local;
    spec.receipt.accepted = kix_api::Accepted::default();
    spec.receipt.accepted_deletions = None;
    spec.receipt.saved_plan = false;
    let sequence = Activation::sequence_in(&plan.activation, &plan.cluster).unwrap_or(1);
    let mut record = Activation::new_record(sequence, spec);
    record.annotations_mut().extend(annotations);
    let api: kube::Api<Activation> = kube::Api::all(client.clone());
    let written = async {
        let created = api
            .create(&kube::api::PostParams::default(), &record)
            .await?;
        kix_engine::records::update_status(client, &created.name_any(), |status| {
            status.phase = Some(Phase::Failed);
            status.message = Some(message.clone());
        })
        .await?;
        anyhow::Ok(created.name_any())
    };
    match written.await {
        Ok(name) => format!(" (recorded as {name}, Failed)"),
        Err(err) => format!(" (the refusal could not be recorded: {err:#})"),
    }
}

/// Whether `last` is already the record of this refusal: a Failed local
/// record of the same build, host and message.
fn repeats(
    last: &Activation,
    spec: &kix_api::ActivationSpec,
    annotations: &BTreeMap<String, String>,
    message: &str,
) -> bool {
    last.spec.engine == kix_api::Engine::Local
        && last.phase() == Some(Phase::Failed)
        && last.spec.source.path == spec.source.path
        && annotations
            .iter()
            .all(|(k, v)| last.annotations().get(k) == Some(v))
        && last.status.as_ref().and_then(|s| s.message.as_deref()) == Some(message)
}

/// Waits for the operator to settle `name`: Active exits 0; Degraded exits 1
/// (as `kix deploy --operator`); Failed, Superseded or the wait running out
/// are errors.
async fn settle(client: &kube::Client, name: &str, wait: Duration) -> anyhow::Result<ExitCode> {
    let phase = operator::wait_for_operator_within(client, name, wait).await?;
    println!("{name}: {phase}");
    Ok(crate::output::exit_for(phase))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::operator::host_declared_warning;

    use kix_testkit::records::activation as record;

    #[test]
    fn the_same_path_as_the_current_record_writes_nothing() {
        let records = [
            record("c", 1, "/nix/store/a", Phase::Superseded),
            record("c", 2, "/nix/store/b", Phase::Active),
        ];
        assert_eq!(
            decide(&records, "c", "/nix/store/b"),
            Declaration::Current {
                record: "c-2".into()
            }
        );
        // Still applying: the host waits for it rather than writing again.
        let records = [
            record("c", 1, "/nix/store/a", Phase::Active),
            record("c", 2, "/nix/store/b", Phase::Applying),
        ];
        assert_eq!(
            decide(&records, "c", "/nix/store/b"),
            Declaration::Current {
                record: "c-2".into()
            }
        );
    }

    #[test]
    fn the_path_of_an_older_activation_is_a_rollback_from_the_applied_one() {
        let records = [
            record("c", 1, "/nix/store/a", Phase::Superseded),
            record("c", 2, "/nix/store/b", Phase::Superseded),
            record("c", 3, "/nix/store/a", Phase::Superseded),
            record("c", 4, "/nix/store/c", Phase::Active),
            record("other", 1, "/nix/store/d", Phase::Superseded),
        ];
        assert_eq!(
            decide(&records, "c", "/nix/store/a"),
            Declaration::Rollback {
                target: "c-3".into(),
                from: Some("c-4".into())
            }
        );
        // Another Kix cluster's history is not this one's.
        assert_eq!(decide(&records, "c", "/nix/store/d"), Declaration::Deploy);
        // Right after a deploy, before it marked the older record
        // Superseded: that record is still the one to go back to.
        let records = [
            record("c", 1, "/nix/store/a", Phase::Active),
            record("c", 2, "/nix/store/b", Phase::Active),
        ];
        assert_eq!(
            decide(&records, "c", "/nix/store/a"),
            Declaration::Rollback {
                target: "c-1".into(),
                from: Some("c-2".into())
            }
        );
    }

    #[test]
    fn a_new_path_or_a_failed_one_is_a_deploy() {
        let records = [
            record("c", 1, "/nix/store/a", Phase::Active),
            record("c", 2, "/nix/store/b", Phase::Failed),
        ];
        // A Failed record never took effect: declaring its path again plans
        // and records anew instead of pointing at the failure.
        assert_eq!(decide(&records, "c", "/nix/store/b"), Declaration::Deploy);
        assert_eq!(decide(&records, "c", "/nix/store/n"), Declaration::Deploy);
        assert_eq!(decide(&[], "c", "/nix/store/n"), Declaration::Deploy);
    }

    #[test]
    fn the_cli_and_another_host_are_told_who_declares_the_kix_cluster() {
        let mut declared = record("c", 2, "/nix/store/b", Phase::Active);
        let by_cli = declared.clone();
        declared.metadata.annotations = Some(
            [(ANNOTATION_DECLARED_BY.to_string(), "edge".to_string())]
                .into_iter()
                .collect(),
        );
        let warning = host_declared_warning(&declared).expect("a warning");
        assert!(
            warning.contains("is declared by NixOS host edge (c-2 names /nix/store/b)"),
            "{warning}"
        );
        assert!(
            warning.contains("services.kix-operator.clusters.c on edge"),
            "{warning}"
        );
        assert_eq!(host_declared_warning(&by_cli), None);
        assert_eq!(other_host_warning(&declared, "edge"), None);
        assert_eq!(other_host_warning(&by_cli, "edge"), None);
        let other = other_host_warning(&declared, "core").expect("a warning");
        assert!(other.contains("by NixOS host edge too"), "{other}");
    }
}

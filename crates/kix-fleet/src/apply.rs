//! One member's deploy through the engine: the local engine
//! ([`kix_engine::deploy::deploy`]) or, for an operator member, the
//! Activation record the operator applies, then its phase.

use std::time::{Duration, Instant};

use kix_api::{Activation, Engine, Phase};
use kix_engine::deploy::{DeployOptions, OnError, ReceiptInfo};
use kube::api::Api;
use kube::{Client, ResourceExt};

use crate::plan::MemberPlan;
use crate::records::RolloutLabels;

/// The guards and knobs every member's deploy takes.
#[derive(Debug, Clone)]
pub struct MemberOptions {
    /// Health wait of a local member's deploy.
    pub timeout: Duration,
    /// How long an operator member's record may take to settle.
    pub operator_wait: Duration,
    pub accept_migrations: bool,
    pub deletions: kix_engine::budget::DeletionConsent,
    /// Run exactly the confirmed plan (a saved fleet plan): each member's
    /// re-plan under its Lease must have the digest planned.
    pub exact: bool,
    /// The Lease a local member's deploy holds (tests shorten it).
    pub lease: kix_engine::lease::LeaseOptions,
    /// Signs an operator member's build in the cache its settings name
    /// (`settings.cache`), where it is pushed before its record.
    pub sign_key: Option<kix_nix::SigningKey>,
}

impl Default for MemberOptions {
    fn default() -> Self {
        MemberOptions {
            timeout: Duration::from_secs(300),
            operator_wait: Duration::from_secs(600),
            accept_migrations: false,
            deletions: kix_engine::budget::DeletionConsent::Budget,
            exact: false,
            lease: kix_engine::lease::LeaseOptions::default(),
            sign_key: None,
        }
    }
}

/// How a member's deploy ended: its record and phase, with the reason.
#[derive(Debug, Clone)]
pub struct Applied {
    pub activation: Option<String>,
    pub phase: Phase,
    pub message: String,
}

/// The engine's options for one member: the plan's own options, the
/// confirmed destructive actions re-checked on a re-plan made under the
/// Lease (time passed since the fleet was planned).
pub fn deploy_options(
    member: &MemberPlan,
    options: &MemberOptions,
    rollback_from: Option<String>,
) -> DeployOptions {
    let planned = member.plan().map(|p| p.options.clone()).unwrap_or_default();
    DeployOptions {
        timeout: options.timeout,
        on_error: OnError::Abort,
        prune: planned.prune,
        force_conflicts: planned.force_conflicts,
        yield_to_kix_clusters: planned.yield_to_kix_clusters,
        accept_migrations: options.accept_migrations,
        deletions: options.deletions,
        engine: if member.operator {
            Engine::Operator
        } else {
            Engine::Local
        },
        receipt: ReceiptInfo {
            rollback_from,
            ..ReceiptInfo::local()
        },
        lease: options.lease.clone(),
        replan: true,
        exact_digest: options
            .exact
            .then(|| member.plan().map(|p| p.digest.clone()))
            .flatten(),
        ..DeployOptions::default()
    }
}

/// Deploys `member`'s plan; `Err` is a failure before or outside the
/// engine's record (a refusal, a lost connection).
pub async fn apply_member(
    member: &MemberPlan,
    client: &Client,
    options: DeployOptions,
    labels: &RolloutLabels,
    member_options: &MemberOptions,
) -> Result<Applied, String> {
    let plan = member.plan().ok_or("not planned")?;
    kix_engine::deploy::check_plan(plan, &member.build, &options).map_err(|e| e.to_string())?;
    if member.operator {
        return apply_with_operator(member, client, &options, labels, member_options).await;
    }
    // The engine creates the record with the rollout's labels on it.
    let mut options = options;
    options.record_meta = labels.record_meta();
    let plan = match member.plan() {
        Some(plan) => plan.clone(),
        None => return Err("not planned".into()),
    };
    let outcome = kix_engine::deploy::deploy(client, &member.build, plan, &options)
        .await
        .map_err(|e| e.to_string())?;
    Ok(Applied {
        activation: outcome.activation,
        phase: outcome.phase,
        message: outcome.message,
    })
}

/// An operator member: the record `kix deploy --operator` writes, with the
/// rollout's labels, then its phase as the operator settles it.
async fn apply_with_operator(
    member: &MemberPlan,
    client: &Client,
    options: &DeployOptions,
    labels: &RolloutLabels,
    member_options: &MemberOptions,
) -> Result<Applied, String> {
    let wait = member_options.operator_wait;
    let plan = member.plan().ok_or("not planned")?;
    if plan.current_path.as_deref() == Some(plan.store_path.as_str())
        && plan.current_phase == Some(Phase::Active)
        && !plan.has_changes()
    {
        return Ok(Applied {
            activation: plan.current_activation.clone(),
            phase: Phase::Active,
            message: "nothing to do: the build is current".into(),
        });
    }
    let mut options = options.clone();
    options.engine = Engine::Operator;
    publish(
        member,
        member_options.sign_key.as_ref(),
        &mut options.receipt,
    )
    .await?;
    let spec = kix_engine::deploy::activation_spec(plan, &options);
    let created = kix_engine::operator_record::create(client, plan, spec, labels.record_meta())
        .await
        .map_err(|e| e.to_string())?;
    let api: Api<Activation> = Api::all(client.clone());
    let name = created.name_any();
    let started = Instant::now();
    loop {
        let record = api
            .get(&name)
            .await
            .map_err(|e| format!("reading Activation {name}: {e}"))?;
        let status = record.status.unwrap_or_default();
        let phase = status.phase.unwrap_or(Phase::Pending);
        let message = status.message.unwrap_or_default();
        match phase {
            Phase::Active | Phase::Degraded | Phase::Failed => {
                return Ok(Applied {
                    activation: Some(name),
                    phase,
                    message,
                });
            }
            Phase::Superseded => return Err(format!("{name}: a newer activation took over")),
            Phase::Pending | Phase::Applying => {}
        }
        if started.elapsed() >= wait {
            return Err(format!(
                "timed out after {}s waiting for the operator to finish {name} (it is {phase}); the operator keeps working on it",
                wait.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Pushes an operator member's build to the cache its settings name,
/// signed with `key`, and says so in the receipt: the operator fetches it
/// from there. Err, before the record, when there is no key or the push
/// fails.
async fn publish(
    member: &MemberPlan,
    key: Option<&kix_nix::SigningKey>,
    receipt: &mut ReceiptInfo,
) -> Result<(), String> {
    let Some(setting) = &member.build.settings.cache else {
        return Ok(());
    };
    let Some(key) = key.cloned() else {
        return Err(format!(
            "Kix cluster {} publishes its builds to {} (settings.cache), and no key was given to sign them: pass --sign-key FILE; nothing was recorded",
            member.cluster, setting.url
        ));
    };
    let cache = kix_nix::Cache::new(setting.url.clone(), setting.public_keys.clone());
    let path = kix_manifest::StorePath::parse(&member.store_path).map_err(|e| e.to_string())?;
    let (pushing, signing) = (cache.clone(), key.clone());
    tokio::task::spawn_blocking(move || pushing.push(&path, Some(&signing), &mut |_| {}))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("{e}; nothing was recorded"))?;
    receipt.cache = Some(cache.url.to_string());
    receipt.signed_by = Some(key.name().to_owned());
    Ok(())
}

/// Whether `member` is Active on `store_path` with every object Ready:
/// the health a wave must hold for `pause` before the next starts.
pub async fn healthy(client: &Client, cluster: &str, store_path: &str) -> Result<(), String> {
    let status = kix_engine::status::status(client, cluster)
        .await
        .map_err(|e| e.to_string())?;
    let Some(current) = &status.current else {
        return Err("no current activation".into());
    };
    if current.path != store_path {
        return Err(format!(
            "{} runs {}, not {store_path}",
            current.name, current.path
        ));
    }
    if current.phase != Some(Phase::Active) {
        return Err(format!(
            "{} is {}",
            current.name,
            current.phase.map_or("without a phase", Phase::as_str)
        ));
    }
    let c = &status.counts;
    if !c.all_ready() {
        return Err(format!(
            "{} objects not Ready ({} Progressing, {} Degraded, {} Missing, {} Drifted)",
            c.total() - c.ready,
            c.progressing,
            c.degraded,
            c.missing,
            c.drifted
        ));
    }
    Ok(())
}

//! One in-flight deploy per Kix cluster, held by a `coordination.k8s.io/v1`
//! Lease named `kix-deploy-<cluster>` that expires.
//!
//! [`DeployLease::acquire`] creates the Lease, or takes it over when its holder
//! released it or let it expire; a Lease that someone else holds and renews
//! makes the second deploy fail at once with [`LeaseError::Held`], naming the
//! holder. While held, a background task renews `renewTime`; a killed client
//! stops renewing, so the next deploy waits at most the lease duration.
//!
//! Writes use the Lease's resourceVersion (optimistic concurrency): of two
//! clients racing for the same Lease exactly one wins, the other gets a 409
//! conflict and reports the winner.
//!
//! Where it lives (#50): a build that acts as a ServiceAccount takes it in
//! that account's namespace, where only the account's team (and the
//! platform) may write Leases; a build that acts with the caller's rights,
//! in `--lease-namespace` (`kube-system`). So one team cannot hold another's
//! deploy Lease, nor the operator's leader Lease, and the apiserver, not
//! kix, says so. ([`LeaseOptions::for_account`]; a Lease of the layout
//! before, `kube-system/kix-deploy-<cluster>` for every build, is ignored.)
//!
//! Kix labels the Leases it creates `app.kubernetes.io/managed-by: kix`; a
//! held Lease without the label is reported as not a kix deploy.
//!
//! Every live holder blocks a new acquire, the same holder identity included:
//! a deploy never assumes that an earlier one with its own name is finished.
//! Holder identities are therefore meant to be unique per process (the CLI's
//! `user@host pid N`, the operator's pod name).

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::task::JoinHandle;

/// The prefix of the Lease names, followed by the Kix cluster's name.
pub const LEASE_PREFIX: &str = "kix-deploy-";

/// How many times a write that lost a race (409) is retried before giving up.
const MAX_ATTEMPTS: usize = 5;

/// The name of the Lease guarding deploys of a Kix cluster.
pub fn lease_name(cluster: &str) -> String {
    format!("{LEASE_PREFIX}{cluster}")
}

/// Where the Lease lives and how long it lasts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseOptions {
    /// Namespace of the Lease (default `kube-system`).
    pub namespace: String,
    /// How long the Lease stays held without renewal (default 15 s; rounded up
    /// to whole seconds, at least 1 s).
    pub duration: Duration,
    /// How often the holder renews it (default 5 s; at most half the
    /// duration, so one failed renewal does not lose the Lease).
    pub renew_every: Duration,
}

impl LeaseOptions {
    /// Where a deploy acting as `account` takes its Lease: the account's
    /// namespace; with the caller's rights (no account), `self.namespace`.
    pub fn for_account(mut self, account: Option<&kix_api::ServiceAccountRef>) -> LeaseOptions {
        if let Some(account) = account {
            self.namespace.clone_from(&account.namespace);
        }
        self
    }
}

/// The label kix puts on the Leases it creates, and its value.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "kix");

impl Default for LeaseOptions {
    fn default() -> Self {
        LeaseOptions {
            namespace: "kube-system".to_owned(),
            duration: Duration::from_secs(15),
            renew_every: Duration::from_secs(5),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// Someone else holds the Lease and renews it.
    #[error(
        "Kix cluster {cluster:?} is being deployed by {holder} (lease {lease}, expires in {expires_in_secs}s){}",
        if *by_kix { "" } else { "; kix did not create this Lease: whoever may write Leases in its namespace did" }
    )]
    Held {
        cluster: String,
        holder: String,
        /// `namespace/name` of the Lease.
        lease: String,
        /// Seconds until the Lease expires unless its holder renews it.
        expires_in_secs: u64,
        /// The Lease carries kix's label ([`MANAGED_BY`]).
        by_kix: bool,
    },
    /// The Lease was ours and no longer is: someone else took it over, it was
    /// deleted, or renewal failed for longer than its duration.
    #[error("lost the deploy lease of Kix cluster {cluster:?} (lease {lease}): {reason}")]
    Lost {
        cluster: String,
        /// `namespace/name` of the Lease.
        lease: String,
        /// The holder that took over, when known.
        new_holder: Option<String>,
        reason: String,
    },
    #[error("deploy lease {lease}: {source}")]
    Kube {
        lease: String,
        #[source]
        source: kube::Error,
    },
}

/// A held deploy Lease. Renewed in the background until [`release`]d or
/// dropped; dropping stops renewal and leaves the Lease to expire.
///
/// [`release`]: DeployLease::release
pub struct DeployLease {
    api: Api<Lease>,
    cluster: String,
    holder: String,
    namespace: String,
    name: String,
    duration: Duration,
    state: Arc<Mutex<RenewState>>,
    renewer: Option<JoinHandle<()>>,
}

/// What the renewal task shares with its [`DeployLease`].
struct RenewState {
    /// The Lease as last written by us (carries the resourceVersion).
    lease: Lease,
    /// When the last successful write happened.
    renewed_at: Instant,
    /// Set once the Lease is known to be lost: (new holder, reason).
    lost: Option<(Option<String>, String)>,
}

impl fmt::Debug for DeployLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeployLease")
            .field("cluster", &self.cluster)
            .field("holder", &self.holder)
            .field("lease", &format_args!("{}/{}", self.namespace, self.name))
            .finish_non_exhaustive()
    }
}

impl DeployLease {
    /// Takes the deploy Lease of `cluster` for `holder`, or fails with
    /// [`LeaseError::Held`] naming whoever holds it.
    pub async fn acquire(
        client: Client,
        cluster: &str,
        holder: &str,
        options: LeaseOptions,
    ) -> Result<DeployLease, LeaseError> {
        let name = lease_name(cluster);
        let api: Api<Lease> = Api::namespaced(client, &options.namespace);
        let ctx = Ctx {
            cluster,
            lease: format!("{}/{name}", options.namespace),
        };
        let duration_secs = duration_secs(options.duration);

        let mut attempt = 0;
        let lease = loop {
            attempt += 1;
            let existing = api.get_opt(&name).await.map_err(|e| ctx.kube(e))?;
            let now = now();
            match existing {
                None => {
                    let lease = Lease {
                        metadata: ObjectMeta {
                            name: Some(name.clone()),
                            namespace: Some(options.namespace.clone()),
                            labels: Some(
                                [(MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned())].into(),
                            ),
                            ..ObjectMeta::default()
                        },
                        spec: Some(LeaseSpec {
                            holder_identity: Some(holder.to_owned()),
                            acquire_time: Some(MicroTime(now)),
                            renew_time: Some(MicroTime(now)),
                            lease_duration_seconds: Some(duration_secs),
                            lease_transitions: Some(0),
                            ..LeaseSpec::default()
                        }),
                    };
                    match api.create(&PostParams::default(), &lease).await {
                        Ok(created) => break created,
                        // Created by someone else meanwhile: look again.
                        Err(e) if is_status(&e, 409) && attempt < MAX_ATTEMPTS => continue,
                        Err(e) => return Err(ctx.kube(e)),
                    }
                }
                Some(mut existing) => {
                    if let Some((current, expires_in)) = live_holder(&existing, now) {
                        return Err(ctx.held(current, expires_in, by_kix(&existing)));
                    }
                    // Released or expired: take it over, at the resourceVersion read.
                    let spec = existing.spec.get_or_insert_with(LeaseSpec::default);
                    spec.holder_identity = Some(holder.to_owned());
                    spec.acquire_time = Some(MicroTime(now));
                    spec.renew_time = Some(MicroTime(now));
                    spec.lease_duration_seconds = Some(duration_secs);
                    spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
                    match api.replace(&name, &PostParams::default(), &existing).await {
                        Ok(taken) => break taken,
                        // Another client raced us; the next read names the winner.
                        Err(e) if is_status(&e, 409) && attempt < MAX_ATTEMPTS => continue,
                        Err(e) => return Err(ctx.kube(e)),
                    }
                }
            }
        };
        tracing::debug!(cluster, holder, lease = %ctx.lease, "acquired the deploy lease");

        let state = Arc::new(Mutex::new(RenewState {
            lease,
            renewed_at: Instant::now(),
            lost: None,
        }));
        let renewer = tokio::spawn(renew_loop(
            api.clone(),
            name.clone(),
            holder.to_owned(),
            options
                .renew_every
                .min(options.duration / 2)
                .max(Duration::from_millis(100)),
            Arc::clone(&state),
        ));
        Ok(DeployLease {
            api,
            cluster: cluster.to_owned(),
            holder: holder.to_owned(),
            namespace: options.namespace,
            name,
            duration: options.duration,
            state,
            renewer: Some(renewer),
        })
    }

    /// `Ok` while the Lease is still ours: no one else took it over and it was
    /// renewed within its duration.
    pub fn check(&self) -> Result<(), LeaseError> {
        let state = lock(&self.state);
        let lost = match &state.lost {
            Some((new_holder, reason)) => Some((new_holder.clone(), reason.clone())),
            None if state.renewed_at.elapsed() > self.duration => Some((
                None,
                format!(
                    "not renewed for {}s, longer than the lease duration",
                    state.renewed_at.elapsed().as_secs()
                ),
            )),
            None => None,
        };
        match lost {
            None => Ok(()),
            Some((new_holder, reason)) => Err(LeaseError::Lost {
                cluster: self.cluster.clone(),
                lease: self.lease_ref(),
                new_holder,
                reason,
            }),
        }
    }

    /// Stops renewal and clears the holder, so the next deploy need not wait
    /// for the Lease to expire. Failures are logged, not returned: the Lease
    /// then simply expires.
    pub async fn release(mut self) {
        if let Some(renewer) = self.renewer.take() {
            renewer.abort();
            // Wait until a renewal in flight is cancelled, so it cannot land
            // after the release.
            let _ = renewer.await;
        }
        if lock(&self.state).lost.is_some() {
            return;
        }
        for _ in 0..MAX_ATTEMPTS {
            let mut lease = match self.api.get_opt(&self.name).await {
                Ok(Some(lease)) => lease,
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(lease = %self.lease_ref(), error = %e, "releasing the deploy lease");
                    return;
                }
            };
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            if spec.holder_identity.as_deref() != Some(self.holder.as_str()) {
                return; // Not ours any more.
            }
            spec.holder_identity = None;
            spec.renew_time = Some(MicroTime(now()));
            match self
                .api
                .replace(&self.name, &PostParams::default(), &lease)
                .await
            {
                Ok(_) => {
                    tracing::debug!(lease = %self.lease_ref(), "released the deploy lease");
                    return;
                }
                Err(e) if is_status(&e, 409) => continue,
                Err(e) => {
                    tracing::warn!(lease = %self.lease_ref(), error = %e, "releasing the deploy lease");
                    return;
                }
            }
        }
    }

    /// The Kix cluster this Lease guards.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// The holder identity written into the Lease.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// Namespace of the Lease object.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Name of the Lease object (`kix-deploy-<cluster>`).
    pub fn name(&self) -> &str {
        &self.name
    }

    fn lease_ref(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

impl Drop for DeployLease {
    fn drop(&mut self) {
        if let Some(renewer) = self.renewer.take() {
            renewer.abort();
        }
    }
}

/// The live holder of the deploy Lease of `cluster`, if any (none when the
/// Lease is missing, released or expired). For status displays.
pub async fn current_holder(
    client: Client,
    cluster: &str,
    namespace: &str,
) -> Result<Option<String>, LeaseError> {
    let name = lease_name(cluster);
    let api: Api<Lease> = Api::namespaced(client, namespace);
    let lease = api
        .get_opt(&name)
        .await
        .map_err(|source| LeaseError::Kube {
            lease: format!("{namespace}/{name}"),
            source,
        })?;
    Ok(lease.and_then(|lease| live_holder(&lease, now()).map(|(holder, _)| holder)))
}

async fn renew_loop(
    api: Api<Lease>,
    name: String,
    holder: String,
    every: Duration,
    state: Arc<Mutex<RenewState>>,
) {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let mut lease = lock(&state).lease.clone();
        let mut attempt = 0;
        loop {
            attempt += 1;
            lease.spec.get_or_insert_with(LeaseSpec::default).renew_time = Some(MicroTime(now()));
            match api.replace(&name, &PostParams::default(), &lease).await {
                Ok(renewed) => {
                    let mut state = lock(&state);
                    state.lease = renewed;
                    state.renewed_at = Instant::now();
                    break;
                }
                Err(e) if is_status(&e, 409) && attempt < MAX_ATTEMPTS => {
                    // Changed behind our back: still ours (say, relabelled)?
                    match api.get_opt(&name).await {
                        Ok(Some(current)) => {
                            let current_holder = current
                                .spec
                                .as_ref()
                                .and_then(|s| s.holder_identity.clone())
                                .filter(|h| !h.is_empty());
                            if current_holder.as_deref() == Some(holder.as_str()) {
                                lease = current;
                                continue;
                            }
                            let reason = match &current_holder {
                                Some(other) => format!("now held by {other}"),
                                None => "released by someone else".to_owned(),
                            };
                            lose(&state, current_holder, reason);
                            return;
                        }
                        Ok(None) => {
                            lose(&state, None, "the Lease was deleted".to_owned());
                            return;
                        }
                        Err(e) => {
                            tracing::warn!(lease = %name, error = %e, "renewing the deploy lease");
                            break;
                        }
                    }
                }
                Err(e) if is_status(&e, 404) => {
                    lose(&state, None, "the Lease was deleted".to_owned());
                    return;
                }
                Err(e) => {
                    // Transient (connection, apiserver); `check` notices when
                    // this lasts longer than the lease duration.
                    tracing::warn!(lease = %name, error = %e, "renewing the deploy lease");
                    break;
                }
            }
        }
    }
}

fn lose(state: &Mutex<RenewState>, new_holder: Option<String>, reason: String) {
    tracing::warn!(%reason, "lost the deploy lease");
    lock(state).lost = Some((new_holder, reason));
}

/// The holder and the seconds until expiry, when the Lease is held and not
/// expired.
fn live_holder(lease: &Lease, now: Timestamp) -> Option<(String, u64)> {
    let spec = lease.spec.as_ref()?;
    let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty())?;
    let renewed = spec.renew_time.as_ref().or(spec.acquire_time.as_ref())?;
    let duration_us = i64::from(spec.lease_duration_seconds.unwrap_or(0)) * 1_000_000;
    let expires_us = renewed.0.as_microsecond() + duration_us;
    let remaining_us = expires_us - now.as_microsecond();
    if remaining_us <= 0 {
        return None;
    }
    let expires_in = u64::try_from(remaining_us).unwrap_or(0).div_ceil(1_000_000);
    Some((holder.to_owned(), expires_in))
}

fn by_kix(lease: &Lease) -> bool {
    lease
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(MANAGED_BY.0))
        .is_some_and(|value| value == MANAGED_BY.1)
}

struct Ctx<'a> {
    cluster: &'a str,
    lease: String,
}

impl Ctx<'_> {
    fn kube(&self, source: kube::Error) -> LeaseError {
        LeaseError::Kube {
            lease: self.lease.clone(),
            source,
        }
    }

    fn held(&self, holder: String, expires_in_secs: u64, by_kix: bool) -> LeaseError {
        LeaseError::Held {
            cluster: self.cluster.to_owned(),
            holder,
            lease: self.lease.clone(),
            expires_in_secs,
            by_kix,
        }
    }
}

/// Now, at the microsecond precision of a MicroTime.
fn now() -> Timestamp {
    let now = Timestamp::now();
    Timestamp::from_microsecond(now.as_microsecond()).unwrap_or(now)
}

fn duration_secs(duration: Duration) -> i32 {
    let secs = duration.as_secs() + u64::from(duration.subsec_nanos() > 0);
    i32::try_from(secs.max(1)).unwrap_or(i32::MAX)
}

fn is_status(error: &kube::Error, code: u16) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == code)
}

fn lock(state: &Mutex<RenewState>) -> std::sync::MutexGuard<'_, RenewState> {
    state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, renewed_us: i64, duration: i32) -> Lease {
        Lease {
            metadata: ObjectMeta::default(),
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                renew_time: Some(MicroTime(
                    Timestamp::from_microsecond(renewed_us).expect("valid timestamp"),
                )),
                lease_duration_seconds: Some(duration),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn live_holder_honours_expiry_and_release() {
        let now = Timestamp::from_microsecond(1_000_000_000_000_000).expect("valid timestamp");
        let t = now.as_microsecond();
        assert_eq!(
            live_holder(&lease(Some("alice"), t - 3_500_000, 15), now),
            Some(("alice".to_owned(), 12))
        );
        assert_eq!(
            live_holder(&lease(Some("alice"), t - 15_000_000, 15), now),
            None
        );
        assert_eq!(live_holder(&lease(Some(""), t, 15), now), None);
        assert_eq!(live_holder(&lease(None, t, 15), now), None);
    }

    #[test]
    fn held_message_names_the_holder() {
        let err = LeaseError::Held {
            cluster: "prod".to_owned(),
            holder: "alice@ci pid 42".to_owned(),
            lease: "kube-system/kix-deploy-prod".to_owned(),
            expires_in_secs: 12,
            by_kix: true,
        };
        assert_eq!(
            err.to_string(),
            "Kix cluster \"prod\" is being deployed by alice@ci pid 42 (lease kube-system/kix-deploy-prod, expires in 12s)"
        );
        let squatted = LeaseError::Held {
            cluster: "prod".to_owned(),
            holder: "mallory".to_owned(),
            lease: "team-a/kix-deploy-prod".to_owned(),
            expires_in_secs: 3600,
            by_kix: false,
        };
        assert_eq!(
            squatted.to_string(),
            "Kix cluster \"prod\" is being deployed by mallory (lease team-a/kix-deploy-prod, expires in 3600s); \
             kix did not create this Lease: whoever may write Leases in its namespace did"
        );
    }

    #[test]
    fn a_deploy_acting_as_an_account_takes_its_lease_in_the_accounts_namespace() {
        let account = kix_api::ServiceAccountRef {
            namespace: "team-a".to_owned(),
            name: "kix".to_owned(),
        };
        let options = LeaseOptions::default();
        assert_eq!(
            options.clone().for_account(Some(&account)).namespace,
            "team-a"
        );
        assert_eq!(options.for_account(None).namespace, "kube-system");
    }

    #[test]
    fn durations_round_up_to_whole_seconds() {
        assert_eq!(duration_secs(Duration::from_millis(1500)), 2);
        assert_eq!(duration_secs(Duration::from_millis(0)), 1);
        assert_eq!(duration_secs(Duration::from_secs(15)), 15);
    }
}

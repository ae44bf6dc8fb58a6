//! The shard Leases of a sharded operator (`--shards N`, N > 1): one Lease
//! per shard (`<leader-lease>-shard-<i>`), and one per live replica
//! (`<leader-lease>-member-<hash of its identity>`), both in
//! `--lease-namespace`.
//!
//! Each replica holds the Leases of up to its fair share of the shards,
//! `ceil(N / live replicas)`, counting the replicas by their member Leases:
//! it takes free and expired shard Leases (lowest first) up to its share and
//! gives back those above it (highest first), so a second replica gets half
//! the shards and one replica alone takes them all.
//!
//! Two replicas never act on one shard at once. A Lease is written only at
//! the resourceVersion last read (compare-and-swap: of two writers one gets
//! a conflict). Another replica takes a Lease over only after it saw the
//! Lease unchanged for its whole duration, by its own clock (as client-go's
//! leader election: no clocks are compared). The holder acts on a shard
//! only until the time it last sent a renewal that succeeded plus the renew
//! deadline, two thirds of the duration: when that passes without a newer
//! renewal, its reconciles of the shard are cancelled ([`ShardSet::lost`]),
//! a third of the duration before anyone else may take the Lease. A shard
//! given back is given back after its reconciles ended.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions};
use tokio::sync::{mpsc::UnboundedSender, oneshot, watch};
use tracing::{info, warn};

use crate::shard::Shard;

/// Label on the shard and member Leases: the operator's leader Lease name
/// (or a hash of it, when it is no label value), so replicas of one
/// operator list theirs in one request.
const LABEL_LEASES: &str = "kix.run/operator-leases";
/// Label on the same Leases: `shard` or `member`.
const LABEL_ROLE: &str = "kix.run/operator-lease-role";

/// The shards this replica may act on now, and for how long.
pub struct ShardSet {
    /// Per shard: until when this replica acts on it; None: not held.
    until: Vec<watch::Sender<Option<Instant>>>,
    /// Per shard: its reconciles running now.
    running: Vec<AtomicUsize>,
}

/// A reconcile of a record of a held shard; counted until dropped.
pub struct Running<'a>(&'a AtomicUsize);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl ShardSet {
    pub fn new(count: u32) -> Arc<ShardSet> {
        Arc::new(ShardSet {
            until: (0..count).map(|_| watch::Sender::new(None)).collect(),
            running: (0..count).map(|_| AtomicUsize::new(0)).collect(),
        })
    }

    /// The number of shards (`--shards`).
    pub fn count(&self) -> u32 {
        u32::try_from(self.until.len()).unwrap_or(u32::MAX)
    }

    /// Whether this replica acts on `shard` now.
    pub fn holds(&self, shard: Shard) -> bool {
        self.until
            .get(shard as usize)
            .is_some_and(|until| until.borrow().is_some_and(|d| d > Instant::now()))
    }

    /// The shards held now, lowest first.
    pub fn held(&self) -> Vec<Shard> {
        (0..self.count()).filter(|&s| self.holds(s)).collect()
    }

    /// A reconcile of a record of `shard` starts, if this replica holds it.
    pub fn enter(&self, shard: Shard) -> Option<Running<'_>> {
        let running = self.running.get(shard as usize)?;
        running.fetch_add(1, Ordering::AcqRel);
        let guard = Running(running);
        self.holds(shard).then_some(guard)
    }

    /// Completes when this replica may no longer act on `shard`: given
    /// back, taken, or its renew deadline passed.
    pub async fn lost(&self, shard: Shard) {
        let Some(until) = self.until.get(shard as usize) else {
            return;
        };
        let mut rx = until.subscribe();
        loop {
            let deadline = *rx.borrow_and_update();
            match deadline {
                Some(deadline) if deadline > Instant::now() => {
                    tokio::select! {
                        () = tokio::time::sleep_until(deadline.into()) => {}
                        changed = rx.changed() => if changed.is_err() { return },
                    }
                }
                _ => return,
            }
        }
    }

    fn grant(&self, shard: Shard, until: Instant) {
        if let Some(sender) = self.until.get(shard as usize) {
            sender.send_replace(Some(until));
        }
    }

    fn revoke(&self, shard: Shard) {
        if let Some(sender) = self.until.get(shard as usize) {
            sender.send_replace(None);
        }
    }

    /// Waits (at most `within`) until no reconcile of `shard` runs.
    async fn drained(&self, shard: Shard, within: Duration) {
        let Some(running) = self.running.get(shard as usize) else {
            return;
        };
        let end = Instant::now() + within;
        while running.load(Ordering::Acquire) > 0 && Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Where the shard Leases are and whose they are.
pub struct LeaseConfig {
    pub client: Client,
    pub namespace: String,
    /// `--leader-lease`: the prefix of the shard and member Leases' names.
    pub base: String,
    pub identity: String,
    /// `--shard-lease-seconds`.
    pub duration: Duration,
}

/// A Lease as this replica last saw it change.
struct Seen {
    version: String,
    since: Instant,
}

/// Takes, renews and gives back this replica's shard Leases.
pub struct Elector {
    config: LeaseConfig,
    api: Api<Lease>,
    set: Arc<ShardSet>,
    /// Told each shard this replica took (its records are reconciled).
    gained: UnboundedSender<Shard>,
    seen: HashMap<String, Seen>,
    /// The shard Leases as this replica last wrote them.
    mine: HashMap<Shard, Lease>,
}

impl Elector {
    pub fn new(config: LeaseConfig, set: Arc<ShardSet>, gained: UnboundedSender<Shard>) -> Self {
        let api = Api::namespaced(config.client.clone(), &config.namespace);
        Elector {
            config,
            api,
            set,
            gained,
            seen: HashMap::new(),
            mine: HashMap::new(),
        }
    }

    /// Every third of the Lease duration: renew, balance. Until `stop`,
    /// then every shard is given back and the member Lease deleted.
    pub async fn run(mut self, mut stop: oneshot::Receiver<()>) {
        loop {
            // Every third of the duration from the last round's start, not
            // its end: a slow round (a starved process) does not push the
            // next renewal past the renew deadline.
            let next = tokio::time::Instant::now() + self.config.duration / 3;
            if let Err(err) = self.step().await {
                warn!(namespace = %self.config.namespace, "shard Leases: {err}");
            }
            tokio::select! {
                () = tokio::time::sleep_until(next) => {}
                _ = &mut stop => break,
            }
        }
        for shard in self.set.held() {
            self.give_back(shard).await;
        }
        let member = self.member_name();
        if let Err(err) = self.api.delete(&member, &DeleteParams::default()).await {
            warn!("deleting the member Lease {member}: {err}");
        }
    }

    fn renew_deadline(&self) -> Duration {
        self.config.duration * 2 / 3
    }

    fn shard_name(&self, shard: Shard) -> String {
        format!("{}-shard-{shard}", self.config.base)
    }

    fn member_name(&self) -> String {
        let hash = fnv_hex(&self.config.identity);
        format!("{}-member-{hash}", self.config.base)
    }

    /// One round: renew the held shards first (from the Leases as last
    /// written), read the Leases, then take or give back shards.
    async fn step(&mut self) -> Result<(), kube::Error> {
        self.forget_expired();
        for shard in self.set.held() {
            self.renew(shard).await;
        }
        let selector = format!("{LABEL_LEASES}={}", label_value(&self.config.base));
        let leases = self
            .api
            .list(&ListParams::default().labels(&selector))
            .await?
            .items;
        let now = Instant::now();
        self.observe(&leases, now);
        self.keep_member(&leases).await;
        let live = self.live_members(&leases, now);
        self.collect_gone_members(&leases, now).await;
        let fair = self.set.count().div_ceil(live.max(1)) as usize;
        let held = self.set.held();
        if held.len() > fair {
            for &shard in held.iter().rev().take(held.len() - fair) {
                info!(
                    shard,
                    live, fair, "giving back a shard: more replicas share them"
                );
                self.give_back(shard).await;
            }
            return Ok(());
        }
        let mut holding = held.len();
        for shard in 0..self.set.count() {
            if holding >= fair {
                break;
            }
            if self.set.holds(shard) {
                continue;
            }
            let name = self.shard_name(shard);
            let lease = leases
                .iter()
                .find(|l| l.metadata.name.as_deref() == Some(&name));
            if self.takeable(lease, now) && self.take(shard, lease.cloned()).await {
                holding += 1;
            }
        }
        Ok(())
    }

    /// Shards whose renew deadline passed: no longer held (their reconciles
    /// were cancelled then); taken again only by compare-and-swap.
    fn forget_expired(&mut self) {
        let lapsed: Vec<Shard> = self
            .mine
            .keys()
            .copied()
            .filter(|&s| !self.set.holds(s))
            .collect();
        for shard in lapsed {
            warn!(
                shard,
                "stopped acting on a shard: its Lease was not renewed in time"
            );
            self.set.revoke(shard);
            self.mine.remove(&shard);
        }
    }

    fn observe(&mut self, leases: &[Lease], now: Instant) {
        // Bounded: only the Leases listed now are remembered.
        self.seen.retain(|name, _| {
            leases
                .iter()
                .any(|l| l.metadata.name.as_deref() == Some(name))
        });
        for lease in leases {
            let (Some(name), Some(version)) =
                (&lease.metadata.name, &lease.metadata.resource_version)
            else {
                continue;
            };
            let changed = self.seen.get(name).is_none_or(|s| &s.version != version);
            if changed {
                let seen = Seen {
                    version: version.clone(),
                    since: now,
                };
                self.seen.insert(name.clone(), seen);
            }
        }
    }

    /// Whether `lease` is held by no one else: missing, released, this
    /// replica's, or unchanged for its whole duration since first seen.
    fn takeable(&self, lease: Option<&Lease>, now: Instant) -> bool {
        let Some(lease) = lease else { return true };
        let holder = holder_of(lease);
        if holder.is_empty() || holder == self.config.identity {
            return true;
        }
        self.expired(lease, now)
    }

    fn expired(&self, lease: &Lease, now: Instant) -> bool {
        let name = lease.metadata.name.as_deref().unwrap_or_default();
        let duration = lease
            .spec
            .as_ref()
            .and_then(|s| s.lease_duration_seconds)
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.config.duration, Duration::from_secs);
        self.seen
            .get(name)
            .is_some_and(|seen| now.duration_since(seen.since) > duration)
    }

    /// The replicas whose member Leases are live, this one included.
    fn live_members(&self, leases: &[Lease], now: Instant) -> u32 {
        let me = self.member_name();
        let others = leases
            .iter()
            .filter(|l| role_of(l) == "member")
            .filter(|l| l.metadata.name.as_deref() != Some(me.as_str()))
            .filter(|l| !holder_of(l).is_empty() && !self.expired(l, now))
            .count();
        u32::try_from(others + 1).unwrap_or(u32::MAX)
    }

    /// Deletes the member Leases of replicas gone without SIGTERM (killed,
    /// their node lost), unchanged for three durations, at the version
    /// seen: new replica names (a Deployment's pods) do not pile them up.
    async fn collect_gone_members(&self, leases: &[Lease], now: Instant) {
        let gone = self.config.duration * 3;
        for lease in leases.iter().filter(|l| role_of(l) == "member") {
            let (Some(name), Some(version)) =
                (&lease.metadata.name, &lease.metadata.resource_version)
            else {
                continue;
            };
            if self
                .seen
                .get(name)
                .is_none_or(|seen| now.duration_since(seen.since) < gone)
            {
                continue;
            }
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    resource_version: Some(version.clone()),
                    uid: None,
                }),
                ..DeleteParams::default()
            };
            match self.api.delete(name, &params).await {
                Ok(_) => {
                    info!(lease = %name, holder = holder_of(lease), "deleted the member Lease of a replica gone")
                }
                Err(err) => warn!("deleting the member Lease {name} of a replica gone: {err}"),
            }
        }
    }

    /// Creates or renews this replica's member Lease.
    async fn keep_member(&mut self, leases: &[Lease]) {
        let name = self.member_name();
        let existing = leases
            .iter()
            .find(|l| l.metadata.name.as_deref() == Some(&name));
        let lease = self.stamped(&name, "member", existing.cloned());
        let written = match existing {
            Some(_) => {
                self.api
                    .replace(&name, &PostParams::default(), &lease)
                    .await
            }
            None => self.api.create(&PostParams::default(), &lease).await,
        };
        if let Err(err) = written {
            warn!("renewing the member Lease {name}: {err}");
        }
    }

    /// Takes shard `shard`'s Lease at the version read; true when taken.
    async fn take(&mut self, shard: Shard, existing: Option<Lease>) -> bool {
        let name = self.shard_name(shard);
        let transitions = existing
            .as_ref()
            .and_then(|l| l.spec.as_ref())
            .filter(|s| s.holder_identity.as_deref() != Some(self.config.identity.as_str()))
            .map_or(0, |_| 1);
        let mut lease = self.stamped(&name, "shard", existing.clone());
        if let Some(spec) = lease.spec.as_mut() {
            spec.acquire_time = spec.renew_time.clone();
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + transitions);
        }
        let sent = Instant::now();
        let written = match existing {
            Some(_) => {
                self.api
                    .replace(&name, &PostParams::default(), &lease)
                    .await
            }
            None => self.api.create(&PostParams::default(), &lease).await,
        };
        match written {
            Ok(taken) => {
                self.mine.insert(shard, taken);
                self.set.grant(shard, sent + self.renew_deadline());
                info!(shard, lease = %name, "took a shard");
                let _ = self.gained.send(shard);
                true
            }
            // Another replica wrote it first.
            Err(kube::Error::Api(status)) if status.code == 409 => false,
            Err(err) => {
                warn!(shard, "taking the shard Lease {name}: {err}");
                false
            }
        }
    }

    /// Renews a held shard's Lease; a conflict (someone else wrote it)
    /// loses the shard at once, another error at its renew deadline.
    async fn renew(&mut self, shard: Shard) {
        let name = self.shard_name(shard);
        let Some(last) = self.mine.get(&shard).cloned() else {
            return;
        };
        let lease = self.stamped(&name, "shard", Some(last));
        let sent = Instant::now();
        match self
            .api
            .replace(&name, &PostParams::default(), &lease)
            .await
        {
            Ok(renewed) if holder_of(&renewed) == self.config.identity => {
                self.mine.insert(shard, renewed);
                self.set.grant(shard, sent + self.renew_deadline());
            }
            Err(kube::Error::Api(status)) if status.code != 409 => {
                warn!(shard, "renewing the shard Lease {name}: {status}");
            }
            Ok(_) | Err(kube::Error::Api(_)) => {
                warn!(shard, lease = %name, "lost a shard: its Lease was written by another replica");
                self.set.revoke(shard);
                self.mine.remove(&shard);
            }
            Err(err) => warn!(shard, "renewing the shard Lease {name}: {err}"),
        }
    }

    /// Stops acting on `shard` (its reconciles cancelled and ended), then
    /// releases its Lease so another replica takes it at once.
    async fn give_back(&mut self, shard: Shard) {
        self.set.revoke(shard);
        // Cancelled reconciles end at once; short, so the other shards'
        // renewals are not late.
        self.set.drained(shard, self.config.duration / 6).await;
        let Some(mut lease) = self.mine.remove(&shard) else {
            return;
        };
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
            spec.renew_time = Some(MicroTime(Timestamp::now()));
        }
        let name = self.shard_name(shard);
        if let Err(err) = self
            .api
            .replace(&name, &PostParams::default(), &lease)
            .await
        {
            warn!(shard, "releasing the shard Lease {name}: {err}");
        }
    }

    /// `existing` (or a new Lease `name`) held by this replica, renewed now,
    /// at the resourceVersion it was read at.
    fn stamped(&self, name: &str, role: &str, existing: Option<Lease>) -> Lease {
        let mut lease = existing.unwrap_or_else(|| Lease {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(self.config.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec::default()),
        });
        let labels = lease.metadata.labels.get_or_insert_with(Default::default);
        labels.insert(LABEL_LEASES.into(), label_value(&self.config.base));
        labels.insert(LABEL_ROLE.into(), role.into());
        labels.insert(
            kix_api::labels::LABEL_MANAGED_BY.into(),
            kix_api::labels::MANAGED_BY_VALUE.into(),
        );
        lease.metadata.managed_fields = None;
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = Some(self.config.identity.clone());
        spec.lease_duration_seconds =
            Some(i32::try_from(self.config.duration.as_secs().max(1)).unwrap_or(i32::MAX));
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        lease
    }
}

fn holder_of(lease: &Lease) -> &str {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .unwrap_or_default()
}

fn role_of(lease: &Lease) -> &str {
    lease
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_ROLE))
        .map_or("", String::as_str)
}

/// `name` when it is a label value (Lease names are DNS names; a long one
/// is not), else `h-` and its FNV-1a in hex.
fn label_value(name: &str) -> String {
    if name.len() <= 63 {
        name.to_owned()
    } else {
        format!("h-{}", fnv_hex(name))
    }
}

/// 64-bit FNV-1a of `text` in hex: a short stable name part.
fn fnv_hex(text: &str) -> String {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let hash = text.bytes().fold(OFFSET, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    });
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_shard_is_lost_at_its_deadline_and_when_revoked() {
        let set = ShardSet::new(2);
        assert!(!set.holds(0) && set.enter(0).is_none());
        set.grant(0, Instant::now() + Duration::from_millis(50));
        assert_eq!(set.held(), [0]);
        let running = set.enter(0).expect("held");
        let started = Instant::now();
        set.lost(0).await;
        assert!(started.elapsed() >= Duration::from_millis(40));
        assert!(!set.holds(0));
        drop(running);
        set.grant(1, Instant::now() + Duration::from_secs(60));
        let lost = set.lost(1);
        set.revoke(1);
        tokio::time::timeout(Duration::from_secs(1), lost)
            .await
            .expect("revoking ends the shard's reconciles");
    }

    #[test]
    fn lease_labels_fit() {
        assert_eq!(label_value("kix-operator"), "kix-operator");
        assert_eq!(label_value(&"x".repeat(64)).len(), 18);
    }
}

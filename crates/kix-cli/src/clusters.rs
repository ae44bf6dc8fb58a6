//! `kix status --all`: every Kix cluster the caller can see, one row each,
//! from the Activation records (one LIST) and PackageInstances (one LIST).
//!
//! Activation records are cluster-scoped: whoever may list them sees every
//! Kix cluster's. A tenant's Kix cluster (its records name the
//! ServiceAccount it acts as) is shown only to the account itself and to a
//! caller who may act as it (impersonate, as a team's people do) or read it
//! (get: the namespace's `view`, `edit` and `admin` roles), asked once per
//! account (SelfSubjectAccessReview), so one team's listing is its own Kix
//! clusters, not every team's. A Kix cluster the caller may not see is
//! skipped, not an error (`-v` names it).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kix_api::{Activation, CONDITION_READY, PackageInstance, ServiceAccountRef};
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde::Serialize;

use crate::output::age;

/// One Kix cluster's row (`kix status --all -o json` is an array of them).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRow {
    pub cluster: String,
    /// The phase of its current activation (`Pending` when none acted on it).
    pub phase: String,
    /// The current activation: the applied one, else the newest record.
    pub activation: String,
    /// Its build's store path.
    pub store_path: String,
    /// The flake revision the build came from, when recorded.
    pub revision: Option<String>,
    /// Package versions, from the PackageInstance records (empty when
    /// there are none or they may not be read).
    pub packages: Vec<PackageVersion>,
    /// When the current activation was recorded (RFC 3339).
    pub since: DateTime<Utc>,
    pub health: Health,
    /// The ServiceAccount the Kix cluster acts as (`namespace/name`).
    pub service_account: Option<String>,
    /// The newest record, when it is not the current one (a deploy under
    /// way, or one that failed).
    pub latest: Option<LatestRecord>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PackageVersion {
    pub name: String,
    pub version: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct LatestRecord {
    pub name: String,
    pub phase: String,
}

/// Health as the current record says: no object is read.
#[derive(Debug, Clone, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Health {
    /// The Ready condition (`None`: not set yet).
    pub ready: Option<bool>,
    /// Its reason, when not Ready.
    pub reason: Option<String>,
    /// Drifted objects found since the activation, and corrected.
    pub drift_detected: u32,
    pub drift_corrected: u32,
    /// Objects whose deletion was accepted but which still exist.
    pub deleting: u32,
    /// Objects that could not be deleted.
    pub not_deleted: u32,
}

/// A Kix cluster left out, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub cluster: String,
    pub account: ServiceAccountRef,
}

/// The Kix clusters `client`'s credentials can see, by name, and those
/// skipped.
pub async fn visible(client: &Client) -> anyhow::Result<(Vec<ClusterRow>, Vec<Skipped>)> {
    let records = kix_engine::records::list_all_required(client).await?;
    let versions = package_versions(client).await;
    let mut names: Vec<&str> = records.iter().map(Activation::cluster_name).collect();
    names.sort_unstable();
    names.dedup();
    let mut readable: BTreeMap<ServiceAccountRef, bool> = BTreeMap::new();
    let me = whoami(client).await;
    let (mut rows, mut skipped) = (Vec::new(), Vec::new());
    for name in names {
        let Some(row) = row_of(&records, name, &versions) else {
            continue;
        };
        if let Some(account) = account_of(&records, name) {
            let may = match readable.get(&account) {
                Some(may) => *may,
                None => {
                    let may = may_see_account(client, me.as_deref(), &account).await?;
                    readable.insert(account.clone(), may);
                    may
                }
            };
            if !may {
                skipped.push(Skipped {
                    cluster: name.to_string(),
                    account,
                });
                continue;
            }
        }
        rows.push(row);
    }
    Ok((rows, skipped))
}

/// The ServiceAccount the Kix cluster's newest record names.
fn account_of(records: &[Activation], cluster: &str) -> Option<ServiceAccountRef> {
    kix_engine::records::of_cluster(records, cluster)
        .iter()
        .rev()
        .find_map(|r| r.spec.service_account.clone())
}

fn row_of(
    records: &[Activation],
    cluster: &str,
    versions: &BTreeMap<String, Vec<PackageVersion>>,
) -> Option<ClusterRow> {
    let latest = *kix_engine::records::of_cluster(records, cluster).last()?;
    let head = kix_engine::records::current(records, cluster).unwrap_or(latest);
    let phase_of = |r: &Activation| r.phase_or_pending().as_str().to_string();
    let newer = (latest.name_any() != head.name_any()).then(|| LatestRecord {
        name: latest.name_any(),
        phase: phase_of(latest),
    });
    Some(ClusterRow {
        cluster: cluster.to_string(),
        phase: phase_of(head),
        activation: head.name_any(),
        store_path: head.spec.source.path.clone(),
        revision: head.spec.source.revision.clone(),
        packages: versions.get(cluster).cloned().unwrap_or_default(),
        since: kix_engine::records::recorded_at(head),
        health: health_of(head),
        service_account: head
            .spec
            .service_account
            .as_ref()
            .map(|a| format!("{}/{}", a.namespace, a.name)),
        latest: newer,
    })
}

fn health_of(record: &Activation) -> Health {
    let Some(status) = &record.status else {
        return Health::default();
    };
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_READY);
    Health {
        ready: ready.map(|c| c.status == "True"),
        reason: ready
            .filter(|c| c.status != "True" && !c.reason.is_empty())
            .map(|c| c.reason.clone()),
        drift_detected: status.drift.as_ref().map_or(0, |d| d.detected),
        drift_corrected: status.drift.as_ref().map_or(0, |d| d.corrected),
        deleting: status.deleting_count(),
        not_deleted: status.failed_deletion_count(),
    }
}

/// Package versions by Kix cluster; none when they may not be read.
async fn package_versions(client: &Client) -> BTreeMap<String, Vec<PackageVersion>> {
    let api: Api<PackageInstance> = Api::all(client.clone());
    let mut by_cluster: BTreeMap<String, BTreeSet<(String, String)>> = BTreeMap::new();
    match api.list(&ListParams::default()).await {
        Ok(list) => {
            for p in list.items {
                by_cluster
                    .entry(p.spec.cluster.clone())
                    .or_default()
                    .insert((p.spec.package.clone(), p.spec.version.clone()));
            }
        }
        Err(err) => tracing::info!("not showing package versions: listing PackageInstances: {err}"),
    }
    by_cluster
        .into_iter()
        .map(|(cluster, set)| {
            let list = set
                .into_iter()
                .map(|(name, version)| PackageVersion { name, version })
                .collect();
            (cluster, list)
        })
        .collect()
}

/// Who the caller is (a SelfSubjectReview); none when the apiserver does
/// not say.
async fn whoami(client: &Client) -> Option<String> {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let api: Api<SelfSubjectReview> = Api::all(client.clone());
    let review = api
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .map_err(|err| tracing::info!("asking the apiserver who you are: {err}"))
        .ok()?;
    review.status?.user_info?.username
}

/// Whether the caller may see `account`'s Kix clusters: it is the
/// account, may act as it (impersonate) or may read it (get).
async fn may_see_account(
    client: &Client,
    me: Option<&str>,
    account: &ServiceAccountRef,
) -> anyhow::Result<bool> {
    if me == Some(account.username().as_str()) {
        return Ok(true);
    }
    for verb in ["impersonate", "get"] {
        if may(client, account, verb).await? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// A SelfSubjectAccessReview: may the caller `verb` ServiceAccount `account`?
async fn may(client: &Client, account: &ServiceAccountRef, verb: &str) -> anyhow::Result<bool> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(account.namespace.clone()),
                verb: Some(verb.into()),
                resource: Some("serviceaccounts".into()),
                name: Some(account.name.clone()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let answer = api
        .create(&PostParams::default(), &review)
        .await
        .map_err(|err| {
            anyhow::anyhow!("asking whether you may {verb} ServiceAccount {account}: {err}")
        })?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// `0a1b2c3d-kix-prod`: a store path's hash shortened, and its name.
pub fn short_path(path: &str) -> String {
    let base = path.rsplit('/').next().unwrap_or(path);
    match base.split_once('-') {
        Some((hash, name)) if hash.len() > 8 => format!("{}-{name}", &hash[..8]),
        _ => base.to_string(),
    }
}

/// The version column: the flake revision, else the package versions.
fn version_text(row: &ClusterRow) -> String {
    if let Some(rev) = &row.revision {
        return rev.chars().take(12).collect();
    }
    match row.packages.as_slice() {
        [] => "-".to_string(),
        [one] => one.version.clone(),
        many => {
            let mut shown: Vec<String> = many
                .iter()
                .take(3)
                .map(|p| format!("{}@{}", p.name, p.version))
                .collect();
            if many.len() > 3 {
                shown.push(format!("+{}", many.len() - 3));
            }
            shown.join(",")
        }
    }
}

fn health_text(h: &Health) -> String {
    let mut parts = vec![match (h.ready, &h.reason) {
        (Some(true), _) => "Ready".to_string(),
        (Some(false), Some(reason)) => format!("NotReady ({reason})"),
        (Some(false), None) => "NotReady".to_string(),
        (None, _) => "-".to_string(),
    }];
    if h.drift_detected > 0 {
        parts.push(format!(
            "drift {}/{} corrected",
            h.drift_corrected, h.drift_detected
        ));
    }
    if h.deleting > 0 {
        parts.push(format!("{} deleting", h.deleting));
    }
    if h.not_deleted > 0 {
        parts.push(format!("{} not deleted", h.not_deleted));
    }
    parts.join(", ")
}

/// The rows as a table: CLUSTER PHASE VERSION BUILD AGE HEALTH.
pub fn table(rows: &[ClusterRow], now: DateTime<Utc>) -> String {
    if rows.is_empty() {
        return "no Kix cluster has an Activation record you can see\n".to_string();
    }
    let header = ["CLUSTER", "PHASE", "VERSION", "BUILD", "AGE", "HEALTH"].map(String::from);
    let mut lines: Vec<[String; 6]> = vec![header];
    for row in rows {
        let mut phase = row.phase.clone();
        if let Some(latest) = &row.latest {
            let _ = write!(phase, " ({} {})", latest.name, latest.phase);
        }
        lines.push([
            row.cluster.clone(),
            phase,
            version_text(row),
            short_path(&row.store_path),
            age(row.since, now),
            health_text(&row.health),
        ]);
    }
    let mut widths = [0usize; 6];
    for line in &lines {
        for (w, cell) in widths.iter_mut().zip(line) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for line in &lines {
        let mut text = String::new();
        for (i, cell) in line.iter().enumerate() {
            let _ = write!(text, "{cell:<width$}  ", width = widths[i]);
        }
        let _ = writeln!(out, "{}", text.trim_end());
    }
    out
}

/// What `-v` says of a Kix cluster left out.
pub fn skipped_line(s: &Skipped) -> String {
    format!(
        "skipped Kix cluster {}: it acts as ServiceAccount {}, which you may neither act as nor read",
        s.cluster, s.account
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_path_is_shortened_to_its_hash_prefix_and_name() {
        assert_eq!(
            short_path("/nix/store/0a1b2c3d4e5f6g7h8i9j0k1l2m3n4o5p-kix-prod"),
            "0a1b2c3d-kix-prod"
        );
        assert_eq!(short_path("odd"), "odd");
    }
}

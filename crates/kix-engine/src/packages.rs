//! PackageInstance records (`packageinstances.kix.run`, named
//! `<cluster>.<package>`): one per package a Kix cluster installed, written by
//! the engine during every deploy, local or operator.
//!
//! Lifecycle, per package of the build:
//!
//! - **Pending**: the record is created when a deploy first meets the
//!   package (spec: the build's version and the deploying activation).
//! - **Installing** (never installed before) or **Upgrading** (installed; the
//!   version changes, or the package's objects do) when the deploy reaches the
//!   package and it has something to do.
//! - **Ready**, **Degraded** (applied, not healthy) or **Failed** (a migration
//!   or an apply failed) when the package's group ends. Ready and Degraded
//!   record the build's version and the activation as installed; Failed keeps
//!   the version that was installed before, so the next deploy crosses the
//!   same migrations again.
//! - **Removing** when the build no longer has the package, before prune;
//!   the record is deleted once prune deleted the objects (kept, with the
//!   reason, when a deletion failed).
//!
//! The `Installed` condition (True once a version was installed) tells a
//! first install that did not finish from an installed package: see
//! [`installed_version`], which is what migrations are selected from.

use std::collections::{BTreeMap, BTreeSet};

use futures::stream::{self, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kix_api::{
    CONDITION_READY, FailedDeletion, PackageInstance, PackageInstanceSpec, PackageInstanceStatus,
    PackagePhase,
};
use kix_manifest::Build;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tracing::info;

use crate::error::{EngineError, Result};
use crate::order::Group;
use crate::plan_object::Action;
use crate::plan_value::Plan;
use crate::records;

/// Condition type: True once a version of the package was installed (Ready or
/// Degraded at least once).
pub const CONDITION_INSTALLED: &str = "Installed";

/// The version a record says is installed: None for a first install that has
/// not finished (Pending, Installing, or Failed without the `Installed`
/// condition).
pub fn installed_version(pi: &PackageInstance) -> Option<&str> {
    let condition = pi
        .status
        .iter()
        .flat_map(|s| &s.conditions)
        .any(|c| c.type_ == CONDITION_INSTALLED && c.status == "True");
    let phase = matches!(
        pi.phase(),
        Some(
            PackagePhase::Ready
                | PackagePhase::Degraded
                | PackagePhase::Upgrading
                | PackagePhase::Removing
        )
    );
    (condition || phase).then_some(pi.spec.version.as_str())
}

/// The `Installed` condition for `version` installed by `activation`.
pub fn installed_condition(version: &str, activation: &str) -> Condition {
    condition(
        CONDITION_INSTALLED,
        true,
        "Installed",
        &format!("{version} installed by {activation}"),
    )
}

fn condition(type_: &str, status: bool, reason: &str, message: &str) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: if status { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        last_transition_time: Time(k8s_openapi::jiff::Timestamp::now()),
        observed_generation: None,
    }
}

/// Sets a condition, keeping its transition time when its status does not change.
fn set_condition(conditions: &mut Vec<Condition>, new: Condition) {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(old) => {
            let time = if old.status == new.status {
                old.last_transition_time.clone()
            } else {
                new.last_transition_time.clone()
            };
            *old = Condition {
                last_transition_time: time,
                ..new
            };
        }
        None => conditions.push(new),
    }
}

/// How a package's group ended.
#[derive(Debug, Clone, Copy)]
pub struct GroupResult {
    /// Applied and healthy.
    pub ok: bool,
    /// Objects (or migration actions) that failed.
    pub failed: u32,
    /// Objects that became healthy.
    pub healthy: u32,
}

/// The PackageInstance records of one deploy.
pub struct PackageRecords {
    client: Client,
    cluster: String,
    activation: String,
    /// Every record of the Kix cluster, by package, as last written.
    records: BTreeMap<String, PackageInstance>,
    /// Packages whose record this deploy created.
    created: BTreeSet<String>,
    /// Packages the deploy reached (group started).
    reached: BTreeSet<String>,
    /// Packages the deploy moved to Installing or Upgrading.
    started: BTreeSet<String>,
    /// Packages the build dropped, set Removing before prune.
    removing: Vec<String>,
}

impl PackageRecords {
    /// Reads the Kix cluster's records and creates a Pending record for each
    /// package of the build that has none.
    pub async fn start(
        client: &Client,
        plan: &Plan,
        build: &Build,
        activation: &str,
    ) -> Result<PackageRecords> {
        let records = records::package_instances(client, &plan.cluster)
            .await?
            .into_iter()
            .map(|pi| (pi.spec.package.clone(), pi))
            .collect();
        let mut this = PackageRecords {
            client: client.clone(),
            cluster: plan.cluster.clone(),
            activation: activation.to_owned(),
            records,
            created: BTreeSet::new(),
            reached: BTreeSet::new(),
            started: BTreeSet::new(),
            removing: vec![],
        };
        // A build of a thousand packages: their records are made side by
        // side, not one round trip after another.
        let missing: Vec<_> = build
            .packages
            .iter()
            .filter(|package| !this.records.contains_key(&package.name))
            .collect();
        let creating: Vec<_> = missing
            .iter()
            .map(|package| create_record(client, plan, &package.name, &package.version, activation))
            .collect();
        let made: Vec<Result<PackageInstance>> = stream::iter(creating)
            .buffer_unordered(RECORDS_IN_FLIGHT)
            .collect()
            .await;
        for pi in made {
            let pi = pi?;
            this.created.insert(pi.spec.package.clone());
            this.records.insert(pi.spec.package.clone(), pi);
        }
        Ok(this)
    }

    /// The deploy reaches `group`: a package with something to do becomes
    /// Installing or Upgrading.
    pub async fn begin(&mut self, plan: &Plan, group: &Group) -> Result<()> {
        let Some(package) = group.package() else {
            return Ok(());
        };
        let Some(pi) = self.records.get(package).cloned() else {
            return Ok(());
        };
        self.reached.insert(package.to_owned());
        let version = version_in(plan, package);
        let installed = installed_version(&pi).map(str::to_owned);
        let writes = plan
            .packages
            .iter()
            .filter(|p| p.name == package)
            .flat_map(|p| &p.objects)
            .any(|o| o.action != Action::Unchanged);
        let migrations = plan.migrations.iter().any(|m| m.package == package);
        let (phase, message) = match &installed {
            None => (
                PackagePhase::Installing,
                format!("installing {version} ({})", self.activation),
            ),
            Some(old) if *old != version => {
                let verb = match kix_manifest::compare_versions(&version, old) {
                    std::cmp::Ordering::Less => "downgrading",
                    _ => "upgrading",
                };
                (
                    PackagePhase::Upgrading,
                    format!("{verb} {old} -> {version} ({})", self.activation),
                )
            }
            Some(_) if writes || migrations => (
                PackagePhase::Upgrading,
                format!("applying changes to {version} ({})", self.activation),
            ),
            Some(_) => return Ok(()),
        };
        let mut status = pi.status.clone().unwrap_or_default();
        status.phase = Some(phase);
        status.message = Some(message.clone());
        status.resources = Some(count(plan, package));
        set_condition(
            &mut status.conditions,
            condition(CONDITION_READY, false, phase.as_str(), &message),
        );
        self.started.insert(package.to_owned());
        self.write(pi, None, status).await
    }

    /// The package's group ended: Ready, Degraded or Failed; Ready and
    /// Degraded record the build's version as installed by this activation.
    /// `messages` are the deploy's messages about the group.
    pub async fn finish(
        &mut self,
        plan: &Plan,
        group: &Group,
        result: GroupResult,
        messages: &[String],
    ) -> Result<()> {
        let Some(package) = group.package() else {
            return Ok(());
        };
        let Some(pi) = self.records.get(package).cloned() else {
            return Ok(());
        };
        let version = version_in(plan, package);
        let resources = count(plan, package);
        let unchanged = plan
            .packages
            .iter()
            .filter(|p| p.name == package)
            .flat_map(|p| &p.objects)
            .filter(|o| o.action == Action::Unchanged)
            .count() as u32;
        let phase = if result.ok {
            PackagePhase::Ready
        } else if result.failed > 0 {
            PackagePhase::Failed
        } else {
            PackagePhase::Degraded
        };
        let mut spec = pi.spec.clone();
        if phase != PackagePhase::Failed && self.started.contains(package) {
            spec.version = version.clone();
            spec.activation = self.activation.clone();
        }
        let mut status = pi.status.clone().unwrap_or_default();
        status.phase = Some(phase);
        status.resources = Some(resources);
        let detail = truncate(&messages.join("; "), 1000);
        match phase {
            PackagePhase::Ready => {
                status.ready = Some(resources);
                status.health = Some("Ready".to_owned());
                status.message = Some(format!("{} ready ({})", spec.version, spec.activation));
            }
            _ => {
                status.ready = Some((unchanged + result.healthy).min(resources));
                status.health = Some(if detail.is_empty() {
                    phase.as_str().to_owned()
                } else {
                    detail.clone()
                });
                status.message = Some(match (phase, installed_version(&pi)) {
                    (PackagePhase::Failed, Some(old)) if old != version => {
                        format!(
                            "upgrade {old} -> {version} failed; {old} is still the installed version: {detail}"
                        )
                    }
                    (PackagePhase::Failed, _) => format!("{version} failed: {detail}"),
                    _ => format!("{version} applied, not healthy: {detail}"),
                });
            }
        }
        let message = status.message.clone().unwrap_or_default();
        set_condition(
            &mut status.conditions,
            condition(
                CONDITION_READY,
                phase == PackagePhase::Ready,
                phase.as_str(),
                &message,
            ),
        );
        if phase != PackagePhase::Failed {
            set_condition(
                &mut status.conditions,
                installed_condition(&spec.version, &spec.activation),
            );
        }
        let spec = (spec != pi.spec).then_some(spec);
        self.write(pi, spec, status).await
    }

    /// At the end of the deploy: a record this deploy created for a package it
    /// never reached says why it stays Pending.
    pub async fn settle(&mut self, message: &str) -> Result<()> {
        let unreached: Vec<String> = self.created.difference(&self.reached).cloned().collect();
        for package in unreached {
            let Some(pi) = self.records.get(&package).cloned() else {
                continue;
            };
            let mut status = pi.status.clone().unwrap_or_default();
            status.message = Some(format!("not installed: {message}"));
            self.write(pi, None, status).await?;
        }
        Ok(())
    }

    /// Before prune: the records of packages the build no longer has become
    /// Removing. Returns their packages.
    pub async fn removing(&mut self, build: &Build) -> Result<Vec<String>> {
        let dropped: Vec<String> = self
            .records
            .keys()
            .filter(|p| build.package(p).is_none())
            .cloned()
            .collect();
        for package in &dropped {
            let Some(pi) = self.records.get(package).cloned() else {
                continue;
            };
            let mut status = pi.status.clone().unwrap_or_default();
            let message = format!(
                "{} no longer has the package: pruning its objects",
                self.activation
            );
            status.phase = Some(PackagePhase::Removing);
            status.message = Some(message.clone());
            set_condition(
                &mut status.conditions,
                condition(CONDITION_READY, false, "Removing", &message),
            );
            self.write(pi, None, status).await?;
        }
        self.removing = dropped.clone();
        Ok(dropped)
    }

    /// After prune: deletes the Removing records, or, when deletions failed,
    /// keeps them with the reason. `stopped`: the packages whose
    /// `pre-delete` hook failed (nothing of them pruned), with the failure.
    pub async fn removed(
        &mut self,
        failed: &[FailedDeletion],
        stopped: &BTreeMap<String, String>,
    ) -> Result<()> {
        let api: Api<PackageInstance> = Api::all(self.client.clone());
        for package in std::mem::take(&mut self.removing) {
            let Some(pi) = self.records.get(&package).cloned() else {
                continue;
            };
            if let Some(failure) = stopped.get(&package) {
                let mut status = pi.status.clone().unwrap_or_default();
                status.message = Some(truncate(failure, 1000));
                self.write(pi, None, status).await?;
            } else if failed.is_empty() {
                let name = pi.name_any();
                match api.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(records_error(&name, e)),
                }
                info!(cluster = %self.cluster, "package {package} removed: record {name} deleted");
                self.records.remove(&package);
            } else {
                let mut status = pi.status.clone().unwrap_or_default();
                let reasons: Vec<String> = failed
                    .iter()
                    .map(|f| format!("{}: {}", f.object, f.reason))
                    .collect();
                status.message = Some(truncate(
                    &format!("could not prune every object: {}", reasons.join("; ")),
                    1000,
                ));
                self.write(pi, None, status).await?;
            }
        }
        Ok(())
    }

    /// Writes spec (when given) and status, unless nothing changes.
    async fn write(
        &mut self,
        pi: PackageInstance,
        spec: Option<PackageInstanceSpec>,
        status: PackageInstanceStatus,
    ) -> Result<()> {
        let current = write_record(&self.client, pi, spec, status).await?;
        self.records.insert(current.spec.package.clone(), current);
        Ok(())
    }
}

/// Package records created at once when a deploy starts.
const RECORDS_IN_FLIGHT: usize = 16;

/// A package's record, made Pending for `activation` (one a deploy that
/// died left behind is taken over).
async fn create_record(
    client: &Client,
    plan: &Plan,
    package: &str,
    version: &str,
    activation: &str,
) -> Result<PackageInstance> {
    let mut pi = PackageInstance::new_record(PackageInstanceSpec {
        cluster: plan.cluster.clone(),
        package: package.to_owned(),
        version: version.to_owned(),
        activation: activation.to_owned(),
    });
    let api: Api<PackageInstance> = Api::all(client.clone());
    let created = match api.create(&PostParams::default(), &pi).await {
        Ok(created) => created,
        Err(kube::Error::Api(s)) if s.code == 409 => api
            .get(&pi.name_any())
            .await
            .map_err(|e| records_error(&pi.name_any(), e))?,
        Err(e) => return Err(records_error(&pi.name_any(), e)),
    };
    pi.metadata = created.metadata;
    pi.status = created.status;
    let status = PackageInstanceStatus {
        phase: Some(PackagePhase::Pending),
        message: Some(format!("waiting for {activation} to reach the package")),
        resources: Some(count(plan, package)),
        ..pi.status.clone().unwrap_or_default()
    };
    write_record(client, pi, None, status).await
}

/// Writes a package record's spec (when given) and status (when changed);
/// the record as the apiserver has it after.
async fn write_record(
    client: &Client,
    pi: PackageInstance,
    spec: Option<PackageInstanceSpec>,
    status: PackageInstanceStatus,
) -> Result<PackageInstance> {
    let name = pi.name_any();
    let api: Api<PackageInstance> = Api::all(client.clone());
    let mut current = pi;
    if let Some(spec) = spec {
        current = api
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({ "spec": spec })),
            )
            .await
            .map_err(|e| records_error(&name, e))?;
    }
    if current.status.as_ref() != Some(&status) {
        let mut value = serde_json::to_value(&status).unwrap_or_else(|_| json!({}));
        if let Some(map) = value.as_object_mut() {
            for field in [
                "phase",
                "message",
                "resources",
                "ready",
                "health",
                "conditions",
            ] {
                map.entry(field).or_insert(Value::Null);
            }
        }
        current = api
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({ "status": value })),
            )
            .await
            .map_err(|e| records_error(&name, e))?;
    }
    Ok(current)
}

fn records_error(name: &str, e: kube::Error) -> EngineError {
    EngineError::Records(format!(
        "PackageInstance {name}: {}",
        crate::error::api_message(&e)
    ))
}

/// The build's version of `package`.
fn version_in(plan: &Plan, package: &str) -> String {
    plan.packages
        .iter()
        .find(|p| p.name == package)
        .map(|p| p.version.clone())
        .unwrap_or_default()
}

/// The number of objects of `package` in the build.
fn count(plan: &Plan, package: &str) -> u32 {
    plan.desired.iter().filter(|d| d.package == package).count() as u32
}

fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

//! `/clusters`: every Kix cluster the viewer may read, one row each: the
//! phase of its current activation, its build and package versions, age
//! and health as its records say.

use std::collections::BTreeMap;

use axum::http::StatusCode;
use axum::response::Response;
use kix_api::{Activation, CONDITION_READY, PackageInstance, Phase};
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use maud::{Markup, html};

use super::layout::{self, age, cluster_href, phase, record_link};
use crate::server::Shared;

/// The condition the operator sets while a prune waits for consent to
/// exceed the deletion budget (kix-operator's `CONDITION_DELETION_BUDGET`).
pub const CONDITION_DELETION_BUDGET: &str = "DeletionBudgetExceeded";

/// A Kix cluster as its records tell: the current activation (the newest
/// not Superseded or Failed; else the newest), and the newest record.
pub struct Summary<'a> {
    pub name: String,
    pub head: &'a Activation,
    pub latest: &'a Activation,
}

impl<'a> Summary<'a> {
    /// Every Kix cluster of `records`, by name.
    pub fn all(records: &'a [Activation]) -> Vec<Summary<'a>> {
        let mut names: Vec<&str> = records.iter().map(Activation::cluster_name).collect();
        names.sort_unstable();
        names.dedup();
        names
            .into_iter()
            .filter_map(|name| Summary::of(records, name))
            .collect()
    }

    pub fn of(records: &'a [Activation], name: &str) -> Option<Summary<'a>> {
        let latest = *kix_engine::records::of_cluster(records, name).last()?;
        let head = kix_engine::records::current(records, name).unwrap_or(latest);
        Some(Summary {
            name: name.to_string(),
            head,
            latest,
        })
    }
}

/// What a record's status says of health: its Ready condition, drift,
/// held deletions, objects being deleted or not deleted.
pub fn health(record: &Activation) -> Markup {
    let Some(status) = &record.status else {
        return html! { span.note { "not acted on yet" } };
    };
    let condition = |type_: &str| status.conditions.iter().find(|c| c.type_ == type_);
    html! {
        @if let Some(ready) = condition(CONDITION_READY) {
            span class=(if ready.status == "True" { "Ready" } else { "Degraded" }) {
                "Ready=" (ready.status)
            }
            @if !ready.reason.is_empty() { " (" (ready.reason) ")" }
        }
        @if let Some(drift) = &status.drift {
            @if drift.detected > 0 { "; drift " (drift.detected) " found, " (drift.corrected) " corrected" }
        }
        @if condition(CONDITION_DELETION_BUDGET).is_some_and(|c| c.status == "True") {
            "; " span.Degraded { "deletions held by the deletion budget" }
        }
        @if status.deleting_count() > 0 {
            "; " span.Deleting { (status.deleting_count()) " deleting" }
        }
        @if status.failed_deletion_count() > 0 {
            "; " span.Failed { (status.failed_deletion_count()) " not deleted" }
        }
    }
}

/// Package versions by Kix cluster, from the PackageInstance records; none
/// when they cannot be read.
async fn versions(shared: &Shared) -> BTreeMap<String, Vec<(String, String)>> {
    let api: Api<PackageInstance> = Api::all(shared.client.clone());
    let mut by_cluster: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    match api.list(&ListParams::default()).await {
        Ok(list) => {
            for p in list.items {
                by_cluster
                    .entry(p.spec.cluster.clone())
                    .or_default()
                    .push((p.spec.package.clone(), p.spec.version.clone()));
            }
        }
        Err(err) => tracing::debug!(error = %err, "listing PackageInstances"),
    }
    by_cluster
}

pub async fn page(shared: &Shared, records: &[Activation]) -> Response {
    let summaries = Summary::all(records);
    let versions = versions(shared).await;
    let body = html! {
        @if let Some(error) = shared.records.error() {
            p.error { "The watch on Activation records fails: " (error) }
        }
        @if summaries.is_empty() {
            p { "No Kix cluster has an Activation record you can read." }
        } @else {
            table #clusters {
                thead { tr { th { "Kix cluster" } th { "Phase" } th { "Activation" } th { "Build" }
                    th { "Versions" } th { "Age" } th { "Health" } } }
                tbody {
                    @for s in &summaries { (row(s, versions.get(&s.name))) }
                }
            }
        }
    };
    layout::respond(StatusCode::OK, layout::page("Kix clusters", None, body))
}

fn row(s: &Summary<'_>, versions: Option<&Vec<(String, String)>>) -> Markup {
    let head = s.head;
    let source = &head.spec.source;
    html! {
        tr data-cluster=(s.name) {
            td { a href=(cluster_href(&s.name)) { (s.name) } }
            td.phase-cell { (phase(head.phase())) }
            td { (record_link(&s.name, &head.name_any())) }
            td { code { (source.path) }
                @if let Some(rev) = &source.revision { br; span.note { "revision " (rev) } } }
            td { @for (package, version) in versions.into_iter().flatten() { (package) " " (version) br; } }
            td { (age(kix_engine::records::recorded_at(head))) }
            td {
                (health(head))
                @if s.latest.name_any() != head.name_any() {
                    br; "newest: " (record_link(&s.name, &s.latest.name_any())) " " (phase(s.latest.phase()))
                }
                @if head.phase() == Some(Phase::Superseded) { br; span.note { "no applied activation" } }
            }
        }
    }
}

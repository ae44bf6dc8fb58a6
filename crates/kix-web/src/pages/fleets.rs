//! `/fleets`: each fleet's rollouts, newest first, with their members'
//! records by wave. A fleet is recorded only as labels on its members'
//! records; the waves come from the fleet build the records name, when it
//! is a store path present here.

use std::collections::BTreeMap;

use axum::http::StatusCode;
use axum::response::Response;
use kix_api::Activation;
use kix_fleet::records::{ANNOTATION_FLEET_PATH, LABEL_MEMBER, rollout_of};
use kix_fleet::spec::{FleetFile, MemberName};
use kube::ResourceExt;
use maud::{Markup, html};

use super::layout::{self, age, phase, record_link};

/// The records of one rollout of one fleet.
struct Rollout<'a> {
    fleet: String,
    id: String,
    records: Vec<&'a Activation>,
}

fn rollouts(records: &[Activation]) -> Vec<Rollout<'_>> {
    let mut by_id: BTreeMap<(String, String), Vec<&Activation>> = BTreeMap::new();
    for r in records {
        if let Some(rollout) = rollout_of(r) {
            by_id
                .entry((rollout.fleet, rollout.rollout.0))
                .or_default()
                .push(r);
        }
    }
    let mut rollouts: Vec<Rollout<'_>> = by_id
        .into_iter()
        .map(|((fleet, id), records)| Rollout { fleet, id, records })
        .collect();
    let newest = |r: &Rollout<'_>| r.records.iter().map(|a| a.spec.receipt.time).max();
    rollouts.sort_by(|a, b| a.fleet.cmp(&b.fleet).then(newest(b).cmp(&newest(a))));
    rollouts
}

/// The waves of the fleet build a record names: only a store path is read.
fn fleet_file(record: &Activation) -> Option<FleetFile> {
    let path = record.annotations().get(ANNOTATION_FLEET_PATH)?;
    let store_path = kix_manifest::StorePath::parse(path).ok()?;
    FleetFile::read(store_path.as_path()).ok()
}

fn member_of(record: &Activation) -> String {
    record
        .labels()
        .get(LABEL_MEMBER)
        .cloned()
        .unwrap_or_default()
}

pub fn page(records: &[Activation]) -> Response {
    let rollouts = rollouts(records);
    let body = html! {
        @if rollouts.is_empty() {
            p { "No Activation record you can read was deployed by a fleet." }
        }
        @for r in &rollouts { (rollout(r)) }
    };
    layout::respond(StatusCode::OK, layout::page("Fleets", None, body))
}

fn rollout(r: &Rollout<'_>) -> Markup {
    let file = r.records.first().and_then(|a| fleet_file(a));
    let wave = |member: &str| {
        file.as_ref()
            .and_then(|f| f.spec.members.get(&MemberName(member.to_string())))
            .map(|m| m.wave)
    };
    let mut members: Vec<(Option<usize>, String, &Activation)> = r
        .records
        .iter()
        .map(|a| (wave(&member_of(a)), member_of(a), *a))
        .collect();
    members.sort_by(|a, b| (a.0, &a.1, a.2.sequence()).cmp(&(b.0, &b.1, b.2.sequence())));
    html! {
        section.fleet data-fleet=(r.fleet) {
            h2 { "Fleet " (r.fleet) " " span.note { "rollout " code { (r.id) } } }
            @if let Some(f) = &file {
                p.note { (f.spec.waves.len()) " waves, at most " (f.spec.max_parallel)
                    " at once, pause " (f.spec.pause) }
            }
            table {
                thead { tr { th { "Wave" } th { "Member" } th { "Activation" } th { "Phase" } th { "Recorded" } } }
                tbody {
                    @for (wave, member, a) in &members {
                        tr {
                            td { @if let Some(w) = wave { (w + 1) } @else { "?" } }
                            td { (member) }
                            td { (record_link(a.cluster_name(), &a.name_any())) }
                            td { (phase(a.phase())) }
                            td { (age(a.spec.receipt.time)) " ago" }
                        }
                    }
                }
            }
        }
    }
}

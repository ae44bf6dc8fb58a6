//! `/clusters/<cluster>`: one Kix cluster, its current activation and its
//! history: every Activation with its receipt (who confirmed which plan
//! digest, the counts, migrations and deletions accepted, deletions held).

use axum::http::StatusCode;
use axum::response::Response;
use kix_api::{Accepted, Activation};
use kube::ResourceExt;
use maud::{Markup, html};

use super::clusters::{CONDITION_DELETION_BUDGET, Summary, health};
use super::deletions;
use super::layout::{self, age, digest, phase, record_href, record_link};

pub fn page(name: &str, records: &[Activation]) -> Response {
    let Some(summary) = Summary::of(records, name) else {
        return layout::not_found(&format!(
            "Kix cluster {name} has no Activation record you can read"
        ));
    };
    let mine = kix_engine::records::of_cluster(records, name);
    let applied = kix_engine::records::applied(records, name);
    let stuck = deletions::rows(mine.iter().copied());
    let head = summary.head;
    let body = html! {
        dl #summary {
            dt { "Current activation" } dd { (record_link(name, &head.name_any())) " " (phase(head.phase())) }
            dt { "Build" } dd { code { (head.spec.source.path) } }
            @if let Some(flake) = &head.spec.source.flake { dt { "Flake" } dd { code { (flake) } } }
            @if let Some(rev) = &head.spec.source.revision { dt { "Revision" } dd { code { (rev) } } }
            dt { "Health" } dd { (health(head)) }
            @if let Some(applied) = applied {
                dt { "Objects" } dd { a href=(record_href(name, &applied.name_any())) {
                    "objects of " (applied.name_any()) " with their health" } }
            }
        }
        @if !stuck.is_empty() {
            h2 { "Stuck deletions" }
            (deletions::table(&stuck))
        }
        h2 { "History" }
        table #history {
            thead { tr { th { "Activation" } th { "Phase" } th { "Recorded" } th { "By" }
                th { "Plan digest" } th { "Plan" } th { "Accepted" } th { "Message" } } }
            tbody { @for r in mine.iter().rev() { (history_row(name, r)) } }
        }
    };
    layout::respond(
        StatusCode::OK,
        layout::page(&format!("Kix cluster {name}"), Some(name), body),
    )
}

fn history_row(cluster: &str, r: &Activation) -> Markup {
    let receipt = &r.spec.receipt;
    let c = &receipt.counts;
    let held = r.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == CONDITION_DELETION_BUDGET && c.status == "True")
    });
    html! {
        tr data-record=(r.name_any()) {
            td { (record_link(cluster, &r.name_any())) }
            td { (phase(r.phase())) }
            td { (receipt.time.format("%Y-%m-%d %H:%M:%S")) br; span.note { (age(receipt.time)) " ago" } }
            td { (receipt.user) "@" (receipt.host) br; span.note { (r.spec.engine) ", kix " (receipt.kix_version) } }
            td { (digest(&receipt.plan_digest)) }
            td { "+" (c.create) " ~" (c.update) " -" (c.delete)
                @if c.replace > 0 { " replace " (c.replace) } @if c.adopt > 0 { " adopt " (c.adopt) } }
            td {
                (accepted(&receipt.accepted))
                @if let Some(n) = receipt.accepted_deletions { br; (n) " deletions over the budget" }
                @if held { br; span.Degraded { "deletions held by the deletion budget" } }
                @if let Some(from) = &receipt.rollback_from { br; "rollback from " (record_link(cluster, from)) }
            }
            td { @if let Some(m) = r.status.as_ref().and_then(|s| s.message.as_deref()) { (m) } }
        }
    }
}

/// The destructive actions a receipt accepted, as counts.
pub fn accepted(a: &Accepted) -> Markup {
    if a.is_empty() {
        return html! { span.note { "nothing destructive" } };
    }
    let parts = [
        (a.migrations, "migrations"),
        (a.deletions, "deletions"),
        (a.replaces, "replaces"),
        (a.adoptions, "adoptions"),
        (a.crd_versions, "CRD versions"),
    ];
    html! {
        @for (n, what) in parts { @if n > 0 { (n) " " (what) " " } }
    }
}

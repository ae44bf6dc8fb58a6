//! `/clusters/<cluster>/activations/<record>`: one Activation: its source,
//! receipt (who confirmed which plan digest, what destructive actions they
//! accepted), its status, and, for the Kix cluster's applied activation,
//! its objects with their health and the rule that decided it, a page at a
//! time (`?page=`, `?health=`).
//!
//! The page is streamed: the record's part is sent at once, the objects
//! when their reading ([`crate::objects`]) is done, so the first byte never
//! waits for a large activation's objects to be judged.

use std::convert::Infallible;

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;
use kix_api::{Activation, ActivationStatus, ObjectRef, Receipt, Source};
use kix_engine::status::{HealthState, Status};
use kube::ResourceExt;
use maud::{Markup, PreEscaped, html};
use serde::Deserialize;

use super::cluster::accepted;
use super::layout::{self, age, cluster_href, digest, object, phase, record_href, record_link};
use crate::objects::{self, PAGE_SIZE};
use crate::server::Shared;

/// Which objects to show.
#[derive(Debug, Default, Deserialize)]
pub struct ObjectsQuery {
    /// Only objects of this health (`Ready`, `Degraded`, …).
    pub health: Option<String>,
    /// The page, from 1.
    pub page: Option<usize>,
}

const HEALTHS: [HealthState; 6] = [
    HealthState::Ready,
    HealthState::Progressing,
    HealthState::Degraded,
    HealthState::Missing,
    HealthState::Drifted,
    HealthState::Deleting,
];

/// Where the objects go in the streamed page.
const OBJECTS_MARK: &str = "<!--kix:objects-->";

pub fn page(
    shared: &Shared,
    cluster: &str,
    name: &str,
    records: &[Activation],
    query: ObjectsQuery,
) -> Response {
    let Some(record) = records
        .iter()
        .find(|r| r.name_any() == name && r.cluster_name() == cluster)
    else {
        return layout::not_found(&format!(
            "Kix cluster {cluster} has no Activation {name} you can read"
        ));
    };
    let applied = kix_engine::records::applied(records, cluster);
    let is_applied = applied.is_some_and(|a| a.name_any() == name);
    let body = html! {
        (summary(cluster, record, is_applied))
        (source(&record.spec.source))
        (receipt(cluster, &record.spec.receipt))
        @if let Some(status) = &record.status { (status_part(status)) }
        h2 #objects { "Objects" }
        @if is_applied { (PreEscaped(OBJECTS_MARK)) } @else {
            p.note { "Objects and their live health are shown for the Kix cluster's applied activation"
                @if let Some(a) = applied { ": " (record_link(cluster, &a.name_any())) } "." }
        }
    };
    let html = layout::page(&format!("Activation {name}"), Some(cluster), body).into_string();
    let Some((head, tail)) = html.split_once(OBJECTS_MARK) else {
        return layout::respond(StatusCode::OK, PreEscaped(html));
    };
    let (head, tail) = (head.to_string(), tail.to_string());
    let reading = match applied {
        Some(a) => shared.statuses.of(cluster, a),
        None => return layout::respond(StatusCode::OK, PreEscaped(html)),
    };
    let link = record_href(cluster, name);
    let rest = async move {
        let objects = match reading.await {
            Ok(status) => objects_part(&status, &link, &query),
            Err(why) => html! { p.error { "The objects could not be read: " (why) } },
        };
        Ok::<_, Infallible>(objects.into_string() + &tail)
    };
    let stream = futures::StreamExt::chain(
        futures::stream::once(std::future::ready(Ok::<_, Infallible>(head))),
        futures::stream::once(rest),
    );
    let mut response = Response::new(Body::from_stream(stream));
    layout::set_html_headers(response.headers_mut());
    response
}

fn summary(cluster: &str, record: &Activation, is_applied: bool) -> Markup {
    let status = record.status.as_ref();
    html! {
        dl #record {
            dt { "Kix cluster" } dd { a href=(cluster_href(cluster)) { (cluster) } }
            dt { "Phase" } dd { (phase(record.phase()))
                @if is_applied { " " span.note { "(the applied activation)" } } }
            @if let Some(m) = status.and_then(|s| s.message.as_deref()) { dt { "Message" } dd { (m) } }
            dt { "Engine" } dd { (record.spec.engine) }
            @if let Some(sa) = &record.spec.service_account {
                dt { "Acts as" } dd { "ServiceAccount " (sa.namespace) "/" (sa.name) }
            }
        }
    }
}

fn source(s: &Source) -> Markup {
    html! {
        h2 { "Build" }
        dl #source {
            dt { "Store path" } dd { code { (s.path) } }
            @if let Some(v) = &s.flake { dt { "Flake" } dd { code { (v) } } }
            @if let Some(v) = &s.revision { dt { "Revision" } dd { code { (v) } } }
            @if let Some(v) = &s.cache { dt { "Cache" } dd { code { (v) } } }
            @if let Some(v) = &s.signed_by { dt { "Signed by" } dd { code { (v) } } }
        }
    }
}

fn receipt(cluster: &str, r: &Receipt) -> Markup {
    let c = &r.counts;
    let migrations: Vec<&String> = r
        .accepted
        .actions
        .iter()
        .filter(|a| a.starts_with("migration"))
        .collect();
    html! {
        h2 { "Receipt" }
        dl #receipt {
            dt { "Confirmed by" } dd { (r.user) "@" (r.host) ", kix " (r.kix_version) }
            dt { "Recorded" } dd { (r.time.to_rfc3339()) " (" (age(r.time)) " ago)" }
            dt { "Plan digest" } dd { code.plan-digest { (r.plan_digest) }
                @if r.saved_plan { " " span.note { "(a saved plan)" } } }
            dt { "Plan" } dd { (c.create) " create, " (c.update) " update, " (c.unchanged) " unchanged, "
                (c.delete) " delete, " (c.replace) " replace, " (c.adopt) " adopt" }
            dt { "Accepted" } dd { (accepted(&r.accepted))
                @if !r.accepted.digest.is_empty() { " " (digest(&r.accepted.digest)) } }
            @if r.accepted.migrations > 0 {
                dt { "Migrations" } dd { (r.accepted.migrations) " accepted"
                    @for m in &migrations { br; (m) } }
            }
            @if let Some(n) = r.accepted_deletions { dt { "Deletion budget" } dd { (n) " deletions accepted over it" } }
            @if let Some(from) = &r.rollback_from { dt { "Rollback from" } dd { (record_link(cluster, from)) } }
        }
        @if r.accepted.is_listed() && !r.accepted.actions.is_empty() {
            h3 { "Destructive actions accepted" }
            ul.accepted { @for a in &r.accepted.actions { li { (a) } } }
        }
    }
}

fn status_part(s: &ActivationStatus) -> Markup {
    html! {
        h2 { "Status" }
        @if !s.conditions.is_empty() {
            table.conditions {
                thead { tr { th { "Condition" } th { "Status" } th { "Reason" } th { "Message" } } }
                tbody { @for c in &s.conditions {
                    tr { td { (c.type_) } td { (c.status) } td { (c.reason) } td { (c.message) } }
                } }
            }
        }
        dl #progress {
            @if let Some(p) = &s.progress {
                dt { "Progress" } dd { (p.applied) "/" (p.total) " applied, " (p.healthy) " healthy, "
                    (p.pruned) " pruned, " (p.failed) " failed" }
            }
            @if let Some(n) = s.objects { dt { "Objects in the build" } dd { (n) } }
            @if let Some(d) = &s.drift { dt { "Drift" } dd { (d.detected) " found, " (d.corrected) " corrected" } }
        }
        (listed("Being pruned", s.pending_prune.iter().map(|o| (o, html! {})), s.pending_prune_count()))
        (listed("Deleting (held by finalizers)", s.deleting.iter().map(|d| (&d.object,
            html! { (d.finalizers.join(", ")) @if let Some(t) = d.since { " for " (age(t)) } })), s.deleting_count()))
        (listed("Not deleted", s.failed_deletions.iter().map(|f| (&f.object, html! { (f.reason) })),
            s.failed_deletion_count()))
    }
}

/// A list of objects the record names, with the total it counts.
fn listed<'a>(
    title: &str,
    items: impl Iterator<Item = (&'a ObjectRef, Markup)>,
    total: u32,
) -> Markup {
    let items: Vec<_> = items.collect();
    html! {
        @if total > 0 {
            h3 { (title) " (" (total) ")" }
            ul { @for (o, detail) in &items { li { (object(o)) " " span.note { (detail) } } } }
            @if (items.len() as u32) < total { p.note { (total - items.len() as u32) " more, not listed by the record" } }
        }
    }
}

fn objects_part(status: &Status, link: &str, query: &ObjectsQuery) -> Markup {
    let only = query
        .health
        .as_deref()
        .and_then(|h| HEALTHS.into_iter().find(|s| s.as_str() == h));
    let page = query.page.unwrap_or(1).max(1);
    let (total, rows) = objects::page(status, only, page);
    let pages = total.div_ceil(PAGE_SIZE).max(1);
    html! {
        @if let kix_engine::status::BuildState::Unreadable { reason } = &status.build {
            p.error { "The build cannot be read (" (reason) "): live objects only; Missing and Drifted are unknown." }
        }
        (filters(status, link, only))
        (pager(link, only, page, pages))
        table #objects-table {
            thead { tr { th { "Package" } th { "Health" } th { "Object" } th { "Reason" } th { "Rule" } } }
            tbody { @for row in &rows {
                tr { td { (row.package) } td { span class=(row.object.health.as_str()) { (row.object.health.as_str()) } }
                    td { (object(&row.object.object)) @if row.object.extra { " " span.note { "(not in the build)" } } }
                    td { @if let Some(r) = &row.object.reason { (r) } }
                    td { @if let Some(r) = &row.object.rule { code { (r) } } @else { span.note { "kstatus" } } } }
            } }
        }
        (pager(link, only, page, pages))
    }
}

fn filters(status: &Status, link: &str, only: Option<HealthState>) -> Markup {
    let c = &status.counts;
    let counts = [
        c.ready,
        c.progressing,
        c.degraded,
        c.missing,
        c.drifted,
        c.deleting,
    ];
    html! {
        p.filters {
            a href=(link) { "All (" (c.total()) ")" }
            @for (state, n) in HEALTHS.into_iter().zip(counts) {
                @if n > 0 || only == Some(state) {
                    " · " a href={ (link) "?health=" (state.as_str()) } class=(state.as_str()) {
                        (state.as_str()) " (" (n) ")" }
                }
            }
        }
    }
}

fn pager(link: &str, only: Option<HealthState>, page: usize, pages: usize) -> Markup {
    let href = |p: usize| match only {
        Some(h) => format!("{link}?health={}&page={p}", h.as_str()),
        None => format!("{link}?page={p}"),
    };
    html! {
        @if pages > 1 {
            nav.pages {
                @if page > 1 { a rel="prev" href=(href(page - 1)) { "previous" } }
                "page " (page) " of " (pages)
                @if page < pages { " " a rel="next" href=(href(page + 1)) { "next" } }
            }
        }
    }
}

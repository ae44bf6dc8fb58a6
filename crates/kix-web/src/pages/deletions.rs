//! `/deletions`: objects whose deletion was accepted but which still exist
//! (held by finalizers), and those that could not be deleted, as every
//! record the viewer may read reports them.

use axum::http::StatusCode;
use axum::response::Response;
use kix_api::{Activation, ObjectRef};
use kube::ResourceExt;
use maud::{Markup, html};

use super::layout::{self, age, object, record_link};

/// One stuck object of one record.
pub struct Row<'a> {
    pub cluster: &'a str,
    pub record: String,
    pub object: &'a ObjectRef,
    /// Finalizers and since when, or why it was not deleted.
    pub detail: Markup,
}

/// The stuck objects of `records` (those a record lists; a record counts
/// the rest, see its page).
pub fn rows<'a>(records: impl Iterator<Item = &'a Activation>) -> Vec<Row<'a>> {
    let mut rows = vec![];
    for r in records {
        let Some(status) = &r.status else { continue };
        for d in &status.deleting {
            rows.push(Row {
                cluster: r.cluster_name(),
                record: r.name_any(),
                object: &d.object,
                detail: html! {
                    "deleting, held by " (d.finalizers.join(", "))
                    @if let Some(since) = d.since { " for " (age(since)) }
                },
            });
        }
        for f in &status.failed_deletions {
            rows.push(Row {
                cluster: r.cluster_name(),
                record: r.name_any(),
                object: &f.object,
                detail: html! { span.Failed { "not deleted: " } (f.reason) },
            });
        }
    }
    rows
}

pub fn table(rows: &[Row<'_>]) -> Markup {
    html! {
        table.deletions {
            thead { tr { th { "Kix cluster" } th { "Activation" } th { "Object" } th { "State" } } }
            tbody {
                @for row in rows {
                    tr {
                        td { (row.cluster) }
                        td { (record_link(row.cluster, &row.record)) }
                        td { (object(row.object)) }
                        td { (row.detail) }
                    }
                }
            }
        }
    }
}

pub fn page(records: &[Activation]) -> Response {
    let rows = rows(records.iter());
    let body = html! {
        @if rows.is_empty() {
            p { "No record reports an object stuck in deletion." }
        } @else {
            (table(&rows))
        }
    };
    layout::respond(StatusCode::OK, layout::page("Stuck deletions", None, body))
}

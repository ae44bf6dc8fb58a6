//! What every page shares: the frame, styles, the live-update script, and
//! small pieces (phases, ages, links). maud escapes every value it
//! interpolates; only the constants below are written as they are.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use kix_api::{ObjectRef, Phase};
use maud::{DOCTYPE, Markup, PreEscaped, html};

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:0;color:#1b1f24}\
header{background:#1b1f24;padding:.6em 1em}header a{color:#fff;margin-right:1.2em;text-decoration:none}\
main{padding:1em 1.5em}table{border-collapse:collapse;margin:.5em 0 1.5em}\
th,td{border-bottom:1px solid #ddd;padding:.25em .7em;text-align:left;vertical-align:top}\
th{background:#f3f4f6}code{font-size:.9em}.phase{font-weight:600}\
.Active,.Ready{color:#1a7f37}.Applying,.Pending,.Progressing{color:#9a6700}\
.Degraded,.Failed,.Missing{color:#cf222e}.Superseded{color:#6e7781}.Drifted,.Deleting{color:#8250df}\
.note{color:#57606a}.error{background:#ffebe9;padding:.5em 1em}dl{display:grid;grid-template-columns:max-content auto;gap:.2em 1em}\
dt{font-weight:600}dd{margin:0}nav.pages a{margin-right:.6em}";

const SCRIPT: &str = include_str!("live.js");

/// A whole page: `scope` names the Kix cluster whose changes update it
/// live (none: any change does).
pub fn page(title: &str, scope: Option<&str>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · kix" }
                style { (PreEscaped(STYLE)) }
            }
            body data-cluster=[scope] {
                header {
                    a href="/clusters" { "Kix clusters" }
                    a href="/deletions" { "Stuck deletions" }
                    a href="/fleets" { "Fleets" }
                }
                main id="main" {
                    h1 { (title) }
                    (body)
                    p.note { "Read " (Utc::now().format("%Y-%m-%d %H:%M:%S UTC")) ". Read-only." }
                }
                script { (PreEscaped(SCRIPT)) }
            }
        }
    }
}

/// `markup` as an HTML response.
pub fn respond(status: StatusCode, markup: Markup) -> Response {
    let mut response = (status, markup.into_string()).into_response();
    set_html_headers(response.headers_mut());
    response
}

pub fn set_html_headers(headers: &mut axum::http::HeaderMap) {
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

pub fn error(status: StatusCode, message: &str) -> Response {
    let title = status.canonical_reason().unwrap_or("Error");
    respond(status, page(title, None, html! { p.error { (message) } }))
}

pub fn not_found(message: &str) -> Response {
    error(StatusCode::NOT_FOUND, message)
}

/// A phase, styled; a record nothing acted on yet is Pending.
pub fn phase(phase: Option<Phase>) -> Markup {
    let phase = phase.unwrap_or(Phase::Pending);
    html! { span.phase class=(phase.as_str()) data-phase=(phase.as_str()) { (phase.as_str()) } }
}

/// `5m30s` since `time`.
pub fn age(time: DateTime<Utc>) -> String {
    let secs = Utc::now().signed_duration_since(time).num_seconds().max(0);
    kix_engine::plan_object::human_duration(secs)
}

pub fn cluster_href(cluster: &str) -> String {
    format!("/clusters/{cluster}")
}

pub fn record_href(cluster: &str, record: &str) -> String {
    format!("/clusters/{cluster}/activations/{record}")
}

pub fn record_link(cluster: &str, record: &str) -> Markup {
    html! { a href=(record_href(cluster, record)) { (record) } }
}

/// `ConfigMap apps/web (v1)`.
pub fn object(o: &ObjectRef) -> String {
    match &o.namespace {
        Some(ns) => format!("{} {ns}/{} ({})", o.kind, o.name, o.api_version),
        None => format!("{} {} ({})", o.kind, o.name, o.api_version),
    }
}

/// A digest, shortened, whole in its title.
pub fn digest(text: &str) -> Markup {
    let short: String = text.chars().take(19).collect();
    html! { code title=(text) { (short) @if short.len() < text.len() { "…" } } }
}

//! The HTTP server: routes, the state every page shares, who is asking.
//!
//! | path | page |
//! |---|---|
//! | `/`, `/clusters` | every Kix cluster |
//! | `/clusters/<cluster>` | one Kix cluster and its history |
//! | `/clusters/<cluster>/activations/<record>` | an Activation: receipt, status, objects (`?health=`, `?page=`) |
//! | `/deletions` | stuck deletions |
//! | `/fleets` | fleets and their waves |
//! | `/events` | server-sent events: a record changed |

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Query, State as AxumState};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use futures::Stream;
use kix_api::Activation;
use kube::Client;
use tokio::net::TcpListener;

use crate::auth::{Authorizer, Denied, Viewer};
use crate::objects::Statuses;
use crate::pages;
use crate::records::Records;

#[derive(Debug, thiserror::Error)]
pub enum WebError {
    #[error("serving the web view: {0}")]
    Serve(#[from] std::io::Error),
}

/// What every request shares: the watch, the objects' readings, the
/// authorizer and the client that reads.
pub struct Shared {
    pub client: Client,
    pub records: Records,
    pub statuses: Statuses,
    pub authorizer: Arc<dyn Authorizer>,
}

type State = Arc<Shared>;

/// The web view: its watch runs from [`Web::new`] until it is dropped.
pub struct Web {
    shared: State,
}

impl Web {
    /// Starts the watch on Activation records with `client`'s credentials
    /// (on the current tokio runtime).
    pub fn new(client: Client, authorizer: Arc<dyn Authorizer>) -> Web {
        Web {
            shared: Arc::new(Shared {
                records: Records::watch(client.clone()),
                statuses: Statuses::new(client.clone()),
                client,
                authorizer,
            }),
        }
    }

    /// The routes, for a server of the caller's.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/", get(|| async { Redirect::to("/clusters") }))
            .route("/clusters", get(clusters))
            .route("/clusters/{cluster}", get(cluster))
            .route("/clusters/{cluster}/activations/{record}", get(activation))
            .route("/deletions", get(deletions))
            .route("/fleets", get(fleets))
            .route("/events", get(events))
            .fallback(|| async { pages::layout::not_found("no such page") })
            .with_state(self.shared.clone())
    }

    /// Serves on `listener` until the process ends.
    pub async fn serve(self, listener: TcpListener) -> Result<(), WebError> {
        axum::serve(listener, self.router()).await?;
        Ok(())
    }
}

impl Shared {
    /// The viewer of a request, or the response refusing it.
    async fn viewer(&self, headers: &HeaderMap) -> Result<Viewer, Response> {
        self.authorizer
            .authenticate(headers)
            .await
            .map_err(|denied| {
                let status = match denied {
                    Denied::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
                    Denied::Forbidden(_) => StatusCode::FORBIDDEN,
                };
                pages::layout::error(status, &denied.to_string())
            })
    }

    /// The records `viewer` may read.
    pub async fn visible(&self, viewer: &Viewer) -> Result<Vec<Activation>, Response> {
        let all = self
            .records
            .all()
            .await
            .map_err(|why| pages::layout::error(StatusCode::SERVICE_UNAVAILABLE, &why))?;
        let mut visible = Vec::with_capacity(all.len());
        for record in all {
            if self.authorizer.may_read(viewer, &record).await {
                visible.push(Activation::clone(&record));
            }
        }
        Ok(visible)
    }

    /// The records `viewer` may read, for the page answering `headers`.
    async fn records_for(&self, headers: &HeaderMap) -> Result<Vec<Activation>, Response> {
        let viewer = self.viewer(headers).await?;
        self.visible(&viewer).await
    }
}

async fn clusters(AxumState(s): AxumState<State>, headers: HeaderMap) -> Response {
    match s.records_for(&headers).await {
        Ok(records) => pages::clusters::page(&s, &records).await,
        Err(refused) => refused,
    }
}

async fn cluster(
    AxumState(s): AxumState<State>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    match s.records_for(&headers).await {
        Ok(records) => pages::cluster::page(&name, &records),
        Err(refused) => refused,
    }
}

async fn activation(
    AxumState(s): AxumState<State>,
    Path((cluster, record)): Path<(String, String)>,
    Query(query): Query<pages::activation::ObjectsQuery>,
    headers: HeaderMap,
) -> Response {
    match s.records_for(&headers).await {
        Ok(records) => pages::activation::page(&s, &cluster, &record, &records, query),
        Err(refused) => refused,
    }
}

async fn deletions(AxumState(s): AxumState<State>, headers: HeaderMap) -> Response {
    match s.records_for(&headers).await {
        Ok(records) => pages::deletions::page(&records),
        Err(refused) => refused,
    }
}

async fn fleets(AxumState(s): AxumState<State>, headers: HeaderMap) -> Response {
    match s.records_for(&headers).await {
        Ok(records) => pages::fleets::page(&records),
        Err(refused) => refused,
    }
}

/// Server-sent events, one per change of a record the viewer may read:
/// `data: {"cluster":…,"record":…,"phase":…}`.
async fn events(AxumState(s): AxumState<State>, headers: HeaderMap) -> Response {
    let viewer = match s.viewer(&headers).await {
        Ok(viewer) => viewer,
        Err(refused) => return refused,
    };
    let stream = changes_for(s, viewer);
    let mut response = Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response();
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    response
}

fn changes_for(s: State, viewer: Viewer) -> impl Stream<Item = Result<Event, Infallible>> {
    let changes = s.records.subscribe();
    futures::stream::unfold(
        (s, viewer, changes),
        |(s, viewer, mut changes)| async move {
            loop {
                let event = match changes.recv().await {
                    Ok((change, record)) => {
                        if !s.authorizer.may_read(&viewer, &record).await {
                            continue;
                        }
                        Event::default().data(serde_json::to_string(&change).unwrap_or_default())
                    }
                    // Missed some: every page may be out of date.
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        Event::default().data(r#"{"cluster":"*"}"#)
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                };
                return Some((Ok(event), (s, viewer, changes)));
            }
        },
    )
}

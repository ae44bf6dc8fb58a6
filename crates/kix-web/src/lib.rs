//! kix's read-only web view: every Kix cluster, one Kix cluster's history,
//! an Activation's receipt and its objects with health, stuck deletions and
//! fleets, as server-rendered HTML that reads without JavaScript. A small
//! script updates a page live from server-sent events (`/events`), driven by
//! one shared watch on the Activation records.
//!
//! Two front ends serve it: `kix ui` (the caller's own kubeconfig and
//! credentials, [`CallerCredentials`]) and the operator, which passes an
//! [`Authorizer`] of its own (who the viewer is, and whether they may read
//! a record). Nothing here writes to the cluster: records come from the
//! watch, objects and their health from [`kix_engine::status`], the same
//! reading `kix status` does.
//!
//! # Where things are
//!
//! - The server, its routes and the shared state: [`server`]; who may see
//!   what: [`auth`] (`kix ui`'s) and `kube_auth.rs` (the operator's:
//!   TokenReview and SubjectAccessReview); the shared watch: `records.rs`; the objects' health,
//!   read once per change of the applied record and paged: `objects.rs`.
//! - Each page: `pages/<page>.rs`, all through `pages/layout.rs` (maud
//!   templates: every value interpolated is HTML-escaped).

mod auth;
mod kube_auth;
mod objects;
mod pages;
mod records;
pub mod server;

pub use auth::{Authorizer, BoxFuture, CallerCredentials, Denied, Viewer};
pub use axum::http::HeaderMap;
pub use kube_auth::{KubeAuthorizer, ProxyHeaders};
pub use records::Change;
pub use server::{Web, WebError};

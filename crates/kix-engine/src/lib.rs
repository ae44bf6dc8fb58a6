//! The kix engine, shared by the CLI and the operator:
//! plan → record → apply → wait → prune → settle.
//!
//! - [`plan::plan`] reads the live cluster (one LIST per kind) and returns a
//!   [`plan::Plan`] value; nothing is written.
//! - [`deploy::deploy`] executes a plan: Activation record, ordered bounded
//!   parallel server-side apply, health wait, prune, final phase.
//!
//! # Where things are
//!
//! - **The plan core** (values, no client, no I/O; `tests/architecture.rs`
//!   keeps it so): [`plan_object`] (what a plan does to each object),
//!   [`plan_value`] (the [`plan_value::Plan`] and what it crosses),
//!   [`budget`], [`seal`] (the digest and what a user accepts),
//!   [`refusals`], [`changes`] (what the stages did), [`diff`].
//! - **A rule that may refuse or hold a change** (a gate): a function of
//!   plan values (or of the build, before it is planned) and consents in
//!   [`gates`], returning a typed [`gates::Refusal`] or
//!   [`gates::BuildRefusal`], tested there on values; every executor
//!   (deploy, rollback, gc, build, validate, declare, the fleet, the
//!   operator) calls it. Never a check of its own in an executor.
//! - **Reading the cluster into values**: [`plan`] (the planner), [`live`],
//!   [`resources`] (discovery), [`records`], [`crd_upgrade`], [`contents`],
//!   [`status`].
//! - **A stage** (writes the cluster): `apply.rs` (a group's server-side
//!   applies, with [`ownership`], then its wait, with [`wait`]), [`prune`],
//!   [`migrations`]; each returns a [`changes::ChangeSet`] and takes its own
//!   settings (`ApplyStage`, `MigrationStage`, `PruneOptions`), never the
//!   deploy's options or state; [`deploy`] orders them, merges their change
//!   sets and writes the record ([`changes::ChangeSet::record`]). [`gc`]
//!   and [`retire`] for retired records.
//! - **Health**: [`health`] (the kix-health crate's rules: a new health rule
//!   goes there, or in the build's own CEL rules).
//! - **Clients**: [`client`], the one factory of every kube client (its
//!   kubeconfig, context, and the ServiceAccount a build or record acts as).
//! - Leases: [`lease`]; events the front ends render: [`events`];
//!   durations on command lines: [`duration`].

// EngineError carries kube's error whole (its Status is what users need to
// see); it is returned on failure paths only, so its size does not matter.
#![allow(clippy::result_large_err)]

mod apply;
pub mod budget;
pub mod changes;
pub mod claims;
pub mod client;
pub mod contents;
pub mod crd_upgrade;
pub mod delete_hooks;
pub mod deploy;
pub mod desired;
pub mod diff;
pub mod duration;
pub mod error;
pub mod events;
pub mod gates;
pub mod gc;
pub mod health;
pub mod hooks;
pub mod lease;
mod list_stream;
pub mod live;
pub mod migrations;
pub mod offline_plan;
pub mod operator_record;
pub mod order;
pub mod ownership;
pub mod packages;
mod parallel;
pub mod plan;
pub mod plan_object;
pub mod plan_value;
pub mod prune;
pub mod records;
pub mod refusals;
pub mod resources;
pub mod retire;
pub mod seal;
pub mod status;
pub mod wait;
pub mod watch_hub;

pub use error::{EngineError, Result};

/// Drops `value` on a thread of its own. Freeing the small allocations of
/// 50,000 objects takes a tenth of a second or more that the caller need
/// not wait for. Without a thread, it is dropped here.
pub fn drop_later<T: Send + 'static>(value: T) {
    let _ = std::thread::Builder::new()
        .name("kix-drop".into())
        .spawn(move || drop(value));
}

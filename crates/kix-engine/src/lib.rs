//! The kix engine, shared by the CLI and the operator:
//! plan → record → apply → wait → prune → settle.
//!
//! - [`plan::plan`] reads the live cluster (one LIST per kind) and returns a
//!   [`plan::Plan`] value; nothing is written.
//! - [`deploy::deploy`] executes a plan: Activation record, ordered bounded
//!   parallel server-side apply, health wait, prune, final phase.

// EngineError carries kube's error whole (its Status is what users need to
// see); it is returned on failure paths only, so its size does not matter.
#![allow(clippy::result_large_err)]

pub mod budget;
pub mod changes;
pub mod contents;
pub mod crd_upgrade;
pub mod deploy;
pub mod desired;
pub mod diff;
pub mod duration;
pub mod error;
pub mod events;
pub mod gates;
pub mod gc;
pub mod health;
pub mod lease;
mod list_stream;
pub mod live;
pub mod migrations;
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
pub mod tenant;
pub mod wait;

pub use error::{EngineError, Result};

/// Drops `value` on a thread of its own. Freeing the small allocations of
/// 50,000 objects takes a tenth of a second or more that the caller need
/// not wait for. Without a thread, it is dropped here.
pub fn drop_later<T: Send + 'static>(value: T) {
    let _ = std::thread::Builder::new()
        .name("kix-drop".into())
        .spawn(move || drop(value));
}

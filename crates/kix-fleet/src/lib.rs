//! Fleets: one build promoted across many clusters in health-gated waves.
//!
//! A fleet is an orchestration over the engine, not a new engine path. Each
//! member is an ordinary Kix cluster build deployed to its own cluster with
//! its own kube client, through the engine's entry points:
//!
//! - [`spec`]: the fleet file `kix.lib.mkFleet` builds (pure, checked again).
//! - [`plan::plan_fleet`]: every member planned by [`kix_engine::plan::plan`]
//!   (bounded parallel), one digest over them all; unreachable members are
//!   part of the plan, not skipped.
//! - [`run::run`]: wave by wave through [`kix_engine::deploy::deploy`] (or an
//!   operator member's Activation record); the next wave once the current
//!   one is Active and healthy for `pause`; halts on the first failure.
//! - [`records`]: the rollout record is labels on each member's Activation
//!   (`kix.run/fleet`, `kix.run/fleet-rollout`, …); resume, status,
//!   history and rollback read the members' own records back.
//! - [`rollback::plan_rollback`]: each member that took a rollout back to
//!   the build before it, in reverse wave order.
//!
//! # Where things are
//!
//! A fleet never re-implements a rule: a member's refusals are the engine's
//! gates (`kix_engine::gates`), asked through `kix_engine::deploy`. A rule
//! about the fleet as a whole (what a wave may do, a combined budget) is a
//! gate too, a function of the members' plans in `kix_engine::gates`, asked
//! in [`run`] before a wave starts; what the fleet file may say is checked
//! in [`spec`] (and first in Nix, `nix/fleet.nix`). The CLI's `kix fleet`
//! commands only turn arguments into calls of this crate.
//! - [`roots`]: the fleet build's GC root, kept while a member's record
//!   names its rollout.

pub mod apply;
pub mod error;
pub mod inspect;
pub mod member;
pub mod plan;
pub mod records;
pub mod rollback;
pub mod roots;
pub mod run;
pub mod spec;

pub use error::{FleetError, Result, SpecError};

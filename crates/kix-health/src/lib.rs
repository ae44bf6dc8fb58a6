//! Health of a live Kubernetes object, from the object alone (no API calls).
//!
//! [`health`] applies the generic kstatus rules ([`kstatus`]); [`Rules`] adds
//! CEL rules (a built-in library for common custom resources, and the user's
//! own) and [`Rules::judge`] says which rule judged an object.

pub mod kstatus;

pub use kstatus::{Health, SCHEDULE_WINDOW, health, health_at, judged_by_metadata};

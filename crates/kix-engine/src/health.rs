//! Health of a live object: the `kix-health` crate, re-exported so the
//! engine's callers keep one path; and the completion of Jobs, remembered
//! on the records ([`completed`]).

pub mod completed;

pub use kix_health::*;

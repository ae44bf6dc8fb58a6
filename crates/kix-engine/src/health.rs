//! Health of a live object: the `kix-health` crate, re-exported so the
//! engine's callers keep one path.

pub use kix_health::*;

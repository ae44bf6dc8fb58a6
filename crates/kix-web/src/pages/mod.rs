//! One file per page; `layout` holds what they share.

pub mod activation;
pub mod cluster;
pub mod clusters;
pub mod deletions;
pub mod fleets;
pub mod layout;

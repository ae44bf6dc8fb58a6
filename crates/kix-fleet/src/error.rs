//! Fleet errors: each names the fleet file or the member at fault.

use std::path::PathBuf;

use crate::spec::MemberName;

/// A fleet file that cannot be read or is not a fleet.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("reading the fleet file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the fleet file {path} is not a fleet: {reason}")]
    Invalid { path: PathBuf, reason: String },
}

#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// The member's build is missing, unreadable, or of another Kix cluster.
    #[error("member {member}: {reason}")]
    Build { member: MemberName, reason: String },
    /// A kubeconfig or context that does not load.
    #[error("member {member}: {reason}")]
    Client { member: MemberName, reason: String },
    #[error("member {member}: {source}")]
    Engine {
        member: MemberName,
        #[source]
        source: Box<kix_engine::EngineError>,
    },
    /// The saved fleet plan is not what a deploy would do now.
    #[error("{0}")]
    Moved(String),
    #[error("{0}")]
    Refused(String),
}

pub type Result<T, E = FleetError> = std::result::Result<T, E>;

//! Engine errors. Each variant names the object, record or file at fault.

use kix_manifest::ObjectKey;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("reading the build: {0}")]
    Tree(#[from] kix_manifest::TreeError),
    #[error("the build is for Kix cluster {found:?}, not {expected:?}")]
    ClusterMismatch { expected: String, found: String },
    #[error(
        "unknown kind {api_version} {kind} ({source_file}): the apiserver does not serve it and no CRD in the build defines it"
    )]
    UnknownKind {
        api_version: String,
        kind: String,
        source_file: String,
    },
    #[error("listing {kind}: {source}")]
    List {
        kind: String,
        #[source]
        source: kube::Error,
    },
    #[error("{action} {key}: {source}")]
    Object {
        action: &'static str,
        key: ObjectKey,
        #[source]
        source: kube::Error,
    },
    #[error("{0}")]
    Api(#[from] kube::Error),
    #[error("Activation records: {0}")]
    Records(String),
    #[error(
        "the apiserver refuses the deploy's account what the plan would write (nothing was changed): {0}"
    )]
    NoPermission(String),
    #[error("the plan needs --accept-migrations: {0}")]
    NeedsAcceptance(String),
    #[error(
        "the plan has conflicts (fields owned by other managers); rerun with --force-conflicts to take them: {0}"
    )]
    Conflicts(String),
    #[error("{0}")]
    Lease(#[from] crate::lease::LeaseError),
    #[error(
        "the build has no objects: refusing to prune everything Kix cluster {0:?} owns (pass --allow-empty)"
    )]
    EmptyBuild(String),
    #[error(
        "--current-activation {expected}: the current activation of Kix cluster {cluster:?} is {found}"
    )]
    NotCurrent {
        cluster: String,
        expected: String,
        found: String,
    },
    #[error(transparent)]
    Nix(#[from] kix_nix::NixError),
    #[error("{0}")]
    Unconfirmed(#[from] crate::refusals::Unconfirmed),
    #[error("{0}")]
    Moved(#[from] crate::refusals::Moved),
    #[error("refusing the CRD upgrade, nothing was changed: {0}")]
    CrdStoredVersion(String),
    #[error("the plan exceeds the deletion budget: {0}")]
    DeletionBudget(String),
    #[error("waiting: {0}")]
    Wait(String),
    #[error("{0}")]
    Other(String),
}

pub type Result<T, E = EngineError> = std::result::Result<T, E>;

impl EngineError {
    /// Whether the apiserver refused one of its requests for lack of
    /// permission (403), anywhere in its causes.
    pub fn is_forbidden(&self) -> bool {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(error) = source {
            if let Some(kube::Error::Api(status)) = error.downcast_ref::<kube::Error>()
                && status.code == 403
            {
                return true;
            }
            source = error.source();
        }
        false
    }
}

/// The apiserver's own message for an API error (not the Debug of the whole
/// Status), or the error's text otherwise.
pub fn api_message(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) if !status.message.is_empty() => {
            format!("{} ({})", status.message, status.reason)
        }
        other => other.to_string(),
    }
}

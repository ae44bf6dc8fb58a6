//! kix's custom resources (`kix.run/v1alpha1`, both cluster-scoped):
//!
//! - [`Activation`] (`activations.kix.run`, short name `act`): one deploy of
//!   one Kix cluster's build, named `<cluster>-<sequence>`.
//! - [`PackageInstance`] (`packageinstances.kix.run`, short name `kpi`): one
//!   package installed by one Kix cluster, named `<cluster>.<package>`.
//!
//! Also the label and annotation keys kix writes on applied objects
//! ([`labels`]) and the CRD YAML ([`crds_yaml`]).
//!
//! # Where things are
//!
//! - A field of a record: `activation.rs` or `package_instance.rs` (then
//!   `deploy/crds.yaml` is generated from them, a test compares); labels and
//!   annotations on applied objects: [`labels`]; an object as a record
//!   names it: `object_ref.rs`; the admission policy of tenants:
//!   [`admission`].

mod activation;
pub mod admission;
mod crds;
pub mod labels;
mod object_ref;
mod package_instance;
mod schema;

pub use activation::{
    Accepted, Activation, ActivationSpec, ActivationStatus, Counts, DELETING_LISTED,
    DeletingObject, Drift, Engine, FAILED_DELETIONS_LISTED, FINALIZERS_LISTED, FailedDeletion,
    MESSAGE_MAX, NOTIFIED_LISTED, Notified, PENDING_PRUNE_LISTED, Phase, Progress, REASON_MAX,
    Receipt, Source, is_terminal, truncate,
};
pub use admission::ServiceAccountRef;
pub use crds::{crd_digest, crds, crds_yaml};
pub use labels::{
    ANNOTATION_ACTIVATIONS, ANNOTATION_DIGEST, ANNOTATION_PRUNE, API_VERSION, CONDITION_READY,
    FINALIZER, GROUP, LABEL_CLUSTER, LABEL_MANAGED_BY, LABEL_OWNER, LABEL_PACKAGE,
    LEGACY_FIELD_MANAGER, MANAGED_BY_VALUE, PRUNE_DISABLED, RECORDS_FIELD_MANAGER, VERSION,
    cluster_of_manager, field_manager, owner_value,
};
pub use object_ref::ObjectRef;
pub use package_instance::{
    PackageInstance, PackageInstanceSpec, PackageInstanceStatus, PackagePhase,
};

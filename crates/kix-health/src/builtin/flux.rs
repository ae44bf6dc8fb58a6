//! Flux (*.toolkit.fluxcd.io): every kind follows kstatus' conventions
//! (`Ready`, `Reconciling`, `Stalled`), and `Ready=False` while nothing is
//! reconciling is a failure the `flux` CLI reports as such (a build that
//! failed, a source that cannot be fetched); so is one while Flux
//! retries after a failure (`Reconciling` reason `ProgressingWithRetry`) or
//! a source whose fetch failed (`FetchFailed=True`). Alerts and Providers have no
//! status since notification v1beta3: kstatus judges them.

use super::{Builtin, cond};

/// Ready, reconciling, failed: Flux's conventions for one kind.
macro_rules! flux {
    ($group:literal, $kind:literal) => {
        flux!($group, $kind, cond!("Ready", "True"))
    };
    ($group:literal, $kind:literal, $current:expr) => {
        Builtin::new("flux", $group, $kind)
            .current($current)
            .in_progress(cond!("Reconciling", "True"))
            .failed(concat!(
                cond!("Stalled", "True"),
                " || ",
                cond!("FetchFailed", "True"),
                " || (",
                cond!("Ready", "False"),
                " && !status.conditions.exists(c, c.type == 'Reconciling' && c.status == 'True' && c.reason != 'ProgressingWithRetry'))"
            ))
    };
}

pub(super) const RULES: &[Builtin] = &[
    flux!("kustomize.toolkit.fluxcd.io", "Kustomization"),
    flux!("helm.toolkit.fluxcd.io", "HelmRelease"),
    flux!("source.toolkit.fluxcd.io", "GitRepository"),
    flux!("source.toolkit.fluxcd.io", "OCIRepository"),
    flux!("source.toolkit.fluxcd.io", "Bucket"),
    flux!("source.toolkit.fluxcd.io", "HelmChart"),
    // An OCI HelmRepository is static: its controller writes no status.
    flux!(
        "source.toolkit.fluxcd.io",
        "HelmRepository",
        concat!(
            "spec.?type.orValue('') == 'oci' || ",
            cond!("Ready", "True")
        )
    ),
    flux!("notification.toolkit.fluxcd.io", "Receiver"),
    flux!("image.toolkit.fluxcd.io", "ImageRepository"),
    flux!("image.toolkit.fluxcd.io", "ImagePolicy"),
    flux!("image.toolkit.fluxcd.io", "ImageUpdateAutomation"),
];

//! Crossplane: claims, composites and managed resources report `Synced`
//! (the last reconcile worked) and `Ready` (the resource is usable). Their
//! groups are their authors' own, so the rule applies to any object whose
//! status has a `Synced` condition; packages (pkg.crossplane.io) report
//! `Installed` and `Healthy`.

use super::{Builtin, cond};

pub(super) const RULES: &[Builtin] = &[
    Builtin::new("crossplane", "pkg.crossplane.io", "*")
        .current(concat!(cond!("Installed", "True"), " && ", cond!("Healthy", "True")))
        .failed(concat!(
            "status.?conditions.orValue([]).exists(c, c.type == 'Installed' && c.status == 'False' && c.?reason.orValue('') != 'UnpackingPackage')",
            " || status.?conditions.orValue([]).exists(c, c.type == 'Healthy' && c.status == 'False' && c.?reason.orValue('') == 'UnhealthyPackageRevision')"
        )),
    Builtin::new("crossplane", "*", "*")
        .needs_condition("Synced")
        .current(concat!(cond!("Synced", "True"), " && ", cond!("Ready", "True")))
        .failed(cond!("Synced", "False")),
];

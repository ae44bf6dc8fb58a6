//! cert-manager (cert-manager.io): every kind reports a `Ready` condition.

use super::{Builtin, cond};

const GROUP: &str = "cert-manager.io";

pub(super) const RULES: &[Builtin] = &[
    // While a certificate is issued, Ready is False (DoesNotExist, ...) and
    // Issuing True; Ready False with no issuance under way is a failure
    // (a configuration error, an issuer that does not exist), as is an
    // issuance that failed.
    Builtin::new("cert-manager", GROUP, "Certificate")
        .current(cond!("Ready", "True"))
        .in_progress(cond!("Issuing", "True"))
        .failed(concat!(
            "(",
            cond!("Ready", "False"),
            " && !",
            cond!("Issuing", "True"),
            ") || status.?conditions.orValue([]).exists(c, c.type == 'Issuing' && c.status == 'False' && c.reason == 'Failed')"
        )),
    Builtin::new("cert-manager", GROUP, "CertificateRequest")
        .current(cond!("Ready", "True"))
        .failed(concat!(
            "status.?conditions.orValue([]).exists(c, c.type == 'Ready' && c.status == 'False' && c.reason in ['Failed', 'Denied'])",
            " || ",
            cond!("InvalidRequest", "True"),
            " || ",
            cond!("Denied", "True")
        )),
    Builtin::new("cert-manager", GROUP, "Issuer")
        .current(cond!("Ready", "True"))
        .failed(cond!("Ready", "False")),
    Builtin::new("cert-manager", GROUP, "ClusterIssuer")
        .current(cond!("Ready", "True"))
        .failed(cond!("Ready", "False")),
];

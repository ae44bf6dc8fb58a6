//! KEDA (keda.sh): `Ready` says whether the scaler works; `Fallback=True`
//! means KEDA gave up on the metric and scales to the fallback replicas.

use super::{Builtin, cond};

macro_rules! scaled {
    ($kind:literal) => {
        Builtin::new("keda", "keda.sh", $kind)
            .current(cond!("Ready", "True"))
            .failed(concat!(
                cond!("Ready", "False"),
                " || ",
                cond!("Fallback", "True")
            ))
    };
}

pub(super) const RULES: &[Builtin] = &[scaled!("ScaledObject"), scaled!("ScaledJob")];

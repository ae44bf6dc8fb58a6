//! Prometheus Operator (monitoring.coreos.com): the workload kinds report
//! `Available` (`True`, `Degraded` when some pods are not ready, `False`)
//! and `Reconciled`. Pods not ready yet is progressing (the wait's timeout
//! names the message); a reconcile that failed is a failure.

use super::{Builtin, cond};

const GROUP: &str = "monitoring.coreos.com";

macro_rules! workload {
    ($kind:literal) => {
        Builtin::new("prometheus-operator", GROUP, $kind)
            .current(concat!(
                cond!("Available", "True"),
                " && !",
                cond!("Reconciled", "False")
            ))
            .failed(cond!("Reconciled", "False"))
    };
}

pub(super) const RULES: &[Builtin] = &[
    workload!("Prometheus"),
    workload!("PrometheusAgent"),
    workload!("Alertmanager"),
    workload!("ThanosRuler"),
];

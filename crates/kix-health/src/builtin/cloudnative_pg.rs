//! CloudNativePG (postgresql.cnpg.io): a Cluster states its state in
//! `status.phase`, with `status.phaseReason`. Fail-overs and upgrades heal
//! themselves (progressing); the phases that wait for a human fail.

use super::{Builtin, cond};

pub(super) const RULES: &[Builtin] = &[Builtin::new("cloudnative-pg", "postgresql.cnpg.io", "Cluster")
    .current(concat!(
        "status.?phase.orValue('') == 'Cluster in healthy state' || ",
        cond!("cnpg.io/hibernation", "True")
    ))
    .failed(concat!(
        "status.?phase.orValue('') in [",
        "'Unable to create required cluster objects', ",
        "'Cluster cannot proceed to reconciliation due to an unknown plugin being required', ",
        "'Cluster has incomplete or invalid image catalog', ",
        "'Cluster is unrecoverable and needs manual intervention', ",
        "'Cluster cannot execute instance online upgrade due to missing architecture binary', ",
        "'Waiting for user action']"
    ))
    .message(
        "status.?phase.orValue('no phase yet') + (status.?phaseReason.orValue('') == '' ? '' : ': ' + status.phaseReason)",
    )];

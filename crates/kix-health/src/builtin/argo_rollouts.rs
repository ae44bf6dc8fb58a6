//! Argo Rollouts (argoproj.io): a Rollout states its health in
//! `status.phase` (Healthy, Progressing, Paused, Degraded) since v1.0; its
//! `observedGeneration` is a string, and a Rollout that references a
//! workload has observed it when `workloadObservedGeneration` equals the
//! `rollout.argoproj.io/workload-generation` annotation.

use super::Builtin;

pub(super) const RULES: &[Builtin] = &[Builtin::new("argo-rollouts", "argoproj.io", "Rollout")
    .current(concat!(
        "status.?phase.orValue('') == 'Healthy'",
        " && status.?observedGeneration.orValue('') == string(metadata.?generation.orValue(0))",
        " && metadata.?annotations[?'rollout.argoproj.io/workload-generation'].orValue('') ",
        "== (metadata.?annotations[?'rollout.argoproj.io/workload-generation'].hasValue() ? status.?workloadObservedGeneration.orValue('') : '')"
    ))
    .in_progress("status.?phase.orValue('') in ['Progressing', 'Paused']")
    .failed("status.?phase.orValue('') == 'Degraded'")
    .message(concat!(
        "status.?phase.orValue('') != 'Healthy' ? ",
        "'phase ' + status.?phase.orValue('unknown') + (status.?message.orValue('') == '' ? '' : ': ' + status.message) : ",
        "status.?observedGeneration.orValue('') != string(metadata.?generation.orValue(0)) ? 'generation not yet observed' : ",
        "'workload generation not yet observed'"
    ))];

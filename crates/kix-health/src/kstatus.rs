//! The generic health rules, from the object alone (no API calls).
//!
//! Follows kstatus (kubernetes-sigs/cli-utils `pkg/kstatus/status`), mapping
//! its Current / InProgress / Failed / Terminating to [`Health::Ready`] /
//! [`Health::Progressing`] / [`Health::Degraded`] / `Progressing("terminating")`:
//!
//! 1. Generic rules, for every kind, in this order: a deletion timestamp means
//!    terminating; `status.observedGeneration` behind `metadata.generation`
//!    means the controller has not seen the latest spec; a `Reconciling=True`
//!    condition means progressing; a `Stalled=True` condition means degraded.
//! 2. Kind rules for the built-in kinds with a rollout or a lifecycle
//!    (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, Pod,
//!    PersistentVolumeClaim, Service, CustomResourceDefinition, Namespace,
//!    APIService, ...).
//! 3. Any other kind: a `Ready` condition decides (True → ready, otherwise
//!    progressing); without one the object is ready (ConfigMap, Secret, RBAC,
//!    a custom resource without conditions).
//!
//! Where kix differs from kstatus, deliberately:
//! - a running Job is Progressing until it completes (kstatus calls a started
//!   Job Current): kix waits for Job completion;
//! - a Failed Pod is Degraded (kstatus: Current, "completed");
//! - a Lost PersistentVolumeClaim is Degraded (kstatus: InProgress);
//! - a Pod whose init container is crash-looping is Degraded, like one whose
//!   app container is;
//! - kinds kstatus does not know: Namespace (phase), APIService (Available
//!   condition), and the generic `Ready` condition.

use std::fmt;

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How long a Pod may be unschedulable before it counts as Degraded (kstatus'
/// `ScheduleWindow`).
pub const SCHEDULE_WINDOW: Duration = Duration::seconds(15);

/// The health of one live object.
///
/// Serializes as `{"status": "Ready"}` or `{"status": "Progressing", "reason":
/// "2/3 replicas available"}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "status")]
pub enum Health {
    /// Reconciled and working as specified (kstatus Current).
    Ready,
    /// Not there yet; waiting may help (kstatus InProgress, Terminating).
    Progressing { reason: String },
    /// Failed or stuck; waiting will not help (kstatus Failed).
    Degraded { reason: String },
}

impl Health {
    pub(crate) fn progressing(reason: impl Into<String>) -> Self {
        Health::Progressing {
            reason: reason.into(),
        }
    }

    pub(crate) fn degraded(reason: impl Into<String>) -> Self {
        Health::Degraded {
            reason: reason.into(),
        }
    }

    pub fn is_ready(&self) -> bool {
        matches!(self, Health::Ready)
    }

    pub fn is_progressing(&self) -> bool {
        matches!(self, Health::Progressing { .. })
    }

    pub fn is_degraded(&self) -> bool {
        matches!(self, Health::Degraded { .. })
    }

    /// `"Ready"`, `"Progressing"` or `"Degraded"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Health::Ready => "Ready",
            Health::Progressing { .. } => "Progressing",
            Health::Degraded { .. } => "Degraded",
        }
    }

    /// Why the object is not Ready.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Health::Ready => None,
            Health::Progressing { reason } | Health::Degraded { reason } => Some(reason),
        }
    }
}

/// `Ready`, `Progressing: <reason>` or `Degraded: <reason>`.
impl fmt::Display for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.reason() {
            Some(reason) if !reason.is_empty() => write!(f, "{}: {reason}", self.as_str()),
            _ => f.write_str(self.as_str()),
        }
    }
}

/// The health of a live object (as returned by the API server).
pub fn health(obj: &Value) -> Health {
    health_at(obj, Utc::now())
}

/// [`health`] with an explicit current time (only Pod scheduling uses it).
pub fn health_at(obj: &Value, now: DateTime<Utc>) -> Health {
    if let Some(health) = generic(obj) {
        return health;
    }
    let api_version = str_at(obj, "/apiVersion").unwrap_or_default();
    let group = api_version
        .rsplit_once('/')
        .map(|(group, _)| group)
        .unwrap_or_default();
    let kind = str_at(obj, "/kind").unwrap_or_default();
    match (group, kind) {
        ("apps" | "extensions", "Deployment") => deployment(obj),
        ("apps", "StatefulSet") => stateful_set(obj),
        ("apps" | "extensions", "DaemonSet") => daemon_set(obj),
        ("apps" | "extensions", "ReplicaSet") => replica_set(obj),
        ("batch", "Job") => job(obj),
        ("batch", "CronJob") => Health::Ready,
        ("policy", "PodDisruptionBudget") => Health::Ready,
        ("", "Pod") => pod(obj, now),
        ("", "PersistentVolumeClaim") => pvc(obj),
        ("", "Service") => service(obj),
        ("", "Namespace") => namespace(obj),
        ("", "ConfigMap" | "Secret") => Health::Ready,
        ("apiextensions.k8s.io", "CustomResourceDefinition") => crd(obj),
        ("apiregistration.k8s.io", "APIService") => api_service(obj),
        _ => ready_condition(obj),
    }
}

/// Kinds whose health reads nothing but their metadata (they have neither
/// spec nor status): a metadata-only read judges them, which spares the
/// apiserver and kix their payloads (and `kix status` a Secret's values).
pub fn judged_by_metadata(group: &str, kind: &str) -> bool {
    matches!((group, kind), ("", "ConfigMap" | "Secret"))
}

// ---------------------------------------------------------------- generic

fn generic(obj: &Value) -> Option<Health> {
    if let Some(health) = terminating_or_unobserved(obj) {
        return Some(health);
    }
    let conditions = conditions(obj);
    for c in &conditions {
        if c.type_ == "Reconciling" && c.is_true() {
            return Some(Health::progressing(c.text("reconciling")));
        }
        if c.type_ == "Stalled" && c.is_true() {
            return Some(Health::degraded(c.text("stalled")));
        }
    }
    None
}

/// A deletion timestamp, or an `observedGeneration` behind the
/// generation: what every rule checks first (CEL rules too, as Flux does).
pub(crate) fn terminating_or_unobserved(obj: &Value) -> Option<Health> {
    if str_at(obj, "/metadata/deletionTimestamp").is_some_and(|ts| !ts.is_empty()) {
        return Some(Health::progressing("terminating"));
    }
    if let (Some(generation), Some(observed)) = (
        int_at(obj, "/metadata/generation"),
        int_at(obj, "/status/observedGeneration"),
    ) && observed < generation
    {
        return Some(Health::progressing(format!(
            "generation {generation} not yet observed (observed {observed})"
        )));
    }
    None
}

fn ready_condition(obj: &Value) -> Health {
    match find(&conditions(obj), "Ready") {
        Some(c) if c.is_true() => Health::Ready,
        Some(c) if c.status == "False" => Health::progressing(c.text("not ready")),
        Some(c) => Health::progressing(c.text("readiness unknown")),
        None => Health::Ready,
    }
}

// ------------------------------------------------------------- workloads

fn deployment(obj: &Value) -> Health {
    // Without progressDeadlineSeconds the controller never sets Progressing.
    let mut progressing =
        int_at(obj, "/spec/progressDeadlineSeconds").is_none_or(|s| s == i64::from(i32::MAX));
    let mut available = false;
    for c in conditions(obj) {
        match c.type_ {
            "Progressing" => {
                if c.reason == "ProgressDeadlineExceeded" {
                    return Health::degraded(match c.message {
                        "" => "progress deadline exceeded".to_owned(),
                        message => format!("progress deadline exceeded: {message}"),
                    });
                }
                if c.is_true() && c.reason == "NewReplicaSetAvailable" {
                    progressing = true;
                }
            }
            "Available" if c.is_true() => available = true,
            _ => {}
        }
    }

    let spec = int_at(obj, "/spec/replicas").unwrap_or(1);
    let replicas = status_int(obj, "replicas");
    let updated = status_int(obj, "updatedReplicas");
    let ready = status_int(obj, "readyReplicas");
    let available_replicas = status_int(obj, "availableReplicas");

    if spec > replicas {
        return Health::progressing(format!("{replicas}/{spec} replicas created"));
    }
    if spec > updated {
        return Health::progressing(format!("{updated}/{spec} replicas updated"));
    }
    if replicas > spec {
        return Health::progressing(pending_termination(replicas - spec));
    }
    if updated > available_replicas {
        return Health::progressing(format!("{available_replicas}/{updated} replicas available"));
    }
    if spec > ready {
        return Health::progressing(format!("{ready}/{spec} replicas ready"));
    }
    if !progressing {
        return Health::progressing("waiting for the new ReplicaSet to become available");
    }
    if !available {
        return Health::progressing("waiting for minimum availability");
    }
    Health::Ready
}

fn stateful_set(obj: &Value) -> Health {
    if str_at(obj, "/spec/updateStrategy/type").is_some_and(|t| t.eq_ignore_ascii_case("OnDelete"))
    {
        // The user rolls pods by deleting them; nothing to wait for.
        return Health::Ready;
    }
    let spec = int_at(obj, "/spec/replicas").unwrap_or(1);
    let replicas = status_int(obj, "replicas");
    let ready = status_int(obj, "readyReplicas");
    let current = status_int(obj, "currentReplicas");
    let updated = status_int(obj, "updatedReplicas");

    if spec > replicas {
        return Health::progressing(format!("{replicas}/{spec} replicas created"));
    }
    if spec > ready {
        return Health::progressing(format!("{ready}/{spec} replicas ready"));
    }
    if replicas > spec {
        return Health::progressing(pending_termination(replicas - spec));
    }
    if let Some(partition) = int_at(obj, "/spec/updateStrategy/rollingUpdate/partition") {
        // Only ordinals >= partition are updated.
        let expected = spec - partition;
        if updated < expected {
            return Health::progressing(format!(
                "{updated}/{expected} replicas updated (partition {partition})"
            ));
        }
        return Health::Ready;
    }
    if spec > current {
        return Health::progressing(format!("{current}/{spec} replicas at the current revision"));
    }
    let current_revision = str_at(obj, "/status/currentRevision").unwrap_or_default();
    let update_revision = str_at(obj, "/status/updateRevision").unwrap_or_default();
    if current_revision != update_revision {
        return Health::progressing(format!("rolling out revision {update_revision}"));
    }
    Health::Ready
}

fn daemon_set(obj: &Value) -> Health {
    // The controller always writes these once it has acted on the object.
    if int_at(obj, "/metadata/generation").is_none()
        || int_at(obj, "/status/observedGeneration").is_none()
    {
        return Health::progressing("waiting for the DaemonSet controller");
    }
    let Some(desired) = int_at(obj, "/status/desiredNumberScheduled") else {
        return Health::progressing("waiting for the DaemonSet controller");
    };
    let current = status_int(obj, "currentNumberScheduled");
    let updated = status_int(obj, "updatedNumberScheduled");
    let available = status_int(obj, "numberAvailable");
    let ready = status_int(obj, "numberReady");

    if desired > current {
        return Health::progressing(format!("{current}/{desired} pods scheduled"));
    }
    if desired > updated {
        return Health::progressing(format!("{updated}/{desired} pods updated"));
    }
    if desired > available {
        return Health::progressing(format!("{available}/{desired} pods available"));
    }
    if desired > ready {
        return Health::progressing(format!("{ready}/{desired} pods ready"));
    }
    Health::Ready
}

fn replica_set(obj: &Value) -> Health {
    if let Some(c) = find(&conditions(obj), "ReplicaFailure")
        && c.is_true()
    {
        return Health::progressing(format!("replica failure: {}", c.text("check the pods")));
    }
    let spec = int_at(obj, "/spec/replicas").unwrap_or(1);
    let replicas = status_int(obj, "replicas");
    let ready = status_int(obj, "readyReplicas");
    let available = status_int(obj, "availableReplicas");
    let labelled = status_int(obj, "fullyLabeledReplicas");

    if spec > labelled {
        return Health::progressing(format!("{labelled}/{spec} replicas labelled"));
    }
    if spec > available {
        return Health::progressing(format!("{available}/{spec} replicas available"));
    }
    if spec > ready {
        return Health::progressing(format!("{ready}/{spec} replicas ready"));
    }
    if replicas > spec {
        return Health::progressing(pending_termination(replicas - spec));
    }
    Health::Ready
}

fn job(obj: &Value) -> Health {
    let parallelism = int_at(obj, "/spec/parallelism").unwrap_or(1);
    let completions = int_at(obj, "/spec/completions").unwrap_or(parallelism);
    let succeeded = status_int(obj, "succeeded");
    let active = status_int(obj, "active");
    let failed = status_int(obj, "failed");

    for c in conditions(obj) {
        match c.type_ {
            "Complete" if c.is_true() => return Health::Ready,
            "Failed" if c.is_true() => {
                return Health::degraded(format!(
                    "job failed ({failed} failed pods): {}",
                    c.text("failed")
                ));
            }
            // A suspended Job does what was asked; there is nothing to wait for.
            "Suspended" if c.is_true() => return Health::Ready,
            _ => {}
        }
    }
    if str_at(obj, "/status/startTime").is_none_or(str::is_empty) {
        return Health::progressing("job not started");
    }
    Health::progressing(format!(
        "{succeeded}/{completions} completions, {active} active, {failed} failed"
    ))
}

fn pod(obj: &Value, now: DateTime<Utc>) -> Health {
    let conditions = conditions(obj);
    match str_at(obj, "/status/phase").unwrap_or_default() {
        "Succeeded" => Health::Ready,
        "Failed" => {
            let detail = str_at(obj, "/status/message")
                .filter(|m| !m.is_empty())
                .or_else(|| str_at(obj, "/status/reason").filter(|r| !r.is_empty()));
            Health::degraded(match detail {
                Some(detail) => format!("pod failed: {detail}"),
                None => "pod failed".to_owned(),
            })
        }
        "Running" => {
            if find(&conditions, "Ready").is_some_and(|c| c.is_true()) {
                return Health::Ready;
            }
            let crashing = crash_looping(obj, "containerStatuses");
            if !crashing.is_empty() {
                return Health::degraded(format!("crash looping: {}", crashing.join(", ")));
            }
            Health::progressing(match waiting(obj, "containerStatuses") {
                Some(waiting) => format!("running, not ready: {waiting}"),
                None => "running, not ready".to_owned(),
            })
        }
        "Pending" => {
            let crashing = crash_looping(obj, "initContainerStatuses");
            if !crashing.is_empty() {
                return Health::degraded(format!(
                    "init container crash looping: {}",
                    crashing.join(", ")
                ));
            }
            if let Some(c) = find(&conditions, "PodScheduled")
                && c.status == "False"
                && c.reason == "Unschedulable"
            {
                let created = str_at(obj, "/metadata/creationTimestamp")
                    .and_then(|ts| DateTime::parse_from_rfc3339(ts).ok())
                    .map(|ts| ts.with_timezone(&Utc));
                let within_window = created.is_some_and(|created| now - created < SCHEDULE_WINDOW);
                return if within_window {
                    Health::progressing("not scheduled yet")
                } else {
                    Health::degraded(format!("unschedulable: {}", c.text("no node fits")))
                };
            }
            let waiting =
                waiting(obj, "initContainerStatuses").or_else(|| waiting(obj, "containerStatuses"));
            Health::progressing(match waiting {
                Some(waiting) => format!("pending: {waiting}"),
                None => "pending".to_owned(),
            })
        }
        "" => Health::progressing("not observed by the kubelet yet"),
        other => Health::progressing(format!("phase {other}")),
    }
}

/// Names of containers in `field` (`containerStatuses`, ...) waiting in
/// CrashLoopBackOff.
fn crash_looping<'a>(obj: &'a Value, field: &str) -> Vec<&'a str> {
    container_statuses(obj, field)
        .filter(|(_, reason, _)| *reason == "CrashLoopBackOff")
        .map(|(name, _, _)| name)
        .collect()
}

/// The first waiting container in `field`, as `name: Reason (message)`.
fn waiting(obj: &Value, field: &str) -> Option<String> {
    container_statuses(obj, field)
        .find(|(_, reason, _)| !reason.is_empty())
        .map(|(name, reason, message)| match message {
            "" => format!("{name} {reason}"),
            message => format!("{name} {reason} ({message})"),
        })
}

/// `(name, waiting reason, waiting message)` of each container status in
/// `field`; reason and message are empty when the container is not waiting.
fn container_statuses<'a>(
    obj: &'a Value,
    field: &str,
) -> impl Iterator<Item = (&'a str, &'a str, &'a str)> {
    obj.get("status")
        .and_then(|s| s.get(field))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|cs| {
            let waiting = at(cs, "/state/waiting").unwrap_or(&Value::Null);
            (
                str_field(cs, "name"),
                str_field(waiting, "reason"),
                str_field(waiting, "message"),
            )
        })
}

// ----------------------------------------------------------- other kinds

fn pvc(obj: &Value) -> Health {
    match str_at(obj, "/status/phase").unwrap_or_default() {
        "Bound" => Health::Ready,
        "Lost" => Health::degraded("volume lost"),
        "" => Health::progressing("not bound yet"),
        phase => Health::progressing(format!("not bound yet (phase {phase})")),
    }
}

fn service(obj: &Value) -> Health {
    // kstatus: only a LoadBalancer waits, and only for its cluster IP (not for
    // an external address, which some clusters never assign).
    let load_balancer = str_at(obj, "/spec/type") == Some("LoadBalancer");
    if load_balancer && str_at(obj, "/spec/clusterIP").is_none_or(str::is_empty) {
        return Health::progressing("waiting for a cluster IP");
    }
    Health::Ready
}

fn namespace(obj: &Value) -> Health {
    match str_at(obj, "/status/phase") {
        Some("Terminating") => Health::progressing("terminating"),
        _ => Health::Ready,
    }
}

fn crd(obj: &Value) -> Health {
    for c in conditions(obj) {
        if c.type_ == "NamesAccepted" && c.status == "False" {
            return Health::degraded(format!("names not accepted: {}", c.text("conflict")));
        }
        if c.type_ == "Established" {
            if c.status == "False" && c.reason != "Installing" {
                return Health::degraded(format!("not established: {}", c.text("unknown")));
            }
            if c.is_true() {
                return Health::Ready;
            }
        }
    }
    Health::progressing("not established yet")
}

fn api_service(obj: &Value) -> Health {
    match find(&conditions(obj), "Available") {
        Some(c) if c.is_true() => Health::Ready,
        Some(c) => Health::progressing(format!("not available: {}", c.text("unknown"))),
        None => Health::progressing("not available yet"),
    }
}

// ---------------------------------------------------------------- helpers

fn pending_termination(extra: i64) -> String {
    if extra == 1 {
        "1 old replica pending termination".to_owned()
    } else {
        format!("{extra} old replicas pending termination")
    }
}

/// The value at a JSON pointer whose steps need no unescaping (this
/// module's own literals): `Value::pointer` allocates two strings per step,
/// which was most of judging a ConfigMap's health.
fn at<'a>(obj: &'a Value, pointer: &str) -> Option<&'a Value> {
    pointer
        .split('/')
        .skip(1)
        .try_fold(obj, |value, step| match value {
            Value::Object(map) => map.get(step),
            Value::Array(items) => items.get(step.parse::<usize>().ok()?),
            _ => None,
        })
}

fn str_at<'a>(obj: &'a Value, pointer: &str) -> Option<&'a str> {
    at(obj, pointer).and_then(Value::as_str)
}

fn int_at(obj: &Value, pointer: &str) -> Option<i64> {
    at(obj, pointer).and_then(Value::as_i64)
}

/// A `status` count, 0 when absent (the controllers omit zero values).
fn status_int(obj: &Value, field: &str) -> i64 {
    obj.get("status")
        .and_then(|s| s.get(field))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

struct Cond<'a> {
    type_: &'a str,
    status: &'a str,
    reason: &'a str,
    message: &'a str,
}

impl Cond<'_> {
    fn is_true(&self) -> bool {
        self.status == "True"
    }

    /// The condition's message, else its reason, else `fallback`.
    fn text(&self, fallback: &str) -> String {
        [self.message, self.reason, fallback]
            .into_iter()
            .find(|s| !s.is_empty())
            .unwrap_or_default()
            .to_owned()
    }
}

fn conditions(obj: &Value) -> Vec<Cond<'_>> {
    at(obj, "/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| Cond {
            type_: str_field(c, "type"),
            status: str_field(c, "status"),
            reason: str_field(c, "reason"),
            message: str_field(c, "message"),
        })
        .collect()
}

fn str_field<'a>(obj: &'a Value, name: &str) -> &'a str {
    obj.get(name).and_then(Value::as_str).unwrap_or_default()
}

fn find<'a, 'b>(conditions: &'b [Cond<'a>], type_: &str) -> Option<&'b Cond<'a>> {
    conditions.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2025-01-02T03:04:05Z")
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default()
    }

    fn h(obj: Value) -> Health {
        health_at(&obj, now())
    }

    fn progressing(reason: &str) -> Health {
        Health::progressing(reason)
    }

    fn degraded(reason: &str) -> Health {
        Health::degraded(reason)
    }

    fn cond(type_: &str, status: &str, reason: &str, message: &str) -> Value {
        json!({"type": type_, "status": status, "reason": reason, "message": message,
               "lastTransitionTime": "2025-01-02T03:00:00Z"})
    }

    // ------------------------------------------------------------ the type

    #[test]
    fn health_api() {
        assert!(Health::Ready.is_ready());
        assert!(!progressing("x").is_ready());
        assert!(progressing("x").is_progressing());
        assert!(degraded("x").is_degraded());
        assert_eq!(Health::Ready.reason(), None);
        assert_eq!(degraded("boom").reason(), Some("boom"));
        assert_eq!(Health::Ready.to_string(), "Ready");
        assert_eq!(
            progressing("2/3 replicas available").to_string(),
            "Progressing: 2/3 replicas available"
        );
        assert_eq!(degraded("boom").to_string(), "Degraded: boom");
    }

    #[test]
    fn health_serde() {
        assert_eq!(
            serde_json::to_value(Health::Ready).ok(),
            Some(json!({"status": "Ready"}))
        );
        assert_eq!(
            serde_json::to_value(progressing("1/2 pods ready")).ok(),
            Some(json!({"status": "Progressing", "reason": "1/2 pods ready"}))
        );
        let back: Option<Health> =
            serde_json::from_value(json!({"status": "Degraded", "reason": "x"})).ok();
        assert_eq!(back, Some(degraded("x")));
    }

    // ------------------------------------------------------------ generic

    #[test]
    fn objects_without_status_are_ready() {
        for obj in [
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {}}),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}),
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa"}}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "r"}}),
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "generation": 3}}),
        ] {
            assert_eq!(h(obj.clone()), Health::Ready, "{obj}");
        }
    }

    #[test]
    fn deletion_timestamp_is_terminating_for_every_kind() {
        for (api_version, kind) in [
            ("v1", "ConfigMap"),
            ("apps/v1", "Deployment"),
            ("v1", "Namespace"),
            ("example.com/v1", "Widget"),
        ] {
            let obj = json!({"apiVersion": api_version, "kind": kind,
                "metadata": {"name": "x", "deletionTimestamp": "2025-01-02T03:04:00Z"},
                "status": {"phase": "Active", "conditions": [cond("Ready", "True", "", "")]}});
            assert_eq!(h(obj), progressing("terminating"), "{kind}");
        }
    }

    #[test]
    fn unobserved_generation_is_progressing() {
        let obj = json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "generation": 3},
            "status": {"observedGeneration": 2, "conditions": [cond("Ready", "True", "", "")]}});
        assert_eq!(
            h(obj),
            progressing("generation 3 not yet observed (observed 2)")
        );

        let observed = json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "generation": 3},
            "status": {"observedGeneration": 3}});
        assert_eq!(h(observed), Health::Ready);

        // No observedGeneration at all: the check cannot be made (kstatus).
        let no_observed = json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "generation": 3}, "status": {}});
        assert_eq!(h(no_observed), Health::Ready);
    }

    #[test]
    fn generation_check_comes_before_kind_rules() {
        let obj = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "generation": 5},
            "spec": {"replicas": 1},
            "status": {"observedGeneration": 4, "replicas": 1, "updatedReplicas": 1,
                       "readyReplicas": 1, "availableReplicas": 1,
                       "conditions": [cond("Available", "True", "MinimumReplicasAvailable", ""),
                                      cond("Progressing", "True", "NewReplicaSetAvailable", "")]}});
        assert_eq!(
            h(obj),
            progressing("generation 5 not yet observed (observed 4)")
        );
    }

    #[test]
    fn reconciling_and_stalled_conditions() {
        let reconciling = json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w"},
            "status": {"conditions": [cond("Reconciling", "True", "Provisioning", "creating the bucket"),
                                      cond("Ready", "True", "", "")]}});
        assert_eq!(h(reconciling), progressing("creating the bucket"));

        let stalled = json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w"},
            "status": {"conditions": [cond("Stalled", "True", "QuotaExceeded", "")]}});
        assert_eq!(h(stalled), degraded("QuotaExceeded"));

        let not_stalled = json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w"},
            "status": {"conditions": [cond("Stalled", "False", "", ""), cond("Reconciling", "False", "", "")]}});
        assert_eq!(h(not_stalled), Health::Ready);

        // Stalled applies to built-in kinds too, before their own rules.
        let stalled_job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
            "status": {"conditions": [cond("Stalled", "True", "", "stuck"), cond("Complete", "True", "", "")]}});
        assert_eq!(h(stalled_job), degraded("stuck"));
    }

    #[test]
    fn generic_ready_condition() {
        let with = |status: &str, reason: &str, message: &str| {
            json!({"apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": {"name": "c"},
                   "status": {"conditions": [cond("Ready", status, reason, message)]}})
        };
        assert_eq!(h(with("True", "Ready", "")), Health::Ready);
        assert_eq!(
            h(with(
                "False",
                "Issuing",
                "Issuing certificate as Secret does not exist"
            )),
            progressing("Issuing certificate as Secret does not exist")
        );
        assert_eq!(h(with("False", "Pending", "")), progressing("Pending"));
        assert_eq!(h(with("False", "", "")), progressing("not ready"));
        assert_eq!(h(with("Unknown", "", "")), progressing("readiness unknown"));
        // Other conditions alone decide nothing.
        let other = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
            "status": {"conditions": [cond("Synced", "False", "", "")]}});
        assert_eq!(h(other), Health::Ready);
    }

    #[test]
    fn kinds_judged_by_metadata_need_nothing_else() {
        for kind in ["ConfigMap", "Secret"] {
            assert!(judged_by_metadata("", kind));
            for meta in [
                json!({"name": "x"}),
                json!({"name": "x", "deletionTimestamp": "2026-01-01T00:00:00Z"}),
            ] {
                let only = json!({"apiVersion": "v1", "kind": kind, "metadata": meta});
                let mut whole = only.clone();
                whole["data"] = json!({"a": "b"});
                whole["type"] = json!("Opaque");
                whole["immutable"] = json!(true);
                assert_eq!(h(whole), h(only));
            }
        }
        for (group, kind) in [
            ("", "Service"),
            ("", "Pod"),
            ("apps", "Deployment"),
            ("x.io", "ConfigMap"),
        ] {
            assert!(!judged_by_metadata(group, kind), "{group}/{kind}");
        }
    }

    #[test]
    fn malformed_status_does_not_panic() {
        for status in [
            json!(null),
            json!("weird"),
            json!({"conditions": "nope"}),
            json!({"conditions": [1, "x", null, {"type": 3}]}),
            json!({"replicas": "three"}),
        ] {
            for (api_version, kind) in [
                ("apps/v1", "Deployment"),
                ("apps/v1", "StatefulSet"),
                ("apps/v1", "DaemonSet"),
                ("batch/v1", "Job"),
                ("v1", "Pod"),
                ("v1", "Service"),
                ("example.com/v1", "Widget"),
            ] {
                let _ = h(
                    json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"},
                                 "status": status.clone()}),
                );
            }
        }
        assert_eq!(h(json!({})), Health::Ready);
        assert_eq!(h(json!(null)), Health::Ready);
    }

    // -------------------------------------------------------- Deployment

    fn deployment(spec_replicas: Option<i64>, status: Value) -> Value {
        let mut spec = json!({"progressDeadlineSeconds": 600});
        if let Some(replicas) = spec_replicas {
            spec["replicas"] = json!(replicas);
        }
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "namespace": "default", "generation": 2},
               "spec": spec, "status": status})
    }

    fn rolled_out() -> Value {
        json!([
            cond(
                "Available",
                "True",
                "MinimumReplicasAvailable",
                "Deployment has minimum availability."
            ),
            cond(
                "Progressing",
                "True",
                "NewReplicaSetAvailable",
                "ReplicaSet \"web-1\" has successfully progressed."
            )
        ])
    }

    #[test]
    fn deployment_ready() {
        let obj = deployment(
            Some(3),
            json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 3,
            "readyReplicas": 3, "availableReplicas": 3, "conditions": rolled_out()}),
        );
        assert_eq!(h(obj), Health::Ready);
    }

    #[test]
    fn deployment_replicas_default_to_one() {
        let obj = deployment(
            None,
            json!({"observedGeneration": 2, "replicas": 1, "updatedReplicas": 1,
            "readyReplicas": 1, "availableReplicas": 1, "conditions": rolled_out()}),
        );
        assert_eq!(h(obj), Health::Ready);
        let fresh = deployment(None, json!({}));
        assert_eq!(h(fresh), progressing("0/1 replicas created"));
        let no_status = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"progressDeadlineSeconds": 600}});
        assert_eq!(h(no_status), progressing("0/1 replicas created"));
    }

    #[test]
    fn deployment_scaled_to_zero() {
        let obj = deployment(
            Some(0),
            json!({"observedGeneration": 2, "conditions": [
            cond("Available", "True", "MinimumReplicasAvailable", ""),
            cond("Progressing", "True", "NewReplicaSetAvailable", "")]}),
        );
        assert_eq!(h(obj), Health::Ready);
    }

    #[test]
    fn deployment_rollout_steps() {
        let status = |replicas: i64, updated: i64, ready: i64, available: i64| {
            deployment(
                Some(3),
                json!({"observedGeneration": 2, "replicas": replicas,
                "updatedReplicas": updated, "readyReplicas": ready, "availableReplicas": available,
                "conditions": [cond("Available", "True", "MinimumReplicasAvailable", ""),
                               cond("Progressing", "True", "ReplicaSetUpdated", "")]}),
            )
        };
        assert_eq!(h(status(2, 2, 2, 2)), progressing("2/3 replicas created"));
        assert_eq!(h(status(3, 1, 3, 3)), progressing("1/3 replicas updated"));
        assert_eq!(
            h(status(4, 3, 3, 3)),
            progressing("1 old replica pending termination")
        );
        assert_eq!(
            h(status(5, 3, 3, 3)),
            progressing("2 old replicas pending termination")
        );
        assert_eq!(h(status(3, 3, 3, 2)), progressing("2/3 replicas available"));
        assert_eq!(h(status(3, 3, 2, 3)), progressing("2/3 replicas ready"));
        // Counts are complete but the controller has not said the new
        // ReplicaSet is available yet.
        assert_eq!(
            h(status(3, 3, 3, 3)),
            progressing("waiting for the new ReplicaSet to become available")
        );
    }

    #[test]
    fn deployment_not_available() {
        let obj = deployment(
            Some(1),
            json!({"observedGeneration": 2, "replicas": 1, "updatedReplicas": 1,
            "readyReplicas": 1, "availableReplicas": 1, "conditions": [
                cond("Available", "False", "MinimumReplicasUnavailable", ""),
                cond("Progressing", "True", "NewReplicaSetAvailable", "")]}),
        );
        assert_eq!(h(obj), progressing("waiting for minimum availability"));
    }

    #[test]
    fn deployment_without_progress_deadline_skips_progressing_condition() {
        let obj = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": 1},
            "status": {"replicas": 1, "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1,
                       "conditions": [cond("Available", "True", "", "")]}});
        assert_eq!(h(obj), Health::Ready);
        let max = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": 1, "progressDeadlineSeconds": i32::MAX},
            "status": {"replicas": 1, "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1,
                       "conditions": [cond("Available", "True", "", "")]}});
        assert_eq!(h(max), Health::Ready);
    }

    #[test]
    fn deployment_progress_deadline_exceeded_is_degraded() {
        let obj = deployment(
            Some(3),
            json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 1,
            "readyReplicas": 2, "availableReplicas": 2, "conditions": [
                cond("Available", "True", "MinimumReplicasAvailable", ""),
                cond("Progressing", "False", "ProgressDeadlineExceeded",
                     "ReplicaSet \"web-2\" has timed out progressing.")]}),
        );
        assert_eq!(
            h(obj),
            degraded("progress deadline exceeded: ReplicaSet \"web-2\" has timed out progressing.")
        );
    }

    #[test]
    fn extensions_deployment_uses_the_same_rules() {
        let obj = json!({"apiVersion": "extensions/v1beta1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": 2}, "status": {"replicas": 1}});
        assert_eq!(h(obj), progressing("1/2 replicas created"));
        // Same kind name in another group is not a Deployment.
        let other = json!({"apiVersion": "example.com/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": 2}, "status": {"replicas": 1}});
        assert_eq!(h(other), Health::Ready);
    }

    // ------------------------------------------------------- StatefulSet

    fn sts(spec: Value, status: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
               "metadata": {"name": "db", "generation": 1}, "spec": spec, "status": status})
    }

    #[test]
    fn statefulset_ready_without_partition() {
        let obj = sts(
            json!({"replicas": 3, "updateStrategy": {"type": "RollingUpdate"}}),
            json!({"observedGeneration": 1, "replicas": 3, "readyReplicas": 3, "currentReplicas": 3,
                   "updatedReplicas": 3, "currentRevision": "db-1", "updateRevision": "db-1"}),
        );
        assert_eq!(h(obj), Health::Ready);
    }

    #[test]
    fn statefulset_rollout_steps() {
        let spec = json!({"replicas": 3, "updateStrategy": {"type": "RollingUpdate"}});
        let status = |replicas: i64, ready: i64, current: i64, cur_rev: &str, upd_rev: &str| {
            sts(
                spec.clone(),
                json!({"observedGeneration": 1, "replicas": replicas, "readyReplicas": ready,
                "currentReplicas": current, "updatedReplicas": 0,
                "currentRevision": cur_rev, "updateRevision": upd_rev}),
            )
        };
        assert_eq!(
            h(status(2, 2, 2, "a", "a")),
            progressing("2/3 replicas created")
        );
        assert_eq!(
            h(status(3, 1, 3, "a", "a")),
            progressing("1/3 replicas ready")
        );
        assert_eq!(
            h(status(4, 4, 3, "a", "a")),
            progressing("1 old replica pending termination")
        );
        assert_eq!(
            h(status(3, 3, 2, "a", "a")),
            progressing("2/3 replicas at the current revision")
        );
        assert_eq!(
            h(status(3, 3, 3, "db-1", "db-2")),
            progressing("rolling out revision db-2")
        );
    }

    #[test]
    fn statefulset_replicas_default_to_one() {
        let obj = sts(json!({}), json!({"observedGeneration": 1}));
        assert_eq!(h(obj), progressing("0/1 replicas created"));
    }

    #[test]
    fn statefulset_partition() {
        // The apiserver defaults partition to 0, so this is the common shape.
        let spec = |partition: i64| json!({"replicas": 4, "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": partition}}});
        let status = |updated: i64| {
            json!({"observedGeneration": 1, "replicas": 4, "readyReplicas": 4, "currentReplicas": 4 - updated,
                   "updatedReplicas": updated, "currentRevision": "db-1", "updateRevision": "db-2"})
        };
        assert_eq!(h(sts(spec(0), status(4))), Health::Ready);
        assert_eq!(
            h(sts(spec(0), status(3))),
            progressing("3/4 replicas updated (partition 0)")
        );
        // Ordinals 2 and 3 are updated; 0 and 1 stay at the old revision.
        assert_eq!(h(sts(spec(2), status(2))), Health::Ready);
        assert_eq!(
            h(sts(spec(2), status(1))),
            progressing("1/2 replicas updated (partition 2)")
        );
        // A partition above the replica count updates nothing.
        assert_eq!(h(sts(spec(10), status(0))), Health::Ready);
    }

    #[test]
    fn statefulset_on_delete_is_ready() {
        let obj = sts(
            json!({"replicas": 3, "updateStrategy": {"type": "OnDelete"}}),
            json!({"observedGeneration": 1, "replicas": 1}),
        );
        assert_eq!(h(obj), Health::Ready);
    }

    // --------------------------------------------------------- DaemonSet

    fn ds(status: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
               "metadata": {"name": "agent", "generation": 1}, "status": status})
    }

    #[test]
    fn daemonset_ready() {
        let obj = ds(
            json!({"observedGeneration": 1, "desiredNumberScheduled": 2, "currentNumberScheduled": 2,
            "updatedNumberScheduled": 2, "numberAvailable": 2, "numberReady": 2}),
        );
        assert_eq!(h(obj), Health::Ready);
        // No node matches: nothing to wait for.
        let none = ds(json!({"observedGeneration": 1, "desiredNumberScheduled": 0}));
        assert_eq!(h(none), Health::Ready);
    }

    #[test]
    fn daemonset_rollout_steps() {
        let status = |current: i64, updated: i64, available: i64, ready: i64| {
            ds(
                json!({"observedGeneration": 1, "desiredNumberScheduled": 3, "currentNumberScheduled": current,
                "updatedNumberScheduled": updated, "numberAvailable": available, "numberReady": ready}),
            )
        };
        assert_eq!(h(status(2, 2, 2, 2)), progressing("2/3 pods scheduled"));
        assert_eq!(h(status(3, 1, 3, 3)), progressing("1/3 pods updated"));
        assert_eq!(h(status(3, 3, 2, 3)), progressing("2/3 pods available"));
        assert_eq!(h(status(3, 3, 3, 0)), progressing("0/3 pods ready"));
    }

    #[test]
    fn daemonset_needs_the_controller_to_have_acted() {
        assert_eq!(
            h(ds(
                json!({"desiredNumberScheduled": 1, "currentNumberScheduled": 1, "updatedNumberScheduled": 1,
                        "numberAvailable": 1, "numberReady": 1})
            )),
            progressing("waiting for the DaemonSet controller")
        );
        assert_eq!(
            h(ds(json!({"observedGeneration": 1}))),
            progressing("waiting for the DaemonSet controller")
        );
        let no_generation = json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "a"},
            "status": {"observedGeneration": 1, "desiredNumberScheduled": 0}});
        assert_eq!(
            h(no_generation),
            progressing("waiting for the DaemonSet controller")
        );
    }

    // -------------------------------------------------------- ReplicaSet

    #[test]
    fn replicaset() {
        let rs = |status: Value| {
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web-1", "generation": 1},
                   "spec": {"replicas": 2}, "status": status})
        };
        assert_eq!(
            h(rs(
                json!({"observedGeneration": 1, "replicas": 2, "fullyLabeledReplicas": 2,
                        "readyReplicas": 2, "availableReplicas": 2})
            )),
            Health::Ready
        );
        assert_eq!(
            h(rs(
                json!({"observedGeneration": 1, "replicas": 2, "fullyLabeledReplicas": 1,
                        "readyReplicas": 2, "availableReplicas": 2})
            )),
            progressing("1/2 replicas labelled")
        );
        assert_eq!(
            h(rs(
                json!({"observedGeneration": 1, "replicas": 2, "fullyLabeledReplicas": 2,
                        "readyReplicas": 2, "availableReplicas": 1})
            )),
            progressing("1/2 replicas available")
        );
        assert_eq!(
            h(rs(
                json!({"observedGeneration": 1, "replicas": 2, "fullyLabeledReplicas": 2,
                        "readyReplicas": 1, "availableReplicas": 2})
            )),
            progressing("1/2 replicas ready")
        );
        assert_eq!(
            h(rs(
                json!({"observedGeneration": 1, "replicas": 3, "fullyLabeledReplicas": 3,
                        "readyReplicas": 3, "availableReplicas": 3})
            )),
            progressing("1 old replica pending termination")
        );
        assert_eq!(
            h(rs(
                json!({"observedGeneration": 1, "replicas": 0, "conditions": [
                cond("ReplicaFailure", "True", "FailedCreate", "pods \"web-1-x\" is forbidden: exceeded quota")]})
            )),
            progressing("replica failure: pods \"web-1-x\" is forbidden: exceeded quota")
        );
    }

    // --------------------------------------------------------------- Job

    fn job(spec: Value, status: Value) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "migrate"},
               "spec": spec, "status": status})
    }

    #[test]
    fn job_complete_is_ready() {
        let obj = job(
            json!({"completions": 1}),
            json!({"startTime": "2025-01-02T03:00:00Z", "succeeded": 1,
            "conditions": [cond("SuccessCriteriaMet", "True", "CompletionsReached", ""),
                           cond("Complete", "True", "CompletionsReached", "Reached expected number of succeeded pods")]}),
        );
        assert_eq!(h(obj), Health::Ready);
    }

    #[test]
    fn job_failed_is_degraded() {
        let obj = job(
            json!({"backoffLimit": 2}),
            json!({"startTime": "2025-01-02T03:00:00Z", "failed": 3,
            "conditions": [cond("FailureTarget", "True", "BackoffLimitExceeded", "Job has reached the specified backoff limit"),
                           cond("Failed", "True", "BackoffLimitExceeded", "Job has reached the specified backoff limit")]}),
        );
        assert_eq!(
            h(obj),
            degraded("job failed (3 failed pods): Job has reached the specified backoff limit")
        );
    }

    #[test]
    fn running_job_is_progressing() {
        assert_eq!(h(job(json!({}), json!({}))), progressing("job not started"));
        assert_eq!(
            h(job(
                json!({"completions": 5, "parallelism": 2}),
                json!({"startTime": "2025-01-02T03:00:00Z", "active": 2, "succeeded": 1, "failed": 1})
            )),
            progressing("1/5 completions, 2 active, 1 failed")
        );
        // completions defaults to parallelism, parallelism to 1.
        assert_eq!(
            h(job(
                json!({"parallelism": 3}),
                json!({"startTime": "2025-01-02T03:00:00Z", "active": 3})
            )),
            progressing("0/3 completions, 3 active, 0 failed")
        );
        assert_eq!(
            h(job(
                json!({}),
                json!({"startTime": "2025-01-02T03:00:00Z", "active": 1})
            )),
            progressing("0/1 completions, 1 active, 0 failed")
        );
        // A False Complete/Failed condition decides nothing.
        assert_eq!(
            h(job(
                json!({}),
                json!({"conditions": [cond("Complete", "False", "", ""), cond("Failed", "False", "", "")]})
            )),
            progressing("job not started")
        );
    }

    #[test]
    fn suspended_job_is_ready() {
        let obj = job(
            json!({"suspend": true}),
            json!({"conditions": [cond("Suspended", "True", "JobSuspended", "")]}),
        );
        assert_eq!(h(obj), Health::Ready);
    }

    #[test]
    fn cronjob_and_pdb_are_ready() {
        assert_eq!(
            h(
                json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"}, "status": {}})
            ),
            Health::Ready
        );
        assert_eq!(
            h(
                json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                     "metadata": {"name": "p", "generation": 1},
                     "status": {"observedGeneration": 1, "currentHealthy": 0, "desiredHealthy": 2}})
            ),
            Health::Ready
        );
    }

    // --------------------------------------------------------------- Pod

    fn pod(status: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "p", "namespace": "default", "creationTimestamp": "2025-01-02T03:04:00Z"},
               "status": status})
    }

    #[test]
    fn pod_phases() {
        assert_eq!(h(pod(json!({"phase": "Succeeded"}))), Health::Ready);
        assert_eq!(
            h(pod(
                json!({"phase": "Running", "conditions": [cond("Ready", "True", "", "")]})
            )),
            Health::Ready
        );
        assert_eq!(
            h(pod(
                json!({"phase": "Running", "conditions": [cond("Ready", "False", "ContainersNotReady", "")]})
            )),
            progressing("running, not ready")
        );
        assert_eq!(
            h(pod(json!({}))),
            progressing("not observed by the kubelet yet")
        );
        assert_eq!(
            h(pod(json!({"phase": "Unknown"}))),
            progressing("phase Unknown")
        );
        assert_eq!(h(pod(json!({"phase": "Pending"}))), progressing("pending"));
    }

    #[test]
    fn failed_pod_is_degraded() {
        assert_eq!(
            h(pod(json!({"phase": "Failed", "reason": "Evicted",
                         "message": "The node was low on resource: memory."}))),
            degraded("pod failed: The node was low on resource: memory.")
        );
        assert_eq!(
            h(pod(json!({"phase": "Failed", "reason": "Evicted"}))),
            degraded("pod failed: Evicted")
        );
        assert_eq!(h(pod(json!({"phase": "Failed"}))), degraded("pod failed"));
    }

    #[test]
    fn crash_looping_pod_is_degraded() {
        let obj = pod(json!({"phase": "Running",
        "conditions": [cond("Ready", "False", "ContainersNotReady", "")],
        "containerStatuses": [
            {"name": "app", "ready": false, "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m0s"}}},
            {"name": "sidecar", "ready": true, "state": {"running": {}}},
            {"name": "worker", "ready": false, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
        ]}));
        assert_eq!(h(obj), degraded("crash looping: app, worker"));

        let init = pod(json!({"phase": "Pending",
            "initContainerStatuses": [{"name": "migrate", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}));
        assert_eq!(h(init), degraded("init container crash looping: migrate"));
    }

    #[test]
    fn waiting_containers_are_named() {
        let obj = pod(json!({"phase": "Pending",
            "conditions": [cond("PodScheduled", "True", "", "")],
            "containerStatuses": [{"name": "app", "state": {"waiting": {"reason": "ImagePullBackOff",
                "message": "Back-off pulling image \"nope:1\""}}}]}));
        assert_eq!(
            h(obj),
            progressing("pending: app ImagePullBackOff (Back-off pulling image \"nope:1\")")
        );
        let running = pod(json!({"phase": "Running",
            "containerStatuses": [{"name": "app", "state": {"running": {}}},
                                  {"name": "proxy", "state": {"waiting": {"reason": "ContainerCreating"}}}]}));
        assert_eq!(
            h(running),
            progressing("running, not ready: proxy ContainerCreating")
        );
    }

    #[test]
    fn unschedulable_pod_gets_a_window() {
        let status = json!({"phase": "Pending", "conditions": [cond("PodScheduled", "False", "Unschedulable",
            "0/2 nodes are available: 2 Insufficient cpu.")]});
        let at = |created: &str| {
            let mut obj = pod(status.clone());
            obj["metadata"]["creationTimestamp"] = json!(created);
            h(obj)
        };
        // now() is 03:04:05.
        assert_eq!(at("2025-01-02T03:04:00Z"), progressing("not scheduled yet"));
        assert_eq!(
            at("2025-01-02T03:03:50Z"),
            degraded("unschedulable: 0/2 nodes are available: 2 Insufficient cpu.")
        );
        assert_eq!(
            at("2025-01-02T03:03:00Z"),
            degraded("unschedulable: 0/2 nodes are available: 2 Insufficient cpu.")
        );
        // Without a creation time the window cannot be measured.
        let mut no_ts = pod(status.clone());
        no_ts["metadata"]
            .as_object_mut()
            .map(|m| m.remove("creationTimestamp"));
        assert!(h(no_ts).is_degraded());
    }

    // ------------------------------------------------------ other kinds

    #[test]
    fn pvc() {
        let pvc = |phase: Option<&str>| {
            let status = phase.map_or(json!({}), |p| json!({"phase": p}));
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"}, "status": status})
        };
        assert_eq!(h(pvc(Some("Bound"))), Health::Ready);
        assert_eq!(
            h(pvc(Some("Pending"))),
            progressing("not bound yet (phase Pending)")
        );
        assert_eq!(h(pvc(None)), progressing("not bound yet"));
        assert_eq!(h(pvc(Some("Lost"))), degraded("volume lost"));
    }

    #[test]
    fn services() {
        let svc = |spec: Value| {
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": spec,
                   "status": {"loadBalancer": {}}})
        };
        assert_eq!(
            h(svc(json!({"type": "ClusterIP", "clusterIP": "10.0.0.10"}))),
            Health::Ready
        );
        assert_eq!(h(svc(json!({"clusterIP": "None"}))), Health::Ready);
        assert_eq!(
            h(svc(
                json!({"type": "ExternalName", "externalName": "example.com"})
            )),
            Health::Ready
        );
        assert_eq!(
            h(svc(json!({"type": "NodePort", "clusterIP": "10.0.0.11"}))),
            Health::Ready
        );
        // kstatus: a LoadBalancer is ready once it has a cluster IP, without
        // waiting for an external address.
        assert_eq!(
            h(svc(
                json!({"type": "LoadBalancer", "clusterIP": "10.0.0.12"})
            )),
            Health::Ready
        );
        assert_eq!(
            h(svc(json!({"type": "LoadBalancer"}))),
            progressing("waiting for a cluster IP")
        );
        assert_eq!(
            h(svc(json!({"type": "LoadBalancer", "clusterIP": ""}))),
            progressing("waiting for a cluster IP")
        );
    }

    #[test]
    fn namespaces() {
        let ns = |status: Value| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}, "status": status});
        assert_eq!(h(ns(json!({"phase": "Active"}))), Health::Ready);
        assert_eq!(h(ns(json!({}))), Health::Ready);
        assert_eq!(
            h(ns(json!({"phase": "Terminating"}))),
            progressing("terminating")
        );
    }

    #[test]
    fn crds() {
        let crd = |conditions: Value| {
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                   "metadata": {"name": "widgets.example.com", "generation": 1},
                   "status": {"conditions": conditions}})
        };
        assert_eq!(
            h(crd(json!([
                cond("NamesAccepted", "True", "NoConflicts", ""),
                cond("Established", "True", "InitialNamesAccepted", "")
            ]))),
            Health::Ready
        );
        assert_eq!(
            h(crd(json!([
                cond("NamesAccepted", "True", "NoConflicts", ""),
                cond(
                    "Established",
                    "False",
                    "Installing",
                    "the initial names have been accepted"
                )
            ]))),
            progressing("not established yet")
        );
        assert_eq!(h(crd(json!([]))), progressing("not established yet"));
        assert_eq!(
            h(
                json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                     "metadata": {"name": "x"}})
            ),
            progressing("not established yet")
        );
        assert_eq!(
            h(crd(json!([
                cond(
                    "NamesAccepted",
                    "False",
                    "MultipleNamesNotAllowed",
                    "\"w\" is already in use"
                ),
                cond(
                    "Established",
                    "False",
                    "NotAccepted",
                    "not all names are accepted"
                )
            ]))),
            degraded("names not accepted: \"w\" is already in use")
        );
        assert_eq!(
            h(crd(json!([cond(
                "Established",
                "False",
                "NotAccepted",
                ""
            )]))),
            degraded("not established: NotAccepted")
        );
    }

    #[test]
    fn api_services() {
        let svc = |conditions: Value| {
            json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                   "metadata": {"name": "v1beta1.metrics.k8s.io"}, "status": {"conditions": conditions}})
        };
        assert_eq!(
            h(svc(json!([cond("Available", "True", "Passed", "")]))),
            Health::Ready
        );
        assert_eq!(
            h(svc(json!([cond(
                "Available",
                "False",
                "MissingEndpoints",
                "endpoints for service/metrics-server in \"kube-system\" have no addresses"
            )]))),
            progressing(
                "not available: endpoints for service/metrics-server in \"kube-system\" have no addresses"
            )
        );
        assert_eq!(h(svc(json!([]))), progressing("not available yet"));
    }

    #[test]
    fn health_uses_the_clock() {
        // A freshly created object is within the window with the real clock.
        let created = Utc::now().to_rfc3339();
        let obj = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "creationTimestamp": created},
            "status": {"phase": "Pending", "conditions": [cond("PodScheduled", "False", "Unschedulable", "")]}});
        assert_eq!(health(&obj), progressing("not scheduled yet"));
    }
}

//! A build's Helm test hooks (`helm.sh/hook: test`), run on demand against
//! the live cluster (`kix test`): never part of a deploy, so neither the
//! engine's plan nor its records know them.
//!
//! Each test object, in package order, then `helm.sh/hook-weight`, then
//! identity: a previous run's object is deleted first when its
//! `helm.sh/hook-delete-policy` says `before-hook-creation` (Helm's default);
//! it is server-side applied with the Kix cluster's field manager; a Pod is
//! waited for until it Succeeded or Failed, a Job until it is Complete or
//! Failed (other kinds, a test's ConfigMap say, are only applied); then it
//! is deleted when the policy says `hook-succeeded` (and it passed) or
//! `hook-failed` (and it failed). Every test runs, whatever the others did.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kix_manifest::group_kind::{JOB, POD};
use kix_manifest::helm::{DeletePolicy, Hook};
use kix_manifest::{Build, Object};
use kube::api::{Api, DeleteParams, DynamicObject, LogParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiResource, Scope};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, ResourceExt};
use serde::Serialize;
use serde_json::Value;

/// How long a failed Pod's log request may take (a node that serves no logs
/// must not hold the report up).
const LOG_WAIT: Duration = Duration::from_secs(5);
/// The last lines of a failed Pod's log shown.
const LOG_LINES: i64 = 20;

/// What to run.
pub struct TestOptions {
    /// Only this package's tests.
    pub package: Option<String>,
    /// How long each test may take (and each deletion before or after it).
    pub timeout: Duration,
}

/// The outcome of one test object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Verdict {
    Passed,
    Failed,
}

/// One test object's run, as `kix test` reports it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TestResult {
    pub package: String,
    /// `Pod apps/web-test-connection`.
    pub object: String,
    pub verdict: Verdict,
    /// What was seen last: `Succeeded`, `Failed` (a Pod's phase),
    /// `Complete` (a Job), `Applied` (another kind), `TimedOut`, `Deleted`
    /// (gone before it finished), `Error` (kix could not run it).
    pub phase: String,
    /// Why it failed: the container's termination (reason, exit code,
    /// message), the Job's condition, or the error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The last lines of a failed Pod's log, when its node serves logs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub logs: Vec<String>,
    /// Deleted after the run by its `helm.sh/hook-delete-policy`.
    pub deleted: bool,
    pub seconds: u64,
}

/// The build's test objects to run, in order: package order, then weight,
/// then identity.
pub fn tests_of<'a>(build: &'a Build, options: &TestOptions) -> Vec<(&'a Object, Hook)> {
    let mut tests = Vec::new();
    for package in &build.packages {
        if options.package.as_ref().is_some_and(|p| *p != package.name) {
            continue;
        }
        let mut of_package: Vec<(&Object, Hook)> = package
            .tests
            .iter()
            .filter_map(|o| Some((o, kix_manifest::helm::hook_of(o).ok()??)))
            .collect();
        of_package.sort_by(|(a, ha), (b, hb)| (ha.weight, &a.key).cmp(&(hb.weight, &b.key)));
        tests.extend(of_package);
    }
    tests
}

/// Runs every test of `build` (as [`tests_of`] orders them) as Kix cluster
/// `build.cluster`; each result is given to `report` as soon as it is known.
pub async fn run(
    client: &Client,
    build: &Build,
    options: &TestOptions,
    mut report: impl FnMut(&TestResult),
) -> Vec<TestResult> {
    let manager = kix_api::field_manager(&build.cluster);
    let mut results = Vec::new();
    for (object, hook) in tests_of(build, options) {
        let started = Instant::now();
        let run = Run {
            client,
            object,
            hook: &hook,
            manager: &manager,
            timeout: options.timeout,
        };
        let mut result = match run.execute().await {
            Ok(result) => result,
            Err(error) => run.result(Verdict::Failed, "Error", Some(format!("{error:#}"))),
        };
        result.seconds = started.elapsed().as_secs();
        report(&result);
        results.push(result);
    }
    results
}

/// One test object's run.
struct Run<'a> {
    client: &'a Client,
    object: &'a Object,
    hook: &'a Hook,
    manager: &'a str,
    timeout: Duration,
}

impl Run<'_> {
    async fn execute(&self) -> anyhow::Result<TestResult> {
        let api = self.api().await?;
        let name = &self.object.key.name;
        if let Some(previous) = api.get_opt(name).await? {
            self.remove_previous(&api, &previous).await?;
        }
        let params = PatchParams::apply(self.manager);
        let applied = api
            .patch(name, &params, &Patch::Apply(self.object.manifest()))
            .await?;
        let mut result = match Finishing::of(self.object) {
            Some(finishing) => self.wait(&api, &applied, finishing).await?,
            None => self.result(Verdict::Passed, "Applied", None),
        };
        let delete = match result.verdict {
            Verdict::Passed => DeletePolicy::HookSucceeded,
            Verdict::Failed => DeletePolicy::HookFailed,
        };
        if self.hook.delete.contains(&delete) && result.phase != "Deleted" {
            self.delete(&api, &applied).await?;
            result.deleted = true;
        }
        Ok(result)
    }

    /// The API of the object's kind, in its namespace when it has one.
    async fn api(&self) -> anyhow::Result<Api<DynamicObject>> {
        let key = &self.object.key;
        let version = self.object.api_version.rsplit('/').next().unwrap_or("v1");
        let gvk = GroupVersionKind::gvk(&key.group, version, &key.kind);
        let (resource, capabilities) = kube::discovery::pinned_kind(self.client, &gvk).await?;
        Ok(match (&capabilities.scope, &key.namespace) {
            (Scope::Namespaced, Some(ns)) => api_in(self.client, &resource, Some(ns)),
            _ => api_in(self.client, &resource, None),
        })
    }

    /// A previous run's object: deleted when the policy says
    /// `before-hook-creation`, else in the way (as Helm refuses it).
    async fn remove_previous(
        &self,
        api: &Api<DynamicObject>,
        previous: &DynamicObject,
    ) -> anyhow::Result<()> {
        if !self.hook.delete.contains(&DeletePolicy::BeforeHookCreation) {
            anyhow::bail!(
                "{} exists from an earlier run and its helm.sh/hook-delete-policy has no \
                 before-hook-creation: delete it first",
                self.object.key
            );
        }
        self.delete(api, previous).await
    }

    /// Deletes the object and waits until it is gone.
    async fn delete(&self, api: &Api<DynamicObject>, live: &DynamicObject) -> anyhow::Result<()> {
        let name = live.name_any();
        api.delete(&name, &DeleteParams::background()).await?;
        let uid = live.uid().unwrap_or_default();
        let gone = await_condition(api.clone(), &name, conditions::is_deleted(&uid));
        match tokio::time::timeout(self.timeout, gone).await {
            Ok(waited) => Ok(waited.map(drop)?),
            Err(_) => anyhow::bail!(
                "{} is still there {}s after it was deleted",
                self.object.key,
                self.timeout.as_secs()
            ),
        }
    }

    /// Waits until the Pod or Job finished, or the timeout.
    async fn wait(
        &self,
        api: &Api<DynamicObject>,
        applied: &DynamicObject,
        finishing: Finishing,
    ) -> anyhow::Result<TestResult> {
        let name = applied.name_any();
        let uid = applied.uid().unwrap_or_default();
        let finished = move |o: Option<&DynamicObject>| {
            o.is_none_or(|o| o.uid() != Some(uid.clone()) || outcome(finishing, &o.data).is_some())
        };
        let waited =
            tokio::time::timeout(self.timeout, await_condition(api.clone(), &name, finished));
        let last = match waited.await {
            Ok(last) => last?,
            Err(_) => {
                let reason = format!("not finished after {}s", self.timeout.as_secs());
                return Ok(self.result(Verdict::Failed, "TimedOut", Some(reason)));
            }
        };
        let Some(last) = last.filter(|o| o.uid() == applied.uid()) else {
            let reason = "deleted before it finished; kix saw no outcome".to_owned();
            return Ok(self.result(Verdict::Failed, "Deleted", Some(reason)));
        };
        // `finished` held, so there is an outcome.
        let (verdict, phase) =
            outcome(finishing, &last.data).unwrap_or((Verdict::Failed, "Unknown"));
        let mut result = self.result(verdict, phase, None);
        if verdict == Verdict::Failed {
            result.reason = failure_reason(finishing, &last.data);
            if finishing == Finishing::Pod {
                result.logs = self.last_log_lines(&last).await;
            }
        }
        Ok(result)
    }

    /// The last lines of each container's log; none when the node serves
    /// no logs (a KWOK node) or takes too long.
    async fn last_log_lines(&self, pod: &DynamicObject) -> Vec<String> {
        let Some(namespace) = pod.namespace() else {
            return Vec::new();
        };
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        let params = LogParams {
            tail_lines: Some(LOG_LINES),
            ..LogParams::default()
        };
        match tokio::time::timeout(LOG_WAIT, pods.logs(&pod.name_any(), &params)).await {
            Ok(Ok(text)) => text.lines().map(str::to_owned).collect(),
            Ok(Err(error)) => {
                tracing::debug!("no log of {}: {error}", self.object.key);
                Vec::new()
            }
            Err(_) => Vec::new(),
        }
    }

    fn result(&self, verdict: Verdict, phase: &str, reason: Option<String>) -> TestResult {
        TestResult {
            package: self.object.package.clone(),
            object: self.object.key.to_string(),
            verdict,
            phase: phase.to_owned(),
            reason,
            logs: Vec::new(),
            deleted: false,
            seconds: 0,
        }
    }
}

fn api_in(client: &Client, resource: &ApiResource, namespace: Option<&str>) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    }
}

/// The kinds of test object waited for until they finish.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Finishing {
    Pod,
    Job,
}

impl Finishing {
    fn of(object: &Object) -> Option<Finishing> {
        let group_kind = object.key.group_kind();
        if group_kind == POD {
            Some(Finishing::Pod)
        } else if group_kind == JOB {
            Some(Finishing::Job)
        } else {
            None
        }
    }
}

/// A finished Pod's or Job's verdict and phase; None while it runs.
fn outcome(finishing: Finishing, object: &Value) -> Option<(Verdict, &'static str)> {
    match finishing {
        Finishing::Pod => match object.pointer("/status/phase")?.as_str()? {
            "Succeeded" => Some((Verdict::Passed, "Succeeded")),
            "Failed" => Some((Verdict::Failed, "Failed")),
            _ => None,
        },
        Finishing::Job if job_condition(object, "Complete").is_some() => {
            Some((Verdict::Passed, "Complete"))
        }
        Finishing::Job if job_condition(object, "Failed").is_some() => {
            Some((Verdict::Failed, "Failed"))
        }
        Finishing::Job => None,
    }
}

/// The Job's condition `kind` when it is True.
fn job_condition<'a>(job: &'a Value, kind: &str) -> Option<&'a Value> {
    job.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind && c["status"] == "True")
}

/// Why a Pod or Job failed: each terminated container's reason, exit code
/// and message (`container check: Error, exit code 1: connection refused`),
/// else the Pod's own reason and message; a Job's Failed condition.
fn failure_reason(finishing: Finishing, object: &Value) -> Option<String> {
    if finishing == Finishing::Job {
        let condition = job_condition(object, "Failed")?;
        return Some(join_text(&condition["reason"], &condition["message"]));
    }
    let containers = object
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array);
    let terminated: Vec<String> = (containers.into_iter().flatten())
        .filter_map(|c| {
            let t = c.pointer("/state/terminated")?;
            let code = t["exitCode"].as_i64().unwrap_or_default();
            (code != 0).then(|| {
                let name = c["name"].as_str().unwrap_or("?");
                let reason = t["reason"].as_str().unwrap_or("terminated");
                let mut text = format!("container {name}: {reason}, exit code {code}");
                if let Some(message) = t["message"].as_str().filter(|m| !m.is_empty()) {
                    text.push_str(&format!(": {}", message.trim()));
                }
                text
            })
        })
        .collect();
    if !terminated.is_empty() {
        return Some(terminated.join("; "));
    }
    let status = object.get("status")?;
    let own = join_text(&status["reason"], &status["message"]);
    (!own.is_empty()).then_some(own)
}

/// `reason: message`, either alone, or empty.
fn join_text(reason: &Value, message: &Value) -> String {
    let parts: Vec<&str> = [reason.as_str(), message.as_str()]
        .into_iter()
        .flatten()
        .filter(|s| !s.is_empty())
        .collect();
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_failed_pod_names_its_containers_termination() {
        let pod = json!({"status": {"phase": "Failed", "containerStatuses": [
            {"name": "ok", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
            {"name": "check", "state": {"terminated": {"exitCode": 7, "reason": "Error",
                                                          "message": "connection refused\n"}}}
        ]}});
        assert_eq!(
            outcome(Finishing::Pod, &pod),
            Some((Verdict::Failed, "Failed"))
        );
        assert_eq!(
            failure_reason(Finishing::Pod, &pod).as_deref(),
            Some("container check: Error, exit code 7: connection refused")
        );
        let evicted = json!({"status": {"phase": "Failed", "reason": "DeadlineExceeded",
                                        "message": "Pod was active too long"}});
        assert_eq!(
            failure_reason(Finishing::Pod, &evicted).as_deref(),
            Some("DeadlineExceeded: Pod was active too long")
        );
        assert_eq!(
            outcome(Finishing::Pod, &json!({"status": {"phase": "Running"}})),
            None
        );
    }

    #[test]
    fn a_job_is_judged_by_its_conditions() {
        let done = json!({"status": {"conditions": [{"type": "Complete", "status": "True"}]}});
        assert_eq!(
            outcome(Finishing::Job, &done),
            Some((Verdict::Passed, "Complete"))
        );
        let failed = json!({"status": {"conditions": [
            {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
             "message": "Job has reached the specified backoff limit"}]}});
        assert_eq!(
            outcome(Finishing::Job, &failed),
            Some((Verdict::Failed, "Failed"))
        );
        assert_eq!(
            failure_reason(Finishing::Job, &failed).as_deref(),
            Some("BackoffLimitExceeded: Job has reached the specified backoff limit")
        );
        assert_eq!(outcome(Finishing::Job, &json!({"status": {}})), None);
    }
}

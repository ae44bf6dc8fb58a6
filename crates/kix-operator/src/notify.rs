//! Notifications (`--alerts FILE`): one notice per change of a record's
//! phase (Applying, Active, Degraded, Failed), per deletion budget hold,
//! drift fight and stuck deletion, to every alert that wants it
//! ([`kix_notify`] builds and delivers the requests).
//!
//! What is due is read off the records themselves, not off the write paths:
//! every record the operator's watch sees (each change, and a scan every
//! few seconds) is compared with its `status.notifications`, which says per
//! alert and kind of notice the last one delivered (or given up on). A
//! restarted operator or a new leader therefore sends a change whose notice
//! was not recorded yet, and none that was. Deliveries run in a task of
//! their own from a bounded queue, a few at a time, one at a time per
//! record and alert: a reconcile never waits for one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Secret as KubeSecret;
use kix_api::{Activation, Notified, Phase};
use kix_notify::{Alert, Alerts, Event, Notice, Retry, SecretKey};
use kube::api::Api;
use kube::{Client, ResourceExt};
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::controller::Context;
use crate::metrics::Metrics;

/// Deliveries waiting at most; past it a change waits for the next scan.
const QUEUE: usize = 1024;
/// Deliveries at once.
const CONCURRENT: usize = 4;
/// How often every record is compared with what was sent.
const SCAN: Duration = Duration::from_secs(2);

/// The alerts file, and what every notice is sent with.
pub struct Alerting {
    pub alerts: Vec<Alert>,
    /// The web view's base URL, for each notice's link.
    pub web: Option<String>,
    /// Where Secret references without a namespace are read.
    pub namespace: String,
    pub retry: Retry,
    http: kix_notify::HttpClient,
    /// The log has said that commit statuses need a source revision.
    said_no_revision: AtomicBool,
}

impl Alerting {
    /// Reads and checks `file`: Err names it and what is wrong.
    pub fn load(
        file: &std::path::Path,
        web: Option<String>,
        namespace: &str,
    ) -> anyhow::Result<Alerting> {
        let name = file.display().to_string();
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("reading the alerts file {name}"))?;
        let alerts = Alerts::parse(&name, &text)?;
        info!(
            file = %name,
            alerts = alerts.alerts.len(),
            "notifications: alerts read"
        );
        Ok(Alerting {
            alerts: alerts.alerts,
            web: web.map(|w| w.trim_end_matches('/').to_string()),
            namespace: namespace.to_string(),
            retry: Retry::default(),
            http: kix_notify::http_client(),
            said_no_revision: AtomicBool::new(false),
        })
    }
}

/// One notice due for one alert.
pub struct Job {
    record: String,
    alert: usize,
    notice: Notice,
    mark: Notified,
}

/// What this term as leader has queued and delivered.
#[derive(Default)]
struct State {
    /// (record, alert) with a delivery queued or running.
    in_flight: BTreeSet<(String, String)>,
    /// (record, alert, kind) → the last mark handled, newer than the
    /// cache's record may show.
    done: BTreeMap<(String, String, &'static str), Notified>,
}

/// The notifications of one term as leader (or shard holder).
pub struct Notifier {
    alerting: Arc<Alerting>,
    client: Client,
    metrics: Arc<Metrics>,
    state: Mutex<State>,
    queue: mpsc::Sender<Job>,
    /// Store path → the build's package versions, as reconciles read them.
    versions: Mutex<BTreeMap<String, String>>,
}

impl Notifier {
    /// A notifier and the receiving end of its queue, for [`run`].
    pub fn new(
        alerting: Arc<Alerting>,
        client: Client,
        metrics: Arc<Metrics>,
    ) -> (Arc<Notifier>, mpsc::Receiver<Job>) {
        let (queue, jobs) = mpsc::channel(QUEUE);
        let notifier = Notifier {
            alerting,
            client,
            metrics,
            state: Mutex::default(),
            queue,
            versions: Mutex::default(),
        };
        (Arc::new(notifier), jobs)
    }

    /// A reconcile read `build` at `path`: its version for the notices.
    pub fn note_build(&self, path: &str, build: &kix_manifest::Build) {
        let text = match build.packages.as_slice() {
            [] => return,
            [one] => one.version.clone(),
            many => many
                .iter()
                .map(|p| format!("{}@{}", p.name, p.version))
                .collect::<Vec<_>>()
                .join(","),
        };
        if let Ok(mut versions) = self.versions.lock() {
            // Bounded: the builds of the records the operator acts on.
            if versions.len() > 4096 {
                versions.clear();
            }
            versions.insert(path.to_string(), text);
        }
    }

    /// Queues every notice of `record` that an alert wants and that was
    /// neither sent nor queued yet. Never waits.
    pub fn observe(&self, record: &Activation) {
        let name = record.name_any();
        let cluster = record.cluster_name();
        for (event, mark) in current_notices(record) {
            for (index, alert) in self.alerting.alerts.iter().enumerate() {
                if !alert.wants(event, cluster) {
                    continue;
                }
                let mark = Notified {
                    alert: alert.name.clone(),
                    ..mark.clone()
                };
                if self.handled(record, &mark) || !self.start(&name, &alert.name) {
                    continue;
                }
                let notice = self.notice(record, event);
                let job = Job {
                    record: name.clone(),
                    alert: index,
                    notice,
                    mark,
                };
                if let Err(err) = self.queue.try_send(job) {
                    warn!(record = %name, alert = %alert.name, "notification queue full; sent after a later scan");
                    let job = match err {
                        mpsc::error::TrySendError::Full(job)
                        | mpsc::error::TrySendError::Closed(job) => job,
                    };
                    self.finish(&job.record, &job.mark, false);
                }
            }
        }
    }

    /// Whether the notice `mark` of `record` was already delivered (or
    /// given up on): by this process, else as the record says.
    fn handled(&self, record: &Activation, mark: &Notified) -> bool {
        let key = (record.name_any(), mark.alert.clone(), kind(&mark.event));
        let remembered = self
            .state
            .lock()
            .ok()
            .and_then(|s| s.done.get(&key).cloned());
        let last = remembered.or_else(|| {
            record.status.as_ref().and_then(|s| {
                s.notifications
                    .iter()
                    .find(|n| n.alert == mark.alert && kind(&n.event) == kind(&mark.event))
                    .cloned()
            })
        });
        last.is_some_and(|last| same_notice(&last, mark))
    }

    /// Takes the (record, alert) slot: false when a delivery holds it.
    fn start(&self, record: &str, alert: &str) -> bool {
        self.state
            .lock()
            .is_ok_and(|mut s| s.in_flight.insert((record.to_string(), alert.to_string())))
    }

    /// Frees the slot; `handled`: remember `mark` as sent or given up on.
    fn finish(&self, record: &str, mark: &Notified, handled: bool) {
        if let Ok(mut state) = self.state.lock() {
            state
                .in_flight
                .remove(&(record.to_string(), mark.alert.clone()));
            if handled {
                let key = (record.to_string(), mark.alert.clone(), kind(&mark.event));
                state.done.insert(key, mark.clone());
            }
        }
    }

    fn notice(&self, record: &Activation, event: Event) -> Notice {
        let (name, cluster) = (record.name_any(), record.cluster_name().to_string());
        let path = record.spec.source.path.clone();
        let version = self
            .versions
            .lock()
            .ok()
            .and_then(|v| v.get(&path).cloned());
        let link = self
            .alerting
            .web
            .as_ref()
            .map(|base| format!("{base}/clusters/{cluster}/activations/{name}"));
        Notice {
            event,
            message: record
                .status
                .as_ref()
                .and_then(|s| s.message.clone())
                .unwrap_or_default(),
            store_path: path,
            version,
            revision: record.spec.source.revision.clone(),
            plan_digest: record.spec.receipt.plan_digest.clone(),
            link,
            cluster,
            record: name,
        }
    }
}

/// The notices `record` calls for now, each with its mark (alert unset):
/// its phase's, and those of the conditions that hold.
fn current_notices(record: &Activation) -> Vec<(Event, Notified)> {
    let generation = record.metadata.generation.unwrap_or_default();
    let mark = |event: Event, since: Option<String>| Notified {
        event: event.to_string(),
        generation,
        since,
        ..Notified::default()
    };
    let mut due = Vec::new();
    let phase = match record.phase() {
        Some(Phase::Applying) => Some(Event::Applying),
        Some(Phase::Active) => Some(Event::Active),
        Some(Phase::Degraded) => Some(Event::Degraded),
        Some(Phase::Failed) => Some(Event::Failed),
        _ => None,
    };
    if let Some(event) = phase {
        due.push((event, mark(event, None)));
    }
    let Some(status) = record.status.as_ref() else {
        return due;
    };
    for (condition, event) in [
        (
            crate::guard::CONDITION_DELETION_BUDGET,
            Event::DeletionsHeld,
        ),
        (crate::fights::CONDITION_DRIFT_FIGHT, Event::DriftFight),
    ] {
        if let Some(c) = status
            .conditions
            .iter()
            .find(|c| c.type_ == condition && c.status == "True")
        {
            due.push((
                event,
                mark(event, Some(c.last_transition_time.0.to_string())),
            ));
        }
    }
    if let Some(since) = status.deleting.iter().filter_map(|d| d.since).min() {
        let event = Event::StuckDeletion;
        due.push((event, mark(event, Some(since.to_rfc3339()))));
    }
    due
}

/// The kinds of notice a record's status keeps one entry of per alert: a
/// new phase replaces the last phase's.
fn kind(event: &str) -> &'static str {
    match event {
        "DeletionsHeld" => "DeletionsHeld",
        "DriftFight" => "DriftFight",
        "StuckDeletion" => "StuckDeletion",
        _ => "phase",
    }
}

fn same_notice(a: &Notified, b: &Notified) -> bool {
    a.event == b.event && a.generation == b.generation && a.since == b.since
}

/// Whether this replica acts on `record` (as [`crate::controller::reconcile`]
/// decides it): an operator record of a managed Kix cluster, of a held shard.
fn ours(ctx: &Context, record: &Activation) -> bool {
    if !record.is_operator()
        || !(ctx.clusters.is_empty() || ctx.clusters.contains(record.cluster_name()))
        || record.metadata.deletion_timestamp.is_some()
    {
        return false;
    }
    match ctx.shards.as_ref() {
        None => true,
        Some(set) => {
            let shard = crate::shard::shard_of(record, set.count()).unwrap_or_else(|b| b.fallback);
            set.holds(shard)
        }
    }
}

/// A watched record changed: its notices, if this replica acts on it.
pub fn observe(ctx: &Context, record: &Activation) {
    if let Some(notifier) = ctx.notifier.as_ref()
        && ours(ctx, record)
    {
        notifier.observe(record);
    }
}

/// The term's delivery task: scans the records every [`SCAN`] and
/// delivers the queue, [`CONCURRENT`] at a time. Ends (its deliveries
/// with it) when aborted at the end of the term.
pub async fn run(ctx: Arc<Context>, mut jobs: mpsc::Receiver<Job>) {
    let Some(notifier) = ctx.notifier.clone() else {
        return;
    };
    let permits = Arc::new(tokio::sync::Semaphore::new(CONCURRENT));
    let mut running = tokio::task::JoinSet::new();
    let mut scan = tokio::time::interval(SCAN);
    loop {
        tokio::select! {
            _ = scan.tick() => {
                for record in ctx.records.state() {
                    observe(&ctx, &record);
                }
            }
            job = jobs.recv() => {
                let Some(job) = job else { return };
                let Ok(permit) = permits.clone().acquire_owned().await else { return };
                let notifier = notifier.clone();
                running.spawn(async move {
                    notifier.deliver(job).await;
                    drop(permit);
                });
            }
            Some(_) = running.join_next(), if !running.is_empty() => {}
        }
    }
}

impl Notifier {
    /// Delivers one notice and records it on the record.
    async fn deliver(&self, job: Job) {
        let Some(alert) = self.alerting.alerts.get(job.alert) else {
            return;
        };
        let outcome = self.send(alert, &job.notice).await;
        let (label, error) = match &outcome {
            Ok(Some(attempts)) => {
                info!(record = %job.record, alert = %alert.name, event = %job.notice.event, attempts, "notice delivered");
                ("delivered", None)
            }
            Ok(None) => ("skipped", Some("not sent: a commit status needs the build's source revision (spec.source.revision)".to_string())),
            Err(Undelivered::Secret(why)) => {
                warn!(record = %job.record, alert = %alert.name, "notice not sent: {why}");
                ("no_secret", Some(why.clone()))
            }
            Err(Undelivered::Refused(why)) => {
                warn!(record = %job.record, alert = %alert.name, "notice not delivered: {why}");
                ("failed", Some(why.clone()))
            }
        };
        self.metrics.notification(&alert.name, label);
        let mark = Notified { error, ..job.mark };
        self.record(&job.record, &mark).await;
        self.finish(&job.record, &mark, true);
    }

    /// Ok(Some(attempts)): delivered; Ok(None): the target takes no such
    /// notice (a commit status without a revision).
    async fn send(&self, alert: &Alert, notice: &Notice) -> Result<Option<u32>, Undelivered> {
        let value = self.secret_value(alert.target.secret_key()).await?;
        let target = alert
            .target
            .target(|_| Ok::<_, Undelivered>(value.clone()))?;
        let Some(request) = kix_notify::request(&target, notice) else {
            let commit_status = matches!(
                target,
                kix_notify::Target::GitHub { .. } | kix_notify::Target::GitLab { .. }
            );
            if commit_status
                && notice.revision.is_none()
                && !self.alerting.said_no_revision.swap(true, Ordering::Relaxed)
            {
                info!(
                    "GitHub/GitLab commit statuses are skipped for records without a source revision (spec.source.revision): kix builds do not name one yet"
                );
            }
            return Ok(None);
        };
        kix_notify::deliver(&self.alerting.http, &target, &request, &self.alerting.retry)
            .await
            .map(Some)
            .map_err(|e| Undelivered::Refused(e.to_string()))
    }

    /// The value of a Secret key, read with the operator's client. Errors
    /// name the Secret and key, never a value.
    async fn secret_value(&self, key: &SecretKey) -> Result<String, Undelivered> {
        let namespace = key.namespace.as_deref().unwrap_or(&self.alerting.namespace);
        let secrets: Api<KubeSecret> = Api::namespaced(self.client.clone(), namespace);
        let (name, field) = (&key.name, &key.key);
        let secret = secrets.get_opt(name).await.map_err(|e| {
            Undelivered::Secret(format!(
                "reading Secret {namespace}/{name}: {}",
                kube_reason(&e)
            ))
        })?;
        let Some(secret) = secret else {
            return Err(Undelivered::Secret(format!(
                "Secret {namespace}/{name} does not exist"
            )));
        };
        let bytes = secret
            .data
            .and_then(|mut d| d.remove(field))
            .ok_or_else(|| {
                Undelivered::Secret(format!("Secret {namespace}/{name} has no key {field:?}"))
            })?;
        String::from_utf8(bytes.0).map_err(|_| {
            Undelivered::Secret(format!(
                "Secret {namespace}/{name} key {field:?} is not UTF-8"
            ))
        })
    }

    /// Writes `mark` on the record's status (one entry per alert and kind),
    /// through the one status-write path; nothing when it says so already.
    async fn record(&self, record: &str, mark: &Notified) {
        let written = kix_engine::records::update_status(&self.client, record, |status| {
            status
                .notifications
                .retain(|n| !(n.alert == mark.alert && kind(&n.event) == kind(&mark.event)));
            status.notifications.push(mark.clone());
            status
                .notifications
                .sort_by(|a, b| (&a.alert, kind(&a.event)).cmp(&(&b.alert, kind(&b.event))));
        })
        .await;
        if let Err(err) = written {
            warn!(record, alert = %mark.alert, "could not record the notice sent: {err}");
        }
    }
}

/// Why a notice was not delivered.
enum Undelivered {
    /// Its Secret or key is missing (or unreadable).
    Secret(String),
    /// Refused, or retries exhausted.
    Refused(String),
}

/// A kube error without the request's details.
fn kube_reason(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(e) => format!("{} ({})", e.reason, e.code),
        other => other.to_string(),
    }
}

/// A term's notifier and its queue's receiving end, with `--alerts`.
pub fn for_term(
    alerting: Option<&Arc<Alerting>>,
    client: &Client,
    metrics: &Arc<Metrics>,
) -> (Option<Arc<Notifier>>, Option<mpsc::Receiver<Job>>) {
    match alerting {
        Some(alerting) => {
            let (notifier, jobs) = Notifier::new(alerting.clone(), client.clone(), metrics.clone());
            (Some(notifier), Some(jobs))
        }
        None => (None, None),
    }
}

/// Starts the term's delivery task, with `--alerts`; abort it when the
/// term ends.
pub fn spawn(
    ctx: &Arc<Context>,
    jobs: Option<mpsc::Receiver<Job>>,
) -> Option<tokio::task::JoinHandle<()>> {
    jobs.map(|jobs| tokio::spawn(run(ctx.clone(), jobs)))
}

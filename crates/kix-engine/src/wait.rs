//! Waiting until applied objects are healthy, from watches.
//!
//! Targets are grouped by resource and namespace, and each group gets one
//! watch (`kube::runtime::watcher`): on the single object by a
//! `metadata.name` field selector when the group has one target, else on the
//! whole kind in that namespace. Events update the [`Health`] of the targets
//! they name (kstatus semantics, [`crate::health`]); other objects are
//! ignored. Only a health per target is kept, never whole objects, so waiting
//! on thousands of objects stays cheap (the one exception: a Pod that is not
//! ready is kept, because its health changes with time alone — an
//! unschedulable Pod turns Degraded after [`crate::health::SCHEDULE_WINDOW`]).
//!
//! An object that does not exist (not yet, or deleted while waiting) is
//! Progressing with reason `not found`, unless the caller applied it
//! ([`WaitOptions::applied`]): such an object, once deleted, is not waited
//! for again. A Job or a Pod counts by the outcome it reached before it was
//! deleted (a TTL, a Helm `hook-succeeded` policy or a person may remove it
//! as soon as it finished), read from the deletion event, or, when it was
//! gone before the wait began, from a watch that replays its history from
//! the applied `resourceVersion`; with no outcome it is Degraded ("deleted
//! before it finished; kix saw no outcome"). Any other kind deleted while
//! waited for is Degraded at once: nothing brings it back, so waiting until
//! the timeout would only delay the same failure.
//!
//! The wait ends when every target is Ready or deleted, when one is
//! Degraded (with [`WaitOptions::fail_fast_on_degraded`]), or at the
//! timeout; the [`WaitReport`] then gives every target's last reason.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{self, BoxStream, FuturesUnordered, StreamExt};
use kix_manifest::{GroupKind, group_kind};
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Resource, WatchEvent, WatchParams};
use kube::discovery::ApiResource;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;

use crate::health::{Health, Rules};
use crate::watch_hub::{HubMessage, WatchHub, is_forbidden};

/// The reason of an object that does not exist.
pub const NOT_FOUND: &str = "not found";

/// The reason of a run-to-completion object (Job, Pod) deleted before kix
/// saw it finish.
pub const DELETED_UNFINISHED: &str = "deleted before it finished; kix saw no outcome";

/// The reason of any other applied object deleted while waited for.
pub const DELETED_WHILE_WAITING: &str = "deleted while kix waited for it";

/// How long a replay of a vanished object's history may take (server-side
/// watch timeout, seconds).
const REPLAY_SECS: u32 = 10;

/// How often Pods that are not ready are looked at again (their health
/// depends on the time, not only on their content).
const RECHECK_EVERY: Duration = Duration::from_secs(1);

/// How often the groups still waited for are listed again. Watches deliver
/// the changes; this is the safety net for a watch that stays open but
/// silent, as one can after etcd restarts under the apiserver.
const RELIST_EVERY: Duration = Duration::from_secs(15);

/// One object to wait for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WaitTarget {
    pub resource: ApiResource,
    /// The object's namespace; `None` for a cluster-scoped object (for a
    /// namespaced kind, `None` watches all namespaces and takes the first
    /// object of that name).
    pub namespace: Option<String>,
    pub name: String,
}

impl WaitTarget {
    pub fn new(resource: ApiResource, namespace: Option<String>, name: impl Into<String>) -> Self {
        WaitTarget {
            resource,
            namespace,
            name: name.into(),
        }
    }

    /// A target of a statically known kind, e.g.
    /// `WaitTarget::of::<Deployment>(Some("ns"), "web")`.
    pub fn of<K: Resource<DynamicType = ()>>(namespace: Option<&str>, name: &str) -> Self {
        WaitTarget::new(
            ApiResource::erase::<K>(&()),
            namespace.map(str::to_owned),
            name,
        )
    }
}

/// `Deployment ns/web`, or `ClusterRole admin` without a namespace.
impl fmt::Display for WaitTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.resource.kind, self.name),
            None => write!(f, "{} {}", self.resource.kind, self.name),
        }
    }
}

/// The object an apply returned: which object it is and the
/// `resourceVersion` its history is replayed from should it vanish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    pub uid: String,
    pub resource_version: String,
}

impl Applied {
    /// Of an object the apiserver returned (`None` without uid or version).
    pub fn of(object: &Value) -> Option<Applied> {
        let text = |pointer: &str| object.pointer(pointer)?.as_str().map(str::to_owned);
        Some(Applied {
            uid: text("/metadata/uid")?,
            resource_version: text("/metadata/resourceVersion")?,
        })
    }
}

/// A change of a target's health, for progress displays.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaitEvent {
    pub target: WaitTarget,
    pub health: Health,
}

#[derive(Clone, Debug)]
pub struct WaitOptions {
    /// How long to wait at most (default 5 minutes).
    pub timeout: Duration,
    /// Stop as soon as one target is Degraded (default false: wait on, a
    /// Degraded object may still recover, e.g. a crash-looping Pod).
    pub fail_fast_on_degraded: bool,
    /// Receives a [`WaitEvent`] whenever a target's health changes (default
    /// none). A closed receiver is ignored.
    pub events: Option<UnboundedSender<WaitEvent>>,
    /// The health rules (default: the built-in library and kstatus; a
    /// deploy adds its build's own).
    pub rules: Rules,
    /// The targets the caller applied, with what the apply returned (default
    /// none): one of them deleted while waited for is judged by the outcome
    /// it reached, never waited for again (see the module docs).
    pub applied: HashMap<WaitTarget, Applied>,
    /// Watches shared with the other waits of a deploy (default none: this
    /// wait opens its own, one per kind and namespace).
    pub watches: Option<WatchHub>,
}

impl Default for WaitOptions {
    fn default() -> Self {
        WaitOptions {
            timeout: Duration::from_secs(300),
            fail_fast_on_degraded: false,
            events: None,
            rules: Rules::builtin(),
            applied: HashMap::new(),
            watches: None,
        }
    }
}

/// The outcome of [`wait_healthy`]; every target is in exactly one of the
/// three lists, in the order the targets were given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WaitReport {
    pub ready: Vec<WaitTarget>,
    /// Targets still Progressing, with their last reason.
    pub not_ready: Vec<(WaitTarget, String)>,
    /// Targets Degraded, with their last reason.
    pub degraded: Vec<(WaitTarget, String)>,
    /// The wait ended at the timeout.
    pub timed_out: bool,
}

impl WaitReport {
    /// Every target is Ready.
    pub fn is_success(&self) -> bool {
        self.not_ready.is_empty() && self.degraded.is_empty()
    }
}

/// `3 ready` on success, else what is not ready and why, one object a line:
///
/// ```text
/// timed out: 1 ready, 1 not ready, 0 degraded
///   Deployment ns/web: 0/2 replicas available
/// ```
impl fmt::Display for WaitReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_success() {
            return write!(f, "{} ready", self.ready.len());
        }
        if self.timed_out {
            f.write_str("timed out: ")?;
        }
        write!(
            f,
            "{} ready, {} not ready, {} degraded",
            self.ready.len(),
            self.not_ready.len(),
            self.degraded.len()
        )?;
        for (target, reason) in &self.degraded {
            write!(f, "\n  {target}: degraded: {reason}")?;
        }
        for (target, reason) in &self.not_ready {
            write!(f, "\n  {target}: {reason}")?;
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    /// Watching is not allowed; waiting longer cannot help.
    #[error("cannot watch {kind} {scope}: {message}")]
    Forbidden {
        kind: String,
        /// `in namespace <ns>` or `cluster-wide`.
        scope: String,
        message: String,
    },
}

/// Waits until every target is Ready (kstatus), one watch per resource and
/// namespace. Returns a report also on timeout or a Degraded target; errors
/// only when watching is forbidden.
pub async fn wait_healthy(
    client: Client,
    targets: Vec<WaitTarget>,
    options: WaitOptions,
) -> Result<WaitReport, WaitError> {
    let deadline = tokio::time::Instant::now() + options.timeout;
    let mut waiter = Waiter::new(targets, options.events);
    waiter.rules = options.rules;
    waiter.set_applied(options.applied);

    let shared = options.watches.is_some();
    let (lists, streams) = watches(&client, &waiter, options.watches.as_ref());
    let mut events = stream::select_all(streams);
    let mut recheck = tokio::time::interval(RECHECK_EVERY);
    recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut relist =
        tokio::time::interval_at(tokio::time::Instant::now() + RELIST_EVERY, RELIST_EVERY);
    relist.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

    let mut replays: FuturesUnordered<BoxFuture<'static, (usize, Replay)>> =
        FuturesUnordered::new();
    let mut timed_out = false;
    loop {
        waiter.start_replays(&lists, &mut replays);
        // A deleted target's health is final: nothing left to wait for.
        if waiter.ready + waiter.deleted_unready == waiter.targets.len() {
            break;
        }
        if options.fail_fast_on_degraded && waiter.degraded > 0 {
            break;
        }
        tokio::select! {
            () = tokio::time::sleep_until(deadline) => {
                timed_out = true;
                break;
            }
            event = events.next() => match event {
                Some((group, HubMessage::Event(event))) => waiter.on_event(group, &event),
                Some((group, HubMessage::Listed(applied))) => {
                    if let Event::Apply(object) = applied.as_ref() {
                        waiter.on_listed(group, object);
                    }
                }
                Some((group, HubMessage::Failed { message, forbidden })) => {
                    waiter.on_error(group, message, forbidden)?
                }
                // Watch streams do not end; nothing left to learn.
                None => {
                    tokio::time::sleep_until(deadline).await;
                    timed_out = true;
                    break;
                }
            },
            Some((index, replay)) = replays.next(), if !replays.is_empty() => {
                waiter.on_replay(index, replay);
            }
            _ = recheck.tick(), if waiter.has_pods => waiter.recheck_pods(),
            // Shared watches relist on their own.
            _ = relist.tick(), if !shared => {
                for group in waiter.waiting_groups() {
                    let (api, params) = &lists[group];
                    match api.list(params).await {
                        Ok(list) => waiter.on_list(group, list.items),
                        Err(error) => tracing::debug!(%error, "relisting failed"),
                    }
                }
            }
        }
    }
    Ok(waiter.report(timed_out))
}

/// A group's LIST (for the safety-net relists), one per group.
type GroupList = (Api<DynamicObject>, ListParams);

type GroupEvents = BoxStream<'static, (usize, HubMessage)>;

/// One watch per group: from the hub when there is one (the kind in the
/// group's namespace, shared), else on the single object by a
/// `metadata.name` field selector when the group has one target, or on the
/// whole kind.
fn watches(
    client: &Client,
    waiter: &Waiter,
    hub: Option<&WatchHub>,
) -> (Vec<GroupList>, Vec<GroupEvents>) {
    let mut lists = Vec::with_capacity(waiter.groups.len());
    let mut streams = Vec::with_capacity(waiter.groups.len());
    for (index, group) in waiter.groups.iter().enumerate() {
        let api: Api<DynamicObject> = match &group.namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &group.resource),
            None => Api::all_with(client.clone(), &group.resource),
        };
        let mut config = watcher::Config::default();
        let mut params = ListParams::default();
        if let [only] = group.targets.as_slice() {
            let selector = format!("metadata.name={}", waiter.targets[*only].target.name);
            config = config.fields(&selector);
            params = params.fields(&selector);
        }
        lists.push((api.clone(), params));
        let events = match hub {
            Some(hub) => hub.subscribe(
                client,
                &group.resource,
                group.namespace.as_deref(),
                RELIST_EVERY,
            ),
            None => watcher::watcher(api, config)
                .default_backoff()
                .map(|event| match event {
                    Ok(event) => HubMessage::Event(std::sync::Arc::new(event)),
                    Err(error) => HubMessage::Failed {
                        message: error.to_string(),
                        forbidden: is_forbidden(&error),
                    },
                })
                .boxed(),
        };
        streams.push(events.map(move |message| (index, message)).boxed());
    }
    (lists, streams)
}

struct TargetState {
    target: WaitTarget,
    health: Health,
    /// A Pod that is not ready, to be looked at again as time passes.
    pod: Option<Value>,
    /// Seen in the current (re)list of its group.
    listed: bool,
    /// What the caller's apply returned, when it applied the target.
    applied: Option<Applied>,
    /// Deleted while waited for: its health is final.
    deleted: bool,
    /// Its history is being replayed.
    replaying: bool,
}

/// What the history of an applied object that was not found tells.
enum Replay {
    /// Deleted; its last state.
    Deleted(Box<DynamicObject>),
    /// No deletion in its history: the list was older than the apply.
    NotDeleted,
    /// Its history could not be read (e.g. compacted).
    Unknown(String),
}

struct Group {
    resource: ApiResource,
    namespace: Option<String>,
    /// Indexes into `Waiter::targets`.
    targets: Vec<usize>,
    by_name: HashMap<String, usize>,
    /// The initial list completed at least once.
    synced: bool,
    /// The last watch error, until the next successful list.
    error: Option<String>,
}

struct Waiter {
    targets: Vec<TargetState>,
    groups: Vec<Group>,
    ready: usize,
    degraded: usize,
    has_pods: bool,
    events: Option<UnboundedSender<WaitEvent>>,
    rules: Rules,
    /// Applied targets not found, whose history is to be replayed.
    replays: Vec<usize>,
    /// Targets deleted while waited for that did not end Ready.
    deleted_unready: usize,
}

impl Waiter {
    fn new(targets: Vec<WaitTarget>, events: Option<UnboundedSender<WaitEvent>>) -> Self {
        let mut waiter = Waiter {
            targets: Vec::with_capacity(targets.len()),
            groups: Vec::new(),
            ready: 0,
            degraded: 0,
            has_pods: false,
            events,
            rules: Rules::builtin(),
            replays: Vec::new(),
            deleted_unready: 0,
        };
        let mut group_of: HashMap<(ApiResource, Option<String>), usize> = HashMap::new();
        for target in targets {
            let key = (target.resource.clone(), target.namespace.clone());
            let group = *group_of.entry(key).or_insert_with(|| {
                waiter.groups.push(Group {
                    resource: target.resource.clone(),
                    namespace: target.namespace.clone(),
                    targets: Vec::new(),
                    by_name: HashMap::new(),
                    synced: false,
                    error: None,
                });
                waiter.groups.len() - 1
            });
            let group = &mut waiter.groups[group];
            if group.by_name.contains_key(&target.name) {
                continue; // The same target twice.
            }
            waiter.has_pods |= is_pod(&target.resource);
            let index = waiter.targets.len();
            group.by_name.insert(target.name.clone(), index);
            group.targets.push(index);
            waiter.targets.push(TargetState {
                target,
                health: not_found(),
                pod: None,
                listed: false,
                applied: None,
                deleted: false,
                replaying: false,
            });
        }
        waiter
    }

    fn on_event(&mut self, group: usize, event: &Event<DynamicObject>) {
        match event {
            Event::Init => {
                for &index in &self.groups[group].targets {
                    self.targets[index].listed = false;
                }
            }
            Event::InitApply(object) => self.on_listed(group, object),
            Event::Apply(object) => {
                if let Some(index) = self.index_of(group, object) {
                    self.observe(index, object);
                }
            }
            Event::Delete(object) => {
                if let Some(index) = self.index_of(group, object) {
                    self.on_deleted(index, object);
                }
            }
            Event::InitDone => {
                let group = &mut self.groups[group];
                group.synced = true;
                group.error = None;
                // Whatever the (re)list did not return is gone.
                let gone: Vec<usize> = group
                    .targets
                    .iter()
                    .copied()
                    .filter(|&index| !self.targets[index].listed)
                    .collect();
                for index in gone {
                    self.on_missing(index);
                }
            }
        }
    }

    /// An object of a (re)list of `group`.
    fn on_listed(&mut self, group: usize, object: &DynamicObject) {
        if let Some(index) = self.index_of(group, object) {
            self.targets[index].listed = true;
            self.observe(index, object);
        }
    }

    /// The groups with a target that is not Ready yet.
    fn waiting_groups(&self) -> Vec<usize> {
        (0..self.groups.len())
            .filter(|&group| {
                self.groups[group]
                    .targets
                    .iter()
                    .any(|&index| !self.targets[index].health.is_ready())
            })
            .collect()
    }

    /// A fresh LIST of a group, taken in as a watch's re-list would be.
    fn on_list(&mut self, group: usize, objects: Vec<DynamicObject>) {
        self.on_event(group, &Event::Init);
        for object in objects {
            self.on_event(group, &Event::InitApply(object));
        }
        self.on_event(group, &Event::InitDone);
    }

    fn on_error(
        &mut self,
        group: usize,
        message: String,
        forbidden: bool,
    ) -> Result<(), WaitError> {
        let group = &mut self.groups[group];
        let scope = match &group.namespace {
            Some(ns) => format!("in namespace {ns}"),
            None => "cluster-wide".to_owned(),
        };
        if forbidden {
            return Err(WaitError::Forbidden {
                kind: group.resource.kind.clone(),
                scope,
                message,
            });
        }
        tracing::warn!(kind = %group.resource.kind, %scope, error = %message, "watch failed, retrying");
        group.error = Some(message);
        Ok(())
    }

    /// The target `object` is, unless its health is final.
    fn index_of(&self, group: usize, object: &DynamicObject) -> Option<usize> {
        let name = object.metadata.name.as_deref()?;
        let index = self.groups[group].by_name.get(name).copied()?;
        (!self.targets[index].deleted).then_some(index)
    }

    fn set_applied(&mut self, mut applied: HashMap<WaitTarget, Applied>) {
        for state in &mut self.targets {
            state.applied = applied.remove(&state.target);
        }
    }

    /// Replays the history of each target found missing since the last call.
    fn start_replays(
        &mut self,
        lists: &[GroupList],
        replays: &mut FuturesUnordered<BoxFuture<'static, (usize, Replay)>>,
    ) {
        for index in std::mem::take(&mut self.replays) {
            let api = lists[self.group_of(index)].0.clone();
            let state = &self.targets[index];
            let (name, applied) = (state.target.name.clone(), state.applied.clone());
            replays.push(Box::pin(async move {
                let replay = match applied {
                    Some(applied) => replay(&api, &name, &applied).await,
                    None => Replay::NotDeleted,
                };
                (index, replay)
            }));
        }
    }

    fn group_of(&self, index: usize) -> usize {
        let target = &self.targets[index].target;
        self.groups
            .iter()
            .position(|g| {
                g.resource == target.resource
                    && g.namespace == target.namespace
                    && g.by_name.get(&target.name) == Some(&index)
            })
            .unwrap_or_default()
    }

    /// A target the (re)list did not return: an applied one is looked up
    /// in its history (it may have finished and been removed before the
    /// wait began); any other is not found, and waited for.
    fn on_missing(&mut self, index: usize) {
        let state = &mut self.targets[index];
        if state.deleted {
            return; // Judged when it went.
        }
        state.pod = None;
        if state.applied.is_some() && !state.replaying {
            state.replaying = true;
            self.replays.push(index);
        }
        self.set(index, not_found());
    }

    /// A target's deletion: the object the caller applied is judged for
    /// good; an older object of the same name (a replace's) is no news; a
    /// target the caller did not apply is not found again.
    fn on_deleted(&mut self, index: usize, object: &DynamicObject) {
        let state = &mut self.targets[index];
        let ours = match &state.applied {
            None => {
                state.pod = None;
                self.set(index, not_found());
                return;
            }
            Some(applied) => object.metadata.uid.as_deref() == Some(applied.uid.as_str()),
        };
        if !ours {
            return;
        }
        state.pod = None;
        state.deleted = true;
        let health = self.outcome_of_deleted(index, object);
        self.deleted_unready += usize::from(!health.is_ready());
        self.set(index, health);
    }

    fn on_replay(&mut self, index: usize, replay: Replay) {
        self.targets[index].replaying = false;
        if self.targets[index].deleted || self.targets[index].health != not_found() {
            return; // Seen since.
        }
        match replay {
            Replay::Deleted(object) => self.on_deleted(index, &object),
            Replay::NotDeleted => {}
            Replay::Unknown(why) => {
                self.targets[index].deleted = true;
                let gone = match runs_to_completion(&self.targets[index].target.resource) {
                    true => DELETED_UNFINISHED,
                    false => DELETED_WHILE_WAITING,
                };
                let reason = format!("{gone} (its history is not available: {why})");
                self.deleted_unready += 1;
                self.set(index, Health::Degraded { reason });
            }
        }
    }

    /// The health a deleted target ends with: a Job's or a Pod's outcome
    /// (its state when it was deleted, its deletion itself aside), else
    /// Degraded.
    fn outcome_of_deleted(&self, index: usize, object: &DynamicObject) -> Health {
        let resource = &self.targets[index].target.resource;
        if !runs_to_completion(resource) {
            return Health::Degraded {
                reason: DELETED_WHILE_WAITING.to_owned(),
            };
        }
        let mut value = with_type(object, resource).unwrap_or_default();
        // The deletion (TTL controllers delete in the foreground) is not
        // the outcome; what the object reached before it is.
        if let Some(metadata) = value.get_mut("metadata").and_then(Value::as_object_mut) {
            metadata.remove("deletionTimestamp");
        }
        match self.rules.judge(&value).health {
            Health::Progressing { .. } => Health::Degraded {
                reason: DELETED_UNFINISHED.to_owned(),
            },
            outcome => outcome,
        }
    }

    fn observe(&mut self, index: usize, object: &DynamicObject) {
        let resource = &self.targets[index].target.resource;
        let value = match with_type(object, resource) {
            Ok(value) => value,
            Err(error) => {
                self.set(
                    index,
                    Health::Progressing {
                        reason: format!("unreadable object: {error}"),
                    },
                );
                return;
            }
        };
        let new = self.rules.judge(&value).health;
        self.targets[index].pod = (is_pod(resource) && !new.is_ready()).then_some(value);
        self.set(index, new);
    }

    fn recheck_pods(&mut self) {
        for index in 0..self.targets.len() {
            if let Some(pod) = &self.targets[index].pod {
                let new = self.rules.judge(pod).health;
                if new.is_ready() {
                    self.targets[index].pod = None;
                }
                self.set(index, new);
            }
        }
    }

    fn set(&mut self, index: usize, new: Health) {
        let state = &mut self.targets[index];
        if state.health == new {
            return;
        }
        self.ready -= usize::from(state.health.is_ready());
        self.degraded -= usize::from(state.health.is_degraded());
        self.ready += usize::from(new.is_ready());
        self.degraded += usize::from(new.is_degraded());
        tracing::debug!(target = %state.target, health = %new, "health changed");
        if let Some(events) = &self.events {
            let _ = events.send(WaitEvent {
                target: state.target.clone(),
                health: new.clone(),
            });
        }
        state.health = new;
    }

    fn report(self, timed_out: bool) -> WaitReport {
        let mut report = WaitReport {
            timed_out,
            ..WaitReport::default()
        };
        let mut error_of = HashMap::new();
        for group in &self.groups {
            if let (false, Some(error)) = (group.synced, &group.error) {
                for &index in &group.targets {
                    error_of.insert(index, error.as_str());
                }
            }
        }
        for (index, state) in self.targets.into_iter().enumerate() {
            match state.health {
                Health::Ready => report.ready.push(state.target),
                Health::Degraded { reason } => report.degraded.push((state.target, reason)),
                Health::Progressing { reason } => {
                    let reason = match error_of.get(&index) {
                        Some(error) => format!("{reason} (watch failing: {error})"),
                        None => reason,
                    };
                    report.not_ready.push((state.target, reason));
                }
            }
        }
        report
    }
}

/// The object as JSON with its apiVersion and kind (list items come
/// without them; health needs them).
fn with_type(object: &DynamicObject, resource: &ApiResource) -> serde_json::Result<Value> {
    let mut value = serde_json::to_value(object)?;
    if let Some(map) = value.as_object_mut() {
        map.insert(
            "apiVersion".to_owned(),
            Value::String(resource.api_version.clone()),
        );
        map.insert("kind".to_owned(), Value::String(resource.kind.clone()));
    }
    Ok(value)
}

/// Reads the history of `name` after its apply, up to its deletion.
async fn replay(api: &Api<DynamicObject>, name: &str, applied: &Applied) -> Replay {
    let params = WatchParams::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(REPLAY_SECS);
    let events = match api.watch(&params, &applied.resource_version).await {
        Ok(events) => events,
        Err(error) => return Replay::Unknown(error.to_string()),
    };
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        match event {
            Ok(WatchEvent::Deleted(object))
                if object.metadata.uid.as_deref() == Some(applied.uid.as_str()) =>
            {
                return Replay::Deleted(Box::new(object));
            }
            Ok(WatchEvent::Error(status)) => return Replay::Unknown(status.message),
            Err(error) => return Replay::Unknown(error.to_string()),
            Ok(_) => {}
        }
    }
    Replay::NotDeleted
}

/// Kinds whose work ends: judged by their outcome once deleted.
fn runs_to_completion(resource: &ApiResource) -> bool {
    let kind = GroupKind::new(&resource.group, &resource.kind);
    kind == group_kind::POD || kind == group_kind::JOB
}

fn not_found() -> Health {
    Health::Progressing {
        reason: NOT_FOUND.to_owned(),
    }
}

fn is_pod(resource: &ApiResource) -> bool {
    GroupKind::new(&resource.group, &resource.kind) == group_kind::POD
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_map() -> ApiResource {
        ApiResource {
            group: String::new(),
            version: "v1".to_owned(),
            api_version: "v1".to_owned(),
            kind: "ConfigMap".to_owned(),
            plural: "configmaps".to_owned(),
        }
    }

    fn object(name: &str) -> DynamicObject {
        DynamicObject::new(name, &config_map()).within("ns")
    }

    #[test]
    fn groups_by_resource_and_namespace_and_dedups() {
        let t = |ns: &str, name: &str| WaitTarget::new(config_map(), Some(ns.to_owned()), name);
        let waiter = Waiter::new(
            vec![t("a", "x"), t("a", "y"), t("b", "x"), t("a", "x")],
            None,
        );
        assert_eq!(waiter.targets.len(), 3);
        assert_eq!(waiter.groups.len(), 2);
        assert_eq!(waiter.groups[0].targets, vec![0, 1]);
    }

    #[test]
    fn relist_marks_missing_objects_not_found() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let t = |name: &str| WaitTarget::new(config_map(), Some("ns".to_owned()), name);
        let mut waiter = Waiter::new(vec![t("x"), t("y")], Some(tx));
        waiter.on_event(0, &Event::Init);
        waiter.on_event(0, &Event::InitApply(object("x")));
        waiter.on_event(0, &Event::InitApply(object("y")));
        waiter.on_event(0, &Event::InitApply(object("unrelated")));
        waiter.on_event(0, &Event::InitDone);
        assert_eq!(waiter.ready, 2);
        waiter.on_event(0, &Event::Init);
        waiter.on_event(0, &Event::InitApply(object("x")));
        waiter.on_event(0, &Event::InitDone);
        assert_eq!(waiter.ready, 1);
        let report = waiter.report(true);
        assert_eq!(report.ready, vec![t("x")]);
        assert_eq!(report.not_ready, vec![(t("y"), NOT_FOUND.to_owned())]);
        assert!(!report.is_success());
        let mut seen = Vec::new();
        while let Ok(event) = rx.try_recv() {
            seen.push((event.target.name, event.health.is_ready()));
        }
        assert_eq!(
            seen,
            vec![
                ("x".to_owned(), true),
                ("y".to_owned(), true),
                ("y".to_owned(), false)
            ]
        );
    }

    #[test]
    fn a_fresh_list_settles_what_a_silent_watch_did_not() {
        let t = |ns: &str, name: &str| WaitTarget::new(config_map(), Some(ns.to_owned()), name);
        let mut waiter = Waiter::new(vec![t("ns", "x"), t("other", "y")], None);
        // Nothing heard from either watch: both groups are still waited for.
        assert_eq!(waiter.waiting_groups(), vec![0, 1]);
        // The safety-net LIST of the first group finds its object.
        waiter.on_list(0, vec![object("x")]);
        assert_eq!(waiter.ready, 1);
        assert_eq!(waiter.waiting_groups(), vec![1]);
        // A LIST without the object: gone, waited for again.
        waiter.on_list(0, vec![]);
        assert_eq!(waiter.ready, 0);
        assert_eq!(waiter.waiting_groups(), vec![0, 1]);
    }

    fn job() -> ApiResource {
        ApiResource {
            group: "batch".to_owned(),
            version: "v1".to_owned(),
            api_version: "batch/v1".to_owned(),
            kind: "Job".to_owned(),
            plural: "jobs".to_owned(),
        }
    }

    /// Job `name` with `uid`, `Complete` or still running, being deleted.
    fn job_object(uid: &str, complete: bool) -> DynamicObject {
        let condition = serde_json::json!([{"type": "Complete", "status": "True"}]);
        let status = match complete {
            true => {
                serde_json::json!({"startTime": "2026-01-01T00:00:00Z", "conditions": condition})
            }
            false => serde_json::json!({"startTime": "2026-01-01T00:00:00Z", "active": 1}),
        };
        let mut object = DynamicObject::new("create", &job()).within("ns");
        object.metadata.uid = Some(uid.to_owned());
        object.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        object.data = serde_json::json!({"status": status});
        object
    }

    fn applied_job() -> (Waiter, WaitTarget) {
        let target = WaitTarget::new(job(), Some("ns".to_owned()), "create");
        let mut waiter = Waiter::new(vec![target.clone()], None);
        let applied = Applied {
            uid: "ours".to_owned(),
            resource_version: "1".to_owned(),
        };
        waiter.set_applied([(target.clone(), applied)].into());
        (waiter, target)
    }

    #[test]
    fn a_deleted_job_counts_by_the_outcome_it_reached() {
        let (mut waiter, target) = applied_job();
        // An older Job of the same name going away is no news.
        waiter.on_event(0, &Event::Delete(job_object("older", true)));
        assert_eq!((waiter.ready, waiter.targets[0].deleted), (0, false));
        // Ours, deleted in the foreground once complete: Ready, for good.
        waiter.on_event(0, &Event::Delete(job_object("ours", true)));
        assert_eq!(waiter.ready, 1);
        waiter.on_list(0, vec![]);
        assert_eq!(waiter.report(false).ready, vec![target]);

        let (mut waiter, target) = applied_job();
        waiter.on_event(0, &Event::Apply(job_object("ours", false)));
        waiter.on_event(0, &Event::Delete(job_object("ours", false)));
        assert_eq!(waiter.deleted_unready, 1);
        let report = waiter.report(false);
        assert_eq!(
            report.degraded,
            vec![(target, DELETED_UNFINISHED.to_owned())]
        );
    }

    #[test]
    fn report_names_the_objects() {
        let report = WaitReport {
            ready: vec![],
            not_ready: vec![(
                WaitTarget::new(config_map(), Some("ns".to_owned()), "web"),
                "0/2 replicas available".to_owned(),
            )],
            degraded: vec![],
            timed_out: true,
        };
        assert_eq!(
            report.to_string(),
            "timed out: 0 ready, 1 not ready, 0 degraded\n  ConfigMap ns/web: 0/2 replicas available"
        );
    }
}

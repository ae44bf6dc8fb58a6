//! One watch per kind and namespace for all the health waits of a deploy.
//!
//! The packages of a wave wait together; without sharing, a wave of a
//! thousand one-Deployment packages opened a thousand watches, each with
//! its own LIST and its own safety-net relists (bench/flux-shape: 3,908
//! LISTs of Deployments in one deploy). A [`WatchHub`] starts one watcher
//! per (kind, namespace) the first time a wait asks for it, keeps what it
//! has seen, and hands each wait a stream that starts with that snapshot
//! (as a re-list: `Init`, `InitApply` of each object, `InitDone`) and goes
//! on with the live events. It holds the objects of the kinds waited for in
//! the namespaces waited in (once, not once per package), and stops its
//! watches when the deploy drops it.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::stream::{self, BoxStream};
use futures::{StreamExt, TryStreamExt};
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::ApiResource;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

/// Events a slow wait may fall behind by before it is re-sent the snapshot.
const BUFFER: usize = 4096;

/// Deletions kept for waits that subscribe after them (a Job removed by its
/// TTL between its apply and the wait's start is judged by its outcome).
const DELETIONS_KEPT: usize = 1024;

/// What a wait receives from a shared watch. An event is shared, not
/// copied, by every subscriber: a deploy of 1,000 packages in a namespace
/// has 1,000 waits on it, and each would otherwise get a deep copy of
/// every object there (issue 45's 1,000-package no-op: 1.6 s of copies).
#[derive(Clone, Debug)]
pub(crate) enum HubMessage {
    Event(Arc<Event<DynamicObject>>),
    /// An object of a (re)list (the watch's `InitApply`), carried as the
    /// `Apply` event the snapshot keeps: a wait that joined during the list
    /// takes it as a change without a copy of its own.
    Listed(Arc<Event<DynamicObject>>),
    /// The watch failed (it retries with backoff); `forbidden` when the
    /// apiserver refused it (403), which waiting longer cannot mend.
    Failed {
        message: String,
        forbidden: bool,
    },
}

/// Shared watches, one per (kind, namespace); cheap to clone. The watches
/// stop when the last clone is dropped.
#[derive(Clone, Default)]
pub struct WatchHub {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for WatchHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let watches = lock(&self.inner.watches).len();
        f.debug_struct("WatchHub")
            .field("watches", &watches)
            .finish()
    }
}

#[derive(Default)]
struct Inner {
    watches: Mutex<HashMap<Key, Arc<Shared>>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for task in lock(&self.tasks).drain(..) {
            task.abort();
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    group: String,
    version: String,
    plural: String,
    namespace: Option<String>,
}

/// One watch: what it has seen, and where its events go.
struct Shared {
    state: Mutex<Snapshot>,
    sender: broadcast::Sender<HubMessage>,
}

/// An event as subscribers receive it, shared.
type SharedEvent = Arc<Event<DynamicObject>>;

#[derive(Default)]
struct Snapshot {
    /// The objects by name, as last seen: each as the `Apply` event a new
    /// subscriber is sent.
    objects: BTreeMap<String, SharedEvent>,
    /// A (re)list is under way: the objects it returned so far.
    listing: Option<BTreeMap<String, SharedEvent>>,
    /// The first list has completed.
    synced: bool,
    /// The last deletions (`Delete` events), oldest first.
    deleted: VecDeque<SharedEvent>,
}

impl Snapshot {
    /// Takes in one message, as the stream's subscribers will see it.
    fn take(&mut self, message: &HubMessage) {
        let name = |o: &DynamicObject| o.metadata.name.clone().unwrap_or_default();
        let event = match message {
            HubMessage::Listed(applied) => {
                if let Event::Apply(object) = applied.as_ref() {
                    self.listing
                        .get_or_insert_with(BTreeMap::new)
                        .insert(name(object), applied.clone());
                }
                return;
            }
            HubMessage::Event(event) => event,
            HubMessage::Failed { .. } => return,
        };
        match event.as_ref() {
            Event::Init => self.listing = Some(BTreeMap::new()),
            // Published as Listed.
            Event::InitApply(_) => {}
            Event::InitDone => {
                self.objects = self.listing.take().unwrap_or_default();
                self.synced = true;
            }
            Event::Apply(object) => {
                self.objects.insert(name(object), event.clone());
            }
            Event::Delete(object) => {
                self.objects.remove(&name(object));
                if self.deleted.len() == DELETIONS_KEPT {
                    self.deleted.pop_front();
                }
                self.deleted.push_back(event.clone());
            }
        }
    }

    /// A list is under way or has not begun: its end cannot be trusted by
    /// a subscriber joining now.
    fn unfinished_list(&self) -> bool {
        self.listing.is_some() || !self.synced
    }

    /// What a new subscriber is sent first: the last deletions, then each
    /// object known (those of a list under way so far), as live events
    /// (deletions first: an object deleted and made again is there). Not
    /// as a re-list: the snapshot may be older than the subscriber's own
    /// apply, so an object missing from it is not gone; its event follows.
    fn replay(&self) -> Vec<HubMessage> {
        let objects = self.listing.as_ref().unwrap_or(&self.objects);
        self.deleted
            .iter()
            .chain(objects.values())
            .map(|event| HubMessage::Event(event.clone()))
            .collect()
    }
}

impl WatchHub {
    pub fn new() -> WatchHub {
        WatchHub::default()
    }

    /// The events of `resource` in `namespace` (all namespaces, or the
    /// cluster scope, with `None`): what is known so far as a re-list, then
    /// each change. `relist` is how often the watch lists again as a safety
    /// net for a watch that stays open but silent.
    pub(crate) fn subscribe(
        &self,
        client: &Client,
        resource: &ApiResource,
        namespace: Option<&str>,
        relist: Duration,
    ) -> BoxStream<'static, HubMessage> {
        let (shared, created) = self.shared(client, resource, namespace, relist);
        let (first, receiver, skip) = {
            let state = lock(&shared.state);
            (
                state.replay(),
                shared.sender.subscribe(),
                !created && state.unfinished_list(),
            )
        };
        let live = stream::unfold(
            (receiver, shared, skip),
            |(mut receiver, shared, mut skip)| async move {
                let messages = match receiver.recv().await {
                    Ok(message) => as_seen(message, &mut skip),
                    // Fell behind: start over from the snapshot.
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        let state = lock(&shared.state);
                        receiver = shared.sender.subscribe();
                        skip = state.unfinished_list();
                        state.replay()
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                };
                Some((messages, (receiver, shared, skip)))
            },
        )
        .flat_map(stream::iter);
        stream::iter(first).chain(live).boxed()
    }

    /// The watch of `resource` in `namespace`, started now (true) or shared.
    fn shared(
        &self,
        client: &Client,
        resource: &ApiResource,
        namespace: Option<&str>,
        relist: Duration,
    ) -> (Arc<Shared>, bool) {
        let key = Key {
            group: resource.group.clone(),
            version: resource.version.clone(),
            plural: resource.plural.clone(),
            namespace: namespace.map(str::to_owned),
        };
        let mut watches = lock(&self.inner.watches);
        if let Some(shared) = watches.get(&key) {
            return (shared.clone(), false);
        }
        let shared = Arc::new(Shared {
            state: Mutex::new(Snapshot::default()),
            sender: broadcast::channel(BUFFER).0,
        });
        watches.insert(key, shared.clone());
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
            None => Api::all_with(client.clone(), resource),
        };
        let task = tokio::spawn(pump(api, shared.clone(), relist));
        lock(&self.inner.tasks).push(task);
        (shared, true)
    }
}

/// A message as a subscriber that joined during a list (`skip`) takes it:
/// that list may have been read before the subscriber's own apply, so its
/// end does not mean that what it lacked is gone; its objects are changes.
fn as_seen(message: HubMessage, skip: &mut bool) -> Vec<HubMessage> {
    if !*skip {
        return vec![message];
    }
    match message {
        HubMessage::Listed(applied) => vec![HubMessage::Event(applied)],
        HubMessage::Event(event) => match event.as_ref() {
            Event::Init => Vec::new(),
            Event::InitDone => {
                *skip = false;
                Vec::new()
            }
            _ => vec![HubMessage::Event(event)],
        },
        failed => vec![failed],
    }
}

/// Runs one watch for as long as the hub lives: each event is taken into
/// the snapshot and sent under one lock, so a subscriber's snapshot and
/// its live events never overlap or leave a gap.
async fn pump(api: Api<DynamicObject>, shared: Arc<Shared>, relist: Duration) {
    let mut events = watcher::watcher(api.clone(), watcher::Config::default())
        .default_backoff()
        .map_err(|error| failed(&error))
        .boxed();
    let mut relists = tokio::time::interval_at(tokio::time::Instant::now() + relist, relist);
    relists.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            event = events.next() => match event {
                Some(Ok(event)) => publish(&shared, event),
                Some(Err(message)) => {
                    let _ = shared.sender.send(message);
                }
                None => return,
            },
            _ = relists.tick() => {
                // Not while the watch itself is listing: the two would mix.
                let idle = {
                    let state = lock(&shared.state);
                    state.synced && state.listing.is_none()
                };
                if idle {
                    relist_into(&api, &shared).await;
                }
            }
        }
    }
}

/// The safety net: a fresh LIST, sent as a re-list.
async fn relist_into(api: &Api<DynamicObject>, shared: &Shared) {
    match api.list(&ListParams::default()).await {
        Ok(list) => {
            publish(shared, Event::Init);
            for object in list.items {
                publish(shared, Event::InitApply(object));
            }
            publish(shared, Event::InitDone);
        }
        Err(error) => tracing::debug!(%error, "relisting failed"),
    }
}

fn publish(shared: &Shared, event: Event<DynamicObject>) {
    let message = match event {
        Event::InitApply(object) => HubMessage::Listed(Arc::new(Event::Apply(object))),
        other => HubMessage::Event(Arc::new(other)),
    };
    let mut state = lock(&shared.state);
    state.take(&message);
    // No subscriber yet is fine: the snapshot keeps it for the next one.
    let _ = shared.sender.send(message);
}

fn failed(error: &watcher::Error) -> HubMessage {
    HubMessage::Failed {
        message: error.to_string(),
        forbidden: is_forbidden(error),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The apiserver refused the watch (403).
pub(crate) fn is_forbidden(error: &watcher::Error) -> bool {
    let source = match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => e,
        watcher::Error::WatchError(status) => return status.code == 403,
        _ => return false,
    };
    matches!(source, kube::Error::Api(status) if status.code == 403)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configmap(name: &str) -> DynamicObject {
        let resource = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        DynamicObject::new(name, &resource)
            .data(serde_json::json!({"data": {"big": "x".repeat(4096)}}))
    }

    fn names(messages: &[HubMessage]) -> Vec<String> {
        messages
            .iter()
            .map(|m| match m {
                HubMessage::Event(event) => match event.as_ref() {
                    Event::Apply(o) => {
                        format!("apply {}", o.metadata.name.clone().unwrap_or_default())
                    }
                    Event::Delete(o) => {
                        format!("delete {}", o.metadata.name.clone().unwrap_or_default())
                    }
                    _ => "other".into(),
                },
                HubMessage::Listed(_) => "listed".into(),
                HubMessage::Failed { .. } => "failed".into(),
            })
            .collect()
    }

    /// A thousand waits on one namespace get one copy of each object
    /// between them, not one each.
    #[test]
    fn subscribers_share_each_object_instead_of_copying_it() {
        let mut snapshot = Snapshot::default();
        let listed = Arc::new(Event::Apply(configmap("b")));
        for message in [
            HubMessage::Event(Arc::new(Event::Init)),
            HubMessage::Listed(Arc::new(Event::Apply(configmap("a")))),
            HubMessage::Listed(listed.clone()),
            HubMessage::Event(Arc::new(Event::InitDone)),
        ] {
            snapshot.take(&message);
        }
        let changed = Arc::new(Event::Apply(configmap("c")));
        snapshot.take(&HubMessage::Event(changed.clone()));
        snapshot.take(&HubMessage::Event(Arc::new(Event::Delete(configmap("a")))));

        let first = snapshot.replay();
        let second = snapshot.replay();
        assert_eq!(names(&first), ["delete a", "apply b", "apply c"]);
        for (one, other) in first.iter().zip(&second) {
            let (HubMessage::Event(one), HubMessage::Event(other)) = (one, other) else {
                panic!("events expected");
            };
            assert!(Arc::ptr_eq(one, other), "each subscriber got its own copy");
        }
        let (HubMessage::Event(b), HubMessage::Event(c)) = (&first[1], &first[2]) else {
            panic!("events expected");
        };
        assert!(
            Arc::ptr_eq(b, &listed),
            "the listed object is the one replayed"
        );
        assert!(
            Arc::ptr_eq(c, &changed),
            "the live event is the one replayed"
        );

        // A wait that joined during a list takes the list's objects as
        // changes, the same copy.
        let mut skip = true;
        let seen = as_seen(HubMessage::Listed(listed.clone()), &mut skip);
        let [HubMessage::Event(seen)] = seen.as_slice() else {
            panic!("one event expected");
        };
        assert!(Arc::ptr_eq(seen, &listed), "a copy for the late subscriber");
    }
}

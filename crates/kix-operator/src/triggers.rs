//! Watches on the objects kix owns, so drift and deletions are corrected at
//! once instead of at the next resync: every change to an owned object
//! triggers a reconcile of its Kix cluster's current operator record.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kix_api::Activation;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::{self, Event};
use tokio::sync::mpsc::UnboundedSender;

use crate::controller::Context;

/// Keeps one metadata watch per kind the current records contain; checks for
/// new kinds every few seconds.
pub async fn run(ctx: Arc<Context>, trigger: UnboundedSender<ObjectRef<Activation>>) {
    let mut watching: BTreeSet<String> = BTreeSet::new();
    let mut resources = kix_engine::resources::Resources::new(ctx.client.clone());
    loop {
        let kinds: Vec<String> = ctx
            .kinds
            .lock()
            .map(|k| k.iter().cloned().collect())
            .unwrap_or_default();
        for kind in kinds {
            if watching.contains(&kind) {
                continue;
            }
            let Some(recorded) = kix_manifest::GroupVersionKind::parse(&kind) else {
                continue;
            };
            resources.refresh();
            let Ok(Some(resource)) = resources.get(recorded.api_version, recorded.kind).await
            else {
                continue;
            };
            watching.insert(kind.clone());
            // Metadata only: the activations annotation is all a trigger needs.
            let api: Api<PartialObjectMeta<DynamicObject>> =
                Api::all_with(ctx.client.clone(), &resource.api);
            let config = watcher::Config::default().labels(&kix_api::labels::managed_selector());
            let ctx = ctx.clone();
            let trigger = trigger.clone();
            tokio::spawn(async move {
                let mut stream = watcher::watcher(api, config).default_backoff().boxed();
                let mut seen: HashMap<String, ObjectKey> = HashMap::new();
                while let Some(event) = stream.next().await {
                    let objects = match event {
                        Ok(Event::Apply(o)) => {
                            let id = o.metadata.uid.clone().unwrap_or_else(|| o.name_any());
                            if seen.insert(id, object_key(&o)).as_ref() == Some(&object_key(&o)) {
                                continue;
                            }
                            vec![o]
                        }
                        Ok(Event::Delete(o)) => {
                            if let Some(uid) = &o.metadata.uid {
                                seen.remove(uid);
                            }
                            vec![o]
                        }
                        _ => continue,
                    };
                    for object in objects {
                        let annotation = object
                            .annotations()
                            .get(kix_api::ANNOTATION_ACTIVATIONS)
                            .cloned()
                            .unwrap_or_default();
                        for name in kix_api::labels::parse_activations(&annotation) {
                            if let Some(current) = current_record_for(&ctx, &name) {
                                touch(&ctx, &current, &resource.api, &object);
                                let _ = trigger.send(ObjectRef::new(&current));
                            }
                        }
                    }
                }
            });
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// What of a record calls for a reconcile: its spec (generation), its
/// deletion and its finalizers, never its status. The operator's own status
/// writes would otherwise start the next reconcile.
type RecordKey = (Option<i64>, bool, Vec<String>);

fn record_key(record: &Activation) -> RecordKey {
    let meta = &record.metadata;
    (
        meta.generation,
        meta.deletion_timestamp.is_some(),
        meta.finalizers.clone().unwrap_or_default(),
    )
}

/// A filter for the stream of records: passes a record the first time and
/// then only when its [`RecordKey`] changed (watch errors pass through).
pub fn record_changes()
-> impl FnMut(&Result<Activation, watcher::Error>) -> futures::future::Ready<bool> {
    let mut seen: HashMap<String, RecordKey> = HashMap::new();
    move |item| {
        let pass = match item {
            Ok(record) => {
                let id = record
                    .metadata
                    .uid
                    .clone()
                    .unwrap_or_else(|| record.name_any());
                seen.insert(id, record_key(record)).as_ref() != Some(&record_key(record))
            }
            Err(_) => true,
        };
        futures::future::ready(pass)
    }
}

/// What of an owned object calls for a reconcile: its spec (generation,
/// for kinds that have one; otherwise any change, resourceVersion), its
/// deletion, finalizers and kix's annotations. Status updates of another
/// controller (a Deployment's replicas) do not.
type ObjectKey = (Option<i64>, Option<String>, bool, Vec<String>, u64);

fn object_key(object: &PartialObjectMeta<DynamicObject>) -> ObjectKey {
    use std::hash::{Hash, Hasher};
    let meta = &object.metadata;
    let mut annotations = std::collections::hash_map::DefaultHasher::new();
    meta.annotations.hash(&mut annotations);
    meta.labels.hash(&mut annotations);
    (
        meta.generation,
        // Kinds without a generation (ConfigMap, Secret) change in place.
        meta.generation
            .is_none()
            .then(|| meta.resource_version.clone())
            .flatten(),
        meta.deletion_timestamp.is_some(),
        meta.finalizers.clone().unwrap_or_default(),
        annotations.finish(),
    )
}

/// Notes that `object` changed, for the next repair of `record` to read.
fn touch(
    ctx: &Context,
    record: &str,
    resource: &kube::discovery::ApiResource,
    object: &PartialObjectMeta<DynamicObject>,
) {
    let key = kix_manifest::ObjectKey {
        group: resource.group.clone(),
        kind: resource.kind.clone(),
        namespace: object.metadata.namespace.clone(),
        name: object.name_any(),
    };
    if let Ok(mut touched) = ctx.touched.lock() {
        touched
            .entry(record.to_string())
            .or_default()
            .objects
            .insert(key);
    }
}

/// The current operator record of the Kix cluster `activation` belongs to.
fn current_record_for(ctx: &Context, activation: &str) -> Option<String> {
    let current = ctx.current.lock().ok()?;
    current
        .iter()
        .find(|(cluster, _)| Activation::sequence_in(activation, cluster).is_some())
        .map(|(_, record)| record.clone())
}

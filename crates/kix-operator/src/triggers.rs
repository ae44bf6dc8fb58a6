//! Watches on the objects kix owns, so drift and deletions are corrected at
//! once instead of at the next resync: every change to an owned object
//! triggers a reconcile of its Kix cluster's current operator record.

use std::collections::{BTreeSet, HashMap, HashSet};
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
                // Claims already reported as not holding: (record, object).
                let mut noted: HashSet<(String, kix_manifest::ObjectKey)> = HashSet::new();
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
                        let key = object_key_of(&resource.api, &object);
                        for name in kix_api::labels::parse_activations(&annotation) {
                            let Some(current) = current_record_for(&ctx, &name) else {
                                continue;
                            };
                            // Anyone who may write the object may write its
                            // claim: it counts only when the record's build
                            // has the object.
                            if !claim_holds(&ctx, &current, &key) {
                                if noted.insert((current.clone(), key.clone())) {
                                    ignored_claim(&ctx, &name, &current, &key).await;
                                }
                                continue;
                            }
                            touch(&ctx, &current, &key);
                            let _ = trigger.send(ObjectRef::new(&current));
                        }
                    }
                }
            });
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// What of a record calls for a reconcile: its spec (generation), its
/// deletion, its finalizers and its shard label (which moves it between
/// the replicas of a sharded operator), never its status. The operator's
/// own status writes would otherwise start the next reconcile.
type RecordKey = (Option<i64>, bool, Vec<String>, Option<String>);

fn record_key(record: &Activation) -> RecordKey {
    let meta = &record.metadata;
    (
        meta.generation,
        meta.deletion_timestamp.is_some(),
        meta.finalizers.clone().unwrap_or_default(),
        meta.labels
            .as_ref()
            .and_then(|l| l.get(kix_api::labels::LABEL_SHARD).cloned()),
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

fn object_key_of(
    resource: &kube::discovery::ApiResource,
    object: &PartialObjectMeta<DynamicObject>,
) -> kix_manifest::ObjectKey {
    kix_manifest::ObjectKey {
        group: resource.group.clone(),
        kind: resource.kind.clone(),
        namespace: object.metadata.namespace.clone(),
        name: object.name_any(),
    }
}

/// Notes that the object `key` changed, for the next repair of `record` to
/// read.
fn touch(ctx: &Context, record: &str, key: &kix_manifest::ObjectKey) {
    if let Ok(mut touched) = ctx.touched.lock() {
        touched
            .entry(record.to_string())
            .or_default()
            .objects
            .insert(key.clone());
    }
}

/// Remembers what the build of `record` declares, for the claims of the
/// objects its watches see ([`claim_holds`]); true the first time for
/// `record` (since the operator started).
pub fn note_build(ctx: &Context, record: &str, path: &str, build: &kix_manifest::Build) -> bool {
    let inventory = kix_engine::claims::remember(path, build);
    let Ok(mut touched) = ctx.touched.lock() else {
        return false;
    };
    let entry = touched.entry(record.to_string()).or_default();
    entry.inventory.replace(inventory).is_none()
}

/// Whether the object `key` can be `record`'s: its build has it. Before the
/// record's build was read (none noted yet), the claim is taken; the plan
/// checks it again.
fn claim_holds(ctx: &Context, record: &str, key: &kix_manifest::ObjectKey) -> bool {
    let Ok(touched) = ctx.touched.lock() else {
        return true;
    };
    match touched.get(record).and_then(|t| t.inventory.as_ref()) {
        Some(inventory) => inventory.declares(key),
        None => true,
    }
}

/// An object claims `claimed` (of the Kix cluster whose current record is
/// `record`) but `record`'s build does not have it: ignored, logged once,
/// and an Event on the record naming it when it claims the record itself
/// (an object that names an older record is a leftover the resync plans).
async fn ignored_claim(ctx: &Context, claimed: &str, record: &str, key: &kix_manifest::ObjectKey) {
    let note = format!(
        "{key} claims {claimed} (kix.run/activations) but is not in its build: ignored, left as it is"
    );
    tracing::warn!(activation = %record, "{note}");
    if claimed != record {
        return;
    }
    let api: Api<Activation> = Api::all(ctx.client.clone());
    if let Ok(Some(found)) = api.get_opt(record).await {
        crate::controller::event(
            ctx,
            &found,
            kube::runtime::events::EventType::Warning,
            "ClaimIgnored",
            note,
        )
        .await;
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

//! Watches on the objects kix owns, so drift and deletions are corrected at
//! once instead of at the next resync: every change to an owned object
//! triggers a reconcile of its Kix cluster's current operator record.

use std::collections::BTreeSet;
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
            let Some((api_version, k)) = kind.rsplit_once('/') else {
                continue;
            };
            resources.refresh();
            let Ok(Some(resource)) = resources.get(api_version, k).await else {
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
                while let Some(event) = stream.next().await {
                    let objects = match event {
                        Ok(Event::Apply(o)) | Ok(Event::Delete(o)) => vec![o],
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

/// The current operator record of the Kix cluster `activation` belongs to.
fn current_record_for(ctx: &Context, activation: &str) -> Option<String> {
    let current = ctx.current.lock().ok()?;
    current
        .iter()
        .find(|(cluster, _)| Activation::sequence_in(activation, cluster).is_some())
        .map(|(_, record)| record.clone())
}

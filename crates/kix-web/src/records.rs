//! The one watch on Activation records every page and every live update
//! reads: a reflector's store, and a broadcast of each change.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kix_api::Activation;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde::Serialize;
use tokio::sync::broadcast;
use tokio::task::AbortHandle;

/// A record changed (or went away): what a page's live update is told.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    /// Its Kix cluster.
    pub cluster: String,
    pub record: String,
    /// Its phase now; none when it is Pending or deleted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The record is gone.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
}

impl Change {
    fn of(record: &Activation, deleted: bool) -> Change {
        Change {
            cluster: record.cluster_name().to_string(),
            record: record.name_any(),
            phase: record.phase().map(|p| p.to_string()),
            deleted,
        }
    }
}

/// How long a page waits for the watch's first list.
const READY_WITHIN: Duration = Duration::from_secs(10);

/// Every Activation record, kept by one watch.
pub struct Records {
    store: Store<Activation>,
    changes: broadcast::Sender<(Change, Arc<Activation>)>,
    /// The watch's last error, until it lists again.
    error: Arc<Mutex<Option<String>>>,
    task: AbortHandle,
}

impl Drop for Records {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Records {
    /// Starts the watch (on the current tokio runtime).
    pub fn watch(client: Client) -> Records {
        let (store, writer) = reflector::store();
        let (changes, _) = broadcast::channel(1024);
        let error = Arc::new(Mutex::new(None));
        let api: Api<Activation> = Api::all(client);
        let stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .reflect(writer);
        let (sender, last_error) = (changes.clone(), error.clone());
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(event) => {
                        set(&last_error, None);
                        announce(&sender, event);
                    }
                    Err(err) => {
                        tracing::warn!(error = %err, "watching Activation records");
                        set(&last_error, Some(explain(&err)));
                    }
                }
            }
        })
        .abort_handle();
        Records {
            store,
            changes,
            error,
            task,
        }
    }

    /// Every record, once the watch has listed them; else why not (at
    /// once when the watch failed, else after [`READY_WITHIN`]).
    pub async fn all(&self) -> Result<Vec<Arc<Activation>>, String> {
        let started = tokio::time::Instant::now();
        loop {
            let ready = self.store.wait_until_ready();
            if tokio::time::timeout(Duration::from_millis(200), ready)
                .await
                .is_ok()
            {
                return Ok(self.store.state());
            }
            let failed = self.error();
            if failed.is_some() || started.elapsed() > READY_WITHIN {
                let why = failed.unwrap_or_else(|| "no answer yet".to_string());
                return Err(format!("the Activation records could not be listed: {why}"));
            }
        }
    }

    /// The watch's last error, while it has not listed again since.
    pub fn error(&self) -> Option<String> {
        self.error.lock().ok().and_then(|e| e.clone())
    }

    /// Every change from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<(Change, Arc<Activation>)> {
        self.changes.subscribe()
    }
}

/// A watch error as a person reads it.
fn explain(err: &watcher::Error) -> String {
    match err {
        watcher::Error::InitialListFailed(kube::Error::Api(status)) if status.code == 404 => {
            "the Activation CRD is not installed (`kix crds | kubectl apply -f -`)".to_string()
        }
        other => other.to_string(),
    }
}

fn set(slot: &Mutex<Option<String>>, value: Option<String>) {
    if let Ok(mut slot) = slot.lock() {
        *slot = value;
    }
}

fn announce(
    sender: &broadcast::Sender<(Change, Arc<Activation>)>,
    event: watcher::Event<Activation>,
) {
    let (record, deleted) = match event {
        watcher::Event::Apply(r) | watcher::Event::InitApply(r) => (r, false),
        watcher::Event::Delete(r) => (r, true),
        watcher::Event::Init | watcher::Event::InitDone => return,
    };
    // No receiver is no error: nobody is looking.
    let _ = sender.send((Change::of(&record, deleted), Arc::new(record)));
}

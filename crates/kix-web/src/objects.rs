//! The objects of a Kix cluster's applied activation with their health, as
//! `kix status` reads them ([`kix_engine::status::status`]): read once per
//! change of the applied record (or when older than [`FRESH`]), shared by
//! every viewer and page asking meanwhile, and shown a page at a time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use kix_api::Activation;
use kix_engine::status::{HealthState, ObjectStatus, Status};
use kube::{Client, ResourceExt};

/// How long a reading serves before the next request reads again.
const FRESH: Duration = Duration::from_secs(15);

/// A reading of one Kix cluster's status, shared while it runs.
pub type Reading = Shared<BoxFuture<'static, Result<Arc<Status>, String>>>;

struct Entry {
    /// The applied record's name and resourceVersion it was read for.
    record: (String, String),
    started: Instant,
    reading: Reading,
}

/// The latest reading per Kix cluster.
pub struct Statuses {
    client: Client,
    entries: Mutex<HashMap<String, Entry>>,
}

impl Statuses {
    pub fn new(client: Client) -> Statuses {
        Statuses {
            client,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The status of `cluster` whose applied record is `applied`: the
    /// reading under way or done for it, else a new one.
    pub fn of(&self, cluster: &str, applied: &Activation) -> Reading {
        let record = (
            applied.name_any(),
            applied.resource_version().unwrap_or_default(),
        );
        let Ok(mut entries) = self.entries.lock() else {
            return self.read(cluster);
        };
        if let Some(entry) = entries.get(cluster)
            && entry.record == record
            && entry.started.elapsed() < FRESH
        {
            return entry.reading.clone();
        }
        let reading = self.read(cluster);
        entries.insert(
            cluster.to_string(),
            Entry {
                record,
                started: Instant::now(),
                reading: reading.clone(),
            },
        );
        reading
    }

    fn read(&self, cluster: &str) -> Reading {
        let (client, cluster) = (self.client.clone(), cluster.to_string());
        let reading = async move {
            kix_engine::status::status(&client, &cluster)
                .await
                .map(Arc::new)
                .map_err(|e| e.to_string())
        }
        .boxed()
        .shared();
        // Driven to the end even when the page that asked goes away.
        tokio::spawn(reading.clone());
        reading
    }
}

/// Rows per page of objects: a 50,000-object activation is 100 pages, each
/// well under the 2 MB a page may weigh.
pub const PAGE_SIZE: usize = 500;

/// One object row: its package and status.
pub struct Row<'a> {
    pub package: &'a str,
    pub object: &'a ObjectStatus,
}

/// The objects of `status` whose health is `only` (all when none), in the
/// build's package order: how many in all, and those of page `page` (from 1).
pub fn page(status: &Status, only: Option<HealthState>, page: usize) -> (usize, Vec<Row<'_>>) {
    let matching = status.packages.iter().flat_map(|p| {
        p.objects
            .iter()
            .filter(move |o| only.is_none_or(|h| o.health == h))
            .map(move |o| Row {
                package: &p.name,
                object: o,
            })
    });
    let total = matching.clone().count();
    let rows = matching
        .skip(page.saturating_sub(1) * PAGE_SIZE)
        .take(PAGE_SIZE)
        .collect();
    (total, rows)
}

//! The live state kix owns: one LIST per kind with kix's label selector, read
//! as metadata only (the digest annotation is the plan's fast path).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt, stream};
use kix_api::{
    ANNOTATION_ACTIVATIONS, ANNOTATION_DIGEST, ANNOTATION_PRUNE, LABEL_MANAGED_BY, LABEL_OWNER,
    LABEL_PACKAGE, MANAGED_BY_VALUE, PRUNE_DISABLED, owner_value,
};
use kix_manifest::{KeyMap, ObjectKey};
use kube::api::{DynamicObject, ListParams};
use kube::discovery::ApiResource;
use kube::{Client, Resource};
use serde::Deserialize;

use crate::error::{EngineError, Result};

/// What the plan needs to know of one live object.
#[derive(Debug, Clone)]
pub struct Live {
    pub key: ObjectKey,
    /// Shared by every object of its kind.
    pub resource: Arc<ApiResource>,
    pub namespaced: bool,
    /// Labelled by kix *and* the owner label names this object's identity.
    pub owned: bool,
    /// It has kix's managed-by label.
    pub managed: bool,
    /// Its package label: a prune stopped for a package leaves its objects.
    pub package: Option<String>,
    pub digest: Option<String>,
    pub activations: BTreeSet<String>,
    /// Why prune keeps it whatever the build says (`kix.run/prune: disabled`,
    /// `helm.sh/resource-policy: keep`): the plan's note.
    pub keep: Option<&'static str>,
    /// Set when the object is being deleted (it has a deletionTimestamp).
    pub deletion: Option<Deletion>,
    /// The version the LIST saw: a later read of the object at (or after)
    /// it is served from the apiserver's cache instead of etcd.
    pub resource_version: Option<String>,
    /// Field managers with an Apply entry (which Kix clusters applied it as
    /// their own manager, and whether the single `kix` of earlier versions did).
    pub appliers: Vec<String>,
    /// The keys of its Kix cluster labels (`cluster.kix.run/<cluster>`):
    /// the clusters that marked it as theirs.
    pub cluster_labels: Vec<String>,
}

pub use crate::plan_object::{Deletion, human_duration};

impl Live {
    /// Its `apiVersion`, e.g. `apps/v1`.
    pub fn api_version(&self) -> &str {
        &self.resource.api_version
    }

    /// Whether `cluster` marked it with its label ([`kix_api::labels::cluster_label`]).
    pub fn labelled_for(&self, cluster: &str) -> bool {
        let key = kix_api::labels::cluster_label(cluster);
        self.cluster_labels.contains(&key)
    }
}

/// Objects read by LISTs in this process: what a plan reads grows with
/// them (the operator's `/metrics` shows it).
static OBJECTS_READ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many objects the LISTs of this process read so far.
pub fn objects_read() -> u64 {
    OBJECTS_READ.load(std::sync::atomic::Ordering::Relaxed)
}

/// Counts `n` objects read by a LIST.
pub(crate) fn count_read(n: usize) {
    OBJECTS_READ.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
}

/// How many LISTs run at once.
const LIST_CONCURRENCY: usize = 8;

/// Lists every kind in `kinds` once, cluster-wide, with `selector`; returns
/// the objects by key.
pub async fn list_kinds(
    client: &Client,
    kinds: Vec<(ApiResource, bool)>,
    selector: Option<&str>,
) -> Result<KeyMap<ObjectKey, Live>> {
    list_kinds_in(client, kinds, selector, &[]).await
}

/// [`list_kinds`], where the cluster-wide LIST of a namespaced kind that the
/// account may not make (a tenant whose Roles hold only its namespaces) is
/// made in each of `namespaces` instead: what it cannot see is neither
/// planned against nor pruned.
pub async fn list_kinds_in(
    client: &Client,
    kinds: Vec<(ApiResource, bool)>,
    selector: Option<&str>,
    namespaces: &[String],
) -> Result<KeyMap<ObjectKey, Live>> {
    let lists = stream::iter(kinds.into_iter().map(|(resource, namespaced)| {
        let client = client.clone();
        let selector = selector.map(str::to_string);
        async move {
            let mut params = ListParams::default();
            if let Some(selector) = &selector {
                params = params.labels(selector);
            }
            let resource = Arc::new(resource);
            match list_served(&client, &resource, namespaced, None, &params).await {
                Err(err) if namespaced && !namespaces.is_empty() && err.is_forbidden() => {
                    let mut items = Vec::new();
                    for namespace in namespaces {
                        let listed = Some(namespace.as_str());
                        items.extend(
                            list_served(&client, &resource, namespaced, listed, &params).await?,
                        );
                    }
                    Ok(items)
                }
                listed => listed,
            }
        }
    }))
    .buffer_unordered(LIST_CONCURRENCY)
    .try_collect::<Vec<_>>()
    .await?;
    Ok(lists
        .into_iter()
        .flatten()
        .map(|live| (live.key.clone(), live))
        .collect())
}

/// Lists `kind` in the given namespaces (or cluster-wide), without selector:
/// finds objects that exist without kix's labels (candidates for adoption).
pub async fn list_unlabelled(
    client: &Client,
    resource: &ApiResource,
    namespaced: bool,
    namespaces: &BTreeSet<Option<String>>,
) -> Result<KeyMap<ObjectKey, Live>> {
    let mut out = KeyMap::default();
    let resource = Arc::new(resource.clone());
    for ns in namespaces {
        let ns = match (namespaced, ns) {
            (true, Some(ns)) => Some(ns.as_str()),
            _ => None,
        };
        let items = list_served(client, &resource, namespaced, ns, &ListParams::default()).await?;
        out.extend(items.into_iter().map(|live| (live.key.clone(), live)));
    }
    Ok(out)
}

/// The objects named, each read by its name with no selector (one request
/// each, for the few objects a watch saw change): the owned ones and the
/// others alike. A name not found is simply not returned. An object the
/// account may not read is an error when `ours` says it is the plan's
/// (its build has it); any other is not read, logged and left: it only
/// claimed to be, and a claim anyone may write never fails a record.
pub async fn read_named(
    client: &Client,
    named: Vec<(ObjectKey, ApiResource, bool)>,
    ours: impl Fn(&ObjectKey) -> bool,
) -> Result<Vec<Live>> {
    let named: Vec<_> = named
        .into_iter()
        .map(|(key, resource, namespaced)| {
            let ours = ours(&key);
            (key, resource, namespaced, ours)
        })
        .collect();
    let reads = stream::iter(named.into_iter().map(|(key, resource, namespaced, ours)| {
        let client = client.clone();
        async move {
            let params = ListParams::default().fields(&format!("metadata.name={}", key.name));
            let namespace = key.namespace.as_deref().filter(|_| namespaced);
            match list_served(&client, &Arc::new(resource), namespaced, namespace, &params).await {
                Err(err) if !ours && err.is_forbidden() => {
                    tracing::warn!("not reading {key}, which is not the build's: {err}");
                    Ok(vec![])
                }
                read => read,
            }
        }
    }))
    .buffer_unordered(LIST_CONCURRENCY)
    .try_collect::<Vec<_>>()
    .await?;
    Ok(reads.into_iter().flatten().collect())
}

/// [`list_lean`], with a kind not served (its CRD not installed yet: 404)
/// having no objects.
async fn list_served(
    client: &Client,
    resource: &Arc<ApiResource>,
    namespaced: bool,
    namespace: Option<&str>,
    params: &ListParams,
) -> Result<Vec<Live>> {
    match list_lean(client, resource, namespaced, namespace, params).await {
        Ok(items) => Ok(items),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(vec![]),
        Err(source) => Err(EngineError::List {
            kind: resource.kind.clone(),
            source,
        }),
    }
}

/// The metadata the plan reads of a listed object. Everything else, above
/// all the field sets of `managedFields` (most of a metadata LIST's bytes)
/// and the labels and annotations that are not kix's, is skipped while
/// parsing, not built and dropped.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeanMeta {
    name: Option<String>,
    namespace: Option<String>,
    labels: Option<Picked<KixLabels>>,
    annotations: Option<Picked<KixAnnotations>>,
    deletion_timestamp: Option<String>,
    finalizers: Option<Vec<String>>,
    resource_version: Option<String>,
    managed_fields: Option<Vec<LeanManager>>,
}

/// A managedFields entry without its field set.
#[derive(Deserialize)]
struct LeanManager {
    manager: Option<String>,
    operation: Option<String>,
}

/// A batch of a LIST's items ([`crate::list_stream`]).
#[derive(Deserialize)]
struct LeanBatch {
    /// `null` when the list is empty.
    items: Option<Vec<LeanItem>>,
}

#[derive(Deserialize)]
struct LeanItem {
    metadata: LeanMeta,
}

/// The keys of a string map that [`Picked`] keeps.
pub(crate) trait Wanted {
    const KEYS: &'static [&'static str];
    /// Keys starting with it are kept too, by name ([`Picked::prefixed`]).
    const PREFIX: Option<&'static str> = None;
}

/// kix's labels of a listed object.
pub(crate) struct KixLabels;
impl Wanted for KixLabels {
    const KEYS: &'static [&'static str] = &[LABEL_OWNER, LABEL_PACKAGE, LABEL_MANAGED_BY];
    const PREFIX: Option<&'static str> = Some(kix_api::labels::CLUSTER_LABEL_PREFIX);
}

/// kix's annotations of a listed object.
pub(crate) struct KixAnnotations;
impl Wanted for KixAnnotations {
    const KEYS: &'static [&'static str] = &[
        ANNOTATION_DIGEST,
        ANNOTATION_ACTIVATIONS,
        ANNOTATION_PRUNE,
        kix_manifest::helm::RESOURCE_POLICY,
        kix_manifest::helm::HOOK,
    ];
}

/// The values of `W::KEYS` in a JSON map of strings, in that order; other
/// entries are skipped unread (a map per object was 1 KB at 50,000 objects).
pub(crate) struct Picked<W> {
    values: Vec<Option<String>>,
    /// The keys starting with `W::PREFIX`.
    prefixed: Vec<String>,
    wanted: std::marker::PhantomData<W>,
}

impl<W: Wanted> Picked<W> {
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        let index = W::KEYS.iter().position(|k| *k == key)?;
        self.values.get(index)?.as_deref()
    }
}

impl<'de, W: Wanted> Deserialize<'de> for Picked<W> {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Self, D::Error> {
        deserializer.deserialize_map(PickedVisitor::<W>(std::marker::PhantomData))
    }
}

struct PickedVisitor<W>(std::marker::PhantomData<W>);

impl<'de, W: Wanted> serde::de::Visitor<'de> for PickedVisitor<W> {
    type Value = Picked<W>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a map of strings")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Picked<W>, A::Error> {
        let mut values = vec![None; W::KEYS.len()];
        let mut prefixed = Vec::new();
        while let Some(key) = map.next_key_seed(KeyIndex(W::KEYS, W::PREFIX))? {
            match key {
                PickedKey::Wanted(i) => values[i] = map.next_value::<Option<String>>()?,
                PickedKey::Prefixed(key) => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                    prefixed.push(key);
                }
                PickedKey::Other => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok(Picked {
            values,
            prefixed,
            wanted: std::marker::PhantomData,
        })
    }
}

/// A map key as [`Picked`] reads it.
enum PickedKey {
    /// Its index in the wanted keys.
    Wanted(usize),
    /// A key with the wanted prefix, kept by name.
    Prefixed(String),
    Other,
}

/// A map key read as a [`PickedKey`], allocating only for a prefixed one.
struct KeyIndex(&'static [&'static str], Option<&'static str>);

impl<'de> serde::de::DeserializeSeed<'de> for KeyIndex {
    type Value = PickedKey;

    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> std::result::Result<PickedKey, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl serde::de::Visitor<'_> for KeyIndex {
    type Value = PickedKey;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a string key")
    }

    fn visit_str<E: serde::de::Error>(self, key: &str) -> std::result::Result<PickedKey, E> {
        if let Some(i) = self.0.iter().position(|k| *k == key) {
            return Ok(PickedKey::Wanted(i));
        }
        Ok(match self.1 {
            Some(prefix) if key.starts_with(prefix) => PickedKey::Prefixed(key.to_string()),
            _ => PickedKey::Other,
        })
    }
}

/// Objects parsed at once from a metadata LIST. The LIST is one request,
/// read as it arrives ([`crate::list_stream`]): one LIST of 50,000 objects
/// is 49 MB of text, more than 100 MB parsed, and paging it cost the
/// apiserver twice the CPU.
const LIST_BATCH: usize = 2_000;

/// A metadata-only LIST of `resource` (in `namespace`, or everywhere), its
/// items turned into [`Live`]s a batch at a time as the response arrives.
async fn list_lean(
    client: &Client,
    resource: &Arc<ApiResource>,
    namespaced: bool,
    namespace: Option<&str>,
    params: &ListParams,
) -> kube::Result<Vec<Live>> {
    let url = DynamicObject::url_path(resource, namespace);
    let request = kube::core::Request::new(&url)
        .list_metadata(params)
        .map_err(kube::Error::BuildRequest)?;
    let body = client.request_stream(request).await?;
    let mut batches = crate::list_stream::Batches::new(Box::pin(body), LIST_BATCH);
    let mut out = Vec::new();
    while let Some(batch) = batches.next().await.map_err(kube::Error::ReadEvents)? {
        let batch: LeanBatch = serde_json::from_str(&batch).map_err(kube::Error::SerdeError)?;
        let items = batch.items.unwrap_or_default();
        count_read(items.len());
        out.extend(
            items
                .into_iter()
                .map(|item| to_live(item.metadata, resource, namespaced)),
        );
    }
    Ok(out)
}

fn to_live(meta: LeanMeta, resource: &Arc<ApiResource>, namespaced: bool) -> Live {
    let key = ObjectKey {
        group: resource.group.clone(),
        kind: resource.kind.clone(),
        namespace: if namespaced { meta.namespace } else { None },
        name: meta.name.unwrap_or_default(),
    };
    let label = |k| meta.labels.as_ref().and_then(|l| l.get(k));
    let annotation = |k| meta.annotations.as_ref().and_then(|a| a.get(k));
    let owned = label(LABEL_OWNER).is_some_and(|v| {
        v == owner_value(&key.group, &key.kind, key.namespace.as_deref(), &key.name)
    });
    Live {
        owned,
        managed: label(LABEL_MANAGED_BY) == Some(MANAGED_BY_VALUE),
        package: label(LABEL_PACKAGE).map(|p| p.to_string()),
        digest: annotation(ANNOTATION_DIGEST).map(str::to_string),
        activations: annotation(ANNOTATION_ACTIVATIONS)
            .map(kix_api::labels::parse_activations)
            .unwrap_or_default(),
        keep: if annotation(ANNOTATION_PRUNE).is_some_and(|v| v == PRUNE_DISABLED) {
            Some(crate::plan_object::NOTE_PRUNE_DISABLED)
        } else if kix_manifest::helm::keeps(annotation(kix_manifest::helm::RESOURCE_POLICY)) {
            Some(crate::plan_object::NOTE_HELM_KEEP)
        } else if annotation(kix_manifest::helm::HOOK).is_some() {
            Some(crate::plan_object::NOTE_HELM_HOOK)
        } else {
            None
        },
        deletion: Deletion::of(
            meta.deletion_timestamp.as_deref(),
            meta.finalizers.as_deref().unwrap_or_default(),
        ),
        resource_version: meta.resource_version,
        appliers: meta
            .managed_fields
            .unwrap_or_default()
            .into_iter()
            .filter(|m| m.operation.as_deref() == Some("Apply"))
            .filter_map(|m| m.manager)
            .collect(),
        cluster_labels: meta.labels.map(|l| l.prefixed).unwrap_or_default(),
        resource: Arc::clone(resource),
        namespaced,
        key,
    }
}

/// Which Kix cluster an activation name belongs to: the record's cluster when
/// the record exists, else the `<cluster>-<n>` form of the name.
pub fn activation_clusters(records: &[kix_api::Activation]) -> BTreeMap<String, String> {
    records
        .iter()
        .filter_map(|r| Some((r.metadata.name.clone()?, r.cluster_name().to_string())))
        .collect()
}

pub fn belongs_to(activation: &str, cluster: &str, clusters: &BTreeMap<String, String>) -> bool {
    match clusters.get(activation) {
        Some(c) => c == cluster,
        None => kix_api::Activation::sequence_in(activation, cluster).is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_object_keeps_kix_labels_and_annotations_only() {
        let item = r#"{"metadata": {
            "name": "cm", "namespace": "ns",
            "labels": {"app": "x", "kix.run/owner": "ConfigMap.ns.cm", "k\u0069x.run/package": "p",
                       "cluster.kix.run/c": "true", "cluster.kix.run/d": "true"},
            "annotations": {"kix.run/digest": "d1", "big": "a long value", "kix.run/activations": "c-1,c-2",
                            "kix.run/prune": null},
            "managedFields": [{"manager": "kix-c", "operation": "Apply", "fieldsV1": {"f:data": {}}}]
        }}"#;
        let item: LeanItem = serde_json::from_str(item).expect("parses");
        let labels = item.metadata.labels.as_ref().expect("labels");
        assert_eq!(labels.get(LABEL_OWNER), Some("ConfigMap.ns.cm"));
        assert_eq!(labels.get("app"), None, "only kix's owner label is kept");
        let annotations = item.metadata.annotations.as_ref().expect("annotations");
        assert_eq!(annotations.get(ANNOTATION_DIGEST), Some("d1"));
        assert_eq!(annotations.get(ANNOTATION_ACTIVATIONS), Some("c-1,c-2"));
        assert_eq!(annotations.get(ANNOTATION_PRUNE), None);
        assert_eq!(annotations.get("big"), None);

        let resource = Arc::new(ApiResource {
            group: String::new(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            plural: "configmaps".into(),
        });
        let live = to_live(item.metadata, &resource, true);
        assert_eq!(live.digest.as_deref(), Some("d1"));
        assert_eq!(live.activations.len(), 2);
        assert_eq!(live.appliers, ["kix-c"]);
        assert!(live.labelled_for("c") && live.labelled_for("d"));
        assert!(!live.labelled_for("e"));
        assert_eq!(live.api_version(), "v1");
    }

    #[test]
    fn an_empty_or_missing_map_keeps_nothing() {
        let item: LeanItem =
            serde_json::from_str(r#"{"metadata": {"name": "cm", "labels": {}}}"#).expect("parses");
        assert_eq!(
            item.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_OWNER)),
            None
        );
        assert!(item.metadata.annotations.is_none());
    }
}

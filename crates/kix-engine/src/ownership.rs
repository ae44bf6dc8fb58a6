//! Field ownership: every Kix cluster applies as its own server-side apply
//! field manager (`kix/<cluster>`), so the apiserver tracks each cluster's
//! fields apart from every other cluster's and every controller's.
//!
//! - **Conflicts**: an apply is sent without force first. A 409 names the
//!   contested fields and their managers ([`Contest`]); kix takes a field
//!   only when the [`Takeover`] allows it: its own bookkeeping annotations and
//!   the single manager of earlier versions always, other controllers when
//!   forced or correcting drift, another Kix cluster only with an explicit
//!   `--force-conflicts`.
//! - **Drift** ([`drifted_fields`]) is decided from the server's managed
//!   fields, not from values: a field the build sets that kix's manager no
//!   longer owns was changed or removed by someone else (the server moves a
//!   field's ownership to whoever changes it). What the apiserver omits,
//!   defaults or normalises (`minReadySeconds: 0`, `cpu: 1000m`) stays owned
//!   and is never drift; fields other managers own that kix never set are
//!   not looked at.
//! - **Take-over** from [`LEGACY_FIELD_MANAGER`]: the first deploy by a
//!   cluster applies its fields as its own manager (sharing them with `kix`),
//!   then, once every Kix cluster that shares the object has its own manager,
//!   `kix` gives up its fields with an empty apply — the documented way to
//!   transfer ownership between managers.

use std::collections::{BTreeMap, BTreeSet};

use kix_api::{ANNOTATION_ACTIVATIONS, ANNOTATION_DIGEST, LABEL_PACKAGE, LEGACY_FIELD_MANAGER};
use kix_manifest::node::Node;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Map, Value, json};

use crate::live::belongs_to;
use crate::plan_object::{Action, PlannedObject};

/// Whose fields an apply may take when the server reports conflicts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Takeover {
    /// Fields of managers that are not Kix clusters (kubectl, controllers).
    pub from_controllers: bool,
    /// Fields another Kix cluster set to another value.
    pub from_kix_clusters: bool,
}

impl Takeover {
    pub const ALL: Takeover = Takeover {
        from_controllers: true,
        from_kix_clusters: true,
    };
}

/// One field the server refused to let an apply change, and its manager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contest {
    /// Dotted path as the server names it, without the leading dot.
    pub field: String,
    /// The manager holding it (`kix/infra`, `kubectl-edit`), or the server's
    /// message when it names none.
    pub manager: String,
}

/// Who holds a contested field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Contender {
    /// kix's digest and activations annotations and its package label:
    /// kix's, whoever wrote them last.
    KixAnnotation,
    /// The single field manager of earlier kix versions.
    Legacy,
    KixCluster(String),
    Other(String),
}

impl Contest {
    pub fn contender(&self) -> Contender {
        let annotation = |a: &str| self.field == format!("metadata.annotations.{a}");
        let label = self.field == format!("metadata.labels.{LABEL_PACKAGE}");
        if annotation(ANNOTATION_DIGEST) || annotation(ANNOTATION_ACTIVATIONS) || label {
            Contender::KixAnnotation
        } else if self.manager == LEGACY_FIELD_MANAGER {
            Contender::Legacy
        } else if let Some(cluster) = kix_api::cluster_of_manager(&self.manager) {
            Contender::KixCluster(cluster.to_owned())
        } else {
            Contender::Other(self.manager.clone())
        }
    }

    fn takeable(&self, takeover: Takeover) -> bool {
        match self.contender() {
            Contender::KixAnnotation | Contender::Legacy => true,
            Contender::KixCluster(_) => takeover.from_kix_clusters,
            Contender::Other(_) => takeover.from_controllers,
        }
    }

    /// How the plan shows it, from `cluster`'s side.
    pub fn describe(&self, cluster: &str) -> String {
        match self.contender() {
            Contender::KixCluster(other) => format!(
                "{}: Kix cluster {other:?} (field manager {}) set another value than Kix cluster {cluster:?}",
                self.field, self.manager
            ),
            _ => format!("{}: conflict with {:?}", self.field, self.manager),
        }
    }
}

/// The contested fields of a 409 from server-side apply. The server names
/// each as `conflict with "<manager>"` (`… using <apiVersion>` for a manager
/// whose last write was an update).
pub fn contests(status: &kube::core::Status) -> Vec<Contest> {
    let causes = status
        .details
        .as_ref()
        .map(|d| d.causes.as_slice())
        .unwrap_or_default();
    causes
        .iter()
        .map(|cause| Contest {
            field: cause.field.trim_start_matches('.').to_owned(),
            manager: cause
                .message
                .split('"')
                .nth(1)
                .unwrap_or(&cause.message)
                .to_owned(),
        })
        .collect()
}

/// What an apply came to.
#[derive(Debug)]
pub enum Applied {
    Object(Box<DynamicObject>),
    /// Fields the [`Takeover`] does not allow taking: nothing was changed.
    Conflicts(Vec<Contest>),
}

/// Server-side applies `manifest` as `manager`: first without force; on a
/// conflict, once more with force when every contested field may be taken.
/// A dry-run validates fields strictly. Also returns the server's warnings.
pub async fn apply(
    client: &kube::Client,
    api: &Api<DynamicObject>,
    name: &str,
    manifest: &Value,
    manager: &str,
    takeover: Takeover,
    dry_run: bool,
) -> (kube::Result<Applied>, Vec<String>) {
    let mut params = PatchParams::apply(manager);
    if dry_run {
        params = params.validation_strict();
        params.dry_run = true;
    }
    params.force = takeover == Takeover::ALL;
    let send = |params: PatchParams| async move {
        patch_with_warnings(client, api, name, &params, manifest).await
    };
    let (result, warnings) = send(params.clone()).await;
    let status = match result {
        Ok(object) => return (Ok(Applied::Object(Box::new(object))), warnings),
        Err(kube::Error::Api(status)) if status.code == 409 && !params.force => status,
        Err(err) => return (Err(err), warnings),
    };
    let contested = contests(&status);
    if contested.is_empty() {
        let unnamed = Contest {
            field: String::new(),
            manager: status.message.clone(),
        };
        return (Ok(Applied::Conflicts(vec![unnamed])), warnings);
    }
    let refused: Vec<Contest> = contested
        .into_iter()
        .filter(|c| !c.takeable(takeover))
        .collect();
    if !refused.is_empty() {
        return (Ok(Applied::Conflicts(refused)), warnings);
    }
    params.force = true;
    let (result, warnings) = send(params).await;
    (result.map(|o| Applied::Object(Box::new(o))), warnings)
}

pub use crate::plan_object::Legacy;

/// The note of a plan's take-over.
pub const NOTE_TAKE_OVER: &str = "field manager kix becomes kix/<cluster> (one write, same fields)";

/// [`LEGACY_FIELD_MANAGER`] gives up every field it owns: an apply of the
/// object's identity alone. Fields this cluster's manager (or any other)
/// shares stay; fields only `kix` held are removed, as its next apply of a
/// build without them would have done.
pub async fn release_legacy(api: &Api<DynamicObject>, manifest: &Value) -> kube::Result<()> {
    let mut metadata = Map::new();
    for key in ["name", "namespace"] {
        if let Some(v) = manifest["metadata"].get(key) {
            metadata.insert(key.to_owned(), v.clone());
        }
    }
    let empty = json!({
        "apiVersion": manifest["apiVersion"],
        "kind": manifest["kind"],
        "metadata": metadata,
    });
    let name = manifest["metadata"]["name"].as_str().unwrap_or_default();
    api.patch(
        name,
        &PatchParams::apply(LEGACY_FIELD_MANAGER),
        &Patch::Apply(&empty),
    )
    .await
    .map(|_| ())
}

/// The field set `manager` applied on `object` (its Apply entry's `fieldsV1`).
pub fn owned_fields<'a>(object: &'a Value, manager: &str) -> Option<&'a Map<String, Value>> {
    entries(object)
        .find(|e| e.manager == manager && e.operation == "Apply" && e.subresource.is_none())
        .and_then(|e| e.fields)
}

/// A field set without kix's digest and activations annotations and its
/// package label, which the Kix clusters sharing an object take from each
/// other by design.
pub fn without_bookkeeping(fields: &Map<String, Value>) -> Map<String, Value> {
    let mut fields = fields.clone();
    let Some(metadata) = fields.get_mut("f:metadata").and_then(Value::as_object_mut) else {
        return fields;
    };
    if let Some(annotations) = metadata
        .get_mut("f:annotations")
        .and_then(Value::as_object_mut)
    {
        for a in [ANNOTATION_DIGEST, ANNOTATION_ACTIVATIONS] {
            annotations.remove(&format!("f:{a}"));
        }
        // A set without them has no node for them at all.
        if annotations.keys().all(|k| k == ".") {
            metadata.remove("f:annotations");
        }
    }
    // Each cluster labels a shared object with its own package's name.
    if let Some(labels) = metadata.get_mut("f:labels").and_then(Value::as_object_mut) {
        labels.remove(&format!("f:{LABEL_PACKAGE}"));
    }
    if metadata.is_empty() {
        fields.remove("f:metadata");
    }
    fields
}

/// Field manager that holds handed-off fields kix owned until a handoff rule
/// named them, so that kix's apply without them does not reset them to their
/// defaults. It lets them go, and disappears, once their new manager writes
/// them (the documented hand-over of `spec.replicas` to an autoscaler).
pub const HANDOVER_FIELD_MANAGER: &str = "kix-handover";

/// Before an apply without the handed-off `fields`: those of them that
/// `manager` still owns on the live object are applied, with their live
/// values, as [`HANDOVER_FIELD_MANAGER`] (sharing them: no conflict, no
/// change). A GET, and an apply only when kix owned one of them.
pub async fn hand_over(
    api: &Api<DynamicObject>,
    manifest: &Value,
    fields: &[String],
    manager: &str,
) -> kube::Result<()> {
    let name = manifest["metadata"]["name"].as_str().unwrap_or_default();
    let Some(live) = api.get_opt(name).await? else {
        return Ok(());
    };
    let live = serde_json::to_value(live).unwrap_or_default();
    // Before the take-over, what kix applied is the single manager's.
    let owned = owned_fields(&live, manager).or_else(|| owned_fields(&live, LEGACY_FIELD_MANAGER));
    let Some(owned) = owned else {
        return Ok(());
    };
    let held: Vec<String> = fields
        .iter()
        .filter(|f| {
            let path = kix_manifest::field_segments(f);
            let steps: Vec<Step> = path.iter().map(|s| Step::Field(s)).collect();
            owns(owned, &steps)
        })
        .cloned()
        .collect();
    if held.is_empty() {
        return Ok(());
    }
    let mut partial = kix_manifest::select_fields(&held, &live);
    partial["apiVersion"] = manifest["apiVersion"].clone();
    partial["kind"] = manifest["kind"].clone();
    for key in ["name", "namespace"] {
        if let Some(v) = manifest["metadata"].get(key) {
            partial["metadata"][key] = v.clone();
        }
    }
    api.patch(
        name,
        &PatchParams::apply(HANDOVER_FIELD_MANAGER),
        &Patch::Apply(&partial),
    )
    .await
    .map(|_| ())
}

// ---------------------------------------------------------------- planning

/// Whose fields applying `planned` may take: other controllers' when forced,
/// adopting or correcting drift; other Kix clusters' only when forced by a
/// user (`yield_to_kix_clusters` unset). An adopted object carried no kix
/// labels, so no Kix cluster applied it: forced at once (one request).
pub fn takeover(planned: &PlannedObject, force: bool, yield_to_kix_clusters: bool) -> Takeover {
    if planned.action == Action::Adopt {
        return Takeover::ALL;
    }
    Takeover {
        from_controllers: force || planned.is_drift(),
        from_kix_clusters: force && !yield_to_kix_clusters,
    }
}

/// Note of an object another Kix cluster applied last whose fields of this
/// build are all in place.
pub const NOTE_SHARED_SAME: &str =
    "shared: another Kix cluster applied it last; every field of this build is in place";

/// An update of an object another Kix cluster applied last (its digest is on
/// the object) that would change no field and no ownership is no write:
/// two clusters sharing an object with different content do not rewrite it
/// in turn.
pub(crate) fn keep_if_only_shared(
    planned: &mut PlannedObject,
    live: &Value,
    result: &Value,
    manager: &str,
) {
    let live_activations = live["metadata"]["annotations"][kix_api::ANNOTATION_ACTIVATIONS]
        .as_str()
        .map(kix_api::labels::parse_activations)
        .unwrap_or_default();
    let shared = live_activations.len() > 1;
    let owned = |object| owned_fields(object, manager).map(without_bookkeeping);
    let owned_alike = owned(live).is_some() && owned(live) == owned(result);
    if planned.action == Action::Update
        && planned.changes.is_empty()
        && planned.note.is_none()
        && planned.legacy == Legacy::None
        && shared
        && owned_alike
    {
        planned.action = Action::Unchanged;
        planned.note = Some(NOTE_SHARED_SAME.into());
        planned.activations = live_activations;
    }
}

/// Whether `path` (of a diff) is one of the `handed_off` fields or below one.
pub(crate) fn is_handed_off(path: &str, handed_off: &[String]) -> bool {
    handed_off.iter().any(|f| {
        path.strip_prefix(f.as_str())
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
    })
}

/// The Kix clusters other than `cluster` that `activations` name.
pub(crate) fn other_clusters(
    activations: &BTreeSet<String>,
    cluster: &str,
    clusters: &BTreeMap<String, String>,
) -> Vec<String> {
    activations
        .iter()
        .filter(|a| !belongs_to(a, cluster, clusters))
        .map(|a| match clusters.get(a) {
            Some(c) => c.clone(),
            None => a.rsplit_once('-').map_or(a.as_str(), |(c, _)| c).to_owned(),
        })
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

// ---------------------------------------------------------------- drift

/// A field the build sets that kix's manager no longer owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriftedField {
    /// Dotted path into the manifest, list indexes in brackets.
    pub path: String,
    /// The managers that own it now.
    pub by: Vec<String>,
    /// Whether the live object still has it.
    pub present: bool,
}

impl std::fmt::Display for DriftedField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.by.as_slice(), self.present) {
            ([], false) => write!(f, "{} (removed)", self.path),
            ([], true) => write!(f, "{} (no field manager owns it)", self.path),
            (by, _) => write!(f, "{} (changed by {})", self.path, by.join(", ")),
        }
    }
}

/// One entry of `metadata.managedFields`.
struct Entry<'a> {
    manager: &'a str,
    operation: &'a str,
    subresource: Option<&'a str>,
    fields: Option<&'a Map<String, Value>>,
}

fn entries(live: &Value) -> impl Iterator<Item = Entry<'_>> {
    live["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| Entry {
            manager: e["manager"].as_str().unwrap_or_default(),
            operation: e["operation"].as_str().unwrap_or_default(),
            subresource: e["subresource"].as_str().filter(|s| !s.is_empty()),
            fields: e["fieldsV1"].as_object(),
        })
}

/// The fields of `manifest` (what kix applied) that `manager` no longer owns
/// on `live`, with who owns them now. Before the take-over from
/// [`LEGACY_FIELD_MANAGER`], that manager's fields count as kix's.
pub fn drifted_fields(manifest: &Value, live: &Value, manager: &str) -> Vec<DriftedField> {
    let kix = kix_manager(entries(live).map(|e| (e.manager, e.operation)), manager);
    let ours = |e: &Entry| e.manager == kix && e.operation == "Apply";
    let empty = Map::new();
    let mine = entries(live)
        .find(|e| ours(e) && e.subresource.is_none())
        .map(|e| e.fields.unwrap_or(&empty));
    unowned(manifest, mine)
        .into_iter()
        .map(|steps| {
            let mut by: Vec<String> = entries(live)
                .filter(|e| !ours(e))
                .filter(|e| e.fields.is_some_and(|f| owns(f, &steps)))
                .map(|e| e.manager.to_owned())
                .collect();
            by.sort();
            by.dedup();
            DriftedField {
                path: render(&steps),
                present: lookup(live, &steps).is_some(),
                by,
            }
        })
        .collect()
}

/// The manager whose Apply entry holds kix's fields on an object with
/// these managedFields entries (manager, operation): `manager` once it
/// has applied, [`LEGACY_FIELD_MANAGER`] before the take-over.
pub(crate) fn kix_manager<'m>(
    mut entries: impl Iterator<Item = (&'m str, &'m str)>,
    manager: &'m str,
) -> &'m str {
    if entries.any(|(m, operation)| m == manager && operation == "Apply") {
        manager
    } else {
        LEGACY_FIELD_MANAGER
    }
}

/// Whether the field set `owned` (kix's applied fields; `None`: it has
/// none) covers every field of `manifest` that drift considers: the fast
/// answer of [`drifted_fields`], with no live object at hand.
pub(crate) fn owns_manifest(manifest: &Value, owned: Option<&Map<String, Value>>) -> bool {
    unowned(manifest, owned).is_empty()
}

/// What [`owns_manifest`]'s answer for a manifest depends on: its maps'
/// keys, where it has nulls, empty maps, empty lists and other scalars, and
/// its list items whole (an item is matched by its values). Manifests with
/// the same skeleton are owned alike by any field set, so one walk answers
/// for every object of a shape (50,000 ConfigMaps are a handful of shapes).
pub(crate) fn skeleton(manifest: &Node) -> String {
    let mut out = Vec::new();
    write_skeleton(manifest, &mut out);
    // Only JSON text and ASCII markers were written.
    String::from_utf8(out).unwrap_or_default()
}

fn write_skeleton(value: &Node, out: &mut Vec<u8>) {
    match value {
        Node::Null => out.push(b'n'),
        Node::Object(entries) if entries.is_empty() => out.extend_from_slice(b"{}"),
        Node::Object(entries) => {
            out.push(b'{');
            for (key, child) in entries {
                // A key as a JSON string: no key can end where another begins.
                let _ = serde_json::to_writer(&mut *out, key.as_ref());
                write_skeleton(child, out);
            }
            out.push(b'}');
        }
        Node::Array(items) => {
            out.push(b'[');
            for item in items {
                let _ = serde_json::to_writer(&mut *out, item);
                out.push(b',');
            }
            out.push(b']');
        }
        _ => out.push(b's'),
    }
}

fn unowned<'a>(manifest: &'a Value, owned: Option<&Map<String, Value>>) -> Vec<Vec<Step<'a>>> {
    let mut out = Vec::new();
    walk(manifest, owned, &mut Vec::new(), &mut out);
    out
}

/// One step into a manifest: a field, or a list item (with its value, which
/// finds the item in a managed-fields set by its keys).
#[derive(Clone, Copy)]
enum Step<'a> {
    Field(&'a str),
    Item(usize, &'a Value),
}

fn render(steps: &[Step]) -> String {
    let mut out = String::new();
    for step in steps {
        match step {
            Step::Field(name) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(name);
            }
            Step::Item(i, _) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// Paths of a manifest that drift never considers: identity, status, and
/// kix's own annotations (contested between the Kix clusters sharing an
/// object by design).
fn ignored(steps: &[Step]) -> bool {
    // Matched step by step: rendering the path of every node cost more
    // than the rest of the walk.
    let field = |i: usize| match steps.get(i) {
        Some(Step::Field(name)) => Some(*name),
        _ => None,
    };
    match (steps.len(), field(0), field(1)) {
        (1, Some("apiVersion" | "kind" | "status"), _) => true,
        (2, Some("metadata"), Some("name" | "namespace")) => true,
        (3.., Some("metadata"), Some("annotations")) => {
            field(2).is_some_and(|key| key.starts_with("kix.run/"))
        }
        _ => false,
    }
}

/// Collects the paths under `value` that `node` (the owned set at this
/// point; `None`: nothing owned here) does not cover.
fn walk<'a>(
    value: &'a Value,
    node: Option<&Map<String, Value>>,
    steps: &mut Vec<Step<'a>>,
    out: &mut Vec<Vec<Step<'a>>>,
) {
    if ignored(steps) || value.is_null() {
        return;
    }
    // An empty list is never a member of a managed-fields set: nothing to own.
    if value.as_array().is_some_and(Vec::is_empty) {
        return;
    }
    // A member with no children owns everything below it (an atomic map,
    // list or struct, or an empty map as applied).
    if node.is_some_and(|n| n.keys().all(|k| k == ".")) && !steps.is_empty() {
        return;
    }
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (k, child) in map {
                descend(Step::Field(k.as_str()), child, node, steps, out);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                descend(Step::Item(i, child), child, node, steps, out);
            }
        }
        _ => {
            if node.is_none() {
                out.push(steps.clone());
            }
        }
    }
}

fn descend<'a>(
    step: Step<'a>,
    child: &'a Value,
    node: Option<&Map<String, Value>>,
    steps: &mut Vec<Step<'a>>,
    out: &mut Vec<Vec<Step<'a>>>,
) {
    let child_node = node.and_then(|n| child_of(n, step));
    steps.push(step);
    walk(child, child_node, steps, out);
    steps.pop();
}

/// The set node of `step` below `node`.
fn child_of<'n>(node: &'n Map<String, Value>, step: Step) -> Option<&'n Map<String, Value>> {
    match step {
        Step::Field(name) => field_of(node, name),
        Step::Item(index, item) => item_of(node, index, item),
    }
}

/// The set node of field `name` (`f:<name>`): the key is spelled on the
/// stack, not allocated, for the usual short names.
fn field_of<'n>(node: &'n Map<String, Value>, name: &str) -> Option<&'n Map<String, Value>> {
    let mut spelled = [0u8; 128];
    let key = match spelled.get_mut(..name.len() + 2) {
        Some(key) => {
            key[..2].copy_from_slice(b"f:");
            key[2..].copy_from_slice(name.as_bytes());
            std::str::from_utf8(key).ok()
        }
        None => None,
    };
    match key {
        Some(key) => node.get(key),
        None => node.get(&format!("f:{name}")),
    }
    .and_then(Value::as_object)
}

/// The set node of a list item: by its keys (`k:{"name":"web"}`; a key
/// field the manifest leaves to its default, such as a port's protocol,
/// is not required), by its value (`v:"a"`), or by its index (`i:0`).
fn item_of<'n>(
    node: &'n Map<String, Value>,
    index: usize,
    item: &Value,
) -> Option<&'n Map<String, Value>> {
    let mut best: Option<(usize, &'n Map<String, Value>)> = None;
    for (key, child) in node {
        let Some(child) = child.as_object() else {
            continue;
        };
        if let Some(keys) = key.strip_prefix("k:") {
            let Ok(Value::Object(keys)) = serde_json::from_str::<Value>(keys) else {
                continue;
            };
            let (Value::Object(fields), false) = (item, keys.is_empty()) else {
                continue;
            };
            let mut matched = 0;
            let all = keys.iter().all(|(k, v)| match fields.get(k) {
                Some(mine) if same_scalar(mine, v) => {
                    matched += 1;
                    true
                }
                Some(_) => false,
                None => true,
            });
            if all && matched > 0 && best.is_none_or(|(m, _)| matched > m) {
                best = Some((matched, child));
            }
        } else if let Some(value) = key.strip_prefix("v:") {
            if serde_json::from_str::<Value>(value).is_ok_and(|v| same_scalar(item, &v)) {
                return Some(child);
            }
        } else if key.strip_prefix("i:") == Some(index.to_string().as_str()) {
            return Some(child);
        }
    }
    best.map(|(_, child)| child)
}

/// Equal as the server compares keys: numbers by value, and a number written
/// as a string (`"80"`) equal to the number.
fn same_scalar(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::String(s), Value::Number(n)) | (Value::Number(n), Value::String(s)) => {
            s.parse::<f64>().ok() == n.as_f64()
        }
        _ => a == b,
    }
}

/// Whether the set `fields` covers the path `steps`.
fn owns(fields: &Map<String, Value>, steps: &[Step]) -> bool {
    let mut node = fields;
    for step in steps {
        if node.keys().all(|k| k == ".") && !std::ptr::eq(node, fields) {
            return true;
        }
        match child_of(node, *step) {
            Some(child) => node = child,
            None => return false,
        }
    }
    true
}

/// The live value at `steps` (list items by index).
fn lookup<'v>(live: &'v Value, steps: &[Step]) -> Option<&'v Value> {
    let mut value = live;
    for step in steps {
        value = match step {
            Step::Field(name) => value.get(*name)?,
            Step::Item(i, _) => value.get(*i)?,
        };
    }
    Some(value)
}

/// An apply patch, with the server's `Warning` headers (which kube's `Api`
/// drops): a raw request through the same client.
pub(crate) async fn patch_with_warnings(
    client: &kube::Client,
    api: &Api<DynamicObject>,
    name: &str,
    params: &PatchParams,
    manifest: &Value,
) -> (kube::Result<DynamicObject>, Vec<String>) {
    let request = match kube::core::Request::new(api.resource_url()).patch(
        name,
        params,
        &Patch::Apply(manifest),
    ) {
        Ok(request) => request.map(kube::client::Body::from),
        Err(e) => return (Err(kube::Error::BuildRequest(e)), vec![]),
    };
    let response = match client.send(request).await {
        Ok(response) => response,
        Err(e) => return (Err(e), vec![]),
    };
    let warnings = response
        .headers()
        .get_all("warning")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(warning_text)
        .collect();
    let code = response.status().as_u16();
    let body = match response.into_body().collect_bytes().await {
        Ok(body) => body,
        Err(e) => return (Err(e), warnings),
    };
    let result = if code >= 400 {
        let status = serde_json::from_slice::<kube::core::Status>(&body).unwrap_or_else(|_| {
            kube::core::Status::failure(&String::from_utf8_lossy(&body), "").with_code(code)
        });
        Err(kube::Error::Api(status.boxed()))
    } else {
        serde_json::from_slice(&body).map_err(kube::Error::SerdeError)
    };
    (result, warnings)
}

/// The text of a `Warning` header: `299 - "text"` → `text`.
fn warning_text(header: &str) -> String {
    let text = header
        .strip_prefix("299 - ")
        .or_else(|| header.strip_prefix("299 "))
        .unwrap_or(header);
    match serde_json::from_str::<String>(text) {
        Ok(unquoted) => unquoted,
        Err(_) => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn arb_manifest() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (0i64..4).prop_map(Value::from),
            "[ab]{0,2}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::vec(("[a-c]|metadata|status", inner), 0..5)
                    .prop_map(|entries| Value::Object(entries.into_iter().collect())),
            ]
        })
    }

    /// A field set: `f:` members for some of the manifest's keys (at every
    /// level, list items by index, value or key), randomly cut short.
    fn fields_of(value: &Value, keep: &mut impl Iterator<Item = bool>) -> Map<String, Value> {
        let mut set = Map::new();
        match value {
            Value::Object(map) => {
                for (k, v) in map {
                    if keep.next().unwrap_or(true) {
                        set.insert(format!("f:{k}"), Value::Object(fields_of(v, keep)));
                    }
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let key = match (keep.next(), item) {
                        (Some(true), Value::Object(m)) if !m.is_empty() => {
                            let (k, v) = m.iter().next().expect("non-empty");
                            format!("k:{}", json!({ k: v }))
                        }
                        (Some(false), _) => format!("v:{item}"),
                        _ => format!("i:{i}"),
                    };
                    set.insert(key, Value::Object(fields_of(item, keep)));
                }
            }
            _ => {}
        }
        set
    }

    /// The skeleton of a manifest as a `Value`, read back as the desired
    /// objects read it.
    fn skeleton(manifest: &Value) -> String {
        let text = manifest.to_string();
        super::skeleton(&Node::read(&text).expect("a Value's text"))
    }

    /// The manifest with every scalar outside lists replaced.
    fn rewritten(value: &Value, with: &Value) -> Value {
        match value {
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (k.clone(), rewritten(v, with)))
                    .collect(),
            ),
            Value::Array(_) | Value::Null => value.clone(),
            _ => with.clone(),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn manifests_of_one_skeleton_are_owned_alike(
            manifest in arb_manifest(),
            other in arb_manifest(),
            keep in proptest::collection::vec(any::<bool>(), 0..64),
            scalar in prop_oneof![Just(json!(7)), Just(json!("x")), Just(json!(false))],
        ) {
            let mut keep = keep.into_iter().chain(std::iter::repeat(true));
            for fields in [fields_of(&manifest, &mut keep), fields_of(&other, &mut keep), Map::new()] {
                let same = rewritten(&manifest, &scalar);
                prop_assert_eq!(skeleton(&same), skeleton(&manifest));
                prop_assert_eq!(
                    owns_manifest(&same, Some(&fields)),
                    owns_manifest(&manifest, Some(&fields))
                );
                if skeleton(&other) == skeleton(&manifest) {
                    prop_assert_eq!(
                        owns_manifest(&other, Some(&fields)),
                        owns_manifest(&manifest, Some(&fields))
                    );
                }
            }
        }
    }

    #[test]
    fn skeletons_keep_what_the_walk_reads() {
        let base =
            json!({"a": {"b": "x", "c": [{"name": "n", "v": 1}]}, "d": null, "e": [], "f": {}});
        let differs = [
            json!({"a": {"b": "x", "c": [{"name": "m", "v": 1}]}, "d": null, "e": [], "f": {}}),
            json!({"a": {"b": "x", "c": [{"name": "n", "v": 1}]}, "d": "now set", "e": [], "f": {}}),
            json!({"a": {"b": "x", "c": [{"name": "n", "v": 1}]}, "d": null, "e": [1], "f": {}}),
            json!({"a": {"b": "x", "c": [{"name": "n", "v": 1}]}, "d": null, "e": [], "f": {"g": 1}}),
            json!({"a": {"bb": "x", "c": [{"name": "n", "v": 1}]}, "d": null, "e": [], "f": {}}),
        ];
        for other in differs {
            assert_ne!(skeleton(&other), skeleton(&base), "{other}");
        }
        let same =
            json!({"a": {"b": 3, "c": [{"name": "n", "v": 1}]}, "d": null, "e": [], "f": {}});
        assert_eq!(skeleton(&same), skeleton(&base));
    }

    fn live(entries: Value, body: Value) -> Value {
        let mut live = body;
        live["metadata"]["managedFields"] = entries;
        live
    }

    #[test]
    fn zero_values_empty_collections_and_defaulted_keys_stay_owned() {
        // What the apiserver recorded for this manifest (v1.36).
        let manifest = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "n"},
            "spec": {"replicas": 0, "minReadySeconds": 0,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                    "containers": [{"name": "main", "image": "x", "env": [],
                        "securityContext": {}, "ports": [{"containerPort": 80}],
                        "resources": {"requests": {"cpu": 0.5}, "limits": {"cpu": "1000m"}}}]}}}});
        let fields = json!({"f:spec": {"f:minReadySeconds": {}, "f:replicas": {}, "f:selector": {},
            "f:template": {"f:metadata": {"f:labels": {"f:app": {}}}, "f:spec": {"f:containers": {
                "k:{\"name\":\"main\"}": {".": {}, "f:image": {}, "f:name": {},
                    "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}},
                    "f:resources": {"f:limits": {"f:cpu": {}}, "f:requests": {"f:cpu": {}}},
                    "f:securityContext": {}}}}}}});
        let live = live(
            json!([{"manager": "kix/a", "operation": "Apply", "fieldsV1": fields}]),
            json!({"spec": {}}),
        );
        assert_eq!(drifted_fields(&manifest, &live, "kix/a"), []);
    }

    #[test]
    fn a_field_another_manager_took_is_drift_named_after_it() {
        let manifest = json!({"data": {"x": "1", "y": "1"}, "metadata": {"labels": {"app": "a"}}});
        let live = live(
            json!([
                {"manager": "kix/a", "operation": "Apply",
                 "fieldsV1": {"f:data": {"f:y": {}}, "f:metadata": {"f:labels": {"f:app": {}}}}},
                {"manager": "kubectl-edit", "operation": "Update",
                 "fieldsV1": {"f:data": {"f:x": {}, "f:extra": {}}}},
            ]),
            json!({"data": {"x": "2", "y": "1", "extra": "e"}}),
        );
        let drifted = drifted_fields(&manifest, &live, "kix/a");
        assert_eq!(
            drifted.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["data.x (changed by kubectl-edit)"]
        );
        // Removed: nobody owns it and it is gone.
        let live = live_without_x();
        assert_eq!(
            drifted_fields(&manifest, &live, "kix/a")[0].to_string(),
            "data.x (removed)"
        );
    }

    fn live_without_x() -> Value {
        live(
            json!([{"manager": "kix/a", "operation": "Apply",
                    "fieldsV1": {"f:data": {"f:y": {}}, "f:metadata": {"f:labels": {"f:app": {}}}}}]),
            json!({"data": {"y": "1"}}),
        )
    }

    #[test]
    fn the_legacy_manager_counts_as_kix_until_the_take_over() {
        let manifest = json!({"data": {"x": "1"}});
        let fields = json!({"f:data": {"f:x": {}}});
        let legacy = live(
            json!([{"manager": "kix", "operation": "Apply", "fieldsV1": fields}]),
            json!({"data": {"x": "1"}}),
        );
        assert_eq!(drifted_fields(&manifest, &legacy, "kix/a"), []);
        // Once kix/a applies, only its own entry counts.
        let both = live(
            json!([{"manager": "kix", "operation": "Apply", "fieldsV1": fields},
                   {"manager": "kix/a", "operation": "Apply", "fieldsV1": {"f:data": {}}}]),
            json!({"data": {"x": "1"}}),
        );
        assert_eq!(drifted_fields(&manifest, &both, "kix/a"), []);
    }

    #[test]
    fn list_items_are_found_by_keys_values_and_indexes() {
        let node: Map<String, Value> = serde_json::from_value(json!({
            "k:{\"port\":53,\"protocol\":\"UDP\"}": {"f:a": {}},
            "k:{\"port\":53,\"protocol\":\"TCP\"}": {"f:b": {}},
            "v:\"x\"": {}, "i:3": {"f:c": {}}
        }))
        .expect("map");
        let udp = json!({"port": 53, "protocol": "UDP"});
        let found = item_of(&node, 0, &udp).expect("udp");
        assert!(found.contains_key("f:a"));
        let tcp = json!({"port": "53", "protocol": "TCP"});
        assert!(item_of(&node, 0, &tcp).expect("tcp").contains_key("f:b"));
        assert!(item_of(&node, 0, &json!({"port": 54})).is_none());
        assert!(item_of(&node, 0, &json!("x")).is_some());
        assert!(
            item_of(&node, 3, &json!("y"))
                .expect("i:3")
                .contains_key("f:c")
        );
    }

    #[test]
    fn contests_name_field_and_manager_and_who_may_take_them() {
        let status: kube::core::Status = serde_json::from_value(json!({
            "status": "Failure", "code": 409, "reason": "Conflict",
            "message": "Apply failed with 3 conflicts",
            "details": {"causes": [
                {"reason": "FieldManagerConflict", "message": "conflict with \"kix/b\"", "field": ".data.level"},
                {"reason": "FieldManagerConflict", "message": "conflict with \"kubectl-edit\" using v1", "field": ".data.x"},
                {"reason": "FieldManagerConflict", "message": "conflict with \"kix\"", "field": ".metadata.annotations.kix.run/digest"}
            ]}}))
        .expect("status");
        let contested = contests(&status);
        assert_eq!(
            contested.iter().map(Contest::contender).collect::<Vec<_>>(),
            [
                Contender::KixCluster("b".into()),
                Contender::Other("kubectl-edit".into()),
                Contender::KixAnnotation
            ]
        );
        assert_eq!(
            contested[0].describe("a"),
            "data.level: Kix cluster \"b\" (field manager kix/b) set another value than Kix cluster \"a\""
        );
        let controllers = Takeover {
            from_controllers: true,
            from_kix_clusters: false,
        };
        assert!(!contested[0].takeable(controllers));
        assert!(contested[1].takeable(controllers));
        assert!(contested[2].takeable(Takeover::default()));
        let legacy = Contest {
            field: "data.x".into(),
            manager: "kix".into(),
        };
        assert!(legacy.takeable(Takeover::default()));
    }

    #[test]
    fn bookkeeping_annotations_do_not_count_when_comparing_field_sets() {
        let with: Map<String, Value> = serde_json::from_value(json!({
            "f:data": {"f:a": {}},
            "f:metadata": {"f:annotations": {"f:kix.run/digest": {}, "f:kix.run/activations": {}}}}))
        .expect("set");
        let without: Map<String, Value> =
            serde_json::from_value(json!({"f:data": {"f:a": {}}})).expect("set");
        assert_eq!(without_bookkeeping(&with), without_bookkeeping(&without));
        let other: Map<String, Value> = serde_json::from_value(json!({
            "f:data": {"f:a": {}}, "f:metadata": {"f:annotations": {"f:team": {}}}}))
        .expect("set");
        assert_ne!(without_bookkeeping(&other), without);
    }

    #[test]
    fn legacy_take_over_waits_for_every_sharing_cluster() {
        let appliers = |m: &[&str]| m.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let others = |c: &[&str]| c.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            Legacy::of(&appliers(&["kix"]), "a", &[]),
            Legacy::TakeOverAndRelease
        );
        assert_eq!(
            Legacy::of(&appliers(&["kix"]), "a", &others(&["b"])),
            Legacy::TakeOver
        );
        assert_eq!(
            Legacy::of(&appliers(&["kix", "kix/b"]), "a", &others(&["b"])),
            Legacy::TakeOverAndRelease
        );
        assert_eq!(
            Legacy::of(&appliers(&["kix", "kix/a"]), "a", &others(&["b"])),
            Legacy::None
        );
        assert_eq!(Legacy::of(&appliers(&["kix/a"]), "a", &[]), Legacy::None);
    }
}

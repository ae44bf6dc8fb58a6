//! The plan: what a deploy of a build would do to the live cluster, object by
//! object. A value: `kix plan` prints it, `kix deploy` executes it.
//!
//! Reads only: one LIST per kind (metadata, the Kix cluster's label
//! selector: its own objects, never every object kix manages), discovery,
//! and a server-side dry-run apply for the objects whose content changed.

use std::collections::{BTreeMap, BTreeSet};

use futures::{FutureExt, StreamExt, stream};
use kix_api::Activation;
use kix_manifest::{Build, GroupVersionKind, KeyMap, KeySet, ObjectKey, group_kind};
use kube::Client;
use kube::api::{Api, DynamicObject};
use serde_json::Value;

pub use crate::plan_object::{
    Action, Counts, NOTE_DRIFTED, NOTE_NO_PERMISSION, NOTE_PRUNE_DISABLED, NOTE_RECREATED,
    NOTE_SHARED, NOTE_UNLABELLED, PackagePlan, PlanOptions, PlannedObject,
};
pub use crate::plan_value::Plan;

use crate::desired::{Desired, Shapes, desired_objects};
use crate::diff::diff;
use crate::error::{EngineError, Result};
use crate::live::{
    Live, activation_clusters, belongs_to, list_kinds, list_kinds_in, list_unlabelled,
};
use crate::ownership::{self, Applied, DriftedField, Legacy};
use crate::records::{self, CrdState};
use crate::resources::{Resources, Served, split_api_version};

/// A kind with desired objects that have no owned live counterpart: its
/// resource, whether it is namespaced, and the namespaces to look in.
type MissingKind = (kube::discovery::ApiResource, bool, BTreeSet<Option<String>>);

/// A kind to list: its resource and whether it is namespaced, by (group, kind).
pub(crate) type KindList = BTreeMap<(String, String), (kube::discovery::ApiResource, bool)>;

/// Objects per page of a LIST of full objects (reconcile mode).
const FULL_PAGE: u32 = 2_000;

/// How many dry-runs run at once. Each is a round trip the apiserver spends
/// little CPU on: at 5,000 objects with 500 changes, 32 planned faster than
/// 16 (bench/notes.md); kix's default apply concurrency is 32 too.
const DRY_RUN_CONCURRENCY: usize = 32;

/// How many dry-run futures are built at a time (each is a few KB).
const DRY_RUN_CHUNK: usize = 1024;

/// Plans `build` (read from `store_path`) against the live cluster. Stages:
/// the records → the desired objects → the live state → classify → dry-run
/// what would be written → packages and migrations → prune → counts and seal.
pub async fn plan(
    client: &Client,
    build: &Build,
    store_path: &str,
    options: &PlanOptions,
) -> Result<Plan> {
    let prefetched = Prefetched::start(client, &build.cluster, options).await?;
    plan_prefetched(client, build, store_path, options, prefetched).await
}

/// What a plan reads of the cluster before it needs the build: the records,
/// the kinds they name and, for a whole plan, the LIST of those kinds,
/// started on a task of its own. A front end makes it while the build is
/// read: at 50,000 objects that LIST then waits on the apiserver while the
/// tree is parsed, not after.
pub struct Prefetched {
    cluster: String,
    scoped: bool,
    /// Whether the cluster's objects are listed by its label
    /// ([`records::objects_labelled`]).
    labelled: bool,
    kix_crds: CrdState,
    all_records: Vec<Activation>,
    resources: Resources,
    recorded: KindList,
    early: Option<EarlyList>,
}

impl Prefetched {
    /// Reads the records of every Kix cluster and the kinds `cluster`'s
    /// records name, and starts listing those (unless `options` scope the
    /// plan to named objects, which are read by name).
    pub async fn start(
        client: &Client,
        cluster: &str,
        options: &PlanOptions,
    ) -> Result<Prefetched> {
        let all_records = records::list_all(client).await?;
        Prefetched::with_records(client, cluster, options, all_records).await
    }

    /// [`Prefetched::start`] with the records of every Kix cluster as the
    /// caller has them (the operator's watch of them): not listed again,
    /// since a LIST of them all grows with every Kix cluster's records.
    pub async fn with_records(
        client: &Client,
        cluster: &str,
        options: &PlanOptions,
        all_records: Vec<Activation>,
    ) -> Result<Prefetched> {
        let kix_crds = records::crds_status(client).await?;
        let mut resources = Resources::new(client.clone());
        let mine = records::of_cluster(&all_records, cluster);
        let recorded = recorded_kinds(&mine, &mut resources).await?;
        let scoped = options.only.is_some();
        let labelled = records::objects_labelled(&all_records, cluster);
        let selector = objects_selector(cluster, labelled);
        let early = (!scoped).then(|| list_early(client, &recorded, &selector));
        Ok(Prefetched {
            cluster: cluster.to_string(),
            scoped,
            labelled,
            kix_crds,
            all_records,
            resources,
            recorded,
            early,
        })
    }
}

/// [`plan`], with the reads `prefetched` made. Prefetched for another Kix
/// cluster or scope, they are made again.
pub async fn plan_prefetched(
    client: &Client,
    build: &Build,
    store_path: &str,
    options: &PlanOptions,
    prefetched: Prefetched,
) -> Result<Plan> {
    let prefetched =
        if prefetched.cluster == build.cluster && prefetched.scoped == options.only.is_some() {
            prefetched
        } else {
            Prefetched::start(client, &build.cluster, options).await?
        };
    let Prefetched {
        kix_crds,
        all_records,
        mut resources,
        recorded,
        early,
        labelled,
        ..
    } = prefetched;
    let ctx = Ctx::new(build, &all_records, options, labelled);
    let mut desired = desired_objects(build, &mut resources, Shapes::Skipped).await?;
    let observed = match &options.only {
        None => {
            let early = early.unwrap_or_else(|| list_early(client, &recorded, &ctx.selector));
            observe(client, &desired, recorded, early, &ctx, options).await?
        }
        Some(only) => observe_only(client, &desired, &recorded, only, &ctx, options).await?,
    };
    let first_pass = crate::parallel::map(&desired, |d| match &options.only {
        Some(only) if !only.contains(&d.key) => untouched(d),
        _ => classify(d, &observed, &ctx, options),
    });
    let checked = dry_run_all(client, first_pass, &desired, &observed, &ctx, options).await?;
    let mut packages = by_package(build, checked);
    let history = records::of_cluster(&all_records, &ctx.cluster);
    let hooks = (&mut desired, &mut packages, &mut resources);
    let migrations = crossed_and_hooks(client, build, hooks, &history, &ctx).await?;
    let crd_upgrades = crate::crd_upgrade::analyse(
        client,
        &desired,
        &packages.iter().flat_map(|p| &p.objects).collect::<Vec<_>>(),
    )
    .await?;
    crate::crd_upgrade::trim_changes(&mut packages, &crd_upgrades);
    // Scoped, only objects read are candidates: `live` holds nothing else.
    let mut prune = if options.prune {
        prune_candidates(&desired, &observed.live, &ctx)
    } else {
        Vec::new()
    };
    crate::drop_later(observed);
    crate::contents::count(client, &mut prune).await?;
    let current = records::current(&all_records, &ctx.cluster);
    let counts = count(packages.iter().flat_map(|p| &p.objects).chain(&prune));
    let deletion_budget = crate::budget::BudgetCheck::of(build.settings.deletion_budget, &counts);
    let mut plan = Plan {
        store_path: store_path.to_string(),
        current_activation: current.and_then(|c| c.metadata.name.clone()),
        current_path: current.map(|c| c.spec.source.path.clone()),
        current_phase: current.and_then(|c| c.phase()),
        service_account: crate::plan_value::declared_account(&build.settings),
        revision: build.revision.clone(),
        kix_crds,
        counts,
        packages,
        prune,
        digest: String::new(),
        kinds: kinds_of(&desired),
        deletion_budget,
        migrations,
        crd_upgrades,
        desired,
        options: options.clone(),
        labelled: ctx.labelled,
        cluster: ctx.cluster,
        activation: ctx.activation,
    };
    plan.digest = crate::seal::digest(&plan);
    Ok(plan)
}

/// Who plans, read from the records once: every stage asks which
/// activations are this cluster's.
struct Ctx {
    cluster: String,
    manager: String,
    /// The Kix cluster of every record, by record name.
    clusters: BTreeMap<String, String>,
    /// The store path of every record, by name: an object's claim on one
    /// holds when its build has the object ([`crate::claims`]).
    paths: BTreeMap<String, String>,
    /// The namespaces the build declares: a claim on a record whose build
    /// is not in this store holds there ([`crate::claims::holds`]).
    owned: BTreeSet<String>,
    /// The record the deploy of this plan writes.
    activation: String,
    /// The Jobs that completed for this cluster ([`crate::health::completed`]).
    completed_jobs: crate::health::completed::CompletedJobs,
    /// Whether the cluster's objects are listed by its label.
    labelled: bool,
    /// The label selector its objects are listed with ([`objects_selector`]).
    selector: String,
    /// A scoped plan's objects (the operator's repairs): no other hook's
    /// plan is touched.
    only: Option<BTreeSet<ObjectKey>>,
}

impl Ctx {
    fn new(
        build: &Build,
        all_records: &[Activation],
        options: &PlanOptions,
        labelled: bool,
    ) -> Ctx {
        let cluster = build.cluster.as_str();
        let activation = options.activation.clone().unwrap_or_else(|| {
            Activation::name_for(cluster, records::next_sequence(all_records, cluster))
        });
        Ctx {
            cluster: cluster.to_owned(),
            manager: kix_api::field_manager(cluster),
            clusters: activation_clusters(all_records),
            paths: crate::claims::record_paths(all_records),
            owned: crate::claims::owned_namespaces(build),
            activation,
            completed_jobs: crate::health::completed::of_cluster(all_records, cluster),
            labelled,
            selector: objects_selector(cluster, labelled),
            only: options.only.clone(),
        }
    }

    /// Whether `activation` (an entry of an object's annotation) is this
    /// cluster's.
    fn mine(&self, activation: &str) -> bool {
        belongs_to(activation, &self.cluster, &self.clusters)
    }
}

/// The live state a plan compares the build with.
struct Observed {
    /// kix's objects of the kinds listed (labelled).
    live: KeyMap<ObjectKey, Live>,
    /// Objects a desired one names that kix does not own: adopted.
    unlabelled: KeyMap<ObjectKey, Live>,
    /// Reconcile mode: full live objects of the owned objects it writes or
    /// found drifted ([`fetch_full`]).
    full: KeyMap<ObjectKey, Value>,
    /// Reconcile mode: the fields drifted of objects whose digest is the
    /// build's.
    drifted: KeyMap<ObjectKey, Vec<DriftedField>>,
}

impl Observed {
    /// The listed object of `key`, labelled or not.
    fn any(&self, key: &ObjectKey) -> Option<&Live> {
        self.live.get(key).or_else(|| self.unlabelled.get(key))
    }

    /// The live object an object's dry-run diff is read at least as new as.
    fn listed_version(&self, key: &ObjectKey) -> Option<&str> {
        self.any(key).and_then(|l| l.resource_version.as_deref())
    }
}

/// The kinds of the build (apiVersion/Kind), recorded so a later prune knows
/// which kinds to list.
fn kinds_of(desired: &[Desired]) -> Vec<String> {
    // Distinct first: the text is made once per kind, not per object.
    desired
        .iter()
        .map(|d| (d.api_version.as_str(), d.key.kind.as_str()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .map(|(api_version, kind)| GroupVersionKind::new(api_version, kind).to_string())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// Reads the live state: one LIST per kind, the unlabelled objects a
/// desired one names, and in reconcile mode the full objects. The kinds the
/// records name were listed early (`early`); the build's other kinds, and a
/// kind the build now reads through another version, are listed here.
async fn observe(
    client: &Client,
    desired: &[Desired],
    recorded: KindList,
    early: EarlyList,
    ctx: &Ctx,
    options: &PlanOptions,
) -> Result<Observed> {
    let mut late = KindList::new();
    for ((group, kind), d) in served_kinds(desired) {
        let kind = (group.to_string(), kind.to_string());
        if recorded.get(&kind).map(|(api, _)| api) != Some(&d.resource.api) {
            late.insert(kind, (d.resource.api.clone(), d.resource.namespaced));
        }
    }
    let selector = ctx.selector.clone();
    // A tenant bounded to its namespaces lists there what it may not list
    // cluster-wide: the build's namespaces.
    let namespaces: Vec<String> = desired
        .iter()
        .filter_map(|d| d.key.namespace.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let recorded_live = async {
        match early.await {
            Err(err) if err.is_forbidden() => {
                let kinds = recorded.values().cloned().collect();
                list_kinds_in(client, kinds, Some(&selector), &namespaces).await
            }
            listed => listed,
        }
    };
    let (mut live, late_live) = futures::try_join!(
        recorded_live,
        list_kinds_in(
            client,
            late.values().cloned().collect(),
            Some(&selector),
            &namespaces
        )
    )?;
    // A kind listed both ways is the build's: its version is what the plan
    // applies and prunes through.
    if late.keys().any(|k| recorded.contains_key(k)) {
        live.retain(|key, _| !late.keys().any(|(g, k)| *g == key.group && *k == key.kind));
    }
    live.extend(late_live);
    let mut unlabelled = unlabelled_named(client, desired, &live).await?;
    if ctx.labelled {
        // kix's objects without the cluster's label (shared with another
        // Kix cluster, or the label removed): owned, as a wide LIST saw them.
        let owned: Vec<ObjectKey> = unlabelled
            .values()
            .filter(|l| l.owned && l.managed)
            .map(|l| l.key.clone())
            .collect();
        for key in owned {
            live.extend(unlabelled.remove_entry(&key));
        }
    }
    // Reconcile mode reads the full live objects of the kinds it compares.
    let (full, drifted) = if options.reconcile {
        fetch_full(client, desired, &live, &ctx.manager, &ctx.selector).await?
    } else {
        Default::default()
    };
    Ok(Observed {
        live,
        unlabelled,
        full,
        drifted,
    })
}

/// The live state of the objects `only` names, each read by name: those of
/// the build through its resource, the others (to prune) through the kind
/// the records name. Owned ones are `live`; the others, adopted if the
/// build has them, `unlabelled`.
async fn observe_only(
    client: &Client,
    desired: &[Desired],
    recorded: &KindList,
    only: &BTreeSet<ObjectKey>,
    ctx: &Ctx,
    options: &PlanOptions,
) -> Result<Observed> {
    let by_key: KeyMap<&ObjectKey, &Desired> = desired
        .iter()
        .filter(|d| only.contains(&d.key))
        .map(|d| (&d.key, d))
        .collect();
    let named = only
        .iter()
        .filter_map(|key| {
            let (api, namespaced) = match by_key.get(key) {
                Some(d) if d.resource.served == Served::Yes => {
                    (d.resource.api.clone(), d.resource.namespaced)
                }
                Some(_) => return None,
                None => recorded
                    .get(&(key.group.clone(), key.kind.clone()))?
                    .clone(),
            };
            Some((key.clone(), api, namespaced))
        })
        .collect();
    let (mut live, mut unlabelled) = (KeyMap::default(), KeyMap::default());
    let ours = |key: &ObjectKey| by_key.contains_key(key);
    for l in crate::live::read_named(client, named, ours).await? {
        if !only.contains(&l.key) {
            continue;
        }
        if l.owned {
            live.insert(l.key.clone(), l);
        } else {
            unlabelled.insert(l.key.clone(), l);
        }
    }
    let (full, drifted) = if options.reconcile {
        let read: Vec<&Desired> = by_key
            .values()
            .filter(|d| live.contains_key(&d.key))
            .copied()
            .collect();
        fetch_named(client, &read, &live, &ctx.manager).await?
    } else {
        Default::default()
    };
    Ok(Observed {
        live,
        unlabelled,
        full,
        drifted,
    })
}

/// An object of the build outside a scoped plan: taken as unchanged, not
/// read.
fn untouched(d: &Desired) -> PlannedObject {
    PlannedObject {
        key: d.key.clone(),
        api_version: d.api_version.clone(),
        package: d.package.clone(),
        action: Action::Unchanged,
        changes: vec![],
        fields: vec![],
        destructive: false,
        note: None,
        hook: None,
        warnings: vec![],
        contenders: vec![],
        takes_with_it: None,
        deletion: None,
        activations: BTreeSet::new(),
        legacy: Legacy::None,
    }
}

/// The kinds of `desired` the apiserver serves, by (group, kind), each with
/// its first object.
pub(crate) fn served_kinds(desired: &[Desired]) -> BTreeMap<(&str, &str), &Desired> {
    let mut kinds = BTreeMap::new();
    for d in desired.iter().filter(|d| d.resource.served == Served::Yes) {
        kinds
            .entry((d.resource.api.group.as_str(), d.key.kind.as_str()))
            .or_insert(d);
    }
    kinds
}

/// The kinds `records` name, served now: their objects are listed even
/// when the build dropped the kind entirely, to be pruned.
pub(crate) async fn recorded_kinds(
    records: &[&Activation],
    resources: &mut Resources,
) -> Result<KindList> {
    let mut kind_list = KindList::new();
    for record in records {
        for kind in record.status.iter().flat_map(|s| &s.kinds) {
            let Some(GroupVersionKind { api_version, kind }) = GroupVersionKind::parse(kind) else {
                continue;
            };
            let (group, _) = split_api_version(api_version);
            let key = (group.to_string(), kind.to_string());
            if kind_list.contains_key(&key) {
                continue;
            }
            if let Some(r) = resources.get(api_version, kind).await?
                && r.served == Served::Yes
            {
                kind_list.insert(key, (r.api, r.namespaced));
            }
        }
    }
    Ok(kind_list)
}

/// kix's objects of `kinds`, listed on a task of their own; dropping the
/// handle stops it.
type EarlyList = futures::future::RemoteHandle<Result<KeyMap<ObjectKey, Live>>>;

fn list_early(client: &Client, kinds: &KindList, selector: &str) -> EarlyList {
    let client = client.clone();
    let kinds: Vec<(kube::discovery::ApiResource, bool)> = kinds.values().cloned().collect();
    let selector = selector.to_string();
    let (listing, handle) =
        async move { list_kinds(&client, kinds, Some(&selector)).await }.remote_handle();
    tokio::spawn(listing);
    handle
}

/// Desired objects with no owned live counterpart: created or adopted. Lists
/// their kinds in their namespaces, without kix's selector.
async fn unlabelled_named(
    client: &Client,
    desired: &[Desired],
    live: &KeyMap<ObjectKey, Live>,
) -> Result<KeyMap<ObjectKey, Live>> {
    let mut missing: BTreeMap<(String, String), MissingKind> = BTreeMap::new();
    for d in desired {
        let owned = live.get(&d.key).is_some_and(|l| l.owned);
        if !owned && d.resource.served == Served::Yes {
            missing
                .entry((d.resource.api.group.clone(), d.key.kind.clone()))
                .or_insert_with(|| {
                    (
                        d.resource.api.clone(),
                        d.resource.namespaced,
                        BTreeSet::new(),
                    )
                })
                .2
                .insert(d.key.namespace.clone());
        }
    }
    let mut unlabelled: KeyMap<ObjectKey, Live> = KeyMap::default();
    for (resource, namespaced, namespaces) in missing.into_values() {
        unlabelled.extend(list_unlabelled(client, &resource, namespaced, &namespaces).await?);
    }
    Ok(unlabelled)
}

/// The first guess at a desired object's action, from the LISTs alone:
/// create, adopt, update or unchanged (digest, drift, legacy manager).
fn classify(d: &Desired, observed: &Observed, ctx: &Ctx, options: &PlanOptions) -> PlannedObject {
    let deletion = observed.any(&d.key).and_then(|l| l.deletion.clone());
    let completed = crate::gates::ran_once(&ctx.completed_jobs, &d.key, &d.digest);
    let (action, mut activations, note, legacy) =
        match observed.live.get(&d.key).filter(|l| l.owned) {
            // A Job that ran to completion for this manifest, removed (or
            // being removed) after it finished: it is not run again.
            None if completed => (
                Action::Unchanged,
                BTreeSet::new(),
                Some(crate::health::completed::NOTE_COMPLETED.to_owned()),
                Legacy::None,
            ),
            _ if deletion.is_some() && completed => (
                Action::Unchanged,
                BTreeSet::new(),
                Some(crate::health::completed::NOTE_COMPLETED.to_owned()),
                Legacy::None,
            ),
            // Still there, but going (a prune just before, a namespace
            // terminating): nothing can be applied to it; the deploy
            // waits for it to be gone and creates it.
            _ if deletion.is_some() => (
                Action::Create,
                BTreeSet::new(),
                deletion
                    .as_ref()
                    .map(|del| format!("{}: {NOTE_RECREATED}", del.describe())),
                Legacy::None,
            ),
            Some(l) => {
                let (action, note, legacy) = compare_owned(d, l, observed, ctx, options);
                (action, l.activations.clone(), note, legacy)
            }
            None if observed.unlabelled.contains_key(&d.key)
                || observed.live.contains_key(&d.key) =>
            {
                (Action::Adopt, BTreeSet::new(), None, Legacy::None)
            }
            None => (Action::Create, BTreeSet::new(), None, Legacy::None),
        };
    if action != Action::Unchanged {
        // This cluster's entry becomes the new activation; other clusters' stay.
        activations.retain(|a| !ctx.mine(a));
        activations.insert(ctx.activation.clone());
    }
    PlannedObject {
        key: d.key.clone(),
        api_version: d.api_version.clone(),
        package: d.package.clone(),
        action,
        changes: vec![],
        fields: vec![],
        destructive: false,
        note,
        hook: None,
        warnings: vec![],
        contenders: vec![],
        takes_with_it: None,
        deletion,
        activations,
        legacy,
    }
}

/// A desired object kix owns: unchanged when its digest is this cluster's
/// and nothing drifted (reconcile) and no legacy manager is left; else an
/// update, with a note saying why when it is not the content.
fn compare_owned(
    d: &Desired,
    l: &Live,
    observed: &Observed,
    ctx: &Ctx,
    options: &PlanOptions,
) -> (Action, Option<String>, Legacy) {
    let cluster = &ctx.cluster;
    let mut note = None;
    let mine = l.activations.iter().any(|a| ctx.mine(a));
    // Listed by the cluster's label, it must carry it: an object of an
    // older kix gets it now (and a plan that listed wide, the last).
    let unlabelled = !l.labelled_for(cluster);
    let same = l.digest.as_deref() == Some(d.digest.as_str()) && mine && l.deletion.is_none();
    let drifted = if options.reconcile && same {
        observed.drifted.get(&d.key).cloned().unwrap_or_default()
    } else {
        vec![]
    };
    let drift = !drifted.is_empty();
    if drift {
        let shown: Vec<String> = drifted.iter().map(ToString::to_string).collect();
        note = Some(format!("{NOTE_DRIFTED}: {}", shown.join(", ")));
    }
    let legacy = Legacy::of(
        &l.appliers,
        cluster,
        &ownership::other_clusters(&l.activations, cluster, &ctx.clusters),
    );
    if legacy != Legacy::None && note.is_none() {
        note = Some(ownership::NOTE_TAKE_OVER.replace("<cluster>", cluster));
    }
    if unlabelled && same && note.is_none() {
        note = Some(NOTE_UNLABELLED.to_string());
    }
    let action = if same && !drift && legacy == Legacy::None && !unlabelled {
        Action::Unchanged
    } else {
        Action::Update
    };
    (action, note, legacy)
}

/// Server-side dry-run of everything that would be written, bounded
/// parallel, in the desired objects' order.
async fn dry_run_all(
    client: &Client,
    first_pass: Vec<PlannedObject>,
    desired: &[Desired],
    observed: &Observed,
    ctx: &Ctx,
    options: &PlanOptions,
) -> Result<Vec<PlannedObject>> {
    let creating_namespaces: BTreeSet<String> = desired
        .iter()
        .filter(|d| d.is_namespace() && observed.any(&d.key).is_none_or(|l| l.deletion.is_some()))
        .map(|d| d.key.name.clone())
        .collect();
    // The futures are built in a loop, not by a closure over borrowed items:
    // the plan future stays Send for any caller (the operator spawns it).
    // A chunk at a time, and only for objects that are written: each future
    // is kilobytes, and building one per object up front held 4 KB per
    // object (200 MB at 50,000) for a no-op.
    let mut checked: Vec<PlannedObject> = Vec::with_capacity(first_pass.len());
    let mut pairs = first_pass.into_iter().zip(desired.iter()).peekable();
    while pairs.peek().is_some() {
        let mut checks = Vec::with_capacity(DRY_RUN_CHUNK);
        // The chunk's objects in order: an unchanged object's plan as it
        // is, or a place for its dry-run's result (they come in order).
        let mut slots: Vec<Option<PlannedObject>> = Vec::new();
        while checks.len() < DRY_RUN_CHUNK {
            let Some((planned, d)) = pairs.next() else {
                break;
            };
            if planned.action == Action::Unchanged {
                slots.push(Some(planned));
                continue;
            }
            slots.push(None);
            checks.push(dry_run(
                client,
                &ctx.cluster,
                planned,
                d,
                options,
                &creating_namespaces,
                observed.full.get(&d.key),
                observed.listed_version(&d.key),
            ));
        }
        let mut results = stream::iter(checks)
            .buffered(DRY_RUN_CONCURRENCY)
            .collect::<Vec<Result<PlannedObject>>>()
            .await
            .into_iter();
        for slot in slots {
            match slot {
                Some(unchanged) => checked.push(unchanged),
                None => checked.extend(results.next().transpose()?),
            }
        }
    }
    Ok(checked)
}

/// The planned objects under their packages, in the build's package order.
pub(crate) fn by_package(build: &Build, checked: Vec<PlannedObject>) -> Vec<PackagePlan> {
    let mut packages: Vec<PackagePlan> = build
        .packages
        .iter()
        .map(|p| PackagePlan {
            name: p.name.clone(),
            version: p.version.clone(),
            handoff: p.handoff.iter().map(ToString::to_string).collect(),
            objects: vec![],
        })
        .collect();
    for planned in checked {
        if let Some(p) = packages.iter_mut().find(|p| p.name == planned.package) {
            p.objects.push(planned);
        }
    }
    packages
}

/// Migrations crossed from the installed versions (PackageInstance records);
/// objects a migration recreates become replaces. Then the Helm hooks the
/// deploy runs, by the same records ([`mark_hooks`]), and the delete hooks
/// of the packages the build drops, read from the builds of `history` (the
/// Kix cluster's records, oldest first): a package of their own in the
/// plan, their objects after the build's in `desired`
/// ([`crate::delete_hooks`]).
async fn crossed_and_hooks(
    client: &Client,
    build: &Build,
    (desired, packages, resources): (&mut Vec<Desired>, &mut Vec<PackagePlan>, &mut Resources),
    history: &[&Activation],
    ctx: &Ctx,
) -> Result<Vec<crate::migrations::PlannedMigration>> {
    let instances = records::package_instances(client, &ctx.cluster).await?;
    let migrations = crate::migrations::crossed(build, &instances);
    crate::migrations::mark_objects(packages, &migrations, &ctx.activation, |a| ctx.mine(a));
    mark_hooks(packages, desired, &instances, ctx);
    let dropped = crate::delete_hooks::dropped(build, &instances);
    // A scoped plan (the operator's repairs) removes no package.
    if ctx.only.is_none() && !dropped.is_empty() {
        let removed = crate::delete_hooks::removed(dropped, history, resources).await?;
        for removed in removed.into_iter().filter(|r| !r.hooks.is_empty()) {
            packages.push(crate::delete_hooks::planned(&removed, &ctx.activation));
            desired.extend(removed.hooks);
        }
    }
    Ok(migrations)
}

/// Which of the build's Helm hooks the deploy runs, and in which phase
/// ([`crate::hooks`]): a package with an installed PackageInstance is
/// upgraded, any other installed.
fn mark_hooks(
    packages: &mut [PackagePlan],
    desired: &[Desired],
    instances: &[kix_api::PackageInstance],
    ctx: &Ctx,
) {
    let installed: BTreeSet<String> = instances
        .iter()
        .filter(|pi| crate::packages::installed_version(pi).is_some())
        .map(|pi| pi.spec.package.clone())
        .collect();
    let mine = |a: &str| ctx.mine(a);
    let hooks = crate::hooks::Context {
        installed: &installed,
        completed: &ctx.completed_jobs,
        only: ctx.only.as_ref(),
        activation: &ctx.activation,
        mine: &mine,
    };
    crate::hooks::mark(packages, desired, &hooks);
}

/// What the build dropped, in reverse apply order: this cluster's objects
/// it no longer has, each deleted, kept (shared, prune disabled) or waited
/// for (already being deleted).
fn prune_candidates(
    desired: &[Desired],
    live: &KeyMap<ObjectKey, Live>,
    ctx: &Ctx,
) -> Vec<PlannedObject> {
    let desired_keys: KeySet<&ObjectKey> = desired.iter().map(|d| &d.key).collect();
    let mut candidates: Vec<&Live> = live
        .values()
        .filter(|l| l.owned && !desired_keys.contains(&l.key))
        .filter(|l| l.activations.iter().any(|a| ctx.mine(a)))
        .collect();
    candidates.sort_by(|a, b| crate::order::prune_order(&a.key, &b.key));
    candidates.into_iter().map(|l| dropped(l, ctx)).collect()
}

/// One object the build dropped: what happens to it, and the other
/// clusters' activations it keeps.
fn dropped(l: &Live, ctx: &Ctx) -> PlannedObject {
    let others: BTreeSet<String> = l
        .activations
        .iter()
        .filter(|a| !ctx.mine(a))
        .cloned()
        .collect();
    // Anyone who may write the object may write its claim: it is this
    // cluster's only when a build of the records it claims has it.
    let claimed: Vec<&String> = l.activations.iter().filter(|a| ctx.mine(a)).collect();
    let founded = claimed
        .iter()
        .any(|a| crate::claims::holds(a, &l.key, &ctx.paths, &ctx.owned));
    let (action, note) = if !founded {
        (Action::Keep, Some(crate::claims::unfounded_note(&claimed)))
    } else if let Some(deletion) = &l.deletion {
        (Action::Deleting, Some(deletion.describe()))
    } else if let Some(note) = l.keep {
        (Action::Keep, Some(note.to_string()))
    } else if !others.is_empty() {
        (Action::Keep, Some(NOTE_SHARED.to_string()))
    } else {
        (Action::Delete, None)
    };
    PlannedObject {
        key: l.key.clone(),
        api_version: l.api_version().to_string(),
        package: l.package.clone().unwrap_or_default(),
        action,
        changes: vec![],
        fields: vec![],
        destructive: action == Action::Delete && is_destructive(&l.key),
        note,
        hook: None,
        warnings: vec![],
        contenders: vec![],
        takes_with_it: None,
        deletion: l.deletion.clone(),
        activations: others,
        legacy: Legacy::None,
    }
}

/// How many objects of each action.
pub(crate) fn count<'a>(objects: impl Iterator<Item = &'a PlannedObject>) -> Counts {
    let mut counts = Counts::default();
    for o in objects {
        match o.action {
            Action::Create => counts.create += 1,
            Action::Update => counts.update += 1,
            Action::Unchanged => counts.unchanged += 1,
            Action::Replace => counts.replace += 1,
            Action::Adopt => counts.adopt += 1,
            Action::Conflict => counts.conflict += 1,
            Action::Delete => counts.delete += 1,
            Action::Keep => counts.keep += 1,
            Action::Deleting => counts.deleting += 1,
        }
    }
    counts
}

/// CRDs, Namespaces and PVCs take data or other objects with them.
pub fn is_destructive(key: &ObjectKey) -> bool {
    matches!(
        key.group_kind(),
        group_kind::CUSTOM_RESOURCE_DEFINITION
            | group_kind::NAMESPACE
            | group_kind::PERSISTENT_VOLUME_CLAIM
    )
}

/// The manifest as it is sent: with its activations annotation and its
/// Kix cluster's label (neither in the digest: a Kix cluster sharing the
/// object has the same).
pub fn applied_manifest(d: &Desired, activations: &BTreeSet<String>) -> Value {
    let mut manifest = d.manifest();
    manifest["metadata"]["annotations"][kix_api::ANNOTATION_ACTIVATIONS] =
        Value::String(kix_api::labels::format_activations(activations));
    manifest["metadata"]["labels"][kix_api::labels::cluster_label(&d.cluster)] =
        Value::String(kix_api::labels::CLUSTER_LABEL_VALUE.into());
    manifest
}

/// The label selector a plan of `cluster` lists its objects with: its own
/// label once every object of it carries it ([`records::objects_labelled`]);
/// until then (a Kix cluster an older kix deployed) every object kix
/// manages, once: that plan's deploy labels them.
pub(crate) fn objects_selector(cluster: &str, labelled: bool) -> String {
    if labelled {
        kix_api::labels::cluster_objects_selector(cluster)
    } else {
        kix_api::labels::managed_selector()
    }
}

pub fn api_for(client: &Client, d: &Desired) -> Api<DynamicObject> {
    match &d.key.namespace {
        Some(ns) if d.resource.namespaced => {
            Api::namespaced_with(client.clone(), ns, &d.resource.api)
        }
        _ => Api::all_with(client.clone(), &d.resource.api),
    }
}

/// One object's server-side dry-run: its changes against the live object,
/// or why it conflicts, cannot change in place, or was not checked.
#[allow(clippy::too_many_arguments)]
async fn dry_run(
    client: &Client,
    cluster: &str,
    mut planned: PlannedObject,
    d: &Desired,
    options: &PlanOptions,
    creating_namespaces: &BTreeSet<String>,
    full_live: Option<&Value>,
    listed_version: Option<&str>,
) -> Result<PlannedObject> {
    // Unchanged, or created only once its deletion is done (its note says so).
    if planned.action == Action::Unchanged || planned.deletion.is_some() {
        return Ok(planned);
    }
    if let Some(note) = not_dry_run(&planned, d, creating_namespaces) {
        planned.note = Some(note.into());
        return Ok(planned);
    }
    let api = api_for(client, d);
    let manager = kix_api::field_manager(cluster);
    let manifest = applied_manifest(d, &planned.activations);
    // The live object the diff (or an immutable-field error) is read
    // against: fetched beside the dry-run rather than after it, so each
    // change costs one round trip, not two.
    let live_read = async {
        match full_live {
            _ if !matches!(planned.action, Action::Update | Action::Adopt) => Ok(None),
            Some(v) => Ok(Some(v.clone())),
            None => read_live(&api, &d.key.name, listed_version).await,
        }
    };
    let apply = ownership::apply(
        client,
        &api,
        &d.key.name,
        &manifest,
        &manager,
        ownership::takeover(
            &planned,
            options.force_conflicts,
            options.yield_to_kix_clusters,
        ),
        true,
    );
    let ((result, warnings), live_read) = tokio::join!(apply, live_read);
    // What the apiserver says of the object may quote its values.
    planned.warnings = warnings.iter().map(|w| d.scrub(w)).collect();
    let result = result.map_err(|e| d.scrub_error(e));
    checked(planned, d, cluster, result, live_read)
}

/// Why an object is not dry-run: the server cannot check it before this
/// deploy creates its CRD or its namespace.
fn not_dry_run(
    planned: &PlannedObject,
    d: &Desired,
    creating_namespaces: &BTreeSet<String>,
) -> Option<&'static str> {
    if d.resource.served == Served::AfterCrd {
        return Some("its CRD is created by this deploy: not dry-run");
    }
    let in_new_namespace = d
        .key
        .namespace
        .as_ref()
        .is_some_and(|ns| creating_namespaces.contains(ns));
    (planned.action == Action::Create && in_new_namespace)
        .then_some("its namespace is created by this deploy: not dry-run")
}

/// The planned object as the dry-run's answer leaves it.
fn checked(
    mut planned: PlannedObject,
    d: &Desired,
    cluster: &str,
    result: kube::Result<Applied>,
    live_read: kube::Result<Option<Value>>,
) -> Result<PlannedObject> {
    match result {
        Ok(Applied::Object(result)) => {
            if matches!(planned.action, Action::Update | Action::Adopt) {
                let live = live_read.map_err(|source| EngineError::Object {
                    action: "reading",
                    key: d.key.clone(),
                    source,
                })?;
                let result = serde_json::to_value(result).unwrap_or(Value::Null);
                if let Some(live) = live {
                    with_changes(&mut planned, d, cluster, &live, &result);
                }
            }
            Ok(planned)
        }
        Ok(Applied::Conflicts(contested)) => {
            planned.action = Action::Conflict;
            planned.fields = contested
                .iter()
                .map(|c| d.scrub(&c.describe(cluster)))
                .collect();
            planned.contenders = contested
                .iter()
                .filter_map(|c| match c.contender() {
                    ownership::Contender::KixCluster(other) => Some(other),
                    _ => None,
                })
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            Ok(planned)
        }
        Err(kube::Error::Api(status)) if crate::migrations::is_immutable(&status) => {
            // Name the fields: the server's paths, refined against the live object.
            let live = live_read.ok().flatten();
            let (fields, reasons) =
                crate::migrations::immutable_fields(&status, &d.manifest(), live.as_ref());
            planned.action = Action::Replace;
            planned.fields = fields;
            planned.note = Some(format!("cannot change in place: {}", reasons.join("; ")));
            Ok(planned)
        }
        // Planned (and refused) by the CRD upgrade's rules, with what to do.
        Err(kube::Error::Api(status))
            if d.is_crd() && crate::crd_upgrade::is_stored_version_removal(&status) =>
        {
            planned.note = Some(crate::crd_upgrade::NOTE_STORED_REMOVED.into());
            Ok(planned)
        }
        // A read-only account (or a tenant reaching past its rights) may
        // plan: the change is shown without the server's check, and the
        // rights gate refuses to deploy it.
        Err(kube::Error::Api(status)) if status.code == 403 => {
            planned.note = Some(format!("{NOTE_NO_PERMISSION}: {}", status.message));
            Ok(planned)
        }
        Err(source) => Err(EngineError::Object {
            action: "checking (server-side dry-run)",
            key: d.key.clone(),
            source,
        }),
    }
}

/// The field changes of an update or adoption: the dry-run's result against
/// the live object, without handed-off fields and shared-only changes.
fn with_changes(
    planned: &mut PlannedObject,
    d: &Desired,
    cluster: &str,
    live: &Value,
    result: &Value,
) {
    let manager = kix_api::field_manager(cluster);
    let redaction = crate::diff::Redaction {
        secret: d.key.group_kind() == group_kind::SECRET,
        decrypted: d.decrypted.as_deref(),
    };
    planned.changes = diff(live, result, redaction);
    // The deploy hands them over first: their values stay.
    planned
        .changes
        .retain(|c| !ownership::is_handed_off(&c.path, &d.handed_off));
    ownership::keep_if_only_shared(planned, live, result, &manager);
}

/// The live object to compare a dry-run's result with. Read at least as new
/// as the plan's LIST saw it (`listed_version`), which the apiserver serves
/// from its watch cache rather than with a read from etcd.
async fn read_live(
    api: &Api<DynamicObject>,
    name: &str,
    listed_version: Option<&str>,
) -> kube::Result<Option<Value>> {
    let params = match listed_version {
        Some(version) => kube::api::GetParams::at(version),
        _ => kube::api::GetParams::default(),
    };
    match api.get_with(name, &params).await {
        Ok(object) => Ok(Some(serde_json::to_value(object).unwrap_or(Value::Null))),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

/// Every object of `d`'s kind `selector` selects (in `namespace`, or
/// everywhere), page by page, each given to `keep`.
async fn list_full(
    client: &Client,
    d: &Desired,
    namespace: Option<&str>,
    selector: &str,
    keep: &mut impl FnMut(DynamicObject),
) -> Result<()> {
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &d.resource.api),
        None => Api::all_with(client.clone(), &d.resource.api),
    };
    let mut params = kube::api::ListParams::default()
        .labels(selector)
        .limit(FULL_PAGE);
    loop {
        let page = api
            .list(&params)
            .await
            .map_err(|source| EngineError::List {
                kind: d.key.kind.clone(),
                source,
            })?;
        crate::live::count_read(page.items.len());
        page.items.into_iter().for_each(&mut *keep);
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => break,
        }
    }
    Ok(())
}

/// Reconcile mode: one paged LIST of full objects per kind (in each
/// of their namespaces when the account may not list it everywhere) of the
/// desired objects kix owns. Only what the plan needs is kept: the drifted fields
/// of an object whose digest is the build's, and the full object when it
/// drifted or its digest differs (it is written: the dry-run diffs it).
/// Holding every full object was most of the operator's memory.
async fn fetch_full(
    client: &Client,
    desired: &[Desired],
    live: &KeyMap<ObjectKey, Live>,
    manager: &str,
    selector: &str,
) -> Result<(
    KeyMap<ObjectKey, Value>,
    KeyMap<ObjectKey, Vec<DriftedField>>,
)> {
    let by_key: KeyMap<&ObjectKey, &Desired> = desired
        .iter()
        .filter(|d| live.contains_key(&d.key))
        .map(|d| (&d.key, d))
        .collect();
    let mut kinds: BTreeMap<(String, String), &Desired> = BTreeMap::new();
    for d in by_key.values() {
        kinds
            .entry((d.resource.api.group.clone(), d.key.kind.clone()))
            .or_insert(d);
    }
    let (mut full, mut drifted) = (KeyMap::default(), KeyMap::default());
    for d in kinds.values() {
        let mut keep = |obj: DynamicObject| {
            let key = ObjectKey {
                group: d.resource.api.group.clone(),
                kind: d.key.kind.clone(),
                namespace: obj
                    .metadata
                    .namespace
                    .clone()
                    .filter(|_| d.resource.namespaced),
                name: obj.metadata.name.clone().unwrap_or_default(),
            };
            if let Some(wanted) = by_key.get(&key) {
                keep_full(key, &obj, wanted, live, manager, &mut full, &mut drifted);
            }
        };
        match list_full(client, d, None, selector, &mut keep).await {
            // A tenant bounded to its namespaces reads its objects there.
            Err(err) if d.resource.namespaced && err.is_forbidden() => {
                let namespaces: BTreeSet<&str> = by_key
                    .values()
                    .filter(|o| o.resource.api == d.resource.api)
                    .filter_map(|o| o.key.namespace.as_deref())
                    .collect();
                for namespace in namespaces {
                    list_full(client, d, Some(namespace), selector, &mut keep).await?;
                }
            }
            listed => listed?,
        }
    }
    Ok((full, drifted))
}

/// [`fetch_full`] of a few objects, each read by name.
async fn fetch_named(
    client: &Client,
    read: &[&Desired],
    live: &KeyMap<ObjectKey, Live>,
    manager: &str,
) -> Result<(
    KeyMap<ObjectKey, Value>,
    KeyMap<ObjectKey, Vec<DriftedField>>,
)> {
    let (mut full, mut drifted) = (KeyMap::default(), KeyMap::default());
    for d in read {
        let api: Api<DynamicObject> = match &d.key.namespace {
            Some(ns) if d.resource.namespaced => {
                Api::namespaced_with(client.clone(), ns, &d.resource.api)
            }
            _ => Api::all_with(client.clone(), &d.resource.api),
        };
        let got = api
            .get_opt(&d.key.name)
            .await
            .map_err(|source| EngineError::List {
                kind: d.key.kind.clone(),
                source,
            })?;
        if let Some(obj) = got {
            keep_full(
                d.key.clone(),
                &obj,
                d,
                live,
                manager,
                &mut full,
                &mut drifted,
            );
        }
    }
    Ok((full, drifted))
}

/// Keeps the full live object of `wanted` when the apply writes it: its
/// digest is not the build's, or fields kix applied drifted (kept too).
fn keep_full(
    key: ObjectKey,
    obj: &DynamicObject,
    wanted: &Desired,
    live: &KeyMap<ObjectKey, Live>,
    manager: &str,
    full: &mut KeyMap<ObjectKey, Value>,
    drifted: &mut KeyMap<ObjectKey, Vec<DriftedField>>,
) {
    let value = serde_json::to_value(obj).unwrap_or(Value::Null);
    let same = live
        .get(&key)
        .is_some_and(|l| l.digest.as_deref() == Some(wanted.digest.as_str()));
    if same {
        let fields = ownership::drifted_fields(&wanted.manifest(), &value, manager);
        if fields.is_empty() {
            return;
        }
        drifted.insert(key.clone(), fields);
    }
    full.insert(key, value);
}

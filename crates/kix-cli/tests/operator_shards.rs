//! Horizontal sharding (#45, point 2): two `kix-operator` processes with
//! `--shards 4` split the records of eight Kix clusters between them (four
//! pinned to a shard by their `kix.run/shard` label, four by the hash of
//! their name), each record reconciled by one replica only; one replica is
//! killed (SIGKILL), the other takes its shard Leases over within the
//! Lease duration and a margin, and a new build of one of the killed
//! replica's Kix clusters goes Active. Over the whole test, from the
//! apiserver's audit log (each replica's requests carry its identity in
//! their User-Agent), no record and no object of a record was written by
//! both replicas in overlapping time. A record whose label names no shard
//! says so on its status; the killed replica's member Lease is deleted.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kix_api::Activation;
use kube::api::{Api, ListParams, PostParams};

/// Kix clusters; the first [`PINNED`] carry `kix.run/shard`.
const CLUSTERS: usize = 8;
const PINNED: usize = 4;
const SHARDS: u32 = 4;
/// `--shard-lease-seconds` of both replicas.
const LEASE_SECONDS: u64 = 10;
/// ConfigMaps per Kix cluster.
const OBJECTS: usize = 5;

#[tokio::test]
async fn two_replicas_split_the_records_and_one_takes_over_when_the_other_is_killed() {
    let env = kix_testkit::TestEnv::new("shards").await.expect("env");
    common::tenancy::install_crds(&env);
    let dir = tempfile::tempdir().expect("tempdir");
    let clusters: Vec<String> = (0..CLUSTERS)
        .map(|i| kix_testkit::unique_name(&format!("c-shard-{i}")))
        .collect();
    let bad = kix_testkit::unique_name("c-shard-bad");
    let mut names: Vec<&str> = clusters.iter().map(String::as_str).collect();
    names.push(&bad);
    let lease = kix_testkit::unique_name("shards");
    let cp_dir = kix_testkit::control_plane_dir();
    let start = common::audit_mark(&cp_dir);
    let ids = [
        kix_testkit::unique_name("replica-a"),
        kix_testkit::unique_name("replica-b"),
    ];
    let start_replica = |id: &str| {
        let seconds = LEASE_SECONDS.to_string();
        let shards = SHARDS.to_string();
        common::Operator::start_with(
            &kix_testkit::kubeconfig_path(),
            &names,
            &env.namespace,
            &lease,
            dir.path().join(format!("{id}.log")),
            None,
            &[
                "--identity",
                id,
                "--shards",
                &shards,
                "--shard-lease-seconds",
                &seconds,
            ],
        )
    };
    let mut a = start_replica(&ids[0]);
    let b = start_replica(&ids[1]);
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), &env.namespace);
    let split = common::poll(
        "the two replicas to hold two shard Leases each",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || {
            holders_when(&leases, &lease, |h| {
                h.values().filter(|v| **v == ids[0]).count() == 2
                    && h.values().filter(|v| **v == ids[1]).count() == 2
            })
        },
    )
    .await;
    eprintln!("shard holders: {split:?}");

    let mut records = BTreeMap::new();
    for (i, cluster) in clusters.iter().enumerate() {
        let path = build(&env, dir.path(), cluster, "1");
        let label = (i < PINNED).then(|| (i as u32 % SHARDS).to_string());
        let name = write_record(&env.client, cluster, &path, label.as_deref()).await;
        records.insert(cluster.clone(), name);
    }
    for name in records.values() {
        common::active(&env.client, name).await;
    }
    let before = writers(&cp_dir, start, &clusters, &ids);
    let mut by_replica = [0, 0];
    for cluster in &clusters {
        let agents: Vec<usize> = before
            .get(cluster)
            .map(|w| w.keys().copied().collect())
            .unwrap_or_default();
        assert_eq!(
            agents.len(),
            1,
            "{cluster}: written by {agents:?} of {ids:?} (one replica each): {before:?}"
        );
        by_replica[agents[0]] += 1;
    }
    assert!(
        by_replica.iter().all(|&n| n > 0),
        "the records were not split: {by_replica:?} of {ids:?}"
    );

    // A label naming no shard: said on the record, nothing applied.
    let path = build(&env, dir.path(), &bad, "1");
    let refused = write_record(&env.client, &bad, &path, Some("7")).await;
    let said = common::poll(
        "the record with a bad shard label to say so",
        Duration::from_secs(60),
        Duration::from_millis(300),
        || message_of(&env.client, &refused),
    )
    .await;
    assert!(
        said.contains("kix.run/shard=\"7\" is not a shard"),
        "{said}"
    );

    // Kill -9 replica a: b takes its shards once their Leases expire.
    a.child.kill().expect("kill replica a");
    let killed = Instant::now();
    let _ = a.child.wait();
    let took_over = common::poll(
        "replica b to hold every shard Lease",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || {
            holders_when(&leases, &lease, |h| {
                h.len() == SHARDS as usize && h.values().all(|v| *v == ids[1])
            })
        },
    )
    .await;
    let took = killed.elapsed();
    eprintln!("b holds {took_over:?} {took:?} after a was killed");
    // The Lease duration after b first saw a's last renewal (up to one
    // renewal period, a third of it, after it was written), the renewal
    // period b looks again at most, and 5 s for a loaded machine.
    let bound = Duration::from_secs(LEASE_SECONDS + 2 * (LEASE_SECONDS / 3) + 5);
    assert!(
        took <= bound,
        "b took a's shards over after {took:?}, more than {bound:?}"
    );

    // A new build of one of a's Kix clusters goes Active under b.
    let moved = clusters
        .iter()
        .find(|c| before.get(*c).is_some_and(|w| w.contains_key(&0)))
        .expect("a Kix cluster of replica a");
    let path = build(&env, dir.path(), moved, "2");
    let label = clusters
        .iter()
        .position(|c| c == moved)
        .filter(|&i| i < PINNED);
    let label = label.map(|i| (i as u32 % SHARDS).to_string());
    let name = write_record(&env.client, moved, &path, label.as_deref()).await;
    common::active(&env.client, &name).await;

    let all = writers(&cp_dir, start, &clusters, &ids);
    let moved_writes = &all[moved];
    assert!(
        moved_writes.contains_key(&1),
        "{moved}'s new build was not written by replica b: {moved_writes:?}"
    );
    for (cluster, by) in &all {
        if let (Some(a), Some(b)) = (by.get(&0), by.get(&1)) {
            assert!(
                a.1 < b.0 || b.1 < a.0,
                "{cluster} was written by both replicas in overlapping time: a {a:?}, b {b:?}"
            );
        }
    }
    // a's member Lease is deleted by b (three Lease durations unchanged):
    // killed replicas leave none behind.
    let member_prefix = format!("{lease}-member-");
    common::poll(
        "replica b to delete the killed replica's member Lease",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || {
            let (leases, prefix, id) = (leases.clone(), member_prefix.clone(), ids[0].clone());
            async move {
                let list = leases.list(&ListParams::default()).await.ok()?;
                let left = list.items.iter().any(|l| {
                    l.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with(&prefix))
                        && l.spec.as_ref().and_then(|s| s.holder_identity.as_deref())
                            == Some(id.as_str())
                });
                (!left).then_some(())
            }
        },
    )
    .await;
    drop(b);
}

/// The shard Leases' holders (shard Lease name → holder), once `done`
/// says they are as awaited.
async fn holders_when(
    leases: &Api<Lease>,
    base: &str,
    done: impl Fn(&BTreeMap<String, String>) -> bool,
) -> Option<BTreeMap<String, String>> {
    let list = leases.list(&ListParams::default()).await.ok()?;
    let prefix = format!("{base}-shard-");
    let holders: BTreeMap<String, String> = list
        .items
        .into_iter()
        .filter_map(|l| {
            let name = l.metadata.name.clone()?;
            let holder = l.spec?.holder_identity.filter(|h| !h.is_empty())?;
            name.starts_with(&prefix).then_some((name, holder))
        })
        .collect();
    done(&holders).then_some(holders)
}

/// Record `name`'s status message, once it has one.
async fn message_of(client: &kube::Client, name: &str) -> Option<String> {
    let api: Api<Activation> = Api::all(client.clone());
    api.get(name).await.ok()?.status?.message
}

/// Writes the next operator record of `cluster` for the build at `path`,
/// labelled `kix.run/shard=<shard>` if given; its name.
async fn write_record(
    client: &kube::Client,
    cluster: &str,
    path: &str,
    shard: Option<&str>,
) -> String {
    let next = common::records(client, cluster)
        .await
        .iter()
        .filter_map(Activation::sequence)
        .max()
        .unwrap_or(0)
        + 1;
    let mut record = Activation::new_record(next, common::operator_spec(cluster, path));
    if let Some(shard) = shard {
        let labels = record.metadata.labels.get_or_insert_with(Default::default);
        labels.insert(kix_api::labels::LABEL_SHARD.into(), shard.into());
    }
    let api: Api<Activation> = Api::all(client.clone());
    api.create(&PostParams::default(), &record)
        .await
        .expect("creating the record");
    Activation::name_for(cluster, next)
}

/// A Kix cluster of [`OBJECTS`] ConfigMaps (`<cluster>-<i>`) in the test's
/// namespace, their data `version`, in the store: its path.
fn build(
    env: &kix_testkit::TestEnv,
    dir: &std::path::Path,
    cluster: &str,
    version: &str,
) -> String {
    let files = (0..OBJECTS)
        .map(|i| {
            let text = format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {cluster}-{i}}}\ndata: {{v: '{version}'}}\n"
            );
            (format!("cm{i}.yaml"), text.into_bytes())
        })
        .collect();
    let root = dir.join(format!("{cluster}-{version}"));
    common::write_tree(
        &root,
        cluster,
        &[common::Pkg {
            name: "web".into(),
            depends_on: vec![],
            namespace: env.namespace.clone(),
            files,
        }],
    );
    common::add_to_store(&root)
}

/// When each replica (index in `ids`) wrote each Kix cluster's records and
/// ConfigMaps after audit log mark `from`: the first and last write's
/// receipt time (RFC 3339, microseconds: ordered as text).
fn writers(
    cp_dir: &std::path::Path,
    from: u64,
    clusters: &[String],
    ids: &[String; 2],
) -> BTreeMap<String, BTreeMap<usize, (String, String)>> {
    use std::io::{Seek, SeekFrom};
    let mut file = std::fs::File::open(common::audit_log(cp_dir)).expect("audit log");
    file.seek(SeekFrom::Start(from)).expect("seek");
    let mut out: BTreeMap<String, BTreeMap<usize, (String, String)>> = BTreeMap::new();
    for line in BufReader::new(file).lines() {
        let Ok(line) = line else { break };
        let Ok(event) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
        let agent = text(&event["userAgent"]);
        let verb = text(&event["verb"]);
        let write = matches!(verb.as_str(), "create" | "update" | "patch" | "delete");
        if event["stage"] != "ResponseComplete"
            || !agent.starts_with("kix-operator")
            || !write
            || text(&event["requestURI"]).contains("dryRun=All")
        {
            continue;
        }
        let Some(replica) = ids.iter().position(|id| agent.contains(id.as_str())) else {
            continue;
        };
        let resource = text(&event["objectRef"]["resource"]);
        if !matches!(resource.as_str(), "activations" | "configmaps") {
            continue;
        }
        let name = text(&event["objectRef"]["name"]);
        let Some(cluster) = clusters
            .iter()
            .filter(|c| name.starts_with(&format!("{c}-")))
            .max_by_key(|c| c.len())
        else {
            continue;
        };
        let at = text(&event["requestReceivedTimestamp"]);
        let span = out
            .entry(cluster.clone())
            .or_default()
            .entry(replica)
            .or_insert_with(|| (at.clone(), at.clone()));
        span.1 = at;
    }
    out
}

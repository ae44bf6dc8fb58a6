//! Fair turns (#45, point 2): a new record goes before the full re-checks
//! of idle Active records. Ten Kix clusters of 20 ConfigMaps are Active
//! under one operator run as a process with one reconcile slot
//! (`--concurrency 1`) and a re-check due every second
//! (`--resync-interval 1s`), so re-checks are always waiting; then a ninth
//! Kix cluster's record is written. From the apiserver's audit log, in the
//! order the requests came: between that record's creation and its going
//! Active, the operator re-checked at most two idle Kix clusters (the
//! budget's, `--resync-budget 6`: one every 10 s, and one that may have
//! been running), not every idle record whose re-check was due before it
//! (four to five of ten, one after the other, before the budget).

mod common;

use std::io::{BufRead, BufReader, Seek, SeekFrom};

use kix_api::Phase;

/// ConfigMaps per Kix cluster.
const OBJECTS: usize = 20;
/// Idle Active Kix clusters whose re-checks are due.
const IDLE: usize = 10;

#[tokio::test]
async fn a_new_record_goes_before_the_full_re_checks_of_idle_active_records() {
    let env = kix_testkit::TestEnv::new("fairness").await.expect("env");
    common::tenancy::install_crds(&env);
    let dir = tempfile::tempdir().expect("tempdir");
    let clusters: Vec<String> = (0..=IDLE)
        .map(|i| kix_testkit::unique_name(&format!("c-fair-{i}")))
        .collect();
    let (idle, new) = clusters.split_at(IDLE);
    let names: Vec<&str> = clusters.iter().map(String::as_str).collect();
    let operator = common::Operator::start_with(
        &kix_testkit::kubeconfig_path(),
        &names,
        &env.namespace,
        &kix_testkit::unique_name("lease"),
        dir.path().join("operator.log"),
        None,
        &[
            "--concurrency",
            "1",
            "--resync-interval",
            "1s",
            "--resync-budget",
            "6",
        ],
    );
    let mut specs: Vec<_> = clusters
        .iter()
        .map(|cluster| common::operator_spec(cluster, &build(&env, dir.path(), cluster)))
        .collect();
    let new_spec = specs.pop().expect("the new record's spec");
    for spec in specs {
        let cluster = spec.cluster.clone();
        let name = common::write_record(&env.client, &cluster, spec).await;
        common::active(&env.client, &name).await;
    }
    // Every idle record's re-check is now overdue, again and again.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let cp_dir = kix_testkit::control_plane_dir();
    let mark = common::audit_mark(&cp_dir);
    let name = common::write_record(&env.client, &new[0], new_spec).await;
    let record = common::settled(&env.client, &name).await;
    // (Seen Active within the 200 ms settled() polls at.)
    let end = common::audit_mark(&cp_dir);
    assert_eq!(
        record.phase(),
        Some(Phase::Active),
        "{name}: {:?}",
        record.status
    );

    let lists = listed_clusters(&cp_dir, mark, end, &clusters);
    assert!(
        lists.contains(&new[0]),
        "the new record's plan listed nothing: {lists:?}"
    );
    // One reconcile at a time: a re-check's LISTs (its kinds, metadata and
    // full, by its Kix cluster's label) come one after the other.
    let mut re_checked: Vec<&String> = lists.iter().filter(|c| idle.contains(c)).collect();
    re_checked.dedup();
    eprintln!("re-checked between {name}'s creation and its Active: {re_checked:?}");
    assert!(
        re_checked.len() <= 2,
        "{} idle Kix clusters were re-checked before {name} was Active: {lists:?}\n{}",
        re_checked.len(),
        common::tail(&operator.log(), 20_000)
    );
    let metrics = operator.metrics();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("kix_operator_resyncs_deferred_total ") && !l.ends_with(" 0")),
        "no re-check waited for its turn:\n{metrics}"
    );
}

/// A Kix cluster of [`OBJECTS`] ConfigMaps in the test's namespace, in the
/// store: its path.
fn build(env: &kix_testkit::TestEnv, dir: &std::path::Path, cluster: &str) -> String {
    let files = (0..OBJECTS)
        .map(|i| {
            let text = format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {cluster}-{i}}}\ndata: {{i: '{i}'}}\n"
            );
            (format!("cm{i}.yaml"), text.into_bytes())
        })
        .collect();
    let root = dir.join(cluster);
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

/// In the order the apiserver answered them, between the audit log marks
/// `from` and `to`: the Kix cluster (of `clusters`) each of the operator's
/// LISTs selected by its label (`cluster.kix.run/<cluster>`).
fn listed_clusters(
    cp_dir: &std::path::Path,
    from: u64,
    to: u64,
    clusters: &[String],
) -> Vec<String> {
    let mut file = std::fs::File::open(common::audit_log(cp_dir)).expect("audit log");
    file.seek(SeekFrom::Start(from)).expect("seek");
    let mut out = Vec::new();
    let mut read = from;
    for line in BufReader::new(file).lines() {
        let Ok(line) = line else { break };
        read += line.len() as u64 + 1;
        if read > to {
            break;
        }
        let Ok(event) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        let agent = event["userAgent"].as_str().unwrap_or_default();
        if event["stage"] != "ResponseComplete" || !agent.starts_with("kix-operator") {
            continue;
        }
        let uri = event["requestURI"].as_str().unwrap_or_default();
        let uri = uri
            .replace("%2F", "/")
            .replace("%2C", ",")
            .replace("%3D", "=");
        if event["verb"] != "list" {
            continue;
        }
        let selected = |c: &&String| {
            let label = kix_api::labels::cluster_label(c);
            uri.split(['=', ',', '&', '?']).any(|part| part == label)
        };
        if let Some(cluster) = clusters.iter().find(selected) {
            out.push(cluster.clone());
        }
    }
    out
}

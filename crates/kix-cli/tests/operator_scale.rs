//! One operator for many Kix clusters (#45, point 2): what a record's plan
//! reads is its own objects, found by its Kix cluster's label
//! (`cluster.kix.run/<cluster>`), never every object kix manages. And a
//! Kix cluster an older kix deployed (objects without that label) is
//! planned as before once, its dropped objects pruned and the others
//! labelled; the plans after it read by the label.

mod cli_support;
mod common;

use cli_support::Kix;
use kix_api::labels::{CONDITION_OBJECTS_LABELLED, cluster_label};

/// ConfigMaps `prefix-0..count` as one YAML text.
fn configmaps(prefix: &str, count: usize) -> String {
    (0..count)
        .map(|i| cli_support::configmap(&format!("{prefix}-{i}"), "1"))
        .collect()
}

/// The operator's `kix_operator_objects_listed_total`.
fn objects_listed(operator: &common::Operator) -> u64 {
    let metrics = operator.metrics();
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("kix_operator_objects_listed_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no objects-listed counter in /metrics:\n{metrics}"))
}

/// The peak resident memory of process `pid` in kB (VmHWM), for the log.
fn peak_rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Another Kix cluster's 2,000 ConfigMaps are in the cluster; four small
/// Kix clusters of 20 each are applied and kept by the operator. Their
/// plans read their own objects: a few times 80 in all, fewer than the
/// other cluster's objects, which any one plan listing everything kix
/// manages would read whole.
#[tokio::test]
async fn a_records_plans_read_its_own_objects_not_every_object_kix_manages() {
    const OTHERS: usize = 2_000;
    const CLUSTERS: usize = 4;
    const OWN: usize = 20;
    let big = Kix::new("scale-big").await;
    let tree = big.tree("big", &configmaps("big", OTHERS), serde_json::json!({}));
    big.deploy(&tree, &[]).ok();

    let env = kix_testkit::TestEnv::new("scale").await.expect("env");
    let dir = tempfile::tempdir().expect("tempdir");
    let clusters: Vec<String> = (0..CLUSTERS)
        .map(|i| kix_testkit::unique_name(&format!("c-scale-{i}")))
        .collect();
    let names: Vec<&str> = clusters.iter().map(String::as_str).collect();
    let operator = common::Operator::start_with(
        &kix_testkit::kubeconfig_path(),
        &names,
        &env.namespace,
        &kix_testkit::unique_name("lease"),
        dir.path().join("operator.log"),
        None,
        &[],
    );
    let mut records = Vec::new();
    for cluster in &clusters {
        let root = dir.path().join(cluster);
        let text = configmaps(cluster, OWN).into_bytes();
        let package = common::Pkg {
            name: "web".into(),
            depends_on: vec![],
            namespace: env.namespace.clone(),
            files: vec![("cms.yaml".into(), text)],
        };
        common::write_tree(&root, cluster, &[package]);
        let spec = common::operator_spec(cluster, &common::add_to_store(&root));
        records.push(common::write_record(&env.client, cluster, spec).await);
    }
    for name in &records {
        common::active(&env.client, name).await;
    }
    // A resync (10 s in tests) plans each record whole again, its full
    // objects read too (drift).
    tokio::time::sleep(std::time::Duration::from_secs(12)).await;
    let listed = objects_listed(&operator);
    let bound = (CLUSTERS * OWN * 10) as u64;
    assert!(bound < OTHERS as u64, "the bound must tell the two apart");
    eprintln!(
        "objects listed: {listed}; operator peak RSS {:?} kB",
        peak_rss_kb(operator.child.id())
    );
    assert!(
        listed <= bound,
        "the operator's plans of {CLUSTERS} Kix clusters of {OWN} ConfigMaps read {listed} objects \
         (at most {bound} expected): they read other Kix clusters' objects"
    );
}

/// A Kix cluster an older kix deployed: its objects lack the cluster's
/// label and its record does not say they have it. The next deploy lists
/// every object kix manages, as before: the object the build dropped is
/// pruned, the others get the label, and the record says so; the deploy
/// after it lists by the label and has nothing to do.
#[tokio::test]
async fn objects_an_older_kix_deployed_are_pruned_or_labelled_by_the_next_deploy() {
    let kix = Kix::new("scale-upgrade").await;
    let label = cluster_label(kix.cluster());
    let all = kix.tree("all", &configmaps("cm", 3), serde_json::json!({}));
    kix.deploy(&all, &[]).ok();
    let first = kix.records().await.pop().expect("a record");
    assert!(labelled_record(&first), "{:?}", first.status);
    let cm0 = kix.configmap("cm-0").expect("cm-0");
    assert_eq!(cm0["metadata"]["labels"][&label], "true", "{cm0}");

    // What an older kix left: no label, no condition.
    let unlabel = format!("{label}-");
    for name in ["cm-0", "cm-1", "cm-2"] {
        kix.kubectl(&["label", "configmap", "-n", kix.ns(), name, &unlabel]);
    }
    kix_engine::records::update_status(
        &kix.env.client,
        &first.metadata.name.clone().expect("the record's name"),
        |s| {
            s.conditions
                .retain(|c| c.type_ != CONDITION_OBJECTS_LABELLED)
        },
    )
    .await
    .expect("status");

    let two = kix.tree("two", &configmaps("cm", 2), serde_json::json!({}));
    let run = kix.deploy(&two, &[]).ok();
    assert!(
        kix.configmap("cm-2").is_none(),
        "cm-2 was pruned:\n{}",
        run.stdout
    );
    for name in ["cm-0", "cm-1"] {
        let cm = kix.configmap(name).expect(name);
        assert_eq!(cm["metadata"]["labels"][&label], "true", "{name}: {cm}");
    }
    let second = kix.records().await.pop().expect("a record");
    assert!(labelled_record(&second), "{:?}", second.status);

    let again = kix.deploy(&two, &[]).ok();
    assert!(again.stdout.contains("nothing to do"), "{}", again.stdout);
}

fn labelled_record(record: &kix_api::Activation) -> bool {
    record.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == CONDITION_OBJECTS_LABELLED)
    })
}

//! Bounded reconciles (#45, point 2): each running reconcile holds its
//! plan and its LISTs, so the operator runs at most `--concurrency` at once
//! and the others wait their turn. Six Kix clusters' records written at
//! once, the operator run as a process with `--concurrency 2`: all go
//! Active, and `/metrics` says no more than two reconciles ever ran at once.

mod common;

use kix_api::Phase;

#[tokio::test]
async fn no_more_records_are_reconciled_at_once_than_the_concurrency() {
    let env = kix_testkit::TestEnv::new("concurrency").await.expect("env");
    common::tenancy::install_crds(&env);
    let dir = tempfile::tempdir().expect("tempdir");
    let clusters: Vec<String> = (0..6)
        .map(|i| kix_testkit::unique_name(&format!("c-conc-{i}")))
        .collect();
    let names: Vec<&str> = clusters.iter().map(String::as_str).collect();
    let operator = common::Operator::start_with(
        &kix_testkit::kubeconfig_path(),
        &names,
        &env.namespace,
        &kix_testkit::unique_name("lease"),
        dir.path().join("operator.log"),
        None,
        &["--concurrency", "2"],
    );
    let mut records = Vec::new();
    for cluster in &clusters {
        let root = dir.path().join(cluster);
        let files = (0..20)
            .map(|i| {
                let text = format!(
                    "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {cluster}-{i}}}\ndata: {{i: '{i}'}}\n"
                );
                (format!("cm{i}.yaml"), text.into_bytes())
            })
            .collect();
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
        let spec = common::operator_spec(cluster, &common::add_to_store(&root));
        records.push(spec);
    }
    let mut names = Vec::new();
    for spec in records {
        let cluster = spec.cluster.clone();
        names.push(common::write_record(&env.client, &cluster, spec).await);
    }
    for name in &names {
        let record = common::settled(&env.client, name).await;
        assert_eq!(
            record.phase(),
            Some(Phase::Active),
            "{name}: {:?}",
            record.status
        );
    }
    let metrics = operator.metrics();
    let max: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("kix_operator_reconciles_in_flight_max "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no in-flight gauge in /metrics:\n{metrics}"));
    assert!(
        (1..=2).contains(&max),
        "{max} reconciles ran at once:\n{metrics}"
    );
}

//! No crash takes every tenant down (#50, point 3): a panic while the
//! operator reads one Kix cluster's build, or acts on its record, ends that
//! record Failed with the reason; the operator process lives on, the other
//! Kix cluster's records go Active, and a restart does not fail again on
//! the Failed record. The panics are injected (`KIX_OPERATOR_FAULT`, debug
//! builds only): they stand for any bug in kix's reader or engine.

mod common;

use std::path::Path;

use kix_api::{Activation, Phase};

fn message(record: &Activation) -> String {
    record
        .status
        .as_ref()
        .and_then(|s| s.message.clone())
        .unwrap_or_default()
}

/// A record for a build of `cluster` in `namespace` (ConfigMap `settings`
/// with `value`), as `kix deploy --operator` writes one.
async fn deploy(env: &kix_testkit::TestEnv, dir: &Path, cluster: &str, value: &str) -> Activation {
    let root = dir.join(format!("{cluster}-{value}"));
    common::write_tree(
        &root,
        cluster,
        &[common::Pkg {
            name: "web".into(),
            depends_on: vec![],
            namespace: env.namespace.clone(),
            files: vec![(
                "cm.yaml".into(),
                format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings-{cluster}}}\ndata: {{value: {value}}}\n").into_bytes(),
            )],
        }],
    );
    let spec = common::operator_spec(cluster, &common::add_to_store(&root));
    let name = common::write_record(&env.client, cluster, spec).await;
    common::settled(&env.client, &name).await
}

fn operator(
    env: &kix_testkit::TestEnv,
    dir: &Path,
    clusters: [&str; 2],
    lease: &str,
    fault: &str,
) -> common::Operator {
    common::Operator::start_with_env(
        &kix_testkit::kubeconfig_path(),
        &clusters,
        &env.namespace,
        lease,
        dir.join(format!("operator-{fault}.log")),
        None,
        &[],
        &[("KIX_OPERATOR_FAULT", fault)],
    )
}

fn assert_alive(operator: &mut common::Operator) {
    let exited = operator.child.try_wait().expect("try_wait");
    assert_eq!(exited, None, "the operator exited:\n{}", operator.log());
}

#[tokio::test]
async fn a_panic_on_one_record_fails_that_record_and_the_operator_serves_the_others() {
    let env = kix_testkit::TestEnv::new("panics").await.expect("env");
    common::tenancy::install_crds(&env);
    let dir = tempfile::tempdir().expect("tempdir");
    let (faulty, other) = (env.cluster.clone(), kix_testkit::unique_name("c-panics-b"));
    let clusters = [faulty.as_str(), other.as_str()];
    let lease = kix_testkit::unique_name("lease");

    for (point, while_) in [
        ("reading", "reading /nix/store/"),
        ("acting", "acting on this record"),
    ] {
        let fault = format!("panic-{point}:{faulty}");
        let mut running = operator(&env, dir.path(), clusters, &lease, &fault);
        let record = deploy(&env, dir.path(), &faulty, point).await;
        let said = message(&record);
        assert_eq!(record.phase(), Some(Phase::Failed), "{said}");
        assert!(
            said.starts_with(&format!("kix-operator failed {while_}"))
                && said.contains(&format!(
                    "injected fault panic-{point} for Kix cluster {faulty}"
                ))
                && said.contains("a bug in kix"),
            "the record says what failed: {said}"
        );
        assert_alive(&mut running);
        // Served by the same process (how soon is not this test's: the
        // machine may be busy).
        let served = deploy(&env, dir.path(), &other, point).await;
        assert_eq!(served.phase(), Some(Phase::Active), "{}", message(&served));
        assert_alive(&mut running);

        // A restart does not fail again on the Failed record, and serves.
        drop(running);
        let mut restarted = operator(&env, dir.path(), clusters, &lease, &fault);
        let served = deploy(&env, dir.path(), &other, &format!("{point}-again")).await;
        assert_eq!(served.phase(), Some(Phase::Active), "{}", message(&served));
        assert_alive(&mut restarted);
        let records = common::records(&env.client, &faulty).await;
        let last = records.last().expect("the faulty record");
        assert_eq!(
            last.phase(),
            Some(Phase::Failed),
            "unchanged by the restart"
        );
        assert_eq!(message(last), said, "unchanged by the restart");
    }
}

//! A tenant's health rules cannot stop the operator (#50, points 1 and 2):
//! two tenants granted what docs/operator.md grants, one operator run as a
//! process. Tenant a's records name builds whose rules would crash or stall
//! a reader without bounds (a 20,000-term sum, a 20,000-link chain, ten
//! nested `all()`: 10^10 steps), and one
//! whose rule passes the estimate but runs for seconds (a regex compiled
//! per item). Each ends with the limit named; meanwhile tenant b's records
//! go Active within 5 s and /healthz answers.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::tenancy::{apply_rbac, install_crds, tree, tree_with_rules};
use kix_api::{Activation, Phase};
use serde_json::{Value, json};

/// A rule on ConfigMap `name`.
fn rule(name: &str, current: String) -> Value {
    json!({"kind": "ConfigMap", "name": name, "current": current})
}

/// ConfigMap `patterns`: 500 regexes, each taking milliseconds to compile.
fn patterns() -> String {
    let mut text =
        String::from("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: patterns}\ndata:\n");
    for i in 0..500 {
        text.push_str(&format!(
            "  p{i}: '^(a{{1,{}}}b|c[d-z]{{2,90}}){{1,30}}$'\n",
            50 + i
        ));
    }
    text
}

/// `depth` nested `all()` over a ten-item list.
fn nested_all(depth: usize) -> String {
    let list = "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]";
    let mut text = "true".to_owned();
    for level in 0..depth {
        text = format!("{list}.all(x{level}, {text})");
    }
    text
}

/// Tenant b's ConfigMap `after`, saying after which of a's records.
fn after(what: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: after}}\ndata: {{after: {what}}}\n")
}

fn message(record: &Activation) -> String {
    record
        .status
        .as_ref()
        .and_then(|s| s.message.clone())
        .unwrap_or_default()
}

fn validate(path: &str) -> common::Run {
    let nowhere = Path::new("/nonexistent/kubeconfig");
    common::run(
        common::kix(nowhere, Path::new("/nonexistent/gcroots")).args(["validate", "--path", path]),
    )
}

fn deploy_operator(gcroots: &Path, cluster: &str, path: &str) -> common::Run {
    common::run(common::kix(&kix_testkit::kubeconfig_path(), gcroots).args([
        "deploy",
        cluster,
        "--operator",
        "--path",
        path,
        "--yes",
    ]))
}

/// Tenant b's next record, for a new value of its ConfigMap: Active within
/// 5 s of its creation.
async fn b_goes_active_within_5s(env: &kix_testkit::TestEnv, b: &Activation, path: String) {
    let mut spec = b.spec.clone();
    spec.source.path = path;
    let start = Instant::now();
    let name = common::write_record(&env.client, &spec.cluster.clone(), spec).await;
    let record = common::settled(&env.client, &name).await;
    let took = start.elapsed();
    assert_eq!(record.phase(), Some(Phase::Active), "{}", message(&record));
    assert!(
        took < Duration::from_secs(5),
        "tenant b's record took {took:?}"
    );
}

#[tokio::test]
async fn a_tenants_health_rule_cannot_stop_the_operator() {
    let mut env = kix_testkit::TestEnv::new("tenant-cel").await.expect("env");
    install_crds(&env);
    let (ns_a, ns_b) = (
        env.namespace.clone(),
        env.namespace("b").await.expect("ns b"),
    );
    for ns in [&ns_a, &ns_b] {
        apply_rbac(&env, ns);
    }
    let (cluster_a, cluster_b) = (env.cluster.clone(), kix_testkit::unique_name("c-cel-b"));
    let dir = tempfile::tempdir().expect("tempdir");
    let gcroots = dir.path().join("gcroots");
    let operator = common::Operator::start_with(
        &kix_testkit::kubeconfig_path(),
        &[&cluster_a, &cluster_b],
        "kube-system",
        &kix_testkit::unique_name("lease"),
        dir.path().join("operator.log"),
        None,
        &["--require-service-account"],
    );
    for (cluster, ns) in [(&cluster_a, &ns_a), (&cluster_b, &ns_b)] {
        let build = tree(&dir.path().join(cluster.as_str()), cluster, ns, None);
        let run = deploy_operator(&gcroots, cluster, &build);
        assert_eq!(run.code, Some(0), "{cluster} deploys: {run}");
    }
    let last = |cluster: String| {
        let client = env.client.clone();
        async move {
            common::records(&client, &cluster)
                .await
                .pop()
                .expect("a record")
        }
    };
    let (a, b) = (last(cluster_a.clone()).await, last(cluster_b.clone()).await);

    // Rules that would overflow the reader's stack: refused by `kix
    // validate` and, when a record names them anyway, by the operator.
    let crashing = [
        (
            "sum",
            format!("1{} == 0", " + 1".repeat(20_000)),
            "80006 bytes long, over the limit of 4096",
        ),
        (
            "chain",
            format!("self{} == 1", ".a".repeat(20_000)),
            "over the limit of 4096",
        ),
        // Ten nested all() over ten items: 10^10 steps.
        (
            "nested",
            nested_all(10),
            "estimated cost over the limit of 1000000",
        ),
    ];
    for (what, current, limit) in crashing {
        let path = tree_with_rules(
            &dir.path().join(what),
            &cluster_a,
            &ns_a,
            None,
            &[rule("settings", current)],
        );
        let run = validate(&path);
        assert_eq!(run.code, Some(1), "kix validate refuses the {what}: {run}");
        let named = |text: &str| {
            text.contains("packages/web/package.json")
                && text.contains("health rule for ConfigMap")
                && text.contains(limit)
        };
        assert!(
            named(&run.stderr),
            "kix validate names the file, the rule and the limit: {run}"
        );
        let mut spec = a.spec.clone();
        spec.source.path = path;
        let name = common::write_record(&env.client, &cluster_a, spec).await;
        let record = common::settled(&env.client, &name).await;
        assert_eq!(record.phase(), Some(Phase::Failed), "{}", message(&record));
        assert!(
            named(&message(&record)),
            "the record names the limit: {}",
            message(&record)
        );
        b_goes_active_within_5s(
            &env,
            &b,
            tree(
                &dir.path().join(format!("b-{what}")),
                &cluster_b,
                &ns_b,
                Some(&after(what)),
            ),
        )
        .await;
    }

    // A rule within the estimate that runs for seconds: its object is
    // Degraded at the wall-clock limit, and b is served meanwhile.
    let slow = "self.data.all(k, 'ab'.matches(self.data[k]))".to_owned();
    let path = tree_with_rules(
        &dir.path().join("slow"),
        &cluster_a,
        &ns_a,
        Some(&patterns()),
        &[rule("patterns", slow)],
    );
    assert_eq!(
        validate(&path).code,
        Some(0),
        "the slow rule is within the estimate"
    );
    let mut spec = a.spec.clone();
    spec.source.path = path;
    let slow_record = common::write_record(&env.client, &cluster_a, spec).await;
    let b_path = tree(
        &dir.path().join("b-slow"),
        &cluster_b,
        &ns_b,
        Some(&after("slow")),
    );
    b_goes_active_within_5s(&env, &b, b_path).await;
    let healthz = operator.get("/healthz", Duration::from_secs(1));
    assert_eq!(
        healthz.as_deref(),
        Ok("HTTP/1.0 200 OK"),
        "/healthz while a's rule runs"
    );
    let record = common::settled(&env.client, &slow_record).await;
    let said = message(&record);
    assert_eq!(record.phase(), Some(Phase::Degraded), "{said}");
    assert!(
        said.contains("health rule for ConfigMap patterns exceeded its budget (1 s of evaluation)"),
        "the record says which rule ran over: {said}"
    );
}

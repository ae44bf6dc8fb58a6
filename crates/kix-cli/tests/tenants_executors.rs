//! Every executor that acts for a tenant's build acts as the ServiceAccount
//! the build names (issue 43, point 1: one client factory): a build that
//! reaches past its account's rights — a ClusterRoleBinding to
//! cluster-admin, a ConfigMap in another tenant's namespace — is refused by
//! the apiserver as the tenant's account, and nothing is written, whichever
//! front end runs it. `kix deploy` and the operator are shown in
//! `tenants.rs` (`a_local_deploy_acts_as_the_account_its_build_names`,
//! `the_operator_acts_for_each_record_as_its_account`); here: `kix fleet
//! deploy`, `kix rollback`, `kix gc`, `kix declare`.

mod common;

use std::path::Path;

use common::tenancy::{self, exists};
use serde_json::json;

/// Two tenants on the shared control plane: each its namespace, Kix
/// cluster and ServiceAccount `<namespace>/kix` with [`tenancy::rbac`].
async fn two_tenants(test: &str) -> (kix_testkit::TestEnv, kix_testkit::TestEnv) {
    let a = kix_testkit::TestEnv::new(&format!("{test}-a"))
        .await
        .expect("env");
    let b = kix_testkit::TestEnv::new(&format!("{test}-b"))
        .await
        .expect("env");
    tenancy::install_crds(&a);
    tenancy::apply_rbac(&a, &a.namespace);
    tenancy::apply_rbac(&b, &b.namespace);
    (a, b)
}

/// The build of tenant `env` that reaches past its rights: its ConfigMap,
/// a ClusterRoleBinding `<cluster>-takes-over` and ConfigMap `taken` in
/// `other`'s namespace.
fn overreaching(dir: &Path, env: &kix_testkit::TestEnv, other: &str) -> String {
    let extra = format!(
        "{}---\n{}",
        tenancy::cluster_admin_binding(&binding_of(env)),
        tenancy::config_map_in(other, "taken")
    );
    tenancy::tree(
        &dir.join(format!("{}-over", env.cluster)),
        &env.cluster,
        &env.namespace,
        Some(&extra),
    )
}

fn binding_of(env: &kix_testkit::TestEnv) -> String {
    format!("{}-takes-over", env.cluster)
}

/// Asserts what the overreaching build of `env` would have written does
/// not exist, and nothing was written acting as its account since `mark`.
fn assert_nothing_written(env: &kix_testkit::TestEnv, other: &str, mark: u64) {
    let binding = binding_of(env);
    if exists(env, "clusterrolebinding", &binding, None) {
        // Not left behind on the shared control plane.
        let _ = env.kubectl(&["delete", "clusterrolebinding", &binding]);
        panic!("the tenant's cluster-admin binding {binding} was written");
    }
    assert!(
        !exists(env, "configmap", "taken", Some(other)),
        "the tenant wrote ConfigMap taken into {other}"
    );
    let writes = tenancy::writes_as(mark, &tenancy::user(&env.namespace));
    assert!(
        writes.is_empty(),
        "written acting as the tenant: {writes:?}"
    );
}

/// A fleet file (what mkFleet builds) of `members` (name, build, Kix
/// cluster), one wave each, in order, all on the shared control plane.
fn fleet_file(dir: &Path, file: &str, members: &[(&str, &str, &str)]) -> String {
    let mut spec = serde_json::Map::new();
    let mut waves = vec![];
    for (wave, (name, build, cluster)) in members.iter().enumerate() {
        waves.push(vec![*name]);
        spec.insert(
            name.to_string(),
            json!({"build": build, "cluster": cluster, "context": null,
                   "kubeconfig": kix_testkit::kubeconfig_path(), "operator": false, "wave": wave}),
        );
    }
    let file = dir.join(file);
    let text = json!({"format": 1, "fleet": "tenants", "maxParallel": 2, "pause": "0s",
                      "waves": waves, "members": spec});
    std::fs::write(&file, text.to_string()).expect("fleet file");
    common::add_to_store(&file)
}

fn kix(gcroots: &Path, args: &[&str]) -> common::Run {
    common::run(common::kix(&kix_testkit::kubeconfig_path(), gcroots).args(args))
}

/// `kix fleet deploy` of a fleet whose members are tenant builds: each
/// member acts as its build's account, as `kix deploy` of that build does.
/// A member whose build stays within its rights is applied as its account;
/// a fleet with a member whose build reaches past them is refused, naming
/// that account, before any member changes.
#[tokio::test]
async fn a_fleet_member_acts_as_the_account_its_build_names() {
    let (a, b) = two_tenants("tenant-fleet").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let gcroots = dir.path().join("gcroots");
    let good = tenancy::tree(&dir.path().join("good"), &a.cluster, &a.namespace, None);
    let deploy = |fleet: &str| {
        kix(
            &gcroots,
            &["fleet", "deploy", "tenants", "--path", fleet, "--yes"],
        )
    };

    let fleet = fleet_file(dir.path(), "good.json", &[("good", &good, &a.cluster)]);
    let mark = tenancy::audit_mark();
    let run = deploy(&fleet);
    assert_eq!(run.code, Some(0), "the tenant's member deploys: {run}");
    let writes = tenancy::writes_as(mark, &tenancy::user(&a.namespace));
    assert!(
        writes
            .iter()
            .any(|(w, code)| w == "patch configmaps/settings" && *code < 300),
        "the member's ConfigMap was written acting as its account: {writes:?}"
    );

    let bad = overreaching(dir.path(), &b, &a.namespace);
    let fleet = fleet_file(
        dir.path(),
        "both.json",
        &[("good", &good, &a.cluster), ("bad", &bad, &b.cluster)],
    );
    let mark = tenancy::audit_mark();
    let run = deploy(&fleet);
    assert_eq!(
        run.code,
        Some(1),
        "the overreaching member was deployed: {run}"
    );
    let text = run.to_string();
    assert!(
        text.contains(&format!(
            "User \"{}\" cannot patch resource \"clusterrolebindings\"",
            tenancy::user(&b.namespace)
        )) && text.contains("nothing was changed"),
        "the refusal names the tenant's account and what it may not write: {text}"
    );
    assert_nothing_written(&b, &a.namespace, mark);
}

/// `kix rollback` to a tenant's build acts as the account that build
/// names, whoever runs it: a record of an overreaching build (written as a
/// platform subject could have written it, marked Superseded) is rolled
/// back to by the admin, and the apiserver refuses it as the tenant.
#[tokio::test]
async fn a_rollback_acts_as_the_account_its_target_build_names() {
    let (a, b) = two_tenants("tenant-rollback").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let gcroots = dir.path().join("gcroots");
    let good = tenancy::tree(&dir.path().join("good"), &a.cluster, &a.namespace, None);
    let run = kix(&gcroots, &["deploy", &a.cluster, "--path", &good, "--yes"]);
    assert_eq!(run.code, Some(0), "the tenant's build deploys: {run}");
    let bad = overreaching(dir.path(), &a, &b.namespace);
    let target = superseded_record_of(&a, &bad).await;

    let mark = tenancy::audit_mark();
    let run = kix(
        &gcroots,
        &["rollback", &a.cluster, "--to", &target, "--yes"],
    );
    assert_eq!(
        run.code,
        Some(1),
        "the overreaching build was rolled back to: {run}"
    );
    let text = run.to_string();
    assert!(
        text.contains(&tenancy::user(&a.namespace)),
        "the refusal names the tenant's account: {text}"
    );
    assert_nothing_written(&a, &b.namespace, mark);
}

/// A record of Kix cluster `env` for `build`, Superseded (its spec is the
/// newest record's, another build): what `kix rollback --to` may pick.
async fn superseded_record_of(env: &kix_testkit::TestEnv, build: &str) -> String {
    use kube::api::{Api, Patch, PatchParams, PostParams};
    let records = common::records(&env.client, &env.cluster).await;
    let newest = records.last().expect("a record");
    let mut spec = newest.spec.clone();
    spec.source.path = build.to_string();
    let next = records
        .iter()
        .filter_map(|r| r.sequence())
        .max()
        .unwrap_or(0)
        + 1;
    let api: Api<kix_api::Activation> = Api::all(env.client.clone());
    api.create(
        &PostParams::default(),
        &kix_api::Activation::new_record(next, spec),
    )
    .await
    .expect("creating the record");
    let name = kix_api::Activation::name_for(&env.cluster, next);
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Superseded"}})),
    )
    .await
    .expect("marking the record Superseded");
    name
}

/// `kix gc` acts as the account the Kix cluster's records name: a cluster
/// once deployed with the admin's rights (a ConfigMap in another tenant's
/// namespace) and now by its tenant's account retires the admin's record,
/// and the deletion of that ConfigMap is the tenant's, refused.
#[tokio::test]
async fn gc_acts_as_the_account_the_clusters_records_name() {
    let (a, b) = two_tenants("tenant-gc").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let gcroots = dir.path().join("gcroots");
    let taken = tenancy::config_map_in(&b.namespace, "taken");
    let admins = tenancy::tree_of_caller(
        &dir.path().join("admins"),
        &a.cluster,
        &a.namespace,
        Some(&taken),
    );
    let run = kix(
        &gcroots,
        &["deploy", &a.cluster, "--path", &admins, "--yes"],
    );
    assert_eq!(run.code, Some(0), "the admin's build deploys: {run}");
    assert!(exists(&a, "configmap", "taken", Some(&b.namespace)));
    let good = tenancy::tree(&dir.path().join("good"), &a.cluster, &a.namespace, None);
    let run = kix(
        &gcroots,
        &[
            "deploy",
            &a.cluster,
            "--path",
            &good,
            "--prune=false",
            "--yes",
        ],
    );
    assert_eq!(run.code, Some(0), "the tenant's build deploys: {run}");

    let mark = tenancy::audit_mark();
    let run = kix(&gcroots, &["gc", &a.cluster, "--keep", "0", "--yes"]);
    assert_ne!(
        run.code,
        Some(0),
        "gc deleted another tenant's ConfigMap: {run}"
    );
    let text = run.to_string();
    assert!(
        text.contains("taken") && text.contains(&tenancy::user(&a.namespace)),
        "gc names the object and the account that may not delete it: {text}"
    );
    assert!(
        exists(&a, "configmap", "taken", Some(&b.namespace)),
        "ConfigMap taken of {} was deleted: {text}",
        b.namespace
    );
    let deleted: Vec<_> = tenancy::writes_as(mark, &tenancy::user(&a.namespace))
        .into_iter()
        .filter(|(w, code)| w == "delete configmaps/taken" && *code < 300)
        .collect();
    assert!(deleted.is_empty(), "{deleted:?}");
}

/// `kix declare` (a host's generation declaring its build to the operator)
/// plans the tenant's build acting as its account: an overreaching build is
/// refused before any object is written; what it writes as the account is
/// the refused record, nothing else.
#[tokio::test]
async fn a_declare_acts_as_the_account_its_build_names() {
    let (a, b) = two_tenants("tenant-declare").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let gcroots = dir.path().join("gcroots");
    let bad = overreaching(dir.path(), &a, &b.namespace);
    let mark = tenancy::audit_mark();
    let run = kix(
        &gcroots,
        &["declare", &a.cluster, "--path", &bad, "--wait", "30s"],
    );
    assert_eq!(
        run.code,
        Some(1),
        "the overreaching build was declared: {run}"
    );
    let text = run.to_string();
    assert!(
        text.contains(&format!(
            "User \"{}\" cannot patch resource \"clusterrolebindings\"",
            tenancy::user(&a.namespace)
        )),
        "the refusal names the tenant's account and what it may not write: {text}"
    );
    assert!(!exists(&a, "clusterrolebinding", &binding_of(&a), None));
    assert!(!exists(&a, "configmap", "taken", Some(&b.namespace)));
    let writes: Vec<_> = tenancy::writes_as(mark, &tenancy::user(&a.namespace))
        .into_iter()
        .filter(|(w, _)| !w.contains(" activations/"))
        .collect();
    assert!(
        writes.is_empty(),
        "written acting as the tenant: {writes:?}"
    );
}

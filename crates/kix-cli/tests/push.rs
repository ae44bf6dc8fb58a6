//! Where a build is published (#44, point 1): `kix deploy --operator` of a
//! build whose `settings.cache` is set pushes the build's closure to that
//! cache, signed with the user's key, before it writes the record, and the
//! record says where its build comes from (`spec.source.cache`,
//! `signedBy`). Real Nix (a build made with the Nix library and the
//! host-tools builder), a real binary cache served over loopback HTTP
//! (kix_testkit::cache_server), the real control plane and operator.

mod common;

use std::path::Path;
use std::process::Command;

use common::nix_cache::{build_path, cluster_file, key_pair, narinfo_name};
use common::{Operator, Run, records, run};
use kix_testkit::TestEnv;
use kix_testkit::cache_server::CacheServer;

fn narinfos(dir: &Path) -> Vec<String> {
    let mut found: Vec<String> = std::fs::read_dir(dir)
        .expect("cache dir")
        .filter_map(|e| {
            let path = e.expect("entry").path();
            (path.extension()? == "narinfo").then(|| std::fs::read_to_string(&path).expect("read"))
        })
        .collect();
    found.sort();
    found
}

/// `kix <verb> CLUSTER --file F ...` as the admin, with `key` (if any) in
/// KIX_SIGN_KEY_FILE.
fn kix(scratch: &Path, key: Option<&Path>, args: &[&str]) -> Run {
    let mut cmd = common::kix(&kix_testkit::kubeconfig_path(), &scratch.join("gcroots"));
    cmd.env_remove("KIX_SIGN_KEY_FILE");
    if let Some(key) = key {
        cmd.env("KIX_SIGN_KEY_FILE", key);
    }
    run(cmd.args(args))
}

/// `nix store verify` of the closure of `path` in the cache at `url`,
/// trusting `public_key` only: whether Nix accepts its signatures.
fn verified(url: &str, path: &str, public_key: &str) -> bool {
    Command::new("nix")
        .args(["--extra-experimental-features", "nix-command"])
        .args(["--option", "narinfo-cache-negative-ttl", "0"])
        .args(["store", "verify", "--recursive", "--no-contents"])
        .args(["--store", url, "--trusted-public-keys", public_key, path])
        .status()
        .expect("nix runs")
        .success()
}

fn start_operator(env: &TestEnv, dir: &Path) -> Operator {
    Operator::start(
        &kix_testkit::kubeconfig_path(),
        &[&env.cluster],
        &env.namespace,
        &format!("{}-op", env.cluster),
        dir.join("operator.log"),
        None,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_operator_publishes_the_signed_closure_and_the_record_names_the_cache() {
    let env = TestEnv::new("push").await.expect("control plane");
    common::tenancy::install_crds(&env);
    let scratch = tempfile::tempdir().expect("tempdir");
    let dir = scratch.path();
    let (secret, public) = key_pair(dir, "kix-push-1");
    let (_, other_public) = key_pair(dir, "kix-other-1");
    let cache_dir = dir.join("cache");
    let server = CacheServer::start(&cache_dir).expect("cache server");
    let file_url = format!("file://{}", cache_dir.display());
    let file = cluster_file(dir, &env, "published", &file_url, &public);
    let file_arg = file.to_str().expect("utf-8");
    let _operator = start_operator(&env, dir);

    // A cache and no key: refused before anything is changed.
    let out = kix(
        dir,
        None,
        &[
            "deploy",
            &env.cluster,
            "-f",
            file_arg,
            "--operator",
            "--yes",
        ],
    );
    assert_eq!(out.code, Some(1), "{out}");
    assert!(
        out.stderr.contains("--sign-key FILE") && out.stderr.contains(&file_url),
        "{out}"
    );
    assert!(
        records(&env.client, &env.cluster).await.is_empty(),
        "no record"
    );

    let out = kix(
        dir,
        Some(&secret),
        &[
            "deploy",
            &env.cluster,
            "-f",
            file_arg,
            "--operator",
            "--yes",
        ],
    );
    assert_eq!(out.code, Some(0), "{out}");
    assert!(out.stderr.contains("3 path(s) sent"), "{out}");
    assert!(out.stderr.contains("[3/3] copying"), "progress: {out}");
    let recs = records(&env.client, &env.cluster).await;
    let record = recs.last().expect("a record");
    assert_eq!(record.spec.source.cache.as_deref(), Some(file_url.as_str()));
    assert_eq!(record.spec.source.signed_by.as_deref(), Some("kix-push-1"));

    // The cache, read over HTTP, holds the closure signed by that key.
    let path = &record.spec.source.path;
    let infos = narinfos(&cache_dir);
    assert_eq!(infos.len(), 3, "{infos:?}");
    assert!(
        infos.iter().all(|i| i.contains("\nSig: kix-push-1:")),
        "{infos:?}"
    );
    assert!(
        verified(&server.url, path, &public),
        "signed by the trusted key"
    );
    assert!(
        !verified(&server.url, path, &other_public),
        "not by another"
    );

    // Pushed again: nothing is sent.
    let out = kix(dir, Some(&secret), &["push", &env.cluster, "-f", file_arg]);
    assert_eq!(out.code, Some(0), "{out}");
    assert!(
        out.stdout
            .contains("0 path(s) sent (0 bytes), signed by kix-push-1; 3 already there"),
        "{out}"
    );
    assert_eq!(narinfos(&cache_dir), infos);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_push_writes_no_record_and_the_next_run_completes_it() {
    let env = TestEnv::new("push-cut").await.expect("control plane");
    common::tenancy::install_crds(&env);
    let scratch = tempfile::tempdir().expect("tempdir");
    let dir = scratch.path();
    let (secret, public) = key_pair(dir, "kix-push-2");
    let cache_dir = dir.join("cache");
    let server = CacheServer::start(&cache_dir).expect("cache server");
    let file = cluster_file(dir, &env, "published", &server.url, &public);
    let file_arg = file.to_str().expect("utf-8");
    let top = build_path(&file, &env.cluster);
    let _operator = start_operator(&env, dir);

    // The cache refuses the build's own narinfo: Nix sends its two
    // dependencies first, then fails.
    server.refuse(&narinfo_name(&top));
    let deploy = [
        "deploy",
        &env.cluster,
        "-f",
        file_arg,
        "--operator",
        "--yes",
    ];
    let out = kix(dir, Some(&secret), &deploy);
    assert_eq!(out.code, Some(1), "{out}");
    assert!(
        out.stderr
            .contains(&format!("pushing {top} to {}", server.url))
            && out.stderr.contains("nothing was recorded"),
        "{out}"
    );
    assert!(
        records(&env.client, &env.cluster).await.is_empty(),
        "no record"
    );
    assert_eq!(narinfos(&cache_dir).len(), 2, "the dependencies went");

    server.accept_all();
    let out = kix(dir, Some(&secret), &deploy);
    assert_eq!(out.code, Some(0), "{out}");
    assert!(
        out.stderr.contains("1 path(s) sent") && out.stderr.contains("2 already there"),
        "{out}"
    );
    let recs = records(&env.client, &env.cluster).await;
    assert_eq!(recs.len(), 1, "one record");
    assert_eq!(recs[0].spec.source.path, top);
    assert_eq!(
        recs[0].spec.source.cache.as_deref(),
        Some(server.url.as_str())
    );
    assert_eq!(recs[0].spec.source.signed_by.as_deref(), Some("kix-push-2"));
    assert!(verified(&server.url, &top, &public));

    // kix push --path P --to URL: nothing left to send.
    let uploads = server.uploads().len();
    let out = kix(
        dir,
        Some(&secret),
        &["push", "--path", &top, "--to", &server.url],
    );
    assert_eq!(out.code, Some(0), "{out}");
    assert!(out.stdout.contains("0 path(s) sent"), "{out}");
    assert_eq!(server.uploads().len(), uploads, "nothing uploaded");
}

/// `kix rollback --operator` to a build the cache no longer has: without a
/// key it is refused before any record (naming the cache and the flag);
/// with one, the build is published again and the record names the cache
/// and the signer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_through_the_operator_publishes_a_target_the_cache_lost() {
    let env = TestEnv::new("push-back").await.expect("control plane");
    common::tenancy::install_crds(&env);
    let scratch = tempfile::tempdir().expect("tempdir");
    let dir = scratch.path();
    let (secret, public) = key_pair(dir, "kix-push-3");
    let cache_dir = dir.join("cache");
    let server = CacheServer::start(&cache_dir).expect("cache server");
    let _operator = start_operator(&env, dir);
    let mut tops = Vec::new();
    for version in ["v1", "v2"] {
        let version_dir = dir.join(version);
        std::fs::create_dir_all(&version_dir).expect("mkdir");
        let file = cluster_file(&version_dir, &env, "published", &server.url, &public);
        let file_arg = file.to_str().expect("utf-8");
        tops.push(build_path(&file, &env.cluster));
        let deploy = [
            "deploy",
            &env.cluster,
            "-f",
            file_arg,
            "--operator",
            "--yes",
        ];
        let out = kix(dir, Some(&secret), &deploy);
        assert_eq!(out.code, Some(0), "{version}: {out}");
    }
    // The cache loses the first build's own path.
    std::fs::remove_file(cache_dir.join(narinfo_name(&tops[0]))).expect("remove narinfo");

    let rollback = ["rollback", &env.cluster, "--operator", "--yes"];
    let out = kix(dir, None, &rollback);
    assert_eq!(out.code, Some(1), "{out}");
    assert!(
        out.stderr
            .contains(&format!("the build {} is not in {}", tops[0], server.url))
            && out.stderr.contains("--sign-key FILE")
            && out.stderr.contains("nothing was changed"),
        "{out}"
    );
    assert_eq!(
        records(&env.client, &env.cluster).await.len(),
        2,
        "no record"
    );

    let out = kix(dir, Some(&secret), &rollback);
    assert_eq!(out.code, Some(0), "{out}");
    assert!(out.stderr.contains("1 path(s) sent"), "{out}");
    let recs = records(&env.client, &env.cluster).await;
    let record = recs.last().expect("the rollback's record");
    assert_eq!(record.spec.source.path, tops[0]);
    assert_eq!(
        record.spec.source.cache.as_deref(),
        Some(server.url.as_str())
    );
    assert_eq!(record.spec.source.signed_by.as_deref(), Some("kix-push-3"));
    assert!(verified(&server.url, &tops[0], &public));
}

/// `kix fleet deploy` of an operator member whose build names a cache:
/// refused before anything without a key; with one, the member's build is
/// pushed, signed, before its record, which names the cache and signer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_operator_member_publishes_its_build_before_its_record() {
    let env = TestEnv::new("push-fleet").await.expect("control plane");
    common::tenancy::install_crds(&env);
    let scratch = tempfile::tempdir().expect("tempdir");
    let dir = scratch.path();
    let (secret, public) = key_pair(dir, "kix-push-4");
    let cache_dir = dir.join("cache");
    let server = CacheServer::start(&cache_dir).expect("cache server");
    let _operator = start_operator(&env, dir);
    let tree = dir.join("tree");
    common::write_tree(
        &tree,
        &env.cluster,
        &[common::Pkg {
            name: "app".into(),
            depends_on: vec![],
            namespace: env.namespace.clone(),
            files: vec![(
                "cm.yaml".into(),
                b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: fleet-published}\n".to_vec(),
            )],
        }],
    );
    let kix_json = tree.join("kix.json");
    let mut head: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&kix_json).expect("read")).expect("json");
    head["settings"]["cache"] = serde_json::json!({"url": server.url, "publicKeys": [public]});
    std::fs::write(&kix_json, head.to_string()).expect("write");
    let build = common::add_to_store(&tree);
    let fleet = dir.join("fleet.json");
    let member = serde_json::json!({"build": build, "cluster": env.cluster, "context": null,
        "kubeconfig": kix_testkit::kubeconfig_path(), "operator": true, "wave": 0});
    std::fs::write(
        &fleet,
        serde_json::json!({"format": 1, "fleet": "prod", "maxParallel": 1, "pause": "0s",
                           "waves": [["one"]], "members": {"one": member}})
        .to_string(),
    )
    .expect("fleet file");
    let fleet = common::add_to_store(&fleet);
    let deploy = ["fleet", "deploy", "prod", "--path", &fleet, "--yes"];

    let out = kix(dir, None, &deploy);
    assert_eq!(out.code, Some(1), "{out}");
    assert!(
        out.stderr.contains("member one: Kix cluster")
            && out.stderr.contains("--sign-key FILE")
            && out.stderr.contains("nothing was changed"),
        "{out}"
    );
    assert!(
        records(&env.client, &env.cluster).await.is_empty(),
        "no record"
    );

    let out = kix(dir, Some(&secret), &deploy);
    assert_eq!(out.code, Some(0), "{out}");
    let recs = records(&env.client, &env.cluster).await;
    let record = recs.last().expect("the member's record");
    assert_eq!(record.spec.source.path, build);
    assert_eq!(
        record.spec.source.cache.as_deref(),
        Some(server.url.as_str())
    );
    assert_eq!(record.spec.source.signed_by.as_deref(), Some("kix-push-4"));
    assert!(
        narinfos(&cache_dir)
            .iter()
            .any(|i| i.contains(&build) && i.contains("\nSig: kix-push-4:")),
        "the build is in the cache, signed"
    );
}

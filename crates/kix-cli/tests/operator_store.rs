//! The operator fetches only what it trusts, into a store of its own, and
//! keeps that store bounded (#44, points 2 to 4). Real Nix (builds made
//! with the Nix library, input-addressed), binary caches served over
//! loopback HTTP (kix_testkit::cache_server), the real control plane, the
//! operator as a process with `--store local?root=DIR`, where no build was
//! before.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::nix_cache::{build_path, cluster_file, key_pair, nix};
use common::{Operator, Run, run};
use k8s_openapi::api::core::v1::ConfigMap;
use kix_api::Phase;
use kix_testkit::TestEnv;
use kix_testkit::cache_server::CacheServer;
use kube::api::Api;

/// `kix <args>` as the admin, signing with `key`.
fn kix(scratch: &Path, key: &Path, args: &[&str]) -> Run {
    let mut cmd = common::kix(&kix_testkit::kubeconfig_path(), &scratch.join("gcroots"));
    cmd.env("KIX_SIGN_KEY_FILE", key);
    run(cmd.args(args))
}

/// `nix copy` of the closure of `path` to `to`.
fn copy(path: &str, to: &str, extra: &[&str]) {
    let mut args = vec!["copy", "--to", to];
    args.extend_from_slice(extra);
    args.push(path);
    nix(&args);
}

/// Changes one byte of `path`'s NAR in the uncompressed cache `dir`, in
/// the middle of a file's contents (the ConfigMap's name in kix.json or
/// its resource file), so the NAR no longer has the hash that was signed.
fn tamper(dir: &Path, path: &str, needle: &str) {
    let hash = &path.trim_start_matches("/nix/store/")[..32];
    let narinfo = std::fs::read_to_string(dir.join(format!("{hash}.narinfo"))).expect("narinfo");
    let url = narinfo
        .lines()
        .find_map(|l| l.strip_prefix("URL: "))
        .expect("URL line");
    let nar = dir.join(url);
    let mut bytes = std::fs::read(&nar).expect("nar");
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle.as_bytes())
        .unwrap_or_else(|| panic!("{needle} in {}", nar.display()));
    bytes[at] ^= 0x20;
    std::fs::write(&nar, bytes).expect("write the nar");
}

async fn config_map_exists(env: &TestEnv, name: &str) -> bool {
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    api.get_opt(name).await.expect("get").is_some()
}

/// Whether `path` is valid (present and registered) in the operator's
/// store at `root`; a failed import may leave invalid files behind.
fn in_store(root: &Path, path: &str) -> bool {
    let store = format!("local?root={}", root.display());
    let out = run(Command::new("nix-store").args(["--store", &store, "--check-validity", path]));
    out.code == Some(0)
}

/// What `operator` wrote since `mark` (the audit log; its requests carry
/// its identity, host and pid, in their user agent), other than records'
/// status, Events and Leases: `verb resource/name`.
fn object_writes(operator: &Operator, mark: u64) -> Vec<String> {
    use std::io::{BufRead, BufReader, Seek, SeekFrom};
    let agent_end = format!("-{}", operator.child.id());
    let log = common::audit_log(&kix_testkit::control_plane_dir());
    let mut file = std::fs::File::open(log).expect("audit log");
    file.seek(SeekFrom::Start(mark)).expect("seek");
    let mut out = Vec::new();
    for line in BufReader::new(file).lines() {
        let Ok(line) = line else { break };
        let Ok(event) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
        let (verb, resource) = (text(&event["verb"]), text(&event["objectRef"]["resource"]));
        let ours = text(&event["userAgent"]).starts_with("kix-operator/")
            && text(&event["userAgent"]).ends_with(&agent_end);
        let write = matches!(verb.as_str(), "create" | "update" | "patch" | "delete");
        let bookkeeping = matches!(resource.as_str(), "activations" | "events" | "leases");
        if event["stage"] == "ResponseComplete" && ours && write && !bookkeeping {
            out.push(format!(
                "{verb} {resource}/{}",
                text(&event["objectRef"]["name"])
            ));
        }
    }
    out
}

/// A record refused by the operator: Failed, its message naming the
/// path, each of `needles`; nothing of it written (its ConfigMap `cm`
/// does not exist, the audit log shows no write but the record's).
async fn assert_refused(
    env: &TestEnv,
    operator: &Operator,
    path: &str,
    cm: &str,
    needles: &[&str],
) -> String {
    let mark = common::audit_mark(&kix_testkit::control_plane_dir());
    let name = common::write_record(
        &env.client,
        &env.cluster,
        common::operator_spec(&env.cluster, path),
    )
    .await;
    let record = common::settled(&env.client, &name).await;
    let message = record
        .status
        .as_ref()
        .and_then(|s| s.message.clone())
        .unwrap_or_default();
    assert_eq!(record.phase(), Some(Phase::Failed), "{cm}: {message}");
    assert!(message.contains(path), "{cm}: names the path: {message}");
    for needle in needles {
        assert!(message.contains(needle), "{cm}: {needle:?} in {message}");
    }
    assert!(!config_map_exists(env, cm).await, "{cm}: nothing applied");
    assert_eq!(
        object_writes(operator, mark),
        Vec::<String>::new(),
        "{cm}: zero writes"
    );
    message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_with_its_own_store_applies_only_builds_a_trusted_key_signed() {
    let env = TestEnv::new("opstore").await.expect("control plane");
    common::tenancy::install_crds(&env);
    let scratch = tempfile::tempdir().expect("tempdir");
    let dir = scratch.path();
    let (secret, public) = key_pair(dir, "kix-store-1");
    let (other_secret, _) = key_pair(dir, "kix-store-other");
    let caches = dir.join("caches");
    let server = CacheServer::start(&caches).expect("cache server");
    let cache = |name: &str| (caches.join(name), format!("{}/{name}", server.url));
    let (good_dir, _) = cache("good");
    let store = dir.join("store");
    let store_url = format!("local?root={}", store.display());

    let mut flags = vec!["--store".to_owned(), store_url.clone()];
    for name in ["good", "unsigned", "other", "tampered"] {
        flags.extend(["--substituter".to_owned(), cache(name).1]);
    }
    flags.extend(["--trusted-public-key".to_owned(), public.clone()]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let xdg = dir.join("xdg");
    let xdg = xdg.to_str().expect("utf-8");
    let operator = Operator::start_with_env(
        &kix_testkit::kubeconfig_path(),
        &[&env.cluster],
        &env.namespace,
        &format!("{}-op", env.cluster),
        dir.join("operator.log"),
        None,
        &flags,
        &[("XDG_CACHE_HOME", xdg)],
    );

    // Built here, pushed by kix deploy --operator, fetched by the operator
    // into its own store, where it was not: Active.
    let good_file_url = format!("file://{}", good_dir.display());
    let first = cluster_file(dir, &env, "first", &good_file_url, &public);
    let first_path = build_path(&first, &env.cluster);
    assert!(
        !in_store(&store, &first_path),
        "not in the operator's store yet"
    );
    let file_arg = first.to_str().expect("utf-8");
    let deploy = [
        "deploy",
        &env.cluster,
        "-f",
        file_arg,
        "--operator",
        "--yes",
    ];
    let mark = common::audit_mark(&kix_testkit::control_plane_dir());
    let out = kix(dir, &secret, &deploy);
    assert_eq!(out.code, Some(0), "{out}");
    assert!(config_map_exists(&env, "first").await, "applied");
    let writes = object_writes(&operator, mark);
    assert!(
        writes.iter().any(|w| w.ends_with("configmaps/first")),
        "the audit log shows the operator's writes: {writes:?}"
    );
    assert!(in_store(&store, &first_path), "fetched into its store");
    assert!(
        operator
            .log()
            .contains("a build is applied only when its closure is signed by one of kix-store-1:"),
        "the startup log says what is trusted"
    );

    // Unsigned in a cache the operator asks: Failed, nothing applied.
    let unsigned = build_path(
        &cluster_file(dir, &env, "unsigned", &good_file_url, &public),
        &env.cluster,
    );
    copy(
        &unsigned,
        &format!("file://{}", cache("unsigned").0.display()),
        &[],
    );
    assert_refused(
        &env,
        &operator,
        &unsigned,
        "unsigned",
        &["kix-store-1:", "not signed"],
    )
    .await;
    assert!(!in_store(&store, &unsigned));

    // Signed by a key the operator does not trust: Failed.
    let other = build_path(
        &cluster_file(dir, &env, "other", &good_file_url, &public),
        &env.cluster,
    );
    let signed_other = format!(
        "file://{}?secret-key={}",
        cache("other").0.display(),
        other_secret.display()
    );
    copy(&other, &signed_other, &[]);
    assert_refused(
        &env,
        &operator,
        &other,
        "other",
        &["kix-store-1:", "not signed"],
    )
    .await;
    assert!(!in_store(&store, &other));

    // Signed by the trusted key, its NAR changed in the cache: Failed.
    let tampered = build_path(
        &cluster_file(dir, &env, "tampered", &good_file_url, &public),
        &env.cluster,
    );
    let tampered_dir = cache("tampered").0;
    let signed = format!(
        "file://{}?secret-key={}&compression=none",
        tampered_dir.display(),
        secret.display()
    );
    copy(&tampered, &signed, &[]);
    tamper(&tampered_dir, &tampered, "tampered");
    assert_refused(
        &env,
        &operator,
        &tampered,
        "tampered",
        &["kix-store-1:", "hash mismatch"],
    )
    .await;
    assert!(!in_store(&store, &tampered));

    // Already in the operator's store, unsigned, in no cache: Failed.
    let present = build_path(
        &cluster_file(dir, &env, "present", &good_file_url, &public),
        &env.cluster,
    );
    copy(&present, &store_url, &["--no-check-sigs"]);
    assert!(in_store(&store, &present));
    assert_refused(
        &env,
        &operator,
        &present,
        "present",
        &["kix-store-1:", "is untrusted"],
    )
    .await;

    // A content-addressed build (nix-store --add) needs no signature in
    // Nix: refused when signatures are required.
    let tree = dir.join("ca-tree");
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ca\ndata: {a: b}\n";
    common::write_tree(
        &tree,
        &env.cluster,
        &[common::Pkg {
            name: "web".into(),
            depends_on: vec![],
            namespace: env.namespace.clone(),
            files: vec![("cm.yaml".into(), cm.as_bytes().to_vec())],
        }],
    );
    let ca = common::add_to_store(&tree);
    copy(&ca, &store_url, &[]);
    assert_refused(
        &env,
        &operator,
        &ca,
        "ca",
        &["content-addressed", "kix-store-1:"],
    )
    .await;

    // The first build still Active; a second replaces it; once retention
    // retires the first, its build leaves the operator's store, the
    // second's closure stays, and the bytes freed are counted.
    let second = cluster_file(dir, &env, "second", &good_file_url, &public);
    let second_path = build_path(&second, &env.cluster);
    let file_arg = second.to_str().expect("utf-8");
    let deploy = [
        "deploy",
        &env.cluster,
        "-f",
        file_arg,
        "--operator",
        "--yes",
    ];
    let out = kix(dir, &secret, &deploy);
    assert_eq!(out.code, Some(0), "{out}");
    assert!(in_store(&store, &first_path) && in_store(&store, &second_path));
    let gc = ["gc", &env.cluster, "--operator", "--keep", "0", "--yes"];
    let out = kix(dir, &secret, &gc);
    assert_eq!(out.code, Some(0), "{out}");
    common::poll(
        "the first build to leave the operator's store",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || async { (!in_store(&store, &first_path)).then_some(()) },
    )
    .await;
    assert!(
        !store.join(first_path.trim_start_matches('/')).exists(),
        "its files are gone"
    );
    assert!(in_store(&store, &second_path), "the live build stays");
    assert!(config_map_exists(&env, "second").await);
    let text = operator.metrics();
    let freed = text
        .lines()
        .find_map(|l| l.strip_prefix("kix_operator_store_freed_bytes_total "))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("freed bytes metric in {text}"));
    assert!(freed > 0, "{text}");
    // The host's store keeps its copy: the operator collected only its own.
    let out = run(Command::new("nix-store").args(["--check-validity", &first_path]));
    assert_eq!(out.code, Some(0), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_trusted_key_the_operator_takes_its_store_as_it_is_and_says_so() {
    let env = TestEnv::new("opstore-open").await.expect("control plane");
    common::tenancy::install_crds(&env);
    let scratch = tempfile::tempdir().expect("tempdir");
    let dir = scratch.path();
    let store = dir.join("store");
    let store_url = format!("local?root={}", store.display());
    let start = |flags: &[&str], log: &str| {
        Operator::start_with(
            &kix_testkit::kubeconfig_path(),
            &[&env.cluster],
            &env.namespace,
            &format!("{}-op", env.cluster),
            dir.join(log),
            None,
            flags,
        )
    };

    // A cache and no key to check it with: refused at start.
    let mut refused = start(
        &[
            "--store",
            &store_url,
            "--substituter",
            "http://127.0.0.1:1/c",
        ],
        "refused.log",
    );
    let status = refused.child.wait().expect("wait");
    assert!(!status.success());
    assert!(
        refused
            .log()
            .contains("--substituter needs --trusted-public-key"),
        "{}",
        refused.log()
    );

    // No key: an unsigned (content-addressed) build in its store is
    // applied as it is, read under the store's root; the log says so.
    let operator = start(&["--store", &store_url], "operator.log");
    let tree = dir.join("tree");
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: open\ndata: {a: b}\n";
    common::write_tree(
        &tree,
        &env.cluster,
        &[common::Pkg {
            name: "web".into(),
            depends_on: vec![],
            namespace: env.namespace.clone(),
            files: vec![("cm.yaml".into(), cm.as_bytes().to_vec())],
        }],
    );
    let path = common::add_to_store(&tree);
    copy(&path, &store_url, &[]);
    let name = common::write_record(
        &env.client,
        &env.cluster,
        common::operator_spec(&env.cluster, &path),
    )
    .await;
    let record = common::settled(&env.client, &name).await;
    assert_eq!(record.phase(), Some(Phase::Active), "{:?}", record.status);
    assert!(config_map_exists(&env, "open").await);
    assert!(
        operator.log().contains(
            "no trusted key is configured (--trusted-public-key): builds are taken from the store as they are"
        ),
        "{}",
        operator.log()
    );
    assert!(
        store
            .join("nix/var/nix/gcroots/kix")
            .join(&env.cluster)
            .join(&name)
            .is_symlink(),
        "the record's GC root is inside its store"
    );
}

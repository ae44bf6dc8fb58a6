//! Keys bound to tenants (#43 point 3): one `kix-operator` process for two
//! Kix clusters, each with its own age key bound to it (`--age-key-file
//! CLUSTER=FILE`, `--age-key-dir`), against the real control plane, files
//! encrypted by the real `sops`. Store paths are readable by everyone, so
//! team-a can put team-b's ciphertext in its own build, copied or as a
//! symlink into team-b's store path: the operator decrypts a record's build
//! with the keys bound to the record's cluster only, so team-a's record
//! fails naming the file and its recipients, nothing is written in team-a's
//! namespace, and team-b's value is in no log, Event or record. Each team's
//! own build still deploys with its own key.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::sops::{Key, keygen, sops_bin_dir};
use common::{Operator, Pkg, Run, records, run, write_tree};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Secret};
use kix_testkit::TestEnv;
use kube::api::{Api, ListParams};

const FILE: &str = "packages/app/secrets/000-db.sops.yaml";

/// `sops encrypt` of a Secret `db` (no namespace: it takes the package's)
/// with `password`, to `key`.
fn encrypted_secret(dir: &Path, password: &str, key: &Key) -> Vec<u8> {
    let plain = dir.join("db.yaml");
    std::fs::write(
        &plain,
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\ntype: Opaque\n\
             stringData:\n  password: {password}\n"
        ),
    )
    .expect("plain file");
    let out = Command::new(sops_bin_dir().join("sops"))
        .current_dir(dir)
        .env_clear()
        .env("HOME", dir)
        .args(["encrypt", "--encrypted-regex", "^(data|stringData)$"])
        .args(["--age", &key.recipient])
        .arg(&plain)
        .output()
        .expect("sops runs");
    std::fs::remove_file(&plain).expect("remove the plain file");
    assert!(out.status.success(), "sops encrypt: {out:?}");
    out.stdout
}

/// A tree of `env`'s cluster with package `app` in `env`'s namespace: a
/// ConfigMap, and at [`FILE`] `secret` (a file's bytes, or a symlink).
fn tree(root: &Path, env: &TestEnv, secret: Result<&[u8], &Path>) -> String {
    write_tree(
        root,
        &env.cluster,
        &[Pkg {
            name: "app".into(),
            depends_on: vec![],
            namespace: env.namespace.clone(),
            files: vec![(
                "cm.yaml".into(),
                b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {a: b}\n"
                    .to_vec(),
            )],
        }],
    );
    std::fs::create_dir_all(root.join("packages/app/secrets")).expect("mkdir");
    match secret {
        Ok(bytes) => std::fs::write(root.join(FILE), bytes).expect("encrypted file"),
        Err(target) => std::os::unix::fs::symlink(target, root.join(FILE)).expect("symlink"),
    }
    common::add_to_store(root)
}

/// `kix deploy --operator` of store path `path` for `env`'s cluster, as the
/// admin. The CLI is given both keys: it is the operator that must refuse
/// (a tenant could as well write the record itself).
fn deploy(scratch: &Path, env: &TestEnv, path: &str, keys: &[&Key]) -> Run {
    let mut cmd = common::kix(&kix_testkit::kubeconfig_path(), &scratch.join("gcroots"));
    cmd.env_remove("SOPS_AGE_KEY")
        .env_remove("SOPS_AGE_KEY_FILE")
        .env("XDG_CONFIG_HOME", scratch.join("config"))
        .args(["deploy", "--operator", "--yes"]);
    for key in keys {
        cmd.arg("--age-identity").arg(&key.file);
    }
    run(cmd.args(["--path", path, &env.cluster]))
}

async fn secret_in(env: &TestEnv) -> Option<Secret> {
    Api::<Secret>::namespaced(env.client.clone(), &env.namespace)
        .get_opt("db")
        .await
        .expect("reading Secret db")
}

fn password_of(secret: &Secret) -> String {
    let data = secret.data.as_ref().expect("data");
    String::from_utf8(data["password"].0.clone()).expect("UTF-8")
}

/// Polls until `env`'s newest record is `phase`; its JSON.
async fn last_record_is(env: &TestEnv, phase: kix_api::Phase) -> String {
    common::poll(
        &format!("the newest record of {} to be {phase:?}", env.cluster),
        Duration::from_secs(90),
        Duration::from_millis(300),
        || async {
            let recs = records(&env.client, &env.cluster).await;
            let last = recs.last()?;
            (last.phase() == Some(phase)).then(|| serde_json::to_string(last).ok())?
        },
    )
    .await
}

/// team-a's record with team-b's file fails naming the file and team-b's
/// recipient, with no Secret in team-a's namespace.
async fn assert_refused(team_a: &TestEnv, out: &Run, b_key: &Key, how: &str) {
    assert_eq!(
        out.code,
        Some(1),
        "{how}: the operator fails the record: {out}"
    );
    let failed = last_record_is(team_a, kix_api::Phase::Failed).await;
    assert!(failed.contains(FILE), "{how}: {failed}");
    assert!(
        failed.contains("among the file's recipients") && failed.contains(&b_key.recipient),
        "{how}: {failed}"
    );
    assert!(
        secret_in(team_a).await.is_none(),
        "{how}: a Secret was written in team-a's namespace"
    );
    // Refused before any change: not even the build's ConfigMap.
    let config_maps = Api::<ConfigMap>::namespaced(team_a.client.clone(), &team_a.namespace);
    let settings = config_maps.get_opt("settings").await.expect("reading");
    assert!(settings.is_none(), "{how}: team-a's build was applied");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_never_decrypts_with_another_tenants_key() {
    let team_a = TestEnv::new("keys-a").await.expect("control plane");
    let team_b = TestEnv::new("keys-b").await.expect("control plane");
    // kix deploy --operator needs kix's CRDs: installed as a platform does
    // (on a fresh control plane no other test has).
    common::tenancy::install_crds(&team_a);
    let scratch = tempfile::tempdir().expect("tempdir");
    let dir = scratch.path();
    let (a_key, b_key) = (keygen(dir, "team-a.txt"), keygen(dir, "team-b.txt"));
    let unique = kix_testkit::unique_name("p");
    let (a_password, b_password) = (format!("a-pw-{unique}"), format!("b-pw-{unique}"));
    // team-a's key by --age-key-file, team-b's in an --age-key-dir laid out
    // as a mounted Secret (`..data` is not a key).
    let bound_a = format!("{}={}", team_a.cluster, a_key.file.display());
    let key_dir = dir.join("keys");
    std::fs::create_dir_all(key_dir.join("..data")).expect("mkdir");
    let b_in_dir = key_dir.join(format!("{}.txt", team_b.cluster));
    std::fs::copy(&b_key.file, b_in_dir).expect("copy the key");
    let key_dir = key_dir.to_str().expect("UTF-8");
    let operator = Operator::start_with(
        &kix_testkit::kubeconfig_path(),
        &[&team_a.cluster, &team_b.cluster],
        &team_a.namespace,
        &format!("{}-op", team_a.cluster),
        dir.join("operator.log"),
        None,
        &["--age-key-file", &bound_a, "--age-key-dir", key_dir],
    );

    // team-b's own build deploys with team-b's key.
    let b_file = encrypted_secret(dir, &b_password, &b_key);
    let b_path = tree(&dir.join("b"), &team_b, Ok(&b_file));
    let out = deploy(dir, &team_b, &b_path, &[&b_key]);
    assert_eq!(out.code, Some(0), "team-b deploys: {out}");
    last_record_is(&team_b, kix_api::Phase::Active).await;
    let secret = secret_in(&team_b).await.expect("team-b's Secret");
    assert_eq!(password_of(&secret), b_password);

    // team-b's ciphertext copied into team-a's build: refused.
    let copied = tree(&dir.join("a-copied"), &team_a, Ok(&b_file));
    let out = deploy(dir, &team_a, &copied, &[&a_key, &b_key]);
    assert_refused(&team_a, &out, &b_key, "copied").await;
    assert!(!out.to_string().contains(&b_password), "{out}");

    // A symlink into team-b's store path (the reader follows symlinks that
    // stay in the store): refused alike.
    let target = Path::new(&b_path).join(FILE);
    let linked = tree(&dir.join("a-linked"), &team_a, Err(&target));
    let link = std::fs::symlink_metadata(Path::new(&linked).join(FILE)).expect("the link");
    assert!(link.file_type().is_symlink(), "the store keeps the symlink");
    let out = deploy(dir, &team_a, &linked, &[&a_key, &b_key]);
    assert_refused(&team_a, &out, &b_key, "symlinked").await;
    assert!(!out.to_string().contains(&b_password), "{out}");

    // team-a's own file with team-a's key still deploys.
    let a_file = encrypted_secret(dir, &a_password, &a_key);
    let own = tree(&dir.join("a-own"), &team_a, Ok(&a_file));
    let out = deploy(dir, &team_a, &own, &[&a_key]);
    assert_eq!(out.code, Some(0), "team-a deploys its own: {out}");
    last_record_is(&team_a, kix_api::Phase::Active).await;
    let secret = secret_in(&team_a).await.expect("team-a's Secret");
    assert_eq!(password_of(&secret), a_password);

    // team-b's value is nowhere: the operator's log, team-a's records, Events.
    let log = operator.log();
    assert!(log.contains("bound to a Kix cluster"), "{log}");
    assert!(!log.contains(&b_password), "the operator's log shows it");
    let recorded = serde_json::to_string(&records(&team_a.client, &team_a.cluster).await);
    assert!(!recorded.expect("json").contains(&b_password));
    let events = Api::<Event>::all(team_a.client.clone())
        .list(&ListParams::default())
        .await
        .expect("events");
    let events = serde_json::to_string(&events.items).expect("json");
    assert!(!events.contains(&b_password), "an Event shows it");
    drop(operator);
    for env in [&team_a, &team_b] {
        let _ = kix_testkit::delete_namespace(&env.client, &env.namespace).await;
    }
}

//! SOPS-encrypted Secrets deployed by the real `kix` against the real
//! control plane: files encrypted by the real `sops` to a key `age-keygen`
//! made for the test. A missing key, a wrong key and a tampered file are
//! refused naming the file, with zero writes in the audit log; a deploy
//! decrypts in memory; the plaintext is in none of the outputs (stdout,
//! stderr, JSON logs, `--output json`, the saved plan), the Activation
//! records or the Events; the same values re-encrypted to other recipients
//! are a no-op, a changed value one update, a rollback re-applies the older
//! values.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::sops::{Key, encode, keygen, sops_bin_dir};
use common::{Audited, Pkg, Run, audit_mark, records, requests_of, run, write_tree};
use k8s_openapi::api::core::v1::{Event, Secret};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kix_testkit::TestEnv;
use kube::api::{Api, DeleteParams, ListParams, PostParams};

/// `sops encrypt` of a Secret `db` with `password` and `token` to `to`.
fn encrypted_secret(dir: &Path, password: &str, token: &str, to: &[&Key]) -> Vec<u8> {
    let plain = dir.join("db.yaml");
    let token = encode(token);
    std::fs::write(
        &plain,
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\ntype: Opaque\n\
             stringData:\n  password: {password}\ndata:\n  token: {token}\n"
        ),
    )
    .expect("plain file");
    let recipients: Vec<&str> = to.iter().map(|k| k.recipient.as_str()).collect();
    let out = Command::new(sops_bin_dir().join("sops"))
        .current_dir(dir)
        .env_clear()
        .env("HOME", dir)
        .args([
            "encrypt",
            "--encrypted-regex",
            "^(data|stringData)$",
            "--age",
        ])
        .arg(recipients.join(","))
        .arg(&plain)
        .output()
        .expect("sops runs");
    std::fs::remove_file(&plain).expect("remove the plain file");
    assert!(out.status.success(), "sops encrypt: {out:?}");
    out.stdout
}

/// A tree with package `app`: a ConfigMap and the encrypted file.
fn tree(root: &Path, env: &TestEnv, encrypted: &[u8]) -> PathBuf {
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
    let secrets = root.join("packages/app/secrets");
    std::fs::create_dir_all(&secrets).expect("mkdir");
    std::fs::write(secrets.join("000-db.sops.yaml"), encrypted).expect("encrypted file");
    root.to_path_buf()
}

/// A cluster-admin user of the shared control plane, told apart in the
/// audit log by its name.
struct Admin {
    user: String,
    kubeconfig: PathBuf,
}

impl Admin {
    async fn new(env: &TestEnv, dir: &Path) -> Admin {
        let user = kix_testkit::unique_name("kix-secrets");
        let kubeconfig =
            kix_testkit::kubeconfig_for_user(&user, dir).expect("a kubeconfig for the user");
        let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": user, "labels": {kix_testkit::TEST_LABEL: "secrets"}},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }))
        .expect("binding");
        Api::<ClusterRoleBinding>::all(env.client.clone())
            .create(&PostParams::default(), &binding)
            .await
            .expect("bind cluster-admin");
        Admin { user, kubeconfig }
    }

    async fn requests_since(&self, mark: u64) -> Vec<Audited> {
        tokio::time::sleep(Duration::from_secs(1)).await;
        requests_of(&kix_testkit::control_plane_dir(), mark, &self.user)
    }
}

/// `kix` as `admin`, with no sops key of the environment: only what a test
/// passes (`--age-identity`).
fn kix(admin: &Admin, scratch: &Path) -> Command {
    let mut cmd = common::kix(&admin.kubeconfig, &scratch.join("gcroots"));
    cmd.env_remove("SOPS_AGE_KEY")
        .env_remove("SOPS_AGE_KEY_FILE")
        .env("HOME", scratch)
        .env("XDG_CONFIG_HOME", scratch.join("config"));
    cmd
}

/// Every place a value could leak to, checked for each of `plain`.
fn assert_none_in(plain: &[String], what: &str, text: &str) {
    for value in plain {
        assert!(
            !text.contains(value.as_str()),
            "{what} shows a Secret value: {text}"
        );
    }
}

fn writes_to_secrets(requests: &[Audited]) -> usize {
    requests
        .iter()
        .filter(|r| r.is_write() && r.resource == "secrets")
        .count()
}

fn deploy(admin: &Admin, scratch: &Path, tree: &Path, key: Option<&Key>) -> Run {
    let mut cmd = kix(admin, scratch);
    cmd.args(["deploy", "--yes", "--log-format", "json", "-v", "--path"])
        .arg(tree);
    if let Some(key) = key {
        cmd.arg("--age-identity").arg(&key.file);
    }
    let cluster = std::fs::read_to_string(tree.join("kix.json")).expect("kix.json");
    let cluster: serde_json::Value = serde_json::from_str(&cluster).expect("json");
    cmd.arg(cluster["cluster"].as_str().expect("cluster"));
    run(&mut cmd)
}

async fn live_secret(env: &TestEnv) -> Secret {
    Api::<Secret>::namespaced(env.client.clone(), &env.namespace)
        .get("db")
        .await
        .expect("the Secret is deployed")
}

fn value_of(secret: &Secret, key: &str) -> String {
    let data = secret.data.as_ref().expect("data");
    String::from_utf8(data[key].0.clone()).expect("UTF-8")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encrypted_secrets_deploy_without_plaintext_anywhere() {
    let env = TestEnv::new("secrets").await.expect("control plane");
    let scratch = tempfile::tempdir().expect("tempdir");
    let dir = scratch.path();
    let admin = Admin::new(&env, dir).await;
    let cp_dir = kix_testkit::control_plane_dir();
    let key = keygen(dir, "deployer.key");
    let other = keygen(dir, "other.key");
    let unique = kix_testkit::unique_name("v");
    let (password, token) = (format!("pw-one-{unique}"), format!("tok-one-{unique}"));
    let plain = vec![
        password.clone(),
        token.clone(),
        encode(&password),
        encode(&token),
    ];

    let v1 = tree(
        &dir.join("v1"),
        &env,
        &encrypted_secret(dir, &password, &token, &[&key]),
    );

    // No key, a wrong key, a tampered file: refused naming the file, no write.
    let mark = audit_mark(&cp_dir);
    let out = deploy(&admin, dir, &v1, None);
    assert_eq!(out.code, Some(1), "{out}");
    assert!(
        out.stderr.contains("packages/app/secrets/000-db.sops.yaml"),
        "{out}"
    );
    assert!(out.stderr.contains("no age identity"), "{out}");
    let out = deploy(&admin, dir, &v1, Some(&other));
    assert_eq!(out.code, Some(1), "{out}");
    assert!(out.stderr.contains("among the file's recipients"), "{out}");
    assert!(out.stderr.contains(&key.recipient), "{out}");
    let tampered_text = std::fs::read_to_string(v1.join("packages/app/secrets/000-db.sops.yaml"))
        .expect("read")
        .replacen(
            "password: ENC[AES256_GCM,data:",
            "password: ENC[AES256_GCM,data:AB",
            1,
        );
    let tampered = tree(&dir.join("tampered"), &env, tampered_text.as_bytes());
    let out = deploy(&admin, dir, &tampered, Some(&key));
    assert_eq!(out.code, Some(1), "{out}");
    assert!(out.stderr.contains("stringData:password"), "{out}");
    assert_none_in(&plain, "a refusal", &out.to_string());
    let writes: Vec<_> = admin
        .requests_since(mark)
        .await
        .into_iter()
        .filter(|r| r.is_write())
        .collect();
    assert!(writes.is_empty(), "refused deploys wrote: {writes:?}");

    // The plan, as text, JSON and a saved plan: keys, never values.
    let saved = dir.join("plan.json");
    let out = run(kix(&admin, dir)
        .args(["plan", "--output", "json", "--out"])
        .arg(&saved)
        .arg("--age-identity")
        .arg(&key.file)
        .arg("--path")
        .arg(&v1)
        .arg(&env.cluster));
    assert_eq!(out.code, Some(0), "{out}");
    assert!(out.stdout.contains("\"Secret\""), "{out}");
    assert_none_in(&plain, "kix plan --output json", &out.to_string());
    assert_none_in(
        &plain,
        "the saved plan",
        &std::fs::read_to_string(&saved).expect("plan"),
    );

    // The deploy: the values reach the cluster, and no output.
    let mark = audit_mark(&cp_dir);
    let out = deploy(&admin, dir, &v1, Some(&key));
    assert_eq!(out.code, Some(0), "{out}");
    assert_none_in(&plain, "kix deploy (JSON logs)", &out.to_string());
    assert_eq!(writes_to_secrets(&admin.requests_since(mark).await), 1);
    let live = live_secret(&env).await;
    assert_eq!(value_of(&live, "password"), password);
    assert_eq!(value_of(&live, "token"), token);
    let digest = live.metadata.annotations.as_ref().expect("annotations")
        [kix_api::ANNOTATION_DIGEST]
        .clone();

    // Records and Events carry no value.
    let recorded = serde_json::to_string(&records(&env.client, &env.cluster).await).expect("json");
    assert_none_in(&plain, "the Activation records", &recorded);
    let events = Api::<Event>::all(env.client.clone())
        .list(&ListParams::default())
        .await
        .expect("events");
    assert_none_in(
        &plain,
        "the Events",
        &serde_json::to_string(&events.items).expect("json"),
    );

    // The same values encrypted again, to more recipients: a no-op.
    let v1b = tree(
        &dir.join("v1b"),
        &env,
        &encrypted_secret(dir, &password, &token, &[&other, &key]),
    );
    let mark = audit_mark(&cp_dir);
    let out = deploy(&admin, dir, &v1b, Some(&key));
    assert_eq!(out.code, Some(0), "{out}");
    assert_eq!(
        writes_to_secrets(&admin.requests_since(mark).await),
        0,
        "{out}"
    );
    let live = live_secret(&env).await;
    assert_eq!(
        live.metadata.annotations.as_ref().expect("annotations")[kix_api::ANNOTATION_DIGEST],
        digest
    );

    // A changed value: its key shown as changed, redacted; one update.
    let new_password = format!("pw-two-{unique}");
    let v2 = tree(
        &dir.join("v2"),
        &env,
        &encrypted_secret(dir, &new_password, &token, &[&key]),
    );
    let mut all_plain = plain.clone();
    all_plain.extend([new_password.clone(), encode(&new_password)]);
    let out = run(kix(&admin, dir)
        .args(["plan", "--age-identity"])
        .arg(&key.file)
        .arg("--path")
        .arg(&v2)
        .arg(&env.cluster));
    assert_eq!(out.code, Some(0), "{out}");
    assert!(out.stdout.contains("data.password"), "{out}");
    assert!(out.stdout.contains("(redacted)"), "{out}");
    assert_none_in(&all_plain, "kix plan", &out.to_string());
    let mark = audit_mark(&cp_dir);
    let out = deploy(&admin, dir, &v2, Some(&key));
    assert_eq!(out.code, Some(0), "{out}");
    assert_none_in(&all_plain, "kix deploy", &out.to_string());
    assert_eq!(
        writes_to_secrets(&admin.requests_since(mark).await),
        1,
        "{out}"
    );
    assert_eq!(value_of(&live_secret(&env).await, "password"), new_password);

    // Rollback to the first release re-applies its values.
    let first = records(&env.client, &env.cluster).await[0]
        .metadata
        .name
        .clone()
        .expect("a name");
    let out = run(kix(&admin, dir)
        .args(["rollback", "--yes", "--to", &first, "--age-identity"])
        .arg(&key.file)
        .arg(&env.cluster));
    assert_eq!(out.code, Some(0), "{out}");
    assert_none_in(&all_plain, "kix rollback", &out.to_string());
    assert_eq!(value_of(&live_secret(&env).await, "password"), password);
    let recorded = serde_json::to_string(&records(&env.client, &env.cluster).await).expect("json");
    assert_none_in(&all_plain, "the Activation records", &recorded);

    let _ = Api::<ClusterRoleBinding>::all(env.client.clone())
        .delete(&admin.user, &DeleteParams::default())
        .await;
    let _ = kix_testkit::delete_namespace(&env.client, &env.namespace).await;
}

/// `kix-operator` for `cluster` as `admin`, its JSON log in `log`, with
/// `key` (or no key at all: no sops variable, no keys.txt).
fn start_operator(
    admin: &Admin,
    scratch: &Path,
    cluster: &str,
    namespace: &str,
    key: Option<&Key>,
    log: &Path,
    extra: &[&str],
) -> common::Operator {
    let http = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    let mut cmd = Command::new(common::operator_bin());
    cmd.arg("--kubeconfig")
        .arg(&admin.kubeconfig)
        .args(["--metrics-addr", &http.to_string()])
        .args([
            "--leader-lease",
            &format!("{cluster}-op"),
            "--lease-namespace",
            namespace,
        ])
        .args(["--leader-lease-seconds", "4", "--resync-interval", "10s"])
        .args(["--cluster", cluster, "--log-format", "json"])
        .env_remove("SOPS_AGE_KEY")
        .env_remove("SOPS_AGE_KEY_FILE")
        .env("HOME", scratch)
        .env("XDG_CONFIG_HOME", scratch.join("config"))
        .env("KIX_LOG", "debug,kube=warn")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(log).expect("operator log"));
    if let Some(key) = key {
        cmd.arg("--age-identity").arg(&key.file);
    }
    cmd.args(extra);
    common::Operator {
        child: cmd.spawn().expect("start kix-operator"),
        log: log.to_path_buf(),
        http,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_decrypts_with_its_key_and_refuses_without_one() {
    let env = TestEnv::new("secrets-op").await.expect("control plane");
    // kix deploy --operator needs kix's CRDs: installed as a platform does
    // (on a fresh control plane no other test has).
    common::tenancy::install_crds(&env);
    let scratch = tempfile::tempdir().expect("tempdir");
    let dir = scratch.path();
    let operator_user = Admin::new(&env, dir).await;
    let deployer_dir = dir.join("deployer");
    std::fs::create_dir_all(&deployer_dir).expect("mkdir");
    let deployer = Admin::new(&env, &deployer_dir).await;
    let cp_dir = kix_testkit::control_plane_dir();
    let key = keygen(dir, "operator.key");
    let unique = kix_testkit::unique_name("v");
    let (password, token) = (format!("op-pw-{unique}"), format!("op-tok-{unique}"));
    let plain = vec![
        password.clone(),
        token.clone(),
        encode(&password),
        encode(&token),
    ];
    let deploy_operator = |tree: &Path| {
        let path = common::add_to_store(tree);
        run(kix(&deployer, dir)
            .args(["deploy", "--operator", "--yes", "--age-identity"])
            .arg(&key.file)
            .args(["--path", &path, &env.cluster]))
    };

    // No key: the record fails naming the file; no object is written.
    let log = dir.join("operator-nokey.log");
    let operator = start_operator(
        &operator_user,
        dir,
        &env.cluster,
        &env.namespace,
        None,
        &log,
        &[],
    );
    let mark = audit_mark(&cp_dir);
    let v1 = tree(
        &dir.join("v1"),
        &env,
        &encrypted_secret(dir, &password, &token, &[&key]),
    );
    let out = deploy_operator(&v1);
    assert_eq!(out.code, Some(1), "the operator fails the record: {out}");
    assert_none_in(&plain, "kix deploy --operator", &out.to_string());
    let failed = common::poll(
        "the operator to fail the record",
        Duration::from_secs(60),
        Duration::from_millis(300),
        || async {
            let recs = records(&env.client, &env.cluster).await;
            let last = recs.last()?;
            (last.phase() == Some(kix_api::Phase::Failed))
                .then(|| serde_json::to_string(last).ok())?
        },
    )
    .await;
    assert!(
        failed.contains("packages/app/secrets/000-db.sops.yaml"),
        "{failed}"
    );
    assert!(failed.contains("no age identity"), "{failed}");
    let object_writes: Vec<_> = operator_user
        .requests_since(mark)
        .await
        .into_iter()
        .filter(|r| {
            r.is_write() && !matches!(r.resource.as_str(), "activations" | "events" | "leases")
        })
        .collect();
    assert!(
        object_writes.is_empty(),
        "the operator wrote without a key: {object_writes:?}"
    );
    drop(operator);

    // With its key: applied, and no value in its log, the records, Events.
    let log = dir.join("operator.log");
    let operator = start_operator(
        &operator_user,
        dir,
        &env.cluster,
        &env.namespace,
        Some(&key),
        &log,
        &[],
    );
    let again = tree(
        &dir.join("v1b"),
        &env,
        &encrypted_secret(dir, &password, &token, &[&key]),
    );
    let out = deploy_operator(&again);
    assert_eq!(out.code, Some(0), "{out}");
    assert_none_in(&plain, "kix deploy --operator", &out.to_string());
    common::poll(
        "the operator to apply the Secret",
        Duration::from_secs(90),
        Duration::from_millis(300),
        || async {
            let recs = records(&env.client, &env.cluster).await;
            let active = recs.last()?.phase() == Some(kix_api::Phase::Active);
            let secret = Api::<Secret>::namespaced(env.client.clone(), &env.namespace)
                .get_opt("db")
                .await
                .ok()??;
            (active && value_of(&secret, "password") == password).then_some(())
        },
    )
    .await;
    assert_none_in(&plain, "the operator's JSON log", &operator.log());
    assert!(
        operator
            .log()
            .contains("age identities for encrypted Secrets")
    );
    let recorded = serde_json::to_string(&records(&env.client, &env.cluster).await).expect("json");
    assert_none_in(&plain, "the Activation records", &recorded);
    let events = Api::<Event>::all(env.client.clone())
        .list(&ListParams::default())
        .await
        .expect("events");
    assert_none_in(
        &plain,
        "the Events",
        &serde_json::to_string(&events.items).expect("json"),
    );
    drop(operator);

    // A wrong key: the record fails naming the file's recipients; no object
    // is written.
    let wrong = keygen(dir, "wrong.key");
    let log = dir.join("operator-wrong.log");
    let operator = start_operator(
        &operator_user,
        dir,
        &env.cluster,
        &env.namespace,
        Some(&wrong),
        &log,
        &[],
    );
    let mark = audit_mark(&cp_dir);
    let fourth = tree(
        &dir.join("v1d"),
        &env,
        &encrypted_secret(dir, &password, &token, &[&key]),
    );
    let out = deploy_operator(&fourth);
    assert_eq!(out.code, Some(1), "the operator fails the record: {out}");
    let recs = records(&env.client, &env.cluster).await;
    let last = serde_json::to_string(recs.last().expect("a record")).expect("json");
    assert!(last.contains("among the file's recipients"), "{last}");
    assert!(last.contains(&key.recipient), "{last}");
    let object_writes: Vec<_> = operator_user
        .requests_since(mark)
        .await
        .into_iter()
        .filter(|r| {
            r.is_write() && !matches!(r.resource.as_str(), "activations" | "events" | "leases")
        })
        .collect();
    assert!(
        object_writes.is_empty(),
        "the operator wrote with a wrong key: {object_writes:?}"
    );
    assert_none_in(&plain, "the operator's JSON log", &operator.log());
    drop(operator);

    // The key in a Secret of the operator's namespace instead of a file.
    let key_secret: Secret = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "kix-age"},
        "stringData": {"keys.txt": std::fs::read_to_string(&key.file).expect("key")},
    }))
    .expect("secret");
    Api::<Secret>::namespaced(env.client.clone(), &env.namespace)
        .create(&PostParams::default(), &key_secret)
        .await
        .expect("create the key's Secret");
    let log = dir.join("operator-secret.log");
    let operator = start_operator(
        &operator_user,
        dir,
        &env.cluster,
        &env.namespace,
        None,
        &log,
        &["--age-identity-secret", "kix-age"],
    );
    let before = records(&env.client, &env.cluster).await.len();
    let third = tree(
        &dir.join("v1c"),
        &env,
        &encrypted_secret(dir, &password, &token, &[&key]),
    );
    let out = deploy_operator(&third);
    assert_eq!(out.code, Some(0), "{out}");
    let recs = records(&env.client, &env.cluster).await;
    assert_eq!(recs.len(), before + 1);
    assert_eq!(
        recs.last().and_then(|r| r.phase()),
        Some(kix_api::Phase::Active)
    );
    assert_none_in(&plain, "the operator's JSON log", &operator.log());
    drop(operator);

    for user in [&operator_user.user, &deployer.user] {
        let _ = Api::<ClusterRoleBinding>::all(env.client.clone())
            .delete(user, &DeleteParams::default())
            .await;
    }
    let _ = kix_testkit::delete_namespace(&env.client, &env.namespace).await;
}
